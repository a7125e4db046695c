//! `resource_events`: event runs, their pages and their retention.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool, Postgres, QueryBuilder};
use uuid::Uuid;

use super::StoreResult;
use crate::domain::event::{EventRun, EventType, NewEvent};
use crate::domain::position::Position;
use crate::domain::resource::ResourceRef;

/// Records one event on a resource (extending the latest run of its
/// category when type and reason match), keeping at most `keep_runs` runs per
/// timeline (0 = unbounded).
pub async fn record(
    conn: &mut PgConnection,
    resource_id: Uuid,
    generation: i64,
    event: &NewEvent,
    actor: &str,
    keep_runs: i32,
) -> StoreResult<Uuid> {
    sqlx::query_scalar("SELECT record_resource_event($1, $2, $3, $4, $5, $6, $7, $8, $9)")
        .bind(resource_id)
        .bind(event.category)
        .bind(event.type_.as_db())
        .bind(event.reason)
        .bind(&event.message)
        .bind(event.detail.as_ref().map(Json))
        .bind(actor)
        .bind(generation)
        .bind(keep_runs)
        .fetch_one(conn)
        .await
}

/// Filters of an event list.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    /// Only this category.
    pub category: Option<String>,
    /// Only this type.
    pub type_: Option<EventType>,
    /// Only this reason.
    pub reason: Option<String>,
    /// Only runs whose last event is at or after this time.
    pub since: Option<DateTime<Utc>>,
}

/// Keyset position in an event list: (last time, run id), newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventCursor {
    /// Last event time of the run.
    pub last_at: DateTime<Utc>,
    /// Run id.
    pub id: Uuid,
}

#[derive(Debug, sqlx::FromRow)]
struct EventRow {
    id: Uuid,
    resource_id: Uuid,
    kind: String,
    name: String,
    category: String,
    #[sqlx(rename = "type")]
    type_: String,
    reason: String,
    message: String,
    detail: Option<Json<Value>>,
    count: i64,
    first_at: DateTime<Utc>,
    last_at: DateTime<Utc>,
    actor: String,
    generation: i64,
    ev_txid: i64,
    ev_seq: i64,
}

/// A page of a resource's event runs, newest (by last time) first.
pub async fn list(
    pool: &PgPool,
    resource_id: Uuid,
    filter: &EventFilter,
    after: Option<EventCursor>,
    limit: usize,
) -> StoreResult<Vec<EventRun>> {
    let mut query: QueryBuilder<Postgres> = QueryBuilder::new(
        "SELECT e.id, e.resource_id, r.kind, r.name, e.category, e.type, e.reason, e.message, e.detail, e.count,
                e.first_at, e.last_at, e.actor, e.generation, e.ev_txid, e.ev_seq
         FROM resource_events e JOIN resources r ON r.id = e.resource_id
         WHERE e.resource_id = ",
    );
    query.push_bind(resource_id);
    if let Some(category) = &filter.category {
        query.push(" AND e.category = ").push_bind(category.clone());
    }
    if let Some(type_) = filter.type_ {
        query.push(" AND e.type = ").push_bind(type_.as_db());
    }
    if let Some(reason) = &filter.reason {
        query.push(" AND e.reason = ").push_bind(reason.clone());
    }
    if let Some(since) = filter.since {
        query.push(" AND e.last_at >= ").push_bind(since);
    }
    if let Some(cursor) = after {
        query
            .push(" AND (e.last_at, e.id) < (")
            .push_bind(cursor.last_at)
            .push(", ")
            .push_bind(cursor.id)
            .push(")");
    }
    query
        .push(" ORDER BY e.last_at DESC, e.id DESC LIMIT ")
        .push_bind(i64::try_from(limit).unwrap_or(i64::MAX));
    let rows: Vec<EventRow> = query.build_query_as().fetch_all(pool).await?;
    Ok(rows
        .into_iter()
        .map(|row| EventRun {
            id: row.id,
            resource: ResourceRef {
                kind: row.kind,
                name: row.name,
            },
            resource_id: row.resource_id,
            category: row.category,
            // CHECK-constrained column.
            type_: EventType::from_db(&row.type_).unwrap_or(EventType::Normal),
            reason: row.reason,
            message: row.message,
            detail: row.detail.map(|d| d.0),
            count: row.count,
            first_at: row.first_at,
            last_at: row.last_at,
            actor: row.actor,
            generation: row.generation,
            position: Position {
                txid: row.ev_txid,
                seq: row.ev_seq,
            },
        })
        .collect())
}

/// Deletes up to `batch` runs whose last event is older than `max_age_secs`.
pub async fn trim_by_age(pool: &PgPool, max_age_secs: i64, batch: i64) -> StoreResult<u64> {
    let done = sqlx::query(
        "DELETE FROM resource_events WHERE id IN (
             SELECT id FROM resource_events WHERE last_at < now() - make_interval(secs => $1)
             ORDER BY last_at LIMIT $2)",
    )
    .bind(max_age_secs as f64)
    .bind(batch)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// Deletes up to `batch` runs beyond the newest `keep_runs` of their
/// timeline (a backstop for timelines written before the limit was lowered;
/// new runs trim their own timeline as they are appended).
pub async fn trim_timelines(pool: &PgPool, keep_runs: i64, batch: i64) -> StoreResult<u64> {
    let done = sqlx::query(
        "DELETE FROM resource_events WHERE id IN (
             SELECT id FROM (
                 SELECT id, row_number() OVER (PARTITION BY resource_id, category ORDER BY run_seq DESC) AS rank
                 FROM resource_events) ranked
             WHERE rank > $1 LIMIT $2)",
    )
    .bind(keep_runs)
    .bind(batch)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}
