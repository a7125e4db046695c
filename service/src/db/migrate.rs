//! Schema migrations, embedded in the binary from `migrations/`.
//!
//! Several pods start at once in production, so the runner holds a session
//! advisory lock while it works: one process applies, the others wait on the
//! lock and then find nothing left to do.

use sqlx::migrate::{MigrateError, Migrator};
use sqlx::postgres::PgPool;

/// The migrations of this build.
pub static MIGRATOR: Migrator = sqlx::migrate!("../migrations");

/// Session advisory lock key serialising migration runs ("converge" in ASCII).
const MIGRATION_LOCK_KEY: i64 = 0x636f_6e76_6572_6765;

/// What a migration run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrationReport {
    /// Migrations this run applied.
    pub applied: usize,
    /// Migrations the database now has.
    pub total: usize,
}

/// Applies every pending migration, serialised with concurrent runners.
pub async fn run(pool: &PgPool) -> Result<MigrationReport, MigrateError> {
    let mut conn = pool.acquire().await?;
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(MIGRATION_LOCK_KEY)
        .execute(&mut *conn)
        .await?;
    let outcome = apply_locked(&mut conn).await;
    // Unlock even when applying failed; a broken connection drops the lock anyway.
    let unlocked = sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(MIGRATION_LOCK_KEY)
        .execute(&mut *conn)
        .await;
    let report = outcome?;
    unlocked?;
    Ok(report)
}

async fn apply_locked(conn: &mut sqlx::PgConnection) -> Result<MigrationReport, MigrateError> {
    let before = applied_count(conn).await?;
    MIGRATOR.run(&mut *conn).await?;
    let after = applied_count(conn).await?;
    Ok(MigrationReport {
        applied: after.saturating_sub(before),
        total: after,
    })
}

async fn applied_count(conn: &mut sqlx::PgConnection) -> Result<usize, MigrateError> {
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(&mut *conn)
        .await?;
    if !exists {
        return Ok(0);
    }
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(&mut *conn)
        .await?;
    Ok(usize::try_from(count).unwrap_or(0))
}
