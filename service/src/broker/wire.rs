//! Conversions between the worker contract and the broker's types: the
//! StageTask of each stage, and the parts of a StageComplete.

use std::collections::BTreeMap;

use converge_proto::worker_v1 as wpb;
use converge_proto::worker_v1::work_stream_response::Payload as Down;
use serde_json::{Value, json};

use converge_proto::json;

use crate::contract::convert::{json_to_struct, timestamp};
use crate::domain::composition::{ChildSpec, ConfigSpec, Edge, Stage, ValueFlow};
use crate::domain::event::{
    EventType, MAX_DETAIL_BYTES, MAX_MESSAGE_CHARS, MAX_REPORTED_EVENTS, ReportedEvent, WORKER_CATEGORY,
    category_problem, reason_problem,
};
use crate::domain::names::first_chars;
use crate::domain::provider_config::ProviderConfig;
use crate::domain::reactor::Transition;
use crate::domain::resource::{ConditionInput, ConditionStatus, MAX_LIVENESS_MS, MIN_LIVENESS_MS, ResourceRef};
use crate::domain::violation::Violation;
use crate::store::operations::ClaimedOperation;
use crate::store::pipeline::{EdgeRow, MemberRow};
use crate::store::plans::ClaimedPlan;
use crate::store::reactors::ClaimedDelivery;
use crate::store::work::{CONFIG_CHANGE, ClaimedTask};

/// The stage-specific input of a task.
pub enum Input {
    /// Compose: the current children, edges and owned configs.
    Compose {
        /// Children as stored.
        observed: Vec<MemberRow>,
        /// Edges as stored.
        edges: Vec<EdgeRow>,
        /// Configs the resource owns.
        configs: Vec<ProviderConfig>,
    },
    /// Work: the status so far.
    Work(Option<Value>),
    /// Rollup: the settled subtree and the status so far.
    Rollup {
        /// The subtree.
        descendants: Vec<MemberRow>,
        /// Status so far.
        status: Option<Value>,
    },
    /// Delete: the finalizer the teardown clears.
    Delete {
        /// The finalizer.
        finalizer: String,
    },
}

/// The StageTask message of one dispatch.
pub fn stage_task(
    task: &ClaimedTask,
    reaction: &str,
    input: Input,
    trace_context: std::collections::BTreeMap<String, String>,
) -> wpb::WorkStreamResponse {
    let status = task.status.as_ref().and_then(|s| json_to_struct(&s.0));
    let resource = wpb::Resource {
        uid: task.resource_id.to_string(),
        kind: task.kind.clone(),
        kind_version: task.kind_version,
        name: task.name.clone(),
        labels: task.labels.0.clone(),
        spec: json_to_struct(&task.spec.0),
        status,
        generation: task.generation,
        observed_generation: task.synced_gen,
        ready: task.synced_gen >= task.generation && task.health_ok,
        healthy: task.health_ok,
        finalizers: task.finalizers.clone(),
        delete_time: task.deletion_requested_at.map(timestamp),
        ..Default::default()
    };
    let deadline = task.deadline_secs.map(duration);
    let (stage, trigger, input) = match input {
        Input::Compose {
            observed,
            edges,
            configs,
        } => (
            wpb::Stage::Compose,
            if task.is_resync() {
                wpb::Trigger::Resync
            } else {
                wpb::Trigger::SpecChange
            },
            wpb::stage_task::Input::ComposeInput(compose_input(observed, edges, configs)),
        ),
        Input::Work(status) => (
            wpb::Stage::Work,
            reconcile_trigger(task),
            wpb::stage_task::Input::WorkInput(wpb::WorkInput {
                status: status.as_ref().and_then(json_to_struct),
            }),
        ),
        Input::Rollup { descendants, status } => (
            wpb::Stage::Rollup,
            wpb::Trigger::ChildrenSettled,
            wpb::stage_task::Input::RollupInput(wpb::RollupInput {
                descendants: descendants.into_iter().map(member).collect(),
                status: status.as_ref().and_then(json_to_struct),
            }),
        ),
        Input::Delete { finalizer } => (
            wpb::Stage::Delete,
            wpb::Trigger::DeleteRequested,
            wpb::stage_task::Input::DeleteInput(wpb::DeleteInput { finalizer }),
        ),
    };
    wpb::WorkStreamResponse {
        payload: Some(Down::Task(wpb::StageTask {
            stage: stage.into(),
            kind: task.kind.clone(),
            kind_version: task.kind_version,
            resource: Some(resource),
            generation: task.generation,
            reaction: reaction.to_owned(),
            trigger: trigger.into(),
            lease_token: task.lease_token.to_string(),
            claim_epoch: task.claim_epoch,
            manifest_version: task.manifest_version,
            task_deadline: deadline,
            attempt: task.attempts,
            provider_config: task.config_spec.as_ref().and_then(|s| json_to_struct(&s.0)),
            provider_bundle: task.config_data.clone().unwrap_or_default(),
            trace_context,
            plan: false,
            input: Some(input),
        })),
    }
}

