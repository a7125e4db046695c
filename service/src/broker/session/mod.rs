//! One worker stream: claims tasks for the pairs the worker serves, walks
//! each reconcile task through its pipeline (compose → work → rollup), runs
//! teardown tasks as a single delete stage, and hands the final results to
//! the outbox in batches. Reactor deliveries and operations, which run
//! beside reconciles, have their own modules.

mod deliveries;
mod operations;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use converge_proto::json;
use converge_proto::worker_v1 as wpb;
use converge_proto::worker_v1::work_stream_request::Payload as Up;
use futures::FutureExt;
use opentelemetry::KeyValue;
use serde_json::Value;
use tokio::sync::mpsc;
use tonic::{Status, Streaming};
use uuid::Uuid;

use super::Broker;
use super::registry::Listed;
use super::wire::{self, Input};
use crate::contract::status::{ApiError, Reason, is_undecodable, undecodable};
use crate::db::notify::Channel;
use crate::domain::composition::{ChildSpec, ConfigSpec, Edge, Stage, StagePlan, validate_composition};
use crate::domain::event::ReportedEvent;
use crate::domain::resource::ConditionInput;
use crate::domain::violation::Violation;
use crate::store::leases::{self, Leased};
use crate::store::operations as operation_store;
use crate::store::pipeline::{self, Composed, Desired, TaskFence};
use crate::store::provider_configs;
use crate::store::reactors::{self, ClaimedDelivery};
use crate::store::work::{self, ClaimedTask, TaskResult};
use crate::store::{StoreError, StoreResult};
use crate::telemetry;
use operations::HeldOperation;

/// Failsafe interval between claim attempts when idle.
const CLAIM_POLL: Duration = Duration::from_millis(500);
/// Claim interval while work is flowing. Wake-ups are throttled to one per
/// 5 ms window, so after activity a session keeps polling at least that
/// long to catch work committed just after the wake it saw.
const BUSY_POLL: Duration = Duration::from_millis(10);
/// How long a session keeps polling fast after the last sign of work.
const LINGER: Duration = Duration::from_millis(120);
/// How long a closing process keeps reading a stream for the results of the
/// work it holds (claiming nothing new) before ending it: results the worker
/// has already sent would otherwise be lost with the stream and their tasks
/// run again once the reaper frees their leases.
const CLOSE_GRACE: Duration = Duration::from_secs(1);
/// Most tasks in flight on this broker (all streams) for results to be
/// applied directly instead of through the outbox: on a nearly idle system
/// that saves the drainer's wake-up and a second transaction, and under load
/// the outbox batches many results into one durable commit (ADR 12).
const DIRECT_IN_FLIGHT: usize = 8;
/// Most messages handled before the results they produced are flushed.
const MAX_BATCH: usize = 512;
/// Most descendants handed to a rollup.
const MAX_ROLLUP_DESCENDANTS: i64 = 10_000;
/// Most children handed to a composer as observed.
const MAX_OBSERVED_CHILDREN: i64 = 10_000;

/// Why handling a worker message failed.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    /// The worker broke the protocol: the stream ends with this status.
    #[error("protocol error: {0}")]
    Protocol(Status),
    /// The database failed; the stream stays open.
    #[error(transparent)]
    Database(#[from] StoreError),
}

