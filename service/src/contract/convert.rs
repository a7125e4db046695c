//! Conversions between protobuf messages and domain types.

use chrono::{DateTime, Utc};
use converge_proto::json::JsonError;
use converge_proto::v1 as pb;
use serde_json::{Map, Value};

use super::status::{ApiError, Reason};
use crate::domain::event::{EventRun, EventType};
use crate::domain::explain::{Explanation, Named, TaskCause, TaskType, Wait, WaitCause};
use crate::domain::graph::{DependencyEdge, GraphNode, ValueFlow};
use crate::domain::provider_config::ProviderConfig;
use crate::domain::resource::{Condition, ConditionStatus, Phase, Resource, ResourceRef};
use crate::domain::violation::Violation;

pub use converge_proto::json::json_to_struct;

/// A request's `Struct` at `field` as a JSON object (absent → `{}`), with
/// integral numbers as integers. Values nested deeper than
/// [`converge_proto::json::MAX_DEPTH`] or holding U+0000 are refused with a
/// pointer under `field`.
pub fn struct_to_json(field: &str, value: Option<prost_types::Struct>) -> Result<Value, ApiError> {
    match value {
        Some(s) => converge_proto::json::storable_struct_to_json(s).map_err(|e| json_refusal(field, &e)),
        None => Ok(Value::Object(Map::new())),
    }
}

/// An optional request `Struct` as an optional JSON object, as [`struct_to_json`].
pub fn optional_struct_to_json(field: &str, value: Option<prost_types::Struct>) -> Result<Option<Value>, ApiError> {
    value.map(|s| struct_to_json(field, Some(s))).transpose()
}

/// The refusal of a `Struct` at `field` that has no storable JSON form.
pub fn json_refusal(field: &str, error: &JsonError) -> ApiError {
    let reason = match error {
        JsonError::TooDeep { .. } => Reason::NestingTooDeep,
        JsonError::NulCharacter { .. } => Reason::InvalidField,
    };
    ApiError::violations(
        reason,
        vec![Violation::new(
            format!("{field}{}", error.pointer()),
            error.description(),
        )],
    )
}

/// A database time as a protobuf timestamp.
pub fn timestamp(time: DateTime<Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: time.timestamp(),
        nanos: i32::try_from(time.timestamp_subsec_nanos()).unwrap_or(0),
    }
}

/// A protobuf timestamp as a time, or a violation naming `field`.
pub fn from_timestamp(field: &str, ts: &prost_types::Timestamp) -> Result<DateTime<Utc>, Violation> {
    u32::try_from(ts.nanos)
        .ok()
        .and_then(|nanos| DateTime::from_timestamp(ts.seconds, nanos))
        .ok_or_else(|| Violation::new(field, "is not a valid timestamp"))
}

/// The proto phase of a domain phase.
pub fn phase_to_proto(phase: Phase) -> pb::Phase {
    match phase {
        Phase::Ready => pb::Phase::Ready,
        Phase::Reconciling => pb::Phase::Reconciling,
        Phase::Degraded => pb::Phase::Degraded,
        Phase::Failed => pb::Phase::Failed,
        Phase::Deleting => pb::Phase::Deleting,
        Phase::Orphaned => pb::Phase::Orphaned,
        Phase::Quarantined => pb::Phase::Quarantined,
    }
}

/// The domain phases of a proto phase filter; UNSPECIFIED or unknown values
/// are refused.
pub fn phases_from_proto(field: &str, values: &[i32]) -> Result<Vec<Phase>, ApiError> {
    let mut phases = Vec::new();
    let mut violations = Vec::new();
    for (i, raw) in values.iter().enumerate() {
        let phase = match pb::Phase::try_from(*raw) {
            Ok(pb::Phase::Ready) => Phase::Ready,
            Ok(pb::Phase::Reconciling) => Phase::Reconciling,
            Ok(pb::Phase::Degraded) => Phase::Degraded,
            Ok(pb::Phase::Failed) => Phase::Failed,
            Ok(pb::Phase::Deleting) => Phase::Deleting,
            Ok(pb::Phase::Orphaned) => Phase::Orphaned,
            Ok(pb::Phase::Quarantined) => Phase::Quarantined,
            Ok(pb::Phase::Unspecified) | Err(_) => {
                violations.push(Violation::new(format!("{field}/{i}"), "is not a phase"));
                continue;
            }
        };
        if !phases.contains(&phase) {
            phases.push(phase);
        }
    }
    if violations.is_empty() {
        Ok(phases)
    } else {
        Err(ApiError::violations(Reason::InvalidField, violations))
    }
}

