package worker

// Conversions between the generated protobuf types and the domain types.
// Nothing else in the package touches structpb directly.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	workerv1 "converge.dev/sdk/go/gen/converge/worker/v1"
)

// invalidOutcomeReason is the reason of the terminal failure an outcome that
// cannot be encoded gets.
const invalidOutcomeReason = "InvalidOutcome"

// errNoResource: a task without a resource cannot be handed to a handler.
var errNoResource = errors.New("task has no resource")

func structToMap(s *structpb.Struct) map[string]any {
	if s == nil {
		return nil
	}
	return s.AsMap()
}

// encodeObject turns a document (a map, a struct, anything encoding/json
// marshals to an object) into a Struct. nil, a nil pointer and JSON null are
// absent (nil, no error); field names the value in the error.
func encodeObject(v any, field string) (*structpb.Struct, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case *structpb.Struct:
		return v, nil
	case map[string]any:
		if v == nil {
			return nil, nil
		}
		// The common case, without a JSON round trip; values NewStruct does
		// not know (e.g. []string) fall through to encoding/json.
		if s, err := structpb.NewStruct(v); err == nil {
			return s, nil
		}
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%s cannot be encoded as JSON: %w", field, err)
	}
	raw = bytes.TrimSpace(raw)
	if bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, fmt.Errorf("%s must be a JSON object, got %s", field, jsonType(raw))
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(raw, s); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return s, nil
}

func jsonType(raw []byte) string {
	switch raw[0] {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	default:
		return "a number"
	}
}

