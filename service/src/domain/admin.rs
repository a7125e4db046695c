//! The operator's toolkit: actions on resources (one or many by selector) and
//! the fleet summary.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::resource::Phase;

/// An action an operator runs on resources. Which resources each applies to
/// is decided in one place, the SQL function `action_applies`
/// (migrations/functions/admin.sql).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AdminAction {
    /// Reconcile now.
    Reconcile,
    /// Set aside.
    Quarantine,
    /// Release from quarantine.
    Unquarantine,
    /// Clear a terminal failure (or a teardown that gave up) and retry.
    ClearFailure,
    /// Forget the failure count and run the task waiting out its delay now.
    ResetBackoff,
    /// Take a task's lease back from the broker holding it.
    ReleaseLease,
    /// Complete a stuck teardown as if the worker had confirmed it.
    ForceFinalize,
}

impl AdminAction {
    /// The action's name in SQL, events and the audit log.
    pub fn as_db(self) -> &'static str {
        match self {
            AdminAction::Reconcile => "reconcile",
            AdminAction::Quarantine => "quarantine",
            AdminAction::Unquarantine => "unquarantine",
            AdminAction::ClearFailure => "clear_failure",
            AdminAction::ResetBackoff => "reset_backoff",
            AdminAction::ReleaseLease => "release_lease",
            AdminAction::ForceFinalize => "force_finalize",
        }
    }

    /// What a resource must be for the action to apply, for error messages.
    pub fn applies_to(self) -> &'static str {
        match self {
            AdminAction::Reconcile => "a resource that is neither deleting nor set aside",
            AdminAction::Quarantine => "a resource that is neither deleting nor quarantined",
            AdminAction::Unquarantine => "a quarantined resource",
            AdminAction::ClearFailure => "a Failed resource or one whose teardown gave up",
            AdminAction::ResetBackoff => "a resource whose task waits out a retry delay",
            AdminAction::ReleaseLease => "a resource whose task is leased to a broker",
            AdminAction::ForceFinalize => "a resource that is being deleted",
        }
    }
}

/// The longest reason an action accepts, in bytes.
pub const MAX_REASON_BYTES: usize = 1024;

/// Resources of one kind version in one phase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseCount {
    /// Kind.
    pub kind: String,
    /// Kind version.
    pub kind_version: i32,
    /// Phase (as stored).
    pub phase: String,
    /// Number of resources.
    pub count: i64,
}

/// One failure reason and how many resources it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureCount {
    /// Kind.
    pub kind: String,
    /// "reconcile" or "teardown".
    pub stage: String,
    /// The reported reason.
    pub reason: String,
    /// Number of resources.
    pub count: i64,
    /// One of them.
    pub example: String,
    /// That one's failure message.
    pub example_message: String,
}

/// The resource that has waited longest in a phase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OldestInPhase {
    /// Phase (as stored).
    pub phase: String,
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Since when it has waited.
    pub since: DateTime<Utc>,
}

/// Counts over the fleet (or a filtered part of it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetSummary {
    /// By kind, kind version and phase.
    pub phase_counts: Vec<PhaseCount>,
    /// Most common failure reasons first.
    pub top_failures: Vec<FailureCount>,
    /// The longest wait in each unsettled phase.
    pub oldest: Vec<OldestInPhase>,
}

impl FleetSummary {
    /// Every resource counted.
    pub fn total(&self) -> i64 {
        self.phase_counts.iter().map(|c| c.count).sum()
    }
}

/// The phases a resource waits in until something happens, whose longest
/// wait the summary reports.
pub const UNSETTLED: [Phase; 4] = [Phase::Reconciling, Phase::Deleting, Phase::Degraded, Phase::Orphaned];
