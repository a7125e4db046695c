//! The broker duty: serves `converge.worker.v1.WorkerService`.
//!
//! Each worker holds one bidirectional stream. The session claims tasks for
//! the (kind, version) pairs the worker serves and reports ready, up to the
//! worker's `max_inflight`, streams them down, and applies the results that
//! come back through the database fence (lease token, claim epoch,
//! generation, manifest version). When the stream ends, its leases are
//! released at once so other workers can take the tasks; a worker that hangs
//! silently stops attesting its leases and the reaper frees them.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use converge_proto::worker_v1 as wpb;
use converge_proto::worker_v1::work_stream_request::Payload as Up;
use converge_proto::worker_v1::work_stream_response::Payload as Down;
use converge_proto::worker_v1::worker_service_server::WorkerService;
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use uuid::Uuid;

use crate::api::ResponseStream;
use crate::api::convert::{json_to_struct, struct_to_json};
use crate::api::status::{ApiError, Reason};
use crate::catalog::KindCatalog;
use crate::domain::manifest::{Emit, Trigger};
use crate::domain::violation::Violation;
use crate::store::work::{self, ClaimedTask, Completion, CompletionOutcome};

/// Failsafe interval between claim attempts when idle.
const CLAIM_POLL: Duration = Duration::from_millis(500);
/// Claim interval while work is flowing. Wake-ups are throttled to one per
/// 50 ms window, so after activity a session keeps polling at least that
/// long to catch work committed just after the wake it saw.
const BUSY_POLL: Duration = Duration::from_millis(10);
/// How long a session keeps polling fast after the last sign of work.
const LINGER: Duration = Duration::from_millis(120);
/// Largest number of tasks one worker may hold at once.
const MAX_WORKER_INFLIGHT: usize = 10_000;

/// Counters of the broker duty.
#[derive(Debug, Default)]
pub struct BrokerStats {
    /// Results applied.
    pub applied: AtomicU64,
    /// Results dropped by the fence.
    pub stale: AtomicU64,
    /// Failures recorded.
    pub failed: AtomicU64,
    /// Tasks dispatched.
    pub dispatched: AtomicU64,
}

/// The broker of this process.
#[derive(Debug)]
pub struct Broker {
    pool: PgPool,
    member_id: String,
    catalog: Arc<KindCatalog>,
    /// Bumped on every `work_ready` notification; a session that was busy
    /// when it changed still sees the change (no lost wake-ups).
    wake: watch::Sender<u64>,
    stats: BrokerStats,
}

impl Broker {
    /// A broker claiming as `member_id`; spawns the `work_ready` listener.
    pub fn start(pool: PgPool, member_id: String, catalog: Arc<KindCatalog>) -> Arc<Self> {
        let broker = Arc::new(Self {
            pool,
            member_id,
            catalog,
            wake: watch::channel(0).0,
            stats: BrokerStats::default(),
        });
        tokio::spawn(listen(Arc::downgrade(&broker)));
        broker
    }

    /// The broker's counters.
    pub fn stats(&self) -> &BrokerStats {
        &self.stats
    }
}

