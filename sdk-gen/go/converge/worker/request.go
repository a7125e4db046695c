package worker

import (
	"bytes"
	"time"
)

// ReactionRequest is one task, decoded: run reaction Reaction of Kind for Resource.
//
// Handlers must be idempotent: the same task can run more than once (after a
// lost lease or a broker restart).
type ReactionRequest struct {
	// Reaction is the name of the reaction to run, chosen by the broker from
	// the manifest (e.g. "work", "compose", "rollup", "teardown").
	Reaction string
	// Stage says which outcome parts are expected.
	Stage Stage
	// Trigger is what fired the reaction.
	Trigger Trigger
	// Kind is the pair whose handler runs (for react: the reactor kind).
	Kind KindVersion
	// Resource is the resource to act on, as of dispatch (for react: the
	// watched one).
	Resource Resource
	// Generation is the spec generation this task was scheduled for.
	Generation int64
	// Attempt is the 1-based attempt number of this task for this generation.
	Attempt int32
	// Plan is set when a client asked what applying the resource would do
	// (compose only): compute the answer as usual but cause no side
	// effects (no calls that change the outside world, no writes of your
	// own); the outcome is shown to the client and never applied. The
	// resource may not exist yet (empty UID).
	Plan bool

	// Exactly one stage input is set, matching Stage (none if the broker sent
	// none).
	Compose *ComposeInput
	Work    *WorkInput
	Rollup  *RollupInput
	Delete  *DeleteInput
	Operate *OperateInput
	React   *ReactInput

	// DefaultConfig is the kind's default provider config as cached when the
	// task arrived; nil if the kind has none.
	DefaultConfig *ProviderConfig
	// ConfigOverride is the spec of the resource's own provider config; nil
	// if none.
	ConfigOverride map[string]any
	// BundleOverride is the resource's bundle override; empty = none.
	BundleOverride []byte
	// Deadline is when the task's time budget runs out; zero = none. It is
	// also the deadline of the handler's context.
	Deadline time.Time
}

// EffectiveConfig is the override deep-merged over the default spec (the
// override wins per key); nil when neither exists. The result is a fresh copy.
// Request is the former name of ReactionRequest.
//
// Deprecated: use ReactionRequest, the name every converge SDK uses (0.1
// called it Request).
type Request = ReactionRequest

func (r *ReactionRequest) EffectiveConfig() map[string]any {
	var base map[string]any
	if r.DefaultConfig != nil {
		base = r.DefaultConfig.Spec
	}
	if base == nil && r.ConfigOverride == nil {
		return nil
	}
	return MergeJSON(base, r.ConfigOverride)
}

// EffectiveBundle is the bundle override when non-empty (it wins wholesale),
// else the default config's bundle. Empty = none.
func (r *ReactionRequest) EffectiveBundle() []byte {
	if len(r.BundleOverride) > 0 {
		return r.BundleOverride
	}
	if r.DefaultConfig != nil {
		return r.DefaultConfig.Data
	}
	return nil
}

// MergeJSON deep-merges over into a deep copy of base and returns it: objects
// merge per key, any other value in over replaces the one in base. Neither
// argument is modified or shared with the result; a nil map is an empty
// object.
func MergeJSON(base, over map[string]any) map[string]any {
	out := cloneObject(base)
	if out == nil {
		out = make(map[string]any, len(over))
	}
	for key, value := range over {
		sub, isObject := value.(map[string]any)
		existing, wasObject := out[key].(map[string]any)
		if isObject && wasObject {
			out[key] = MergeJSON(existing, sub)
		} else {
			out[key] = cloneValue(value)
		}
	}
	return out
}

// cloneObject deep-copies a decoded JSON object; nil stays nil.
func cloneObject(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = cloneValue(v)
	}
	return out
}

func cloneValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		return cloneObject(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = cloneValue(e)
		}
		return out
	default:
		return v
	}
}

// clone deep-copies a provider config so a handler cannot alter the cache.
func (c *ProviderConfig) clone() *ProviderConfig {
	if c == nil {
		return nil
	}
	return &ProviderConfig{Spec: cloneObject(c.Spec), Data: bytes.Clone(c.Data)}
}
