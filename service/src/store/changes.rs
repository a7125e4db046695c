//! `resource_changes`: the commit-ordered change log, its horizon and retention.

use super::measured::measured;
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};

use super::StoreResult;
use crate::domain::position::Position;

/// One change-log entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeRow {
    /// Writing transaction.
    pub txid: i64,
    /// Sequence number.
    pub seq: i64,
    /// The resource.
    pub resource_id: uuid::Uuid,
    /// Its kind.
    pub kind: String,
    /// `added`, `modified` or `deleted`.
    pub change: String,
    /// The final row of a physically deleted resource.
    pub image: Option<Json<Value>>,
}

impl ChangeRow {
    /// The entry's position.
    pub fn position(&self) -> Position {
        Position {
            txid: self.txid,
            seq: self.seq,
        }
    }
}

/// A page of the change log.
#[derive(Debug, Clone, Default)]
pub struct ChangePage {
    /// Entries after the cursor, in commit order.
    pub rows: Vec<ChangeRow>,
    /// Every transaction below this id had finished when the page was read.
    pub frontier: i64,
}

impl ChangePage {
    /// The position a reader has safely reached after this page: the last
    /// entry when the page was full, else everything below the frontier.
    pub fn reached(&self, after: Position, limit: usize) -> Position {
        match self.rows.last() {
            Some(last) if self.rows.len() >= limit => last.position(),
            _ => after.max(Position {
                txid: self.frontier,
                seq: 0,
            }),
        }
    }
}

/// Up to `limit` entries after `after`, in commit order, below the frontier:
/// a reader that advances through these pages never skips a change committed
/// later.
pub async fn read_after(pool: &PgPool, after: Position, limit: usize) -> StoreResult<ChangePage> {
    measured("changes.read_after", async move {
        let mut conn = pool.acquire().await?;
        read_after_in(&mut conn, after, limit).await
    })
    .await
}

/// A page entry beside the frontier it was read under (no entry: all NULL).
#[derive(sqlx::FromRow)]
struct FrontierRow {
    frontier: i64,
    txid: Option<i64>,
    seq: Option<i64>,
    resource_id: Option<uuid::Uuid>,
    kind: Option<String>,
    change: Option<String>,
    image: Option<Json<Value>>,
}

/// [`read_after`] on a given connection.
pub async fn read_after_in(conn: &mut PgConnection, after: Position, limit: usize) -> StoreResult<ChangePage> {
    measured("changes.read_after_in", async move {
        // `change_page` reads the entries and the frontier in one statement, one
        // snapshot: the frontier is that snapshot's xmin, so every transaction
        // below it had finished before the entries were read. (Not
        // `change_frontier()` next to a read: a volatile function may take a
        // newer snapshot than the read's and so name a frontier the read cannot
        // see up to.)
        let rows: Vec<FrontierRow> = sqlx::query_as(
            "SELECT frontier, txid, seq, resource_id, kind, change, image FROM change_page($1, $2, $3)
             ORDER BY txid, seq",
        )
        .bind(after.txid)
        .bind(after.seq)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(conn)
        .await?;
        let frontier = rows.first().map_or(0, |r| r.frontier);
        let rows = rows
            .into_iter()
            .filter_map(|r| {
                Some(ChangeRow {
                    txid: r.txid?,
                    seq: r.seq?,
                    resource_id: r.resource_id?,
                    kind: r.kind?,
                    change: r.change?,
                    image: r.image,
                })
            })
            .collect();
        Ok(ChangePage { rows, frontier })
    })
    .await
}

/// Turns the caller's fresh transaction into a read-only snapshot and returns
/// its frontier (the snapshot's xmin): every transaction below it is in the
/// snapshot, so a watch that lists in it and then follows the log from the
/// frontier misses nothing.
pub async fn begin_snapshot(conn: &mut PgConnection) -> StoreResult<i64> {
    measured("changes.begin_snapshot", async move {
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *conn)
            .await?;
        frontier(conn).await
    })
    .await
}

/// Every transaction below this id has finished (as `conn` sees it now).
pub async fn frontier(conn: &mut PgConnection) -> StoreResult<i64> {
    measured("changes.frontier", async move {
        sqlx::query_scalar("SELECT change_frontier()")
            .fetch_one(conn)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Whether entries exist after `after` that the frontier still holds back.
pub async fn pending_after(pool: &PgPool, after: Position) -> StoreResult<bool> {
    measured("changes.pending_after", async move {
        // A plain ORDER BY + LIMIT walks the primary key from `after`; under
        // EXISTS the planner drops the ordering and may scan the whole log.
        let next: Option<i32> = sqlx::query_scalar(
            "SELECT 1 FROM resource_changes WHERE (txid, seq) > ($1, $2) ORDER BY txid, seq LIMIT 1",
        )
        .bind(after.txid)
        .bind(after.seq)
        .fetch_optional(pool)
        .await?;
        Ok(next.is_some())
    })
    .await
}

/// The newest trimmed position: resuming below it would skip changes.
pub async fn horizon(pool: &PgPool) -> StoreResult<Position> {
    measured("changes.horizon", async move {
        let (txid, seq): (i64, i64) =
            sqlx::query_as("SELECT txid, seq FROM watch_horizon WHERE log = 'resource_changes'")
                .fetch_one(pool)
                .await?;
        Ok(Position { txid, seq })
    })
    .await
}

/// The newest position a client can have been given: the last entry or the
/// current frontier, whichever is later.
pub async fn head(pool: &PgPool) -> StoreResult<Position> {
    measured("changes.head", async move {
        let (txid, seq, frontier): (Option<i64>, Option<i64>, i64) = sqlx::query_as(
            "SELECT l.txid, l.seq, change_frontier() FROM
                 (SELECT NULL) AS one
                 LEFT JOIN LATERAL (SELECT txid, seq FROM resource_changes ORDER BY txid DESC, seq DESC LIMIT 1) l ON true",
        )
        .fetch_one(pool)
        .await?;
        let last = Position {
            txid: txid.unwrap_or(0),
            seq: seq.unwrap_or(0),
        };
        Ok(last.max(Position { txid: frontier, seq: 0 }))
    })
    .await
}

/// Deletes up to `batch` entries older than `max_age_secs` and raises the horizon past them.
pub async fn trim_by_age(pool: &PgPool, max_age_secs: i64, batch: i64) -> StoreResult<u64> {
    measured("changes.trim_by_age", async move {
        let trimmed: i32 = sqlx::query_scalar("SELECT trim_resource_changes($1, $2)")
            .bind(max_age_secs as f64)
            .bind(i32::try_from(batch).unwrap_or(i32::MAX))
            .fetch_one(pool)
            .await?;
        Ok(u64::try_from(trimmed).unwrap_or(0))
    })
    .await
}
