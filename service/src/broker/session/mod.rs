//! One worker stream: claims tasks for the pairs the worker serves, walks
//! each reconcile task through its pipeline (compose → work → rollup), runs
//! teardown tasks as a single delete stage, and hands the final results to
//! the outbox in batches. Reactor deliveries and operations, which run
//! beside reconciles, have their own modules.

mod deliveries;
mod operations;
mod plans;
mod reconciles;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use converge_proto::worker_v1 as wpb;
use converge_proto::worker_v1::work_stream_request::Payload as Up;
use futures::FutureExt;
use tokio::sync::{mpsc, watch};
use tonic::{Status, Streaming};
use uuid::Uuid;

use super::Broker;
use super::registry::Listed;
use crate::contract::authz::{OwnedScope, Principal, on_version};
use crate::contract::status::{ApiError, Reason, is_undecodable, undecodable};
use crate::db::notify::Channel;
use crate::domain::authz::Verb;
use crate::domain::composition::StagePlan;
use crate::domain::violation::{Violation, clip};
use crate::store::leases::{self, Leased};
use crate::store::operations as operation_store;
use crate::store::provider_configs;
use crate::store::reactors::{self, ClaimedDelivery};
use crate::store::work::{self, TaskResult};
use crate::store::{StoreError, StoreResult};
use operations::HeldOperation;
use plans::HeldPlan;
use reconciles::InFlight;

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
/// Most final results a session keeps while the database refuses them
/// (beyond it the oldest go: their workers resend them after a reconnect,
/// or the reaper frees their leases).
const MAX_KEPT_RESULTS: usize = 10_000;
/// First and longest pause between attempts to write results the database
/// refused.
const WRITE_RETRY: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(2));

/// The next message of a worker's stream; never for converge's own session.
async fn next_message(
    inbound: &mut Option<Streaming<wpb::WorkStreamRequest>>,
) -> Result<Option<wpb::WorkStreamRequest>, Status> {
    match inbound {
        Some(stream) => stream.message().await,
        None => std::future::pending().await,
    }
}

/// The kinds converge's own session serves, when they change; never for a
/// worker's session (or once the feed is gone).
async fn served_changed(
    served: &mut Option<watch::Receiver<BTreeSet<(String, i32)>>>,
) -> Option<BTreeSet<(String, i32)>> {
    let feed = served.as_mut()?;
    if feed.changed().await.is_err() {
        *served = None;
        return None;
    }
    Some(feed.borrow_and_update().clone())
}

/// Resolves when the policy changes; never without a policy.
async fn policy_changed(policy: &mut Option<watch::Receiver<u64>>) -> Option<()> {
    match policy {
        Some(rx) => rx.changed().await.ok(),
        None => std::future::pending().await,
    }
}

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

/// What one lease of a stream holds.
enum Held {
    /// A reconcile or teardown task (boxed: it carries the stages' output).
    Task(Box<InFlight>),
    /// A reactor delivery.
    Delivery(ClaimedDelivery),
    /// An operation.
    Operation(HeldOperation),
}

impl Held {
    /// The leased table this lease is a row of.
    fn table(&self) -> Leased {
        match self {
            Held::Task(_) => Leased::Tasks,
            Held::Delivery(_) => Leased::Deliveries,
            Held::Operation(_) => Leased::Operations,
        }
    }
}

