//! The [`Worker`]: priming, the reconnect loop, drain, and stats.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use converge_proto::worker_v1::GetProviderConfigRequest;
use converge_proto::worker_v1::worker_service_client::WorkerServiceClient;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tonic::transport::Channel;

use super::backoff::Backoff;
use super::config::{Settings, Target, WorkerBuilder};
use super::convert::{kind_to_proto, provider_config};
use super::provider::Provider;
use super::session::{SessionEnd, run_session};
use super::state::Shared;
use super::types::KindVersion;
use crate::MAX_MESSAGE_BYTES;

/// Why a worker could not be built or did not shut down cleanly.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// No provider was registered.
    #[error("a worker needs at least one provider")]
    NoProviders,
    /// Two providers claim the same pair.
    #[error("more than one provider for {0}")]
    DuplicateProvider(KindVersion),
    /// A provider reported an empty kind or a version below 1.
    #[error("invalid provider kind {0:?}: the kind must be non-empty and the version >= 1")]
    InvalidKind(KindVersion),
    /// Neither an endpoint nor a channel was given.
    #[error("no broker endpoint or channel given")]
    NoEndpoint,
    /// The endpoint is not a valid URI.
    #[error("invalid broker address {address:?}: {source}")]
    InvalidEndpoint {
        /// The address given.
        address: String,
        /// The parse error.
        #[source]
        source: tonic::transport::Error,
    },
    /// A setting is out of range.
    #[error("invalid worker setting {name}: {reason}")]
    InvalidSetting {
        /// The setting.
        name: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Shutdown's drain timeout passed before every in-flight handler
    /// finished and every result was delivered. The broker re-runs those
    /// tasks once their leases are released or go stale.
    #[error("drain timed out with {running} handlers still running and {undelivered} results undelivered")]
    DrainIncomplete {
        /// Handlers still running at the end (they were cancelled).
        running: usize,
        /// Results computed but never sent.
        undelivered: usize,
    },
}

/// A snapshot of a worker's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Tasks whose handler succeeded.
    pub completed: u64,
    /// Tasks that failed, for any reason (handler error, panic, deadline,
    /// unknown or unready provider, shutting down).
    pub failed: u64,
    /// Results discarded because the result buffer was full.
    pub buffered_dropped: u64,
    /// Times an established stream was lost and the worker reconnected.
    pub reconnects: u64,
    /// Streams opened so far.
    pub sessions: u64,
    /// Tasks accepted whose handler has not finished (now).
    pub running: usize,
    /// Results not yet acknowledged by the broker: waiting to be sent, or
    /// sent and kept until acknowledged (now).
    pub buffered: usize,
}

/// Reads a worker's counters while it runs. Cheap to clone.
#[derive(Clone)]
pub struct WorkerHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for WorkerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerHandle").field("stats", &self.stats()).finish()
    }
}

impl WorkerHandle {
    /// The current counters.
    pub fn stats(&self) -> WorkerStats {
        self.shared.stats()
    }
}

/// The worker runtime: serves its providers over one `WorkStream` at a time,
/// reconnecting as needed, until shut down. See the module documentation
/// for the behaviour.
pub struct Worker {
    target: Target,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("kinds", &self.kinds())
            .field("settings", &self.shared.settings)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A builder with default settings.
    pub fn builder() -> WorkerBuilder {
        WorkerBuilder::new()
    }

    pub(crate) fn new(target: Target, providers: BTreeMap<KindVersion, Arc<dyn Provider>>, settings: Settings) -> Self {
        Self {
            target,
            shared: Arc::new(Shared::new(providers, settings)),
        }
    }

    /// The pairs this worker serves.
    pub fn kinds(&self) -> Vec<KindVersion> {
        self.shared.providers.keys().cloned().collect()
    }

    /// A handle to read the counters while `run` is going.
    pub fn handle(&self) -> WorkerHandle {
        WorkerHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Runs until `shutdown` completes, then drains: stops taking tasks,
    /// waits up to the drain timeout for in-flight handlers, sends their
    /// results, closes the stream and returns. Never returns on its own
    /// before that: broker failures are retried with backoff.
    ///
    /// Returns [`WorkerError::DrainIncomplete`] if the drain timed out with
    /// work left.
    pub async fn run<F: Future<Output = ()>>(self, shutdown: F) -> Result<(), WorkerError> {
        let channel = match self.target {
            Target::Endpoint(endpoint, None) => endpoint.connect_lazy(),
            Target::Endpoint(endpoint, Some(tls)) => crate::tls::lazy_channel(&endpoint, tls),
            Target::Channel(channel) => channel,
        };
        let client = WorkerServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let settings = &self.shared.settings;
        let mut run = Run {
            backoff: Backoff::new(settings.backoff_base, settings.backoff_max),
            shared: self.shared,
            client,
            tasks: JoinSet::new(),
            drain_deadline: None,
        };
        let mut shutdown = std::pin::pin!(shutdown);
        if !run.prime(shutdown.as_mut()).await {
            return Ok(());
        }
        let refresher = AbortOnDrop(tokio::spawn(refresh_configs(
            Arc::clone(&run.shared),
            run.client.clone(),
        )));
        let result = run.serve(shutdown).await;
        drop(refresher);
        result
    }
}

/// Aborts a background task when the run ends, however it ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The state of one `run`, handed to each session.
pub(crate) struct Run {
    pub(crate) shared: Arc<Shared>,
    pub(crate) client: WorkerServiceClient<Channel>,
    /// Running task futures. They belong to the run, not to a session, so a
    /// stream drop does not cancel them; dropping the run aborts them.
    pub(crate) tasks: JoinSet<()>,
    /// Set once shutdown was requested: when the drain gives up.
    pub(crate) drain_deadline: Option<Instant>,
    backoff: Backoff,
}

impl Run {
    /// Enters drain mode (idempotent).
    pub(crate) fn start_drain(&mut self) {
        if self.drain_deadline.is_none() {
            tracing::info!(timeout = ?self.shared.settings.drain_timeout, "shutdown requested; draining");
            self.drain_deadline = Some(Instant::now() + self.shared.settings.drain_timeout);
        }
    }

