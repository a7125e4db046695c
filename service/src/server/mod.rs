//! Process assembly: opens the database, migrates, joins the cluster and serves
//! gRPC (API, worker contract, health, reflection) until asked to stop, then
//! drains within a bounded time.

pub mod health;
mod http_listener;
pub mod in_process;
mod instruments;
pub mod listener;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tonic::transport::server::TcpIncoming;

use crate::api::{self, ApiState};
use crate::catalog::KindCatalog;
use crate::cluster::{self, Membership, MembershipTiming};
use crate::config::{CommonArgs, RetentionArgs, ServeArgs, default_data_dir};
use crate::contract::authz::Authorizer;
use crate::db::notify::Notifications;
use crate::db::{Database, DatabaseError, DatabaseTarget, migrate};
use crate::domain::shard::SHARD_COUNT;
use crate::engine::retention;
use crate::store::StoreError;
use crate::store::cluster::{self as cluster_store, MemberRegistration};
use crate::version;
use crate::watch::{HubConfig, WatchHub};
use in_process::{InProcessConnector, InProcessIncoming};

/// Everything `start` needs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where the database is.
    pub database: DatabaseTarget,
    /// The `postgres://` URL of a streaming replica for stale-tolerant
    /// reads (`DATABASE_READ_URL`), if any.
    pub read_database: Option<String>,
    /// Pool size.
    pub max_connections: u32,
    /// How connections to an external database authenticate.
    pub database_auth: crate::config::DatabaseAuth,
    /// Server options.
    pub serve: ServeArgs,
    /// Cluster membership timing.
    pub membership: MembershipTiming,
    /// History retention.
    pub retention: RetentionArgs,
    /// How often the retention sweeper runs.
    pub retention_interval: Duration,
    /// Watch reader tuning.
    pub watch: HubConfig,
    /// Reaper timing.
    pub reaper: crate::engine::reaper::ReaperConfig,
    /// Drainer tuning.
    pub drainer: crate::engine::drainer::DrainerConfig,
    /// How often the queue is sampled for the metrics (when they are on).
    pub queue_sample_interval: Duration,
    /// How often tasks no worker serves are sampled and the kinds'
    /// `unserved_condition_after_secs` policy applied.
    pub unserved_interval: Duration,
    /// Where calls arrive: the TCP listener, the in-process transport of an
    /// embedding application, or both.
    pub transports: Transports,
}

/// Where a server accepts calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transports {
    /// The TCP listener (`listen_addr`), with TLS when configured.
    #[default]
    Tcp,
    /// Only the in-process transport: no socket is opened.
    InProcess,
    /// Both.
    Both,
}

impl Transports {
    fn tcp(self) -> bool {
        matches!(self, Self::Tcp | Self::Both)
    }

    fn in_process(self) -> bool {
        matches!(self, Self::InProcess | Self::Both)
    }
}

