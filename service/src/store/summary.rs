//! The fleet summary: counts by kind, version and phase, the most common
//! failure reasons, the longest waits; counted at call time or read from the
//! snapshot the engine keeps (`engine::fleet_summary`).

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool, Postgres, QueryBuilder};

use super::StoreResult;
use super::measured::measured;
use super::resources::push_selector;
use crate::domain::admin::{FailureCount, FleetSummary, OldestInPhase, PhaseCount, UNSETTLED};
use crate::domain::labels::LabelSelector;
use crate::domain::resource::Phase;

/// Which resources a summary counts.
#[derive(Debug, Clone, Default)]
pub struct SummaryFilter {
    /// Only this kind.
    pub kind: Option<String>,
    /// Label requirements.
    pub selector: LabelSelector,
}

impl SummaryFilter {
    /// Whether the filter matches every resource (the snapshot's case).
    pub fn is_everything(&self) -> bool {
        self.kind.is_none() && self.selector.is_empty()
    }

    fn push(&self, query: &mut QueryBuilder<Postgres>) {
        if let Some(kind) = &self.kind {
            query.push(" AND r.kind = ").push_bind(kind.clone());
        }
        push_selector(query, &self.selector);
    }
}

/// Counts the resources `filter` matches now, with the `top` most common
/// failure reasons. Reads in one snapshot so the parts agree.
pub async fn count(pool: &PgPool, filter: &SummaryFilter, top: usize) -> StoreResult<FleetSummary> {
    measured("summary.count", async move {
        let mut tx = pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        let summary = FleetSummary {
            phase_counts: phase_counts(&mut tx, filter).await?,
            top_failures: top_failures(&mut tx, filter, top).await?,
            oldest: oldest(&mut tx, filter).await?,
        };
        tx.commit().await?;
        Ok(summary)
    })
    .await
}

async fn phase_counts(conn: &mut PgConnection, filter: &SummaryFilter) -> StoreResult<Vec<PhaseCount>> {
    let mut query = QueryBuilder::new(
        "SELECT r.kind, r.kind_version::integer AS kind_version, r.phase, count(*) AS count FROM resources r WHERE true",
    );
    filter.push(&mut query);
    query.push(" GROUP BY 1, 2, 3 ORDER BY 1, 2, 3");
    let rows: Vec<(String, i32, String, i64)> = query.build_query_as().fetch_all(conn).await?;
    Ok(rows
        .into_iter()
        .map(|(kind, kind_version, phase, count)| PhaseCount {
            kind,
            kind_version,
            phase,
            count,
        })
        .collect())
}

/// Reasons come from the condition the engine sets on a failure: `Synced`
/// for a reconcile (phase Failed), `Teardown` for a teardown that keeps
/// failing or gave up (phase Deleting). Both sets are reached through
/// partial indexes (failed, deleting), so a healthy fleet costs nothing here.
async fn top_failures(conn: &mut PgConnection, filter: &SummaryFilter, top: usize) -> StoreResult<Vec<FailureCount>> {
    let mut query = QueryBuilder::new(
        "WITH failing AS (
            SELECT r.id, r.kind, r.name, 'reconcile' AS stage, c.reason, c.message
            FROM resources r JOIN resource_conditions c ON c.resource_id = r.id AND c.type = 'Synced'
            WHERE r.failure_gen > 0 AND r.failure_gen = r.generation AND r.deletion_requested_at IS NULL
              AND c.status = 'False'",
    );
    filter.push(&mut query);
    query.push(
        " UNION ALL
            SELECT r.id, r.kind, r.name, 'teardown', c.reason, c.message
            FROM resources r JOIN resource_conditions c ON c.resource_id = r.id AND c.type = 'Teardown'
            WHERE r.deletion_requested_at IS NOT NULL AND c.status = 'False'",
    );
    filter.push(&mut query);
    query.push(
        "), grouped AS (
            SELECT kind, stage, reason, count(*) AS n, min(id::text) AS example_id
            FROM failing GROUP BY 1, 2, 3
        )
        SELECT g.kind, g.stage, g.reason, g.n, f.name, left(f.message, 1024)
        FROM grouped g JOIN failing f ON f.id::text = g.example_id AND f.stage = g.stage
        ORDER BY g.n DESC, g.kind, g.stage, g.reason LIMIT ",
    );
    query.push_bind(i64::try_from(top).unwrap_or(i64::MAX));
    let rows: Vec<(String, String, String, i64, String, String)> = query.build_query_as().fetch_all(conn).await?;
    Ok(rows
        .into_iter()
        .map(|(kind, stage, reason, count, example, example_message)| FailureCount {
            kind,
            stage,
            reason,
            count,
            example,
            example_message,
        })
        .collect())
}

