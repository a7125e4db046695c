//! State shared by the run loop, the sessions and the running tasks. It
//! lives for the whole `run`, not for one stream, which is what lets handlers
//! outlive a stream drop.

use std::collections::{BTreeMap, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use converge_proto::worker_v1::{LeaseRef, ResumedTask, StageComplete};
use tokio::sync::{Notify, Semaphore};

use super::buffer::ResultBuffer;
use super::config::Settings;
use super::provider::Provider;
use super::runtime::WorkerStats;
use super::types::{KindVersion, ProviderConfig};

/// Locks a mutex, ignoring poisoning: every critical section here only moves
/// plain data, so a panic elsewhere cannot leave it half-updated.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Tasks accepted and not yet resolved: running (or waiting for a slot) and
/// finished-but-unsent. One lock so a task is always in exactly one of them.
#[derive(Debug)]
struct TaskBook {
    /// lease_token -> claim_epoch of accepted tasks whose handler has not
    /// finished.
    running: HashMap<String, i64>,
    /// Finished results not yet handed to a stream.
    results: ResultBuffer,
    /// Results handed to a stream and not yet acknowledged by the broker
    /// (ResultAck), oldest first: sent again on the next stream.
    unacked: ResultBuffer,
}

/// The default provider configs as last applied.
#[derive(Debug, Default)]
struct ConfigCache {
    /// A missing key means "never applied", `Some(None)` "no default".
    current: HashMap<KindVersion, Option<ProviderConfig>>,
    /// Pushes received so far.
    pushes: u64,
    /// Per pair, the value of `pushes` when its last push arrived. A fetch
    /// that started before that push may carry older data and must not
    /// overwrite it.
    pushed_at: HashMap<KindVersion, u64>,
}

/// Monotonic counters behind [`WorkerStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) completed: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) buffered_dropped: AtomicU64,
    pub(crate) reconnects: AtomicU64,
    pub(crate) sessions: AtomicU64,
}

pub(crate) struct Shared {
    pub(crate) providers: BTreeMap<KindVersion, Arc<dyn Provider>>,
    pub(crate) settings: Settings,
    /// One permit per handler slot.
    pub(crate) slots: Semaphore,
    book: Mutex<TaskBook>,
    /// Signalled whenever a result lands in the buffer.
    pub(crate) results_ready: Notify,
    configs: Mutex<ConfigCache>,
    /// Asks the config refresher for an immediate re-pull.
    pub(crate) config_repull: Notify,
    /// Signalled when a default config changed, so readiness that depends on
    /// it is re-announced at once instead of at the next poll.
    pub(crate) configs_changed: Notify,
    pub(crate) counters: Counters,
}

impl Shared {
    pub(crate) fn new(providers: BTreeMap<KindVersion, Arc<dyn Provider>>, settings: Settings) -> Self {
        Self {
            slots: Semaphore::new(settings.max_parallel),
            book: Mutex::new(TaskBook {
                running: HashMap::new(),
                results: ResultBuffer::new(settings.result_buffer_capacity),
                unacked: ResultBuffer::new(settings.result_buffer_capacity),
            }),
            providers,
            settings,
            results_ready: Notify::new(),
            configs: Mutex::new(ConfigCache::default()),
            config_repull: Notify::new(),
            configs_changed: Notify::new(),
            counters: Counters::default(),
        }
    }

    /// Records an accepted task. False if the lease is already running (a
    /// duplicate delivery, which is ignored).
    pub(crate) fn begin(&self, lease_token: &str, claim_epoch: i64) -> bool {
        let mut book = lock(&self.book);
        if book.running.contains_key(lease_token) {
            return false;
        }
        book.running.insert(lease_token.to_owned(), claim_epoch);
        true
    }

