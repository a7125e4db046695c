//! Conversions between the generated protobuf types and the domain types.
//! Nothing else in the SDK touches `prost_types::Struct` directly.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use converge_proto::worker_v1 as pb;
use serde_json::{Map, Value};

use super::outcome::{HandlerError, Outcome};
use super::request::ReactionRequest;
use super::types::{
    ChildSpec, ComposeInput, Condition, ConditionStatus, DeleteInput, DepEdge, Event, EventType, KindVersion,
    OperateInput, Operation, ProviderConfig, ProviderConfigSpec, ReactInput, Resource, ResourceRef, RollupInput, Stage,
    StageInput, Transition, Trigger, ValueFlow, WorkInput,
};

/// A domain value that cannot be expressed on the wire.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} must be a JSON object, got {found}")]
pub struct NotAnObject {
    /// The outcome field at fault.
    pub field: String,
    /// The JSON type found instead.
    pub found: &'static str,
}

pub use converge_proto::json::struct_to_json;

/// A JSON object as a `google.protobuf.Struct`; `field` names the value in
/// the error if it is not an object.
pub fn json_to_struct(value: Value, field: &str) -> Result<prost_types::Struct, NotAnObject> {
    match &value {
        Value::Object(_) => Ok(converge_proto::json::json_to_struct(&value).unwrap_or_default()),
        other => Err(NotAnObject {
            field: field.to_owned(),
            found: json_type(other),
        }),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

/// A protobuf duration as a std duration; negative values clamp to zero.
pub fn duration_from_proto(d: &prost_types::Duration) -> Duration {
    if d.seconds < 0 || (d.seconds == 0 && d.nanos <= 0) {
        return Duration::ZERO;
    }
    Duration::new(d.seconds as u64, d.nanos.max(0) as u32)
}

/// A std duration as a protobuf duration (saturating at i64 seconds).
pub fn duration_to_proto(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: d.subsec_nanos() as i32,
    }
}

fn timestamp_from_proto(t: prost_types::Timestamp) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.seconds, u32::try_from(t.nanos).ok()?)
}

/// The domain stage of a protobuf stage; `None` for unspecified or unknown
/// values (a newer broker).
pub fn stage_from_proto(stage: i32) -> Option<Stage> {
    match pb::Stage::try_from(stage).ok()? {
        pb::Stage::Unspecified => None,
        pb::Stage::Compose => Some(Stage::Compose),
        pb::Stage::Work => Some(Stage::Work),
        pb::Stage::Rollup => Some(Stage::Rollup),
        pb::Stage::Delete => Some(Stage::Delete),
        pb::Stage::Operate => Some(Stage::Operate),
        pb::Stage::React => Some(Stage::React),
    }
}

fn trigger_from_proto(trigger: i32) -> Trigger {
    match pb::Trigger::try_from(trigger) {
        Ok(pb::Trigger::SpecChange) => Trigger::SpecChange,
        Ok(pb::Trigger::ChildrenSettled) => Trigger::ChildrenSettled,
        Ok(pb::Trigger::DeleteRequested) => Trigger::DeleteRequested,
        Ok(pb::Trigger::Operation) => Trigger::Operation,
        Ok(pb::Trigger::Reactor) => Trigger::Reactor,
        Ok(pb::Trigger::Resync) => Trigger::Resync,
        Ok(pb::Trigger::ConfigChange) => Trigger::ConfigChange,
        Ok(pb::Trigger::Unspecified) | Err(_) => Trigger::Unspecified,
    }
}

fn transition_from_proto(transition: i32) -> Transition {
    match pb::Transition::try_from(transition) {
        Ok(pb::Transition::Created) => Transition::Created,
        Ok(pb::Transition::Synced) => Transition::Synced,
        Ok(pb::Transition::Degraded) => Transition::Degraded,
        Ok(pb::Transition::Failed) => Transition::Failed,
        Ok(pb::Transition::Deleted) => Transition::Deleted,
        Ok(pb::Transition::Unspecified) | Err(_) => Transition::Unspecified,
    }
}

fn condition_status_to_proto(status: ConditionStatus) -> i32 {
    match status {
        ConditionStatus::True => pb::ConditionStatus::True as i32,
        ConditionStatus::False => pb::ConditionStatus::False as i32,
        ConditionStatus::Unknown => pb::ConditionStatus::Unknown as i32,
    }
}