/// A task this stream holds, keyed by its current lease.
struct InFlight {
    task: ClaimedTask,
    plan: Arc<StagePlan>,
    /// The stage dispatched; `None` for a lease adopted after a reconnect
    /// (the completion says which stage it finished).
    stage: Option<Stage>,
    /// Status, conditions and events produced by earlier stages of this
    /// reconcile.
    status: Option<Value>,
    conditions: Vec<ConditionInput>,
    events: Vec<ReportedEvent>,
    /// The reconcile's span when its trace is exported (disabled otherwise):
    /// the parent of the worker's handler spans and of each completion.
    span: tracing::Span,
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

/// The broker side of one worker stream.
pub(super) struct Session {
    broker: Arc<Broker>,
    kinds: BTreeSet<(String, i32)>,
    ready: BTreeSet<(String, i32)>,
    max: usize,
    tasks: HashMap<Uuid, InFlight>,
    /// The stage plans of the served pairs, by the manifest version they
    /// were derived from.
    plans: HashMap<(String, i32), (i64, Arc<StagePlan>)>,
    /// Reactor deliveries this stream holds, keyed by their lease.
    deliveries: HashMap<Uuid, ClaimedDelivery>,
    /// Deliveries that succeeded, not yet acknowledged in the database
    /// (written with the batch, like results).
    delivered: Vec<(Uuid, i64)>,
    /// Operations this stream holds, keyed by their lease.
    operations: HashMap<Uuid, HeldOperation>,
    /// When the next claim round looks for operations (now after a wake-up
    /// or a completion; an idle poll later after a claim found none).
    operations_due: tokio::time::Instant,
    /// Final results not yet written to the outbox.
    results: Vec<TaskResult>,
    /// How many tasks this stream last counted into the broker's gauge.
    counted: i64,
    /// Who the worker is, as its events record it ("worker:<identity>").
    actor: String,
    out: mpsc::Sender<Result<wpb::WorkStreamResponse, Status>>,
    /// This stream's entry in the broker's listing of connected workers
    /// (unlisted when the session ends).
    listed: Listed,
}

impl Session {
    pub(super) fn new(
        broker: Arc<Broker>,
        kinds: BTreeSet<(String, i32)>,
        max: usize,
        actor: String,
        out: mpsc::Sender<Result<wpb::WorkStreamResponse, Status>>,
        listed: Listed,
    ) -> Self {
        Self {
            broker,
            ready: kinds.clone(),
            kinds,
            max,
            tasks: HashMap::new(),
            plans: HashMap::new(),
            deliveries: HashMap::new(),
            delivered: Vec::new(),
            operations: HashMap::new(),
            operations_due: tokio::time::Instant::now(),
            results: Vec::new(),
            counted: 0,
            actor,
            out,
            listed,
        }
    }