/// A compose task's input: the stored children (also as the desired ones,
/// which they are), edges and owned configs.
fn compose_input(observed: Vec<MemberRow>, edges: Vec<EdgeRow>, configs: Vec<ProviderConfig>) -> wpb::ComposeInput {
    wpb::ComposeInput {
        desired: observed.iter().map(child_of).collect(),
        observed: observed.into_iter().map(member).collect(),
        edges: edges.into_iter().map(edge_of).collect(),
        configs: configs.into_iter().map(config_of).collect(),
    }
}

/// What a plan's compose task carries besides the request.
pub struct PlanInput {
    /// The compose reaction.
    pub reaction: String,
    /// The manifest the reaction was chosen from.
    pub manifest_version: i64,
    /// The stored children, edges and owned configs (none for a resource
    /// that would be created).
    pub observed: Vec<MemberRow>,
    /// Edges as stored.
    pub edges: Vec<EdgeRow>,
    /// Configs it owns.
    pub configs: Vec<ProviderConfig>,
    /// The proposed provider config override, as stored now.
    pub config_override: Option<ProviderConfig>,
}

/// The COMPOSE task of a plan (`StageTask.plan`): the proposed resource,
/// fenced by the request's id as lease token and claim epoch 0.
pub fn plan_task(request: &ClaimedPlan, input: PlanInput) -> wpb::WorkStreamResponse {
    let resource = wpb::Resource {
        uid: request.resource_id.map(|id| id.to_string()).unwrap_or_default(),
        kind: request.kind.clone(),
        kind_version: request.kind_version,
        name: request.name.clone(),
        labels: request.labels.0.clone(),
        spec: json_to_struct(&request.spec.0),
        status: request.status.as_ref().and_then(|s| json_to_struct(&s.0)),
        generation: request.generation,
        ..Default::default()
    };
    let (provider_config, provider_bundle) = match input.config_override {
        Some(config) => (json_to_struct(&config.spec), config.data),
        None => (None, Vec::new()),
    };
    wpb::WorkStreamResponse {
        payload: Some(Down::Task(wpb::StageTask {
            stage: wpb::Stage::Compose.into(),
            kind: request.kind.clone(),
            kind_version: request.kind_version,
            resource: Some(resource),
            generation: request.generation,
            reaction: input.reaction,
            trigger: wpb::Trigger::SpecChange.into(),
            lease_token: request.id.to_string(),
            claim_epoch: 0,
            manifest_version: input.manifest_version,
            task_deadline: Some(duration(request.remaining_secs.max(0.001))),
            attempt: 1,
            provider_config,
            provider_bundle,
            trace_context: Default::default(),
            plan: true,
            input: Some(wpb::stage_task::Input::ComposeInput(compose_input(
                input.observed,
                input.edges,
                input.configs,
            ))),
        })),
    }
}

/// The trigger of a reconcile's work stage: a spec change, unless the task
/// was queued because the resource's provider config changed or by the
/// kind's periodic resync.
fn reconcile_trigger(task: &ClaimedTask) -> wpb::Trigger {
    match task.cause.as_deref() {
        Some(CONFIG_CHANGE) => wpb::Trigger::ConfigChange,
        _ if task.is_resync() => wpb::Trigger::Resync,
        _ => wpb::Trigger::SpecChange,
    }
}