fn condition_status_from_proto(status: i32) -> ConditionStatus {
    match pb::ConditionStatus::try_from(status) {
        Ok(pb::ConditionStatus::True) => ConditionStatus::True,
        Ok(pb::ConditionStatus::False) => ConditionStatus::False,
        _ => ConditionStatus::Unknown,
    }
}

fn ref_from_proto(r: pb::ResourceRef) -> ResourceRef {
    ResourceRef {
        kind: r.kind,
        name: r.name,
    }
}

fn ref_to_proto(r: ResourceRef) -> pb::ResourceRef {
    pb::ResourceRef {
        kind: r.kind,
        name: r.name,
    }
}

/// A protobuf resource as a domain resource.
pub fn resource_from_proto(r: pb::Resource) -> Resource {
    Resource {
        uid: r.uid,
        kind: r.kind,
        kind_version: r.kind_version,
        name: r.name,
        labels: r.labels,
        spec: r.spec.map(struct_to_json).unwrap_or_else(empty_object),
        status: r.status.map(struct_to_json),
        generation: r.generation,
        observed_generation: r.observed_generation,
        ready: r.ready,
        healthy: r.healthy,
        owner: r.owner.map(ref_from_proto),
        root: r.root.map(ref_from_proto),
        finalizers: r.finalizers,
        delete_time: r.delete_time.and_then(timestamp_from_proto),
        orphan_expire_time: r.orphan_expire_time.and_then(timestamp_from_proto),
        quarantined: r.quarantined,
    }
}

fn child_from_proto(c: pb::ChildSpec) -> ChildSpec {
    ChildSpec {
        kind: c.kind,
        kind_version: c.kind_version,
        name: c.name,
        labels: c.labels,
        spec: c.spec.map(struct_to_json).unwrap_or_else(empty_object),
        provider_config: Some(c.provider_config).filter(|p| !p.is_empty()),
    }
}

fn child_to_proto(c: ChildSpec, index: usize) -> Result<pb::ChildSpec, NotAnObject> {
    Ok(pb::ChildSpec {
        kind: c.kind,
        kind_version: c.kind_version,
        name: c.name,
        labels: c.labels,
        spec: optional_object(Some(c.spec), &format!("children[{index}].spec"))?,
        provider_config: c.provider_config.unwrap_or_default(),
    })
}

fn edge_from_proto(e: pb::DepEdge) -> DepEdge {
    DepEdge {
        dependent: e
            .dependent
            .map(ref_from_proto)
            .unwrap_or_else(|| ResourceRef::new("", "")),
        dependency: e
            .dependency
            .map(ref_from_proto)
            .unwrap_or_else(|| ResourceRef::new("", "")),
        value_flows: e
            .value_flows
            .into_iter()
            .map(|f| ValueFlow {
                dependent_field: f.dependent_field,
                source_field: f.source_field,
            })
            .collect(),
    }
}

fn edge_to_proto(e: DepEdge) -> pb::DepEdge {
    pb::DepEdge {
        dependent: Some(ref_to_proto(e.dependent)),
        dependency: Some(ref_to_proto(e.dependency)),
        value_flows: e
            .value_flows
            .into_iter()
            .map(|f| pb::ValueFlow {
                dependent_field: f.dependent_field,
                source_field: f.source_field,
            })
            .collect(),
    }
}

fn config_spec_from_proto(c: pb::ProviderConfigSpec) -> ProviderConfigSpec {
    ProviderConfigSpec {
        name: c.name,
        kind: c.kind,
        kind_version: c.kind_version,
        is_default: c.is_default,
        spec: c.spec.map(struct_to_json),
        data: c.data,
    }
}

fn config_spec_to_proto(c: ProviderConfigSpec, index: usize) -> Result<pb::ProviderConfigSpec, NotAnObject> {
    Ok(pb::ProviderConfigSpec {
        name: c.name,
        kind: c.kind,
        kind_version: c.kind_version,
        is_default: c.is_default,
        spec: optional_object(c.spec, &format!("configs[{index}].spec"))?,
        data: c.data,
    })
}

