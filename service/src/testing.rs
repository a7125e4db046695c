//! Test support: real PostgreSQL for every test, never a mock.
//!
//! Each test process gets one private cluster (the same launcher as the
//! embedded default, tuned for speed), a template database migrated once, and a
//! fresh database per test cloned from the template (tens of milliseconds).
//! The cluster stops when the test process exits, however it exits.

use std::path::PathBuf;
use std::sync::OnceLock;

use sqlx::postgres::{PgConnectOptions, PgPool};
use sqlx::{ConnectOptions, Connection};

use crate::db::embedded::{EmbeddedOptions, EmbeddedPostgres};
use crate::db::{migrate, pool_options, quote_ident};

const TEMPLATE: &str = "converge_template";

/// Why the test database could not be provided.
#[derive(Debug, thiserror::Error)]
#[error("test database setup failed: {0}")]
pub struct TestSupportError(String);

fn fail(context: &str) -> impl FnOnce(&dyn std::fmt::Display) -> TestSupportError + '_ {
    move |e| TestSupportError(format!("{context}: {e}"))
}

/// A fresh, migrated database of its own for one test.
#[derive(Debug, Clone)]
pub struct TestDatabase {
    pool: PgPool,
    name: String,
}

impl TestDatabase {
    /// Creates a new database from the migrated template.
    pub async fn new() -> Result<Self, TestSupportError> {
        let cluster = cluster()?;
        ensure_template(cluster).await?;
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        let mut admin = cluster
            .connect_options("postgres")
            .connect()
            .await
            .map_err(|e| fail("connecting to the test cluster")(&e))?;
        let statement = format!("CREATE DATABASE {} TEMPLATE {TEMPLATE}", quote_ident(&name));
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&mut admin)
            .await
            .map_err(|e| fail("creating the test database")(&e))?;
        let _ = admin.close().await;
        let pool = pool_options(8)
            .min_connections(0)
            .connect_with(cluster.connect_options(&name))
            .await
            .map_err(|e| fail("connecting to the test database")(&e))?;
        Ok(Self { pool, name })
    }

    /// A pool on this test's database.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The database name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A `postgres://` URL of this database (TCP on loopback), e.g. for `DATABASE_URL`.
    pub fn url(&self) -> Result<String, TestSupportError> {
        Ok(cluster()?.tcp_url(&self.name))
    }

    /// Connection options for this database over the private socket.
    pub fn connect_options(&self) -> Result<PgConnectOptions, TestSupportError> {
        Ok(cluster()?.connect_options(&self.name))
    }
}

/// Creates an empty, unmigrated database and returns its URL (for tests of
/// the migration runner itself).
pub async fn empty_database_url() -> Result<String, TestSupportError> {
    let cluster = cluster()?;
    let name = format!("e_{}", uuid::Uuid::new_v4().simple());
    crate::db::ensure_database(&cluster.connect_options("postgres"), &name)
        .await
        .map_err(|e| fail("creating an empty database")(&e))?;
    Ok(cluster.tcp_url(&name))
}

fn cluster() -> Result<&'static EmbeddedPostgres, TestSupportError> {
    static CLUSTER: OnceLock<Result<EmbeddedPostgres, String>> = OnceLock::new();
    CLUSTER
        .get_or_init(start_cluster)
        .as_ref()
        .map_err(|e| TestSupportError(e.clone()))
}

fn start_cluster() -> Result<EmbeddedPostgres, String> {
    let root = std::env::temp_dir().join("converge-test");
    remove_abandoned_clusters(&root);
    let dir = root.join(format!("{}-{}", std::process::id(), uuid::Uuid::new_v4().simple()));
    let options = EmbeddedOptions {
        dir,
        ephemeral: true,
        port: None,
        settings: vec![("max_connections".into(), "300".into())],
    };
    EmbeddedPostgres::start(&options).map_err(|e| e.to_string())
}

/// Clusters of test processes that have exited are stopped already (their
/// supervisor saw the pipe close); their directories are just litter.
fn remove_abandoned_clusters(root: &PathBuf) {
    let Ok(entries) = std::fs::read_dir(root) else { return };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
        let server_running = std::fs::metadata(entry.path().join("pgdata/postmaster.pid")).is_ok();
        if !alive && !server_running {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

async fn ensure_template(cluster: &EmbeddedPostgres) -> Result<(), TestSupportError> {
    static READY: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    READY
        .get_or_try_init(|| async {
            crate::db::ensure_database(&cluster.connect_options("postgres"), TEMPLATE)
                .await
                .map_err(|e| fail("creating the template database")(&e))?;
            // A dedicated pool, closed before any clone: CREATE DATABASE ... TEMPLATE
            // refuses while anyone is connected to the template.
            let pool = pool_options(1)
                .connect_with(cluster.connect_options(TEMPLATE))
                .await
                .map_err(|e| fail("connecting to the template database")(&e))?;
            let migrated = migrate::run(&pool).await;
            pool.close().await;
            migrated
                .map(|_| ())
                .map_err(|e| fail("migrating the template database")(&e))
        })
        .await
        .map(|_| ())
}