impl ServerConfig {
    /// A configuration with default membership timing.
    pub fn new(database: DatabaseTarget, max_connections: u32, serve: ServeArgs) -> Self {
        Self {
            database,
            read_database: None,
            max_connections,
            database_auth: crate::config::DatabaseAuth::Url,
            serve,
            membership: MembershipTiming::default(),
            retention: RetentionArgs::default(),
            retention_interval: Duration::from_secs(60),
            watch: HubConfig::default(),
            reaper: crate::engine::reaper::ReaperConfig::default(),
            drainer: crate::engine::drainer::DrainerConfig::default(),
            queue_sample_interval: crate::engine::queue_sampler::SAMPLE_INTERVAL,
            unserved_interval: crate::engine::unserved::PASS_INTERVAL,
            transports: Transports::Tcp,
        }
    }
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The database could not be opened.
    #[error(transparent)]
    Database(#[from] DatabaseError),
    /// Migrations failed.
    #[error("applying migrations failed: {0}")]
    Migrate(#[from] migrate::MigrationError),
    /// A setup statement failed.
    #[error("database error during startup: {0}")]
    Sql(#[from] StoreError),
    /// Service and schema disagree on the shard count.
    #[error(
        "the database has {database} shards but this build expects {SHARD_COUNT}; refusing to run mismatched versions"
    )]
    ShardCountMismatch {
        /// The database's `shard_count()`.
        database: i32,
    },
    /// The TLS options contradict each other.
    #[error("{0}")]
    TlsOptions(String),
    /// The TLS files could not be loaded.
    #[error("TLS: {0}")]
    Tls(#[from] converge_tls::TlsError),
    /// The authorization policy could not be loaded.
    #[error(transparent)]
    Authz(#[from] crate::contract::authz::PolicyFileError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A probe or metrics listener could not be bound.
    #[error("cannot listen on {addr} ({setting}): {source}")]
    HttpBind {
        /// The address.
        addr: SocketAddr,
        /// The setting it came from (`HEALTH_ADDR`, `METRICS_ADDR`).
        setting: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Building the reflection service failed.
    #[error("cannot build server reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The gRPC transport failed.
    #[error("the gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The embedded PostgreSQL server died.
    #[error("the embedded PostgreSQL server exited unexpectedly; see postgres.log in the data directory")]
    EmbeddedDatabaseExited,
    /// The server task panicked or was cancelled.
    #[error("the server task failed: {0}")]
    Task(String),
}

/// Chooses the database from the common options: `DATABASE_URL`, else the
/// embedded cluster in the data directory.
pub fn database_target(common: &CommonArgs) -> DatabaseTarget {
    match &common.database_url {
        Some(url) if !url.trim().is_empty() => DatabaseTarget::Url(url.clone()),
        _ => DatabaseTarget::Embedded(common.data_dir.clone().unwrap_or_else(default_data_dir)),
    }
}

/// What a drain may spend, beyond the in-flight calls' shutdown timeout,
/// on the steps that may wait on the database: stopping the background
/// loops, leaving the cluster registry, closing the pool and stopping the
/// embedded PostgreSQL. So a process exits within `SHUTDOWN_TIMEOUT_SECS`
/// plus this of a SIGTERM, whatever the database does.
pub const SHUTDOWN_CLEANUP: Duration = Duration::from_secs(5);

/// Longest the background loops get to stop before they are aborted.
const LOOPS_STOP_LIMIT: Duration = Duration::from_secs(1);

/// Longest leaving the cluster registry may take: a database that does not
/// answer would otherwise hold each statement for the pool's acquire
/// timeout, and the row ages out anyway.
const LEAVE_LIMIT: Duration = Duration::from_secs(2);

/// A started server.
#[derive(Debug)]
pub struct RunningServer {
    local_addr: Option<SocketAddr>,
    http_addrs: Vec<SocketAddr>,
    in_process: Option<InProcessConnector>,
    member_id: String,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ServeError>>,
}

impl RunningServer {
    /// The bound gRPC address (`None` when the server listens in-process only).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// The bound probe listener (`HEALTH_ADDR`, else `METRICS_ADDR`), if any.
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.http_addrs.first().copied()
    }

    /// Opens channels of the in-process transport (`None` unless the server
    /// was started with it).
    pub fn in_process(&self) -> Option<&InProcessConnector> {
        self.in_process.as_ref()
    }

    /// This process's cluster member id.
    pub fn member_id(&self) -> &str {
        &self.member_id
    }

    /// Drains and stops: health flips to NOT_SERVING, the listener closes,
    /// in-flight calls get the shutdown timeout, then the cluster registry entry
    /// and the database (embedded server included) are released. Resolves
    /// within the shutdown timeout plus [`SHUTDOWN_CLEANUP`], whatever the
    /// database does; a step that could not finish by then is abandoned
    /// (the registry row ages out, the reaper frees leases).
    pub async fn shutdown(mut self) -> Result<(), ServeError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.wait().await
    }

    /// Waits for the server to stop on its own (it only does on a fatal error).
    pub async fn wait(self) -> Result<(), ServeError> {
        self.task.await.map_err(|e| ServeError::Task(e.to_string()))?
    }
}

/// Opens the database, migrates, joins the cluster, binds and starts serving.
pub async fn start(config: ServerConfig) -> Result<RunningServer, ServeError> {
    // TLS first: a misconfiguration fails before the database is touched.
    let (tls, access) = config.serve.transport().map_err(ServeError::TlsOptions)?;
    let tls = tls
        .map(|settings| converge_tls::ServerTls::load(&settings.files, settings.reload_interval))
        .transpose()?;
    let authz = match &config.serve.authz.authz_policy_file {
        Some(file) => Authorizer::load(file, config.serve.authz.authz_plaintext_identity.clone())?,
        None => Authorizer::off(),
    };
    // The probes next, before the database: liveness answers while the
    // database is opened and migrated (readiness says 503 until serving),
    // and a taken port fails the boot at once.
    let (ready, readiness) = tokio::sync::watch::channel(false);
    let http = http_listener::HttpListeners::bind(&config.serve.http_listeners(), readiness)
        .await
        .map_err(|(addr, setting, source)| ServeError::HttpBind { addr, setting, source })?;
    let db = Database::open_with(
        &config.database,
        config.read_database.as_deref(),
        config.max_connections,
        &config.database_auth,
    )
    .await?;
    match prepare_and_spawn(&db, &config, tls, access, authz, ready).await {
        Ok((local_addr, membership, mut serve)) => {
            let member_id = membership.member_id().to_owned();
            let (stop, stop_rx) = oneshot::channel();
            let grace = config.serve.shutdown_timeout();
            let in_process = config.transports.in_process().then(|| {
                let (connector, incoming) = InProcessConnector::new();
                serve.in_process = Some(incoming);
                connector
            });
            let http_addrs = http.bound().to_vec();
            let task = tokio::spawn(run(db, membership, serve, stop_rx, grace, http));
            Ok(RunningServer {
                local_addr,
                http_addrs,
                in_process,
                member_id,
                stop: Some(stop),
                task,
            })
        }
        Err(e) => {
            db.close().await;
            Err(e)
        }
    }
}

/// The serving half, ready to be driven: the router future and the health
/// statuses, flipped on drain.
struct Serving {
    router: api::ApiRouter,
    listener: Option<TcpListener>,
    in_process: Option<InProcessIncoming>,
    tls: Option<converge_tls::ServerTls>,
    health: Arc<health::Health>,
    background: Background,
}

/// Background loops of this process, stopped together on drain.
struct Background {
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Background {
    /// Flips the loops' stop and waits for them until `deadline`; the ones
    /// still running then (waiting on a database that does not answer) are
    /// aborted. Every loop keeps its state in the database, where an
    /// abandoned statement rolls back, so cutting one short loses nothing.
    async fn stop(self, deadline: Instant) {
        let _ = self.stop.send(true);
        let mut tasks = self.tasks.into_iter();
        while let Some(mut task) = tasks.next() {
            if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                tracing::warn!("background loops did not stop in time; aborting them");
                task.abort();
                tasks.for_each(|task| task.abort());
                return;
            }
        }
    }
}

/// This process's stable identity: the configured one, else the embedded
/// data directory it owns (only one process at a time can run an embedded
/// cluster, so a member registered under it earlier is gone).
fn member_identity(db: &Database, config: &ServerConfig) -> Option<String> {
    config.serve.member_identity.clone().or_else(|| {
        db.embedded().map(|server| {
            let dir = server.data_dir();
            let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
            format!("embedded:{}:{}", cluster::hostname(), dir.display())
        })
    })
}

/// The static, non-secret settings this process booted with, as
/// `ListClusterMembers` shows them (never the database URL).
fn boot_settings(db: &Database, config: &ServerConfig, listen_addr: &str) -> serde_json::Value {
    serde_json::json!({
        "role": config.serve.role.as_str(),
        "listenAddr": listen_addr,
        "databaseMaxConnections": config.max_connections,
        "embeddedDatabase": db.embedded().is_some(),
        "shutdownTimeoutSecs": config.serve.shutdown_timeout_secs,
        "heartbeatMs": u64::try_from(config.membership.heartbeat.as_millis()).unwrap_or(u64::MAX),
        "livenessMs": u64::try_from(config.membership.liveness.as_millis()).unwrap_or(u64::MAX),
    })
}

async fn prepare_and_spawn(
    db: &Database,
    config: &ServerConfig,
    tls: Option<converge_tls::ServerTls>,
    access: crate::config::AccessSettings,
    authz: Authorizer,
    ready: tokio::sync::watch::Sender<bool>,
) -> Result<(Option<SocketAddr>, Membership, Serving), ServeError> {
    let pool = db.pool().clone();
    let report = migrate::run(&pool).await?;
    tracing::info!(
        applied = report.applied,
        total = report.total,
        functions_applied = report.functions_applied,
        "database schema is current"
    );
    let shards = cluster_store::shard_count(&pool).await?;
    if shards != SHARD_COUNT {
        return Err(ServeError::ShardCountMismatch { database: shards });
    }

    let (listener, local_addr) = if config.transports.tcp() {
        let addr = config.serve.listen_addr.addr;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServeError::Bind { addr, source })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| ServeError::Bind { addr, source })?;
        (Some(listener), Some(local_addr))
    } else {
        (None, None)
    };
    let listen_addr = local_addr.map_or_else(|| in_process::LISTEN_ADDR.to_owned(), |addr| addr.to_string());

