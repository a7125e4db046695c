//! The broker duty: serves `converge.worker.v1.WorkerService`.
//!
//! Each worker holds one bidirectional stream. The session claims tasks for
//! the (kind, version) pairs the worker serves and reports ready, up to the
//! worker's `max_inflight`, streams them down, and applies the results that
//! come back through the database fence (lease token, claim epoch,
//! generation, manifest version). When a stream ends while this process
//! stays up, its leases are released at once so other workers can take the
//! tasks; when this process is shutting down they are kept for the worker to
//! resume on its next stream (a successor under the same identity frees
//! those nobody resumed, ADR 37). A worker that hangs silently stops
//! attesting its leases and the reaper frees them.

mod claims;
mod configs;
mod outbox;
mod registry;
mod session;
mod wire;

pub use wire::Composition;

/// A composer worker's answer to a plan as a session stored it (an encoded
/// `ComposeResult`), in domain form.
pub fn plan_answer(encoded: &[u8]) -> Result<Composition, prost::DecodeError> {
    use prost::Message as _;
    converge_proto::worker_v1::ComposeResult::decode(encoded).map(wire::composition)
}

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use converge_proto::worker_v1 as wpb;
use converge_proto::worker_v1::work_stream_request::Payload as Up;
use converge_proto::worker_v1::worker_service_server::WorkerService;
use sqlx::PgPool;
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use uuid::Uuid;

use crate::catalog::KindCatalog;
use crate::cluster::LoadSource;
use crate::contract::ResponseStream;
use crate::contract::authz::{Authorizer, on_version};
use crate::contract::caller;
use crate::contract::status::ApiError;
use crate::db::notify::{Channel, Notifications, Subscription};
use crate::domain::authz::Verb;
use crate::domain::shard::{MemberLoad, ShardRange};
use crate::domain::violation::{Violation, clip};
use registry::{BrokerLoad, SessionInfo, SessionRegistry};
use session::Session;

/// How converge's own sessions (the kinds no worker takes part in, ADR 49)
/// are listed among the connected workers.
const SERVER_IDENTITY: &str = "converge";
/// Their agent string.
const SERVER_AGENT: &str = "converge/compositions";
/// How many of them each broker runs: each evaluates and applies one
/// composition at a time.
const SERVER_SESSIONS: usize = 2;
/// Tasks each of them claims per kind and round.
const SERVER_CLAIM: usize = 64;
/// How often the kinds they serve are re-read without a notification.
const SERVED_RECHECK: Duration = Duration::from_secs(30);

/// Largest number of tasks one worker may hold at once.
const MAX_WORKER_INFLIGHT: usize = 10_000;
/// Most pairs one GetProviderConfig call may ask for.
const MAX_CONFIG_PAIRS: usize = 1000;

/// Counters of the broker duty.
#[derive(Debug, Default)]
pub struct BrokerStats {
    /// Results applied.
    pub applied: AtomicU64,
    /// Results dropped by the fence.
    pub stale: AtomicU64,
    /// Failures recorded.
    pub failed: AtomicU64,
    /// Tasks dispatched (every stage counts).
    pub dispatched: AtomicU64,
    /// Compositions applied.
    pub composed: AtomicU64,
    /// Worker streams open right now.
    pub connected: AtomicI64,
    /// Tasks held by this broker's streams right now.
    pub in_flight: AtomicI64,
}