    pub(super) async fn run(mut self, mut inbound: Streaming<wpb::WorkStreamRequest>, resumed: Vec<(Uuid, i64)>) {
        let pool = self.broker.pool.clone();
        if let Err(e) = self.adopt(&resumed).await {
            tracing::warn!(error = %e, "could not adopt resumed leases");
        }
        self.broker.stats.connected.fetch_add(1, Ordering::Relaxed);
        let mut wake = self.broker.wake.subscribe();
        let mut config_updates = self.broker.configs.subscribe();
        let mut closing = self.broker.closing.clone();
        let mut busy_until = tokio::time::Instant::now() + LINGER;
        'session: loop {
            if *closing.borrow_and_update() {
                break;
            }
            self.count_in_flight();
            match self.dispatch().await {
                Ok(0) => {}
                Ok(_) => busy_until = tokio::time::Instant::now() + LINGER,
                Err(e) => tracing::warn!(error = %e, "claiming work failed"),
            }
            // A claim can end a task at once (nothing to run, or a rollup
            // whose children started progressing again): write that now.
            self.flush().await;
            let pause = if tokio::time::Instant::now() < busy_until {
                BUSY_POLL
            } else {
                CLAIM_POLL
            };
            tokio::select! {
                message = inbound.message() => {
                    let mut next = message;
                    // Handle whatever else already arrived, then write the
                    // results of the whole batch at once.
                    for _ in 0..MAX_BATCH {
                        match next {
                            Ok(Some(message)) => {
                                if !self.handle_logged(message).await {
                                    break 'session;
                                }
                            }
                            Ok(None) => break 'session,
                            Err(status) => {
                                // A message that did not decode is the worker's
                                // mistake: say so in the contract's terms.
                                if is_undecodable(&status) {
                                    let _ = self.out.send(Err(undecodable(status.message()).into())).await;
                                }
                                break 'session;
                            }
                        }
                        match inbound.message().now_or_never() {
                            Some(message) => next = message,
                            None => break,
                        }
                    }
                    self.flush().await;
                    busy_until = tokio::time::Instant::now() + LINGER;
                },
                _ = wake.changed() => {
                    busy_until = tokio::time::Instant::now() + LINGER;
                    self.operations_due = tokio::time::Instant::now();
                }
                update = config_updates.recv() => match update {
                    Ok(update) => {
                        if !self.push_config(&update).await {
                            break;
                        }
                    }
                    // Fell behind: re-read the defaults of every served pair.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        if !self.push_all_configs().await {
                            break;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                },
                _ = tokio::time::sleep(pause) => {}
                // The sender goes only with the process's background tasks.
                changed = closing.changed() => if changed.is_err() {
                    break;
                },
                _ = self.out.closed() => break,
            }
        }
        self.flush().await;
        if *closing.borrow() {
            self.take_last_results(&mut inbound).await;
        }
        self.broker.stats.connected.fetch_sub(1, Ordering::Relaxed);
        self.broker.stats.in_flight.fetch_sub(self.counted, Ordering::Relaxed);
        if *closing.borrow() {
            // This process is going away: the worker reconnects (to another
            // pod, or to this one restarted) and resumes its leases there,
            // so they are kept rather than released; the reaper frees those
            // of a worker that never comes back.
            let _ = self
                .out
                .send(Err(Status::unavailable(
                    "this converge process is shutting down; reconnect and resume the leases",
                )))
                .await;
            return;
        }
        let tokens: Vec<Uuid> = self.tasks.keys().copied().collect();
        if let Err(e) = leases::release(&pool, Leased::Tasks, &self.broker.member_id, &tokens).await {
            tracing::warn!(error = %e, "could not release the leases of a closed stream; the reaper frees them");
        }
        let tokens: Vec<Uuid> = self.deliveries.keys().copied().collect();
        if let Err(e) = leases::release(&pool, Leased::Deliveries, &self.broker.member_id, &tokens).await {
            tracing::warn!(error = %e, "could not release the deliveries of a closed stream; the reaper frees them");
        }
        let tokens: Vec<Uuid> = self.operations.keys().copied().collect();
        if let Err(e) = leases::release(&pool, Leased::Operations, &self.broker.member_id, &tokens).await {
            tracing::warn!(error = %e, "could not release the operations of a closed stream; the reaper frees them");
        }
    }

    /// Sends a default-config change to the worker if it serves the pair;
    /// false if the stream is gone.
    async fn push_config(&self, update: &wpb::ProviderConfigUpdate) -> bool {
        if !self.kinds.contains(&(update.kind.clone(), update.kind_version)) {
            return true;
        }
        let message = wpb::WorkStreamResponse {
            payload: Some(wpb::work_stream_response::Payload::ProviderConfigUpdate(update.clone())),
        };
        self.out.send(Ok(message)).await.is_ok()
    }

    /// Sends the current default (or its absence) of every served pair;
    /// false if the stream is gone.
    async fn push_all_configs(&self) -> bool {
        let pairs: Vec<(String, i32)> = self.kinds.iter().cloned().collect();
        let defaults = match provider_configs::defaults(&self.broker.pool, &pairs).await {
            Ok(defaults) => defaults,
            Err(e) => {
                // The worker's own periodic re-pull catches up.
                tracing::debug!(error = %e, "could not re-read default provider configs");
                return true;
            }
        };
        for pair in pairs {
            let current = defaults
                .iter()
                .find(|c| c.kind == pair.0 && c.kind_version == pair.1)
                .cloned();
            if !self.push_config(&super::configs::update_of(pair, current)).await {
                return false;
            }
        }
        true
    }

