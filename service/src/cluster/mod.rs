//! Cluster membership and leaderless sharding.
//!
//! Every process registers in `cluster_members` and heartbeats. From the live
//! members of its role it computes its own contiguous range of the
//! [`SHARD_COUNT`](crate::domain::shard::SHARD_COUNT) logical shards; joins and leaves wake every member through
//! `LISTEN cluster_changed`, a crashed member drops out when its heartbeat
//! lapses (the periodic tick re-reads membership).

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::db::notify::{Channel, Notifications, Subscription};
use crate::domain::shard::{MemberLoad, ShardRange};
use crate::store::StoreError;
use crate::store::cluster::{self as store, MemberRegistration};
use crate::store::leases::{self, Leased};

/// How long a successor leaves its predecessor's leases to the workers that
/// reconnect and resume them. A worker reconnects with a backoff of 100 ms
/// doubling to a few seconds, so one that was connected when the
/// predecessor died is back well within this; a lease nobody resumed by
/// then belonged to a worker that died too, or to a result lost on the
/// wire, and would otherwise wait for the reaper (20 s without attestation).
pub const TAKEOVER_GRACE: Duration = Duration::from_secs(5);

/// Membership timing.
#[derive(Debug, Clone, Copy)]
pub struct MembershipTiming {
    /// How often a member heartbeats and re-reads its shard range.
    pub heartbeat: Duration,
    /// A member whose heartbeat is older than this is not live.
    pub liveness: Duration,
    /// A member whose heartbeat is older than this is deleted from the registry.
    pub gc_after: Duration,
    /// How long after taking over from its predecessor a process waits for
    /// workers to resume the predecessor's leases before freeing the rest
    /// (ADR 37).
    pub takeover_grace: Duration,
}

impl Default for MembershipTiming {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_secs(5),
            liveness: Duration::from_secs(15),
            gc_after: Duration::from_secs(300),
            takeover_grace: TAKEOVER_GRACE,
        }
    }
}

impl MembershipTiming {
    fn liveness_secs(&self) -> i32 {
        i32::try_from(self.liveness.as_secs().max(1)).unwrap_or(i32::MAX)
    }
}

/// This process's membership: keeps the registry row alive and publishes the
/// shard range as it changes.
#[derive(Debug)]
pub struct Membership {
    member_id: String,
    load: Arc<LoadSlot>,
    pool: PgPool,
    shards: watch::Receiver<Option<ShardRange>>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    /// Frees the predecessor's unresumed leases after the takeover grace.
    freeing: Option<JoinHandle<()>>,
}

impl Membership {
    /// Registers this process and starts heartbeating.
    pub async fn join(
        pool: PgPool,
        notifications: &Notifications,
        registration: MemberRegistration,
        timing: MembershipTiming,
    ) -> Result<Self, StoreError> {
        let mut predecessors = Vec::new();
        if let Some(identity) = &registration.identity {
            predecessors = store::take_over(&pool, identity, &registration.member_id).await?;
            if !predecessors.is_empty() {
                tracing::info!(gone = ?predecessors, identity, "took over from this process's predecessor");
            }
        }
        store::heartbeat(&pool, &registration, &MemberLoad::default()).await?;
        let range = store::assign_shards(&pool, &registration.member_id, timing.liveness_secs()).await?;
        let (shards_tx, shards) = watch::channel(range);
        let (stop, stop_rx) = watch::channel(false);
        // Only a successor has leases to free: nothing runs otherwise.
        let freeing = (!predecessors.is_empty()).then(|| {
            tokio::spawn(free_predecessor_leases(
                pool.clone(),
                predecessors,
                timing.takeover_grace,
                stop_rx.clone(),
            ))
        });
        let member_id = registration.member_id.clone();
        let load = Arc::new(LoadSlot::default());
        let task = tokio::spawn(heartbeat_loop(
            pool.clone(),
            notifications.subscribe(&[Channel::ClusterChanged]),
            registration,
            timing,
            shards_tx,
            stop_rx,
            load.clone(),
        ));
        tracing::info!(member_id, ?range, "joined the cluster");
        Ok(Self {
            member_id,
            load,
            pool,
            shards,
            stop,
            task,
            freeing,
        })
    }

    /// This member's id.
    pub fn member_id(&self) -> &str {
        &self.member_id
    }

    /// Reports `source`'s load with every heartbeat from now on.
    pub fn report_load(&self, source: Arc<dyn LoadSource>) {
        if let Ok(mut slot) = self.load.0.write() {
            *slot = Some(source);
        }
    }

    /// The current shard range, updated as membership changes.
    pub fn shards(&self) -> watch::Receiver<Option<ShardRange>> {
        self.shards.clone()
    }

