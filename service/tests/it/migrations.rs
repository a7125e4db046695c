//! The migration runner: function files applied when their content changes,
//! and databases of another migration history (the folded pre-release one)
//! refused with a message that says what to do.

use converge_service::db::migrate::{self, FUNCTION_FILES, MIGRATOR, MigrationError};
use converge_service::testing::empty_database_url;
use sqlx::PgPool;

/// The table sqlx keeps its bookkeeping in, as sqlx creates it.
const SQLX_MIGRATIONS: &str = "CREATE TABLE _sqlx_migrations (
    version BIGINT PRIMARY KEY,
    description TEXT NOT NULL,
    installed_on TIMESTAMPTZ NOT NULL DEFAULT now(),
    success BOOLEAN NOT NULL,
    checksum BYTEA NOT NULL,
    execution_time BIGINT NOT NULL
)";

async fn empty_pool() -> anyhow::Result<PgPool> {
    Ok(PgPool::connect(&empty_database_url().await?).await?)
}

fn assert_refused(outcome: Result<migrate::MigrationReport, MigrationError>, version: i64) {
    let err = match outcome {
        Err(err @ MigrationError::ForeignHistory { .. }) => err,
        other => panic!("expected ForeignHistory, got {other:?}"),
    };
    let message = err.to_string();
    assert!(!message.contains('\n'), "one line: {message}");
    assert!(message.contains(&format!("migration {version}")), "{message}");
    assert!(message.contains("remove the data directory"), "{message}");
    assert!(message.contains("DATABASE_URL"), "{message}");
}

#[tokio::test]
async fn a_database_of_the_old_forty_migration_history_is_refused() -> anyhow::Result<()> {
    let pool = empty_pool().await?;
    sqlx::query(SQLX_MIGRATIONS).execute(&pool).await?;
    // What the old history left behind: versions 1-40 with checksums of files
    // this build does not have.
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         SELECT v, 'old ' || v, true, sha384(('old history ' || v)::bytea), 1
         FROM generate_series(1, 40) AS v",
    )
    .execute(&pool)
    .await?;
    // The first applied version already differs from this build's.
    assert_refused(migrate::run(&pool).await, 1);
    // Nothing was applied.
    let tables: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE tablename = 'resources'")
        .fetch_one(&pool)
        .await?;
    assert_eq!(tables, 0);
    Ok(())
}

#[tokio::test]
async fn an_applied_version_this_build_lacks_is_refused() -> anyhow::Result<()> {
    let pool = empty_pool().await?;
    migrate::run(&pool).await?;
    // A migrated database that has also seen version 40 of the old history.
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (40, 'cheaper resource statistics', true, sha384('foreign'::bytea), 1)",
    )
    .execute(&pool)
    .await?;
    assert_refused(migrate::run(&pool).await, 40);
    Ok(())
}

#[tokio::test]
async fn function_files_are_applied_once_and_again_when_they_change() -> anyhow::Result<()> {
    let pool = empty_pool().await?;
    let first = migrate::run(&pool).await?;
    assert_eq!(first.applied, MIGRATOR.iter().count());
    assert_eq!(first.functions_applied, FUNCTION_FILES.len());
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM schema_functions")
        .fetch_one(&pool)
        .await?;
    assert_eq!(usize::try_from(recorded)?, FUNCTION_FILES.len());

    let again = migrate::run(&pool).await?;
    assert_eq!((again.applied, again.functions_applied), (0, 0));

    // A file whose recorded hash differs (as after an edit) is applied again,
    // and its hash brought up to date.
    let (file, _) = FUNCTION_FILES[0];
    sqlx::query("UPDATE schema_functions SET sha256 = '\\x00' WHERE file = $1")
        .bind(file)
        .execute(&pool)
        .await?;
    let changed = migrate::run(&pool).await?;
    assert_eq!((changed.applied, changed.functions_applied), (0, 1));
    let after = migrate::run(&pool).await?;
    assert_eq!(after.functions_applied, 0);
    Ok(())
}

#[test]
fn every_function_file_is_embedded_once() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations/functions");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .expect("migrations/functions")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".sql"))
        .collect();
    on_disk.sort();
    let mut embedded: Vec<String> = FUNCTION_FILES.iter().map(|(f, _)| (*f).to_owned()).collect();
    embedded.sort();
    assert_eq!(
        on_disk, embedded,
        "FUNCTION_FILES in db/migrate.rs must list every file"
    );
}
