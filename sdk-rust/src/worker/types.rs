//! Domain value types handed to and returned by providers. They mirror the
//! worker contract but use plain Rust and JSON (`serde_json::Value`) instead of
//! protobuf types, and serialize to the JSON shapes the stdworker protocol
//! documents.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A `(kind, kind_version)` pair. Routing is exact: a provider for version 1
/// never receives version 2 tasks.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct KindVersion {
    /// Kind name.
    pub kind: String,
    /// Kind version, >= 1.
    pub version: i32,
}

impl KindVersion {
    /// A pair from its parts.
    pub fn new(kind: impl Into<String>, version: i32) -> Self {
        Self {
            kind: kind.into(),
            version,
        }
    }
}

impl fmt::Display for KindVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind, self.version)
    }
}

/// Why a `kind:version` string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid kind {input:?}: {reason} (expected KIND:VERSION, e.g. noop:1)")]
pub struct ParseKindVersionError {
    /// The text given.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl FromStr for KindVersion {
    type Err = ParseKindVersionError;

    /// Parses `kind:version`; a bare `kind` means version 1.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| ParseKindVersionError {
            input: s.to_owned(),
            reason,
        };
        let (kind, version) = match s.rsplit_once(':') {
            Some((kind, version)) => (
                kind,
                version.parse::<i32>().map_err(|_| err("version is not an integer"))?,
            ),
            None => (s, 1),
        };
        if kind.is_empty() {
            return Err(err("kind is empty"));
        }
        if version < 1 {
            return Err(err("version must be >= 1"));
        }
        Ok(Self::new(kind, version))
    }
}

/// The stage of the reconcile pipeline a task runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Composer: return the desired children, edges, configs and status.
    Compose,
    /// Leaf work: act on the outside world and return status and conditions.
    Work,
    /// Rollup: summarise the settled subtree into the root's status.
    Rollup,
    /// Teardown of a finalizer-bearing resource.
    Delete,
    /// Run an operation verb and return its output.
    Operate,
    /// Reactor: a side effect for another resource's lifecycle transition.
    React,
}

/// What fired the reaction of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// Not set (or a value this SDK does not know).
    Unspecified,
    /// The resource's generation moved.
    SpecChange,
    /// The resource's subtree has settled.
    ChildrenSettled,
    /// The resource is being torn down.
    DeleteRequested,
    /// An operation was invoked.
    Operation,
    /// A reactor binding fired.
    Reactor,
    /// A periodic resync re-pended the resource.
    Resync,
    /// The resource's provider config override changed (same generation).
    ConfigChange,
}

/// A lifecycle edge that fired a reactor binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transition {
    /// Not set (or a value this SDK does not know).
    Unspecified,
    /// The resource was created.
    Created,
    /// A new generation was reconciled successfully.
    Synced,
    /// The resource became degraded.
    Degraded,
    /// The resource became failed.
    Failed,
    /// The resource was removed after its teardown.
    Deleted,
}

/// Truth value of a condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConditionStatus {
    /// The condition holds.
    #[serde(alias = "true", alias = "TRUE")]
    True,
    /// The condition does not hold.
    #[serde(alias = "false", alias = "FALSE")]
    False,
    /// Unknown whether the condition holds.
    #[serde(alias = "unknown", alias = "UNKNOWN")]
    Unknown,
}

/// A named observation about the worked resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    /// Condition type in UpperCamelCase, e.g. `Ready`.
    #[serde(rename = "type")]
    pub condition_type: String,
    /// Whether the condition holds.
    pub status: ConditionStatus,
    /// UpperCamelCase machine-readable cause; may be empty.
    #[serde(default)]
    pub reason: String,
    /// Human-readable explanation; may be empty.
    #[serde(default)]
    pub message: String,
    /// Makes it a liveness condition: the report holds this long (1 s to
    /// 24 h) unless reported again, then reads as Unknown with reason
    /// `ReportExpired`. `None` = an ordinary condition. In JSON:
    /// `liveness_secs`, a number of seconds.
    #[serde(
        default,
        rename = "liveness_secs",
        with = "optional_secs",
        skip_serializing_if = "Option::is_none"
    )]
    pub liveness: Option<Duration>,
}

impl Condition {
    /// A condition with empty reason and message.
    pub fn new(condition_type: impl Into<String>, status: ConditionStatus) -> Self {
        Self {
            condition_type: condition_type.into(),
            status,
            reason: String::new(),
            message: String::new(),
            liveness: None,
        }
    }

    /// Makes it a liveness condition held for `window` after each report.
    pub fn with_liveness(mut self, window: Duration) -> Self {
        self.liveness = Some(window);
        self
    }

    /// Sets the reason.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = reason.into();
        self
    }

    /// Sets the message.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }
}

