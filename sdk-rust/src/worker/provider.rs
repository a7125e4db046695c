//! The [`Provider`] trait: the code that serves one `(kind, kind_version)`.

use async_trait::async_trait;

use super::outcome::{HandlerError, Outcome};
use super::request::ReactionRequest;
use super::types::{KindVersion, ProviderConfig};

/// Serves exactly one `(kind, kind_version)`. A worker hosts one instance per
/// pair it serves; the runtime calls it concurrently (up to the worker's
/// `max_parallel`), so implementations use interior mutability for state.
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// The pair this provider serves. Must be stable.
    fn kind(&self) -> KindVersion;

    /// Runs one task and returns its outcome. Dispatch on
    /// `request.reaction`; return [`HandlerError::unknown_reaction`] for names
    /// the provider does not know. The future is dropped (cancelled) when the
    /// task's deadline passes; a panic becomes a transient failure.
    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError>;

    /// Whether the provider can take tasks now (polled by the runtime; keep
    /// it cheap and non-blocking). A provider that is not ready gets no new
    /// tasks, and a task that still arrives fails transiently.
    fn ready(&self) -> bool {
        true
    }

    /// Whether the provider cannot work without its kind's default provider
    /// config (credentials, an endpoint, ...). When true, the runtime
    /// reports the pair unready until a default has arrived, and again if it
    /// is deleted: the broker sends no tasks meanwhile, and resumes the
    /// moment the default arrives. Default false.
    fn requires_default_config(&self) -> bool {
        false
    }

    /// The kind's default provider config changed: called once after it is
    /// first fetched and then on every change (refresh or push). `None` = the
    /// kind has no default config (or it was deleted). Keep it quick.
    fn on_config(&self, _config: Option<ProviderConfig>) {}
}
