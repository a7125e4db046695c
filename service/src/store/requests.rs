//! `api_requests`: the first answer of every idempotent (request_id) call.

use super::measured::measured;
use sqlx::PgConnection;
use sqlx::PgPool;

use super::StoreResult;

/// The outcome of reserving a request id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// The id is new: this transaction owns it and must fill in the answer.
    Reserved,
    /// The id was used by a committed call.
    Existing {
        /// The method that call invoked.
        method: String,
        /// Hash of that call's request.
        request_hash: Vec<u8>,
        /// Its encoded answer.
        response: Vec<u8>,
    },
}

/// Reserves `request_id` for this transaction. A concurrent call with the
/// same id waits here until this transaction ends, then sees its answer.
pub async fn reserve(
    conn: &mut PgConnection,
    request_id: &str,
    method: &str,
    request_hash: &[u8],
) -> StoreResult<Reservation> {
    measured("requests.reserve", async move {
        let inserted = sqlx::query(
            "INSERT INTO api_requests (request_id, method, request_hash) VALUES ($1, $2, $3)
             ON CONFLICT (request_id) DO NOTHING",
        )
        .bind(request_id)
        .bind(method)
        .bind(request_hash)
        .execute(&mut *conn)
        .await?;
        if inserted.rows_affected() == 1 {
            return Ok(Reservation::Reserved);
        }
        let (method, request_hash, response): (String, Vec<u8>, Vec<u8>) =
            sqlx::query_as("SELECT method, request_hash, response FROM api_requests WHERE request_id = $1")
                .bind(request_id)
                .fetch_one(conn)
                .await?;
        Ok(Reservation::Existing {
            method,
            request_hash,
            response,
        })
    })
    .await
}

/// Stores the answer of a reserved request id.
pub async fn complete(conn: &mut PgConnection, request_id: &str, response: &[u8]) -> StoreResult<()> {
    measured("requests.complete", async move {
        sqlx::query("UPDATE api_requests SET response = $2 WHERE request_id = $1")
            .bind(request_id)
            .bind(response)
            .execute(conn)
            .await?;
        Ok(())
    })
    .await
}

/// Forgets up to `batch` answers older than `max_age_secs`.
pub async fn trim(pool: &PgPool, max_age_secs: i64, batch: i64) -> StoreResult<u64> {
    measured("requests.trim", async move {
        let done = sqlx::query(
            "DELETE FROM api_requests WHERE request_id IN (
                 SELECT request_id FROM api_requests WHERE created_at < now() - make_interval(secs => $1)
                 ORDER BY created_at LIMIT $2)",
        )
        .bind(max_age_secs as f64)
        .bind(batch)
        .execute(pool)
        .await?;
        Ok(done.rows_affected())
    })
    .await
}
