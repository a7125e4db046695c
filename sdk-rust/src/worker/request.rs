//! The request a provider's handler receives for one task.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::types::{KindVersion, ProviderConfig, Resource, Stage, StageInput, Trigger};

/// One task, decoded: run reaction `reaction` of `kind` for `resource`.
///
/// Handlers must be idempotent: the same task can run more than once (after a
/// lost lease or a broker restart).
#[derive(Debug, Clone, PartialEq)]
pub struct ReactionRequest {
    /// Name of the reaction to run, chosen by the broker from the manifest
    /// (e.g. `work`, `compose`, `rollup`, `teardown`, `operate:<verb>`).
    pub reaction: String,
    /// The pipeline stage, i.e. which outcome parts are expected.
    pub stage: Stage,
    /// What fired the reaction.
    pub trigger: Trigger,
    /// The pair whose handler runs (for react: the reactor kind).
    pub kind: KindVersion,
    /// The resource to act on, as of dispatch (for react: the watched one).
    pub resource: Resource,
    /// The spec generation this task was scheduled for.
    pub generation: i64,
    /// 1-based attempt number of this task for this generation.
    pub attempt: i32,
    /// A plan, not a reconcile (compose only): a client asked what applying
    /// the resource would do. Compute the answer as usual but cause **no
    /// side effects** (no calls that change the outside world, no writes of
    /// your own): the outcome is shown to the client, never applied. The
    /// resource may not exist yet (`uid` empty).
    pub plan: bool,
    /// The stage-specific input.
    pub input: StageInput,
    /// The kind's default provider config as cached when the task arrived.
    pub default_config: Option<ProviderConfig>,
    /// The resource's config override (spec of its custom ProviderConfig).
    pub config_override: Option<Value>,
    /// The resource's bundle override; empty = none.
    pub bundle_override: Vec<u8>,
    /// When the task's time budget runs out; `None` = no deadline. The
    /// runtime cancels the handler at this instant.
    pub deadline: Option<Instant>,
}

impl ReactionRequest {
    /// The effective configuration: the override deep-merged over the default
    /// spec (the override wins per key). `None` when neither exists.
    pub fn effective_config(&self) -> Option<Value> {
        let default = self.default_config.as_ref().and_then(|c| c.spec.clone());
        match (default, self.config_override.clone()) {
            (None, None) => None,
            (Some(base), None) => Some(base),
            (None, Some(over)) => Some(over),
            (Some(mut base), Some(over)) => {
                merge_json(&mut base, over);
                Some(base)
            }
        }
    }

    /// The effective bundle: the override if non-empty (it wins wholesale),
    /// else the default config's bundle. Empty = none.
    pub fn effective_bundle(&self) -> &[u8] {
        if !self.bundle_override.is_empty() {
            return &self.bundle_override;
        }
        self.default_config
            .as_ref()
            .map(|c| c.data.as_slice())
            .unwrap_or_default()
    }

    /// Time left before the deadline; `None` without a deadline.
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline.map(|d| d.saturating_duration_since(Instant::now()))
    }
}

/// Deep-merges `over` into `base`: objects merge per key, anything else is
/// replaced by the override.
pub fn merge_json(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(base), Value::Object(over)) => {
            for (key, value) in over {
                match base.get_mut(&key) {
                    Some(existing) => merge_json(existing, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, over) => *base = over,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_is_deep_and_override_wins() {
        let mut base = json!({"a": 1, "nested": {"x": 1, "y": 2}, "list": [1, 2]});
        merge_json(&mut base, json!({"nested": {"y": 3, "z": 4}, "list": [9], "b": true}));
        assert_eq!(
            base,
            json!({"a": 1, "nested": {"x": 1, "y": 3, "z": 4}, "list": [9], "b": true})
        );
    }
}
