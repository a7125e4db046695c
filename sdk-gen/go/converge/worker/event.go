package worker

import "strconv"

// EventType is the severity of an Event.
type EventType int

// The event types. The zero value is EventNormal.
const (
	// EventNormal: routine, expected progress (e.g. "BucketCreated").
	EventNormal EventType = iota
	// EventWarning: something needing attention (e.g.
	// "QuotaNearlyExhausted").
	EventWarning
)

// String returns "Normal" or "Warning".
func (t EventType) String() string {
	switch t {
	case EventNormal:
		return "Normal"
	case EventWarning:
		return "Warning"
	default:
		return "EventType(" + strconv.Itoa(int(t)) + ")"
	}
}

// Event is an observation a handler records on the event timeline of the
// task's resource, next to the server's own events. Consecutive events of one
// category with the same type and reason are aggregated into one run (count,
// first and last time).
//
// Events travel with the task's result: with a success (Outcome.Events) and
// with a failure (WithEvents), for every stage except react. They are recorded
// whether or not the reaction declares them in emits. The server refuses an
// invalid event (a bad category or reason, a detail over 8 KiB, more than 16
// events) by failing the task with reason EventInvalid, and then records none
// of the outcome's events.
type Event struct {
	// Category is the timeline: lower case letters, digits and '-', starting
	// with a letter, at most 63 characters; empty = "worker". The server's
	// own timelines ("lifecycle", "reconcile", "operation", "reactor") are
	// refused.
	Category string
	// Type is the severity; the zero value is EventNormal. A value other
	// than EventNormal and EventWarning fails a success with reason
	// InvalidOutcome and is sent as normal with a failure.
	Type EventType
	// Reason is the UpperCamelCase machine-readable cause, at most 128
	// characters, e.g. "BucketCreated". Required.
	Reason string
	// Message is a human-readable message; the server cuts it at 1024
	// characters.
	Message string
	// Detail is optional structured detail: any value encoding/json turns
	// into a JSON object (a map or a struct), at most 8 KiB as JSON; nil =
	// none. With a success, a detail that is not an object fails the task
	// terminally with reason InvalidOutcome; with a failure it is dropped and
	// the event still sent.
	Detail any
}

// NormalEvent is a routine event with the given reason and message on the
// "worker" timeline.
func NormalEvent(reason, message string) Event {
	return Event{Type: EventNormal, Reason: reason, Message: message}
}

// WarningEvent is an event needing attention with the given reason and
// message on the "worker" timeline.
func WarningEvent(reason, message string) Event {
	return Event{Type: EventWarning, Reason: reason, Message: message}
}
