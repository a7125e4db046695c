//! Reconcile and teardown tasks on a worker stream: claiming them, walking
//! each reconcile through its pipeline (compose → work → rollup) under a
//! fresh fence per stage, running a teardown as a single delete stage, and
//! turning completions into the results the session writes in batches.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use converge_proto::worker_v1 as wpb;
use opentelemetry::KeyValue;
use serde_json::Value;

use super::{Held, MAX_OBSERVED_CHILDREN, MAX_ROLLUP_DESCENDANTS, Session, SessionError, refused};
use crate::broker::wire::{self, Composition, Input, StageResult, WorkerFailure};
use crate::domain::cel_composition::Member;
use crate::domain::compiled::Refusal;
use crate::domain::composition::{ChildSpec, ConfigSpec, Edge, Stage, StagePlan, validate_composition};
use crate::domain::event::ReportedEvent;
use crate::domain::resource::ConditionInput;
use crate::domain::shard::ShardRange;
use crate::domain::violation::Violation;
use crate::store::StoreError;
use crate::store::pipeline::{self, Composed, Desired, TaskFence};
use crate::store::provider_configs;
use crate::store::work::{ClaimedTask, TaskResult};
use crate::telemetry;

/// A task this stream holds, keyed by its current lease.
pub(super) struct InFlight {
    pub(super) task: ClaimedTask,
    pub(super) plan: Arc<StagePlan>,
    /// The stage dispatched; `None` for a lease adopted after a reconnect
    /// (the completion says which stage it finished).
    pub(super) stage: Option<Stage>,
    /// Status, conditions and events produced by earlier stages of this
    /// reconcile.
    pub(super) status: Option<Value>,
    pub(super) conditions: Vec<ConditionInput>,
    pub(super) events: Vec<ReportedEvent>,
    /// The reconcile's span when its trace is exported (disabled otherwise):
    /// the parent of the worker's handler spans and of each completion.
    pub(super) span: tracing::Span,
}

impl InFlight {
    /// A task about to run `stage` (`None`: a lease adopted after a
    /// reconnect, whose completion says which stage it finished).
    pub(super) fn new(task: ClaimedTask, plan: Arc<StagePlan>, stage: Option<Stage>) -> Self {
        Self {
            task,
            plan,
            stage,
            status: None,
            conditions: Vec::new(),
            events: Vec::new(),
            span: tracing::Span::none(),
        }
    }
}

/// The carrier of a dispatch's trace context: the reconcile's span, started
/// at its first dispatch as a child of the call that queued the work, when
/// tracing is on and that call was traced.
fn trace_context(flight: &mut InFlight) -> std::collections::BTreeMap<String, String> {
    if !telemetry::tracing_enabled() {
        return std::collections::BTreeMap::new();
    }
    if flight.span.is_disabled()
        && let Some(context) = &flight.task.trace_context
    {
        let span = tracing::info_span!(
            "reconcile",
            otel.name = format!("reconcile {}", flight.task.kind),
            otel.kind = "producer",
            converge.kind = %flight.task.kind,
            converge.resource = %flight.task.name,
            converge.generation = flight.task.generation,
            converge.attempt = flight.task.attempts,
        );
        telemetry::propagation::continue_from_text(&span, context);
        flight.span = span;
    }
    if flight.span.is_disabled() {
        return std::collections::BTreeMap::new();
    }
    telemetry::propagation::to_map(&flight.span)
}

