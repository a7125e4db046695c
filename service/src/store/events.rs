//! `resource_events`: event runs, their pages and their retention.

use super::measured::measured;
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
    measured("events.record", async move {
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
            .map_err(Into::into)
    })
    .await
}

/// Records several events (each on its resource at its generation, as
/// [`record`] does) in one statement, in the order given.
pub async fn record_many(
    conn: &mut PgConnection,
    recorded: &[(Uuid, i64, &NewEvent)],
    actor: &str,
    keep_runs: i32,
) -> StoreResult<()> {
    measured("events.record_many", async move {
        match recorded {
            [] => Ok(()),
            [(id, generation, event)] => record(conn, *id, *generation, event, actor, keep_runs)
                .await
                .map(drop),
            _ => {
                let ids: Vec<Uuid> = recorded.iter().map(|(id, _, _)| *id).collect();
                let generations: Vec<i64> = recorded.iter().map(|(_, g, _)| *g).collect();
                let categories: Vec<&str> = recorded.iter().map(|(_, _, e)| e.category).collect();
                let types: Vec<&str> = recorded.iter().map(|(_, _, e)| e.type_.as_db()).collect();
                let reasons: Vec<&str> = recorded.iter().map(|(_, _, e)| e.reason).collect();
                let messages: Vec<&str> = recorded.iter().map(|(_, _, e)| e.message.as_str()).collect();
                let details: Vec<Option<Json<&Value>>> =
                    recorded.iter().map(|(_, _, e)| e.detail.as_ref().map(Json)).collect();
                sqlx::query(
                    "SELECT record_resource_event(x.id, x.category, x.type, x.reason, x.message, x.detail, $7, x.generation, $8)
                     FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::jsonb[], $9::int8[])
                         WITH ORDINALITY AS x(id, category, type, reason, message, detail, generation, n)
                     ORDER BY x.n",
                )
                .bind(ids)
                .bind(categories)
                .bind(types)
                .bind(reasons)
                .bind(messages)
                .bind(details)
                .bind(actor)
                .bind(keep_runs)
                .bind(generations)
                .execute(conn)
                .await?;
                Ok(())
            }
        }
    })
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

/// The columns of an event run with its resource's identity.
const RUN_SELECT: &str = "SELECT e.id, e.resource_id, r.kind, r.name, e.category, e.type, e.reason, e.message, \
     e.detail, e.count, e.first_at, e.last_at, e.actor, e.generation, e.ev_txid, e.ev_seq \
     FROM resource_events e JOIN resources r ON r.id = e.resource_id";

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

impl EventRow {
    fn into_run(self) -> EventRun {
        EventRun {
            id: self.id,
            resource: ResourceRef {
                kind: self.kind,
                name: self.name,
            },
            resource_id: self.resource_id,
            category: self.category,
            // CHECK-constrained column.
            type_: EventType::from_db(&self.type_).unwrap_or(EventType::Normal),
            reason: self.reason,
            message: self.message,
            detail: self.detail.map(|d| d.0),
            count: self.count,
            first_at: self.first_at,
            last_at: self.last_at,
            actor: self.actor,
            generation: self.generation,
            position: Position {
                txid: self.ev_txid,
                seq: self.ev_seq,
            },
        }
    }
}

/// A page of a resource's event runs, newest (by last time) first.
pub async fn list(
    pool: &PgPool,
    resource_id: Uuid,
    filter: &EventFilter,
    after: Option<EventCursor>,
    limit: usize,
) -> StoreResult<Vec<EventRun>> {
    measured("events.list", async move {
        let mut query: QueryBuilder<Postgres> = QueryBuilder::new(format!("{RUN_SELECT} WHERE e.resource_id = "));
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
        Ok(rows.into_iter().map(EventRow::into_run).collect())
    })
    .await
}

/// Deletes up to `batch` runs whose last event is older than `max_age_secs`
/// (raising the resources' event horizons).
pub async fn trim_by_age(pool: &PgPool, max_age_secs: i64, batch: i64) -> StoreResult<u64> {
    measured("events.trim_by_age", async move {
        let trimmed: i32 = sqlx::query_scalar("SELECT trim_event_runs_by_age($1, $2)")
            .bind(max_age_secs as f64)
            .bind(i32::try_from(batch).unwrap_or(i32::MAX))
            .fetch_one(pool)
            .await?;
        Ok(u64::try_from(trimmed).unwrap_or(0))
    })
    .await
}

