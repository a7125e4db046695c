//! Periodic resync: which kind versions have it on, and queueing the due
//! resources of one slice.

use super::measured::measured;
use sqlx::PgPool;

use super::{StoreResult, small_version};

/// A kind version whose resync is on.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ResyncPolicy {
    /// Kind.
    pub kind: String,
    /// Kind version.
    pub kind_version: i32,
    /// Seconds between resyncs of each resource.
    pub resync_interval_secs: i32,
    /// Whether a resync also re-runs the composer.
    pub resync_recomposes: bool,
}

/// The kind versions whose resync is on (a read of the small kind config
/// table: with none, the resync duty does nothing else).
pub async fn enabled(pool: &PgPool) -> StoreResult<Vec<ResyncPolicy>> {
    measured("resync.enabled", async move {
        sqlx::query_as(
            "SELECT kind, kind_version::int4 AS kind_version, resync_interval_secs, resync_recomposes
             FROM kind_config WHERE resync_interval_secs > 0 ORDER BY kind, kind_version",
        )
        .fetch_all(pool)
        .await
        .map_err(Into::into)
    })
    .await
}

/// How many resources the kind has (all versions): sizes the walk's
/// slices. A count over the kind's key, taken once a minute per kind
/// version while its resync is on.
pub async fn size(pool: &PgPool, kind: &str) -> StoreResult<i64> {
    measured("resync.size", async move {
        sqlx::query_scalar("SELECT count(*) FROM resources WHERE kind = $1")
            .bind(kind)
            .fetch_one(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// What one slice of a resync walk did.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ResyncStep {
    /// Where the next slice starts; `None` when the walk reached the end.
    pub next_after: Option<String>,
    /// Resources of the kind looked at (0 when another process holds the
    /// kind's walk right now).
    pub scanned: i32,
    /// Resyncs queued.
    pub queued: i32,
}

/// Queues the due resyncs among the next `scan` resources of the policy's
/// kind after the name `after`.
pub async fn queue(pool: &PgPool, policy: &ResyncPolicy, after: Option<&str>, scan: i32) -> StoreResult<ResyncStep> {
    measured("resync.queue", async move {
        sqlx::query_as("SELECT * FROM queue_resyncs($1, $2, $3, $4, $5, $6)")
            .bind(&policy.kind)
            .bind(small_version(policy.kind_version))
            .bind(after)
            .bind(scan)
            .bind(f64::from(policy.resync_interval_secs))
            .bind(policy.resync_recomposes)
            .fetch_one(pool)
            .await
            .map_err(Into::into)
    })
    .await
}
