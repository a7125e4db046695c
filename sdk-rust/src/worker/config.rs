//! Worker settings and the [`WorkerBuilder`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

use super::provider::Provider;
use super::runtime::{Worker, WorkerError};
use super::types::KindVersion;

/// Default number of handlers running at once.
pub const DEFAULT_MAX_PARALLEL: usize = 16;
/// Default interval between liveness attestations.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);
/// Default interval between `ready()` polls.
pub const DEFAULT_READINESS_POLL_INTERVAL: Duration = Duration::from_secs(2);
/// Default time in-flight handlers get to finish on shutdown.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Default interval between failsafe `GetProviderConfig` refreshes.
pub const DEFAULT_CONFIG_REFRESH_INTERVAL: Duration = Duration::from_secs(60);
/// Default first reconnect delay.
pub const DEFAULT_BACKOFF_BASE: Duration = Duration::from_millis(100);
/// Default longest reconnect delay.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Default number of results kept for redelivery while disconnected.
pub const DEFAULT_RESULT_BUFFER_CAPACITY: usize = 1024;
/// Default time a session must last to count as healthy (resets the backoff).
pub const DEFAULT_HEALTHY_SESSION: Duration = Duration::from_secs(10);
/// Default bound on a unary call and on opening the stream.
pub const DEFAULT_RPC_TIMEOUT: Duration = Duration::from_secs(10);

/// The tunables of a worker, validated by [`WorkerBuilder::build`].
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) max_parallel: usize,
    pub(crate) heartbeat_interval: Duration,
    pub(crate) readiness_poll_interval: Duration,
    pub(crate) drain_timeout: Duration,
    pub(crate) config_refresh_interval: Duration,
    pub(crate) backoff_base: Duration,
    pub(crate) backoff_max: Duration,
    pub(crate) result_buffer_capacity: usize,
    pub(crate) healthy_session: Duration,
    pub(crate) rpc_timeout: Duration,
    pub(crate) agent: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_parallel: DEFAULT_MAX_PARALLEL,
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            readiness_poll_interval: DEFAULT_READINESS_POLL_INTERVAL,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            config_refresh_interval: DEFAULT_CONFIG_REFRESH_INTERVAL,
            backoff_base: DEFAULT_BACKOFF_BASE,
            backoff_max: DEFAULT_BACKOFF_MAX,
            result_buffer_capacity: DEFAULT_RESULT_BUFFER_CAPACITY,
            healthy_session: DEFAULT_HEALTHY_SESSION,
            rpc_timeout: DEFAULT_RPC_TIMEOUT,
            agent: format!("converge-sdk-rust/{}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// Where the worker reaches its broker.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// A parsed endpoint and, for TLS, the client configuration; the
    /// channel is created lazily inside the runtime.
    Endpoint(Box<Endpoint>, Option<crate::tls::ClientTls>),
    /// A caller-provided channel.
    Channel(Channel),
}

/// Builds a [`Worker`]. Every setting has a default; only the broker and at
/// least one provider are required.
#[derive(Default)]
pub struct WorkerBuilder {
    address: Option<String>,
    tls: Option<crate::tls::ClientTls>,
    channel: Option<Channel>,
    providers: Vec<Arc<dyn Provider>>,
    settings: Settings,
}