impl LoadSource for BrokerStats {
    fn load(&self) -> MemberLoad {
        let read = |counter: &AtomicU64| i64::try_from(counter.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
        let gauge = |gauge: &AtomicI64| i32::try_from(gauge.load(Ordering::Relaxed).max(0)).unwrap_or(i32::MAX);
        MemberLoad {
            in_flight: gauge(&self.in_flight),
            connected_workers: gauge(&self.connected),
            counters: BTreeMap::from([
                ("dispatched".to_owned(), read(&self.dispatched)),
                ("applied".to_owned(), read(&self.applied)),
                ("failed".to_owned(), read(&self.failed)),
                ("stale".to_owned(), read(&self.stale)),
                ("composed".to_owned(), read(&self.composed)),
            ]),
            workers: Vec::new(),
        }
    }
}

/// The broker of this process.
#[derive(Debug)]
pub struct Broker {
    /// Which kinds each worker identity may serve.
    authz: Authorizer,
    pool: PgPool,
    /// This process's notification feed, for local wake-ups.
    notifications: Notifications,
    member_id: String,
    catalog: Arc<KindCatalog>,
    /// This member's shard range: its claims look there first.
    shards: watch::Receiver<Option<ShardRange>>,
    /// Bumped on every `work_ready` notification; a session that was busy
    /// when it changed still sees the change (no lost wake-ups).
    wake: watch::Sender<u64>,
    /// Bumped on every `plan_requested` notification: sessions of workers
    /// that compose then look for plans (and only then).
    plan_wake: watch::Sender<u64>,
    /// When work this broker requeued falls due: the due timer bumps `wake`
    /// then, so the work is claimed when it becomes due, not on the next
    /// idle poll.
    due: Arc<DueTimes>,
    /// The default provider configs, pushed to sessions as they change.
    configs: Arc<configs::DefaultConfigs>,
    /// Tasks claimed for the streams of a kind version and not yet taken.
    claims: claims::Claims,
    /// Results the streams append to the outbox, written together.
    outbox: outbox::Outbox,
    stats: Arc<BrokerStats>,
    /// The open worker streams, for the heartbeat's listing.
    sessions: Arc<SessionRegistry>,
    /// Flips to true when this process shuts down: every session then ends
    /// its stream with UNAVAILABLE and keeps its leases for the worker to
    /// resume elsewhere.
    closing: watch::Receiver<bool>,
}

/// The instants at which requeued work falls due, earliest first, and the
/// signal that re-arms the timer when an earlier one arrives. Nothing is
/// kept or woken when nothing is requeued.
#[derive(Debug, Default)]
struct DueTimes {
    times: std::sync::Mutex<BinaryHeap<Reverse<Instant>>>,
    changed: Notify,
}

impl DueTimes {
    /// Most instants kept; past it, the nearest are kept (later work is
    /// still found by the idle poll).
    const CAPACITY: usize = 4096;

    fn add(&self, at: Instant) {
        let Ok(mut times) = self.times.lock() else {
            return;
        };
        let earliest = times.peek().is_none_or(|Reverse(first)| at < *first);
        if times.len() >= Self::CAPACITY {
            return;
        }
        times.push(Reverse(at));
        drop(times);
        if earliest {
            self.changed.notify_one();
        }
    }

    /// Removes the instants that have passed; returns whether any had, and
    /// the next one.
    fn take_passed(&self, now: Instant) -> (bool, Option<Instant>) {
        let Ok(mut times) = self.times.lock() else {
            return (false, None);
        };
        let mut passed = false;
        while times.peek().is_some_and(|Reverse(at)| *at <= now) {
            times.pop();
            passed = true;
        }
        (passed, times.peek().map(|Reverse(at)| *at))
    }
}

impl Broker {
    /// A broker claiming as `member_id`, preferring the shards of `shards`,
    /// until `closing` flips; spawns the loop that turns `work_ready`
    /// notifications into wake-ups.
    pub fn start(
        pool: PgPool,
        notifications: &Notifications,
        member_id: String,
        catalog: Arc<KindCatalog>,
        shards: watch::Receiver<Option<ShardRange>>,
        authz: Authorizer,
        closing: watch::Receiver<bool>,
    ) -> Arc<Self> {
        let broker = Arc::new(Self {
            authz,
            pool,
            notifications: notifications.clone(),
            member_id,
            catalog,
            shards,
            wake: watch::channel(0).0,
            plan_wake: watch::channel(0).0,
            due: Arc::default(),
            configs: configs::DefaultConfigs::new(),
            claims: claims::Claims::default(),
            outbox: outbox::Outbox::default(),
            stats: Arc::default(),
            sessions: Arc::default(),
            closing,
        });
        tokio::spawn(configs::refresh(
            Arc::downgrade(&broker.configs),
            broker.pool.clone(),
            notifications.subscribe(&[Channel::ProviderConfigChanged]),
        ));
        tokio::spawn(forward_wakes(
            Arc::downgrade(&broker),
            notifications.subscribe(&[Channel::WorkReady]),
            |broker| &broker.wake,
        ));
        tokio::spawn(forward_wakes(
            Arc::downgrade(&broker),
            notifications.subscribe(&[Channel::PlanRequested]),
            |broker| &broker.plan_wake,
        ));
        tokio::spawn(wake_when_due(Arc::downgrade(&broker), broker.due.clone()));
        tokio::spawn(release_claims_when_closing(
            Arc::downgrade(&broker),
            broker.closing.clone(),
        ));
        broker.start_server_sessions(notifications);
        broker
    }