func timeFromProto(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

// durationFromProto converts a protobuf duration; negative values clamp to 0.
func durationFromProto(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return max(d.AsDuration(), 0)
}

func refFromProto(r *workerv1.ResourceRef) *ResourceRef {
	if r == nil {
		return nil
	}
	return &ResourceRef{Kind: r.GetKind(), Name: r.GetName()}
}

func refToProto(r ResourceRef) *workerv1.ResourceRef {
	return &workerv1.ResourceRef{Kind: r.Kind, Name: r.Name}
}

func resourceFromProto(r *workerv1.Resource) Resource {
	spec := structToMap(r.GetSpec())
	if spec == nil {
		spec = map[string]any{}
	}
	return Resource{
		UID:                r.GetUid(),
		Kind:               r.GetKind(),
		KindVersion:        r.GetKindVersion(),
		Name:               r.GetName(),
		Labels:             r.GetLabels(),
		Spec:               spec,
		Status:             structToMap(r.GetStatus()),
		Generation:         r.GetGeneration(),
		ObservedGeneration: r.GetObservedGeneration(),
		Ready:              r.GetReady(),
		Healthy:            r.GetHealthy(),
		Owner:              refFromProto(r.GetOwner()),
		Root:               refFromProto(r.GetRoot()),
		Finalizers:         r.GetFinalizers(),
		DeleteTime:         timeFromProto(r.GetDeleteTime()),
		OrphanExpireTime:   timeFromProto(r.GetOrphanExpireTime()),
		Quarantined:        r.GetQuarantined(),
	}
}

func resourcesFromProto(rs []*workerv1.Resource) []Resource {
	out := make([]Resource, len(rs))
	for i, r := range rs {
		out[i] = resourceFromProto(r)
	}
	return out
}

func childFromProto(c *workerv1.ChildSpec) ChildSpec {
	spec := structToMap(c.GetSpec())
	if spec == nil {
		spec = map[string]any{}
	}
	return ChildSpec{
		Kind:           c.GetKind(),
		KindVersion:    c.GetKindVersion(),
		Name:           c.GetName(),
		Labels:         c.GetLabels(),
		Spec:           spec,
		ProviderConfig: c.GetProviderConfig(),
	}
}

func childToProto(c ChildSpec, i int) (*workerv1.ChildSpec, error) {
	spec, err := encodeObject(c.Spec, fmt.Sprintf("children[%d].spec", i))
	if err != nil {
		return nil, err
	}
	if spec == nil {
		spec = &structpb.Struct{}
	}
	return &workerv1.ChildSpec{
		Kind:           c.Kind,
		KindVersion:    c.KindVersion,
		Name:           c.Name,
		Labels:         c.Labels,
		Spec:           spec,
		ProviderConfig: c.ProviderConfig,
	}, nil
}

func edgeFromProto(e *workerv1.DepEdge) DepEdge {
	edge := DepEdge{}
	if d := refFromProto(e.GetDependent()); d != nil {
		edge.Dependent = *d
	}
	if d := refFromProto(e.GetDependency()); d != nil {
		edge.Dependency = *d
	}
	for _, f := range e.GetValueFlows() {
		edge.ValueFlows = append(edge.ValueFlows, ValueFlow{DependentField: f.GetDependentField(), SourceField: f.GetSourceField()})
	}
	return edge
}

func edgeToProto(e DepEdge) *workerv1.DepEdge {
	out := &workerv1.DepEdge{Dependent: refToProto(e.Dependent), Dependency: refToProto(e.Dependency)}
	for _, f := range e.ValueFlows {
		out.ValueFlows = append(out.ValueFlows, &workerv1.ValueFlow{DependentField: f.DependentField, SourceField: f.SourceField})
	}
	return out
}

func configSpecFromProto(c *workerv1.ProviderConfigSpec) ProviderConfigSpec {
	out := ProviderConfigSpec{
		Name:        c.GetName(),
		Kind:        c.GetKind(),
		KindVersion: c.GetKindVersion(),
		IsDefault:   c.GetIsDefault(),
		Data:        c.GetData(),
	}
	// Keep a nil interface (not a typed nil map) when the spec is absent.
	if s := structToMap(c.GetSpec()); s != nil {
		out.Spec = s
	}
	return out
}

func configSpecToProto(c ProviderConfigSpec, i int) (*workerv1.ProviderConfigSpec, error) {
	spec, err := encodeObject(c.Spec, fmt.Sprintf("configs[%d].spec", i))
	if err != nil {
		return nil, err
	}
	return &workerv1.ProviderConfigSpec{
		Name:        c.Name,
		Kind:        c.Kind,
		KindVersion: c.KindVersion,
		IsDefault:   c.IsDefault,
		Spec:        spec,
		Data:        c.Data,
	}, nil
}

// providerConfig is a default config as pushed or fetched. Spec and bundle
// travel together; both absent means "no default" (nil).
func providerConfig(spec *structpb.Struct, data []byte) *ProviderConfig {
	if spec == nil && len(data) == 0 {
		return nil
	}
	return &ProviderConfig{Spec: structToMap(spec), Data: data}
}

func stageFromProto(s workerv1.Stage) (Stage, bool) {
	switch s {
	case workerv1.Stage_STAGE_COMPOSE:
		return StageCompose, true
	case workerv1.Stage_STAGE_WORK:
		return StageWork, true
	case workerv1.Stage_STAGE_ROLLUP:
		return StageRollup, true
	case workerv1.Stage_STAGE_DELETE:
		return StageDelete, true
	case workerv1.Stage_STAGE_OPERATE:
		return StageOperate, true
	case workerv1.Stage_STAGE_REACT:
		return StageReact, true
	default:
		return StageUnspecified, false
	}
}

func triggerFromProto(t workerv1.Trigger) Trigger {
	// The domain constants follow the protobuf numbering.
	if t > workerv1.Trigger_TRIGGER_UNSPECIFIED && t <= workerv1.Trigger_TRIGGER_CONFIG_CHANGE {
		return Trigger(t)
	}
	return TriggerUnspecified
}

func transitionFromProto(t workerv1.Transition) Transition {
	if t > workerv1.Transition_TRANSITION_UNSPECIFIED && t <= workerv1.Transition_TRANSITION_DELETED {
		return Transition(t)
	}
	return TransitionUnspecified
}

func conditionStatusToProto(s ConditionStatus) (workerv1.ConditionStatus, bool) {
	switch s {
	case ConditionTrue:
		return workerv1.ConditionStatus_CONDITION_STATUS_TRUE, true
	case ConditionFalse:
		return workerv1.ConditionStatus_CONDITION_STATUS_FALSE, true
	case ConditionUnknown:
		return workerv1.ConditionStatus_CONDITION_STATUS_UNKNOWN, true
	default:
		return workerv1.ConditionStatus_CONDITION_STATUS_UNSPECIFIED, false
	}
}

func eventTypeToProto(t EventType) (workerv1.EventType, bool) {
	switch t {
	case EventNormal:
		return workerv1.EventType_EVENT_TYPE_NORMAL, true
	case EventWarning:
		return workerv1.EventType_EVENT_TYPE_WARNING, true
	default:
		return workerv1.EventType_EVENT_TYPE_UNSPECIFIED, false
	}
}

// eventToProto is the wire form of the i-th event of an outcome; a detail
// that is not a JSON object, or an unknown type, is an error.
func eventToProto(e Event, i int) (*workerv1.WorkerEvent, error) {
	t, ok := eventTypeToProto(e.Type)
	if !ok {
		return nil, fmt.Errorf("events[%d] (%q) has an unknown type %d", i, e.Reason, int(e.Type))
	}
	detail, err := encodeObject(e.Detail, fmt.Sprintf("events[%d].detail", i))
	if err != nil {
		return nil, err
	}
	out := eventWithoutDetail(e)
	out.Type, out.Detail = t, detail
	return out, nil
}

// eventWithoutDetail is the wire form of an event, leaving its detail out
// (and an unknown type unspecified, which the server records as normal).
func eventWithoutDetail(e Event) *workerv1.WorkerEvent {
	t, _ := eventTypeToProto(e.Type)
	return &workerv1.WorkerEvent{Category: e.Category, Type: t, Reason: e.Reason, Message: e.Message}
}

// failureEventsToProto is the wire form of a failure's events. A detail that
// is not a JSON object cannot travel and is left out, but its event is still
// sent: the failure matters more than its detail.
func failureEventsToProto(events []Event) []*workerv1.WorkerEvent {
	if len(events) == 0 {
		return nil
	}
	out := make([]*workerv1.WorkerEvent, len(events))
	for i, e := range events {
		out[i] = eventWithoutDetail(e)
		if detail, err := encodeObject(e.Detail, ""); err == nil {
			out[i].Detail = detail
		}
	}
	return out
}

func kindToProto(k KindVersion) *workerv1.KindVersion {
	return &workerv1.KindVersion{Kind: k.Kind, KindVersion: k.Version}
}

// requestFromTask decodes a task into what a handler sees.
func requestFromTask(t *workerv1.StageTask, defaultConfig *ProviderConfig, deadline time.Time) (*ReactionRequest, error) {
	stage, ok := stageFromProto(t.GetStage())
	if !ok {
		return nil, fmt.Errorf("unsupported stage %d", t.GetStage())
	}
	if t.GetResource() == nil {
		return nil, errNoResource
	}
	req := &ReactionRequest{
		Reaction:       t.GetReaction(),
		Stage:          stage,
		Trigger:        triggerFromProto(t.GetTrigger()),
		Kind:           KindVersion{Kind: t.GetKind(), Version: t.GetKindVersion()},
		Resource:       resourceFromProto(t.GetResource()),
		Generation:     t.GetGeneration(),
		Attempt:        t.GetAttempt(),
		Plan:           t.GetPlan(),
		DefaultConfig:  defaultConfig,
		ConfigOverride: structToMap(t.GetProviderConfig()),
		BundleOverride: t.GetProviderBundle(),
		Deadline:       deadline,
	}
	switch in := t.GetInput().(type) {
	case *workerv1.StageTask_ComposeInput:
		c := &ComposeInput{Observed: resourcesFromProto(in.ComposeInput.GetObserved())}
		for _, d := range in.ComposeInput.GetDesired() {
			c.Desired = append(c.Desired, childFromProto(d))
		}
		for _, e := range in.ComposeInput.GetEdges() {
			c.Edges = append(c.Edges, edgeFromProto(e))
		}
		for _, s := range in.ComposeInput.GetConfigs() {
			c.Configs = append(c.Configs, configSpecFromProto(s))
		}
		req.Compose = c
	case *workerv1.StageTask_WorkInput:
		req.Work = &WorkInput{Status: structToMap(in.WorkInput.GetStatus())}
	case *workerv1.StageTask_RollupInput:
		req.Rollup = &RollupInput{
			Descendants: resourcesFromProto(in.RollupInput.GetDescendants()),
			Status:      structToMap(in.RollupInput.GetStatus()),
		}
	case *workerv1.StageTask_DeleteInput:
		req.Delete = &DeleteInput{Finalizer: in.DeleteInput.GetFinalizer()}
	case *workerv1.StageTask_OperateInput:
		op := in.OperateInput.GetOperation()
		req.Operate = &OperateInput{Operation: Operation{
			UID:         op.GetUid(),
			Verb:        op.GetVerb(),
			Input:       structToMap(op.GetInput()),
			Attempts:    op.GetAttempts(),
			RequestedBy: op.GetRequestedBy(),
		}}
	case *workerv1.StageTask_ReactInput:
		req.React = &ReactInput{
			Transition: transitionFromProto(in.ReactInput.GetTransition()),
			DedupToken: in.ReactInput.GetDedupToken(),
			Binding:    in.ReactInput.GetBinding(),
		}
	}
	return req, nil
}

// fence holds the values of a task a completion echoes verbatim.
type fence struct {
	leaseToken      string
	claimEpoch      int64
	stage           workerv1.Stage
	generation      int64
	manifestVersion int64
}

func fenceOf(t *workerv1.StageTask) fence {
	return fence{
		leaseToken:      t.GetLeaseToken(),
		claimEpoch:      t.GetClaimEpoch(),
		stage:           t.GetStage(),
		generation:      t.GetGeneration(),
		manifestVersion: t.GetManifestVersion(),
	}
}

func (f fence) blank() *workerv1.StageComplete {
	return &workerv1.StageComplete{
		LeaseToken:      f.leaseToken,
		ClaimEpoch:      f.claimEpoch,
		Stage:           f.stage,
		Generation:      f.generation,
		ManifestVersion: f.manifestVersion,
	}
}

// failure is the completion of a failed task.
func (f fence) failure(err error) *workerv1.StageComplete {
	c := f.blank()
	msg := err.Error()
	if msg == "" {
		msg = "handler failed without a message"
	}
	c.Error = &workerv1.TaskError{Message: msg, Terminal: IsTerminal(err), Reason: reasonOf(err)}
	c.Events = failureEventsToProto(eventsOf(err))
	return c
}

// complete is the completion of a handler result. An outcome that cannot be
// encoded becomes a terminal failure: running the same code again would
// produce it again.
func (f fence) complete(o *Outcome, err error) *workerv1.StageComplete {
	if err != nil {
		return f.failure(err)
	}
	c, err := f.encode(o)
	if err != nil {
		return f.failure(Terminalf(invalidOutcomeReason, "invalid outcome: %v", err))
	}
	return c
}

func (f fence) encode(o *Outcome) (*workerv1.StageComplete, error) {
	if o == nil {
		o = &Outcome{}
	}
	c := f.blank()
	var err error
	if c.Status, err = encodeObject(o.Status, "status"); err != nil {
		return nil, err
	}
	if c.OperationOutput, err = encodeObject(o.OperationOutput, "operation_output"); err != nil {
		return nil, err
	}
	for i, cond := range o.Conditions {
		status, ok := conditionStatusToProto(cond.Status)
		if !ok {
			return nil, fmt.Errorf("conditions[%d] (%q) has no status", i, cond.Type)
		}
		pc := &workerv1.Condition{Type: cond.Type, Status: status, Reason: cond.Reason, Message: cond.Message}
		if cond.Liveness != 0 {
			pc.Liveness = durationpb.New(cond.Liveness)
		}
		c.Conditions = append(c.Conditions, pc)
	}
	for i, e := range o.Events {
		pe, err := eventToProto(e, i)
		if err != nil {
			return nil, err
		}
		c.Events = append(c.Events, pe)
	}
	// A compose result replaces the previous composition, so a composer always
	// sends one (empty = prune all); other stages only when they set parts.
	if f.stage == workerv1.Stage_STAGE_COMPOSE || len(o.Children) > 0 || len(o.Edges) > 0 || len(o.Configs) > 0 {
		r := &workerv1.ComposeResult{}
		for i, child := range o.Children {
			pc, err := childToProto(child, i)
			if err != nil {
				return nil, err
			}
			r.Desired = append(r.Desired, pc)
		}
		for _, e := range o.Edges {
			r.Edges = append(r.Edges, edgeToProto(e))
		}
		for i, cfg := range o.Configs {
			pc, err := configSpecToProto(cfg, i)
			if err != nil {
				return nil, err
			}
			r.Configs = append(r.Configs, pc)
		}
		c.ComposeResult = r
	}
	c.Healthy = o.Healthy
	if o.RequeueAfter > 0 {
		c.RequeueAfter = durationpb.New(o.RequeueAfter)
	}
	return c, nil
}
