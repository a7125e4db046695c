//! What the three leased tables share: a worker's heartbeat refreshes the
//! leases it attests (one statement for all three), and a closed stream's
//! leases are released at once,
//! whether they are tasks, reactor deliveries or operations (a lease token
//! is unique across all three).

use super::measured::measured;
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

    /// What releasing a lease sets besides clearing it and moving the
    /// epoch, and which rows hold a lease.
    fn release(self) -> (&'static str, &'static str) {
        match self {
            Leased::Tasks => (", deadline_at = NULL", "true"),
            // Deliveries have no deadline column.
            Leased::Deliveries => ("", "true"),
            // Back to pending: a lost lease is not a failure, the verb runs again.
            Leased::Operations => (", deadline_at = NULL, state = 'pending'", "state = 'running'"),
        }
    }
}

/// The leases a worker's heartbeat attests (token and epoch), by table.
#[derive(Debug, Default)]
pub struct Attested {
    /// Leases of `work_queue` rows.
    pub tasks: Vec<(Uuid, i64)>,
    /// Leases of `reactor_deliveries` rows.
    pub deliveries: Vec<(Uuid, i64)>,
    /// Leases of `operations` rows.
    pub operations: Vec<(Uuid, i64)>,
}

/// Refreshes, in one statement, the heartbeat of the `attested` leases that
/// `broker` holds; returns how many.
pub async fn heartbeat(pool: &PgPool, broker: &str, attested: &Attested) -> StoreResult<u64> {
    measured("leases.heartbeat", async move {
        let (tasks, deliveries, operations) = (&attested.tasks, &attested.deliveries, &attested.operations);
        if tasks.is_empty() && deliveries.is_empty() && operations.is_empty() {
            return Ok(0);
        }
        let split = |leases: &[(Uuid, i64)]| -> (Vec<Uuid>, Vec<i64>) { leases.iter().copied().unzip() };
        let ((task_tokens, task_epochs), (delivery_tokens, delivery_epochs), (operation_tokens, operation_epochs)) =
            (split(tasks), split(deliveries), split(operations));
        let refreshed: i64 = sqlx::query_scalar(include_str!("sql/heartbeat.sql"))
            .bind(broker)
            .bind(&task_tokens)
            .bind(&task_epochs)
            .bind(&delivery_tokens)
            .bind(&delivery_epochs)
            .bind(&operation_tokens)
            .bind(&operation_epochs)
            .fetch_one(pool)
            .await?;
        Ok(u64::try_from(refreshed).unwrap_or(0))
    })
    .await
}

/// Releases the leases of `table` that `broker` holds among `tokens` at
/// once (a closed stream), with a new epoch so others can claim them and a
/// late result is dropped; wakes the brokers when any was freed. Returns
/// how many.
pub async fn release(pool: &PgPool, table: Leased, broker: &str, tokens: &[Uuid]) -> StoreResult<u64> {
    measured("leases.release", async move {
        if tokens.is_empty() {
            return Ok(0);
        }
        let (also, held) = table.release();
        let sql = format!(
            "UPDATE {} SET broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, claim_epoch = claim_epoch + 1{also}
             WHERE lease_token = ANY ($2) AND broker_id = $1 AND {held}",
            table.table()
        );
        let done = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(broker)
            .bind(tokens)
            .execute(pool)
            .await?;
        wake_claimers(pool, done.rows_affected()).await?;
        Ok(done.rows_affected())
    })
    .await
}

/// Puts back reconcile and teardown tasks `broker` claimed and never
/// dispatched (a claim's leftovers no stream took, `broker::claims`): as if
/// never claimed, so their attempt count does not move; the new epoch
/// fences anything of the old lease. Wakes the brokers when any went back.
pub async fn unclaim(pool: &PgPool, broker: &str, tokens: &[Uuid]) -> StoreResult<u64> {
    measured("leases.unclaim", async move {
        if tokens.is_empty() {
            return Ok(0);
        }
        let done = sqlx::query(
            "UPDATE work_queue
             SET broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, deadline_at = NULL,
                 claim_epoch = claim_epoch + 1, attempts = greatest(attempts - 1, 0)
             WHERE lease_token = ANY ($2) AND broker_id = $1 AND NOT outcome_pending",
        )
        .bind(broker)
        .bind(tokens)
        .execute(pool)
        .await?;
        wake_claimers(pool, done.rows_affected()).await?;
        Ok(done.rows_affected())
    })
    .await
}

/// Tells the brokers that work became claimable, when `freed` leases did.
async fn wake_claimers(pool: &PgPool, freed: u64) -> StoreResult<()> {
    if freed > 0 {
        sqlx::query("SELECT notify_throttled('work_ready', 'wake_work_ready')")
            .execute(pool)
            .await?;
    }
    Ok(())
}

/// Releases every lease of `table` held through one of `brokers` (members
/// known to be gone: a restarted process's predecessors), with a new epoch
/// so a late result is dropped and others can claim them; wakes the brokers
/// when any was freed. A task whose result already waits in the outbox is
/// left to the drainer. Idempotent: a second call finds nothing. Returns
/// how many were freed.
pub async fn release_held_by(pool: &PgPool, table: Leased, brokers: &[String]) -> StoreResult<u64> {
    measured("leases.release_held_by", async move {
        if brokers.is_empty() {
            return Ok(0);
        }
        let (also, held) = table.release();
        let settled = match table {
            Leased::Tasks => " AND NOT outcome_pending",
            Leased::Deliveries | Leased::Operations => "",
        };
        // `lease_token IS NOT NULL` keeps the statement on the table's lease
        // index: it reads the leased rows only, whatever the backlog.
        let sql = format!(
            "UPDATE {} SET broker_id = NULL, lease_token = NULL, heartbeat_at = NULL, claim_epoch = claim_epoch + 1{also}
             WHERE lease_token IS NOT NULL AND broker_id = ANY ($1) AND {held}{settled}",
            table.table()
        );
        let done = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(brokers).execute(pool).await?;
        wake_claimers(pool, done.rows_affected()).await?;
        Ok(done.rows_affected())
    })
    .await
}