/// A resource as a worker sees it, from its row as JSON (a
/// `resource_snapshot`, with `ownerRef` and `rootRef`).
fn resource_of_row(row: &Value) -> wpb::Resource {
    let text = |key: &str| row.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    let int = |key: &str| row.get(key).and_then(Value::as_i64).unwrap_or_default();
    let reference = |key: &str| {
        row.get(key).filter(|r| r.is_object()).map(|r| wpb::ResourceRef {
            kind: r.get("kind").and_then(Value::as_str).unwrap_or_default().to_owned(),
            name: r.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
        })
    };
    let time = |key: &str| {
        row.get(key)
            .and_then(Value::as_str)
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| timestamp(t.with_timezone(&chrono::Utc)))
    };
    let frozen = row.get("frozen_until").and_then(Value::as_str);
    let quarantined = frozen == Some("infinity");
    let labels = row
        .get("labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    wpb::Resource {
        uid: text("id"),
        kind: text("kind"),
        kind_version: i32::try_from(int("kind_version")).unwrap_or(1),
        name: text("name"),
        labels,
        spec: row.get("spec").and_then(json_to_struct),
        status: row.get("status").and_then(json_to_struct),
        generation: int("generation"),
        observed_generation: int("synced_gen"),
        ready: row.get("is_ready").and_then(Value::as_bool).unwrap_or(false),
        healthy: row.get("health_ok").and_then(Value::as_bool).unwrap_or(true),
        owner: reference("ownerRef"),
        root: reference("rootRef"),
        finalizers: row
            .get("finalizers")
            .and_then(Value::as_array)
            .map(|f| f.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default(),
        delete_time: time("deletion_requested_at"),
        orphan_expire_time: if quarantined { None } else { time("frozen_until") },
        quarantined,
    }
}

/// The StageTask of a reactor delivery: STAGE_REACT for the reactor kind,
/// with the watched resource as it was at the transition.
pub fn react_task(delivery: &ClaimedDelivery, reaction: &str) -> wpb::WorkStreamResponse {
    let transition = match Transition::from_db(&delivery.transition) {
        Some(Transition::Created) => wpb::Transition::Created,
        Some(Transition::Synced) => wpb::Transition::Synced,
        Some(Transition::Degraded) => wpb::Transition::Degraded,
        Some(Transition::Failed) => wpb::Transition::Failed,
        Some(Transition::Deleted) => wpb::Transition::Deleted,
        None => wpb::Transition::Unspecified,
    };
    wpb::WorkStreamResponse {
        payload: Some(Down::Task(wpb::StageTask {
            stage: wpb::Stage::React.into(),
            kind: delivery.reactor.clone(),
            kind_version: delivery.reactor_version,
            resource: Some(resource_of_row(&delivery.resource.0)),
            generation: delivery.generation,
            reaction: reaction.to_owned(),
            trigger: wpb::Trigger::Reactor.into(),
            lease_token: delivery.lease_token.to_string(),
            claim_epoch: delivery.claim_epoch,
            manifest_version: delivery.manifest_version,
            task_deadline: delivery.deadline_secs.map(duration),
            attempt: delivery.attempts,
            provider_config: None,
            provider_bundle: Vec::new(),
            trace_context: Default::default(),
            plan: false,
            input: Some(wpb::stage_task::Input::ReactInput(wpb::ReactInput {
                transition: transition.into(),
                dedup_token: delivery.dedup_token.clone(),
                binding: delivery.binding.clone(),
            })),
        })),
    }
}