/// Deletes up to `batch` runs beyond the newest `keep_runs` of their
/// timeline (a backstop for timelines written before the limit was lowered;
/// new runs trim their own timeline as they are appended).
pub async fn trim_timelines(pool: &PgPool, keep_runs: i64, batch: i64) -> StoreResult<u64> {
    measured("events.trim_timelines", async move {
        let trimmed: i32 = sqlx::query_scalar("SELECT trim_event_timelines($1, $2)")
            .bind(i32::try_from(keep_runs).unwrap_or(i32::MAX))
            .bind(i32::try_from(batch).unwrap_or(i32::MAX))
            .fetch_one(pool)
            .await?;
        Ok(u64::try_from(trimmed).unwrap_or(0))
    })
    .await
}

/// Runs of one resource changed after `after` (optionally one category), in
/// event-log order, below `frontier`.
pub async fn runs_after(
    conn: &mut PgConnection,
    resource_id: Uuid,
    category: Option<&str>,
    after: Position,
    frontier: i64,
    limit: usize,
) -> StoreResult<Vec<EventRun>> {
    measured("events.runs_after", async move {
        let rows: Vec<EventRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "{RUN_SELECT} WHERE e.resource_id = $1 AND ($2::text IS NULL OR e.category = $2)
               AND (e.ev_txid, e.ev_seq) > ($3, $4) AND e.ev_txid < $5
             ORDER BY e.ev_txid, e.ev_seq LIMIT $6"
        )))
        .bind(resource_id)
        .bind(category)
        .bind(after.txid)
        .bind(after.seq)
        .bind(frontier)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(conn)
        .await?;
        Ok(rows.into_iter().map(EventRow::into_run).collect())
    })
    .await
}

/// The newest `limit` runs of one resource (optionally one category), returned
/// oldest first.
pub async fn newest_runs(
    conn: &mut PgConnection,
    resource_id: Uuid,
    category: Option<&str>,
    limit: usize,
) -> StoreResult<Vec<EventRun>> {
    measured("events.newest_runs", async move {
        let rows: Vec<EventRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT * FROM ({RUN_SELECT} WHERE e.resource_id = $1 AND ($2::text IS NULL OR e.category = $2)
             ORDER BY e.last_at DESC, e.id DESC LIMIT $3) newest ORDER BY last_at, id"
        )))
        .bind(resource_id)
        .bind(category)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(conn)
        .await?;
        Ok(rows.into_iter().map(EventRow::into_run).collect())
    })
    .await
}

/// The resource's event horizon (newest trimmed position) and head (newest
/// position handed out), with the current frontier.
pub async fn horizon_and_head(conn: &mut PgConnection, resource_id: Uuid) -> StoreResult<(Position, Position)> {
    measured("events.horizon_and_head", async move {
        let (h_txid, h_seq, l_txid, l_seq, frontier): (Option<i64>, Option<i64>, Option<i64>, Option<i64>, i64) =
            sqlx::query_as(
                "SELECT h.txid, h.seq, l.ev_txid, l.ev_seq, change_frontier() FROM (SELECT NULL) AS one
                 LEFT JOIN event_horizon h ON h.resource_id = $1
                 LEFT JOIN LATERAL (SELECT ev_txid, ev_seq FROM resource_events WHERE resource_id = $1
                                    ORDER BY ev_txid DESC, ev_seq DESC LIMIT 1) l ON true",
            )
            .bind(resource_id)
            .fetch_one(conn)
            .await?;
        let horizon = Position {
            txid: h_txid.unwrap_or(0),
            seq: h_seq.unwrap_or(0),
        };
        let last = Position {
            txid: l_txid.unwrap_or(0),
            seq: l_seq.unwrap_or(0),
        };
        Ok((horizon, last.max(Position { txid: frontier, seq: 0 })))
    })
    .await
}
