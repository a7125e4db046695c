//! `cluster_members`: the registry of running pods and their shard ranges.

use super::measured::measured;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use sqlx::types::Json;

use super::StoreResult;
use crate::domain::shard::{ConnectedWorker, MemberLoad, ShardRange};

/// How a member describes itself when it registers.
#[derive(Debug, Clone)]
pub struct MemberRegistration {
    /// Unique id of this process ("host-pid-random").
    pub member_id: String,
    /// `all`, `control` or `broker`.
    pub role: String,
    /// Build version.
    pub version: String,
    /// Host name.
    pub hostname: String,
    /// Process id.
    pub pid: i32,
    /// Address the gRPC server listens on.
    pub listen_addr: String,
    /// Stable identity across restarts, if any (see [`take_over`]).
    pub identity: Option<String>,
    /// The static, non-secret settings the member booted with (a JSON
    /// object; never a database URL or a key).
    pub config: serde_json::Value,
}

/// One row of `cluster_members`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MemberRow {
    /// Unique id of the process.
    pub member_id: String,
    /// `all`, `control` or `broker`.
    pub role: String,
    /// `serving` or `draining`.
    pub state: String,
    /// Build version.
    pub version: String,
    /// Host name.
    pub hostname: String,
    /// Process id.
    pub pid: i32,
    /// gRPC listen address.
    pub listen_addr: String,
    /// First shard of the member's range.
    pub shard_lo: Option<i16>,
    /// Last shard of the member's range (inclusive).
    pub shard_hi: Option<i16>,
    /// Tasks the member holds leases for.
    pub in_flight: i32,
    /// Worker streams connected to the member.
    pub connected_workers: i32,
    /// The member's counters since start.
    pub counters: Json<BTreeMap<String, i64>>,
    /// The workers connected to the member as of its last heartbeat (capped;
    /// `connected_workers` is the true count).
    pub workers: Json<Vec<ConnectedWorker>>,
    /// The static settings the member booted with.
    pub config: Json<serde_json::Value>,
    /// When the process registered.
    pub started_at: DateTime<Utc>,
    /// Last heartbeat (database clock).
    pub last_heartbeat: DateTime<Utc>,
    /// Whether the heartbeat is within the liveness window.
    pub live: bool,
}

/// Inserts or refreshes this member's row (the heartbeat) with its load and
/// its connected workers.
pub async fn heartbeat(pool: &PgPool, member: &MemberRegistration, load: &MemberLoad) -> StoreResult<()> {
    measured("cluster.heartbeat", async move {
        sqlx::query(
            "INSERT INTO cluster_members (member_id, role, version, hostname, pid, listen_addr,
                                          in_flight, connected_workers, counters, identity, workers, config)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
             ON CONFLICT (member_id) DO UPDATE
                 SET last_heartbeat = now(), in_flight = EXCLUDED.in_flight,
                     connected_workers = EXCLUDED.connected_workers, counters = EXCLUDED.counters,
                     workers = EXCLUDED.workers",
        )
        .bind(&member.member_id)
        .bind(&member.role)
        .bind(&member.version)
        .bind(&member.hostname)
        .bind(member.pid)
        .bind(&member.listen_addr)
        .bind(load.in_flight)
        .bind(load.connected_workers)
        .bind(Json(&load.counters))
        .bind(&member.identity)
        .bind(Json(&load.workers))
        .bind(Json(&member.config))
        .execute(pool)
        .await?;
        Ok(())
    })
    .await
}

/// Removes the registered members holding `identity` other than
/// `member_id`: their successor is joining, so they are gone. Their leases
/// stay, for workers that reconnect to resume them (the successor frees the
/// rest after a grace, ADR 37). Returns the removed member ids.
pub async fn take_over(pool: &PgPool, identity: &str, member_id: &str) -> StoreResult<Vec<String>> {
    measured("cluster.take_over", async move {
        sqlx::query_scalar("DELETE FROM cluster_members WHERE identity = $1 AND member_id <> $2 RETURNING member_id")
            .bind(identity)
            .bind(member_id)
            .fetch_all(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Computes this member's shard range from live membership and records it.
pub async fn assign_shards(pool: &PgPool, member_id: &str, liveness_secs: i32) -> StoreResult<Option<ShardRange>> {
    measured("cluster.assign_shards", async move {
        let range: Option<(Option<i16>, Option<i16>)> = sqlx::query_as(
            "UPDATE cluster_members m SET shard_lo = a.shard_lo, shard_hi = a.shard_hi
             FROM (SELECT 1) AS one LEFT JOIN LATERAL assign_member_shards($1, $2) a ON true
             WHERE m.member_id = $1
             RETURNING a.shard_lo, a.shard_hi",
        )
        .bind(member_id)
        .bind(liveness_secs)
        .fetch_optional(pool)
        .await?;
        let range = range.and_then(|(lo, hi)| lo.zip(hi));
        Ok(range.map(|(lo, hi)| ShardRange { lo, hi }))
    })
    .await
}

/// Marks this member as draining: it leaves the shard tiling at once.
pub async fn mark_draining(pool: &PgPool, member_id: &str) -> StoreResult<()> {
    measured("cluster.mark_draining", async move {
        sqlx::query(
            "UPDATE cluster_members SET state = 'draining', shard_lo = NULL, shard_hi = NULL WHERE member_id = $1",
        )
        .bind(member_id)
        .execute(pool)
        .await?;
        Ok(())
    })
    .await
}

/// Removes this member's row (graceful leave).
pub async fn leave(pool: &PgPool, member_id: &str) -> StoreResult<()> {
    measured("cluster.leave", async move {
        sqlx::query("DELETE FROM cluster_members WHERE member_id = $1")
            .bind(member_id)
            .execute(pool)
            .await?;
        Ok(())
    })
    .await
}

/// Deletes members whose last heartbeat is older than `ttl_secs` (crashed pods).
pub async fn delete_stale(pool: &PgPool, ttl_secs: i32) -> StoreResult<u64> {
    measured("cluster.delete_stale", async move {
        let done = sqlx::query("DELETE FROM cluster_members WHERE last_heartbeat < now() - make_interval(secs => $1)")
            .bind(ttl_secs)
            .execute(pool)
            .await?;
        Ok(done.rows_affected())
    })
    .await
}

/// Every registered member, ordered by id, with liveness judged by the database clock.
pub async fn list(pool: &PgPool, liveness_secs: i32) -> StoreResult<Vec<MemberRow>> {
    measured("cluster.list", async move {
        sqlx::query_as(
            "SELECT member_id, role, state, version, hostname, pid, listen_addr, shard_lo, shard_hi,
                    in_flight, connected_workers, counters, workers, config, started_at, last_heartbeat,
                    last_heartbeat > now() - make_interval(secs => $1) AS live
             FROM cluster_members ORDER BY member_id",
        )
        .bind(liveness_secs)
        .fetch_all(pool)
        .await
        .map_err(Into::into)
    })
    .await
}

/// The database's shard modulus (checked against the service's constant at boot).
pub async fn shard_count(pool: &PgPool) -> StoreResult<i32> {
    measured("cluster.shard_count", async move {
        sqlx::query_scalar("SELECT shard_count()")
            .fetch_one(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// The server version string and the newest applied migration.
pub async fn database_identity(pool: &PgPool) -> StoreResult<(String, i64)> {
    measured("cluster.database_identity", async move {
        sqlx::query_as(
            "SELECT current_setting('server_version'),
                    COALESCE((SELECT max(version) FROM _sqlx_migrations WHERE success), 0)",
        )
        .fetch_one(pool)
        .await
        .map_err(Into::into)
    })
    .await
}