    /// Brings the broker's in-flight gauge up to date with this stream.
    fn count_in_flight(&mut self) {
        let now = i64::try_from(self.held()).unwrap_or(i64::MAX);
        self.broker
            .stats
            .in_flight
            .fetch_add(now - self.counted, Ordering::Relaxed);
        self.counted = now;
        self.listed.set_in_flight(self.held());
    }

    /// Tasks, deliveries and operations this stream holds (against the
    /// worker's max).
    /// On a closing process: handles what the worker sends for the work this
    /// stream holds, until it holds nothing, the worker stops sending or
    /// [`CLOSE_GRACE`] passes. What is still held then is resumed by the
    /// worker on its next stream.
    async fn take_last_results(&mut self, inbound: &mut Streaming<wpb::WorkStreamRequest>) {
        let deadline = tokio::time::Instant::now() + CLOSE_GRACE;
        while self.held() > 0 {
            let Ok(Ok(Some(message))) = tokio::time::timeout_at(deadline, inbound.message()).await else {
                break;
            };
            if !self.handle_logged(message).await {
                break;
            }
            self.flush().await;
        }
        self.count_in_flight();
    }

    fn held(&self) -> usize {
        self.tasks.len() + self.deliveries.len() + self.operations.len()
    }

    /// Takes over the leases a reconnecting worker still holds.
    async fn adopt(&mut self, resumed: &[(Uuid, i64)]) -> Result<(), StoreError> {
        let adopted = work::adopt(&self.broker.pool, &self.broker.member_id, resumed).await?;
        let others: Vec<(Uuid, i64)> = resumed.iter().filter(|(t, _)| !adopted.contains(t)).copied().collect();
        for delivery in reactors::adopt(&self.broker.pool, &self.broker.member_id, &others).await? {
            self.deliveries.insert(delivery.lease_token, delivery);
        }
        let others: Vec<(Uuid, i64)> = others
            .into_iter()
            .filter(|(t, _)| !self.deliveries.contains_key(t))
            .collect();
        for operation in operation_store::adopt(&self.broker.pool, &self.broker.member_id, &others).await? {
            let plan = self.plan(&operation.kind, operation.kind_version).await;
            // A verb the manifest dropped meanwhile: the lease lapses and
            // the next claim ends the operation.
            if let Some(verb) = plan.verb(&operation.verb).cloned() {
                self.operations
                    .insert(operation.lease_token, HeldOperation { operation, verb });
            }
        }
        for task in work::leased(&self.broker.pool, &adopted).await? {
            let plan = self.plan(&task.kind, task.kind_version).await;
            self.tasks.insert(
                task.lease_token,
                InFlight {
                    task,
                    plan,
                    stage: None,
                    status: None,
                    conditions: Vec::new(),
                    events: Vec::new(),
                    span: tracing::Span::none(),
                },
            );
        }
        Ok(())
    }

    /// Handles one message; false when the stream must end.
    async fn handle_logged(&mut self, message: wpb::WorkStreamRequest) -> bool {
        match self.handle(message).await {
            Ok(()) => true,
            Err(SessionError::Protocol(status)) => {
                let _ = self.out.send(Err(status)).await;
                false
            }
            // The lease stays: the worker's heartbeats stop covering it
            // and the reaper makes it claimable again.
            Err(SessionError::Database(e)) => {
                tracing::warn!(error = %e, "could not apply a worker message");
                true
            }
        }
    }

