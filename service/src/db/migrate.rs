//! Schema migrations, embedded in the binary from `migrations/`.
//!
//! Two kinds of files (see `migrations/README.md`):
//!
//! * Versioned migrations, `migrations/NNNN_*.sql`, applied once each and in
//!   order by sqlx: tables, columns, constraints, indexes, sequences, seed
//!   rows, and the few functions a table needs when it is created.
//! * Repeatable function definitions, `migrations/functions/*.sql` (sqlx
//!   ignores the subdirectory): every other function and every trigger, as
//!   `CREATE OR REPLACE`. After the versioned migrations, each file whose
//!   SHA-256 differs from the one recorded in `schema_functions` is applied
//!   again, and its hash updated, in one transaction.
//!
//! `CREATE OR REPLACE` can only add or replace. Dropping a function or a
//! trigger, or changing a function's signature or return type, needs a
//! versioned migration that drops the old one (the function file then
//! creates the new one).
//!
//! Several pods start at once in production, so the runner holds a session
//! advisory lock while it works: one process applies, the others wait on the
//! lock and then find nothing left to do.

use sha2::{Digest, Sha256};
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::postgres::PgPool;
use sqlx::{Connection, PgConnection};

/// The versioned migrations of this build.
pub static MIGRATOR: Migrator = sqlx::migrate!("../migrations");

/// The repeatable function files of this build, in the order they are
/// applied (a SQL-language function's body is checked when it is created, so
/// a file comes after the files whose functions it calls).
pub static FUNCTION_FILES: [(&str, &str); 22] = [
    ("cluster.sql", include_str!("../../../migrations/functions/cluster.sql")),
    ("notify.sql", include_str!("../../../migrations/functions/notify.sql")),
    ("jsonb.sql", include_str!("../../../migrations/functions/jsonb.sql")),
    ("kinds.sql", include_str!("../../../migrations/functions/kinds.sql")),
    ("changes.sql", include_str!("../../../migrations/functions/changes.sql")),
    ("events.sql", include_str!("../../../migrations/functions/events.sql")),
    (
        "conditions.sql",
        include_str!("../../../migrations/functions/conditions.sql"),
    ),
    (
        "statistics.sql",
        include_str!("../../../migrations/functions/statistics.sql"),
    ),
    (
        "schedule.sql",
        include_str!("../../../migrations/functions/schedule.sql"),
    ),
    (
        "provider_configs.sql",
        include_str!("../../../migrations/functions/provider_configs.sql"),
    ),
    ("claim.sql", include_str!("../../../migrations/functions/claim.sql")),
    (
        "reactors.sql",
        include_str!("../../../migrations/functions/reactors.sql"),
    ),
    ("fence.sql", include_str!("../../../migrations/functions/fence.sql")),
    ("drain.sql", include_str!("../../../migrations/functions/drain.sql")),
    (
        "composition.sql",
        include_str!("../../../migrations/functions/composition.sql"),
    ),
    ("cascade.sql", include_str!("../../../migrations/functions/cascade.sql")),
    (
        "deletion.sql",
        include_str!("../../../migrations/functions/deletion.sql"),
    ),
    ("reaper.sql", include_str!("../../../migrations/functions/reaper.sql")),
    (
        "revisions.sql",
        include_str!("../../../migrations/functions/revisions.sql"),
    ),
    (
        "operations.sql",
        include_str!("../../../migrations/functions/operations.sql"),
    ),
    ("resync.sql", include_str!("../../../migrations/functions/resync.sql")),
    ("admin.sql", include_str!("../../../migrations/functions/admin.sql")),
];

/// Session advisory lock key serialising migration runs ("converge" in ASCII).
const MIGRATION_LOCK_KEY: i64 = 0x636f_6e76_6572_6765;

/// What a migration run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrationReport {
    /// Versioned migrations this run applied.
    pub applied: usize,
    /// Versioned migrations the database now has.
    pub total: usize,
    /// Function files this run (re)applied because their content changed.
    pub functions_applied: usize,
}

