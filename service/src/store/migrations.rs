//! `kind_migrations`: durable moves of a kind's resources from one version
//! to another (ADR 48), and the reads their runner walks with.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor, Postgres, QueryBuilder};
use uuid::Uuid;

use super::StoreResult;
use super::measured::measured;
use super::resources::push_selector;
use super::small_version as small;
use crate::domain::labels::LabelSelector;

/// Most failures a migration keeps by name.
pub const MAX_FIRST_FAILURES: usize = 20;

const COLUMNS: &str = "id, kind, from_version::int4 AS from_version, to_version::int4 AS to_version, label_selector, \
     validate_only, state, cursor_at, cursor_id, total, converted, failed, first_failures, requested_by, \
     created_at, updated_at, ended_at";

/// One failure kept by name.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Failure {
    /// The resource's name.
    pub name: String,
    /// Why it did not convert.
    pub message: String,
}

/// A stored migration.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Migration {
    /// Its uid.
    pub id: Uuid,
    /// The kind.
    pub kind: String,
    /// Source version.
    pub from_version: i32,
    /// Target version.
    pub to_version: i32,
    /// Label selector (empty = all).
    pub label_selector: String,
    /// A dry run.
    pub validate_only: bool,
    /// `running`, `succeeded`, `failed` or `cancelled`.
    pub state: String,
    /// The last resource visited: creation time.
    pub cursor_at: Option<DateTime<Utc>>,
    /// The last resource visited: id.
    pub cursor_id: Option<Uuid>,
    /// Matching resources at the start.
    pub total: i64,
    /// Converted so far.
    pub converted: i64,
    /// Failed so far.
    pub failed: i64,
    /// The first failures.
    pub first_failures: Json<Vec<Failure>>,
    /// Who started it.
    pub requested_by: String,
    /// When it started.
    pub created_at: DateTime<Utc>,
    /// When its progress last changed.
    pub updated_at: DateTime<Utc>,
    /// When it ended.
    pub ended_at: Option<DateTime<Utc>>,
}

/// What a new migration is.
#[derive(Debug, Clone)]
pub struct NewMigration<'a> {
    /// The kind.
    pub kind: &'a str,
    /// Source version.
    pub from_version: i32,
    /// Target version.
    pub to_version: i32,
    /// Label selector as written (empty = all).
    pub label_selector: &'a str,
    /// A dry run.
    pub validate_only: bool,
    /// Matching resources now.
    pub total: i64,
    /// Who starts it.
    pub requested_by: &'a str,
}

