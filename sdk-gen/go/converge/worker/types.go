package worker

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// KindVersion is a (kind, kind_version) pair. Routing is exact: a provider for
// version 1 never receives version 2 tasks.
type KindVersion struct {
	// Kind is the kind name.
	Kind string
	// Version is the kind version, >= 1.
	Version int32
}

// String formats the pair as "kind:version".
func (k KindVersion) String() string {
	return k.Kind + ":" + strconv.FormatInt(int64(k.Version), 10)
}

// ParseKindVersion parses "kind:version"; a bare "kind" means version 1.
func ParseKindVersion(s string) (KindVersion, error) {
	kind, version := s, int64(1)
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		kind = s[:i]
		v, err := strconv.ParseInt(s[i+1:], 10, 32)
		if err != nil {
			return KindVersion{}, fmt.Errorf("invalid kind %q: version is not an integer (expected KIND:VERSION, e.g. noop:1)", s)
		}
		version = v
	}
	if kind == "" {
		return KindVersion{}, fmt.Errorf("invalid kind %q: kind is empty (expected KIND:VERSION, e.g. noop:1)", s)
	}
	if version < 1 {
		return KindVersion{}, fmt.Errorf("invalid kind %q: version must be >= 1", s)
	}
	return KindVersion{Kind: kind, Version: int32(version)}, nil
}

// Stage is the reconcile pipeline stage a task runs, i.e. which outcome parts
// the broker expects back.
type Stage int

// The stages. StageUnspecified is never handed to a handler.
const (
	StageUnspecified Stage = iota
	// StageCompose: return the desired children, edges, configs and status.
	StageCompose
	// StageWork: act on the outside world and return status and conditions.
	StageWork
	// StageRollup: summarise the settled subtree into the root's status.
	StageRollup
	// StageDelete: tear down a finalizer-bearing resource.
	StageDelete
	// StageOperate: run an operation verb and return its output.
	StageOperate
	// StageReact: perform a side effect for another resource's transition.
	StageReact
)

var stageNames = [...]string{"unspecified", "compose", "work", "rollup", "delete", "operate", "react"}

// String returns the lower-case stage name, e.g. "work".
func (s Stage) String() string {
	if s >= 0 && int(s) < len(stageNames) {
		return stageNames[s]
	}
	return "Stage(" + strconv.Itoa(int(s)) + ")"
}

// Trigger is what fired the reaction of a task.
type Trigger int

// The triggers. TriggerUnspecified also stands for a value this SDK does not
// know (a newer broker).
const (
	TriggerUnspecified Trigger = iota
	// TriggerSpecChange: the resource's generation moved.
	TriggerSpecChange
	// TriggerChildrenSettled: the resource's subtree has settled.
	TriggerChildrenSettled
	// TriggerDeleteRequested: the resource is being torn down.
	TriggerDeleteRequested
	// TriggerOperation: an operation was invoked.
	TriggerOperation
	// TriggerReactor: a reactor binding fired.
	TriggerReactor
	// TriggerResync: a periodic resync re-pended the resource.
	TriggerResync
	// TriggerConfigChange: the resource's provider config override changed
	// without a spec change.
	TriggerConfigChange
)

var triggerNames = [...]string{
	"unspecified", "spec_change", "children_settled", "delete_requested",
	"operation", "reactor", "resync", "config_change",
}

// String returns the lower snake case name, e.g. "spec_change".
func (t Trigger) String() string {
	if t >= 0 && int(t) < len(triggerNames) {
		return triggerNames[t]
	}
	return "unspecified"
}

// Transition is the lifecycle edge that fired a reactor binding.
type Transition int

// The transitions. TransitionUnspecified also stands for an unknown value.
const (
	TransitionUnspecified Transition = iota
	// TransitionCreated: the resource was created.
	TransitionCreated
	// TransitionSynced: a new generation was reconciled successfully.
	TransitionSynced
	// TransitionDegraded: the resource became degraded.
	TransitionDegraded
	// TransitionFailed: the resource became failed.
	TransitionFailed
	// TransitionDeleted: the resource was removed after its teardown.
	TransitionDeleted
)

