//! `work_queue`: scheduling, claims, fenced completions, leases and the
//! reaper's backstops.

use super::measured::measured;
use super::small_version;
use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::StoreResult;
use crate::domain::event::ReportedEvent;
use crate::domain::resource::ConditionInput;
use crate::domain::shard::ShardRange;

/// Queues reconcile tasks for the given resources where they are eligible;
/// returns how many were queued or re-pointed.
pub async fn schedule(conn: &mut PgConnection, ids: &[Uuid]) -> StoreResult<i32> {
    measured("work.schedule", async move {
        if ids.is_empty() {
            return Ok(0);
        }
        sqlx::query_scalar("SELECT schedule_eligible($1)")
            .bind(ids)
            .fetch_one(conn)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Asks for a resource to be reconciled now: skips a pending retry delay,
/// clears a terminal failure of the current generation (and the failure
/// count when `reset`), and queues a task even if the resource is synced.
pub async fn request_reconcile(conn: &mut PgConnection, id: Uuid, reset: bool) -> StoreResult<()> {
    measured("work.request_reconcile", async move {
        sqlx::query("SELECT request_reconcile($1, $2)")
            .bind(id)
            .bind(reset)
            .execute(conn)
            .await?;
        Ok(())
    })
    .await
}

/// The `task_type` of a teardown task.
pub const DELETE_TASK: &str = "delete";

row_struct! {
    /// A claimed task with the state of its resource: a row of the SQL type
    /// `claimed_task` (migrations/0010_row_contracts.sql), which every function
    /// returning task rows returns.
    #[derive(Debug, Clone, sqlx::FromRow)]
    pub struct ClaimedTask {
        /// The task row's id.
        pub work_id: Uuid,
        /// The task row's shard (its partition key).
        pub shard_id: i16,
        /// `reconcile` or `delete` ([`DELETE_TASK`]).
        pub task_type: String,
        /// The unguessable lease handle.
        pub lease_token: Uuid,
        /// The fence.
        pub claim_epoch: i64,
        /// Generation to reconcile.
        pub generation: i64,
        /// Manifest version the task was scheduled under.
        pub manifest_version: i64,
        /// Attempt number of this task (1 = first).
        pub attempts: i32,
        /// Seconds left before the deadline (None = no deadline).
        pub deadline_secs: Option<f64>,
        /// Resource id.
        pub resource_id: Uuid,
        /// Kind.
        pub kind: String,
        /// Kind version.
        pub kind_version: i32,
        /// Name.
        pub name: String,
        /// Labels.
        pub labels: Json<BTreeMap<String, String>>,
        /// Spec.
        pub spec: Json<Value>,
        /// Status.
        pub status: Option<Json<Value>>,
        /// Newest reconciled generation.
        pub synced_gen: i64,
        /// Health.
        pub health_ok: bool,
        /// Finalizers.
        pub finalizers: Vec<String>,
        /// Generation of the last composition.
        pub composed_gen: i64,
        /// When deletion was requested (`None` unless the resource is being deleted).
        pub deletion_requested_at: Option<chrono::DateTime<chrono::Utc>>,
        /// Why a reconcile at an unchanged generation was queued
        /// ([`CONFIG_CHANGE`], [`RESYNC`], [`RESYNC_RECOMPOSE`]); `None` for
        /// the stage's own trigger.
        pub cause: Option<String>,
        /// Name of the resource's provider config override, if any.
        pub provider_config: Option<String>,
        /// The override's spec; `None` without an override, or when the
        /// named config does not exist.
        pub config_spec: Option<Json<Value>>,
        /// The override's data bundle.
        pub config_data: Option<Vec<u8>>,
        /// W3C trace context of the call that queued this generation, when
        /// it was traced (`traceparent`, then `tracestate` on a second line).
        pub trace_context: Option<String>,
        /// When this generation was queued.
        pub queued_at: Option<chrono::DateTime<chrono::Utc>>,
    }
}

/// The `cause` of a reconcile queued because the resource's override changed.
pub const CONFIG_CHANGE: &str = "configChange";
/// The `cause` of a reconcile queued by the kind's periodic resync.
pub const RESYNC: &str = "resync";
/// The `cause` of a periodic resync that also re-runs the composer.
pub const RESYNC_RECOMPOSE: &str = "resyncRecompose";

impl ClaimedTask {
    /// Whether this is a teardown task.
    pub fn is_teardown(&self) -> bool {
        self.task_type == DELETE_TASK
    }

    /// The name of a provider config the resource references that does
    /// not exist (the task cannot run with the configuration it asks for).
    pub fn missing_config(&self) -> Option<&str> {
        self.provider_config.as_deref().filter(|_| self.config_spec.is_none())
    }

    /// Whether the reconcile starts with the composer: the spec moved past
    /// the last composition, or a resync asks to recompose.
    pub fn needs_compose(&self) -> bool {
        self.composed_gen < self.generation || self.cause.as_deref() == Some(RESYNC_RECOMPOSE)
    }

    /// Whether a periodic resync queued the reconcile.
    pub fn is_resync(&self) -> bool {
        matches!(self.cause.as_deref(), Some(RESYNC | RESYNC_RECOMPOSE))
    }

    /// The finalizer a teardown task clears: the resource's first one.
    pub fn teardown_finalizer(&self) -> Option<&str> {
        self.is_teardown()
            .then(|| self.finalizers.first().map(String::as_str))
            .flatten()
    }
}

/// The leased tasks behind `leases` whose results are not in yet (for
/// leases adopted after a reconnect).
pub async fn leased(pool: &PgPool, leases: &[Uuid]) -> StoreResult<Vec<ClaimedTask>> {
    measured("work.leased", async move {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        sqlx::query_as("SELECT * FROM leased_tasks($1)")
            .bind(leases)
            .fetch_all(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Claims up to `limit` runnable tasks of (kind, kind_version) for `broker`,
/// never exceeding the kind's cluster-wide `max_inflight` (`claim_work`,
/// one round trip). Tasks in the broker's own shard range come first; when
/// those run out it takes tasks from other ranges, so a kind whose workers
/// all reached other brokers is never starved. Within a range the oldest
/// tasks come first (the claim index walks task ids, ADR 17).
pub async fn claim(
    pool: &PgPool,
    broker: &str,
    kind: &str,
    kind_version: i32,
    limit: i64,
    shards: Option<ShardRange>,
) -> StoreResult<Vec<ClaimedTask>> {
    measured("work.claim", async move {
        let own = shards.unwrap_or(ShardRange { lo: 0, hi: 255 });
        sqlx::query_as("SELECT * FROM claim_work($1, $2, $3, $4, $5, $6)")
            .bind(broker)
            .bind(kind)
            .bind(small_version(kind_version))
            .bind(i32::try_from(limit).unwrap_or(i32::MAX))
            .bind(own.lo)
            .bind(own.hi)
            .fetch_all(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// The final result of one task's pipeline, bound for the outbox. Sent to
/// the fence as JSON, an object of the SQL type `task_result`
/// (migrations/0010_row_contracts.sql: its attributes are these keys); absent
/// fields read as null or their default there, so they are left out (parsing
/// a 130-result batch: 0.71 -> 0.54 ms).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskResult {
    /// The task row's id.
    pub work_id: Uuid,
    /// The task row's shard.
    pub shard_id: i16,
    /// The task's resource (locked first when the result is applied directly).
    pub resource_id: Uuid,
    /// Lease handle.
    pub lease: Uuid,
    /// Fence epoch.
    pub epoch: i64,
    /// Generation worked.
    pub generation: i64,
    /// Manifest version worked under.
    pub manifest_version: i64,
    /// New status document (`None` = unchanged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
    /// Conditions to record.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ConditionInput>,
    /// Reported health (`None` = unchanged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub healthy: Option<bool>,
    /// false: a composite's partial result (its rollup has not run).
    pub advance: bool,
    /// Come back after this many milliseconds (not settled yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeue_after_ms: Option<i64>,
    /// Failure message (`None` = success).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Failure reason (UpperCamelCase; `None` = a default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Whether the failure is terminal.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub terminal: bool,
    /// The finalizer a successful teardown clears (teardown tasks only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finalizer: Option<String>,
    /// Events the worker reported (recorded with successes and failures).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<ReportedEvent>,
}

/// Writes results to the outbox where their fences still match; returns the
/// leases whose results were accepted (the others were stale).
pub async fn append_outbox(pool: &PgPool, results: &[TaskResult]) -> StoreResult<Vec<Uuid>> {
    measured("work.append_outbox", async move {
        write_results(pool, "SELECT append_outbox($1)", results).await
    })
    .await
}

/// Applies results directly where their fences still match, in one
/// transaction (no outbox row, no drainer wake-up): the idle path. Returns
/// the leases whose results were accepted (the others were stale).
pub async fn complete(pool: &PgPool, results: &[TaskResult]) -> StoreResult<Vec<Uuid>> {
    measured("work.complete", async move {
        write_results(pool, "SELECT complete_work($1)", results).await
    })
    .await
}

/// Runs `call` (a function of the results as JSON returning the accepted
/// leases) on `results`.
async fn write_results(pool: &PgPool, call: &'static str, results: &[TaskResult]) -> StoreResult<Vec<Uuid>> {
    if results.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_scalar(call)
        .bind(Json(results))
        .fetch_all(pool)
        .await
        .map_err(Into::into)
}

/// Applies up to `max` outbox rows of `range` in one transaction; returns how many.
pub async fn drain_outbox(pool: &PgPool, max: i32, range: ShardRange) -> StoreResult<i32> {
    measured("work.drain_outbox", async move {
        sqlx::query_scalar("SELECT drain_outbox_batch($1, $2, $3)")
            .bind(max)
            .bind(range.lo)
            .bind(range.hi)
            .fetch_one(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Whether any owner of `range` is armed for a rollup recheck.
pub async fn rollup_rechecks_armed(pool: &PgPool, range: ShardRange) -> StoreResult<bool> {
    measured("work.rollup_rechecks_armed", async move {
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM rollup_recheck WHERE shard_id BETWEEN $1 AND $2)")
            .bind(range.lo)
            .bind(range.hi)
            .fetch_one(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Re-pends owners armed for a rollup recheck in `range`; returns tasks queued.
pub async fn drain_rollup_rechecks(pool: &PgPool, max: i32, range: ShardRange, window_secs: f64) -> StoreResult<i32> {
    measured("work.drain_rollup_rechecks", async move {
        sqlx::query_scalar("SELECT drain_rollup_rechecks($1, $2, $3, $4)")
            .bind(max)
            .bind(range.lo)
            .bind(range.hi)
            .bind(window_secs)
            .fetch_one(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Takes over leases a reconnecting worker still holds (its tasks keep running).
pub async fn adopt(pool: &PgPool, broker: &str, leases: &[(Uuid, i64)]) -> StoreResult<Vec<Uuid>> {
    measured("work.adopt", async move {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let (tokens, epochs): (Vec<Uuid>, Vec<i64>) = leases.iter().copied().unzip();
        sqlx::query_scalar(
            "UPDATE work_queue w SET broker_id = $1, heartbeat_at = now()
             FROM unnest($2::uuid[], $3::bigint[]) AS l(token, epoch)
             WHERE w.lease_token = l.token AND w.claim_epoch = l.epoch
             RETURNING w.lease_token",
        )
        .bind(broker)
        .bind(&tokens)
        .bind(&epochs)
        .fetch_all(pool)
        .await
        .map_err(Into::into)
    })
    .await
}

/// What one reaper pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReapReport {
    /// Stale leases freed.
    pub stale: i32,
    /// Overdue tasks failed.
    pub overdue: i32,
    /// Lagging resources re-queued.
    pub requeued: i32,
    /// Orphaned tasks dropped.
    pub dropped: i32,
    /// Teardown tasks queued plus deleted resources removed.
    pub swept: i32,
    /// Orphans whose grace period ended, handed to teardown.
    pub expired_orphans: i32,
}

/// How long a resource lags without a task before the reaper queues it
/// (write paths schedule at once; this is the backstop for lost tasks).
const REQUEUE_QUIET_SECS: f64 = 2.0;

/// Resources the lost-task backstop looks at per pass: a walk over a
/// million takes about a hundred idle passes.
const SWEEP_SLICE: i32 = 10_000;

/// Resources looked at per pass while recovering from a crash that emptied
/// the queue: a million in about ten passes.
const RECOVERY_SLICE: i32 = 100_000;

/// Where the lost-task backstop's walk over resources (in key order) stands.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LaggingSweep {
    /// The last key looked at; `None` starts at the beginning.
    pub after: Option<Uuid>,
    /// Walking in large slices: the queue was emptied by a crash.
    pub recovering: bool,
}

/// Waiting tasks the orphaned-task backstop looks at per pass (a walk along
/// the claim index; the write paths drop such tasks themselves, so this only
/// catches races). Each costs a heap read and a probe of `resources`, 9 µs
/// under load: 10,000 per pass took 3% of the database's time in a 100k
/// pipeline run. A million waiting tasks take about 500 passes.
const ORPHAN_SLICE: i32 = 2_000;

/// Where the orphaned-task backstop's walk over waiting tasks stands: the
/// last task looked at, in the claim index's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrphanCursor {
    /// The task's kind.
    pub kind: String,
    /// The task's kind version.
    pub kind_version: i16,
    /// The task's id.
    pub id: Uuid,
}

/// Where the reaper's walks stand between passes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Sweeps {
    /// The lost-task walk over resources.
    pub lagging: LaggingSweep,
    /// The orphaned-task walk over waiting tasks; `None` starts at the
    /// beginning.
    pub orphans_after: Option<OrphanCursor>,
}

/// One reaper pass over all backstops; `sweeps` carries the walks from one
/// pass to the next.
pub async fn reap(pool: &PgPool, stale_secs: f64, limit: i32, sweeps: &mut Sweeps) -> StoreResult<ReapReport> {
    measured("work.reap", async move {
        // Separate statements: each backstop sees the previous one's effect.
        let stale: i32 = sqlx::query_scalar("SELECT reap_stale_work($1, $2)")
            .bind(stale_secs)
            .bind(limit)
            .fetch_one(pool)
            .await?;
        let overdue: i32 = sqlx::query_scalar("SELECT expire_overdue_work($1)")
            .bind(limit)
            .fetch_one(pool)
            .await?;
        let requeued = requeue_lagging(pool, &mut sweeps.lagging).await?;
        let (dropped, next) = drop_orphaned_work(pool, sweeps.orphans_after.as_ref(), ORPHAN_SLICE).await?;
        sweeps.orphans_after = next;
        // Orphans first: an expired one is marked, and the sweep then starts its teardown.
        let mut sweep_counts = [0i32; 2];
        for (slot, sql) in sweep_counts.iter_mut().zip([
            "SELECT sweep_expired_orphans($1, 0::smallint, 255::smallint)",
            "SELECT sweep_deletable($1, 0::smallint, 255::smallint)",
        ]) {
            *slot = sqlx::query_scalar(sql).bind(limit).fetch_one(pool).await?;
        }
        let [expired_orphans, swept] = sweep_counts;
        Ok(ReapReport {
            stale,
            overdue,
            requeued,
            dropped,
            swept,
            expired_orphans,
        })
    })
    .await
}

/// One slice of the orphaned-task backstop: drops waiting tasks whose
/// resource is gone, or is being deleted or frozen (reconcile tasks only),
/// among the `scan` waiting tasks after `after`. Returns how many it dropped
/// and where the next slice starts (`None` once the walk reached the end).
pub async fn drop_orphaned_work(
    pool: &PgPool,
    after: Option<&OrphanCursor>,
    scan: i32,
) -> StoreResult<(i32, Option<OrphanCursor>)> {
    measured("work.drop_orphaned_work", async move {
        let (kind, kind_version, id, dropped): (Option<String>, Option<i16>, Option<Uuid>, i32) = sqlx::query_as(
            "SELECT next_kind, next_kind_version, next_after, dropped FROM drop_orphaned_work($1, $2, $3, $4)",
        )
        .bind(after.map(|c| c.kind.as_str()))
        .bind(after.map(|c| c.kind_version))
        .bind(after.map(|c| c.id))
        .bind(scan)
        .fetch_one(pool)
        .await?;
        let next = match (kind, kind_version, id) {
            (Some(kind), Some(kind_version), Some(id)) => Some(OrphanCursor { kind, kind_version, id }),
            _ => None,
        };
        Ok((dropped, next))
    })
    .await
}

/// The lost-task backstop: queues resources that lag without a task, one
/// slice of the table per call. The first caller to see that a crash
/// emptied the queue (its unlogged marker is gone) starts a walk of the
/// whole table in large slices.
async fn requeue_lagging(pool: &PgPool, sweep: &mut LaggingSweep) -> StoreResult<i32> {
    let queue_was_emptied: bool = sqlx::query_scalar("SELECT claim_queue_recovery()")
        .fetch_one(pool)
        .await?;
    if queue_was_emptied {
        *sweep = LaggingSweep {
            after: None,
            recovering: true,
        };
    }
    let slice = if sweep.recovering { RECOVERY_SLICE } else { SWEEP_SLICE };
    let (next, requeued): (Option<Uuid>, i32) =
        sqlx::query_as("SELECT next_after, requeued FROM requeue_lagging($1, $2, $3)")
            .bind(sweep.after)
            .bind(slice)
            .bind(REQUEUE_QUIET_SECS)
            .fetch_one(pool)
            .await?;
    sweep.after = next;
    sweep.recovering &= next.is_some();
    Ok(requeued)
}

/// How long until each of the unclaimed tasks `ids` falls due (retry
/// backoff), for those not due yet. By primary key: a handful of rows.
pub async fn due_in(pool: &PgPool, ids: &[Uuid]) -> StoreResult<Vec<std::time::Duration>> {
    measured("work.due_in", async move {
        let millis: Vec<i64> = sqlx::query_scalar(
            "SELECT ceil(extract(epoch FROM not_before - clock_timestamp()) * 1000)::bigint
             FROM work_queue WHERE id = ANY($1) AND broker_id IS NULL AND not_before > clock_timestamp()",
        )
        .bind(ids)
        .fetch_all(pool)
        .await?;
        Ok(millis
            .into_iter()
            .filter_map(|ms| u64::try_from(ms).ok())
            .map(std::time::Duration::from_millis)
            .collect())
    })
    .await
}

/// One kind's figures of the work queue, as the metrics sampler reads them.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct QueueFigure {
    /// The kind.
    pub kind: String,
    /// Tasks waiting for a claim (due or not).
    pub queued: i64,
    /// Tasks held by a broker.
    pub leased: i64,
    /// Age, in seconds, of the oldest due task nobody holds (0 when none).
    pub oldest_due_secs: f64,
}

/// The work queue by kind (every configured kind, 0 when it has none): one
/// pass over the queue, for the metrics sampler only (it runs when metrics
/// are on, every few seconds).
pub async fn queue_figures(pool: &PgPool) -> StoreResult<Vec<QueueFigure>> {
    measured("work.queue_figures", async move {
        sqlx::query_as(
            // Every configured kind, so an emptied queue reads 0 rather than
            // dropping its series.
            "SELECT k.kind,
                    count(w.id) FILTER (WHERE w.broker_id IS NULL) AS queued,
                    count(w.id) FILTER (WHERE w.broker_id IS NOT NULL) AS leased,
                    COALESCE(extract(epoch FROM now() - min(w.not_before)
                                 FILTER (WHERE w.broker_id IS NULL AND w.not_before <= now())), 0)::float8
                        AS oldest_due_secs
             FROM (SELECT DISTINCT kind FROM kind_config) k
             LEFT JOIN work_queue w ON w.kind = k.kind
             GROUP BY k.kind ORDER BY k.kind",
        )
        .fetch_all(pool)
        .await
        .map_err(Into::into)
    })
    .await
}

/// Age, in seconds, of the oldest result waiting in the outbox for the
/// drainer (0 when it is empty): an index probe.
pub async fn drain_lag_secs(pool: &PgPool) -> StoreResult<f64> {
    measured("work.drain_lag_secs", async move {
        sqlx::query_scalar(
            "SELECT COALESCE(extract(epoch FROM clock_timestamp() - min(created_at)), 0)::float8 FROM work_outbox",
        )
        .fetch_one(pool)
        .await
        .map_err(Into::into)
    })
    .await
}

/// Makes the work queued by the rest of this transaction carry `context`
/// (a traced call's W3C trace context): a transaction-local setting that
/// `schedule_eligible` reads.
pub async fn carry_trace_context(conn: &mut sqlx::PgConnection, context: &str) -> StoreResult<()> {
    measured("work.carry_trace_context", async move {
        sqlx::query("SELECT set_config('converge.trace_context', $1, true)")
            .bind(context)
            .execute(conn)
            .await?;
        Ok(())
    })
    .await
}