impl Session {
    /// Claims and sends up to `free` reconcile and teardown tasks of
    /// (kind, version); returns how many were sent, or `None` if the stream
    /// is gone.
    pub(super) async fn dispatch_tasks(
        &mut self,
        kind: &str,
        version: i32,
        plan: &Arc<StagePlan>,
        free: usize,
        shards: Option<ShardRange>,
    ) -> Result<Option<usize>, StoreError> {
        let mut sent = 0;
        let claimed = self
            .broker
            .claims
            .take(
                &self.broker.pool,
                &self.broker.member_id,
                kind,
                version,
                free,
                shards,
                usize::try_from(self.broker.stats.connected.load(Ordering::Relaxed)).unwrap_or(0),
            )
            .await?;
        if claimed.is_empty() {
            return Ok(Some(0));
        }
        if let Some(m) = telemetry::metrics() {
            m.claims
                .add(claimed.len() as u64, &[KeyValue::new("converge.kind", kind.to_owned())]);
        }
        for task in claimed {
            // No silent fallback to the default: the override may point
            // at another account or region than the default does.
            if let Some(missing) = task.missing_config() {
                let message =
                    format!("provider config {missing:?} does not exist; apply it or detach it from the resource");
                self.results.push(TaskResult {
                    error: Some(message),
                    reason: Some("ProviderConfigMissing".to_owned()),
                    ..result_of(&InFlight::new(task, plan.clone(), None))
                });
                continue;
            }
            if task.is_teardown() {
                if !self.dispatch_teardown(task, plan).await? {
                    return Ok(None);
                }
                sent += 1;
                continue;
            }
            let first = plan.first(task.needs_compose());
            let flight = InFlight::new(task, plan.clone(), first);
            match first {
                // A child may have started progressing again since the
                // task was queued: the rollup waits for it.
                Some(Stage::Rollup)
                    if !pipeline::children_settled(&self.broker.pool, flight.task.resource_id).await? =>
                {
                    self.finish(&flight, None, false);
                }
                Some(stage) => {
                    if !self.send_stage(flight, stage).await? {
                        return Ok(None);
                    }
                    sent += 1;
                }
                // Nothing to run (e.g. a kind with only a teardown): done.
                None => self.finish(&flight, None, true),
            }
        }
        Ok(Some(sent))
    }

    /// Sends a teardown task (STAGE_DELETE running the reaction that clears
    /// the resource's finalizer). A finalizer no reaction of the kind clears
    /// has nothing to run: the task succeeds at once and the finalizer goes.
    /// False if the stream is gone.
    pub(super) async fn dispatch_teardown(
        &mut self,
        task: ClaimedTask,
        plan: &Arc<StagePlan>,
    ) -> Result<bool, StoreError> {
        let finalizer = task.teardown_finalizer().unwrap_or_default().to_owned();
        let flight = InFlight::new(task, plan.clone(), Some(Stage::Delete));
        if plan.teardown(&finalizer).is_none() {
            self.finish(&flight, None, true);
            return Ok(true);
        }
        self.send_stage(flight, Stage::Delete).await
    }