/// `None` and JSON null both mean "absent".
fn optional_object(value: Option<Value>, field: &str) -> Result<Option<prost_types::Struct>, NotAnObject> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => json_to_struct(v, field).map(Some),
    }
}

/// A default provider config as pushed or fetched. Spec and bundle travel
/// together; both absent means "no default".
pub fn provider_config(spec: Option<prost_types::Struct>, data: Vec<u8>) -> Option<ProviderConfig> {
    if spec.is_none() && data.is_empty() {
        return None;
    }
    Some(ProviderConfig {
        spec: spec.map(struct_to_json),
        data,
    })
}

/// Why a task could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The stage is unspecified or unknown to this SDK.
    #[error("unsupported stage {0}")]
    UnsupportedStage(i32),
    /// The task carries no resource.
    #[error("task has no resource")]
    MissingResource,
}

/// Decodes a task into the request a handler sees.
pub fn request_from_task(
    task: pb::StageTask,
    default_config: Option<ProviderConfig>,
    deadline: Option<Instant>,
) -> Result<ReactionRequest, DecodeError> {
    let stage = stage_from_proto(task.stage).ok_or(DecodeError::UnsupportedStage(task.stage))?;
    let resource = task
        .resource
        .map(resource_from_proto)
        .ok_or(DecodeError::MissingResource)?;
    let input = match task.input {
        None => StageInput::None,
        Some(pb::stage_task::Input::ComposeInput(i)) => StageInput::Compose(ComposeInput {
            observed: i.observed.into_iter().map(resource_from_proto).collect(),
            desired: i.desired.into_iter().map(child_from_proto).collect(),
            edges: i.edges.into_iter().map(edge_from_proto).collect(),
            configs: i.configs.into_iter().map(config_spec_from_proto).collect(),
        }),
        Some(pb::stage_task::Input::WorkInput(i)) => StageInput::Work(WorkInput {
            status: i.status.map(struct_to_json),
        }),
        Some(pb::stage_task::Input::RollupInput(i)) => StageInput::Rollup(RollupInput {
            descendants: i.descendants.into_iter().map(resource_from_proto).collect(),
            status: i.status.map(struct_to_json),
        }),
        Some(pb::stage_task::Input::DeleteInput(i)) => StageInput::Delete(DeleteInput { finalizer: i.finalizer }),
        Some(pb::stage_task::Input::OperateInput(i)) => {
            let op = i.operation.unwrap_or_default();
            StageInput::Operate(OperateInput {
                operation: Operation {
                    uid: op.uid,
                    verb: op.verb,
                    input: op.input.map(struct_to_json),
                    attempts: op.attempts,
                    requested_by: op.requested_by,
                },
            })
        }
        Some(pb::stage_task::Input::ReactInput(i)) => StageInput::React(ReactInput {
            transition: transition_from_proto(i.transition),
            dedup_token: i.dedup_token,
            binding: i.binding,
        }),
    };
    Ok(ReactionRequest {
        reaction: task.reaction,
        stage,
        trigger: trigger_from_proto(task.trigger),
        kind: KindVersion::new(task.kind, task.kind_version),
        resource,
        generation: task.generation,
        attempt: task.attempt,
        plan: task.plan,
        input,
        default_config,
        config_override: task.provider_config.map(struct_to_json),
        bundle_override: task.provider_bundle,
        deadline,
    })
}

/// The fence values of a task, echoed verbatim in its completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// Lease handle of the dispatch.
    pub lease_token: String,
    /// Claim epoch of the task row at dispatch.
    pub claim_epoch: i64,
    /// The task's stage, as sent.
    pub stage: i32,
    /// The spec generation the task was scheduled for.
    pub generation: i64,
    /// Content hash of the manifest the reaction was chosen from.
    pub manifest_version: i64,
}

impl Fence {
    /// The fence of `task`.
    pub fn of(task: &pb::StageTask) -> Self {
        Self {
            lease_token: task.lease_token.clone(),
            claim_epoch: task.claim_epoch,
            stage: task.stage,
            generation: task.generation,
            manifest_version: task.manifest_version,
        }
    }

    fn blank_complete(&self) -> pb::StageComplete {
        pb::StageComplete {
            lease_token: self.lease_token.clone(),
            claim_epoch: self.claim_epoch,
            stage: self.stage,
            generation: self.generation,
            manifest_version: self.manifest_version,
            ..Default::default()
        }
    }

