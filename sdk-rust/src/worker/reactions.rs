//! [`Reactions`]: a provider built from a table of handlers, one per
//! reaction name, as `Reactions` in the Go, Python and TypeScript SDKs.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;

use super::outcome::{HandlerError, Outcome};
use super::provider::Provider;
use super::request::ReactionRequest;
use super::types::KindVersion;

/// The handler of one reaction in a [`Reactions`] table.
pub type ReactionHandler =
    Arc<dyn Fn(ReactionRequest) -> BoxFuture<'static, Result<Outcome, HandlerError>> + Send + Sync>;

/// A [`Provider`] that dispatches each task to the handler registered for
/// its reaction name (`work`, `compose`, `rollup`, `teardown`,
/// `operate:<verb>`, ...):
///
/// ```
/// use converge_sdk::worker::{KindVersion, Outcome, Reactions};
///
/// let noop = Reactions::new(KindVersion::new("noop", 1))
///     .reaction("work", |request| async move {
///         Ok(Outcome::new().with_status(serde_json::json!({"observed_generation": request.generation})))
///     })
///     .reaction("teardown", |_| async { Ok(Outcome::new()) });
/// ```
///
/// A reaction with no handler fails transiently with
/// [`HandlerError::unknown_reaction`] (reason
/// [`UNKNOWN_REACTION_REASON`](super::UNKNOWN_REACTION_REASON)): a newer
/// worker for the pair may know it, and the kind's `max_transient_attempts`
/// bounds the retries. For readiness or provider-config callbacks,
/// implement [`Provider`] and delegate `handle` to a `Reactions`.
#[derive(Clone)]
pub struct Reactions {
    kind: KindVersion,
    handlers: BTreeMap<String, ReactionHandler>,
}

impl std::fmt::Debug for Reactions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reactions")
            .field("kind", &self.kind)
            .field("reactions", &self.handlers.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Reactions {
    /// An empty table serving `kind`.
    pub fn new(kind: KindVersion) -> Self {
        Self {
            kind,
            handlers: BTreeMap::new(),
        }
    }

    /// Registers the handler of reaction `name`, replacing any earlier one.
    pub fn reaction<F, Fut>(mut self, name: impl Into<String>, handler: F) -> Self
    where
        F: Fn(ReactionRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Outcome, HandlerError>> + Send + 'static,
    {
        let handler: ReactionHandler = Arc::new(move |request| Box::pin(handler(request)));
        self.handlers.insert(name.into(), handler);
        self
    }

    /// The reaction names with a handler, sorted.
    pub fn reactions(&self) -> impl Iterator<Item = &str> {
        self.handlers.keys().map(String::as_str)
    }
}

#[async_trait]
impl Provider for Reactions {
    fn kind(&self) -> KindVersion {
        self.kind.clone()
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        match self.handlers.get(&request.reaction) {
            Some(handler) => handler(request).await,
            None => Err(HandlerError::unknown_reaction(&request.reaction, &self.kind)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::types::{Resource, Stage, StageInput, Trigger};
    use crate::worker::{UNKNOWN_REACTION_REASON, WorkInput};

    fn request(reaction: &str) -> ReactionRequest {
        ReactionRequest {
            reaction: reaction.to_owned(),
            stage: Stage::Work,
            trigger: Trigger::SpecChange,
            plan: false,
            kind: KindVersion::new("noop", 1),
            resource: Resource {
                uid: "u".into(),
                kind: "noop".into(),
                kind_version: 1,
                name: "r".into(),
                labels: Default::default(),
                spec: serde_json::json!({}),
                status: None,
                generation: 3,
                observed_generation: 0,
                ready: false,
                healthy: false,
                owner: None,
                root: None,
                finalizers: Vec::new(),
                delete_time: None,
                orphan_expire_time: None,
                quarantined: false,
            },
            generation: 3,
            attempt: 1,
            input: StageInput::Work(WorkInput::default()),
            default_config: None,
            config_override: None,
            bundle_override: Vec::new(),
            deadline: None,
        }
    }

    #[tokio::test]
    async fn a_task_runs_the_handler_of_its_reaction() {
        let table = Reactions::new(KindVersion::new("noop", 1))
            .reaction("work", |request| async move {
                Ok(Outcome::new().with_status(serde_json::json!({"generation": request.generation})))
            })
            .reaction("teardown", |_| async { Err(HandlerError::terminal("no")) });
        assert_eq!(table.reactions().collect::<Vec<_>>(), ["teardown", "work"]);
        assert_eq!(Provider::kind(&table), KindVersion::new("noop", 1));
        let outcome = table.handle(request("work")).await;
        assert_eq!(
            outcome.map(|o| o.status),
            Ok(Some(serde_json::json!({"generation": 3})))
        );
        assert!(table.handle(request("teardown")).await.is_err_and(|e| e.is_terminal()));
    }

    #[tokio::test]
    async fn an_unknown_reaction_fails_transiently_with_its_reason() {
        let table = Reactions::new(KindVersion::new("noop", 1));
        let Err(error) = table.handle(request("operate:reboot")).await else {
            panic!("an unknown reaction must fail");
        };
        assert!(!error.is_terminal());
        assert_eq!(error.reason(), UNKNOWN_REACTION_REASON);
        assert!(error.message().contains("operate:reboot"), "{error:?}");
    }
}
