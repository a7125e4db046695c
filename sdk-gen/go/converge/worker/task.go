package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	workerv1 "converge.dev/sdk/go/gen/converge/worker/v1"
)

var (
	// errTaskDeadline is the cancellation cause of a handler whose task
	// deadline passed.
	errTaskDeadline = errors.New("deadline exceeded")
	// errDrainTimeout is the cancellation cause of handlers still running
	// when a shutdown's drain timeout passed.
	errDrainTimeout = errors.New("the worker's drain timeout passed")
)

// handlerGrace is how long the runtime waits for a handler to return after
// cancelling its context before it reports the task failed without it. A
// handler that watches its context returns well within it, so its own last
// words (logs, cleanup) come before the result; one that ignores its context
// cannot hold the result back longer than this.
const handlerGrace = 500 * time.Millisecond

// accept takes a task off the stream. Tasks that cannot run (draining,
// unknown pair, provider not ready, undecodable) fail transiently at once, so
// the broker retries them elsewhere or later; never terminally, since another
// worker or a later moment may succeed. The rest run on goroutines of the Run,
// not of the stream, so a stream drop does not stop them.
func (r *run) accept(t *workerv1.StageTask, draining bool) {
	sh := r.sh
	f := fenceOf(t)
	kind := KindVersion{Kind: t.GetKind(), Version: t.GetKindVersion()}
	reject := func(format string, args ...any) {
		err := fmt.Errorf(format, args...)
		sh.log.Debug("task rejected", "lease", f.leaseToken, "kind", kind.String(), "error", err)
		sh.finish(f.failure(err))
	}
	if draining {
		reject("worker is shutting down")
		return
	}
	p := sh.providers[kind]
	if p == nil {
		reject("this worker has no provider for kind %s", kind)
		return
	}
	if !sh.isReady(kind) {
		reject("provider for kind %s is not ready", kind)
		return
	}
	// The budget counts from arrival, including any wait for a free slot.
	var deadline time.Time
	if d := t.GetTaskDeadline(); d != nil {
		deadline = time.Now().Add(durationFromProto(d))
	}
	if !sh.begin(f.leaseToken, f.claimEpoch) {
		sh.log.Warn("duplicate task delivery ignored", "lease", f.leaseToken)
		return
	}
	req, err := requestFromTask(t, sh.defaultConfig(kind).clone(), deadline)
	if err != nil {
		sh.finish(f.failure(fmt.Errorf("cannot decode task: %w", err)))
		return
	}
	ctx, span := handlerSpan(r.handlerCtx, t.GetTraceContext(), kind, req.Reaction, f.leaseToken)
	r.tasks.Add(1)
	go func() {
		defer r.tasks.Done()
		o, err := r.execute(ctx, p, req)
		if err != nil {
			sh.log.Debug("task failed", "lease", f.leaseToken, "kind", kind.String(),
				"reaction", req.Reaction, "terminal", IsTerminal(err), "error", err)
		}
		endHandlerSpan(span, err)
		sh.finish(f.complete(o, err))
	}()
}

type handlerResult struct {
	outcome *Outcome
	err     error
}

// execute runs the handler in a slot, bounded by the task deadline, with a
// panic turned into a transient failure. The handler's context derives from
// parent: the run's handler context, carrying the handler span when the task
// was traced.
func (r *run) execute(parent context.Context, p *Provider, req *ReactionRequest) (*Outcome, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	if !req.Deadline.IsZero() {
		var cancelDeadline context.CancelFunc
		ctx, cancelDeadline = context.WithDeadlineCause(ctx, req.Deadline, errTaskDeadline)
		defer cancelDeadline()
	}
	select {
	case r.sh.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, cutOff(ctx)
	}
	done := make(chan handlerResult, 1)
	r.handlers.Add(1)
	go func() {
		defer r.handlers.Done()
		// The slot is released only when the handler has really returned,
		// so handlers that ignore cancellation still count against the
		// bound.
		defer func() { <-r.sh.slots }()
		defer func() {
			if v := recover(); v != nil {
				r.sh.log.Error("handler panicked", "kind", req.Kind.String(), "reaction", req.Reaction,
					"resource", req.Resource.Name, "panic", v, "stack", string(debug.Stack()))
				done <- handlerResult{err: fmt.Errorf("handler panicked: %v", v)}
			}
		}()
		o, err := p.Handler.Handle(ctx, req)
		done <- handlerResult{o, err}
	}()
	select {
	case res := <-done:
		return classify(ctx, res)
	case <-ctx.Done():
	}
	grace := time.NewTimer(handlerGrace)
	defer grace.Stop()
	select {
	case res := <-done:
		return classify(ctx, res)
	case <-grace.C:
		r.sh.log.Warn("handler did not return after its context was cancelled; reporting the task failed",
			"kind", req.Kind.String(), "reaction", req.Reaction, "resource", req.Resource.Name)
		return nil, cutOff(ctx)
	}
}

// classify turns a handler's own report of its cancellation (ctx.Err(), or an
// error wrapping it) into the runtime's cut-off failure, so a cancelled
// handler reads the same whether it returned or not.
func classify(ctx context.Context, res handlerResult) (*Outcome, error) {
	if res.err != nil && ctx.Err() != nil &&
		(errors.Is(res.err, context.DeadlineExceeded) || errors.Is(res.err, context.Canceled)) {
		return nil, cutOff(ctx)
	}
	return res.outcome, res.err
}

// cutOff is the failure of a task whose context ended.
func cutOff(ctx context.Context) error {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errTaskDeadline):
		return &Error{Err: errTaskDeadline, Reason: DeadlineExceededReason}
	case cause != nil:
		return &Error{Err: fmt.Errorf("cancelled: %w", cause)}
	default:
		return &Error{Err: errors.New("cancelled")}
	}
}