/// The StageTask of an operation: STAGE_OPERATE running `reaction` (the
/// verb's) on the resource as it was at the claim, with its override.
pub fn operate_task(operation: &ClaimedOperation, reaction: &str) -> wpb::WorkStreamResponse {
    wpb::WorkStreamResponse {
        payload: Some(Down::Task(wpb::StageTask {
            stage: wpb::Stage::Operate.into(),
            kind: operation.kind.clone(),
            kind_version: operation.kind_version,
            resource: Some(resource_of_row(&operation.resource.0)),
            generation: operation.generation,
            reaction: reaction.to_owned(),
            trigger: wpb::Trigger::Operation.into(),
            lease_token: operation.lease_token.to_string(),
            claim_epoch: operation.claim_epoch,
            manifest_version: operation.manifest_version,
            task_deadline: operation.deadline_secs.map(duration),
            attempt: operation.attempts,
            provider_config: operation.config_spec.as_ref().and_then(|s| json_to_struct(&s.0)),
            provider_bundle: operation.config_data.clone().unwrap_or_default(),
            trace_context: Default::default(),
            plan: false,
            input: Some(wpb::stage_task::Input::OperateInput(wpb::OperateInput {
                operation: Some(wpb::Operation {
                    uid: operation.operation_id.to_string(),
                    verb: operation.verb.clone(),
                    input: operation.input.as_ref().and_then(|i| json_to_struct(&i.0)),
                    attempts: operation.attempts,
                    requested_by: operation.requested_by.clone(),
                }),
            })),
        })),
    }
}

/// A task deadline in seconds as a protobuf duration; never zero (a real
/// deadline that has just passed is still a deadline).
fn duration(secs: f64) -> prost_types::Duration {
    let secs = secs.max(0.001);
    prost_types::Duration {
        seconds: secs.trunc() as i64,
        nanos: (secs.fract() * 1e9) as i32,
    }
}

fn member(row: MemberRow) -> wpb::Resource {
    let reference = |kind: Option<String>, name: Option<String>| match (kind, name) {
        (Some(kind), Some(name)) => Some(wpb::ResourceRef { kind, name }),
        _ => None,
    };
    wpb::Resource {
        uid: row.id.to_string(),
        kind: row.kind,
        kind_version: row.kind_version,
        name: row.name,
        labels: row.labels.0,
        spec: json_to_struct(&row.spec.0),
        status: row.status.as_ref().and_then(|s| json_to_struct(&s.0)),
        generation: row.generation,
        observed_generation: row.synced_gen,
        ready: row.is_ready,
        healthy: row.health_ok,
        owner: reference(row.owner_kind, row.owner_name),
        root: reference(row.root_kind, row.root_name),
        finalizers: row.finalizers,
        delete_time: row.deletion_requested_at.map(timestamp),
        orphan_expire_time: row.frozen_until.map(timestamp),
        quarantined: row.quarantined,
    }
}

fn child_of(row: &MemberRow) -> wpb::ChildSpec {
    wpb::ChildSpec {
        kind: row.kind.clone(),
        kind_version: row.kind_version,
        name: row.name.clone(),
        labels: row.labels.0.clone(),
        spec: json_to_struct(&row.spec.0),
        provider_config: row.provider_config.clone().unwrap_or_default(),
    }
}

/// A stored config as a composer's input shows it.
fn config_of(config: ProviderConfig) -> wpb::ProviderConfigSpec {
    wpb::ProviderConfigSpec {
        spec: json_to_struct(&config.spec),
        name: config.name,
        kind: config.kind,
        kind_version: config.kind_version,
        is_default: config.is_default,
        data: config.data,
    }
}

fn edge_of(row: EdgeRow) -> wpb::DepEdge {
    wpb::DepEdge {
        dependent: Some(wpb::ResourceRef {
            kind: row.dependent_kind,
            name: row.dependent_name,
        }),
        dependency: Some(wpb::ResourceRef {
            kind: row.dependency_kind,
            name: row.dependency_name,
        }),
        value_flows: row
            .value_flows
            .0
            .into_iter()
            .map(|f| wpb::ValueFlow {
                dependent_field: f.dependent,
                source_field: f.source,
            })
            .collect(),
    }
}

/// A worker's report that a stage failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerFailure {
    /// What went wrong (storable; never empty).
    pub message: String,
    /// The worker's reason, when it gave one.
    pub reason: Option<String>,
    /// Whether retrying cannot help.
    pub terminal: bool,
}

