//! Helpers shared by the command-line workers.

use std::process::ExitCode;
use std::time::Duration;

use converge_sdk::tls::{ClientTls, ClientTlsFiles, DEFAULT_RELOAD_INTERVAL};
use converge_sdk::worker::{Worker, WorkerBuilder};
use tracing_subscriber::EnvFilter;

/// Settings every worker binary takes, from flags or the environment.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// Broker address, e.g. http://127.0.0.1:50051.
    #[arg(long, env = "BROKER_ADDR")]
    pub broker: String,
    /// Most handlers running at once.
    #[arg(long, env = "WORKER_MAX_PARALLEL", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_parallel: u32,
    /// Seconds in-flight handlers get to finish on shutdown.
    #[arg(long, env = "WORKER_DRAIN_TIMEOUT_SECS", default_value_t = 30)]
    pub drain_timeout_secs: u64,
    /// Log filter (error, warn, info, debug, trace, or a tracing directive).
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// PEM bundle of the CAs the broker's certificate must chain to; enables
    /// TLS (use an `https://` broker address).
    #[arg(long, env = "WORKER_TLS_CA_FILE")]
    pub tls_ca_file: Option<std::path::PathBuf>,
    /// PEM client certificate to present (mTLS); re-read when it changes.
    #[arg(long, env = "WORKER_TLS_CERT_FILE", requires = "tls_key_file")]
    pub tls_cert_file: Option<std::path::PathBuf>,
    /// PEM private key of the client certificate.
    #[arg(long, env = "WORKER_TLS_KEY_FILE", requires = "tls_cert_file")]
    pub tls_key_file: Option<std::path::PathBuf>,
    /// Name to verify the broker's certificate as, when it is not the host
    /// of the broker address.
    #[arg(long, env = "WORKER_TLS_SERVER_NAME")]
    pub tls_server_name: Option<String>,
}

impl CommonArgs {
    /// Installs the log subscriber (logs go to stderr). A bad filter is an
    /// error rather than a silent default.
    pub fn init_logging(&self) -> Result<(), String> {
        init_logging(&self.log_level)
    }

    /// A builder with the broker, TLS and the shared settings applied, or
    /// why the TLS files cannot be used. Call inside the runtime (TLS files
    /// are reloaded on it).
    pub fn builder(&self) -> Result<WorkerBuilder, String> {
        let builder = Worker::builder()
            .endpoint(self.broker.clone())
            .max_parallel(self.max_parallel as usize)
            .drain_timeout(Duration::from_secs(self.drain_timeout_secs));
        let Some(ca) = &self.tls_ca_file else {
            if self.tls_cert_file.is_some() {
                return Err("WORKER_TLS_CERT_FILE needs WORKER_TLS_CA_FILE".into());
            }
            return Ok(builder);
        };
        let files = ClientTlsFiles {
            ca: ca.clone(),
            identity: self.tls_cert_file.clone().zip(self.tls_key_file.clone()),
        };
        let mut tls = ClientTls::load(&files, DEFAULT_RELOAD_INTERVAL).map_err(|e| e.to_string())?;
        if let Some(name) = &self.tls_server_name {
            tls = tls.with_server_name(name).map_err(|e| e.to_string())?;
        }
        Ok(builder.tls(tls))
    }
}

/// Installs the log subscriber for `filter` (logs go to stderr). A bad
/// filter is an error rather than a silent default.
pub fn init_logging(filter: &str) -> Result<(), String> {
    let parsed = EnvFilter::try_new(filter).map_err(|e| format!("invalid LOG_LEVEL {filter:?}: {e}"))?;
    tracing_subscriber::fmt()
        .with_env_filter(parsed)
        .with_writer(std::io::stderr)
        .try_init()
        .map_err(|e| format!("cannot install the logger: {e}"))
}

/// Completes on SIGTERM or SIGINT. The handlers are installed when this is
/// called (not when first polled), so call it before starting the worker: a
/// signal that arrives during start-up then drains instead of killing.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let terminate = signal(SignalKind::terminate());
    let interrupt = signal(SignalKind::interrupt());
    async move {
        let terminate = async {
            match terminate {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for SIGTERM");
                    std::future::pending::<()>().await;
                }
            }
        };
        let interrupt = async {
            match interrupt {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for SIGINT");
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            () = terminate => tracing::info!("SIGTERM received"),
            () = interrupt => tracing::info!("SIGINT received"),
        }
    }
}

/// Builds and runs a worker until a signal, mapping the result to an exit
/// code: 0 after a clean drain, 1 if the drain was incomplete, 2 for a bad
/// configuration.
pub async fn run_worker(builder: WorkerBuilder) -> ExitCode {
    let worker = match builder.build() {
        Ok(worker) => worker,
        Err(error) => {
            tracing::error!(%error, "invalid worker configuration");
            return ExitCode::from(2);
        }
    };
    let signals = shutdown_signal();
    let kinds: Vec<String> = worker.kinds().iter().map(ToString::to_string).collect();
    tracing::info!(kinds = %kinds.join(","), "worker starting");
    let handle = worker.handle();
    let result = worker.run(signals).await;
    let stats = handle.stats();
    tracing::info!(
        completed = stats.completed,
        failed = stats.failed,
        reconnects = stats.reconnects,
        buffered_dropped = stats.buffered_dropped,
        "worker stopped"
    );
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "worker did not shut down cleanly");
            ExitCode::FAILURE
        }
    }
}

/// `hostname-pid`, identifying this process in statuses and logs.
pub fn worker_identity() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown".to_owned());
    format!("{host}-{}", std::process::id())
}