fn condition_status_to_proto(status: ConditionStatus) -> pb::ConditionStatus {
    match status {
        ConditionStatus::True => pb::ConditionStatus::True,
        ConditionStatus::False => pb::ConditionStatus::False,
        ConditionStatus::Unknown => pb::ConditionStatus::Unknown,
    }
}

fn condition_to_proto(condition: Condition) -> pb::Condition {
    pb::Condition {
        r#type: condition.type_,
        status: condition_status_to_proto(condition.status).into(),
        reason: condition.reason,
        message: condition.message,
        observed_generation: condition.observed_generation,
        last_transition_time: Some(timestamp(condition.last_transition_at)),
        update_time: Some(timestamp(condition.updated_at)),
        expire_time: condition.expires_at.map(timestamp),
    }
}

/// A resource reference as a proto message.
pub fn ref_to_proto(reference: ResourceRef) -> pb::ResourceRef {
    pb::ResourceRef {
        kind: reference.kind,
        name: reference.name,
    }
}

/// A resource as the API returns it. `manifest_version` is the hash of the
/// manifest in force for its kind version (0 when unknown).
pub fn resource_to_proto(resource: Resource, manifest_version: i64) -> pb::Resource {
    let etag = resource.etag();
    let conditions = resource
        .conditions_with_derived()
        .into_iter()
        .map(condition_to_proto)
        .collect();
    pb::Resource {
        uid: resource.id.to_string(),
        kind: resource.kind,
        kind_version: resource.kind_version,
        name: resource.name,
        labels: resource.labels.into_iter().collect(),
        spec: json_to_struct(&resource.spec),
        status: resource.status.as_ref().and_then(json_to_struct),
        generation: resource.generation,
        observed_generation: resource.synced_gen,
        resource_version: resource.position.to_string(),
        phase: phase_to_proto(resource.phase).into(),
        conditions,
        owner: resource.owner.map(ref_to_proto),
        root: resource.root.map(ref_to_proto),
        finalizers: resource.finalizers,
        create_time: Some(timestamp(resource.created_at)),
        update_time: Some(timestamp(resource.updated_at)),
        delete_time: resource.deletion_requested_at.map(timestamp),
        etag,
        healthy: resource.health_ok,
        failure_attempts: resource.failure_attempts,
        failed_generation: resource.failure_gen,
        quarantined: resource.quarantined,
        orphan_expire_time: resource.orphan_until.map(timestamp),
        provider_config: resource.provider_config.unwrap_or_default(),
        manifest_version,
    }
}

/// A composition-graph node as a proto message.
pub fn graph_node_to_proto(node: GraphNode) -> pb::GraphNode {
    pb::GraphNode {
        uid: node.id.to_string(),
        kind: node.kind,
        name: node.name,
        kind_version: node.kind_version,
        phase: phase_to_proto(node.phase).into(),
        owner: node.owner.map(ref_to_proto),
        generation: node.generation,
        observed_generation: node.synced_gen,
    }
}

fn value_flow_to_proto(flow: ValueFlow) -> pb::ValueFlow {
    pb::ValueFlow {
        dependent_field: flow.dependent_field,
        source_field: flow.source_field,
    }
}

/// A dependency edge as a proto message.
pub fn edge_to_proto(edge: DependencyEdge) -> pb::DependencyEdge {
    pb::DependencyEdge {
        dependent: Some(ref_to_proto(edge.dependent)),
        dependency: Some(ref_to_proto(edge.dependency)),
        value_flows: edge.value_flows.into_iter().map(value_flow_to_proto).collect(),
    }
}

/// The proto event type of a domain one.
pub fn event_type_to_proto(type_: EventType) -> pb::EventType {
    match type_ {
        EventType::Normal => pb::EventType::Normal,
        EventType::Warning => pb::EventType::Warning,
    }
}

