//! What the three leased tables share: a worker's heartbeat refreshes the
//! leases it attests, whether they are tasks, reactor deliveries or
//! operations (a lease token is unique across all three).

use sqlx::PgPool;
use uuid::Uuid;

use super::StoreResult;

/// A table whose rows workers hold by lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leased {
    /// `work_queue`: reconcile and teardown tasks.
    Tasks,
    /// `reactor_deliveries`.
    Deliveries,
    /// `operations`.
    Operations,
}

impl Leased {
    fn table(self) -> &'static str {
        match self {
            Leased::Tasks => "work_queue",
            Leased::Deliveries => "reactor_deliveries",
            Leased::Operations => "operations",
        }
    }
}

/// Refreshes the heartbeat of the leases of `table` that `broker` holds
/// among `leases` (token and epoch); returns how many.
pub async fn heartbeat(pool: &PgPool, table: Leased, broker: &str, leases: &[(Uuid, i64)]) -> StoreResult<u64> {
    if leases.is_empty() {
        return Ok(0);
    }
    let (tokens, epochs): (Vec<Uuid>, Vec<i64>) = leases.iter().copied().unzip();
    let sql = format!(
        "UPDATE {} t SET heartbeat_at = now()
         FROM unnest($2::uuid[], $3::bigint[]) AS l(token, epoch)
         WHERE t.lease_token = l.token AND t.claim_epoch = l.epoch AND t.broker_id = $1",
        table.table()
    );
    let done = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(broker)
        .bind(&tokens)
        .bind(&epochs)
        .execute(pool)
        .await?;
    Ok(done.rows_affected())
}