/// One indexed probe per phase: the longest queued of the reconcile tasks
/// at the head of the claim order (the queue's key is time-ordered), the oldest deletion request and orphan mark
/// and the unhealthy resource changed longest ago (partial indexes).
async fn oldest(conn: &mut PgConnection, filter: &SummaryFilter) -> StoreResult<Vec<OldestInPhase>> {
    let mut found = Vec::new();
    for phase in UNSETTLED {
        let mut query = match phase {
            Phase::Reconciling => QueryBuilder::new(
                "SELECT kind, name, since FROM (
                 SELECT r.kind, r.name, w.created_at AS since
                 FROM work_queue w JOIN resources r ON r.id = w.resource_id
                 WHERE w.task_type = 'reconcile' AND r.phase = 'Reconciling'",
            ),
            Phase::Deleting => QueryBuilder::new(
                "SELECT r.kind, r.name, r.deletion_requested_at AS since FROM resources r
                 WHERE r.deletion_requested_at IS NOT NULL",
            ),
            Phase::Degraded => QueryBuilder::new(
                "SELECT r.kind, r.name, r.updated_at AS since FROM resources r
                 WHERE NOT r.health_ok AND r.phase = 'Degraded'",
            ),
            _ => QueryBuilder::new(
                "SELECT r.kind, r.name, r.updated_at AS since FROM resources r
                 WHERE r.frozen_until IS NOT NULL AND r.phase = 'Orphaned'",
            ),
        };
        filter.push(&mut query);
        query.push(match phase {
            // The claim order's head, of which the longest queued: a
            // rollup's id is ordered at its owner's creation, not when it
            // was queued (queue_id_at), and rollups go first.
            Phase::Reconciling => " ORDER BY w.id LIMIT 32) head ORDER BY since LIMIT 1",
            Phase::Deleting => " ORDER BY r.deletion_requested_at LIMIT 1",
            Phase::Orphaned => " ORDER BY r.frozen_until LIMIT 1",
            _ => " ORDER BY r.updated_at LIMIT 1",
        });
        let row: Option<(String, String, DateTime<Utc>)> = query.build_query_as().fetch_optional(&mut *conn).await?;
        if let Some((kind, name, since)) = row {
            found.push(OldestInPhase {
                phase: phase.as_db().to_owned(),
                kind,
                name,
                since,
            });
        }
    }
    Ok(found)
}

/// How recently a summary call must have asked for the snapshot for the
/// engine to keep it fresh (when no metrics exporter wants it anyway).
pub const WANTED_FOR: std::time::Duration = std::time::Duration::from_secs(600);

/// The snapshot of the whole fleet and when it was taken, if it is still
/// current: taken within `within`, or nothing has written resources since
/// (as far as the statistics, flushed about once a second, know).
pub async fn current_snapshot(
    pool: &PgPool,
    within: std::time::Duration,
) -> StoreResult<Option<(DateTime<Utc>, FleetSummary)>> {
    measured("summary.current_snapshot", async move {
        let row: Option<(DateTime<Utc>, Json<FleetSummary>)> = sqlx::query_as(
            "SELECT s.taken_at, s.body FROM fleet_summary s
             WHERE s.taken_at > now() - make_interval(secs => $1)
                OR s.write_count = (SELECT n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_user_tables
                                    WHERE relid = 'resources'::regclass)",
        )
        .bind(within.as_secs_f64())
        .fetch_optional(pool)
        .await?;
        Ok(row.map(|(taken_at, Json(body))| (taken_at, body)))
    })
    .await
}