    /// Moves a task from running to the result buffer and wakes the session.
    pub(crate) fn finish(&self, complete: StageComplete) {
        let failed = complete.error.is_some();
        let dropped = {
            let mut book = lock(&self.book);
            book.running.remove(&complete.lease_token);
            book.results.push(complete)
        };
        let counter = if failed {
            &self.counters.failed
        } else {
            &self.counters.completed
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if let Some(dropped) = dropped {
            self.counters.buffered_dropped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(lease = %dropped.lease_token, "result buffer full; discarded the oldest result");
        }
        self.results_ready.notify_one();
    }

    pub(crate) fn pop_result(&self) -> Option<StageComplete> {
        lock(&self.book).results.pop()
    }

    /// Puts back a result that could not be sent.
    pub(crate) fn unpop_result(&self, complete: StageComplete) {
        if let Some(dropped) = lock(&self.book).results.push_front(complete) {
            self.counters.buffered_dropped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(lease = %dropped.lease_token, "result buffer full; discarded the oldest result");
        }
    }

    /// Keeps a result handed to a stream until the broker acknowledges it.
    pub(crate) fn sent(&self, complete: StageComplete) {
        if let Some(dropped) = lock(&self.book).unacked.push(complete) {
            self.counters.buffered_dropped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(lease = %dropped.lease_token, "too many unacknowledged results; forgot the oldest");
        }
    }

    /// Forgets the results the broker acknowledged.
    pub(crate) fn acknowledge(&self, leases: &[LeaseRef]) {
        let tokens: std::collections::HashSet<&str> = leases.iter().map(|l| l.lease_token.as_str()).collect();
        lock(&self.book)
            .unacked
            .retain(|c| !tokens.contains(c.lease_token.as_str()));
    }

    /// Puts the unacknowledged results back in front of the buffer, to be
    /// sent again on a new stream (the fence drops a copy the broker had
    /// already written).
    pub(crate) fn requeue_unacknowledged(&self) {
        let mut book = lock(&self.book);
        let book = &mut *book;
        let mut dropped = 0;
        while let Some(complete) = book.unacked.pop_back() {
            if book.results.push_front(complete).is_some() {
                dropped += 1;
            }
        }
        if dropped > 0 {
            self.counters.buffered_dropped.fetch_add(dropped, Ordering::Relaxed);
            tracing::warn!(
                dropped,
                "result buffer full; discarded the oldest unacknowledged results"
            );
        }
    }

    /// Leases to attest in a heartbeat, sorted: those of accepted tasks
    /// whose handlers have not finished, and of results not yet
    /// acknowledged (the broker may be waiting for the database to write
    /// them).
    pub(crate) fn attested_leases(&self) -> Vec<LeaseRef> {
        let book = lock(&self.book);
        let mut leases: Vec<LeaseRef> = book
            .running
            .iter()
            .map(|(token, epoch)| (token.as_str(), *epoch))
            .chain(book.unacked.leases())
            .map(|(token, epoch)| LeaseRef {
                lease_token: token.to_owned(),
                claim_epoch: epoch,
            })
            .collect();
        leases.sort_by(|a, b| a.lease_token.cmp(&b.lease_token));
        leases.dedup();
        leases
    }

    /// Tasks to list in `Subscribe.resumed`: running or result-buffered.
    pub(crate) fn resumed(&self) -> Vec<ResumedTask> {
        let book = lock(&self.book);
        let mut resumed: Vec<ResumedTask> = book
            .running
            .iter()
            .map(|(token, epoch)| (token.as_str(), *epoch))
            .chain(book.results.leases())
            .map(|(token, epoch)| ResumedTask {
                lease_token: token.to_owned(),
                claim_epoch: epoch,
            })
            .collect();
        resumed.sort_by(|a, b| a.lease_token.cmp(&b.lease_token));
        resumed.dedup();
        resumed
    }

    /// (running handlers, results not yet acknowledged: unsent or sent).
    pub(crate) fn outstanding(&self) -> (usize, usize) {
        let book = lock(&self.book);
        (book.running.len(), book.results.len() + book.unacked.len())
    }

    /// A provider's readiness: its own `ready()` (a panic counts as not
    /// ready) and, if it requires one, a default config in the cache.
    pub(crate) fn is_ready(&self, kind: &KindVersion, provider: &dyn Provider) -> bool {
        let own = std::panic::catch_unwind(AssertUnwindSafe(|| provider.ready())).unwrap_or(false);
        own && (!provider.requires_default_config() || self.default_config(kind).is_some())
    }

    /// The cached default config of a pair.
    pub(crate) fn default_config(&self, kind: &KindVersion) -> Option<ProviderConfig> {
        lock(&self.configs).current.get(kind).cloned().flatten()
    }

    /// Marks the start of a config fetch; pass the value to
    /// [`Self::apply_fetched_config`].
    pub(crate) fn config_epoch(&self) -> u64 {
        lock(&self.configs).pushes
    }

    /// Applies a fetched config unless a push for the pair arrived after the
    /// fetch started (`epoch`), which makes the fetched value possibly stale.
    pub(crate) fn apply_fetched_config(&self, kind: &KindVersion, config: Option<ProviderConfig>, epoch: u64) {
        let mut cache = lock(&self.configs);
        if cache.pushed_at.get(kind).is_some_and(|&at| at > epoch) {
            tracing::debug!(%kind, "fetched provider config is older than a push; ignored");
            return;
        }
        self.set_config(&mut cache, kind, config);
    }

    /// Applies a pushed config.
    pub(crate) fn apply_pushed_config(&self, kind: &KindVersion, config: Option<ProviderConfig>) {
        let mut cache = lock(&self.configs);
        cache.pushes += 1;
        let at = cache.pushes;
        cache.pushed_at.insert(kind.clone(), at);
        self.set_config(&mut cache, kind, config);
    }

    /// Stores a pair's default config and calls `on_config` if it changed
    /// (or was never set). The cache lock is held across the call so
    /// callbacks are never concurrent or reordered against the cache.
    fn set_config(&self, cache: &mut ConfigCache, kind: &KindVersion, config: Option<ProviderConfig>) {
        let Some(provider) = self.providers.get(kind) else {
            tracing::debug!(%kind, "ignoring a provider config for a pair this worker does not serve");
            return;
        };
        if cache.current.get(kind) == Some(&config) {
            return;
        }
        cache.current.insert(kind.clone(), config.clone());
        tracing::debug!(%kind, present = config.is_some(), "provider config changed");
        if std::panic::catch_unwind(AssertUnwindSafe(|| provider.on_config(config))).is_err() {
            tracing::error!(%kind, "on_config panicked");
        }
        self.configs_changed.notify_one();
    }

    pub(crate) fn stats(&self) -> WorkerStats {
        let (running, buffered) = self.outstanding();
        let c = &self.counters;
        WorkerStats {
            completed: c.completed.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            buffered_dropped: c.buffered_dropped.load(Ordering::Relaxed),
            reconnects: c.reconnects.load(Ordering::Relaxed),
            sessions: c.sessions.load(Ordering::Relaxed),
            running,
            buffered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::{HandlerError, Outcome, ReactionRequest};
    use serde_json::json;

    struct Recorder(Mutex<Vec<Option<ProviderConfig>>>);

    #[async_trait::async_trait]
    impl Provider for Recorder {
        fn kind(&self) -> KindVersion {
            KindVersion::new("k", 1)
        }
        async fn handle(&self, _request: ReactionRequest) -> Result<Outcome, HandlerError> {
            Ok(Outcome::new())
        }
        fn on_config(&self, config: Option<ProviderConfig>) {
            self.0.lock().unwrap().push(config);
        }
    }

    fn config(n: i64) -> Option<ProviderConfig> {
        Some(ProviderConfig {
            spec: Some(json!({ "n": n })),
            data: Vec::new(),
        })
    }

    #[test]
    fn a_fetch_older_than_a_push_does_not_overwrite_it() {
        let recorder = Arc::new(Recorder(Mutex::new(Vec::new())));
        let kind = KindVersion::new("k", 1);
        let providers = BTreeMap::from([(kind.clone(), Arc::clone(&recorder) as Arc<dyn Provider>)]);
        let shared = Shared::new(providers, Settings::default());

        shared.apply_fetched_config(&kind, None, shared.config_epoch());
        let epoch = shared.config_epoch();
        shared.apply_pushed_config(&kind, config(2));
        // A fetch that started before the push answers with older data.
        shared.apply_fetched_config(&kind, config(1), epoch);
        assert_eq!(shared.default_config(&kind), config(2));
        // Unchanged values do not call on_config again.
        shared.apply_fetched_config(&kind, config(2), shared.config_epoch());
        // A fetch that started after the push is authoritative.
        shared.apply_fetched_config(&kind, config(3), shared.config_epoch());
        assert_eq!(shared.default_config(&kind), config(3));
        assert_eq!(*recorder.0.lock().unwrap(), [None, config(2), config(3)]);
    }

    /// A provider that cannot work without its default config.
    struct NeedsConfig;

    #[async_trait::async_trait]
    impl Provider for NeedsConfig {
        fn kind(&self) -> KindVersion {
            KindVersion::new("k", 1)
        }
        async fn handle(&self, _request: ReactionRequest) -> Result<Outcome, HandlerError> {
            Ok(Outcome::new())
        }
        fn requires_default_config(&self) -> bool {
            true
        }
    }

    #[tokio::test]
    async fn a_provider_that_requires_its_default_is_ready_only_while_one_is_cached() {
        let kind = KindVersion::new("k", 1);
        let provider: Arc<dyn Provider> = Arc::new(NeedsConfig);
        let shared = Shared::new(BTreeMap::from([(kind.clone(), provider.clone())]), Settings::default());
        assert!(!shared.is_ready(&kind, provider.as_ref()), "nothing fetched yet");
        shared.apply_fetched_config(&kind, None, shared.config_epoch());
        assert!(!shared.is_ready(&kind, provider.as_ref()), "the pair has no default");
        shared.apply_pushed_config(&kind, config(1));
        // The session is woken to announce the change at once.
        tokio::time::timeout(std::time::Duration::from_secs(1), shared.configs_changed.notified())
            .await
            .expect("a config change wakes the readiness check");
        assert!(shared.is_ready(&kind, provider.as_ref()));
        shared.apply_pushed_config(&kind, None);
        assert!(!shared.is_ready(&kind, provider.as_ref()), "the default was deleted");
    }
}
