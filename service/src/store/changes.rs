//! `resource_changes`: the commit-ordered change log and its retention.

use sqlx::PgPool;

use super::StoreResult;
use crate::domain::position::Position;

/// One change-log entry.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
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

/// Up to `limit` entries after `after`, in commit order, stopping at the
/// frontier below which every transaction has finished: a reader that
/// advances through these pages never skips a change committed later.
pub async fn read_after(pool: &PgPool, after: Position, limit: i64) -> StoreResult<Vec<ChangeRow>> {
    sqlx::query_as(
        "SELECT txid, seq, resource_id, kind, change FROM resource_changes
         WHERE (txid, seq) > ($1, $2) AND txid < change_frontier()
         ORDER BY txid, seq LIMIT $3",
    )
    .bind(after.txid)
    .bind(after.seq)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Deletes up to `batch` entries older than `max_age_secs`.
pub async fn trim_by_age(pool: &PgPool, max_age_secs: i64, batch: i64) -> StoreResult<u64> {
    let done = sqlx::query(
        "DELETE FROM resource_changes WHERE (txid, seq) IN (
             SELECT txid, seq FROM resource_changes WHERE recorded_at < now() - make_interval(secs => $1)
             ORDER BY recorded_at LIMIT $2)",
    )
    .bind(max_age_secs as f64)
    .bind(batch)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}