var transitionNames = [...]string{"unspecified", "created", "synced", "degraded", "failed", "deleted"}

// String returns the lower-case name, e.g. "synced".
func (t Transition) String() string {
	if t >= 0 && int(t) < len(transitionNames) {
		return transitionNames[t]
	}
	return "unspecified"
}

// ConditionStatus is the truth value of a condition.
type ConditionStatus int

// The condition truth values. The zero value is not valid in an outcome.
const (
	_ ConditionStatus = iota // the zero value: not valid in an outcome
	// ConditionTrue: the condition holds.
	ConditionTrue
	// ConditionFalse: the condition does not hold.
	ConditionFalse
	// ConditionUnknown: unknown whether the condition holds.
	ConditionUnknown
)

// String returns "True", "False" or "Unknown".
func (s ConditionStatus) String() string {
	switch s {
	case ConditionTrue:
		return "True"
	case ConditionFalse:
		return "False"
	case ConditionUnknown:
		return "Unknown"
	default:
		return "Unspecified"
	}
}

// ConditionStatusOf is ConditionTrue for true and ConditionFalse for false.
func ConditionStatusOf(holds bool) ConditionStatus {
	if holds {
		return ConditionTrue
	}
	return ConditionFalse
}

// Condition is a named observation about the worked resource. The server
// stamps times and generations; a Ready condition also sets the resource's
// health unless Outcome.Healthy says otherwise.
type Condition struct {
	// Type in UpperCamelCase, e.g. "Ready". Unique per outcome.
	Type string
	// Status is whether the condition holds. Required.
	Status ConditionStatus
	// Reason is an UpperCamelCase machine-readable cause; may be empty.
	Reason string
	// Message is a human-readable explanation; may be empty.
	Message string
	// Liveness, when non-zero, makes it a liveness condition: the report
	// holds for this long. The server accepts 1 s to 24 h and fails the task
	// with reason ConditionInvalid otherwise.
	// Unless the condition is reported again within that window, reads show
	// it with status Unknown and reason "ReportExpired"; the last report is
	// kept and shown again once renewed. Renewing an unchanged report costs
	// at most one write per half window. Zero = an ordinary condition, held
	// until replaced.
	Liveness time.Duration
}

// ResourceRef is the public identity of a resource.
type ResourceRef struct {
	Kind string
	Name string
}

// Resource is a snapshot of a resource as handed to a worker. JSON documents
// are decoded the way encoding/json decodes into an interface value: objects
// as map[string]any, arrays as []any, numbers as float64.
type Resource struct {
	// UID is the resource's UUID.
	UID         string
	Kind        string
	KindVersion int32
	Name        string
	Labels      map[string]string
	// Spec is the desired state of the generation being worked (never nil).
	Spec map[string]any
	// Status is the last stored status; nil if none yet.
	Status map[string]any
	// Generation is the current spec generation.
	Generation int64
	// ObservedGeneration is the highest generation whose result has been
	// applied; 0 before the first success.
	ObservedGeneration int64
	// Ready: synced for its generation, healthy and not being deleted.
	Ready bool
	// Healthy: the last reconcile reported the resource healthy.
	Healthy bool
	// Owner is the composer that owns the resource; nil for roots.
	Owner *ResourceRef
	// Root is the root of the composition tree; nil for roots.
	Root *ResourceRef
	// Finalizers still present.
	Finalizers []string
	// DeleteTime is when deletion was requested; zero if it was not.
	DeleteTime time.Time
	// OrphanExpireTime is the end of the orphan grace period; zero unless
	// orphaned.
	OrphanExpireTime time.Time
	// Quarantined reports whether the resource is quarantined.
	Quarantined bool
}

