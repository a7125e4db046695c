package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"converge.dev/sdk/go/converge/worker"
)

// A worker serving one kind with two reactions, drained on SIGTERM.
// (Compiled, not run: it needs a server.)
func Example() {
	type spec struct {
		Replicas int `json:"replicas"`
	}
	reactions := worker.Reactions{
		"work": func(ctx context.Context, req *worker.ReactionRequest) (*worker.Outcome, error) {
			var s spec
			if err := req.Resource.DecodeSpec(&s); err != nil {
				return nil, worker.Terminal(err) // retrying cannot fix a bad spec
			}
			if s.Replicas > 10 {
				return nil, worker.Terminalf("TooManyReplicas", "at most 10 replicas, got %d", s.Replicas)
			}
			// ctx carries the task deadline: pass it to everything that waits.
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &worker.Outcome{
				Status:     map[string]any{"replicas": s.Replicas, "config": req.EffectiveConfig()},
				Conditions: []worker.Condition{{Type: "Ready", Status: worker.ConditionTrue, Reason: "Deployed"}},
			}, nil
		},
		"teardown": func(context.Context, *worker.ReactionRequest) (*worker.Outcome, error) {
			return &worker.Outcome{}, nil // success clears the finalizer
		},
	}
	w, err := worker.New("http://127.0.0.1:50051",
		worker.WithProvider(worker.Provider{
			Kind:    worker.KindVersion{Kind: "deployment", Version: 1},
			Handler: reactions,
		}),
		worker.WithMaxParallel(8),
		worker.WithDrainTimeout(20*time.Second),
		worker.WithLogger(slog.New(slog.NewJSONHandler(os.Stderr, nil))),
	)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := w.Run(ctx); errors.Is(err, worker.ErrDrainIncomplete) {
		log.Printf("drain incomplete: %v", err)
		os.Exit(1)
	}
}

// A handler that records what it did on the resource's event timeline, with
// a success and with a failure, and keeps a liveness condition fresh.
func ExampleWithEvents() {
	createBuckets := func(want int) (created int, err error) {
		if want > 2 {
			return 2, errors.New("quota exhausted")
		}
		return want, nil
	}
	work := func(_ context.Context, req *worker.ReactionRequest) (*worker.Outcome, error) {
		want := int(req.Resource.Spec["buckets"].(float64))
		created, err := createBuckets(want)
		progress := worker.Event{
			Reason:  "BucketsCreated",
			Message: "created the buckets it could",
			Detail:  map[string]any{"created": created, "wanted": want},
		}
		if err != nil {
			// Transient (retried); the event is recorded with the failure.
			return nil, worker.WithEvents(err, progress, worker.WarningEvent("QuotaExhausted", err.Error()))
		}
		out := &worker.Outcome{Conditions: []worker.Condition{{
			Type: "Reachable", Status: worker.ConditionTrue,
			Liveness: 2 * time.Minute, // reads Unknown unless reported again in time
		}}}
		return out.AddEvents(progress), nil
	}

	for _, buckets := range []float64{2, 3} {
		req := &worker.ReactionRequest{Reaction: "work", Resource: worker.Resource{Spec: map[string]any{"buckets": buckets}}}
		out, err := work(context.Background(), req)
		var failure *worker.Error
		switch {
		case errors.As(err, &failure):
			fmt.Printf("failed (terminal %v): %v, %d events\n", worker.IsTerminal(err), err, len(failure.Events))
		case err == nil:
			fmt.Printf("succeeded: %d event, liveness %v\n", len(out.Events), out.Conditions[0].Liveness)
		}
	}
	// Output:
	// succeeded: 1 event, liveness 2m0s
	// failed (terminal false): quota exhausted, 2 events
}