/// The latest snapshot, however old (the gauge's source).
pub async fn snapshot(pool: &PgPool) -> StoreResult<Option<FleetSummary>> {
    measured("summary.snapshot", async move {
        let row: Option<Json<FleetSummary>> = sqlx::query_scalar("SELECT body FROM fleet_summary")
            .fetch_optional(pool)
            .await?;
        Ok(row.map(|Json(body)| body))
    })
    .await
}

/// Notes that a caller read the snapshot, so the engine keeps it fresh for
/// [`WANTED_FOR`]; writes at most once a minute.
pub async fn mark_requested(pool: &PgPool) -> StoreResult<()> {
    measured("summary.mark_requested", async move {
        sqlx::query("UPDATE fleet_summary SET requested_at = now() WHERE requested_at < now() - interval '1 minute'")
            .execute(pool)
            .await?;
        Ok(())
    })
    .await
}

/// The whole fleet counted now, stored as the snapshot and returned with
/// its time.
pub async fn take(pool: &PgPool, top: usize) -> StoreResult<(DateTime<Utc>, FleetSummary)> {
    measured("summary.take", async move {
        let mut tx = pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            .execute(&mut *tx)
            .await?;
        let (taken_at, body) = take_in(&mut tx, top).await?;
        tx.commit().await?;
        Ok((taken_at, body))
    })
    .await
}

async fn take_in(conn: &mut PgConnection, top: usize) -> StoreResult<(DateTime<Utc>, FleetSummary)> {
    // Read first: a write that lands while counting moves it, so the next
    // pass counts again rather than keeping a snapshot that missed it.
    let writes: Option<i64> = sqlx::query_scalar(WRITE_COUNT).fetch_one(&mut *conn).await?;
    let filter = SummaryFilter::default();
    let body = FleetSummary {
        phase_counts: phase_counts(conn, &filter).await?,
        top_failures: top_failures(conn, &filter, top).await?,
        oldest: oldest(conn, &filter).await?,
    };
    let taken_at: DateTime<Utc> = sqlx::query_scalar(
        "INSERT INTO fleet_summary (taken_at, write_count, body) VALUES (now(), $1, $2)
         ON CONFLICT (singleton) DO UPDATE SET taken_at = excluded.taken_at,
             write_count = excluded.write_count, body = excluded.body
         RETURNING taken_at",
    )
    .bind(writes)
    .bind(Json(&body))
    .fetch_one(conn)
    .await?;
    Ok((taken_at, body))
}

/// resources' cumulative write counter (NULL when statistics are off).
const WRITE_COUNT: &str = "SELECT (SELECT n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_user_tables
                                   WHERE relid = 'resources'::regclass)";

/// Retakes the snapshot when it is wanted (`always`, or a summary call
/// within [`WANTED_FOR`]) and the resources table has been written since it
/// was taken (or it is older than `max_age`); one member at a time (the
/// others skip). Returns whether it took one. Otherwise it costs one read.
pub async fn refresh(pool: &PgPool, always: bool, max_age: std::time::Duration, top: usize) -> StoreResult<bool> {
    measured("summary.refresh", async move {
        let due: bool = sqlx::query_scalar(
            "SELECT CASE WHEN s.singleton IS NULL THEN $1
                         ELSE ($1 OR s.requested_at > now() - make_interval(secs => $2))
                              AND (s.write_count IS DISTINCT FROM w.writes OR w.writes IS NULL
                                   OR s.taken_at < now() - make_interval(secs => $3)) END
             FROM (SELECT (SELECT n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_user_tables
                           WHERE relid = 'resources'::regclass) AS writes) w
             LEFT JOIN fleet_summary s ON true",
        )
        .bind(always)
        .bind(WANTED_FOR.as_secs_f64())
        .bind(max_age.as_secs_f64())
        .fetch_one(pool)
        .await?;
        if !due {
            return Ok(false);
        }
        let mut tx = pool.begin().await?;
        // One snapshot for the parts, so they agree.
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            .execute(&mut *tx)
            .await?;
        let mine: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock(hashtextextended('fleet_summary', 0))")
            .fetch_one(&mut *tx)
            .await?;
        if !mine {
            return Ok(false);
        }
        take_in(&mut tx, top).await?;
        tx.commit().await?;
        Ok(true)
    })
    .await
}