    /// The completion of this task for a handler result. An outcome that
    /// cannot be encoded (e.g. a non-object status) becomes a terminal
    /// failure: running the same code again would produce it again.
    pub fn complete(&self, result: Result<Outcome, HandlerError>) -> pb::StageComplete {
        match result.and_then(|outcome| self.encode_outcome(outcome)) {
            Ok(complete) => complete,
            Err(error) => {
                let mut complete = self.blank_complete();
                // A detail that is not an object cannot travel; the event
                // still does (the failure matters more than its detail).
                complete.events = error
                    .events()
                    .iter()
                    .enumerate()
                    .map(|(i, e)| event_to_proto(e.clone(), i).unwrap_or_else(|_| event_without_detail(e.clone())))
                    .collect();
                complete.error = Some(pb::TaskError {
                    message: if error.message().is_empty() {
                        "handler failed without a message".to_owned()
                    } else {
                        error.message().to_owned()
                    },
                    terminal: error.is_terminal(),
                    reason: error.reason().to_owned(),
                });
                complete
            }
        }
    }

    fn encode_outcome(&self, outcome: Outcome) -> Result<pb::StageComplete, HandlerError> {
        let invalid =
            |e: NotAnObject| HandlerError::terminal(format!("invalid outcome: {e}")).with_reason("InvalidOutcome");
        let mut complete = self.blank_complete();
        complete.status = optional_object(outcome.status, "status").map_err(invalid)?;
        complete.operation_output = optional_object(outcome.operation_output, "operation_output").map_err(invalid)?;
        complete.conditions = outcome
            .conditions
            .into_iter()
            .map(|c| pb::Condition {
                r#type: c.condition_type,
                status: condition_status_to_proto(c.status),
                reason: c.reason,
                message: c.message,
                liveness: c.liveness.map(duration_to_proto),
            })
            .collect();
        complete.events = outcome
            .events
            .into_iter()
            .enumerate()
            .map(|(i, e)| event_to_proto(e, i))
            .collect::<Result<_, _>>()
            .map_err(invalid)?;
        // A compose result replaces the previous composition, so a composer
        // always sends one (empty = prune all); other stages only if set.
        let is_compose = self.stage == pb::Stage::Compose as i32;
        if is_compose || !outcome.children.is_empty() || !outcome.edges.is_empty() || !outcome.configs.is_empty() {
            complete.compose_result = Some(pb::ComposeResult {
                desired: outcome
                    .children
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| child_to_proto(c, i))
                    .collect::<Result<_, _>>()
                    .map_err(invalid)?,
                edges: outcome.edges.into_iter().map(edge_to_proto).collect(),
                configs: outcome
                    .configs
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| config_spec_to_proto(c, i))
                    .collect::<Result<_, _>>()
                    .map_err(invalid)?,
            });
        }
        complete.healthy = outcome.healthy;
        complete.requeue_after = outcome.requeue_after.filter(|d| !d.is_zero()).map(duration_to_proto);
        Ok(complete)
    }
}

/// A domain condition from its protobuf form (used by tests and tools that
/// read completions back).
pub fn condition_from_proto(c: pb::Condition) -> Condition {
    Condition {
        condition_type: c.r#type,
        status: condition_status_from_proto(c.status),
        reason: c.reason,
        message: c.message,
        liveness: c.liveness.as_ref().map(duration_from_proto).filter(|d| !d.is_zero()),
    }
}

/// The protobuf form of the `index`th reported event.
fn event_to_proto(mut event: Event, index: usize) -> Result<pb::WorkerEvent, NotAnObject> {
    let detail = optional_object(event.detail.take(), &format!("events[{index}].detail"))?;
    Ok(pb::WorkerEvent {
        detail,
        ..event_without_detail(event)
    })
}

/// The protobuf form of an event, leaving its detail out.
fn event_without_detail(event: Event) -> pb::WorkerEvent {
    pb::WorkerEvent {
        category: event.category,
        r#type: match event.event_type {
            EventType::Normal => pb::EventType::Normal,
            EventType::Warning => pb::EventType::Warning,
        } as i32,
        reason: event.reason,
        message: event.message,
        detail: None,
    }
}

