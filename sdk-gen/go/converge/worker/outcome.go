package worker

import "time"

// Outcome is the result of a successful handler run. Only the parts the
// reaction's manifest entry declares in emits are applied by the broker. The
// zero value (or a nil *Outcome) is a success that changes nothing.
//
// Documents (Status, OperationOutput, ChildSpec.Spec, ProviderConfigSpec.Spec,
// Event.Detail) are any value encoding/json turns into a JSON object: a
// map[string]any or a struct with json tags. Anything else (a number, an
// array, a value that does not marshal) fails the task terminally with reason
// InvalidOutcome, since running the same code again would produce the same
// value.
type Outcome struct {
	// Status is the new status document; nil = unchanged.
	Status any
	// Conditions to record; each type is stored on change only.
	Conditions []Condition
	// Children, Edges and Configs are the desired composition (compose). For
	// a compose task they are always sent and replace the previous
	// composition, so empty lists prune everything.
	Children []ChildSpec
	Edges    []DepEdge
	Configs  []ProviderConfigSpec
	// OperationOutput is the result document of an operation (operate).
	OperationOutput any
	// Healthy is the explicit health; nil = taken from a Ready condition in
	// Conditions if there is one, else left unchanged.
	Healthy *bool
	// RequeueAfter > 0 means "not done yet": the declared parts are applied
	// but the task runs again after this delay. Not a failure. The server may
	// clamp it.
	RequeueAfter time.Duration
	// Events to record on the resource's event timelines (at most 16). Unlike
	// the other parts they are recorded whatever the reaction declares in
	// emits (every stage but react). To report events with a failure, use
	// WithEvents on the error instead.
	Events []Event
}

// AddEvents appends events to o.Events and returns o; on a nil receiver it
// returns a new Outcome holding them, so a handler can write
//
//	return out.AddEvents(worker.NormalEvent("BucketCreated", "created "+name)), nil
func (o *Outcome) AddEvents(events ...Event) *Outcome {
	if o == nil {
		o = &Outcome{}
	}
	o.Events = append(o.Events, events...)
	return o
}

// Bool returns a pointer to b, for Outcome.Healthy.
func Bool(b bool) *bool { return &b }