    /// Stops heartbeating, leaves the shard tiling (draining) and then the
    /// registry, giving up at `deadline` (a database that does not answer
    /// would hold each statement for the pool's acquire timeout): the row
    /// then ages out of the liveness window as a crashed member's does.
    pub async fn leave(mut self, deadline: Instant) {
        let _ = self.stop.send(true);
        if let Some(freeing) = &self.freeing {
            freeing.abort();
        }
        if tokio::time::timeout_at(deadline, &mut self.task).await.is_err() {
            self.task.abort();
        }
        let steps = async {
            if let Err(e) = store::mark_draining(&self.pool, &self.member_id).await {
                tracing::warn!(error = %e, "could not mark this member draining");
            }
            store::leave(&self.pool, &self.member_id).await
        };
        match tokio::time::timeout_at(deadline, steps).await {
            Ok(Ok(())) => tracing::info!(member_id = %self.member_id, "left the cluster"),
            Ok(Err(e)) => tracing::warn!(error = %e, "could not leave the cluster registry; it ages out"),
            Err(_) => tracing::warn!("the database did not answer in time to leave the cluster registry; it ages out"),
        }
    }
}

/// After `grace`, frees the leases still held through `predecessors`
/// (members this process took over from, so gone for certain): those no
/// reconnecting worker resumed. Each release moves the lease's epoch, so a
/// worker that resumes later, or a result of the old holder, is fenced out
/// and the work runs again (at least once). On failure the reaper frees
/// them as before, when their heartbeats lapse.
async fn free_predecessor_leases(
    pool: PgPool,
    predecessors: Vec<String>,
    grace: Duration,
    mut stop: watch::Receiver<bool>,
) {
    tokio::select! {
        _ = stop.changed() => return,
        _ = tokio::time::sleep(grace) => {}
    }
    for table in [Leased::Tasks, Leased::Deliveries, Leased::Operations] {
        let freed = tokio::select! {
            _ = stop.changed() => return,
            freed = leases::release_held_by(&pool, table, &predecessors) => freed,
        };
        match freed {
            Ok(0) => {}
            Ok(freed) => tracing::info!(
                ?table,
                freed,
                "freed the leases no worker resumed from this process's predecessor"
            ),
            Err(e) => tracing::warn!(error = %e, ?table, "could not free the predecessor's leases; the reaper will"),
        }
    }
}

/// Something that knows a member's load (the broker).
pub trait LoadSource: Send + Sync + std::fmt::Debug {
    /// The load right now.
    fn load(&self) -> MemberLoad;
}

/// Where the heartbeat finds the load source, once there is one.
#[derive(Debug, Default)]
struct LoadSlot(std::sync::RwLock<Option<Arc<dyn LoadSource>>>);

impl LoadSlot {
    fn current(&self) -> MemberLoad {
        self.0
            .read()
            .ok()
            .and_then(|slot| slot.as_ref().map(|source| source.load()))
            .unwrap_or_default()
    }
}

/// A member id unique across hosts and restarts: "host-pid-random".
pub fn new_member_id() -> String {
    let host = hostname();
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}-{}", std::process::id(), &suffix[..8])
}

/// This machine's host name (or "unknown").
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown".into())
}

async fn heartbeat_loop(
    pool: PgPool,
    mut changes: Subscription,
    registration: MemberRegistration,
    timing: MembershipTiming,
    shards: watch::Sender<Option<ShardRange>>,
    mut stop: watch::Receiver<bool>,
    load: Arc<LoadSlot>,
) {
    let mut tick = tokio::time::interval(timing.heartbeat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let gc_secs = i32::try_from(timing.gc_after.as_secs()).unwrap_or(i32::MAX);
    loop {
        let beat = tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => true,
            _ = changes.recv() => false,
        };
        let round = async {
            if beat {
                if let Err(e) = store::heartbeat(&pool, &registration, &load.current()).await {
                    tracing::warn!(error = %e, "cluster heartbeat failed");
                    return;
                }
                if let Err(e) = store::delete_stale(&pool, gc_secs).await {
                    tracing::debug!(error = %e, "member GC failed");
                }
            }
            match store::assign_shards(&pool, &registration.member_id, timing.liveness_secs()).await {
                Ok(range) => {
                    shards.send_if_modified(|current| {
                        let changed = *current != range;
                        if changed {
                            tracing::info!(?range, "shard range changed");
                            *current = range;
                        }
                        changed
                    });
                }
                Err(e) => tracing::warn!(error = %e, "shard assignment failed"),
            }
        };
        // A stop is heard while a statement waits on the database (up to the
        // pool's acquire timeout when it is gone), not after.
        tokio::select! {
            _ = stop.changed() => return,
            () = round => {}
        }
    }
}