    pub(crate) fn draining(&self) -> bool {
        self.drain_deadline.is_some()
    }

    /// Primes the config cache, retrying until the broker answers. False if
    /// shutdown came first.
    async fn prime<F: Future<Output = ()>>(&mut self, mut shutdown: Pin<&mut F>) -> bool {
        let settings = &self.shared.settings;
        let mut backoff = Backoff::new(settings.backoff_base, settings.backoff_max);
        loop {
            tokio::select! {
                result = fetch_configs(&self.shared, &mut self.client) => match result {
                    Ok(()) => return true,
                    Err(status) => tracing::warn!(%status, "cannot fetch provider configs; retrying"),
                },
                () = &mut shutdown => return false,
            }
            tokio::select! {
                () = tokio::time::sleep(backoff.next_delay()) => {}
                () = &mut shutdown => return false,
            }
        }
    }

    /// The reconnect loop.
    async fn serve<F: Future<Output = ()>>(&mut self, mut shutdown: Pin<&mut F>) -> Result<(), WorkerError> {
        loop {
            if let Some(deadline) = self.drain_deadline {
                let (running, undelivered) = self.shared.outstanding();
                if running == 0 && undelivered == 0 {
                    return Ok(());
                }
                if Instant::now() >= deadline {
                    return Err(WorkerError::DrainIncomplete { running, undelivered });
                }
            }
            match run_session(self, shutdown.as_mut()).await {
                SessionEnd::Closed => {
                    let (running, undelivered) = self.shared.outstanding();
                    if running == 0 && undelivered == 0 {
                        return Ok(());
                    }
                    return Err(WorkerError::DrainIncomplete { running, undelivered });
                }
                SessionEnd::Lost { healthy } => {
                    self.shared.counters.reconnects.fetch_add(1, Ordering::Relaxed);
                    if healthy {
                        self.backoff.reset();
                    }
                }
                SessionEnd::NotOpened => {}
            }
            // Nothing left to deliver: no reason to reconnect just to close.
            if self.draining() && self.shared.outstanding() == (0, 0) {
                return Ok(());
            }
            let delay = self.backoff.next_delay();
            tracing::debug!(?delay, "reconnecting after backoff");
            let drain_deadline = self.drain_deadline;
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = &mut shutdown, if drain_deadline.is_none() => self.start_drain(),
                () = sleep_until_opt(drain_deadline), if drain_deadline.is_some() => {}
            }
        }
    }
}

/// Sleeps until `deadline`, or forever without one.
pub(crate) async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Fetches the default config of every served pair and applies it. Pairs the
/// broker omits have no default.
async fn fetch_configs(shared: &Shared, client: &mut WorkerServiceClient<Channel>) -> Result<(), tonic::Status> {
    let request = GetProviderConfigRequest {
        kinds: shared.providers.keys().map(kind_to_proto).collect(),
    };
    let epoch = shared.config_epoch();
    let mut request = tonic::Request::new(request);
    request.set_timeout(shared.settings.rpc_timeout);
    let response = tokio::time::timeout(shared.settings.rpc_timeout, client.get_provider_config(request))
        .await
        .map_err(|_| tonic::Status::deadline_exceeded("GetProviderConfig timed out"))??
        .into_inner();
    let mut configs: BTreeMap<KindVersion, _> = shared.providers.keys().map(|k| (k.clone(), None)).collect();
    for entry in response.entries {
        let kind = KindVersion::new(entry.kind, entry.kind_version);
        if let Some(slot) = configs.get_mut(&kind) {
            *slot = provider_config(entry.spec, entry.data);
        }
    }
    for (kind, config) in configs {
        shared.apply_fetched_config(&kind, config, epoch);
    }
    Ok(())
}

/// The failsafe refresher: re-pulls configs periodically and whenever a
/// session asks (on every (re)connect).
async fn refresh_configs(shared: Arc<Shared>, mut client: WorkerServiceClient<Channel>) {
    let interval = shared.settings.config_refresh_interval;
    loop {
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = shared.config_repull.notified() => {}
        }
        if let Err(status) = fetch_configs(&shared, &mut client).await {
            tracing::debug!(%status, "provider config refresh failed");
        }
    }
}