/// Forwards `work_ready` notifications until the broker is dropped.
async fn listen(broker: std::sync::Weak<Broker>) {
    loop {
        let Some(pool) = broker.upgrade().map(|b| b.pool.clone()) else {
            return;
        };
        let listening = async {
            let mut listener = PgListener::connect_with(&pool).await?;
            listener.listen("work_ready").await?;
            loop {
                listener.recv().await?;
                let Some(broker) = broker.upgrade() else {
                    return Ok::<(), sqlx::Error>(());
                };
                broker.wake.send_modify(|n| *n = n.wrapping_add(1));
            }
        };
        if let Err(e) = listening.await {
            tracing::debug!(error = %e, "work_ready listener failed; retrying");
        }
        if pool.is_closed() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Serves `converge.worker.v1.WorkerService`.
#[derive(Debug, Clone)]
pub struct WorkerApi {
    broker: Arc<Broker>,
}

impl WorkerApi {
    /// A service over `broker`.
    pub fn new(broker: Arc<Broker>) -> Self {
        Self { broker }
    }
}

#[tonic::async_trait]
impl WorkerService for WorkerApi {
    type WorkStreamStream = ResponseStream<wpb::WorkStreamResponse>;

    async fn work_stream(
        &self,
        request: Request<Streaming<wpb::WorkStreamRequest>>,
    ) -> Result<Response<Self::WorkStreamStream>, Status> {
        let mut inbound = request.into_inner();
        let first = inbound.message().await?;
        let Some(wpb::WorkStreamRequest {
            payload: Some(Up::Subscribe(subscribe)),
        }) = first
        else {
            return Err(ApiError::from(Violation::new("/subscribe", "the first message must be Subscribe")).into());
        };
        if subscribe.kinds.is_empty() {
            return Err(ApiError::from(Violation::new("/subscribe/kinds", "must name at least one kind")).into());
        }
        let max = usize::try_from(subscribe.max_inflight.max(1))
            .unwrap_or(1)
            .min(MAX_WORKER_INFLIGHT);
        let (out, rx) = mpsc::channel(max + 16);
        let session = Session {
            broker: self.broker.clone(),
            kinds: subscribe
                .kinds
                .iter()
                .map(|k| (k.kind.clone(), k.kind_version.max(1)))
                .collect(),
            ready: subscribe
                .kinds
                .iter()
                .map(|k| (k.kind.clone(), k.kind_version.max(1)))
                .collect(),
            max,
            leases: HashSet::new(),
            out,
        };
        let resumed: Vec<(Uuid, i64)> = subscribe
            .resumed
            .iter()
            .filter_map(|r| Uuid::parse_str(&r.lease_token).ok().map(|t| (t, r.claim_epoch)))
            .collect();
        tokio::spawn(session.run(inbound, resumed));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn get_provider_config(
        &self,
        _request: Request<wpb::GetProviderConfigRequest>,
    ) -> Result<Response<wpb::GetProviderConfigResponse>, Status> {
        // No provider configs exist yet: every kind runs on its built-in defaults.
        Ok(Response::new(wpb::GetProviderConfigResponse::default()))
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
    Database(#[from] sqlx::Error),
}

struct Session {
    broker: Arc<Broker>,
    kinds: BTreeSet<(String, i32)>,
    ready: BTreeSet<(String, i32)>,
    max: usize,
    /// Leases of the tasks this stream holds.
    leases: HashSet<Uuid>,
    out: mpsc::Sender<Result<wpb::WorkStreamResponse, Status>>,
}

impl Session {
    async fn run(mut self, mut inbound: Streaming<wpb::WorkStreamRequest>, resumed: Vec<(Uuid, i64)>) {
        let pool = self.broker.pool.clone();
        match work::adopt(&pool, &self.broker.member_id, &resumed).await {
            Ok(adopted) => {
                self.leases.extend(adopted);
            }
            Err(e) => tracing::warn!(error = %e, "could not adopt resumed leases"),
        }
        let mut wake = self.broker.wake.subscribe();
        let mut busy_until = tokio::time::Instant::now() + LINGER;
        loop {
            match self.dispatch().await {
                Ok(0) => {}
                Ok(_) => busy_until = tokio::time::Instant::now() + LINGER,
                Err(e) => tracing::warn!(error = %e, "claiming work failed"),
            }
            let pause = if tokio::time::Instant::now() < busy_until {
                BUSY_POLL
            } else {
                CLAIM_POLL
            };
            tokio::select! {
                message = inbound.message() => match message {
                    Ok(Some(message)) => match self.handle(message).await {
                        Ok(()) => {}
                        Err(SessionError::Protocol(status)) => {
                            let _ = self.out.send(Err(status)).await;
                            break;
                        }
                        // The lease stays: the worker's heartbeats stop
                        // covering it and the reaper makes it claimable again.
                        Err(SessionError::Database(e)) => {
                            tracing::warn!(error = %e, "could not apply a worker message");
                        }
                    },
                    Ok(None) | Err(_) => break,
                },
                _ = wake.changed() => busy_until = tokio::time::Instant::now() + LINGER,
                _ = tokio::time::sleep(pause) => {}
                _ = self.out.closed() => break,
            }
        }
        let tokens: Vec<Uuid> = self.leases.iter().copied().collect();
        if let Err(e) = work::release(&pool, &self.broker.member_id, &tokens).await {
            tracing::warn!(error = %e, "could not release the leases of a closed stream; the reaper frees them");
        }
    }

    /// Claims and sends tasks while the worker has free slots; returns how
    /// many were sent.
    async fn dispatch(&mut self) -> Result<usize, sqlx::Error> {
        let ready: Vec<(String, i32)> = self.ready.iter().cloned().collect();
        let mut sent = 0;
        for (kind, version) in ready {
            let free = self.max.saturating_sub(self.leases.len());
            if free == 0 {
                return Ok(sent);
            }
            let claimed = work::claim(
                &self.broker.pool,
                &self.broker.member_id,
                &kind,
                version,
                i64::try_from(free).unwrap_or(i64::MAX),
            )
            .await?;
            if claimed.is_empty() {
                continue;
            }
            let reaction = self.reaction(&kind, version).await;
            for task in claimed {
                // Tracked before sending: if the stream is gone, it is released with the others.
                self.leases.insert(task.lease_token);
                let message = stage_task(task, reaction.clone());
                if self.out.send(Ok(message)).await.is_err() {
                    return Ok(sent);
                }
                sent += 1;
                self.broker.stats.dispatched.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(sent)
    }

    /// The reaction a reconcile task runs: the kind's worker reaction
    /// (spec change emitting status without children), chosen from the
    /// stored manifest; the worker holds no manifest.
    async fn reaction(&self, kind: &str, version: i32) -> String {
        self.broker
            .catalog
            .current(&self.broker.pool, kind, version)
            .await
            .and_then(|compiled| {
                let reactions = &compiled.manifest.reactions;
                reactions
                    .iter()
                    .find(|r| {
                        r.trigger == Trigger::SpecChange
                            && r.emits.contains(&Emit::Status)
                            && !r.emits.contains(&Emit::Children)
                    })
                    .or_else(|| reactions.iter().find(|r| r.trigger == Trigger::SpecChange))
                    .map(|r| r.name.clone())
            })
            .unwrap_or_else(|| "work".to_owned())
    }
}

/// The task message of a claimed reconcile.
fn stage_task(task: ClaimedTask, reaction: String) -> wpb::WorkStreamResponse {
    {
        let status = task.status.as_ref().and_then(|s| json_to_struct(&s.0));
        let resource = wpb::Resource {
            uid: task.resource_id.to_string(),
            kind: task.kind.clone(),
            kind_version: task.kind_version,
            name: task.name,
            labels: task.labels.0,
            spec: json_to_struct(&task.spec.0),
            status: status.clone(),
            generation: task.generation,
            observed_generation: task.synced_gen,
            ready: task.synced_gen >= task.generation && task.health_ok,
            healthy: task.health_ok,
            finalizers: task.finalizers,
            ..Default::default()
        };
        let deadline = task.deadline_secs.map(|secs| {
            // Never zero: a real deadline that has just passed is still a deadline.
            let secs = secs.max(0.001);
            prost_types::Duration {
                seconds: secs.trunc() as i64,
                nanos: (secs.fract() * 1e9) as i32,
            }
        });
        wpb::WorkStreamResponse {
            payload: Some(Down::Task(wpb::StageTask {
                stage: wpb::Stage::Work.into(),
                kind: task.kind,
                kind_version: task.kind_version,
                resource: Some(resource),
                generation: task.generation,
                reaction,
                trigger: wpb::Trigger::SpecChange.into(),
                lease_token: task.lease_token.to_string(),
                claim_epoch: task.claim_epoch,
                manifest_version: task.manifest_version,
                task_deadline: deadline,
                attempt: task.attempts,
                input: Some(wpb::stage_task::Input::WorkInput(wpb::WorkInput { status })),
                ..Default::default()
            })),
        }
    }
}

impl Session {
    async fn handle(&mut self, message: wpb::WorkStreamRequest) -> Result<(), SessionError> {
        match message.payload {
            Some(Up::Complete(complete)) => self.complete(complete).await,
            Some(Up::Heartbeat(heartbeat)) => {
                let leases: Vec<(Uuid, i64)> = heartbeat
                    .leases
                    .iter()
                    .filter_map(|l| Uuid::parse_str(&l.lease_token).ok().map(|t| (t, l.claim_epoch)))
                    .collect();
                work::heartbeat(&self.broker.pool, &self.broker.member_id, &leases).await?;
                Ok(())
            }
            Some(Up::Interest(interest)) => {
                let pair = (interest.kind, interest.kind_version.max(1));
                if interest.ready && self.kinds.contains(&pair) {
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
        let Ok(token) = Uuid::parse_str(&complete.lease_token) else {
            self.broker.stats.stale.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        };
        self.leases.remove(&token);
        let conditions = complete
            .conditions
            .iter()
            .map(|c| {
                let status = match wpb::ConditionStatus::try_from(c.status) {
                    Ok(wpb::ConditionStatus::True) => "True",
                    Ok(wpb::ConditionStatus::False) => "False",
                    _ => "Unknown",
                };
                serde_json::json!({"type": c.r#type, "status": status, "reason": c.reason, "message": c.message})
            })
            .collect();
        let requeue_after_ms = complete
            .requeue_after
            .as_ref()
            .map(|d| {
                d.seconds
                    .saturating_mul(1000)
                    .saturating_add(i64::from(d.nanos / 1_000_000))
            })
            .filter(|ms| *ms > 0);
        let completion = Completion {
            lease_token: token,
            claim_epoch: complete.claim_epoch,
            generation: complete.generation,
            manifest_version: complete.manifest_version,
            status: complete.status.map(|s| struct_to_json(Some(s))),
            conditions,
            healthy: complete.healthy,
            error: complete.error.as_ref().map(|e| e.message.clone()),
            terminal: complete.error.as_ref().is_some_and(|e| e.terminal),
            requeue_after_ms,
        };
        let outcome = work::complete(&self.broker.pool, &completion).await?;
        let counter = match outcome {
            CompletionOutcome::Stale => {
                tracing::debug!(lease = %token, "dropped a stale completion");
                &self.broker.stats.stale
            }
            CompletionOutcome::Failed => &self.broker.stats.failed,
            CompletionOutcome::Applied | CompletionOutcome::Requeued => &self.broker.stats.applied,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}