/// Records a running migration; `None` when a running migration of the
/// same kind is already there (the unique index `kind_migrations_running_idx`).
pub async fn insert(conn: &mut PgConnection, new: &NewMigration<'_>) -> StoreResult<Option<Migration>> {
    measured("migrations.insert", async move {
        let sql = format!(
            "INSERT INTO kind_migrations (kind, from_version, to_version, label_selector, validate_only, total,
                 requested_by)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (kind) WHERE state = 'running' DO NOTHING RETURNING {COLUMNS}"
        );
        sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(new.kind)
            .bind(small(new.from_version))
            .bind(small(new.to_version))
            .bind(new.label_selector)
            .bind(new.validate_only)
            .bind(new.total)
            .bind(new.requested_by)
            .fetch_optional(conn)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Whether a running migration of `kind` exists.
pub async fn running_of_kind(conn: &mut PgConnection, kind: &str) -> StoreResult<Option<Migration>> {
    measured("migrations.running_of_kind", async move {
        let sql = format!("SELECT {COLUMNS} FROM kind_migrations WHERE kind = $1 AND state = 'running'");
        sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(kind)
            .fetch_optional(conn)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Reads one migration.
pub async fn get<'e>(executor: impl PgExecutor<'e>, id: Uuid) -> StoreResult<Option<Migration>> {
    measured("migrations.get", async move {
        let sql = format!("SELECT {COLUMNS} FROM kind_migrations WHERE id = $1");
        sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(executor)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Up to `limit` migrations older than `before` (newest first), of one kind
/// or all.
pub async fn list<'e>(
    executor: impl PgExecutor<'e>,
    kind: Option<&str>,
    before: Option<Uuid>,
    limit: i64,
) -> StoreResult<Vec<Migration>> {
    measured("migrations.list", async move {
        let sql = format!(
            "SELECT {COLUMNS} FROM kind_migrations
             WHERE ($1::text IS NULL OR kind = $1) AND ($2::uuid IS NULL OR id < $2)
             ORDER BY id DESC LIMIT $3"
        );
        sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(kind)
            .bind(before)
            .bind(limit)
            .fetch_all(executor)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Cancels a running migration; returns it as it is after (unchanged when
/// it had ended), or `None` when there is none. Waits for a batch in
/// progress (its row lock), so nothing is written after the answer.
pub async fn cancel(conn: &mut PgConnection, id: Uuid) -> StoreResult<Option<Migration>> {
    measured("migrations.cancel", async move {
        let sql = format!(
            "UPDATE kind_migrations SET state = 'cancelled', ended_at = now(), updated_at = now()
             WHERE id = $1 AND state = 'running' RETURNING {COLUMNS}"
        );
        let cancelled: Option<Migration> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?;
        match cancelled {
            Some(done) => Ok(Some(done)),
            None => get(conn, id).await,
        }
    })
    .await
}

/// Takes the running migration that waited longest for a batch, locked
/// until the transaction ends; another runner skips it.
pub async fn claim_running(conn: &mut PgConnection) -> StoreResult<Option<Migration>> {
    measured("migrations.claim_running", async move {
        let sql = format!(
            "SELECT {COLUMNS} FROM kind_migrations WHERE state = 'running'
             ORDER BY updated_at LIMIT 1 FOR UPDATE SKIP LOCKED"
        );
        sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .fetch_optional(conn)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Whether any migration is running (the runner's idle probe: one read of
/// a partial index that is empty while nothing migrates).
pub async fn any_running<'e>(executor: impl PgExecutor<'e>) -> StoreResult<bool> {
    measured("migrations.any_running", async move {
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM kind_migrations WHERE state = 'running')")
            .fetch_one(executor)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Whether a running migration moves resources from or to this version.
pub async fn running_with_version(conn: &mut PgConnection, kind: &str, kind_version: i32) -> StoreResult<bool> {
    measured("migrations.running_with_version", async move {
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM kind_migrations WHERE kind = $1 AND state = 'running'
                 AND (from_version = $2 OR to_version = $2))",
        )
        .bind(kind)
        .bind(small(kind_version))
        .fetch_one(conn)
        .await
        .map_err(Into::into)
    })
    .await
}

/// A resource a migration visits.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Candidate {
    /// Its id.
    pub id: Uuid,
    /// Its name.
    pub name: String,
    /// Its labels.
    pub labels: Json<BTreeMap<String, String>>,
    /// Its spec.
    pub spec: Json<Value>,
    /// Its generation.
    pub generation: i64,
    /// When it was created (the walk's order, with the id).
    pub created_at: DateTime<Utc>,
    /// Its provider config override.
    pub provider_config: Option<String>,
}

/// The roots of (kind, from_version) matching `selector` that the
/// migration `failed_mark` has yet to visit: not being deleted, and not
/// marked by it as failed at their current generation.
fn candidates_query(
    kind: &str,
    from_version: i32,
    selector: &LabelSelector,
    failed_mark: &str,
) -> QueryBuilder<Postgres> {
    let mut query = QueryBuilder::new(
        "SELECT r.id, r.name, r.labels, r.spec, r.generation, r.created_at, r.provider_config
         FROM resources r WHERE r.kind = ",
    );
    query
        .push_bind(kind.to_owned())
        .push(" AND r.kind_version = ")
        .push_bind(small(from_version))
        .push(" AND r.owner_id IS NULL AND r.deletion_requested_at IS NULL");
    push_selector(&mut query, selector);
    query
        .push(
            " AND NOT EXISTS (SELECT 1 FROM resource_conditions c WHERE c.resource_id = r.id
                 AND c.type = 'Converted' AND c.status = 'False' AND c.observed_generation = r.generation
                 AND starts_with(c.message, ",
        )
        .push_bind(failed_mark.to_owned())
        .push("))");
    query
}

/// What a migration walks over.
#[derive(Debug, Clone)]
pub struct Walk {
    /// The kind.
    pub kind: String,
    /// The source version.
    pub from_version: i32,
    /// The label selector.
    pub selector: LabelSelector,
    /// The prefix of the `Converted=False` messages this migration writes,
    /// which tells the resources it already failed.
    pub failed_mark: String,
}

/// The next `limit` resources of the walk after the cursor, in (created_at,
/// id) order, row-locked for the caller's transaction.
pub async fn next_batch(
    conn: &mut PgConnection,
    walk: &Walk,
    after: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> StoreResult<Vec<Candidate>> {
    measured("migrations.next_batch", async move {
        let mut query = candidates_query(&walk.kind, walk.from_version, &walk.selector, &walk.failed_mark);
        if let Some((at, id)) = after {
            query
                .push(" AND (r.created_at, r.id) > (")
                .push_bind(at)
                .push(", ")
                .push_bind(id)
                .push(")");
        }
        query
            .push(" ORDER BY r.created_at, r.id LIMIT ")
            .push_bind(limit)
            .push(" FOR UPDATE OF r");
        query.build_query_as().fetch_all(conn).await.map_err(Into::into)
    })
    .await
}

/// A position from which the walk finds what it left behind at or before
/// `upto`: a resource created by a transaction that committed after the
/// cursor passed its position, or one re-applied on the old version.
/// `None` when there is none.
pub async fn left_behind(
    conn: &mut PgConnection,
    walk: &Walk,
    upto: Option<(DateTime<Utc>, Uuid)>,
) -> StoreResult<Option<(DateTime<Utc>, Uuid)>> {
    measured("migrations.left_behind", async move {
        let mut query = candidates_query(&walk.kind, walk.from_version, &walk.selector, &walk.failed_mark);
        if let Some((at, id)) = upto {
            query
                .push(" AND (r.created_at, r.id) <= (")
                .push_bind(at)
                .push(", ")
                .push_bind(id)
                .push(")");
        }
        query.push(" ORDER BY r.created_at, r.id LIMIT 1");
        let first: Option<Candidate> = query.build_query_as().fetch_optional(conn).await?;
        // One microsecond earlier (created_at is stored in microseconds)
        // with the largest id is before every row of that time.
        Ok(first.map(|c| (c.created_at - chrono::Duration::microseconds(1), Uuid::max())))
    })
    .await
}

/// The number of roots of (kind, from_version) matching `selector`, not
/// being deleted.
pub async fn count(
    conn: &mut PgConnection,
    kind: &str,
    from_version: i32,
    selector: &LabelSelector,
) -> StoreResult<i64> {
    measured("migrations.count", async move {
        let mut query = QueryBuilder::new("SELECT count(*) FROM resources r WHERE r.kind = ");
        query
            .push_bind(kind.to_owned())
            .push(" AND r.kind_version = ")
            .push_bind(small(from_version))
            .push(" AND r.owner_id IS NULL AND r.deletion_requested_at IS NULL");
        push_selector(&mut query, selector);
        query.build_query_scalar().fetch_one(conn).await.map_err(Into::into)
    })
    .await
}

/// Progress of one batch, committed with it.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// The last resource visited.
    pub cursor: Option<(DateTime<Utc>, Uuid)>,
    /// Converted in this batch.
    pub converted: i64,
    /// Failed in this batch.
    pub failed: i64,
    /// The failures kept by name, all of them so far (at most
    /// [`MAX_FIRST_FAILURES`]).
    pub first_failures: Vec<Failure>,
    /// The state after the batch (`running` to go on).
    pub state: &'static str,
}

/// Records a batch's progress on the migration row (locked by the caller).
pub async fn advance(conn: &mut PgConnection, id: Uuid, progress: &Progress) -> StoreResult<Migration> {
    measured("migrations.advance", async move {
        let sql = format!(
            "UPDATE kind_migrations SET cursor_at = $2, cursor_id = $3, converted = converted + $4,
                 failed = failed + $5, first_failures = $6, state = $7,
                 ended_at = CASE WHEN $7 = 'running' THEN NULL ELSE now() END, updated_at = now()
             WHERE id = $1 RETURNING {COLUMNS}"
        );
        sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .bind(progress.cursor.map(|(at, _)| at))
            .bind(progress.cursor.map(|(_, id)| id))
            .bind(progress.converted)
            .bind(progress.failed)
            .bind(Json(&progress.first_failures))
            .bind(progress.state)
            .fetch_one(conn)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Removes the `Converted` condition of resources that converted (a
/// failure an earlier run left on them no longer holds).
pub async fn clear_converted_conditions(conn: &mut PgConnection, ids: &[Uuid]) -> StoreResult<()> {
    measured("migrations.clear_converted_conditions", async move {
        if ids.is_empty() {
            return Ok(());
        }
        sqlx::query("DELETE FROM resource_conditions WHERE resource_id = ANY($1) AND type = 'Converted'")
            .bind(ids)
            .execute(conn)
            .await?;
        Ok(())
    })
    .await
}
