package worker

import "context"

// Handler runs the tasks of one (kind, kind_version). The runtime calls it
// concurrently (up to the worker's max parallel), so implementations must be
// safe for concurrent use.
//
// ctx carries the task deadline (ReactionRequest.Deadline) and is cancelled when the
// deadline passes or when a shutdown's drain timeout runs out; a handler that
// waits must watch ctx.Done(). It is not cancelled when the stream to the
// broker drops: the result is buffered and delivered on the next stream.
//
// A returned error fails the task: transient unless marked with Terminal (or
// an *Error with Terminal set); events attached with WithEvents are recorded
// with the failure. A panic is recovered and fails only its task,
// transiently.
type Handler interface {
	Handle(ctx context.Context, req *ReactionRequest) (*Outcome, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req *ReactionRequest) (*Outcome, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, req *ReactionRequest) (*Outcome, error) {
	return f(ctx, req)
}

// Reactions is a Handler that dispatches on ReactionRequest.Reaction. A reaction with
// no entry fails transiently with UnknownReaction (matching
// ErrUnknownReaction, reason UnknownReaction): a newer worker for the pair may
// know it, and the kind's max_transient_attempts bounds the retries. To fail
// such tasks at once, wrap Reactions in a Handler that returns
// Terminal(UnknownReaction(...)) for them.
type Reactions map[string]HandlerFunc

// Handle runs the handler registered for req.Reaction.
func (r Reactions) Handle(ctx context.Context, req *ReactionRequest) (*Outcome, error) {
	h, ok := r[req.Reaction]
	if !ok || h == nil {
		return nil, UnknownReaction(req.Reaction, req.Kind)
	}
	return h(ctx, req)
}

// Provider serves exactly one (kind, kind_version) on a worker.
type Provider struct {
	// Kind is the pair served. Required.
	Kind KindVersion
	// Handler runs its tasks. Required.
	Handler Handler
	// Ready reports whether the provider can take tasks now; nil = always.
	// It is polled, so keep it cheap and non-blocking. While it is false the
	// broker sends no new tasks for the pair, and a task that still arrives
	// fails transiently. A panic counts as not ready.
	Ready func() bool
	// RequiresDefaultConfig makes the pair unready until the kind's default
	// provider config has arrived (and again if it is deleted): the broker
	// sends no tasks meanwhile and resumes the moment it arrives.
	RequiresDefaultConfig bool
	// OnConfig, if set, is called once after the kind's default config is
	// first fetched and then on every change (refresh or push); nil = the
	// kind has no default config (or it was deleted). Calls never overlap.
	// Keep it quick.
	OnConfig func(config *ProviderConfig)
}
