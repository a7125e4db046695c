package worker

import (
	"errors"
	"fmt"
	"slices"
)

// DeadlineExceededReason is the reason of the failure a task gets when its
// deadline passes before the handler returns. The server reports an operation
// whose last attempt failed with it as DEADLINE_EXCEEDED.
const DeadlineExceededReason = "DeadlineExceeded"

// UnknownReactionReason is the reason of the failure a task gets when its
// reaction has no handler.
const UnknownReactionReason = "UnknownReaction"

// ErrUnknownReaction is matched (errors.Is) by the error a handler returns for
// a reaction name it does not handle (see UnknownReaction). Such a failure is
// transient: a newer worker for the same pair may know the reaction, and the
// kind's max_transient_attempts bounds the retries.
var ErrUnknownReaction = errors.New("unknown reaction")

// ErrDrainIncomplete is matched (errors.Is) by the *DrainIncompleteError Run returns
// when the drain timeout passed with work left.
var ErrDrainIncomplete = errors.New("drain incomplete")

// Error is a handler failure with an explicit class, reason and events. A
// handler may return any error: one that is not (and does not wrap) an *Error
// is a transient failure without a reason or events, reported with its Error()
// text.
//
// Transient failures are retried by the broker with backoff up to the kind's
// max_transient_attempts; terminal failures mark the generation failed at
// once.
type Error struct {
	// Err is the underlying error; its text is the failure message.
	Err error
	// Terminal: retrying cannot help.
	Terminal bool
	// Reason is an optional UpperCamelCase reason recorded on the resulting
	// condition and event; empty = a server default.
	Reason string
	// Events describe what the handler did before it failed; they are
	// recorded with the failure. An event whose Detail is not a JSON object
	// is sent without its detail.
	Events []Event
}

// Error returns the message of the underlying error.
func (e *Error) Error() string {
	if e.Err == nil {
		return "task failed"
	}
	return e.Err.Error()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Terminal marks err as a terminal failure (keeping the reason and events it
// already carries). Terminal(nil) is nil.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &Error{Err: err, Terminal: true, Reason: reasonOf(err)}
}

// Terminalf is Terminal(fmt.Errorf(format, args...)) with the given reason.
func Terminalf(reason, format string, args ...any) error {
	return &Error{Err: fmt.Errorf(format, args...), Terminal: true, Reason: reason}
}

// Transientf is a transient failure with the given reason, for when the
// reason matters; any plain error is already transient.
func Transientf(reason, format string, args ...any) error {
	return &Error{Err: fmt.Errorf(format, args...), Reason: reason}
}

// WithReason attaches a reason to err, keeping its class and events.
// WithReason(nil, r) is nil.
func WithReason(err error, reason string) error {
	if err == nil {
		return nil
	}
	return &Error{Err: err, Terminal: IsTerminal(err), Reason: reason}
}

// WithEvents attaches events to err, keeping its class, reason and the events
// it already carries (those come first). They are recorded with the failure.
// WithEvents(nil, ...) is nil; without events it returns err unchanged.
func WithEvents(err error, events ...Event) error {
	if err == nil || len(events) == 0 {
		return err
	}
	return &Error{
		Err:      err,
		Terminal: IsTerminal(err),
		Reason:   reasonOf(err),
		Events:   append(slices.Clone(eventsOf(err)), events...),
	}
}

// UnknownReaction is the error a handler returns for a reaction it does not
// handle: transient, reason UnknownReaction, matching ErrUnknownReaction. A
// provider that wants such tasks to fail at once can return
// Terminal(UnknownReaction(...)), which keeps the reason.
func UnknownReaction(reaction string, kind KindVersion) error {
	return &Error{
		Err:    fmt.Errorf("%w %q for kind %s", ErrUnknownReaction, reaction, kind),
		Reason: UnknownReactionReason,
	}
}

// IsTerminal reports whether err is classified as terminal: the first *Error
// in its chain has Terminal set. Any other error is transient.
func IsTerminal(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Terminal
}

// reasonOf is the reason carried by the first *Error in err's chain.
func reasonOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	if errors.Is(err, ErrUnknownReaction) {
		return UnknownReactionReason
	}
	return ""
}

// eventsOf is the events of the first *Error in err's chain that carries
// any, so wrapping with Terminal or WithReason keeps them.
func eventsOf(err error) []Event {
	var e *Error
	for errors.As(err, &e) {
		if len(e.Events) > 0 {
			return e.Events
		}
		err = e.Err
	}
	return nil
}

// DrainIncompleteError is returned by Run when the drain timeout passed before every
// in-flight handler finished and the broker acknowledged every result. The broker
// re-runs those tasks once their leases are released or go stale.
type DrainIncompleteError struct {
	// Running is the number of handlers still running (they were cancelled).
	Running int
	// Undelivered is the number of results computed but not acknowledged by
	// the broker (never sent, or sent without an acknowledgement).
	Undelivered int
}

func (e *DrainIncompleteError) Error() string {
	return fmt.Sprintf("drain timed out with %d handlers still running and %d results undelivered", e.Running, e.Undelivered)
}

// Is makes errors.Is(err, ErrDrainIncomplete) match.
func (e *DrainIncompleteError) Is(target error) bool { return target == ErrDrainIncomplete }

// DrainError is the former name of DrainIncompleteError.
//
// Deprecated: use DrainIncompleteError, the name every converge SDK uses
// (0.1 called it DrainError).
type DrainError = DrainIncompleteError