    let registration = MemberRegistration {
        member_id: cluster::new_member_id(),
        role: config.serve.role.as_str().to_owned(),
        version: version::VERSION.to_owned(),
        hostname: cluster::hostname(),
        pid: i32::try_from(std::process::id()).unwrap_or(i32::MAX),
        identity: member_identity(db, config),
        config: boot_settings(db, config, &listen_addr),
        listen_addr,
    };
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let (notifications, listening) = Notifications::spawn(&pool, stop_rx.clone());
    let membership = Membership::join(pool.clone(), &notifications, registration, config.membership).await?;

    let catalog = KindCatalog::new();
    let mut tasks = vec![
        listening,
        catalog
            .clone()
            .spawn_refresher(pool.clone(), &notifications, stop_rx.clone()),
    ];
    if config.serve.role.serves_api() {
        tasks.push(retention::spawn(
            pool.clone(),
            config.retention,
            config.retention_interval,
            stop_rx,
        ));
    }
    let watch = if config.serve.role.serves_api() {
        let (hub, task) = WatchHub::start(
            pool.clone(),
            &notifications,
            catalog.clone(),
            config.watch,
            stop.subscribe(),
        )
        .await?;
        tasks.push(task);
        Some(hub)
    } else {
        None
    };
    if config.serve.role.serves_api() {
        tasks.push(crate::engine::reaper::spawn(
            pool.clone(),
            config.reaper,
            stop.subscribe(),
        ));
        tasks.push(crate::engine::statistics::spawn(
            pool.clone(),
            crate::engine::statistics::CHECK_INTERVAL,
            stop.subscribe(),
        ));
        tasks.push(crate::engine::resync::spawn(pool.clone(), stop.subscribe()));
        let shared_summary = crate::telemetry::metrics::meter().map(|meter| {
            let shared = crate::engine::fleet_summary::SharedSummary::default();
            instruments::resources(meter, shared.clone());
            shared
        });
        tasks.push(crate::engine::fleet_summary::spawn(
            pool.clone(),
            shared_summary,
            crate::engine::fleet_summary::INTERVAL,
            stop.subscribe(),
        ));
        tasks.push(crate::engine::drainer::spawn(
            pool.clone(),
            &notifications,
            config.drainer,
            membership.shards(),
            stop.subscribe(),
        ));
    }
    let broker = config.serve.role.serves_workers().then(|| {
        let broker = crate::broker::Broker::start(
            pool.clone(),
            &notifications,
            membership.member_id().to_owned(),
            catalog.clone(),
            membership.shards(),
            authz.clone(),
            stop.subscribe(),
        );
        membership.report_load(broker.load_source());
        broker
    });
    if config.serve.role.serves_api() {
        let figures = crate::telemetry::metrics::meter().map(|meter| {
            let figures = crate::engine::unserved::SharedFigures::default();
            instruments::unserved(meter, figures.clone());
            figures
        });
        tasks.push(crate::engine::unserved::spawn(
            pool.clone(),
            config.unserved_interval,
            config.membership.liveness,
            figures,
            stop.subscribe(),
        ));
    }
    if let Some(meter) = crate::telemetry::metrics::meter() {
        instruments::pool(meter, pool.clone(), "primary");
        if let Some(broker) = &broker {
            instruments::broker(meter, broker.shared_stats());
        }
        if config.serve.role.serves_api() {
            let sample = crate::engine::queue_sampler::SharedSample::default();
            instruments::queue(meter, sample.clone());
            tasks.push(crate::engine::queue_sampler::spawn(
                pool.clone(),
                sample,
                config.queue_sample_interval,
                stop.subscribe(),
            ));
        }
    }
    if authz.is_on() {
        tasks.push(authz.spawn_reloader(
            Duration::from_secs(config.serve.authz.authz_reload_interval_secs),
            stop.subscribe(),
        ));
        if let Some(meter) = crate::telemetry::metrics::meter() {
            instruments::authz(meter, authz.clone());
        }
    }
    let mut background = Background { stop, tasks };
    let state = ApiState::new(
        pool.clone(),
        db.read_pool().clone(),
        membership.member_id().to_owned(),
        config.membership.liveness,
        catalog,
        config.retention,
        watch,
        broker,
    )
    .with_authz(authz.clone())
    .with_notifications(notifications.clone());
    let database = state.database.clone();
    if let Some(meter) = crate::telemetry::metrics::meter() {
        instruments::database(meter, database.clone(), db.embedded().is_some());
    }
    let (reporter, health_service) = tonic_health::server::health_reporter();
    if config.serve.role.serves_api() {
        // Kind migrations write through the API's write path (ADR 48).
        background.tasks.push(tokio::spawn(api::migration::run(
            state.clone(),
            background.stop.subscribe(),
        )));
    }
    let services = api::routes(state, config.serve.role, access, health_service)?;
    let health = Arc::new(health::Health::serving(reporter, services.names.clone(), ready).await);
    background.tasks.push(health::spawn_probe(
        pool.clone(),
        database,
        health.clone(),
        db.read_pool().clone(),
        background.stop.subscribe(),
    ));
    Ok((
        local_addr,
        membership,
        Serving {
            router: services.router,
            listener,
            in_process: None,
            tls,
            health,
            background,
        },
    ))
}