    /// Starts converge's own sessions, which claim the tasks of the kinds
    /// whose every stage the server runs (a composition declared as data
    /// and nothing a worker must do), and the loop that keeps their kinds
    /// current. With no such kind they claim nothing and touch no table.
    fn start_server_sessions(self: &Arc<Self>, notifications: &Notifications) {
        let (served, feed) = watch::channel(BTreeSet::new());
        tokio::spawn(refresh_served(
            Arc::downgrade(self),
            served,
            notifications.subscribe(&[Channel::KindManifestChanged]),
        ));
        for _ in 0..SERVER_SESSIONS {
            let (out, mut rx) = mpsc::channel(16);
            // Nothing is sent to a worker; config pushes are dropped.
            tokio::spawn(async move { while rx.recv().await.is_some() {} });
            let session = Session::new(
                self.clone(),
                BTreeSet::new(),
                SERVER_CLAIM,
                format!("{SERVER_IDENTITY}:compositions"),
                out,
                None,
                crate::contract::authz::Principal::InProcess,
            );
            tokio::spawn(session.run(None, Some(feed.clone()), Vec::new()));
        }
    }

    /// Notes that work falls due at `at`: every session is woken then.
    fn due_at(&self, at: Instant) {
        self.due.add(at);
    }

    /// The broker's counters.
    pub fn stats(&self) -> &BrokerStats {
        &self.stats
    }

    /// The broker's counters, shared (for metric callbacks).
    pub fn shared_stats(&self) -> Arc<BrokerStats> {
        self.stats.clone()
    }

