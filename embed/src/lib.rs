//! converge inside a Rust application.
//!
//! One handle, [`Converge`], gives an application the control plane it
//! needs: a [`Client`] for its own reads, writes and watches, and its
//! [`Provider`]s served by the SDK's worker runtime. Where the control plane
//! runs is one line of the builder:
//!
//! - [`Converge::embedded`]: in this process, on an embedded PostgreSQL in a
//!   directory of the application's choosing (initialised on first use,
//!   resumed after a restart). Clients and providers reach it over an
//!   in-memory transport: no port is opened unless [`Builder::serve_grpc`]
//!   asks for one (for external workers and the `converge` CLI).
//! - [`Converge::with_database`]: in this process, on a PostgreSQL the
//!   application names (`postgres://...`).
//! - [`Converge::connect`]: a converge service elsewhere (`http://...`); the
//!   same kinds are applied and the same providers served, over the network.
//!
//! ```no_run
//! use converge_embedded::Converge;
//! use converge_sdk::proto::v1 as pb;
//! use converge_sdk::worker::{HandlerError, KindVersion, Outcome, Provider, ReactionRequest};
//!
//! struct Echo;
//!
//! #[converge_sdk::worker::async_trait]
//! impl Provider for Echo {
//!     fn kind(&self) -> KindVersion {
//!         KindVersion::new("echo", 1)
//!     }
//!     async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
//!         Ok(Outcome::new().with_status(serde_json::json!({"seen": request.generation})))
//!     }
//! }
//!
//! # async fn run(manifest: pb::KindManifest) -> Result<(), Box<dyn std::error::Error>> {
//! let converge = Converge::embedded("./state") // or Converge::connect("http://converge:50051")
//!     .kind(manifest)
//!     .provider(Echo)
//!     .start()
//!     .await?;
//! let client = converge.client();
//! // ... client.resources().apply_resource(...), watch_resources(...) ...
//! converge.shutdown().await?;
//! # Ok(())
//! # }
//! ```
//!
//! What is stable is this crate's API; the control plane's modules behind it
//! are not.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use converge_sdk::proto::v1 as pb;
use converge_sdk::worker::{Provider, Worker, WorkerError};
use converge_sdk::{Client, manifest};
use converge_service::config::ServeArgs;
use converge_service::db::DatabaseTarget;
use converge_service::server::{self, RunningServer, ServeError, ServerConfig, Transports};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use converge_sdk;

/// Pool size of an embedded control plane: an application's own traffic,
/// not a fleet's.
const MAX_CONNECTIONS: u32 = 8;