async fn run(
    mut db: Database,
    membership: Membership,
    serving: Serving,
    stop: oneshot::Receiver<()>,
    grace: Duration,
    http: http_listener::HttpListeners,
) -> Result<(), ServeError> {
    let Serving {
        router,
        listener,
        in_process,
        tls,
        health,
        background,
    } = serving;
    // One signal ends every transport's serving loop.
    let (cut, cut_rx) = tokio::sync::watch::channel(false);
    let cut_signal = move || {
        let mut cut_rx = cut_rx.clone();
        async move {
            let _ = cut_rx.wait_for(|cut| *cut).await;
        }
    };
    type Served = futures::future::BoxFuture<'static, Result<(), tonic::transport::Error>>;
    let tcp: Served = match (listener, tls) {
        (None, _) => Box::pin(futures::future::ok(())),
        (Some(listener), Some(tls)) => {
            let incoming = listener::incoming(listener, tls, background.stop.subscribe());
            Box::pin(router.clone().serve_with_incoming_shutdown(incoming, cut_signal()))
        }
        (Some(listener), None) => {
            // serve_with_incoming ignores the builder's socket options: set
            // them on the incoming stream. Without TCP_NODELAY every small
            // response waits for the peer's delayed ACK (~40 ms on Linux).
            let incoming = TcpIncoming::from(listener)
                .with_nodelay(Some(true))
                .with_keepalive(Some(Duration::from_secs(60)));
            Box::pin(router.clone().serve_with_incoming_shutdown(incoming, cut_signal()))
        }
    };
    let local: Served = match in_process {
        Some(incoming) => Box::pin(router.serve_with_incoming_shutdown(incoming, cut_signal())),
        None => Box::pin(futures::future::ok(())),
    };
    let mut serve = Box::pin(async move { futures::future::try_join(tcp, local).await.map(|_| ()) });
    let mut db_watch = tokio::time::interval(Duration::from_secs(1));

    let (outcome, deadline) = tokio::select! {
        served = &mut serve => (served.map_err(ServeError::from), Instant::now() + SHUTDOWN_CLEANUP),
        _ = watch_embedded(&mut db, &mut db_watch) => {
            (Err(ServeError::EmbeddedDatabaseExited), Instant::now() + SHUTDOWN_CLEANUP)
        }
        _ = stop => {
            // Everything from here on, the database included, ends by this
            // deadline: a pod must exit within its grace period even when
            // PostgreSQL is gone.
            let deadline = Instant::now() + grace + SHUTDOWN_CLEANUP;
            // Flip health first so load balancers and meshes stop routing
            // here (for good: the database probe no longer changes it).
            health.drain().await;
            // Stop the background loops first: that ends open watch streams
            // (UNAVAILABLE), which would otherwise hold the drain open.
            background.stop(Instant::now() + LOOPS_STOP_LIMIT).await;
            let _ = cut.send(true);
            let outcome = match tokio::time::timeout(grace, &mut serve).await {
                Ok(served) => served.map_err(ServeError::from),
                Err(_) => {
                    tracing::warn!(?grace, "in-flight calls did not finish in time; cutting them");
                    Ok(())
                }
            };
            (outcome, deadline)
        }
    };
    membership.leave((Instant::now() + LEAVE_LIMIT).min(deadline)).await;
    db.close_by(deadline).await;
    // The probes last: liveness answers until the drain is over.
    drop(http);
    outcome
}

/// Resolves when the embedded server has exited; never for an external database.
async fn watch_embedded(db: &mut Database, tick: &mut tokio::time::Interval) {
    loop {
        tick.tick().await;
        if db.embedded_has_exited() {
            return;
        }
    }
}

/// SIGTERM and SIGINT, caught from the moment this is created: install it
/// before starting anything, or a signal that arrives during start-up takes
/// the default action and kills the process without a drain.
pub struct ShutdownSignal {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl ShutdownSignal {
    /// Installs the handlers.
    pub fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Resolves on the first SIGTERM or SIGINT.
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}
