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