/// Public identity of a resource.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceRef {
    /// Kind of the resource.
    pub kind: String,
    /// Name of the resource within its kind.
    pub name: String,
}

impl ResourceRef {
    /// A reference from its parts.
    pub fn new(kind: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            name: name.into(),
        }
    }
}

/// A snapshot of a resource as handed to a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resource {
    /// UUID of the resource.
    pub uid: String,
    /// Kind of the resource.
    pub kind: String,
    /// Kind version of the resource.
    pub kind_version: i32,
    /// Name of the resource.
    pub name: String,
    /// Labels of the resource.
    pub labels: BTreeMap<String, String>,
    /// Desired state (a JSON object; empty object if none).
    pub spec: Value,
    /// Last stored status; `None` if none yet.
    pub status: Option<Value>,
    /// Current spec generation.
    pub generation: i64,
    /// Highest generation whose result has been applied.
    pub observed_generation: i64,
    /// Synced for its generation, healthy and not being deleted.
    pub ready: bool,
    /// Whether the last reconcile reported the resource healthy.
    pub healthy: bool,
    /// Composer that owns this resource; `None` for roots.
    pub owner: Option<ResourceRef>,
    /// Root of the composition tree; `None` for roots.
    pub root: Option<ResourceRef>,
    /// Finalizers still present.
    pub finalizers: Vec<String>,
    /// When deletion was requested, if it was.
    pub delete_time: Option<DateTime<Utc>>,
    /// End of the orphan grace period, if orphaned.
    pub orphan_expire_time: Option<DateTime<Utc>>,
    /// Whether the resource is quarantined.
    pub quarantined: bool,
}

/// A child a composer wants to exist.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChildSpec {
    /// Kind of the child.
    pub kind: String,
    /// Kind version of the child, >= 1.
    pub kind_version: i32,
    /// Name of the child, unique within its kind.
    pub name: String,
    /// Labels of the child.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Desired spec of the child (a JSON object).
    #[serde(default = "empty_object")]
    pub spec: Value,
    /// Name of a provider config to attach as the child's override (one of
    /// the composition's configs, or any config of the child's pair).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_config: Option<String>,
}

/// Copies one value from a dependency's status into a dependent's spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValueFlow {
    /// JSON pointer into the dependent's spec that receives the value.
    pub dependent_field: String,
    /// JSON pointer into the dependency's status that supplies it.
    pub source_field: String,
}

/// A dependency edge: the dependent is worked only after the dependency is
/// synced, and torn down before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DepEdge {
    /// The resource that depends on the other.
    pub dependent: ResourceRef,
    /// The resource depended upon.
    pub dependency: ResourceRef,
    /// Values copied along the edge; empty = ordering only.
    #[serde(default)]
    pub value_flows: Vec<ValueFlow>,
}

/// A provider config a composer wants to exist.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfigSpec {
    /// Cluster-wide unique name of the config.
    pub name: String,
    /// Kind the config is for.
    pub kind: String,
    /// Kind version the config is for, >= 1.
    pub kind_version: i32,
    /// Whether it is the default config of its pair.
    #[serde(default)]
    pub is_default: bool,
    /// Configuration document (a JSON object), if any.
    #[serde(default)]
    pub spec: Option<Value>,
    /// Opaque bundle; empty = none. Base64 in JSON.
    #[serde(default, with = "base64_bytes", skip_serializing_if = "Vec::is_empty")]
    pub data: Vec<u8>,
}

/// An invoked operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    /// UUID of the operation.
    pub uid: String,
    /// Verb to run.
    pub verb: String,
    /// Input document, if any.
    pub input: Option<Value>,
    /// 1-based attempt number of this dispatch.
    pub attempts: i32,
    /// Identity of the caller that invoked it.
    pub requested_by: String,
}

/// Input of a compose task.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ComposeInput {
    /// The children the resource currently owns, as stored.
    pub observed: Vec<Resource>,
    /// The children the previous compose emitted.
    pub desired: Vec<ChildSpec>,
    /// The edges the previous compose emitted.
    pub edges: Vec<DepEdge>,
    /// The provider configs the previous compose emitted.
    pub configs: Vec<ProviderConfigSpec>,
}

/// Input of a work task.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct WorkInput {
    /// Status accumulated so far in this reconcile, or the stored status.
    pub status: Option<Value>,
}

/// Input of a rollup task.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RollupInput {
    /// The whole settled subtree under the resource.
    pub descendants: Vec<Resource>,
    /// The resource's status accumulated so far.
    pub status: Option<Value>,
}

/// Input of a delete (teardown) task.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DeleteInput {
    /// The finalizer this teardown clears on success.
    pub finalizer: String,
}

/// Input of an operate task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperateInput {
    /// The operation to run.
    pub operation: Operation,
}