/// The domain pair of a protobuf pair.
pub fn kind_from_proto(kv: &pb::KindVersion) -> KindVersion {
    KindVersion::new(kv.kind.clone(), kv.kind_version)
}

/// The protobuf pair of a domain pair.
pub fn kind_to_proto(kv: &KindVersion) -> pb::KindVersion {
    pb::KindVersion {
        kind: kv.kind.clone(),
        kind_version: kv.version,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn struct_round_trip_restores_integers() {
        let original = json!({"count": 5, "ratio": 0.5, "big": -42, "list": [1, "a", null, true], "nested": {"x": 1}});
        let wire = json_to_struct(original.clone(), "spec").unwrap();
        assert_eq!(struct_to_json(wire), original);
    }

    #[test]
    fn non_finite_numbers_become_null() {
        let v = prost_types::Value {
            kind: Some(prost_types::value::Kind::NumberValue(f64::NAN)),
        };
        assert_eq!(converge_proto::json::value_to_json(v), Value::Null);
        assert_eq!(converge_proto::json::number_to_json(1e300), json!(1e300));
    }

    /// The fence of a work task.
    fn work_fence() -> Fence {
        Fence {
            lease_token: "l".into(),
            claim_epoch: 1,
            stage: pb::Stage::Work as i32,
            generation: 2,
            manifest_version: 3,
        }
    }

    #[test]
    fn non_object_status_is_a_terminal_failure() {
        let fence = work_fence();
        let complete = fence.complete(Ok(Outcome::new().with_status(json!(5))));
        let error = complete.error.unwrap();
        assert!(error.terminal);
        assert!(
            error.message.contains("status must be a JSON object"),
            "{}",
            error.message
        );
        assert_eq!(complete.lease_token, "l");
        assert_eq!(complete.manifest_version, 3);
    }

    #[test]
    fn compose_always_sends_a_compose_result() {
        let mut fence = Fence {
            stage: pb::Stage::Compose as i32,
            ..work_fence()
        };
        assert!(fence.complete(Ok(Outcome::new())).compose_result.is_some());
        fence.stage = pb::Stage::Work as i32;
        assert!(fence.complete(Ok(Outcome::new())).compose_result.is_none());
    }

    #[test]
    fn events_and_liveness_travel_with_successes_and_failures() {
        let fence = work_fence();
        let outcome = Outcome::new()
            .with_condition(
                Condition::new("Reachable", ConditionStatus::True).with_liveness(Duration::from_millis(2500)),
            )
            .with_event(
                Event::warning("ProbeSlow", "slow")
                    .with_category("probe")
                    .with_detail(json!({"ms": 900})),
            );
        let complete = fence.complete(Ok(outcome));
        assert_eq!(
            complete.conditions[0].liveness,
            Some(prost_types::Duration {
                seconds: 2,
                nanos: 500_000_000
            })
        );
        assert_eq!(
            condition_from_proto(complete.conditions[0].clone()).liveness,
            Some(Duration::from_millis(2500))
        );
        let event = &complete.events[0];
        assert_eq!(
            (event.category.as_str(), event.r#type, event.reason.as_str()),
            ("probe", pb::EventType::Warning as i32, "ProbeSlow")
        );
        assert!(event.detail.is_some());

        // A detail that is not an object: refused with a success, dropped
        // (event kept) with a failure.
        let bad = Event::normal("Tried", "once").with_detail(json!([1]));
        let refused = fence.complete(Ok(Outcome::new().with_event(bad.clone())));
        assert!(refused.error.is_some_and(|e| e.message.contains("events[0].detail")));
        let failed = fence.complete(Err(HandlerError::transient("down").with_event(bad)));
        assert_eq!(failed.events.len(), 1);
        assert_eq!(failed.events[0].reason, "Tried");
        assert!(failed.events[0].detail.is_none());
    }

    #[test]
    fn negative_durations_clamp_to_zero() {
        let d = prost_types::Duration { seconds: -1, nanos: 0 };
        assert_eq!(duration_from_proto(&d), Duration::ZERO);
        let d = prost_types::Duration {
            seconds: 1,
            nanos: 500_000_000,
        };
        assert_eq!(duration_from_proto(&d), Duration::from_millis(1500));
    }
}