    /// Writes the pending results; the fence drops stale ones.
    async fn flush(&mut self) {
        self.flush_deliveries().await;
        if self.results.is_empty() {
            return;
        }
        let results = std::mem::take(&mut self.results);
        let stats = &self.broker.stats;
        // Requeued work falls due its delay after the fence (the database
        // counts from the result's fence time): wake up for it then.
        let flushed_at = tokio::time::Instant::now();
        match self.write(&results).await {
            Ok(accepted) => {
                self.note_due_work(&results, &accepted, flushed_at).await;
                let accepted_count = accepted.len() as u64;
                let failed = results
                    .iter()
                    .filter(|r| r.error.is_some() && accepted.contains(&r.lease))
                    .count() as u64;
                stats.applied.fetch_add(accepted_count - failed, Ordering::Relaxed);
                stats.failed.fetch_add(failed, Ordering::Relaxed);
                let stale = results.len() as u64 - accepted_count;
                if stale > 0 {
                    tracing::debug!(stale, "dropped stale completions");
                    stats.stale.fetch_add(stale, Ordering::Relaxed);
                }
            }
            // The leases stay held without heartbeats: the reaper frees
            // them and the work runs again (at least once).
            Err(e) => tracing::warn!(error = %e, results = results.len(), "could not write results"),
        }
    }

    /// Tells the broker when the work these accepted results put back falls
    /// due: a requeue after its delay, a retried failure after its backoff
    /// (read back by key; failures are rare and only applied results have
    /// a backoff yet).
    async fn note_due_work(&self, results: &[TaskResult], accepted: &[Uuid], flushed_at: tokio::time::Instant) {
        let mut retried = Vec::new();
        for result in results.iter().filter(|r| accepted.contains(&r.lease)) {
            if let Some(ms) = result.requeue_after_ms.and_then(|ms| u64::try_from(ms).ok()) {
                self.broker.due_at(flushed_at + Duration::from_millis(ms));
            } else if result.error.is_some() && !result.terminal {
                retried.push(result.work_id);
            }
        }
        if retried.is_empty() {
            return;
        }
        match work::due_in(&self.broker.pool, &retried).await {
            Ok(delays) => {
                let now = tokio::time::Instant::now();
                for delay in delays {
                    self.broker.due_at(now + delay);
                }
            }
            Err(e) => tracing::debug!(error = %e, "could not read when retried work falls due"),
        }
    }

    /// Applies results directly when the broker is nearly idle, otherwise
    /// appends them to the outbox (ADR 12); returns the accepted leases.
    async fn write(&self, results: &[TaskResult]) -> StoreResult<Vec<Uuid>> {
        let pool = &self.broker.pool;
        let in_flight = usize::try_from(self.broker.stats.in_flight.load(Ordering::Relaxed)).unwrap_or(0);
        if results.len() + in_flight > DIRECT_IN_FLIGHT {
            return work::append_outbox(pool, results).await;
        }
        match work::complete(pool, results).await {
            Ok(accepted) => {
                // This process's watches see the change now; its NOTIFY may
                // fall in the window of the apply's own and be withheld.
                if !accepted.is_empty() {
                    self.broker.notifications.local(Channel::ResourceChanged);
                }
                Ok(accepted)
            }
            // Nothing of a failed transaction stays (a lock conflict, say):
            // the fences still hold, so the outbox takes the same results.
            Err(e) => {
                tracing::debug!(error = %e, "direct completion failed; using the outbox");
                work::append_outbox(pool, results).await
            }
        }
    }

