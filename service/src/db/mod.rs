//! Database access: the connection pool, the embedded PostgreSQL default and
//! the migration runner.

pub mod auth;
pub mod embedded;
pub mod migrate;
pub mod notify;
pub mod probe;
pub mod replica;

use std::path::PathBuf;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Connection};

use self::embedded::{EmbeddedError, EmbeddedOptions, EmbeddedPostgres};
use self::replica::ReadPool;

/// Name of the application database inside an embedded cluster.
pub const EMBEDDED_DATABASE: &str = "converge";

/// `application_name` of the primary pool's sessions.
pub const APPLICATION_NAME: &str = "converge";

/// `application_name` of the read replica pool's sessions.
pub const READ_APPLICATION_NAME: &str = "converge-read";

/// Longest a fast shutdown of the embedded server is waited for by
/// [`Database::close`] before an immediate one.
const EMBEDDED_STOP_LIMIT: Duration = Duration::from_secs(30);

/// Longest [`Database::close_by`] waits for the pools' connections to be
/// returned.
const POOL_CLOSE_LIMIT: Duration = Duration::from_secs(2);

/// Least time [`Database::close_by`] gives the embedded server's fast
/// shutdown, even past its deadline.
const EMBEDDED_STOP_FLOOR: Duration = Duration::from_secs(1);

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
    /// `DATABASE_READ_URL` is not a PostgreSQL URL.
    #[error("DATABASE_READ_URL is not a valid PostgreSQL URL ({0})")]
    InvalidReadUrl(String),
    /// The embedded cluster failed.
    #[error(transparent)]
    Embedded(#[from] EmbeddedError),
    /// Connecting or a setup statement failed.
    #[error("cannot reach PostgreSQL: {0}")]
    Connect(#[source] sqlx::Error),
    /// No password for the connections (DB_IAM_AUTH, DATABASE_PASSWORD_FILE).
    #[error(transparent)]
    Auth(#[from] auth::AuthError),
    /// The embedded launcher's worker thread died.
    #[error("the embedded PostgreSQL launcher failed: {0}")]
    Launcher(String),
}

/// An open database: the pool, the reads routed to a replica (when one is
/// configured) and, for the embedded default, the server that must outlive
/// them.
#[derive(Debug)]
pub struct Database {
    pool: PgPool,
    reads: ReadPool,
    embedded: Option<EmbeddedPostgres>,
    /// Keeps the pools' passwords fresh (DB_IAM_AUTH, DATABASE_PASSWORD_FILE).
    refresher: Option<(tokio::sync::watch::Sender<bool>, tokio::task::JoinHandle<()>)>,
}

impl Database {
    /// Opens `target` with a pool of at most `max_connections`.
    pub async fn open(target: &DatabaseTarget, max_connections: u32) -> Result<Self, DatabaseError> {
        Self::open_with_replica(target, None, max_connections).await
    }

    /// Opens `target`, and a second pool on the replica at `read_url` for
    /// stale-tolerant reads, each of at most `max_connections`. The replica
    /// is connected to lazily: one that is down at boot delays nothing, its
    /// reads run on the primary until it answers.
    pub async fn open_with_replica(
        target: &DatabaseTarget,
        read_url: Option<&str>,
        max_connections: u32,
    ) -> Result<Self, DatabaseError> {
        Self::open_with(target, read_url, max_connections, &auth::DatabaseAuth::Url).await
    }

    /// Like [`open_with_replica`](Self::open_with_replica), authenticating
    /// as `auth` says to an external database (and its replica): the pools'
    /// passwords are then renewed every [`auth::REFRESH_INTERVAL`].
    pub async fn open_with(
        target: &DatabaseTarget,
        read_url: Option<&str>,
        max_connections: u32,
        auth: &auth::DatabaseAuth,
    ) -> Result<Self, DatabaseError> {
        // Checked first: a bad URL fails the boot before anything starts.
        let read_options = read_url
            .map(|url| parse_url(url).map_err(|e| DatabaseError::InvalidReadUrl(e.detail())))
            .transpose()?
            .map(|options| options.application_name(READ_APPLICATION_NAME));
        let credentials = match target {
            DatabaseTarget::Url(_) => auth::Credentials::prepare(auth).await?,
            DatabaseTarget::Embedded(_) => None,
        };
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
        let options = options.application_name(APPLICATION_NAME);
        let (first, first_read) = match &credentials {
            Some(credentials) => (
                credentials.apply(options.clone()).await?,
                match &read_options {
                    Some(read) => Some(credentials.apply(read.clone()).await?),
                    None => None,
                },
            ),
            None => (options.clone(), read_options.clone()),
        };
        let pool = pool_options(max_connections)
            .connect_with(first)
            .await
            .map_err(DatabaseError::Connect)?;
        let replica = first_read.map(|read| replica_pool_options(max_connections).connect_lazy_with(read));
        let refresher = credentials.map(|credentials| {
            let mut pools = vec![(pool.clone(), options)];
            if let (Some(replica), Some(read)) = (&replica, read_options) {
                pools.push((replica.clone(), read));
            }
            let (stop, stop_rx) = tokio::sync::watch::channel(false);
            (stop, credentials.spawn_refresher(pools, stop_rx))
        });
        let reads = match replica {
            Some(replica) => ReadPool::with_replica(pool.clone(), replica),
            None => ReadPool::primary_only(pool.clone()),
        };
        Ok(Self {
            pool,
            reads,
            embedded,
            refresher,
        })
    }

    /// The connection pool (the primary).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Where stale-tolerant reads run: the replica pool while it answers,
    /// the primary pool when none is configured or it is down.
    pub fn read_pool(&self) -> &ReadPool {
        &self.reads
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
        self.close_by(tokio::time::Instant::now() + EMBEDDED_STOP_LIMIT).await;
    }

    /// Like [`close`](Self::close), done by `deadline`: connections still
    /// checked out after [`POOL_CLOSE_LIMIT`] (or at the deadline) are left
    /// to end with the process, and an embedded server
    /// whose fast shutdown has not finished gets an immediate one (crash-safe:
    /// its next start replays the WAL). It is given at least
    /// [`EMBEDDED_STOP_FLOOR`] however late it is, being this process's child.
    pub async fn close_by(self, deadline: tokio::time::Instant) {
        if let Some((stop, task)) = &self.refresher {
            let _ = stop.send(true);
            task.abort();
        }
        // Connections still checked out (a call cut at the drain's end, a
        // connect the database never answered) are not worth waiting for:
        // they end with the process, and PostgreSQL rolls back what they held.
        let pool_deadline = deadline.min(tokio::time::Instant::now() + POOL_CLOSE_LIMIT);
        if tokio::time::timeout_at(pool_deadline, self.reads.close())
            .await
            .is_err()
            || tokio::time::timeout_at(pool_deadline, self.pool.close()).await.is_err()
        {
            tracing::warn!("the database pool did not close in time; leaving its connections");
        }
        if let Some(server) = self.embedded {
            let limit = deadline
                .saturating_duration_since(tokio::time::Instant::now())
                .max(EMBEDDED_STOP_FLOOR);
            let stopped = tokio::task::spawn_blocking(move || server.stop(limit)).await;
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

impl DatabaseError {
    /// The detail of a URL error (what is wrong, never the URL itself).
    fn detail(self) -> String {
        match self {
            DatabaseError::InvalidUrl(detail) | DatabaseError::InvalidReadUrl(detail) => detail,
            other => other.to_string(),
        }
    }
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

/// How long a read waits for a replica connection before it counts the
/// replica as unreachable and runs on the primary instead.
const REPLICA_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);

/// Pool settings of the read replica: the server's, but connected lazily
/// (none held while idle) and giving up sooner, since a read that cannot get
/// a replica connection has the primary to fall back to.
pub fn replica_pool_options(max_connections: u32) -> PgPoolOptions {
    pool_options(max_connections)
        .min_connections(0)
        .acquire_timeout(REPLICA_ACQUIRE_TIMEOUT)
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
            Err(e) if is_duplicate_database(&e) => {}
            Err(e) => return Err(DatabaseError::Connect(e)),
        }
    }
    conn.close().await.map_err(DatabaseError::Connect)
}

/// SQLSTATE 42P04: `CREATE DATABASE` of a database that exists. Database
/// setup reads this one code itself; the codes of runtime statements are
/// read in one place, `store::error`, which sits above this layer.
const DUPLICATE_DATABASE: &str = "42P04";

/// Whether `error` is [`DUPLICATE_DATABASE`] (a concurrent `CREATE
/// DATABASE` won the race).
fn is_duplicate_database(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|db| db.code())
        .is_some_and(|c| c == DUPLICATE_DATABASE)
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

    #[tokio::test]
    async fn a_bad_read_url_fails_the_open_naming_its_variable() {
        let target = DatabaseTarget::Url("postgres://nowhere.invalid/db".into());
        let err = Database::open_with_replica(&target, Some("mysql://u:secret@x/db"), 1)
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.starts_with("DATABASE_READ_URL is not a valid PostgreSQL URL"),
            "{err}"
        );
        assert!(!err.contains("secret"), "never echo credentials: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("converge"), "\"converge\"");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