/// Why converge could not start or stop.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The control plane could not start (database, migrations, listener).
    #[error("converge could not start: {0}")]
    Start(#[source] ServeError),
    /// The control plane stopped with an error.
    #[error("converge stopped with an error: {0}")]
    Stop(#[source] ServeError),
    /// A remote converge could not be reached.
    #[error(transparent)]
    Connect(#[from] converge_sdk::ClientError),
    /// A kind manifest file could not be read.
    #[error("cannot read the kind manifest file {file}: {source}")]
    KindFile {
        /// The file.
        file: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A kind manifest file is not a manifest.
    #[error(transparent)]
    Manifest(#[from] manifest::ManifestError),
    /// A kind manifest was refused.
    #[error("the kind manifest {kind}:{kind_version} was refused: {status}")]
    Kind {
        /// The kind.
        kind: String,
        /// Its version.
        kind_version: i32,
        /// The refusal.
        #[source]
        status: Box<tonic::Status>,
    },
    /// The providers' worker could not be built or did not drain cleanly.
    #[error("the providers' worker failed: {0}")]
    Worker(#[from] WorkerError),
    /// The providers' worker task panicked.
    #[error("the providers' worker task failed: {0}")]
    WorkerTask(String),
}

/// Where the control plane runs.
#[derive(Debug, Clone)]
enum Target {
    /// In this process, on an embedded PostgreSQL in this directory.
    Embedded(PathBuf),
    /// In this process, on this PostgreSQL.
    Database(String),
    /// Elsewhere, at this address.
    Remote(String),
}

/// Configures and starts a [`Converge`].
#[must_use = "a builder does nothing until started"]
pub struct Builder {
    target: Target,
    kinds: Vec<pb::KindManifest>,
    providers: Vec<Arc<dyn Provider>>,
    grpc: Option<SocketAddr>,
    worker_parallel: usize,
    shutdown_timeout: Duration,
    agent: String,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("target", &self.target)
            .field("kinds", &self.kinds.len())
            .field("providers", &self.providers.len())
            .field("grpc", &self.grpc)
            .finish_non_exhaustive()
    }
}

impl Builder {
    fn new(target: Target) -> Self {
        Self {
            target,
            kinds: Vec::new(),
            providers: Vec::new(),
            grpc: None,
            worker_parallel: 64,
            shutdown_timeout: Duration::from_secs(10),
            agent: "converge-embedded".to_owned(),
        }
    }

    /// A kind to apply when starting (a no-op when the stored manifest is
    /// the same).
    pub fn kind(mut self, manifest: pb::KindManifest) -> Self {
        self.kinds.push(manifest);
        self
    }

    /// A kind from a manifest file: the JSON body of `ApplyKindManifest` in
    /// the proto3 JSON mapping, as `buf curl -d @file` sends it (see
    /// [`converge_sdk::manifest`]).
    pub fn kind_file(self, path: impl AsRef<Path>) -> Result<Self, EmbedError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let json = std::fs::read_to_string(path).map_err(|source| EmbedError::KindFile {
            file: file.clone(),
            source,
        })?;
        let request = manifest::parse_apply_request(&file, &json)?;
        Ok(self.kind(request.manifest.unwrap_or_default()))
    }

    /// A provider to serve, in this process, for its `(kind, version)`.
    pub fn provider(self, provider: impl Provider) -> Self {
        self.provider_arc(Arc::new(provider))
    }

    /// A shared provider to serve.
    pub fn provider_arc(mut self, provider: Arc<dyn Provider>) -> Self {
        self.providers.push(provider);
        self
    }

    /// Also serve the gRPC API and the worker contract on `addr` (plaintext),
    /// so workers in other processes and the `converge` CLI can join an
    /// embedded control plane. Ignored by [`Converge::connect`].
    pub fn serve_grpc(mut self, addr: SocketAddr) -> Self {
        self.grpc = Some(addr);
        self
    }

    /// How many provider handlers run at once (default 64).
    pub fn worker_parallel(mut self, n: usize) -> Self {
        self.worker_parallel = n.max(1);
        self
    }

    /// How long in-flight calls and handlers get on shutdown (default 10 s).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// The agent name the providers' worker announces (shown by
    /// `ListClusterMembers`).
    pub fn agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = agent.into();
        self
    }

    /// Starts the control plane (unless remote), applies the kinds and
    /// starts serving the providers.
    pub async fn start(self) -> Result<Converge, EmbedError> {
        let (server, client) = match &self.target {
            Target::Remote(address) => (None, Client::connect(address.clone()).await?),
            Target::Embedded(dir) => self.start_server(DatabaseTarget::Embedded(dir.clone())).await?,
            Target::Database(url) => self.start_server(DatabaseTarget::Url(url.clone())).await?,
        };
        let mut converge = Converge {
            client,
            server,
            worker: None,
        };
        if let Err(error) = converge.prepare(self).await {
            // Leave nothing running behind a failed start.
            let _ = converge.stop().await;
            return Err(error);
        }
        Ok(converge)
    }

    async fn start_server(&self, database: DatabaseTarget) -> Result<(Option<RunningServer>, Client), EmbedError> {
        let mut serve = ServeArgs {
            shutdown_timeout_secs: self.shutdown_timeout.as_secs(),
            ..ServeArgs::default()
        };
        let transports = match self.grpc {
            Some(addr) => {
                serve.listen_addr = addr.into();
                Transports::Both
            }
            None => Transports::InProcess,
        };
        let mut config = ServerConfig::new(database, MAX_CONNECTIONS, serve);
        config.transports = transports;
        let running = server::start(config).await.map_err(EmbedError::Start)?;
        let channel = running
            .in_process()
            .map(server::in_process::InProcessConnector::channel);
        match channel {
            Some(channel) => Ok((Some(running), Client::from_channel(channel))),
            None => {
                // Started with the in-process transport above; unreachable
                // unless the server changes, and then an error, not a panic.
                let _ = running.shutdown().await;
                Err(EmbedError::Start(ServeError::Task(
                    "the server started without its in-process transport".to_owned(),
                )))
            }
        }
    }
}

/// A running converge, embedded or remote, with the application's providers
/// served. Stop it with [`Converge::shutdown`]; dropped without it, the
/// control plane and the providers run on until the Tokio runtime ends, and
/// an embedded PostgreSQL stops when the process does.
#[derive(Debug)]
pub struct Converge {
    client: Client,
    server: Option<RunningServer>,
    worker: Option<RunningWorker>,
}

#[derive(Debug)]
struct RunningWorker {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), WorkerError>>,
}

impl Converge {
    /// converge in this process, on an embedded PostgreSQL kept in
    /// `data_dir` (created on first use; the PostgreSQL server binaries must
    /// be installed).
    pub fn embedded(data_dir: impl Into<PathBuf>) -> Builder {
        Builder::new(Target::Embedded(data_dir.into()))
    }

    /// converge in this process, on the PostgreSQL at `database_url`.
    pub fn with_database(database_url: impl Into<String>) -> Builder {
        Builder::new(Target::Database(database_url.into()))
    }

    /// A converge service at `address` (`http://host:port`).
    pub fn connect(address: impl Into<String>) -> Builder {
        Builder::new(Target::Remote(address.into()))
    }

    /// The client for the application's own calls: every `converge.v1`
    /// service. Cheap to clone.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Whether the control plane runs in this process.
    pub fn is_embedded(&self) -> bool {
        self.server.is_some()
    }

    /// The gRPC address an embedded control plane also serves on (see
    /// [`Builder::serve_grpc`]).
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.server.as_ref().and_then(RunningServer::local_addr)
    }

    /// Stops serving: the providers drain first (their results delivered,
    /// their pairs announced unready), then an embedded control plane
    /// drains and stops its PostgreSQL. A remote converge keeps running.
    pub async fn shutdown(mut self) -> Result<(), EmbedError> {
        self.stop().await
    }

    async fn prepare(&mut self, builder: Builder) -> Result<(), EmbedError> {
        for manifest in builder.kinds {
            let (kind, kind_version) = (manifest.kind.clone(), manifest.kind_version);
            self.client
                .kinds()
                .apply_kind_manifest(pb::ApplyKindManifestRequest {
                    manifest: Some(manifest),
                    ..Default::default()
                })
                .await
                .map_err(|status| EmbedError::Kind {
                    kind,
                    kind_version,
                    status: Box::new(status),
                })?;
        }
        if builder.providers.is_empty() {
            return Ok(());
        }
        let mut worker = Worker::builder()
            .channel(self.client.channel())
            .max_parallel(builder.worker_parallel)
            .drain_timeout(builder.shutdown_timeout)
            .agent(builder.agent);
        for provider in builder.providers {
            worker = worker.provider_arc(provider);
        }
        let worker = worker.build()?;
        let (stop, stop_rx) = oneshot::channel::<()>();
        let task = tokio::spawn(worker.run(async {
            let _ = stop_rx.await;
        }));
        self.worker = Some(RunningWorker { stop, task });
        Ok(())
    }

    async fn stop(&mut self) -> Result<(), EmbedError> {
        // The worker first: its stream would hold the server's drain open.
        let drained = match self.worker.take() {
            Some(worker) => {
                let _ = worker.stop.send(());
                match worker.task.await {
                    Ok(outcome) => outcome.map_err(EmbedError::from),
                    Err(e) => Err(EmbedError::WorkerTask(e.to_string())),
                }
            }
            None => Ok(()),
        };
        let stopped = match self.server.take() {
            Some(server) => server.shutdown().await.map_err(EmbedError::Stop),
            None => Ok(()),
        };
        drained.and(stopped)
    }
}