/// Why the schema could not be brought up to date.
#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    /// The database was migrated by a history this build does not contain,
    /// such as the pre-release one that was folded into the baseline.
    #[error(
        "the database was created by a pre-release or foreign migration history ({detail}); \
         remove the data directory, or point DATABASE_URL at a fresh database"
    )]
    ForeignHistory {
        /// Which applied migration does not match this build.
        detail: String,
    },
    /// A versioned migration failed.
    #[error(transparent)]
    Migrate(#[from] MigrateError),
    /// A function file failed to apply.
    #[error("applying migrations/functions/{file} failed: {source}")]
    Function {
        /// The file.
        file: &'static str,
        /// The cause.
        source: sqlx::Error,
    },
    /// Any other statement of the runner failed.
    #[error(transparent)]
    Sql(#[from] sqlx::Error),
}

/// Applies every pending migration and every changed function file,
/// serialised with concurrent runners.
pub async fn run(pool: &PgPool) -> Result<MigrationReport, MigrationError> {
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

async fn apply_locked(conn: &mut PgConnection) -> Result<MigrationReport, MigrationError> {
    refuse_foreign_history(conn).await?;
    let before = applied_count(conn).await?;
    MIGRATOR.run(&mut *conn).await?;
    let after = applied_count(conn).await?;
    let functions_applied = apply_function_files(conn).await?;
    Ok(MigrationReport {
        applied: after.saturating_sub(before),
        total: after,
        functions_applied,
    })
}

/// Refuses a database whose applied migrations are not a prefix of this
/// build's: an applied version this build lacks, or one whose checksum
/// differs (what a database of the old 40-migration history looks like).
async fn refuse_foreign_history(conn: &mut PgConnection) -> Result<(), MigrationError> {
    if !bookkeeping_exists(conn).await? {
        return Ok(());
    }
    let applied: Vec<(i64, Vec<u8>)> =
        sqlx::query_as("SELECT version, checksum FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&mut *conn)
            .await?;
    for (version, checksum) in applied {
        let detail = match MIGRATOR.iter().find(|m| m.version == version) {
            None => format!("applied migration {version} is not part of this build"),
            Some(ours) if *ours.checksum != *checksum => {
                format!("applied migration {version} differs from this build's")
            }
            Some(_) => continue,
        };
        return Err(MigrationError::ForeignHistory { detail });
    }
    Ok(())
}

/// Applies each function file whose hash differs from the recorded one;
/// returns how many it applied.
async fn apply_function_files(conn: &mut PgConnection) -> Result<usize, MigrationError> {
    let mut applied = 0;
    for (file, sql) in &FUNCTION_FILES {
        let hash = Sha256::digest(sql.as_bytes()).to_vec();
        let recorded: Option<Vec<u8>> = sqlx::query_scalar("SELECT sha256 FROM schema_functions WHERE file = $1")
            .bind(*file)
            .fetch_optional(&mut *conn)
            .await?;
        if recorded.as_deref() == Some(hash.as_slice()) {
            continue;
        }
        let fail = |source| MigrationError::Function { file, source };
        let mut tx = conn.begin().await?;
        sqlx::raw_sql(*sql).execute(&mut *tx).await.map_err(fail)?;
        sqlx::query(
            "INSERT INTO schema_functions (file, sha256) VALUES ($1, $2)
             ON CONFLICT (file) DO UPDATE SET sha256 = EXCLUDED.sha256, applied_at = now()",
        )
        .bind(*file)
        .bind(&hash)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        applied += 1;
    }
    Ok(applied)
}

async fn bookkeeping_exists(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(&mut *conn)
        .await
}

async fn applied_count(conn: &mut PgConnection) -> Result<usize, MigrationError> {
    if !bookkeeping_exists(conn).await? {
        return Ok(0);
    }
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(&mut *conn)
        .await?;
    Ok(usize::try_from(count).unwrap_or(0))
}