/// A task's `StageComplete` decoded once, where it arrives: every part in
/// domain form, or the violations that refuse it.
#[derive(Debug)]
pub struct StageResult {
    /// The stage the worker says it finished.
    pub stage: Option<Stage>,
    /// The events it reported.
    pub events: Result<Vec<ReportedEvent>, Vec<Violation>>,
    /// Its failure report, if the stage failed.
    pub failure: Option<WorkerFailure>,
    /// The status it wrote, if any.
    pub status: Result<Option<Value>, Violation>,
    /// The conditions it set.
    pub conditions: Result<Vec<ConditionInput>, Vec<Violation>>,
    /// Whether it reported the resource healthy (`healthy`, else its
    /// `Ready` condition).
    pub healthy: Option<bool>,
    /// The delay it asked to run again after, in milliseconds.
    pub requeue_after_ms: Option<i64>,
    /// A composer's result.
    pub composition: Option<Composition>,
}

impl StageResult {
    /// Decodes `complete`; events are recorded as `actor`'s.
    pub fn decode(complete: wpb::StageComplete, actor: &str) -> Self {
        let healthy = health(&complete);
        let requeue_after_ms = requeue_after_ms(&complete);
        let stage = stage_of(&complete);
        let events = events(&complete.events, actor);
        let conditions = conditions(&complete.conditions);
        let failure = complete.error.map(|error| WorkerFailure {
            message: if error.message.is_empty() {
                "the worker reported a failure without a message".to_owned()
            } else {
                text(&error.message)
            },
            reason: Some(text(&error.reason)).filter(|r| !r.is_empty()),
            terminal: error.terminal,
        });
        let status = complete
            .status
            .map(json::storable_struct_to_json)
            .transpose()
            .map_err(|e| Violation::new(format!("/status{}", e.pointer()), e.description()));
        Self {
            stage,
            events,
            failure,
            status,
            conditions,
            healthy,
            requeue_after_ms,
            composition: complete.compose_result.map(composition),
        }
    }

    /// The outcome as the stage metric labels it.
    pub fn outcome(&self) -> &'static str {
        match &self.failure {
            Some(failure) if failure.terminal => "failed",
            Some(_) => "retrying",
            None if self.requeue_after_ms.is_some() => "requeued",
            None => "succeeded",
        }
    }
}

/// A compose result in domain form.
#[derive(Debug, Default)]
pub struct Composition {
    /// The desired children.
    pub children: Vec<ChildSpec>,
    /// The edges among them.
    pub edges: Vec<Edge>,
    /// The provider configs the resource should own.
    pub configs: Vec<ConfigSpec>,
    /// Specs (of children or configs) that have no storable JSON form.
    pub unstorable: Vec<Violation>,
}

/// A worker's spec as it can be stored (absent = an empty object); one
/// that cannot be is noted in `problems` under `field` and read as empty.
fn storable_spec(spec: Option<prost_types::Struct>, field: &str, problems: &mut Vec<Violation>) -> Value {
    match spec.map(json::storable_struct_to_json).transpose() {
        Ok(spec) => spec.unwrap_or_else(|| json!({})),
        Err(e) => {
            problems.push(Violation::new(format!("{field}{}", e.pointer()), e.description()));
            json!({})
        }
    }
}

/// The parts of a compose result, in domain form.
pub fn composition(result: wpb::ComposeResult) -> Composition {
    let mut problems = Vec::new();
    let configs = result
        .configs
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let spec = storable_spec(c.spec, &format!("/compose_result/configs/{i}/spec"), &mut problems);
            ConfigSpec {
                name: c.name,
                kind: c.kind,
                kind_version: c.kind_version,
                is_default: c.is_default,
                spec,
                data: c.data,
            }
        })
        .collect();
    let children = result
        .desired
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let spec = storable_spec(c.spec, &format!("/compose_result/desired/{i}/spec"), &mut problems);
            ChildSpec {
                kind: c.kind,
                kind_version: c.kind_version,
                name: c.name,
                labels: c.labels.into_iter().collect::<BTreeMap<_, _>>(),
                spec,
                provider_config: Some(c.provider_config).filter(|p| !p.is_empty()),
            }
        })
        .collect();
    let reference = |r: Option<wpb::ResourceRef>| {
        let r = r.unwrap_or_default();
        ResourceRef {
            kind: r.kind,
            name: r.name,
        }
    };
    let edges = result
        .edges
        .into_iter()
        .map(|e| Edge {
            dependent: reference(e.dependent),
            dependency: reference(e.dependency),
            flows: e
                .value_flows
                .into_iter()
                .map(|f| ValueFlow {
                    dependent: f.dependent_field,
                    source: f.source_field,
                })
                .collect(),
        })
        .collect();
    Composition {
        children,
        edges,
        configs,
        unstorable: problems,
    }
}

