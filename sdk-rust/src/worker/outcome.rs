//! What a handler returns: an [`Outcome`] on success or a [`HandlerError`].

use std::fmt;
use std::time::Duration;

use serde_json::Value;

use super::types::{ChildSpec, Condition, DepEdge, Event, ProviderConfigSpec};

/// The result of a successful handler run. Only the parts the reaction's
/// manifest entry declares in `emits` are applied by the broker.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Outcome {
    /// New status document (a JSON object); `None` = unchanged.
    pub status: Option<Value>,
    /// Conditions to record.
    pub conditions: Vec<Condition>,
    /// The desired children (compose). For a compose task the children,
    /// edges and configs are always sent and replace the previous
    /// composition, so empty lists prune everything.
    pub children: Vec<ChildSpec>,
    /// Dependency edges among the children (compose).
    pub edges: Vec<DepEdge>,
    /// Provider configs the resource should own (compose).
    pub configs: Vec<ProviderConfigSpec>,
    /// Output document of an operation (a JSON object).
    pub operation_output: Option<Value>,
    /// Explicit health; `None` = taken from a Ready condition, if any.
    pub healthy: Option<bool>,
    /// "Not done yet": apply the parts but run the task again after this
    /// delay. Not a failure.
    pub requeue_after: Option<Duration>,
    /// Events to record on the resource's timelines (at most 16; recorded
    /// whatever the reaction emits).
    pub events: Vec<Event>,
}

impl Outcome {
    /// An empty outcome: success, nothing changed.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the status document.
    pub fn with_status(mut self, status: Value) -> Self {
        self.status = Some(status);
        self
    }

    /// Adds a condition.
    pub fn with_condition(mut self, condition: Condition) -> Self {
        self.conditions.push(condition);
        self
    }

    /// Adds a desired child.
    pub fn with_child(mut self, child: ChildSpec) -> Self {
        self.children.push(child);
        self
    }

    /// Adds a dependency edge.
    pub fn with_edge(mut self, edge: DepEdge) -> Self {
        self.edges.push(edge);
        self
    }

    /// Adds an owned provider config.
    pub fn with_config(mut self, config: ProviderConfigSpec) -> Self {
        self.configs.push(config);
        self
    }

    /// Sets the operation output.
    pub fn with_operation_output(mut self, output: Value) -> Self {
        self.operation_output = Some(output);
        self
    }

    /// Sets the explicit health.
    pub fn with_healthy(mut self, healthy: bool) -> Self {
        self.healthy = Some(healthy);
        self
    }

    /// Asks to run the task again after `delay`.
    pub fn with_requeue_after(mut self, delay: Duration) -> Self {
        self.requeue_after = Some(delay);
        self
    }

    /// Adds an event.
    pub fn with_event(mut self, event: Event) -> Self {
        self.events.push(event);
        self
    }
}

/// The reason of a failure caused by the task deadline. The runtime gives
/// it to a handler it cut off; the server reports an operation whose last
/// attempt failed with it as DEADLINE_EXCEEDED.
pub const DEADLINE_EXCEEDED_REASON: &str = "DeadlineExceeded";

/// The reason of the failure [`HandlerError::unknown_reaction`] makes: a task
/// named a reaction its provider has no handler for.
pub const UNKNOWN_REACTION_REASON: &str = "UnknownReaction";

/// A failed handler run.
///
/// Transient errors are retried by the broker with backoff; terminal errors
/// mark the generation failed at once. Any `std::error::Error` converts into a
/// transient error, so `?` works in handlers. (This type deliberately does
/// not implement `std::error::Error` itself, which is what makes that blanket
/// conversion possible.)
#[derive(Clone, PartialEq)]
pub struct HandlerError {
    message: String,
    terminal: bool,
    reason: String,
    events: Vec<Event>,
}

impl HandlerError {
    /// A failure that retrying may fix.
    pub fn transient(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            terminal: false,
            reason: String::new(),
            events: Vec::new(),
        }
    }

    /// A failure that retrying cannot fix.
    pub fn terminal(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            terminal: true,
            reason: String::new(),
            events: Vec::new(),
        }
    }

    /// Wraps any error as a terminal failure.
    pub fn terminal_from(error: impl std::error::Error) -> Self {
        Self::terminal(error_chain(&error))
    }

    /// The transient failure a provider should return for a reaction name it
    /// does not handle, with reason [`UNKNOWN_REACTION_REASON`]: a newer
    /// worker for the pair may know the reaction, and the kind's
    /// `max_transient_attempts` bounds the retries.
    pub fn unknown_reaction(reaction: &str, kind: &super::KindVersion) -> Self {
        Self::transient(format!(
            "reaction {reaction:?} is not handled by the provider of {kind}"
        ))
        .with_reason(UNKNOWN_REACTION_REASON)
    }

    /// Sets an UpperCamelCase reason recorded on the resulting condition.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = reason.into();
        self
    }

    /// Adds an event describing what the handler did before it failed
    /// (recorded with the failure).
    pub fn with_event(mut self, event: Event) -> Self {
        self.events.push(event);
        self
    }

    /// The events reported with the failure.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// Human-readable description.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether retrying cannot help.
    pub fn is_terminal(&self) -> bool {
        self.terminal
    }

    /// The reason; empty = a server default.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerError")
            .field("message", &self.message)
            .field("terminal", &self.terminal)
            .field("reason", &self.reason)
            .field("events", &self.events)
            .finish()
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let class = if self.terminal { "terminal" } else { "transient" };
        write!(f, "{class} failure: {}", self.message)
    }
}

impl<E: std::error::Error> From<E> for HandlerError {
    fn from(error: E) -> Self {
        Self::transient(error_chain(&error))
    }
}

/// The error and its sources, joined with ": ".
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fails() -> Result<(), HandlerError> {
        Err(std::io::Error::other("disk on fire"))?;
        Ok(())
    }

    #[test]
    fn plain_errors_are_transient() {
        let err = fails().unwrap_err();
        assert!(!err.is_terminal());
        assert_eq!(err.message(), "disk on fire");
    }

    #[test]
    fn terminal_errors_keep_their_reason() {
        let err = HandlerError::terminal("bad spec").with_reason("InvalidSpec");
        assert!(err.is_terminal());
        assert_eq!(err.reason(), "InvalidSpec");
        assert_eq!(err.to_string(), "terminal failure: bad spec");
    }
}
