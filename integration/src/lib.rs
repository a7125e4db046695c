//! Harness for end-to-end tests: a converge server started in-process on a
//! database of its own (real PostgreSQL), reached over real gRPC on loopback
//! through the Rust SDK.

pub mod api;
pub mod bench;
pub mod faultproxy;
pub mod kinds;
pub mod languages;
pub mod otlp;
pub mod pki;
pub mod postgres;
pub mod processes;
pub mod soak;
pub mod watchers;

use std::time::Duration;

use anyhow::Context;
use converge_sdk::Client;
use converge_service::cluster::MembershipTiming;
use converge_service::config::{Role, ServeArgs};
use converge_service::db::DatabaseTarget;
use converge_service::server::{self, RunningServer, ServerConfig};
pub use converge_service::testing::TestDatabase;

/// Membership timing fast enough for tests to watch the fleet re-tile.
pub fn fast_membership() -> MembershipTiming {
    MembershipTiming {
        heartbeat: Duration::from_millis(200),
        liveness: Duration::from_secs(2),
        gc_after: Duration::from_secs(60),
        ..MembershipTiming::default()
    }
}

/// A running server plus the database it uses.
pub struct TestServer {
    running: RunningServer,
    database: TestDatabase,
}

impl TestServer {
    /// Starts a server with every duty on a fresh database.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_on(TestDatabase::new().await?, Role::All).await
    }

    /// Starts a server with `role` on `database` (several servers may share one).
    pub async fn start_on(database: TestDatabase, role: Role) -> anyhow::Result<Self> {
        Self::start_with(database, role, |_| {}).await
    }

    /// Like [`TestServer::start_on`], letting the test adjust the configuration.
    pub async fn start_with(
        database: TestDatabase,
        role: Role,
        adjust: impl FnOnce(&mut ServerConfig),
    ) -> anyhow::Result<Self> {
        let serve = ServeArgs {
            listen_addr: std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into(),
            role,
            shutdown_timeout_secs: 5,
            ..ServeArgs::default()
        };
        let mut config = ServerConfig::new(DatabaseTarget::Url(database.url()?), 8, serve);
        config.membership = fast_membership();
        adjust(&mut config);
        let running = server::start(config).await.context("starting the test server")?;
        Ok(Self { running, database })
    }

    /// The server's `http://` address.
    pub fn address(&self) -> String {
        // The harness always starts the TCP listener.
        self.running
            .local_addr()
            .map_or_else(|| "in-process".to_owned(), |addr| format!("http://{addr}"))
    }

    /// This server's cluster member id.
    pub fn member_id(&self) -> &str {
        self.running.member_id()
    }

    /// A connected SDK client.
    pub async fn client(&self) -> anyhow::Result<Client> {
        Ok(Client::connect(self.address()).await?)
    }

    /// The server's database.
    pub fn database(&self) -> &TestDatabase {
        &self.database
    }

    /// Drains and stops the server.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        Ok(self.running.shutdown().await?)
    }
}

/// Polls `check` every 50 ms until it returns `Some`, for at most `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await? {
            return Ok(value);
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("condition not met within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