/// Input of a react task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReactInput {
    /// The lifecycle edge the watched resource crossed.
    pub transition: Transition,
    /// Stable key of this delivery, identical across redeliveries.
    pub dedup_token: String,
    /// Name of the reactor binding that fired.
    pub binding: String,
}

/// The stage-specific input of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StageInput {
    /// Compose input.
    Compose(ComposeInput),
    /// Work input.
    Work(WorkInput),
    /// Rollup input.
    Rollup(RollupInput),
    /// Delete input.
    Delete(DeleteInput),
    /// Operate input.
    Operate(OperateInput),
    /// React input.
    React(ReactInput),
    /// The task carried no input.
    None,
}

/// The default provider config of a `(kind, kind_version)`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ProviderConfig {
    /// Configuration document (a JSON object), if any.
    pub spec: Option<Value>,
    /// Opaque bundle; empty = none. Base64 in JSON.
    #[serde(default, with = "base64_bytes", skip_serializing_if = "Vec::is_empty")]
    pub data: Vec<u8>,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// Serializes bytes as standard base64 text, the usual JSON form of bytes.
pub(crate) mod base64_bytes {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(bytes))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(deserializer)?;
        STANDARD.decode(text.as_bytes()).map_err(serde::de::Error::custom)
    }
}

/// Severity of a reported [`Event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum EventType {
    /// Routine, expected progress.
    #[default]
    #[serde(alias = "normal", alias = "NORMAL")]
    Normal,
    /// Something needing attention.
    #[serde(alias = "warning", alias = "WARNING")]
    Warning,
}

/// An observation recorded on the resource's event timeline, next to the
/// server's own events. Consecutive events of one category with the same
/// type and reason aggregate into one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// Timeline: lower case letters, digits and `-`, starting with a letter;
    /// empty = `worker`. `lifecycle`, `reconcile`, `operation` and `reactor`
    /// are the server's own and refused.
    #[serde(default)]
    pub category: String,
    /// Severity.
    #[serde(rename = "type", default)]
    pub event_type: EventType,
    /// UpperCamelCase cause, at most 128 characters. Required.
    pub reason: String,
    /// Human-readable message (cut at 1024 characters by the server).
    #[serde(default)]
    pub message: String,
    /// Structured detail, a JSON object of at most 8 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
}

impl Event {
    /// A routine event in the `worker` timeline.
    pub fn normal(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            category: String::new(),
            event_type: EventType::Normal,
            reason: reason.into(),
            message: message.into(),
            detail: None,
        }
    }

    /// An event needing attention in the `worker` timeline.
    pub fn warning(reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            event_type: EventType::Warning,
            ..Self::normal(reason, message)
        }
    }

    /// Puts the event on another timeline.
    pub fn with_category(mut self, category: impl Into<String>) -> Self {
        self.category = category.into();
        self
    }

    /// Attaches structured detail (a JSON object).
    pub fn with_detail(mut self, detail: Value) -> Self {
        self.detail = Some(detail);
        self
    }
}

/// Serde for an optional duration as a number of seconds.
mod optional_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<Duration>, serializer: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => serializer.serialize_f64(d.as_secs_f64()),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
        match Option::<f64>::deserialize(deserializer)? {
            None => Ok(None),
            Some(secs) => Duration::try_from_secs_f64(secs)
                .map(Some)
                .map_err(|_| serde::de::Error::custom(format!("{secs} is not a non-negative number of seconds"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_version_parses_and_displays() {
        let kv: KindVersion = "noop:2".parse().unwrap();
        assert_eq!(kv, KindVersion::new("noop", 2));
        assert_eq!(kv.to_string(), "noop:2");
        assert_eq!("noop".parse::<KindVersion>().unwrap(), KindVersion::new("noop", 1));
        assert!("noop:0".parse::<KindVersion>().is_err());
        assert!("noop:x".parse::<KindVersion>().is_err());
        assert!(":1".parse::<KindVersion>().is_err());
    }

    #[test]
    fn condition_json_accepts_lowercase_status() {
        let c: Condition = serde_json::from_str(r#"{"type":"Ready","status":"true"}"#).unwrap();
        assert_eq!(c, Condition::new("Ready", ConditionStatus::True));
        assert!(serde_json::from_str::<Condition>(r#"{"type":"Ready","status":"yes"}"#).is_err());
    }

    #[test]
    fn config_spec_bytes_are_base64() {
        let spec = ProviderConfigSpec {
            name: "c".into(),
            kind: "k".into(),
            kind_version: 1,
            is_default: false,
            spec: None,
            data: b"hi".to_vec(),
        };
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["data"], "aGk=");
        let back: ProviderConfigSpec = serde_json::from_value(json).unwrap();
        assert_eq!(back, spec);
    }
}
