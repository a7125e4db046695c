//! Tasks no worker serves: the claimable tasks of each (kind, kind_version)
//! for which no live, serving member lists a ready worker, and the
//! `WorkerAvailable=False` condition a kind's policy
//! (`kind_config.unserved_condition_after_secs`) puts on their resources.
//!
//! Which pairs are served comes from `cluster_members.workers`, the
//! snapshot each broker refreshes with its heartbeat; a member counts while
//! its heartbeat is within the membership liveness window. The queue is
//! read per unserved pair through the claim index (`work_queue_claim_idx`:
//! `(kind, kind_version, id, shard_id) WHERE broker_id IS NULL`), never
//! grouped over the whole table.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::StoreResult;
use super::measured::measured;

/// The condition type the policy sets.
pub const CONDITION_TYPE: &str = "WorkerAvailable";

/// Its reason.
pub const CONDITION_REASON: &str = "NoWorker";

/// The pairs some live, serving member has a ready worker for; `$1` is the
/// liveness window in seconds.
const SERVED: &str = "served AS (
    SELECT DISTINCT k ->> 'kind' AS kind, (k ->> 'kindVersion')::int AS kind_version
    FROM cluster_members m
    CROSS JOIN LATERAL jsonb_array_elements(m.workers) w
    CROSS JOIN LATERAL jsonb_array_elements(w -> 'kinds') k
    WHERE m.state = 'serving' AND m.role IN ('all', 'broker')
      AND m.last_heartbeat > now() - make_interval(secs => $1)
      AND (k ->> 'ready')::boolean)";

/// The claimable tasks of one (kind, kind_version) no worker serves.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct UnservedTasks {
    /// Kind.
    pub kind: String,
    /// Kind version.
    pub kind_version: i32,
    /// Tasks nobody holds (reconciles and teardowns, due or in backoff).
    pub tasks: i64,
    /// When the oldest of them was queued.
    pub oldest_waiting_since: DateTime<Utc>,
}

/// Every (kind, kind_version) with claimable tasks and no ready worker on
/// a live serving member, in kind order. `liveness_secs` is the membership
/// liveness window.
pub async fn unserved(pool: &PgPool, liveness_secs: i32) -> StoreResult<Vec<UnservedTasks>> {
    measured("unserved.unserved", async move {
        let sql = format!(
            "WITH {SERVED}
             SELECT c.kind, c.kind_version::int4 AS kind_version, q.tasks,
                    -- Task ids are time-ordered (time_ordered_uuid): their first
                    -- 48 bits are the milliseconds since the epoch at queueing.
                    to_timestamp(('x' || replace(left(q.oldest_id, 13), '-', ''))::bit(48)::bigint / 1000.0)
                        AS oldest_waiting_since
             FROM kind_config c
             CROSS JOIN LATERAL (
                 -- One index-only pass over the pair's unclaimed tasks in the
                 -- claim index; the smallest id as text (fixed-width hex, so
                 -- byte order) since uuid has no min().
                 SELECT count(*) AS tasks, min(w.id::text COLLATE \"C\") AS oldest_id
                 FROM work_queue w
                 WHERE w.kind = c.kind AND w.kind_version = c.kind_version AND w.broker_id IS NULL) q
             WHERE q.tasks > 0
               AND NOT EXISTS (SELECT 1 FROM served s WHERE s.kind = c.kind AND s.kind_version = c.kind_version)
             ORDER BY c.kind, c.kind_version"
        );
        let mut tx = pool.begin().await?;
        // The count's estimate at a large queue crosses jit_above_cost, and
        // compiling the plan took longer (about 0.25 s) than running it.
        sqlx::query("SET LOCAL jit = off").execute(&mut *tx).await?;
        let figures = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(f64::from(liveness_secs))
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(figures)
    })
    .await
}

/// A (kind, kind_version) whose policy marks waiting resources and that no
/// worker serves now.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct MarkingPair {
    /// Kind.
    pub kind: String,
    /// Kind version.
    pub kind_version: i32,
    /// The policy's wait, in seconds.
    pub after_secs: i32,
}

