//! Event runs: consecutive events with the same (category, type, reason)
//! aggregate into one run.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::position::Position;
use super::resource::ResourceRef;

/// Severity of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Routine progress.
    Normal,
    /// Something needing attention.
    Warning,
}

impl EventType {
    /// The stored spelling.
    pub fn as_db(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }

    /// Parses the stored spelling.
    pub fn from_db(value: &str) -> Option<Self> {
        match value {
            "Normal" => Some(EventType::Normal),
            "Warning" => Some(EventType::Warning),
            _ => None,
        }
    }
}

/// One event to record.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// Timeline, e.g. "lifecycle".
    pub category: &'static str,
    /// Severity.
    pub type_: EventType,
    /// UpperCamelCase cause.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// Structured detail.
    pub detail: Option<Value>,
}

impl NewEvent {
    /// A routine lifecycle event.
    pub fn lifecycle(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            category: "lifecycle",
            type_: EventType::Normal,
            reason,
            message: message.into(),
            detail: None,
        }
    }
}

/// A stored run of events.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRun {
    /// Run id.
    pub id: Uuid,
    /// The resource.
    pub resource: ResourceRef,
    /// The resource incarnation.
    pub resource_id: Uuid,
    /// Timeline.
    pub category: String,
    /// Severity.
    pub type_: EventType,
    /// Cause.
    pub reason: String,
    /// Latest message.
    pub message: String,
    /// Latest detail.
    pub detail: Option<Value>,
    /// Events in the run.
    pub count: i64,
    /// First event time.
    pub first_at: DateTime<Utc>,
    /// Latest event time.
    pub last_at: DateTime<Utc>,
    /// Latest producer.
    pub actor: String,
    /// Generation at the latest event.
    pub generation: i64,
    /// Event-log position of the latest change to the run.
    pub position: Position,
}

/// The timelines the server writes itself; a worker's events may not join
/// their runs (a worker's "ReconcileFailed" would merge with the engine's).
pub const RESERVED_CATEGORIES: [&str; 4] = ["lifecycle", "reconcile", "operation", "reactor"];

/// The timeline of a worker event that names none.
pub const WORKER_CATEGORY: &str = "worker";

/// Most events one outcome may carry.
pub const MAX_REPORTED_EVENTS: usize = 16;

/// Longest category, in characters (ASCII only).
pub const MAX_CATEGORY_CHARS: usize = 63;

/// Longest reason of a reported event, in characters (ASCII only).
pub const MAX_REASON_CHARS: usize = 128;

/// Longest message kept of a reported event, in characters; longer ones
/// are cut.
pub const MAX_MESSAGE_CHARS: usize = 1024;

/// Largest detail of a reported event, in bytes of JSON.
pub const MAX_DETAIL_BYTES: usize = 8 * 1024;

/// An event a worker reported, checked and ready to record
/// (`record_worker_events` in migrations/functions/events.sql reads these
/// keys).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ReportedEvent {
    /// Timeline; never a reserved one.
    pub category: String,
    /// Severity, as stored ("Normal" or "Warning").
    #[serde(rename = "type")]
    pub type_: &'static str,
    /// UpperCamelCase cause.
    pub reason: String,
    /// Message, at most [`MAX_MESSAGE_CHARS`].
    pub message: String,
    /// Structured detail (a JSON object), at most [`MAX_DETAIL_BYTES`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
    /// Who reported it, e.g. "worker:spiffe://example.org/w" or "worker:10.0.0.7:51234".
    pub actor: String,
}

/// Why a category cannot be written by a worker, or `None` when it can.
/// Empty is allowed (it means [`WORKER_CATEGORY`]).
pub fn category_problem(category: &str) -> Option<String> {
    if category.is_empty() {
        return None;
    }
    let mut chars = category.chars();
    let starts_with_letter = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    if !starts_with_letter
        || category.len() > MAX_CATEGORY_CHARS
        || !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Some(format!(
            "must be 1-{MAX_CATEGORY_CHARS} lower-case letters, digits and '-', starting with a letter"
        ));
    }
    RESERVED_CATEGORIES.contains(&category).then(|| {
        format!(
            "{category:?} is one of the server's own timelines ({})",
            RESERVED_CATEGORIES.join(", ")
        )
    })
}

/// Why a reported reason is unusable, or `None` when it is UpperCamelCase
/// ASCII of at most [`MAX_REASON_CHARS`].
pub fn reason_problem(reason: &str) -> Option<String> {
    let mut chars = reason.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_uppercase())
        && reason.len() <= MAX_REASON_CHARS
        && chars.all(|c| c.is_ascii_alphanumeric());
    (!ok).then(|| format!("must be UpperCamelCase: 1-{MAX_REASON_CHARS} ASCII letters and digits, starting upper case"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_categories_are_simple_names_outside_the_servers_timelines() {
        for ok in ["", "worker", "probe-2", "a"] {
            assert_eq!(category_problem(ok), None, "{ok:?}");
        }
        for bad in ["2probe", "Probe", "pro_be", &"a".repeat(MAX_CATEGORY_CHARS + 1)] {
            assert!(category_problem(bad).is_some(), "{bad:?}");
        }
        for reserved in RESERVED_CATEGORIES {
            assert!(category_problem(reserved).is_some_and(|p| p.contains("server's own")));
        }
    }

    #[test]
    fn reasons_are_upper_camel_case_ascii() {
        assert_eq!(reason_problem("BucketCreated2"), None);
        for bad in [
            "",
            "bucketCreated",
            "Bucket Created",
            "Bücket",
            &"A".repeat(MAX_REASON_CHARS + 1),
        ] {
            assert!(reason_problem(bad).is_some(), "{bad:?}");
        }
    }
}