impl std::fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("address", &self.address)
            .field(
                "providers",
                &self.providers.iter().map(|p| p.kind()).collect::<Vec<_>>(),
            )
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    /// A builder with default settings.
    pub fn new() -> Self {
        Self::default()
    }

    /// The broker's address, e.g. `http://127.0.0.1:50051` (HTTP/2 without
    /// TLS, unless [`tls`](Self::tls) is set). Replaces a channel set earlier.
    pub fn endpoint(mut self, address: impl Into<String>) -> Self {
        self.address = Some(address.into());
        self.channel = None;
        self
    }

    /// Connects to the [`endpoint`](Self::endpoint) over TLS with `tls`
    /// (its files are re-read on its interval: a reconnect after a
    /// rotation presents the new client certificate).
    pub fn tls(mut self, tls: crate::tls::ClientTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// An existing channel to the broker (e.g. one with TLS). Replaces an
    /// address set earlier.
    pub fn channel(mut self, channel: Channel) -> Self {
        self.channel = Some(channel);
        self.address = None;
        self
    }

    /// Adds a provider.
    pub fn provider(self, provider: impl Provider) -> Self {
        self.provider_arc(Arc::new(provider))
    }

    /// Adds a shared provider.
    pub fn provider_arc(mut self, provider: Arc<dyn Provider>) -> Self {
        self.providers.push(provider);
        self
    }

    /// Most handlers running at once, also sent as `max_inflight` (default 16).
    pub fn max_parallel(mut self, n: usize) -> Self {
        self.settings.max_parallel = n;
        self
    }

    /// Interval between heartbeats (default 5 s).
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.settings.heartbeat_interval = interval;
        self
    }

    /// Interval between `ready()` polls (default 2 s).
    pub fn readiness_poll_interval(mut self, interval: Duration) -> Self {
        self.settings.readiness_poll_interval = interval;
        self
    }

    /// How long shutdown waits for in-flight handlers (default 30 s).
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.settings.drain_timeout = timeout;
        self
    }

    /// Interval between failsafe config refreshes (default 60 s).
    pub fn config_refresh_interval(mut self, interval: Duration) -> Self {
        self.settings.config_refresh_interval = interval;
        self
    }

    /// Reconnect backoff: first delay and ceiling (default 100 ms, 30 s).
    pub fn reconnect_backoff(mut self, base: Duration, max: Duration) -> Self {
        self.settings.backoff_base = base;
        self.settings.backoff_max = max;
        self
    }

    /// Results kept for redelivery while disconnected (default 1024).
    pub fn result_buffer_capacity(mut self, capacity: usize) -> Self {
        self.settings.result_buffer_capacity = capacity;
        self
    }

    /// How long a session must last to count as healthy and reset the
    /// reconnect backoff (default 10 s; receiving a task also counts).
    pub fn healthy_session_after(mut self, duration: Duration) -> Self {
        self.settings.healthy_session = duration;
        self
    }

    /// Bound on each unary call and on opening the stream (default 10 s).
    pub fn rpc_timeout(mut self, timeout: Duration) -> Self {
        self.settings.rpc_timeout = timeout;
        self
    }

    /// The `agent` string sent in `Subscribe` (display only).
    pub fn agent(mut self, agent: impl Into<String>) -> Self {
        self.settings.agent = agent.into();
        self
    }

    /// Validates the settings and builds the worker. Needs no runtime and
    /// does not connect.
    pub fn build(self) -> Result<Worker, WorkerError> {
        let s = &self.settings;
        let positive = [
            ("heartbeat_interval", s.heartbeat_interval),
            ("readiness_poll_interval", s.readiness_poll_interval),
            ("config_refresh_interval", s.config_refresh_interval),
            ("reconnect_backoff base", s.backoff_base),
            ("rpc_timeout", s.rpc_timeout),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, d)| d.is_zero()) {
            return Err(WorkerError::InvalidSetting {
                name,
                reason: "must be greater than zero",
            });
        }
        if s.max_parallel == 0 || i32::try_from(s.max_parallel).is_err() {
            return Err(WorkerError::InvalidSetting {
                name: "max_parallel",
                reason: "must be between 1 and 2^31-1",
            });
        }
        if s.result_buffer_capacity == 0 {
            return Err(WorkerError::InvalidSetting {
                name: "result_buffer_capacity",
                reason: "must be at least 1",
            });
        }
        if self.providers.is_empty() {
            return Err(WorkerError::NoProviders);
        }
        let mut providers = BTreeMap::new();
        for provider in self.providers {
            let kind: KindVersion = provider.kind();
            if kind.kind.is_empty() || kind.version < 1 {
                return Err(WorkerError::InvalidKind(kind));
            }
            if providers.insert(kind.clone(), provider).is_some() {
                return Err(WorkerError::DuplicateProvider(kind));
            }
        }
        let target = match (self.address, self.channel) {
            (_, Some(channel)) => Target::Channel(channel),
            (Some(address), None) => {
                let endpoint = Endpoint::from_shared(address.clone())
                    .map_err(|source| WorkerError::InvalidEndpoint { address, source })?
                    .connect_timeout(Duration::from_secs(5))
                    .tcp_nodelay(true)
                    // The broker sends no keepalive of its own; HTTP/2 pings
                    // are how a silently dead broker is noticed.
                    .http2_keep_alive_interval(Duration::from_secs(10))
                    .keep_alive_timeout(Duration::from_secs(10))
                    .keep_alive_while_idle(true);
                Target::Endpoint(Box::new(endpoint), self.tls)
            }
            (None, None) => return Err(WorkerError::NoEndpoint),
        };
        Ok(Worker::new(target, providers, self.settings))
    }
}