/// The pairs with the policy on and no ready worker: one read of
/// `kind_config` and of the member rows, no per-resource work.
pub async fn marking_pairs(pool: &PgPool, liveness_secs: i32) -> StoreResult<Vec<MarkingPair>> {
    measured("unserved.marking_pairs", async move {
        let sql = format!(
            "WITH {SERVED}
             SELECT c.kind, c.kind_version::int4 AS kind_version, c.unserved_condition_after_secs AS after_secs
             FROM kind_config c
             WHERE c.unserved_condition_after_secs > 0
               AND NOT EXISTS (SELECT 1 FROM served s WHERE s.kind = c.kind AND s.kind_version = c.kind_version)
             ORDER BY c.kind, c.kind_version"
        );
        sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(f64::from(liveness_secs))
            .fetch_all(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// What one batch of [`mark`] or [`clear`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Batch {
    /// Rows examined (a full batch means there may be more).
    pub examined: i64,
    /// Resources whose condition was set or removed.
    pub changed: i64,
    /// Where the next batch continues (the last examined key), if any.
    pub last: Option<Uuid>,
}

/// Examines up to `limit` unclaimed tasks of `pair` queued more than its
/// wait ago, after the task id `after`, and marks their resources with
/// `WorkerAvailable=False` (reason `NoWorker`) unless already marked. The
/// task ids are time-ordered (a rollup's at its owner's creation, which is
/// earlier still), so "queued before" is a bound on the claim index. Marked resources get a new change-log position, so watchers see
/// the condition.
pub async fn mark(pool: &PgPool, pair: &MarkingPair, after: Option<Uuid>, limit: i64) -> StoreResult<Batch> {
    measured("unserved.mark", async move {
        let message = format!(
            "no connected worker serves {} version {}: the task has waited over {}s",
            pair.kind, pair.kind_version, pair.after_secs
        );
        let row: (i64, i64, Option<Uuid>) = sqlx::query_as(
            "WITH bound AS (
                 -- The smallest time-ordered id of the cut-off millisecond.
                 SELECT encode(int8send((floor(extract(epoch FROM now() - make_interval(secs => $3)) * 1000)::bigint
                                         << 16))
                               || '\\x0000000000000000'::bytea, 'hex')::uuid AS id
             ),
             examined AS (
                 SELECT w.id, w.resource_id FROM work_queue w, bound b
                 WHERE w.kind = $1 AND w.kind_version = $2 AND w.broker_id IS NULL
                   AND w.id < b.id AND ($4::uuid IS NULL OR w.id > $4)
                   -- A rollup's id is ordered at its owner's creation (queue_id_at).
                   AND w.created_at < now() - make_interval(secs => $3)
                 ORDER BY w.id LIMIT $5
             ),
             marked AS (
                 INSERT INTO resource_conditions (resource_id, type, status, reason, message, observed_generation)
                 SELECT DISTINCT ON (r.id) r.id, 'WorkerAvailable', 'False', 'NoWorker', $6, r.generation
                 FROM examined e JOIN resources r ON r.id = e.resource_id
                 ORDER BY r.id
                 ON CONFLICT (resource_id, type) DO NOTHING
                 RETURNING resource_id
             ),
             -- A data-modifying CTE runs whether or not it is read.
             touched AS (
                 UPDATE resources r SET updated_at = now()
                 WHERE r.id IN (SELECT x.id FROM resources x WHERE x.id IN (SELECT resource_id FROM marked)
                                ORDER BY x.id FOR NO KEY UPDATE SKIP LOCKED)
                 RETURNING r.id
             )
             SELECT (SELECT count(*) FROM examined), (SELECT count(*) FROM marked),
                    (SELECT e.id FROM examined e ORDER BY e.id DESC LIMIT 1)",
        )
        .bind(&pair.kind)
        .bind(super::small_version(pair.kind_version))
        .bind(f64::from(pair.after_secs))
        .bind(after)
        .bind(limit)
        .bind(&message)
        .fetch_one(pool)
        .await?;
        Ok(Batch {
            examined: row.0,
            changed: row.1,
            last: row.2,
        })
    })
    .await
}

/// Whether any resource carries the condition: one probe of its partial
/// index (empty unless the policy marked something).
pub async fn any_marked(pool: &PgPool) -> StoreResult<bool> {
    measured("unserved.any_marked", async move {
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM resource_conditions WHERE type = 'WorkerAvailable')")
            .fetch_one(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Examines up to `limit` marked resources after `after` (by id) and
/// removes the condition from those whose wait is over: a worker serves
/// their pair now, no unclaimed task of theirs is left (a worker took it,
/// or it finished), or their kind's policy is off.
pub async fn clear(pool: &PgPool, liveness_secs: i32, after: Option<Uuid>, limit: i64) -> StoreResult<Batch> {
    measured("unserved.clear", async move {
        let sql = format!(
            "WITH {SERVED},
             examined AS (
                 SELECT c.resource_id FROM resource_conditions c
                 WHERE c.type = 'WorkerAvailable' AND ($2::uuid IS NULL OR c.resource_id > $2)
                 ORDER BY c.resource_id LIMIT $3
             ),
             over AS (
                 SELECT e.resource_id FROM examined e
                 LEFT JOIN resources r ON r.id = e.resource_id
                 LEFT JOIN kind_config k ON k.kind = r.kind AND k.kind_version = r.kind_version
                 WHERE COALESCE(k.unserved_condition_after_secs, 0) = 0
                    OR EXISTS (SELECT 1 FROM served s WHERE s.kind = r.kind AND s.kind_version = r.kind_version)
                    OR NOT EXISTS (SELECT 1 FROM work_queue w
                                   WHERE w.resource_id = e.resource_id AND w.broker_id IS NULL)
             ),
             cleared AS (
                 DELETE FROM resource_conditions c USING over o
                 WHERE c.resource_id = o.resource_id AND c.type = 'WorkerAvailable'
                 RETURNING c.resource_id
             ),
             -- A data-modifying CTE runs whether or not it is read.
             touched AS (
                 UPDATE resources r SET updated_at = now()
                 WHERE r.id IN (SELECT x.id FROM resources x WHERE x.id IN (SELECT resource_id FROM cleared)
                                ORDER BY x.id FOR NO KEY UPDATE SKIP LOCKED)
                 RETURNING r.id
             )
             SELECT (SELECT count(*) FROM examined), (SELECT count(*) FROM cleared),
                    (SELECT e.resource_id FROM examined e ORDER BY e.resource_id DESC LIMIT 1)"
        );
        let row: (i64, i64, Option<Uuid>) = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(f64::from(liveness_secs))
            .bind(after)
            .bind(limit)
            .fetch_one(pool)
            .await?;
        Ok(Batch {
            examined: row.0,
            changed: row.1,
            last: row.2,
        })
    })
    .await
}