/// The broker side of one worker stream.
pub(super) struct Session {
    broker: Arc<Broker>,
    kinds: BTreeSet<(String, i32)>,
    ready: BTreeSet<(String, i32)>,
    max: usize,
    /// Everything this stream holds, by lease token (unique across the
    /// three leased tables): one lookup per completion.
    held: HashMap<Uuid, Held>,
    /// The plans' composes sent to the worker, by request id (apart from
    /// `held`: they take no task slot and have no lease row).
    plans: HashMap<Uuid, HeldPlan>,
    /// Deliveries that succeeded, not yet acknowledged in the database
    /// (written with the batch, like results).
    delivered: Vec<(Uuid, i64)>,
    /// When the next claim round looks for operations (now after a wake-up
    /// or a completion; an idle poll later after a claim found none).
    operations_due: tokio::time::Instant,
    /// Whether the next claim round looks for plans (after a
    /// `plan_requested` notification, or a full claim of them).
    plans_due: bool,
    /// Final results not yet written to the outbox (kept across a failed
    /// write, and written when the database is back).
    results: Vec<TaskResult>,
    /// Completions this session is done with, to acknowledge to the worker
    /// with the next flush (ResultAck).
    acks: Vec<wpb::LeaseRef>,
    /// After a failed write of results: when to try again, and the pause
    /// after that.
    write_retry: Option<(tokio::time::Instant, Duration)>,
    /// How many tasks this stream last counted into the broker's gauge.
    counted: i64,
    /// Who the worker is, as its events record it ("worker:<identity>").
    actor: String,
    out: mpsc::Sender<Result<wpb::WorkStreamResponse, Status>>,
    /// This stream's entry in the broker's listing of connected workers
    /// (unlisted when the session ends); `None` for converge's own session
    /// while it serves no kind.
    listed: Option<Listed>,
    /// Who the worker is for the authorization policy: a policy change
    /// takes away the kinds it no longer grants.
    principal: Principal,
}

impl Session {
    pub(super) fn new(
        broker: Arc<Broker>,
        kinds: BTreeSet<(String, i32)>,
        max: usize,
        actor: String,
        out: mpsc::Sender<Result<wpb::WorkStreamResponse, Status>>,
        listed: Option<Listed>,
        principal: Principal,
    ) -> Self {
        Self {
            broker,
            ready: kinds.clone(),
            kinds,
            max,
            held: HashMap::new(),
            plans: HashMap::new(),
            delivered: Vec::new(),
            operations_due: tokio::time::Instant::now(),
            plans_due: false,
            results: Vec::new(),
            acks: Vec::new(),
            write_retry: None,
            counted: 0,
            actor,
            out,
            listed,
            principal,
        }
    }

    /// Serves `kinds` from now on (converge's own session, whose kinds follow
    /// the manifests), listed anew for the heartbeat.
    fn serve(&mut self, kinds: BTreeSet<(String, i32)>) {
        if kinds == self.kinds {
            return;
        }
        // Listed only while it serves something: an idle one would show
        // as a worker of nothing.
        self.listed = (!kinds.is_empty()).then(|| {
            self.broker.sessions.open(super::registry::SessionInfo {
                identity: super::SERVER_IDENTITY.to_owned(),
                agent: super::SERVER_AGENT.to_owned(),
                kinds: kinds.iter().cloned().collect(),
                max_inflight: self.max,
            })
        });
        self.ready = kinds.clone();
        self.kinds = kinds;
    }

    /// Drops the kinds the policy no longer lets this worker serve (what it
    /// holds of them finishes: those were given under the grant). False
    /// when nothing is left, after telling the worker why.
    async fn apply_policy(&mut self) -> bool {
        let authz = &self.broker.authz;
        let principal = &self.principal;
        let revoked: Vec<(String, i32)> = self
            .kinds
            .iter()
            .filter(|(kind, version)| {
                authz.scope(principal, on_version(Verb::Serve, kind, *version)) != OwnedScope::All
            })
            .cloned()
            .collect();
        if revoked.is_empty() {
            return true;
        }
        for pair in &revoked {
            self.kinds.remove(pair);
            self.ready.remove(pair);
        }
        let described = revoked
            .iter()
            .map(|(kind, version)| format!("{kind}@{version}"))
            .collect::<Vec<_>>()
            .join(", ");
        tracing::warn!(target: "converge::audit", actor = %self.actor, kinds = %described, "serve grant revoked; the stream no longer receives these kinds");
        if self.kinds.is_empty() {
            let refusal = authz.refuse(principal, Verb::Serve.as_str(), &clip(described, 320));
            let _ = self.out.send(Err(refusal.into())).await;
            return false;
        }
        true
    }