    /// The broker's load, for the membership heartbeat: its counters and
    /// the workers connected to it.
    pub fn load_source(&self) -> Arc<dyn LoadSource> {
        Arc::new(BrokerLoad {
            stats: self.stats.clone(),
            sessions: self.sessions.clone(),
        })
    }
}

/// Keeps the set of server-only kinds current: on every manifest change,
/// and every [`SERVED_RECHECK`] in case a notification was missed.
async fn refresh_served(
    broker: std::sync::Weak<Broker>,
    served: watch::Sender<BTreeSet<(String, i32)>>,
    mut changes: Subscription,
) {
    let mut tick = tokio::time::interval(SERVED_RECHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        {
            let Some(broker) = broker.upgrade() else {
                return;
            };
            match server_only_kinds(&broker).await {
                Ok(kinds) => {
                    served.send_if_modified(|current| {
                        let changed = *current != kinds;
                        *current = kinds;
                        changed
                    });
                }
                Err(e) => tracing::debug!(error = %e, "could not read the composed kinds"),
            }
        }
        tokio::select! {
            _ = tick.tick() => {}
            notice = changes.next() => if notice.is_none() {
                return;
            },
        }
    }
}

/// The kinds whose every stage the server runs, as their manifests stand
/// now (compiled at exactly the stored version: the catalog's own refresh
/// may not have seen the change yet).
async fn server_only_kinds(broker: &Broker) -> Result<BTreeSet<(String, i32)>, crate::store::StoreError> {
    let mut kinds = BTreeSet::new();
    let composed = crate::store::kinds::composed_kinds(&broker.pool).await?;
    if composed.is_empty() {
        return Ok(kinds);
    }
    let mut conn = broker.pool.acquire().await.map_err(crate::store::StoreError::from)?;
    for (kind, version, manifest_version) in composed {
        match broker
            .catalog
            .compiled(&mut conn, &kind, version, manifest_version)
            .await
        {
            Ok(compiled) if compiled.plan.server_only() => {
                kinds.insert((kind, version));
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, kind, version, "could not compile a composed kind"),
        }
    }
    Ok(kinds)
}

/// Forwards a subscription's notifications (and possibly missed ones) to
/// the sessions as bumps of the `signal` they watch, until the broker is
/// dropped or the feed stops.
async fn forward_wakes(
    broker: std::sync::Weak<Broker>,
    mut notices: Subscription,
    signal: fn(&Broker) -> &watch::Sender<u64>,
) {
    while notices.next().await.is_some() {
        let Some(broker) = broker.upgrade() else {
            return;
        };
        signal(&broker).send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// Releases the tasks claimed for streams that none took, once the process
/// closes (no worker will resume them).
async fn release_claims_when_closing(broker: std::sync::Weak<Broker>, mut closing: watch::Receiver<bool>) {
    while !*closing.borrow_and_update() {
        if closing.changed().await.is_err() {
            return;
        }
    }
    if let Some(broker) = broker.upgrade() {
        broker.claims.release_all(&broker.pool, &broker.member_id).await;
    }
}

/// Wakes the sessions whenever requeued work falls due, until the broker is
/// dropped (checked at least every few seconds while nothing is due).
async fn wake_when_due(broker: std::sync::Weak<Broker>, due: Arc<DueTimes>) {
    const IDLE_CHECK: Duration = Duration::from_secs(5);
    loop {
        let (passed, next) = due.take_passed(Instant::now());
        if passed {
            let Some(broker) = broker.upgrade() else {
                return;
            };
            broker.wake.send_modify(|n| *n = n.wrapping_add(1));
        }
        if broker.strong_count() == 0 {
            return;
        }
        let until = next.unwrap_or_else(|| Instant::now() + IDLE_CHECK);
        tokio::select! {
            _ = tokio::time::sleep_until(until) => {}
            _ = due.changed.notified() => {}
        }
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
        // Without a SPIFFE ID the peer address still tells workers apart
        // (and is what `ListClusterMembers` lists); "anonymous" would not.
        let identity = caller::transport_identity(&request);
        let principal = self.broker.authz.principal(&request);
        let actor = format!("worker:{identity}");
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
        for pair in &subscribe.kinds {
            let version = pair.kind_version.max(1);
            self.broker.authz.require_all(
                &principal,
                on_version(Verb::Serve, &pair.kind, version),
                &format!("{}@{version}", clip(pair.kind.clone(), 63)),
            )?;
        }
        let max = usize::try_from(subscribe.max_inflight.max(1))
            .unwrap_or(1)
            .min(MAX_WORKER_INFLIGHT);
        let (out, rx) = mpsc::channel(max + 16);
        let kinds: BTreeSet<(String, i32)> = subscribe
            .kinds
            .iter()
            .map(|k| (k.kind.clone(), k.kind_version.max(1)))
            .collect();
        let listed = self.broker.sessions.open(SessionInfo {
            identity,
            agent: subscribe.agent.clone(),
            kinds: kinds.iter().cloned().collect(),
            max_inflight: max,
        });
        let session = Session::new(self.broker.clone(), kinds, max, actor, out, Some(listed), principal);
        let resumed: Vec<(Uuid, i64)> = subscribe
            .resumed
            .iter()
            .filter_map(|r| Uuid::parse_str(&r.lease_token).ok().map(|t| (t, r.claim_epoch)))
            .collect();
        tokio::spawn(session.run(Some(inbound), None, resumed));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn get_provider_config(
        &self,
        request: Request<wpb::GetProviderConfigRequest>,
    ) -> Result<Response<wpb::GetProviderConfigResponse>, Status> {
        let req = request.into_inner();
        if req.kinds.is_empty() {
            return Err(ApiError::from(Violation::new("/kinds", "must name at least one kind")).into());
        }
        if req.kinds.len() > MAX_CONFIG_PAIRS {
            return Err(ApiError::from(Violation::new(
                "/kinds",
                format!("at most {MAX_CONFIG_PAIRS} pairs per call"),
            ))
            .into());
        }
        let pairs: Vec<(String, i32)> = req.kinds.iter().map(|k| (k.kind.clone(), k.kind_version)).collect();
        let defaults = crate::store::provider_configs::defaults(&self.broker.pool, &pairs)
            .await
            .map_err(ApiError::from)?;
        let entries = defaults
            .into_iter()
            .map(|config| wpb::ProviderConfigEntry {
                spec: crate::contract::convert::json_to_struct(&config.spec),
                kind: config.kind,
                kind_version: config.kind_version,
                data: config.data,
            })
            .collect();
        Ok(Response::new(wpb::GetProviderConfigResponse { entries }))
    }
}
