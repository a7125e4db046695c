package worker

import (
	"errors"
	"fmt"
)

// DeadlineExceededReason is the reason of the failure a task gets when its
// deadline passes before the handler returns. The server reports an operation
// whose last attempt failed with it as DEADLINE_EXCEEDED.
const DeadlineExceededReason = "DeadlineExceeded"

// UnknownReactionReason is the reason of the failure a task gets when its
// reaction has no handler.
const UnknownReactionReason = "UnknownReaction"

// ErrUnknownReaction is matched (errors.Is) by the error a handler returns for
// a reaction name it does not handle. Such a failure is terminal: running the
// same code again cannot help.
var ErrUnknownReaction = errors.New("unknown reaction")

// ErrDrainIncomplete is matched (errors.Is) by the *DrainError Run returns
// when the drain timeout passed with work left.
var ErrDrainIncomplete = errors.New("drain incomplete")

// Error is a handler failure with an explicit class and reason. A handler may
// return any error: one that is not (and does not wrap) an *Error is a
// transient failure without a reason, reported with its Error() text.
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

// Terminal marks err as a terminal failure (keeping a reason it already
// carries). Terminal(nil) is nil.
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

// WithReason attaches a reason to err, keeping its class. WithReason(nil, r)
// is nil.
func WithReason(err error, reason string) error {
	if err == nil {
		return nil
	}
	return &Error{Err: err, Terminal: IsTerminal(err), Reason: reason}
}

// UnknownReaction is the error a handler returns for a reaction it does not
// handle: terminal, reason UnknownReaction, matching ErrUnknownReaction.
func UnknownReaction(reaction string, kind KindVersion) error {
	return &Error{
		Err:      fmt.Errorf("%w %q for kind %s", ErrUnknownReaction, reaction, kind),
		Terminal: true,
		Reason:   UnknownReactionReason,
	}
}

// IsTerminal reports whether err is classified as terminal: an *Error with
// Terminal set in its chain, or ErrUnknownReaction.
func IsTerminal(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Terminal
	}
	return errors.Is(err, ErrUnknownReaction)
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

// DrainError is returned by Run when the drain timeout passed before every
// in-flight handler finished and every result was delivered. The broker
// re-runs those tasks once their leases are released or go stale.
type DrainError struct {
	// Running is the number of handlers still running (they were cancelled).
	Running int
	// Undelivered is the number of results computed but never sent.
	Undelivered int
}

func (e *DrainError) Error() string {
	return fmt.Sprintf("drain timed out with %d handlers still running and %d results undelivered", e.Running, e.Undelivered)
}

// Is makes errors.Is(err, ErrDrainIncomplete) match.
func (e *DrainError) Is(target error) bool { return target == ErrDrainIncomplete }