    /// Sends the task for `stage` (loading its input); false if the stream is gone.
    /// A stage the server runs itself (a data-declared composition's compose
    /// or rollup, ADR 49) is evaluated here instead, with no round trip.
    pub(super) async fn send_stage(&mut self, mut flight: InFlight, stage: Stage) -> Result<bool, StoreError> {
        if flight.plan.served_by_server(stage) {
            Box::pin(self.run_server_stage(flight, stage)).await?;
            return Ok(true);
        }
        let pool = &self.broker.pool;
        let id = flight.task.resource_id;
        let so_far = flight
            .status
            .clone()
            .or_else(|| flight.task.status.as_ref().map(|s| s.0.clone()));
        let input = match stage {
            Stage::Compose => Input::Compose {
                observed: pipeline::children(pool, id, MAX_OBSERVED_CHILDREN).await?,
                edges: pipeline::edges(pool, id).await?,
                configs: provider_configs::owned_by(pool, id).await?,
            },
            Stage::Work => Input::Work(so_far),
            Stage::Rollup => Input::Rollup {
                descendants: pipeline::descendants(pool, id, MAX_ROLLUP_DESCENDANTS).await?,
                status: so_far,
            },
            Stage::Delete => Input::Delete {
                finalizer: flight.task.teardown_finalizer().unwrap_or_default().to_owned(),
            },
        };
        let reaction = match stage {
            Stage::Delete => flight.task.teardown_finalizer().and_then(|f| flight.plan.teardown(f)),
            _ => flight.plan.reaction(stage),
        }
        .unwrap_or_default()
        .to_owned();
        let carrier = trace_context(&mut flight);
        let message = wire::stage_task(&flight.task, &reaction, input, carrier);
        flight.stage = Some(stage);
        // Tracked before sending: if the stream is gone, it is released with the others.
        self.held.insert(flight.task.lease_token, Held::Task(Box::new(flight)));
        if self.out.send(Ok(message)).await.is_err() {
            return Ok(false);
        }
        self.broker.stats.dispatched.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Runs a stage of a data-declared composition: the compose is applied
    /// exactly as a composer worker's result would be; the rollup ends the
    /// task with the status and health it derives. An evaluation error
    /// fails the generation terminally (the expressions are a function of
    /// the spec and the children: running again changes nothing until one
    /// of them does).
    async fn run_server_stage(&mut self, mut flight: InFlight, stage: Stage) -> Result<(), StoreError> {
        let task = &flight.task;
        let compiled = self
            .broker
            .catalog
            .current(&self.broker.pool, &task.kind, task.kind_version)
            .await;
        let composition = match compiled.map(|c| c.composition.clone()) {
            Some(Some(composition)) => composition,
            // The manifest lost its composition since the claim: what this
            // task would compose is no longer declared.
            Some(None) => {
                self.evaluation_failed(&flight, "the kind no longer declares a composition".to_owned());
                return Ok(());
            }
            // The manifest could not be read now: retried with backoff.
            None => {
                self.results.push(TaskResult {
                    error: Some("the kind's manifest could not be read; retrying".to_owned()),
                    reason: Some("ManifestUnavailable".to_owned()),
                    ..result_of(&flight)
                });
                return Ok(());
            }
        };
        if let Some(m) = telemetry::metrics() {
            m.stages.add(
                1,
                &[
                    KeyValue::new("converge.kind", task.kind.clone()),
                    KeyValue::new("converge.stage", stage.name()),
                    KeyValue::new("converge.outcome", "server"),
                ],
            );
        }
        match stage {
            Stage::Compose => match composition.compose(&task.name, &task.labels.0, &task.spec.0) {
                Ok(composed) => {
                    let composition = Composition {
                        children: composed.children,
                        edges: composed.edges,
                        configs: Vec::new(),
                        unstorable: Vec::new(),
                    };
                    self.composed(flight, composition, None).await
                }
                Err(message) => {
                    self.evaluation_failed(&flight, message);
                    Ok(())
                }
            },
            Stage::Rollup => {
                let children = pipeline::children(&self.broker.pool, task.resource_id, MAX_OBSERVED_CHILDREN).await?;
                let members: Vec<Member> = children
                    .into_iter()
                    .filter(|c| c.deletion_requested_at.is_none())
                    .map(|c| Member {
                        ready: c.is_ready,
                        synced: c.synced_gen >= c.generation,
                        healthy: c.health_ok,
                        status: c.status.map_or(Value::Object(serde_json::Map::new()), |s| s.0),
                        kind: c.kind,
                        name: c.name,
                    })
                    .collect();
                match composition.rollup(&task.name, &task.labels.0, &task.spec.0, &members) {
                    Ok(rolled) => {
                        if rolled.status.is_some() {
                            flight.status = rolled.status;
                        }
                        if let Some(healthy) = rolled.healthy {
                            flight.conditions.push(ConditionInput {
                                type_: "Ready".to_owned(),
                                status: if healthy { "True" } else { "False" },
                                reason: if healthy { "ChildrenReady" } else { "ChildrenNotReady" }.to_owned(),
                                message: crate::domain::violation::clip(rolled.message, 1024),
                                liveness_ms: None,
                            });
                        }
                        self.finish(&flight, rolled.healthy, true);
                    }
                    Err(message) => self.evaluation_failed(&flight, message),
                }
                Ok(())
            }
            Stage::Work | Stage::Delete => {
                self.finish(&flight, None, true);
                Ok(())
            }
        }
    }

    /// Fails the generation for an expression that did not evaluate.
    fn evaluation_failed(&mut self, flight: &InFlight, message: String) {
        self.results.push(TaskResult {
            error: Some(crate::domain::violation::clip(message, 1024)),
            reason: Some("CompositionEvaluationFailed".to_owned()),
            terminal: true,
            ..result_of(flight)
        });
    }

    /// Applies the completion of the stage `flight` ran (matched to its
    /// dispatch by lease, epoch and generation).
    pub(super) async fn complete_task(
        &mut self,
        mut flight: InFlight,
        complete: wpb::StageComplete,
    ) -> Result<(), SessionError> {
        let result = StageResult::decode(complete, &self.actor);
        let stage = flight.stage.or(result.stage);
        self.observe_completion(&flight, stage, &result);
        let healthy = result.healthy;
        match next(stage, result, &mut flight) {
            Next::Refuse { reason, what, problems } => self.fail(&flight, reason, what, &problems),
            Next::Fail(failure) => self.results.push(TaskResult {
                error: Some(failure.message),
                reason: failure.reason,
                terminal: failure.terminal,
                ..result_of(&flight)
            }),
            Next::Requeue(ms) => self.results.push(TaskResult {
                requeue_after_ms: Some(ms),
                healthy,
                ..result_of(&flight)
            }),
            Next::Compose(composition) => self.composed(flight, composition, healthy).await?,
            Next::After(stage) => self.next_stage(flight, stage, healthy).await?,
            Next::End => self.finish(&flight, healthy, true),
        }
        Ok(())
    }

    /// Counts a stage result by kind, stage and outcome, and marks the
    /// completion in the reconcile's trace.
    fn observe_completion(&self, flight: &InFlight, stage: Option<Stage>, result: &StageResult) {
        let outcome = result.outcome();
        let stage = stage.map_or("unknown", Stage::name);
        if let Some(m) = telemetry::metrics() {
            m.stages.add(
                1,
                &[
                    KeyValue::new("converge.kind", flight.task.kind.clone()),
                    KeyValue::new("converge.stage", stage),
                    KeyValue::new("converge.outcome", outcome),
                ],
            );
        }
        if !flight.span.is_disabled() {
            let _completion = tracing::info_span!(
                parent: &flight.span,
                "complete",
                otel.name = format!("complete {stage}"),
                converge.stage = stage,
                converge.outcome = outcome,
                converge.claim_epoch = flight.task.claim_epoch,
            )
            .entered();
        }
    }

    /// Applies a composition, then moves the task on.
    async fn composed(
        &mut self,
        flight: InFlight,
        composition: Composition,
        healthy: Option<bool>,
    ) -> Result<(), StoreError> {
        if let Err(problems) = self.check_all(&composition).await {
            self.fail(&flight, "CompositionInvalid", "the composition", &problems);
            return Ok(());
        }
        let Composition {
            children,
            edges,
            configs,
            ..
        } = composition;
        let task = &flight.task;
        let composed = pipeline::apply_composition(
            &self.broker.pool,
            TaskFence {
                lease: task.lease_token,
                epoch: task.claim_epoch,
                generation: task.generation,
            },
            task.resource_id,
            Desired {
                children: &children,
                edges: &edges,
                configs: &configs,
            },
        )
        .await?;
        match composed {
            Composed::Applied { fence, .. } => {
                self.broker.stats.composed.fetch_add(1, Ordering::Relaxed);
                let mut flight = flight;
                flight.task.lease_token = fence.lease_token;
                flight.task.claim_epoch = fence.claim_epoch;
                flight.task.deadline_secs = fence.deadline_secs;
                flight.task.composed_gen = flight.task.generation;
                self.continue_after(flight, Stage::Compose, healthy).await
            }
            Composed::Stale => {
                self.broker.stats.stale.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Composed::Refused(message) => {
                self.fail(
                    &flight,
                    "CompositionRefused",
                    "the composition",
                    &[Violation::new("/compose_result", message)],
                );
                Ok(())
            }
        }
    }

    /// Moves a task past a finished `stage` under a fresh fence.
    async fn next_stage(
        &mut self,
        mut flight: InFlight,
        stage: Stage,
        healthy: Option<bool>,
    ) -> Result<(), StoreError> {
        if flight.plan.after(stage).is_none() {
            return self.continue_after(flight, stage, healthy).await;
        }
        let task = &flight.task;
        let Some(fence) =
            pipeline::advance_stage(&self.broker.pool, task.lease_token, task.claim_epoch, task.generation).await?
        else {
            self.broker.stats.stale.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        };
        flight.task.lease_token = fence.lease_token;
        flight.task.claim_epoch = fence.claim_epoch;
        flight.task.deadline_secs = fence.deadline_secs;
        self.continue_after(flight, stage, healthy).await
    }

    /// Dispatches the stage after `stage` (the task already holds its new
    /// fence), or ends the reconcile: fully, or as a composite's partial
    /// result when its rollup must wait for children still progressing.
    async fn continue_after(
        &mut self,
        flight: InFlight,
        stage: Stage,
        healthy: Option<bool>,
    ) -> Result<(), StoreError> {
        match flight.plan.after(stage) {
            Some(Stage::Rollup) => {
                if pipeline::children_settled(&self.broker.pool, flight.task.resource_id).await? {
                    self.send_stage(flight, Stage::Rollup).await?;
                } else {
                    self.finish(&flight, healthy, false);
                }
            }
            Some(next) => {
                self.send_stage(flight, next).await?;
            }
            None => self.finish(&flight, healthy, true),
        }
        Ok(())
    }

    /// Ends a task with what its stages produced: fully (`advance`), or as a
    /// composite's partial result whose rollup has to wait.
    pub(super) fn finish(&mut self, flight: &InFlight, healthy: Option<bool>, advance: bool) {
        if advance && let (Some(m), Some(queued_at)) = (telemetry::metrics(), flight.task.queued_at) {
            let waited = (chrono::Utc::now() - queued_at).to_std().unwrap_or_default();
            m.reconcile_duration.record(
                waited.as_secs_f64(),
                &[KeyValue::new("converge.kind", flight.task.kind.clone())],
            );
        }
        self.results.push(TaskResult {
            healthy,
            advance,
            ..result_of(flight)
        });
    }

    /// Records a terminal failure of the task's generation.
    fn fail(&mut self, flight: &InFlight, reason: &str, what: &str, problems: &[Violation]) {
        self.results.push(TaskResult {
            error: Some(refused(what, problems)),
            reason: Some(reason.to_owned()),
            terminal: true,
            ..result_of(flight)
        });
    }

    /// Everything checked of a composer's result before it is applied (or
    /// answered to a plan): storable specs, and [`Self::check_composition`].
    pub(super) async fn check_all(&self, composition: &Composition) -> Result<(), Vec<Violation>> {
        let checked = self
            .check_composition(&composition.children, &composition.edges, &composition.configs)
            .await;
        let mut problems = checked.err().unwrap_or_default();
        problems.extend(composition.unstorable.iter().cloned());
        if problems.is_empty() { Ok(()) } else { Err(problems) }
    }

    /// The shape, kinds and spec and config schemas of a composition.
    async fn check_composition(
        &self,
        children: &[ChildSpec],
        edges: &[Edge],
        configs: &[ConfigSpec],
    ) -> Result<(), Vec<Violation>> {
        validate_composition(children, edges, configs)?;
        let mut problems = Vec::new();
        for (i, config) in configs.iter().enumerate() {
            let at = format!("/compose_result/configs/{i}");
            match self
                .broker
                .catalog
                .current(&self.broker.pool, &config.kind, config.kind_version)
                .await
            {
                None => problems.push(Violation::new(
                    format!("{at}/kind"),
                    format!("kind {} version {} does not exist", config.kind, config.kind_version),
                )),
                Some(compiled) => {
                    if let Some(schema) = &compiled.config
                        && let Err(found) = schema.validate(&format!("{at}/spec"), &config.spec)
                    {
                        problems.extend(found);
                    }
                }
            }
        }
        for (i, child) in children.iter().enumerate() {
            let at = format!("/compose_result/desired/{i}");
            match self
                .broker
                .catalog
                .current(&self.broker.pool, &child.kind, child.kind_version)
                .await
            {
                None => problems.push(Violation::new(
                    format!("{at}/kind"),
                    format!("kind {} version {} does not exist", child.kind, child.kind_version),
                )),
                Some(compiled) => match compiled.admit(&format!("{at}/spec"), &child.spec) {
                    Ok(()) => {}
                    Err(Refusal::ReactorKind) => problems.push(Violation::new(
                        format!("{at}/kind"),
                        format!("kind {} is a reactor kind and owns no resources", child.kind),
                    )),
                    Err(Refusal::Schema(found)) => problems.extend(found),
                },
            }
        }
        if problems.is_empty() { Ok(()) } else { Err(problems) }
    }
}

/// What a task does after one of its stages completed.
#[derive(Debug)]
enum Next {
    /// A part of the result is refused: the generation fails terminally.
    Refuse {
        reason: &'static str,
        what: &'static str,
        problems: Vec<Violation>,
    },
    /// The worker failed the stage.
    Fail(WorkerFailure),
    /// The worker asked to run again after this many milliseconds.
    Requeue(i64),
    /// A composer's result, to check and apply before going on.
    Compose(Composition),
    /// The work stage is done: go on after it.
    After(Stage),
    /// The task is done.
    End,
}

/// The transition after `stage` (the one dispatched, else the one the
/// worker names) completed with `result`, whose status, conditions and
/// events join what `flight` produced so far. Decided from the decoded
/// result alone, in the order the contract gives: events are checked even
/// on a failure (they are recorded with it), then the failure, the status,
/// the conditions, a requeue, and only then the stage's own next step.
fn next(stage: Option<Stage>, result: StageResult, flight: &mut impl Produced) -> Next {
    match result.events {
        Ok(events) => flight.events().extend(events),
        Err(problems) => {
            return Next::Refuse {
                reason: "EventInvalid",
                what: "the events",
                problems,
            };
        }
    }
    if let Some(failure) = result.failure {
        return Next::Fail(failure);
    }
    match result.status {
        Ok(Some(status)) => *flight.status() = Some(status),
        Ok(None) => {}
        Err(problem) => {
            return Next::Refuse {
                reason: "StatusInvalid",
                what: "the status",
                problems: vec![problem],
            };
        }
    }
    match result.conditions {
        Ok(conditions) => flight.conditions().extend(conditions),
        Err(problems) => {
            return Next::Refuse {
                reason: "ConditionInvalid",
                what: "the conditions",
                problems,
            };
        }
    }
    if let Some(ms) = result.requeue_after_ms {
        return Next::Requeue(ms);
    }
    match stage {
        // A compose completion without a result composes nothing.
        Some(Stage::Compose) => Next::Compose(result.composition.unwrap_or_default()),
        Some(Stage::Work) => Next::After(Stage::Work),
        Some(Stage::Rollup | Stage::Delete) | None => Next::End,
    }
}

/// What a reconcile's stages produced so far (for [`next`]).
trait Produced {
    fn status(&mut self) -> &mut Option<Value>;
    fn conditions(&mut self) -> &mut Vec<ConditionInput>;
    fn events(&mut self) -> &mut Vec<ReportedEvent>;
}

impl Produced for InFlight {
    fn status(&mut self) -> &mut Option<Value> {
        &mut self.status
    }
    fn conditions(&mut self) -> &mut Vec<ConditionInput> {
        &mut self.conditions
    }
    fn events(&mut self) -> &mut Vec<ReportedEvent> {
        &mut self.events
    }
}

/// A result of the task with what its stages produced so far.
fn result_of(flight: &InFlight) -> TaskResult {
    let task = &flight.task;
    TaskResult {
        work_id: task.work_id,
        shard_id: task.shard_id,
        resource_id: task.resource_id,
        lease: task.lease_token,
        epoch: task.claim_epoch,
        generation: task.generation,
        manifest_version: task.manifest_version,
        status: flight.status.clone(),
        conditions: flight.conditions.clone(),
        events: flight.events.clone(),
        healthy: None,
        advance: true,
        requeue_after_ms: None,
        error: None,
        reason: None,
        terminal: false,
        finalizer: task.teardown_finalizer().map(str::to_owned),
    }
}

#[cfg(test)]
mod tests {
    use converge_proto::worker_v1 as wpb;
    use serde_json::json;

    use super::*;

    /// What a reconcile produced so far, without a task.
    #[derive(Default)]
    struct Sofar {
        status: Option<Value>,
        conditions: Vec<ConditionInput>,
        events: Vec<ReportedEvent>,
    }

    impl Produced for Sofar {
        fn status(&mut self) -> &mut Option<Value> {
            &mut self.status
        }
        fn conditions(&mut self) -> &mut Vec<ConditionInput> {
            &mut self.conditions
        }
        fn events(&mut self) -> &mut Vec<ReportedEvent> {
            &mut self.events
        }
    }

    fn decoded(complete: wpb::StageComplete) -> StageResult {
        StageResult::decode(complete, "worker:test")
    }

    fn status(value: Value) -> Option<prost_types::Struct> {
        converge_proto::json::json_to_struct(&value)
    }

    fn event(reason: &str) -> wpb::WorkerEvent {
        wpb::WorkerEvent {
            reason: reason.into(),
            message: "m".into(),
            ..Default::default()
        }
    }

    #[test]
    fn each_stage_leads_to_its_next_step() {
        let mut sofar = Sofar::default();
        let done = || wpb::StageComplete {
            status: status(json!({"ok": true})),
            ..Default::default()
        };
        assert!(matches!(
            next(Some(Stage::Work), decoded(done()), &mut sofar),
            Next::After(Stage::Work)
        ));
        assert_eq!(sofar.status, Some(json!({"ok": true})));
        assert!(matches!(
            next(Some(Stage::Rollup), decoded(done()), &mut sofar),
            Next::End
        ));
        assert!(matches!(
            next(Some(Stage::Delete), decoded(done()), &mut sofar),
            Next::End
        ));
        // An adopted lease (no dispatched stage) whose worker names none.
        assert!(matches!(next(None, decoded(done()), &mut sofar), Next::End));
        // A compose completion without a result composes nothing.
        match next(Some(Stage::Compose), decoded(done()), &mut sofar) {
            Next::Compose(c) => assert!(c.children.is_empty() && c.edges.is_empty() && c.configs.is_empty()),
            other => panic!("compose led to {other:?}"),
        }
    }

    #[test]
    fn a_failure_wins_over_the_stage_and_keeps_the_events() {
        let mut sofar = Sofar::default();
        let failed = wpb::StageComplete {
            error: Some(wpb::TaskError {
                message: "a\u{0}b".into(),
                reason: "Quota".into(),
                terminal: true,
            }),
            events: vec![event("Tried")],
            status: status(json!({"ignored": true})),
            ..Default::default()
        };
        match next(Some(Stage::Work), decoded(failed), &mut sofar) {
            Next::Fail(f) => assert_eq!(
                f,
                WorkerFailure {
                    message: "a\u{fffd}b".into(),
                    reason: Some("Quota".into()),
                    terminal: true
                }
            ),
            other => panic!("a failure led to {other:?}"),
        }
        assert_eq!(sofar.events.len(), 1, "the events are recorded with the failure");
        assert_eq!(sofar.status, None, "a failed stage's status is not taken");
        let silent = wpb::StageComplete {
            error: Some(wpb::TaskError::default()),
            ..Default::default()
        };
        match next(Some(Stage::Work), decoded(silent), &mut sofar) {
            Next::Fail(f) => assert_eq!(f.message, "the worker reported a failure without a message"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn refused_parts_fail_the_generation_in_contract_order() {
        let mut sofar = Sofar::default();
        let bad_event = wpb::StageComplete {
            events: vec![event("")],
            error: Some(wpb::TaskError::default()),
            ..Default::default()
        };
        assert!(matches!(
            next(Some(Stage::Work), decoded(bad_event), &mut sofar),
            Next::Refuse {
                reason: "EventInvalid",
                ..
            }
        ));
        let bad_condition = wpb::StageComplete {
            // A liveness outside 1 s..24 h.
            conditions: vec![wpb::Condition {
                r#type: "Alive".into(),
                liveness: Some(prost_types::Duration {
                    seconds: 0,
                    nanos: 5_000_000,
                }),
                ..Default::default()
            }],
            requeue_after: Some(prost_types::Duration { seconds: 5, nanos: 0 }),
            ..Default::default()
        };
        assert!(matches!(
            next(Some(Stage::Work), decoded(bad_condition), &mut sofar),
            Next::Refuse {
                reason: "ConditionInvalid",
                ..
            }
        ));
    }

    #[test]
    fn a_requeue_comes_before_the_next_stage() {
        let mut sofar = Sofar::default();
        let again = wpb::StageComplete {
            requeue_after: Some(prost_types::Duration { seconds: 2, nanos: 0 }),
            ..Default::default()
        };
        assert!(matches!(
            next(Some(Stage::Compose), decoded(again), &mut sofar),
            Next::Requeue(2000)
        ));
    }
}