// DecodeSpec decodes the spec into v (a pointer) through encoding/json, so a
// handler can work with its own typed struct.
func (r *Resource) DecodeSpec(v any) error { return decodeDocument(r.Spec, v) }

// DecodeStatus decodes the stored status into v (a pointer); a missing status
// leaves v untouched.
func (r *Resource) DecodeStatus(v any) error {
	if r.Status == nil {
		return nil
	}
	return decodeDocument(r.Status, v)
}

func decodeDocument(doc map[string]any, v any) error {
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// ChildSpec is a child a composer wants to exist, owned by the task's
// resource.
type ChildSpec struct {
	Kind        string
	KindVersion int32
	// Name is unique within its kind cluster-wide.
	Name   string
	Labels map[string]string
	// Spec is the desired spec: any value encoding/json turns into a JSON
	// object (a map or a struct); nil = {}. Fields targeted by value flows are
	// filled in by the server.
	Spec any
	// ProviderConfig optionally names a provider config to attach as the
	// child's override; empty = none.
	ProviderConfig string
}

// ValueFlow copies one value from a dependency's status into a dependent's
// spec. Both fields are JSON pointers (RFC 6901).
type ValueFlow struct {
	// DependentField receives the value (in the dependent's spec).
	DependentField string
	// SourceField supplies it (in the dependency's status).
	SourceField string
}

// DepEdge is a dependency edge: the dependent is worked only after the
// dependency is synced, and torn down before it.
type DepEdge struct {
	Dependent  ResourceRef
	Dependency ResourceRef
	// ValueFlows are the values copied along the edge; empty = ordering only.
	ValueFlows []ValueFlow
}

// ProviderConfigSpec is a provider config a composer wants to exist, owned by
// the task's resource.
type ProviderConfigSpec struct {
	// Name is cluster-wide unique.
	Name        string
	Kind        string
	KindVersion int32
	// IsDefault makes it the default config of its pair.
	IsDefault bool
	// Spec is the configuration document (a JSON object when encoded); nil =
	// none.
	Spec any
	// Data is an optional opaque bundle.
	Data []byte
}

// Operation is an invoked operation, as handed to a worker.
type Operation struct {
	UID  string
	Verb string
	// Input is the input document; nil if none.
	Input map[string]any
	// Attempts is the 1-based attempt number of this dispatch.
	Attempts int32
	// RequestedBy is the authenticated identity of the caller.
	RequestedBy string
}

// ProviderConfig is the default provider config of a pair.
type ProviderConfig struct {
	// Spec is the configuration document; nil if none.
	Spec map[string]any
	// Data is the opaque bundle; empty if none.
	Data []byte
}

// ComposeInput is the input of a compose task.
type ComposeInput struct {
	// Observed are the children the resource currently owns, as stored.
	Observed []Resource
	// Desired are the children the previous compose emitted.
	Desired []ChildSpec
	// Edges are the edges the previous compose emitted.
	Edges []DepEdge
	// Configs are the provider configs the previous compose emitted.
	Configs []ProviderConfigSpec
}

// WorkInput is the input of a work task.
type WorkInput struct {
	// Status accumulated so far in this reconcile, or the stored status; nil
	// if none.
	Status map[string]any
}

// RollupInput is the input of a rollup task.
type RollupInput struct {
	// Descendants is the whole settled subtree under the resource.
	Descendants []Resource
	// Status is the resource's status accumulated so far; nil if none.
	Status map[string]any
}

// DeleteInput is the input of a delete (teardown) task.
type DeleteInput struct {
	// Finalizer is the finalizer this teardown clears on success.
	Finalizer string
}

// OperateInput is the input of an operate task.
type OperateInput struct {
	Operation Operation
}

// ReactInput is the input of a react task.
type ReactInput struct {
	// Transition is the lifecycle edge the watched resource crossed.
	Transition Transition
	// DedupToken is identical across redeliveries, so a sink can deduplicate.
	DedupToken string
	// Binding is the name of the reactor binding that fired.
	Binding string
}