    /// Claims and sends tasks while the worker has free slots; returns how
    /// many were sent.
    async fn dispatch(&mut self) -> Result<usize, StoreError> {
        let ready: Vec<(String, i32)> = self.ready.iter().cloned().collect();
        let shards = *self.broker.shards.borrow();
        let probe_operations = tokio::time::Instant::now() >= self.operations_due;
        let mut more_operations = false;
        let mut sent = 0;
        for (kind, version) in ready {
            let free = self.max.saturating_sub(self.held());
            if free == 0 {
                return Ok(sent);
            }
            let plan = self.plan(&kind, version).await;
            if probe_operations && !plan.verbs.is_empty() {
                match self.dispatch_operations(&kind, version, &plan, free).await? {
                    Some((n, full)) => {
                        sent += n;
                        more_operations |= full;
                    }
                    None => return Ok(sent),
                }
            }
            let free = self.max.saturating_sub(self.held());
            if free == 0 {
                return Ok(sent);
            }
            if let Some(reaction) = plan.react.clone() {
                match self
                    .dispatch_deliveries(&kind, version, &reaction, free, shards)
                    .await?
                {
                    Some(n) => sent += n,
                    None => return Ok(sent),
                }
                continue;
            }
            let claimed = work::claim(
                &self.broker.pool,
                &self.broker.member_id,
                &kind,
                version,
                i64::try_from(free).unwrap_or(i64::MAX),
                shards,
            )
            .await?;
            if claimed.is_empty() {
                continue;
            }
            if let Some(m) = telemetry::metrics() {
                m.claims
                    .add(claimed.len() as u64, &[KeyValue::new("converge.kind", kind.clone())]);
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
                        ..result_of(&InFlight {
                            task,
                            plan: plan.clone(),
                            stage: None,
                            status: None,
                            conditions: Vec::new(),
                            events: Vec::new(),
                            span: tracing::Span::none(),
                        })
                    });
                    continue;
                }
                if task.is_teardown() {
                    if !self.dispatch_teardown(task, &plan).await? {
                        return Ok(sent);
                    }
                    sent += 1;
                    continue;
                }
                let first = plan.first(task.needs_compose());
                let flight = InFlight {
                    task,
                    plan: plan.clone(),
                    stage: first,
                    status: None,
                    conditions: Vec::new(),
                    events: Vec::new(),
                    span: tracing::Span::none(),
                };
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
                            return Ok(sent);
                        }
                        sent += 1;
                    }
                    // Nothing to run (e.g. a kind with only a teardown): done.
                    None => self.finish(&flight, None, true),
                }
            }
        }
        if probe_operations && !more_operations {
            self.operations_due = tokio::time::Instant::now() + CLAIM_POLL;
        }
        Ok(sent)
    }

    /// Sends a teardown task (STAGE_DELETE running the reaction that clears
    /// the resource's finalizer). A finalizer no reaction of the kind clears
    /// has nothing to run: the task succeeds at once and the finalizer goes.
    /// False if the stream is gone.
    async fn dispatch_teardown(&mut self, task: ClaimedTask, plan: &Arc<StagePlan>) -> Result<bool, StoreError> {
        let finalizer = task.teardown_finalizer().unwrap_or_default().to_owned();
        let flight = InFlight {
            task,
            plan: plan.clone(),
            stage: Some(Stage::Delete),
            status: None,
            conditions: Vec::new(),
            events: Vec::new(),
            span: tracing::Span::none(),
        };
        if plan.teardown(&finalizer).is_none() {
            self.finish(&flight, None, true);
            return Ok(true);
        }
        self.send_stage(flight, Stage::Delete).await
    }

    /// The stages of a kind, from the stored manifest (the worker holds
    /// none), derived once per manifest version: every claim round asks.
    async fn plan(&mut self, kind: &str, version: i32) -> Arc<StagePlan> {
        let Some(compiled) = self.broker.catalog.current(&self.broker.pool, kind, version).await else {
            return Arc::new(StagePlan {
                work: Some("work".to_owned()),
                ..StagePlan::default()
            });
        };
        let key = (kind.to_owned(), version);
        if let Some((manifest_version, plan)) = self.plans.get(&key)
            && *manifest_version == compiled.manifest_version
        {
            return plan.clone();
        }
        let plan = Arc::new(StagePlan::of(
            &compiled.manifest.reactions,
            compiled.manifest.finalizer_name.as_deref(),
        ));
        self.plans.insert(key, (compiled.manifest_version, plan.clone()));
        plan
    }

    /// Sends the task for `stage` (loading its input); false if the stream is gone.
    async fn send_stage(&mut self, mut flight: InFlight, stage: Stage) -> Result<bool, StoreError> {
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
        self.tasks.insert(flight.task.lease_token, flight);
        if self.out.send(Ok(message)).await.is_err() {
            return Ok(false);
        }
        self.broker.stats.dispatched.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    async fn handle(&mut self, message: wpb::WorkStreamRequest) -> Result<(), SessionError> {
        match message.payload {
            Some(Up::Complete(complete)) => self.complete(complete).await,
            Some(Up::Heartbeat(heartbeat)) => {
                let leases: Vec<(Uuid, i64)> = heartbeat
                    .leases
                    .iter()
                    .filter_map(|l| Uuid::parse_str(&l.lease_token).ok().map(|t| (t, l.claim_epoch)))
                    .collect();
                let (pool, member) = (&self.broker.pool, &self.broker.member_id);
                leases::heartbeat(pool, Leased::Tasks, member, &leases).await?;
                if !self.deliveries.is_empty() {
                    leases::heartbeat(pool, Leased::Deliveries, member, &leases).await?;
                }
                if !self.operations.is_empty() {
                    leases::heartbeat(pool, Leased::Operations, member, &leases).await?;
                }
                Ok(())
            }
            Some(Up::Interest(interest)) => {
                let pair = (interest.kind, interest.kind_version.max(1));
                let ready = interest.ready && self.kinds.contains(&pair);
                if self.kinds.contains(&pair) {
                    self.listed.set_ready(&pair, ready);
                }
                if ready {
                    self.ready.insert(pair);
                } else {
                    self.ready.remove(&pair);
                }
                Ok(())
            }
            Some(Up::Subscribe(_)) => Err(SessionError::Protocol(
                ApiError::refused(
                    Reason::InvalidField,
                    "Subscribe may only be the first message of a stream",
                )
                .into(),
            )),
            None => Ok(()),
        }
    }

    async fn complete(&mut self, complete: wpb::StageComplete) -> Result<(), SessionError> {
        let stale = |session: &Self| {
            session.broker.stats.stale.fetch_add(1, Ordering::Relaxed);
            Ok(())
        };
        let Ok(token) = Uuid::parse_str(&complete.lease_token) else {
            return stale(self);
        };
        if self
            .deliveries
            .get(&token)
            .is_some_and(|d| d.claim_epoch == complete.claim_epoch && d.generation == complete.generation)
        {
            if let Some(delivery) = self.deliveries.remove(&token) {
                self.delivered(delivery, &complete).await?;
            }
            return Ok(());
        }
        if self
            .operations
            .get(&token)
            .is_some_and(|held| held.operation.claim_epoch == complete.claim_epoch)
        {
            if let Some(held) = self.operations.remove(&token) {
                self.operated(held, &complete).await?;
            }
            return Ok(());
        }
        // A completion that does not match the dispatch leaves the task in
        // flight: the right answer may still come.
        let matches = self.tasks.get(&token).is_some_and(|flight| {
            complete.claim_epoch == flight.task.claim_epoch && complete.generation == flight.task.generation
        });
        let Some(mut flight) = matches.then(|| self.tasks.remove(&token)).flatten() else {
            return stale(self);
        };
        let stage = flight.stage.or_else(|| wire::stage_of(&complete));
        self.observe_completion(&flight, stage, &complete);
        match wire::events(&complete.events, &self.actor) {
            Ok(events) => flight.events.extend(events),
            Err(problems) => {
                self.fail(&flight, "EventInvalid", "the events", &problems);
                return Ok(());
            }
        }
        if let Some(error) = &complete.error {
            self.results.push(TaskResult {
                error: Some(if error.message.is_empty() {
                    "the worker reported a failure without a message".to_owned()
                } else {
                    wire::text(&error.message)
                }),
                reason: Some(wire::text(&error.reason)).filter(|r| !r.is_empty()),
                terminal: error.terminal,
                ..result_of(&flight)
            });
            return Ok(());
        }
        if let Some(status) = complete.status.clone() {
            match json::storable_struct_to_json(status) {
                Ok(status) => flight.status = Some(status),
                Err(e) => {
                    let problem = Violation::new(format!("/status{}", e.pointer()), e.description());
                    self.fail(&flight, "StatusInvalid", "the status", &[problem]);
                    return Ok(());
                }
            }
        }
        match wire::conditions(&complete.conditions) {
            Ok(conditions) => flight.conditions.extend(conditions),
            Err(problems) => {
                self.fail(&flight, "ConditionInvalid", "the conditions", &problems);
                return Ok(());
            }
        }
        let healthy = wire::health(&complete);
        if let Some(ms) = wire::requeue_after_ms(&complete) {
            self.results.push(TaskResult {
                requeue_after_ms: Some(ms),
                healthy,
                ..result_of(&flight)
            });
            return Ok(());
        }
        match stage {
            Some(Stage::Compose) => self.composed(flight, complete).await?,
            Some(Stage::Work) => self.next_stage(flight, Stage::Work, healthy).await?,
            Some(Stage::Rollup | Stage::Delete) | None => self.finish(&flight, healthy, true),
        }
        Ok(())
    }

    /// Counts a stage result by kind, stage and outcome, and marks the
    /// completion in the reconcile's trace.
    fn observe_completion(&self, flight: &InFlight, stage: Option<Stage>, complete: &wpb::StageComplete) {
        let outcome = match &complete.error {
            Some(error) if error.terminal => "failed",
            Some(_) => "retrying",
            None if wire::requeue_after_ms(complete).is_some() => "requeued",
            None => "succeeded",
        };
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
                converge.claim_epoch = complete.claim_epoch,
            )
            .entered();
        }
    }

    /// Applies a composition, then moves the task on.
    async fn composed(&mut self, flight: InFlight, complete: wpb::StageComplete) -> Result<(), StoreError> {
        let result = complete.compose_result.clone().unwrap_or_default();
        let wire::Composition {
            children,
            edges,
            configs,
            unstorable,
        } = wire::composition(result);
        let checked = match self.check_composition(&children, &edges, &configs).await {
            Ok(()) if unstorable.is_empty() => Ok(()),
            Ok(()) => Err(unstorable),
            Err(mut problems) => {
                problems.extend(unstorable);
                Err(problems)
            }
        };
        if let Err(problems) = checked {
            self.fail(&flight, "CompositionInvalid", "the composition", &problems);
            return Ok(());
        }
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
                self.continue_after(flight, Stage::Compose, wire::health(&complete))
                    .await
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
    fn finish(&mut self, flight: &InFlight, healthy: Option<bool>, advance: bool) {
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
                Some(compiled)
                    if StagePlan::of(
                        &compiled.manifest.reactions,
                        compiled.manifest.finalizer_name.as_deref(),
                    )
                    .is_reactor() =>
                {
                    problems.push(Violation::new(
                        format!("{at}/kind"),
                        format!("kind {} is a reactor kind and owns no resources", child.kind),
                    ));
                }
                // Fields filled by value flows arrive later, so a schema
                // must not require them (documented in the worker contract).
                Some(compiled) => {
                    if let Some(schema) = &compiled.spec
                        && let Err(found) = schema.validate(&format!("{at}/spec"), &child.spec)
                    {
                        problems.extend(found);
                    }
                }
            }
        }
        if problems.is_empty() { Ok(()) } else { Err(problems) }
    }
}

/// The failure message of an outcome part refused for `problems`: the
/// first ten, then how many more.
fn refused(what: &str, problems: &[Violation]) -> String {
    let listed: Vec<String> = problems
        .iter()
        .take(10)
        .map(|p| format!("{}: {}", p.field, p.description))
        .collect();
    let more = problems.len().saturating_sub(listed.len());
    let mut message = format!("{what} was refused: {}", listed.join("; "));
    if more > 0 {
        message.push_str(&format!(" (and {more} more)"));
    }
    message
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
