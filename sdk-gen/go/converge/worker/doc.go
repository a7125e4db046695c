// Package worker is the runtime for converge worker processes: it serves
// (kind, kind_version) pairs for a converge broker over
// converge.worker.v1.WorkerService.
//
// Register a Provider per pair and run the worker until a signal:
//
//	leaf := worker.Reactions{
//		"work": func(ctx context.Context, req *worker.ReactionRequest) (*worker.Outcome, error) {
//			return &worker.Outcome{Status: map[string]any{"observedGeneration": req.Generation}}, nil
//		},
//	}
//	w, err := worker.New("http://127.0.0.1:50051",
//		worker.WithHandler(worker.KindVersion{Kind: "noop", Version: 1}, leaf))
//	if err != nil { ... }
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//	defer stop()
//	err = w.Run(ctx) // cancelling ctx starts the graceful drain
//
// What the runtime does:
//   - primes the default provider configs with GetProviderConfig (retrying
//     with backoff), refreshes them periodically and on every (re)connect,
//     applies ProviderConfigUpdate pushes, and calls Provider.OnConfig on
//     every change;
//   - opens WorkStream with Subscribe first (served pairs, max_inflight = max
//     parallel, and the tasks it still runs or holds results for), followed
//     by Interest{ready: false} for every unready provider;
//   - keeps every result it sent until the broker acknowledges it
//     (ResultAck: written durably or found stale), and on every new stream
//     lists the unacknowledged ones in Subscribe.resumed and sends them again
//     first, before anything else (the broker's fence makes a second copy
//     harmless);
//   - runs at most max-parallel handlers at once, each with a context bounded
//     by its task deadline (expiry = a transient failure "deadline exceeded"
//     with reason DeadlineExceeded), with panics turned into transient
//     failures; handlers belong to the process, so a stream drop does not
//     cancel them, and their results are buffered (bounded; the oldest is
//     discarded on overflow) for the next stream;
//   - answers each task with one StageComplete echoing its fence;
//   - sends a WorkHeartbeat every interval listing the leases of accepted
//     tasks whose handlers have not finished (including any waiting for a
//     slot: they are the worker's responsibility until answered) and of
//     results not yet acknowledged;
//   - polls Provider.Ready and sends Interest on every change; tasks for an
//     unknown or unready pair fail transiently. A provider with
//     RequiresDefaultConfig counts as unready until its kind's default config
//     has arrived (readiness is re-announced the moment a config change
//     lands, not at the next poll);
//   - hands each task the cached default config and the resource's override;
//     ReactionRequest.EffectiveConfig merges them (the override wins per key) and
//     ReactionRequest.EffectiveBundle picks the bundle;
//   - reconnects with exponential backoff and jitter, resetting the backoff
//     only after a healthy session (open for the healthy threshold, 10 s by
//     default, or one that received a task);
//   - on shutdown (the Run context cancelled) announces every pair unready,
//     fails tasks that still arrive (transiently), waits up to the drain
//     timeout for in-flight handlers and for the broker to acknowledge every
//     result, sends their results (reconnecting if needed), closes the stream
//     and returns; handlers still running then are cancelled and Run returns
//     a *DrainIncompleteError.
//
// Errors: a handler's error is a transient failure unless it is marked with
// Terminal (or is an *Error with Terminal set); WithReason, Terminalf and
// Transientf attach an UpperCamelCase reason. Reactions dispatches on the
// reaction name and fails unknown names transiently (a newer worker may know
// them; the kind's max_transient_attempts bounds the retries) with an error
// matching ErrUnknownReaction, reason UnknownReaction.
//
// Observations: a handler records events on the resource's timeline with
// Outcome.Events (or Outcome.AddEvents) on success and WithEvents on a
// failure, e.g.
//
//	return nil, worker.WithEvents(err, worker.WarningEvent("QuotaLow", "3 buckets left"))
//
// and reports a liveness condition, one that reads Unknown with reason
// ReportExpired unless renewed in time, by setting Condition.Liveness.
//
// Go cannot stop a goroutine from outside: a handler that ignores its
// context's cancellation is reported failed shortly after the deadline, but
// keeps its concurrency slot until it really returns.
package worker