/// The reported conditions as the store takes them, or what is wrong with
/// them (a liveness window out of range).
pub fn conditions(conditions: &[wpb::Condition]) -> Result<Vec<ConditionInput>, Vec<Violation>> {
    let mut problems = Vec::new();
    let checked = conditions
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let status = match wpb::ConditionStatus::try_from(c.status) {
                Ok(wpb::ConditionStatus::True) => ConditionStatus::True,
                Ok(wpb::ConditionStatus::False) => ConditionStatus::False,
                _ => ConditionStatus::Unknown,
            };
            let liveness_ms = c.liveness.as_ref().map(duration_ms).filter(|ms| *ms != 0);
            if let Some(ms) = liveness_ms
                && !(MIN_LIVENESS_MS..=MAX_LIVENESS_MS).contains(&ms)
            {
                problems.push(Violation::new(
                    format!("/conditions/{i}/liveness"),
                    format!("must be between 1 s and 24 h, not {ms} ms"),
                ));
            }
            ConditionInput {
                type_: text(&c.r#type),
                status: status.as_db(),
                reason: text(&c.reason),
                message: text(&c.message),
                liveness_ms,
            }
        })
        .collect();
    if problems.is_empty() {
        Ok(checked)
    } else {
        Err(problems)
    }
}

/// A protobuf duration in whole milliseconds, saturating; a negative one
/// reads as negative.
fn duration_ms(d: &prost_types::Duration) -> i64 {
    d.seconds
        .saturating_mul(1000)
        .saturating_add(i64::from(d.nanos / 1_000_000))
}

/// The reported events as the store records them, attributed to `actor`,
/// or every problem with them (then none is recorded).
pub fn events(events: &[wpb::WorkerEvent], actor: &str) -> Result<Vec<ReportedEvent>, Vec<Violation>> {
    if events.len() > MAX_REPORTED_EVENTS {
        return Err(vec![Violation::new(
            "/events",
            format!("at most {MAX_REPORTED_EVENTS} events per outcome, not {}", events.len()),
        )]);
    }
    let mut problems = Vec::new();
    let mut checked = Vec::with_capacity(events.len());
    for (i, e) in events.iter().enumerate() {
        if let Some(problem) = category_problem(&e.category) {
            problems.push(Violation::new(format!("/events/{i}/category"), problem));
        }
        if let Some(problem) = reason_problem(&e.reason) {
            problems.push(Violation::new(format!("/events/{i}/reason"), problem));
        }
        let detail = match e.detail.clone().map(json::storable_struct_to_json) {
            None => None,
            Some(Err(err)) => {
                problems.push(Violation::new(
                    format!("/events/{i}/detail{}", err.pointer()),
                    err.description(),
                ));
                None
            }
            Some(Ok(detail)) => {
                let bytes = detail.to_string().len();
                if bytes > MAX_DETAIL_BYTES {
                    problems.push(Violation::new(
                        format!("/events/{i}/detail"),
                        format!("at most {MAX_DETAIL_BYTES} bytes as JSON, not {bytes}"),
                    ));
                }
                Some(detail)
            }
        };
        let type_ = match wpb::EventType::try_from(e.r#type) {
            Ok(wpb::EventType::Warning) => EventType::Warning,
            _ => EventType::Normal,
        };
        checked.push(ReportedEvent {
            category: if e.category.is_empty() {
                WORKER_CATEGORY.to_owned()
            } else {
                e.category.clone()
            },
            type_: type_.as_db(),
            reason: e.reason.clone(),
            message: text(first_chars(&e.message, MAX_MESSAGE_CHARS)),
            detail,
            actor: actor.to_owned(),
        });
    }
    if problems.is_empty() {
        Ok(checked)
    } else {
        Err(problems)
    }
}