/// An event run as the API returns it.
pub fn event_to_proto(run: EventRun) -> pb::ResourceEvent {
    pb::ResourceEvent {
        uid: run.id.to_string(),
        resource: Some(ref_to_proto(run.resource)),
        resource_uid: run.resource_id.to_string(),
        category: run.category,
        r#type: event_type_to_proto(run.type_).into(),
        reason: run.reason,
        message: run.message,
        detail: run.detail.as_ref().and_then(json_to_struct),
        count: run.count,
        first_time: Some(timestamp(run.first_at)),
        last_time: Some(timestamp(run.last_at)),
        actor: run.actor,
        generation: run.generation,
        event_version: run.position.to_string(),
    }
}

/// A provider config as a proto message.
pub fn provider_config_to_proto(config: ProviderConfig) -> pb::ProviderConfig {
    let etag = config.etag();
    pb::ProviderConfig {
        spec: json_to_struct(&config.spec),
        name: config.name,
        kind: config.kind,
        kind_version: config.kind_version,
        is_default: config.is_default,
        data: config.data,
        owner: config.owner.map(|o| pb::ResourceRef {
            kind: o.kind,
            name: o.name,
        }),
        create_time: Some(timestamp(config.created_at)),
        update_time: Some(timestamp(config.updated_at)),
        etag,
    }
}

fn task_type_to_proto(task: TaskType) -> i32 {
    match task {
        TaskType::Reconcile => pb::TaskType::Reconcile,
        TaskType::Teardown => pb::TaskType::Teardown,
    }
    .into()
}

fn task_cause_to_proto(cause: Option<TaskCause>) -> i32 {
    match cause {
        None => pb::TaskCause::Unspecified,
        Some(TaskCause::Change) => pb::TaskCause::Change,
        Some(TaskCause::Resync) => pb::TaskCause::Resync,
        Some(TaskCause::ResyncRecompose) => pb::TaskCause::ResyncRecompose,
        Some(TaskCause::ConfigChange) => pb::TaskCause::ConfigChange,
    }
    .into()
}

fn named_to_proto(list: Vec<Named>) -> Vec<pb::WaitingResource> {
    list.into_iter()
        .map(|n| pb::WaitingResource {
            r#ref: Some(ref_to_proto(n.reference)),
            phase: phase_to_proto(n.phase).into(),
        })
        .collect()
}