    /// Serves the stream until it ends. `inbound` is the worker's stream;
    /// `None` for converge's own session, which has no worker and serves the
    /// kinds `served` says (ADR 49).
    pub(super) async fn run(
        mut self,
        mut inbound: Option<Streaming<wpb::WorkStreamRequest>>,
        mut served: Option<watch::Receiver<BTreeSet<(String, i32)>>>,
        resumed: Vec<(Uuid, i64)>,
    ) {
        let pool = self.broker.pool.clone();
        if let Err(e) = self.adopt(&resumed).await {
            tracing::warn!(error = %e, "could not adopt resumed leases");
        }
        // Converge's own sessions are not worker streams.
        let stream = i64::from(inbound.is_some());
        self.broker.stats.connected.fetch_add(stream, Ordering::Relaxed);
        let mut wake = self.broker.wake.subscribe();
        let mut plan_wake = self.broker.plan_wake.subscribe();
        let mut config_updates = self.broker.configs.subscribe();
        let mut closing = self.broker.closing.clone();
        let mut policy = self.broker.authz.changes();
        let mut busy_until = tokio::time::Instant::now() + LINGER;
        'session: loop {
            if *closing.borrow_and_update() {
                break;
            }
            self.count_in_flight();
            // A policy change published before this claim applies to it.
            if let Some(changes) = &mut policy
                && changes.has_changed().unwrap_or(false)
            {
                changes.borrow_and_update();
                if !self.apply_policy().await {
                    break;
                }
            }
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
                message = next_message(&mut inbound) => {
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
                        match next_message(&mut inbound).now_or_never() {
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
                _ = plan_wake.changed() => self.plans_due = true,
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
                Some(()) = policy_changed(&mut policy) => if !self.apply_policy().await {
                    break;
                },
                Some(kinds) = served_changed(&mut served) => self.serve(kinds),
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
        self.broker.stats.connected.fetch_sub(stream, Ordering::Relaxed);
        self.broker.stats.in_flight.fetch_sub(self.counted, Ordering::Relaxed);
        // A plan is not resumed on another stream: it goes back to be claimed.
        self.release_plans().await;
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
        for table in [Leased::Tasks, Leased::Deliveries, Leased::Operations] {
            let tokens: Vec<Uuid> = self
                .held
                .iter()
                .filter(|(_, held)| held.table() == table)
                .map(|(token, _)| *token)
                .collect();
            if let Err(e) = leases::release(&pool, table, &self.broker.member_id, &tokens).await {
                tracing::warn!(error = %e, ?table, "could not release the leases of a closed stream; the reaper frees them");
            }
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
        if let Some(listed) = &self.listed {
            listed.set_in_flight(self.held());
        }
    }

    /// Tasks, deliveries and operations this stream holds (against the
    /// worker's max).
    /// On a closing process: handles what the worker sends for the work this
    /// stream holds, until it holds nothing, the worker stops sending or
    /// [`CLOSE_GRACE`] passes. What is still held then is resumed by the
    /// worker on its next stream.
    async fn take_last_results(&mut self, inbound: &mut Option<Streaming<wpb::WorkStreamRequest>>) {
        let deadline = tokio::time::Instant::now() + CLOSE_GRACE;
        while self.held() > 0 {
            let Ok(Ok(Some(message))) = tokio::time::timeout_at(deadline, next_message(inbound)).await else {
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
        self.held.len()
    }

    /// Takes over the leases a reconnecting worker still holds.
    async fn adopt(&mut self, resumed: &[(Uuid, i64)]) -> Result<(), StoreError> {
        let adopted = work::adopt(&self.broker.pool, &self.broker.member_id, resumed).await?;
        let others: Vec<(Uuid, i64)> = resumed.iter().filter(|(t, _)| !adopted.contains(t)).copied().collect();
        for delivery in reactors::adopt(&self.broker.pool, &self.broker.member_id, &others).await? {
            self.held.insert(delivery.lease_token, Held::Delivery(delivery));
        }
        let others: Vec<(Uuid, i64)> = others.into_iter().filter(|(t, _)| !self.held.contains_key(t)).collect();
        for operation in operation_store::adopt(&self.broker.pool, &self.broker.member_id, &others).await? {
            let plan = self.plan(&operation.kind, operation.kind_version).await;
            // A verb the manifest dropped meanwhile: the lease lapses and
            // the next claim ends the operation.
            if let Some(verb) = plan.verb(&operation.verb).cloned() {
                self.held.insert(
                    operation.lease_token,
                    Held::Operation(HeldOperation { operation, verb }),
                );
            }
        }
        for task in work::leased(&self.broker.pool, &adopted).await? {
            let plan = self.plan(&task.kind, task.kind_version).await;
            self.held
                .insert(task.lease_token, Held::Task(Box::new(InFlight::new(task, plan, None))));
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

    /// Writes the pending results (the fence drops stale ones) and
    /// acknowledges what is done to the worker.
    async fn flush(&mut self) {
        self.write_results().await;
        self.send_acks().await;
    }

    /// Tells the worker which completions it may forget.
    async fn send_acks(&mut self) {
        if self.acks.is_empty() {
            return;
        }
        let leases = std::mem::take(&mut self.acks);
        let message = wpb::WorkStreamResponse {
            payload: Some(wpb::work_stream_response::Payload::ResultAck(wpb::ResultAck { leases })),
        };
        // A stream that is gone ends the session; its worker resends.
        let _ = self.out.send(Ok(message)).await;
    }

    /// Acknowledges `results` (written, or found stale) to the worker.
    fn acknowledge(&mut self, results: &[TaskResult]) {
        self.acks.extend(results.iter().map(|r| wpb::LeaseRef {
            lease_token: r.lease.to_string(),
            claim_epoch: r.epoch,
        }));
    }

    /// Keeps results the database refused, to write them when it is back
    /// (the worker keeps attesting their leases meanwhile).
    fn keep_unwritten(&mut self, mut results: Vec<TaskResult>) {
        self.back_off();
        results.append(&mut self.results);
        let excess = results.len().saturating_sub(MAX_KEPT_RESULTS);
        if excess > 0 {
            tracing::warn!(
                dropped = excess,
                "too many unwritten results kept; the oldest are left to their workers' resends"
            );
            results.drain(..excess);
        }
        self.results = results;
    }

    /// Waits longer before the next write after a failed one.
    fn back_off(&mut self) {
        let pause = self
            .write_retry
            .map_or(WRITE_RETRY.0, |(_, pause)| (pause * 2).min(WRITE_RETRY.1));
        self.write_retry = Some((tokio::time::Instant::now() + pause, pause));
    }

    /// Writes the pending deliveries and results; the fence drops stale
    /// ones. After a failed write, waits its pause before trying again.
    async fn write_results(&mut self) {
        if self.results.is_empty() && self.delivered.is_empty() {
            return;
        }
        if let Some((at, _)) = self.write_retry
            && tokio::time::Instant::now() < at
        {
            return;
        }
        self.flush_deliveries().await;
        if self.results.is_empty() {
            return;
        }
        let results = std::mem::take(&mut self.results);
        let stats = self.broker.stats.clone();
        // Requeued work falls due its delay after the fence (the database
        // counts from the result's fence time): wake up for it then.
        let flushed_at = tokio::time::Instant::now();
        match self.write(&results).await {
            Ok(accepted) => {
                self.write_retry = None;
                self.acknowledge(&results);
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
            // Kept and written again shortly; the worker keeps them too
            // (unacknowledged) and attests their leases meanwhile.
            Err(e) => {
                tracing::warn!(error = %e, results = results.len(), "could not write results; keeping them to retry");
                self.keep_unwritten(results);
            }
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
            return self.append_outbox(results).await;
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
                self.append_outbox(results).await
            }
        }
    }

    /// Appends results to the outbox: with many streams on this broker,
    /// together with the other streams' (`broker::outbox`); with a few,
    /// directly, as their writes are already large.
    async fn append_outbox(&self, results: &[TaskResult]) -> StoreResult<Vec<Uuid>> {
        let streams = usize::try_from(self.broker.stats.connected.load(Ordering::Relaxed)).unwrap_or(0);
        if streams <= crate::broker::claims::FEW_STREAMS {
            return work::append_outbox(&self.broker.pool, results).await;
        }
        self.broker.outbox.append(&self.broker.pool, results.to_vec()).await
    }

    /// Claims and sends tasks while the worker has free slots; returns how
    /// many were sent.
    async fn dispatch(&mut self) -> Result<usize, StoreError> {
        let ready: Vec<(String, i32)> = self.ready.iter().cloned().collect();
        let shards = *self.broker.shards.borrow();
        let probe_operations = tokio::time::Instant::now() >= self.operations_due;
        let mut more_operations = false;
        if std::mem::take(&mut self.plans_due) {
            for (kind, version) in &ready {
                let plan = self.plan(kind, *version).await;
                if plan.compose.is_some() {
                    match self.dispatch_plans(kind, *version, &plan).await? {
                        Some(full) => self.plans_due |= full,
                        None => return Ok(0),
                    }
                }
            }
        }
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
            match self.dispatch_tasks(&kind, version, &plan, free, shards).await? {
                Some(n) => sent += n,
                None => return Ok(sent),
            }
        }
        if probe_operations && !more_operations {
            self.operations_due = tokio::time::Instant::now() + CLAIM_POLL;
        }
        Ok(sent)
    }

    /// The stages of a kind, from the stored manifest (the worker holds
    /// none), as the catalog compiled it: every claim round asks.
    async fn plan(&self, kind: &str, version: i32) -> Arc<StagePlan> {
        match self.broker.catalog.current(&self.broker.pool, kind, version).await {
            Some(compiled) => compiled.plan.clone(),
            None => Arc::new(StagePlan {
                work: Some("work".to_owned()),
                ..StagePlan::default()
            }),
        }
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
                // By table; a token this stream does not know is tried as a
                // task (the task table is where an unknown lease would be).
                let mut attested = leases::Attested::default();
                for lease in leases {
                    match self.held.get(&lease.0).map(Held::table) {
                        Some(Leased::Deliveries) => attested.deliveries.push(lease),
                        Some(Leased::Operations) => attested.operations.push(lease),
                        // A plan has no lease row to keep.
                        None if self.plans.contains_key(&lease.0) => {}
                        Some(Leased::Tasks) | None => attested.tasks.push(lease),
                    }
                }
                leases::heartbeat(&self.broker.pool, &self.broker.member_id, &attested).await?;
                Ok(())
            }
            Some(Up::Interest(interest)) => {
                let pair = (interest.kind, interest.kind_version.max(1));
                let ready = interest.ready && self.kinds.contains(&pair);
                if self.kinds.contains(&pair)
                    && let Some(listed) = &self.listed
                {
                    listed.set_ready(&pair, ready);
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

    /// Handles a completion, then acknowledges it unless it became a
    /// result or delivery still to write (acknowledged once written, kept
    /// and retried while the database refuses it).
    async fn complete(&mut self, complete: wpb::StageComplete) -> Result<(), SessionError> {
        let lease = wpb::LeaseRef {
            lease_token: complete.lease_token.clone(),
            claim_epoch: complete.claim_epoch,
        };
        let settled = self.settle(complete).await;
        let token = Uuid::parse_str(&lease.lease_token).ok();
        let to_write = settled.is_ok()
            && token.is_some_and(|token| {
                self.results.last().is_some_and(|r| r.lease == token)
                    || self.delivered.last().is_some_and(|(t, _)| *t == token)
            });
        // Also after a database failure mid-stage (not a final result): the
        // worker must stop attesting the lease so that it lapses and the
        // task runs again, as it would have without acknowledgements.
        if !to_write {
            self.acks.push(lease);
        }
        settled
    }

    async fn settle(&mut self, complete: wpb::StageComplete) -> Result<(), SessionError> {
        let stale = |session: &Self| {
            session.broker.stats.stale.fetch_add(1, Ordering::Relaxed);
            Ok(())
        };
        let Ok(token) = Uuid::parse_str(&complete.lease_token) else {
            return stale(self);
        };
        if let Some(plan) = self.plans.remove(&token) {
            self.planned(plan, complete).await?;
            return Ok(());
        }
        // A completion that does not match the dispatch leaves the lease
        // held: the right answer may still come.
        match self.held.remove(&token) {
            Some(Held::Delivery(delivery))
                if delivery.claim_epoch == complete.claim_epoch && delivery.generation == complete.generation =>
            {
                self.delivered(delivery, &complete).await?;
                Ok(())
            }
            Some(Held::Operation(held)) if held.operation.claim_epoch == complete.claim_epoch => {
                self.operated(held, &complete).await?;
                Ok(())
            }
            Some(Held::Task(flight))
                if flight.task.claim_epoch == complete.claim_epoch && flight.task.generation == complete.generation =>
            {
                self.complete_task(*flight, complete).await
            }
            Some(other) => {
                self.held.insert(token, other);
                stale(self)
            }
            None => stale(self),
        }
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
