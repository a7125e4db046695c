//! Planner statistics of the tables whose size moves fastest (see
//! `engine::statistics` for why they cannot wait for autovacuum).

use super::measured::measured;
use sqlx::PgPool;

use super::StoreResult;

/// Analyses the tables that hold more than twice the rows their statistics
/// claim (and at least 1,000); returns how many were analysed.
pub async fn refresh(pool: &PgPool) -> StoreResult<i64> {
    measured("statistics.refresh", async move {
        sqlx::query_scalar(
            "SELECT count(*) FILTER (WHERE analyze_if_grown(t, 1000))
             FROM unnest(ARRAY['resources', 'resource_changes', 'resource_events', 'resource_deps',
                               'work_queue', 'work_outbox']::regclass[]) AS t",
        )
        .fetch_one(pool)
        .await
        .map_err(Into::into)
    })
    .await
}