/// Health as reported: explicit, else from a Ready condition, else unknown.
pub fn health(complete: &wpb::StageComplete) -> Option<bool> {
    complete.healthy.or_else(|| {
        complete.conditions.iter().rev().find(|c| c.r#type == "Ready").and_then(
            |c| match wpb::ConditionStatus::try_from(c.status) {
                Ok(wpb::ConditionStatus::True) => Some(true),
                Ok(wpb::ConditionStatus::False) => Some(false),
                _ => None,
            },
        )
    })
}

/// The stage a completion says it finished.
pub fn stage_of(complete: &wpb::StageComplete) -> Option<Stage> {
    match wpb::Stage::try_from(complete.stage) {
        Ok(wpb::Stage::Compose) => Some(Stage::Compose),
        Ok(wpb::Stage::Work) => Some(Stage::Work),
        Ok(wpb::Stage::Rollup) => Some(Stage::Rollup),
        Ok(wpb::Stage::Delete) => Some(Stage::Delete),
        _ => None,
    }
}

/// The requeue delay in milliseconds, if one was asked for.
pub fn requeue_after_ms(complete: &wpb::StageComplete) -> Option<i64> {
    complete.requeue_after.as_ref().map(duration_ms).filter(|ms| *ms > 0)
}

/// A worker's diagnostic text as it can be stored: PostgreSQL text and JSON
/// cannot hold U+0000, so it becomes U+FFFD (the replacement character)
/// rather than failing the whole result.
pub fn text(s: &str) -> String {
    if s.contains('\0') {
        s.replace('\0', "\u{FFFD}")
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(category: &str, reason: &str) -> wpb::WorkerEvent {
        wpb::WorkerEvent {
            category: category.to_owned(),
            r#type: wpb::EventType::Warning as i32,
            reason: reason.to_owned(),
            message: "m".repeat(MAX_MESSAGE_CHARS + 5),
            detail: None,
        }
    }

    #[test]
    fn reported_events_get_the_worker_timeline_the_actor_and_a_cut_message() {
        let events = events(&[event("", "BucketCreated")], "worker:anonymous").expect("valid");
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].category, WORKER_CATEGORY);
        assert_eq!(events[0].type_, "Warning");
        assert_eq!(events[0].actor, "worker:anonymous");
        assert_eq!(events[0].message.chars().count(), MAX_MESSAGE_CHARS);
    }

    #[test]
    fn bad_events_are_refused_field_by_field() {
        let mut big = event("probe", "Probed");
        big.detail = Some(json::json_to_struct(&json!({"blob": "x".repeat(MAX_DETAIL_BYTES)})).expect("object"));
        let problems = events(
            &[event("lifecycle", "Created"), event("Bad_Cat", "lower"), big],
            "worker",
        )
        .expect_err("invalid");
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "/events/0/category",
                "/events/1/category",
                "/events/1/reason",
                "/events/2/detail"
            ]
        );
        let too_many = vec![event("", "Probed"); MAX_REPORTED_EVENTS + 1];
        assert_eq!(events(&too_many, "worker").expect_err("too many")[0].field, "/events");
    }

    #[test]
    fn a_liveness_window_is_kept_in_milliseconds_and_bounded() {
        let condition = |seconds: i64, nanos: i32| wpb::Condition {
            r#type: "Reachable".to_owned(),
            status: wpb::ConditionStatus::True as i32,
            liveness: Some(prost_types::Duration { seconds, nanos }),
            ..wpb::Condition::default()
        };
        let kept = conditions(&[condition(30, 500_000_000), condition(0, 0)]).expect("valid");
        assert_eq!(kept[0].liveness_ms, Some(30_500));
        assert_eq!(kept[1].liveness_ms, None, "zero = an ordinary condition");
        let refused = conditions(&[condition(0, 999_000_000), condition(86_401, 0)]).expect_err("out of range");
        let fields: Vec<&str> = refused.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(fields, ["/conditions/0/liveness", "/conditions/1/liveness"]);
    }
}
