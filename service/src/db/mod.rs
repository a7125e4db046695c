//! Database access: the connection pool, the embedded PostgreSQL default and
//! the migration runner.

pub mod embedded;
pub mod migrate;
pub mod notify;

use std::path::PathBuf;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Connection};

use self::embedded::{EmbeddedError, EmbeddedOptions, EmbeddedPostgres};

/// Name of the application database inside an embedded cluster.
pub const EMBEDDED_DATABASE: &str = "converge";

/// Where the database is.
#[derive(Debug, Clone)]
pub enum DatabaseTarget {
    /// An existing PostgreSQL server (`DATABASE_URL`).
    Url(String),
    /// A private cluster in this directory, started and stopped with the process.
    Embedded(PathBuf),
}

/// Why the database could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    /// `DATABASE_URL` is not a PostgreSQL URL.
    #[error("DATABASE_URL is not a valid PostgreSQL URL ({0})")]
    InvalidUrl(String),
    /// The embedded cluster failed.
    #[error(transparent)]
    Embedded(#[from] EmbeddedError),
    /// Connecting or a setup statement failed.
    #[error("cannot reach PostgreSQL: {0}")]
    Connect(#[source] sqlx::Error),
    /// The embedded launcher's worker thread died.
    #[error("the embedded PostgreSQL launcher failed: {0}")]
    Launcher(String),
}

/// An open database: the pool and, for the embedded default, the server that
/// must outlive it.
#[derive(Debug)]
pub struct Database {
    pool: PgPool,
    embedded: Option<EmbeddedPostgres>,
}

impl Database {
    /// Opens `target` with a pool of at most `max_connections`.
    pub async fn open(target: &DatabaseTarget, max_connections: u32) -> Result<Self, DatabaseError> {
        let (options, embedded) = match target {
            DatabaseTarget::Url(url) => {
                let options = parse_url(url)?;
                (options, None)
            }
            DatabaseTarget::Embedded(dir) => {
                let launch = EmbeddedOptions::durable(dir.clone());
                let server = tokio::task::spawn_blocking(move || EmbeddedPostgres::start(&launch))
                    .await
                    .map_err(|e| DatabaseError::Launcher(e.to_string()))??;
                ensure_database(&server.connect_options("postgres"), EMBEDDED_DATABASE).await?;
                (server.connect_options(EMBEDDED_DATABASE), Some(server))
            }
        };
        let pool = pool_options(max_connections)
            .connect_with(options.application_name("converge"))
            .await
            .map_err(DatabaseError::Connect)?;
        Ok(Self { pool, embedded })
    }

    /// The connection pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The embedded server, when this database is the embedded default.
    pub fn embedded(&self) -> Option<&EmbeddedPostgres> {
        self.embedded.as_ref()
    }

    /// Whether the embedded server (if any) has exited; always `false` for an
    /// external database.
    pub fn embedded_has_exited(&mut self) -> bool {
        self.embedded.as_mut().is_some_and(EmbeddedPostgres::has_exited)
    }

    /// Closes the pool, then stops the embedded server (if any) and waits for it.
    pub async fn close(self) {
        self.pool.close().await;
        if let Some(server) = self.embedded {
            let stopped = tokio::task::spawn_blocking(move || server.stop(Duration::from_secs(30))).await;
            match stopped {
                Ok(Ok(())) => tracing::info!("embedded PostgreSQL stopped"),
                Ok(Err(e)) => tracing::warn!(error = %e, "embedded PostgreSQL did not stop cleanly"),
                Err(e) => tracing::warn!(error = %e, "stopping embedded PostgreSQL failed"),
            }
        }
    }
}

/// Parses a `postgres://` or `postgresql://` URL. The message never echoes
/// the URL, which may carry a password.
pub fn parse_url(url: &str) -> Result<PgConnectOptions, DatabaseError> {
    let scheme = url.split_once("://").map(|(scheme, _)| scheme);
    if !matches!(scheme, Some("postgres" | "postgresql")) {
        return Err(DatabaseError::InvalidUrl(
            "it must start with postgres:// or postgresql://".into(),
        ));
    }
    url.parse()
        .map_err(|e: sqlx::Error| DatabaseError::InvalidUrl(e.to_string()))
}

/// A pooled connection idle at least this long is pinged before it is handed
/// out; one in steady use is not.
const PING_WHEN_IDLE_FOR: Duration = Duration::from_secs(1);

/// Pool settings shared by the server and the test harness.
///
/// By default the pool pings every connection before handing it out: one
/// more round trip for every statement run on the pool, and the idle path
/// (apply, claim, append, drain, watch read) is a chain of such statements.
/// The pool also pings each connection when it is returned, so one that
/// broke while in use is closed then; the ping on acquire is kept only for
/// connections that sat idle and may have been cut off meanwhile (a server
/// restart, a proxy's idle timeout). A connection cut off less than
/// [`PING_WHEN_IDLE_FOR`] before its next use fails that one call, which the
/// API answers as UNAVAILABLE with a retry delay and every loop retries.
pub fn pool_options(max_connections: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .min_connections(1)
        .acquire_timeout(Duration::from_secs(10))
        .idle_timeout(Some(Duration::from_secs(300)))
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PING_WHEN_IDLE_FOR {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
}

/// Creates `database` unless it exists (connecting with `admin`).
pub async fn ensure_database(admin: &PgConnectOptions, database: &str) -> Result<(), DatabaseError> {
    let mut conn = admin.connect().await.map_err(DatabaseError::Connect)?;
    let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(database)
        .fetch_one(&mut conn)
        .await
        .map_err(DatabaseError::Connect)?;
    if !exists {
        let statement = format!("CREATE DATABASE {}", quote_ident(database));
        match sqlx::query(sqlx::AssertSqlSafe(statement)).execute(&mut conn).await {
            Ok(_) => {}
            // A concurrent creator won the race: the database exists, which is all we need.
            Err(e) if crate::store::error::is_duplicate_database(&e) => {}
            Err(e) => return Err(DatabaseError::Connect(e)),
        }
    }
    conn.close().await.map_err(DatabaseError::Connect)
}

/// Quotes an SQL identifier.
pub fn quote_ident(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_postgres_urls_are_accepted() {
        assert!(parse_url("postgres://u:p@localhost:5432/db").is_ok());
        assert!(parse_url("postgresql://localhost/db").is_ok());
        let err = parse_url("mysql://u:secret@x/db")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("postgres://"), "{err}");
        assert!(!err.contains("secret"), "never echo credentials: {err}");
    }

    #[tokio::test]
    async fn a_connection_cut_off_while_idle_is_replaced_before_use() -> Result<(), Box<dyn std::error::Error>> {
        let db = crate::testing::TestDatabase::new().await?;
        let pool = pool_options(1).connect_with(db.connect_options()?).await?;
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&pool).await?;
        let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .fetch_one(db.pool())
            .await?;
        assert!(terminated);
        // Idle past the threshold: the pool pings it, finds it gone and
        // opens a new one, so the caller never sees the cut.
        tokio::time::sleep(PING_WHEN_IDLE_FOR + Duration::from_millis(200)).await;
        let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&pool).await?;
        assert_eq!(one, 1);
        Ok(())
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("converge"), "\"converge\"");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