fn count_to_proto(n: i64) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// One wait as a proto message.
pub fn wait_to_proto(wait: Wait) -> pb::Wait {
    use pb::wait::Cause;
    let cause = match wait.cause {
        WaitCause::Dependencies { total, first } => Cause::Dependencies(pb::DependenciesWait {
            total: count_to_proto(total),
            first: named_to_proto(first),
        }),
        WaitCause::Children {
            total,
            progressing,
            by_phase,
            first,
        } => Cause::Children(pb::ChildrenWait {
            total: count_to_proto(total),
            progressing: count_to_proto(progressing),
            by_phase: by_phase
                .into_iter()
                .map(|(phase, count)| pb::PhaseCount {
                    phase: phase_to_proto(phase).into(),
                    count: count_to_proto(count),
                })
                .collect(),
            first: named_to_proto(first),
        }),
        WaitCause::NoWorker {
            kind,
            kind_version,
            unready_workers,
        } => Cause::NoWorker(pb::NoWorkerWait {
            kind,
            kind_version,
            unready_workers: count_to_proto(unready_workers),
        }),
        WaitCause::ConcurrencyCap { in_flight, limit } => Cause::ConcurrencyCap(pb::ConcurrencyCapWait {
            in_flight: count_to_proto(in_flight),
            limit,
        }),
        WaitCause::Queued {
            task,
            cause,
            eligible_at,
            claims,
        } => Cause::Queued(pb::QueuedWait {
            task: task_type_to_proto(task),
            cause: task_cause_to_proto(cause),
            eligible_time: Some(timestamp(eligible_at)),
            claims,
        }),
        WaitCause::Running {
            task,
            member,
            heartbeat_at,
            deadline_at,
            claims,
        } => Cause::Running(pb::RunningWait {
            task: task_type_to_proto(task),
            member,
            heartbeat_time: heartbeat_at.map(timestamp),
            deadline_time: deadline_at.map(timestamp),
            claims,
        }),
        WaitCause::Applying { task } => Cause::Applying(pb::ApplyingWait {
            task: task_type_to_proto(task),
        }),
        WaitCause::RetryBackoff {
            task,
            attempt,
            max_attempts,
            retry_at,
            last_error_reason,
            last_error,
        } => Cause::RetryBackoff(pb::RetryBackoffWait {
            task: task_type_to_proto(task),
            attempt,
            max_attempts,
            retry_time: Some(timestamp(retry_at)),
            last_error_reason,
            last_error,
        }),
        WaitCause::Requeued { task, retry_at } => Cause::Requeued(pb::RequeuedWait {
            task: task_type_to_proto(task),
            retry_time: Some(timestamp(retry_at)),
        }),
        WaitCause::Failed {
            task,
            generation,
            budget_exhausted,
            attempts,
            last_error_reason,
            last_error,
        } => Cause::Failed(pb::FailedWait {
            task: task_type_to_proto(task),
            generation,
            budget_exhausted,
            attempts,
            last_error_reason,
            last_error,
        }),
        WaitCause::Quarantined { since, message } => Cause::Quarantined(pb::QuarantinedWait {
            since_time: since.map(timestamp),
            message,
        }),
        WaitCause::Orphaned { owner, teardown_at } => Cause::Orphaned(pb::OrphanedWait {
            owner: owner.map(ref_to_proto),
            teardown_time: Some(timestamp(teardown_at)),
        }),
        WaitCause::Deletion {
            requested_at,
            dependents_total,
            dependents,
            children_total,
            children,
            finalizers,
        } => Cause::Deletion(pb::DeletionWait {
            delete_time: Some(timestamp(requested_at)),
            dependents_total: count_to_proto(dependents_total),
            dependents: named_to_proto(dependents),
            children_total: count_to_proto(children_total),
            children: named_to_proto(children),
            finalizers,
        }),
        WaitCause::ProviderConfigMissing { name } => {
            Cause::ProviderConfigMissing(pb::ProviderConfigMissingWait { name })
        }
        WaitCause::Unhealthy { false_conditions } => Cause::Unhealthy(pb::UnhealthyWait { false_conditions }),
        WaitCause::Unscheduled { since } => Cause::Unscheduled(pb::UnscheduledWait {
            since_time: Some(timestamp(since)),
        }),
    };
    pb::Wait {
        message: wait.message,
        cause: Some(cause),
    }
}

/// The answer of `ExplainResource`.
pub fn explanation_to_proto(
    resource: Resource,
    manifest_version: i64,
    explanation: Explanation,
) -> pb::ExplainResourceResponse {
    pb::ExplainResourceResponse {
        resource: Some(resource_to_proto(resource, manifest_version)),
        waiting_for: explanation.waits.into_iter().map(wait_to_proto).collect(),
        next_due_time: explanation.next_due.map(timestamp),
        read_time: Some(timestamp(explanation.read_at)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn structs_round_trip_through_json() {
        let doc = json!({"name": "a", "port": 80, "ratio": 0.5, "tags": ["x", null, true], "nested": {"k": {}}});
        let back = struct_to_json("/spec", json_to_struct(&doc)).ok();
        assert_eq!(back, Some(doc.clone()));
        assert!(
            back.is_some_and(|b| b["port"].is_i64()),
            "integral numbers stay integers"
        );
    }

    #[test]
    fn an_absent_struct_is_an_empty_object() {
        assert_eq!(struct_to_json("/spec", None).ok(), Some(json!({})));
    }

    #[test]
    fn unstorable_structs_are_refused_under_their_field() {
        let err = struct_to_json("/spec", json_to_struct(&json!({"a": "\u{0}"}))).err();
        let Some(ApiError::Refused { violations, reason, .. }) = err else {
            panic!("expected a refusal");
        };
        assert_eq!(reason, Reason::InvalidField);
        assert_eq!(violations[0].field, "/spec/a");
    }

    #[test]
    fn unspecified_phases_are_refused_by_position() {
        let err = phases_from_proto("/phases", &[pb::Phase::Ready as i32, 0, 99]).err();
        let Some(ApiError::Refused { violations, .. }) = err else {
            panic!("expected a refusal");
        };
        let fields: Vec<&str> = violations.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(fields, ["/phases/1", "/phases/2"]);
    }
}
