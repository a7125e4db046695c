//! Resources: the stored record, the derived phase, conditions and the etag.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::position::Position;

/// Largest spec accepted, in bytes of compact JSON.
pub const MAX_SPEC_BYTES: usize = 1024 * 1024;

/// The lifecycle phase, derived by the database from the lifecycle scalars
/// with a fixed precedence (Deleting > Quarantined > Failed > Orphaned >
/// Degraded > Ready > Reconciling).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Reconciled at the latest generation and healthy.
    Ready,
    /// The latest generation is not reconciled yet.
    Reconciling,
    /// Reconciled but unhealthy.
    Degraded,
    /// The current generation failed terminally.
    Failed,
    /// Deletion requested.
    Deleting,
    /// Dropped by its composer, within the orphan grace period.
    Orphaned,
    /// Set aside by an operator.
    Quarantined,
}

impl Phase {
    /// Every phase.
    pub const ALL: [Phase; 7] = [
        Phase::Ready,
        Phase::Reconciling,
        Phase::Degraded,
        Phase::Failed,
        Phase::Deleting,
        Phase::Orphaned,
        Phase::Quarantined,
    ];

    /// The value of the `resources.phase` column.
    pub fn as_db(self) -> &'static str {
        match self {
            Phase::Ready => "Ready",
            Phase::Reconciling => "Reconciling",
            Phase::Degraded => "Degraded",
            Phase::Failed => "Failed",
            Phase::Deleting => "Deleting",
            Phase::Orphaned => "Orphaned",
            Phase::Quarantined => "Quarantined",
        }
    }

    /// Parses a `resources.phase` value.
    pub fn from_db(value: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.as_db() == value)
    }
}

/// A reference to a resource by kind and name (serialized as the row
/// contract's `{kind, name}`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct ResourceRef {
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
}

impl fmt::Display for ResourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind, self.name)
    }
}

/// The generation a new resource starts at (the column's default).
pub const FIRST_GENERATION: i64 = 1;

/// A stored resource as the API reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    /// Incarnation id.
    pub id: Uuid,
    /// Kind.
    pub kind: String,
    /// Kind version.
    pub kind_version: i32,
    /// Name, unique per kind.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Desired state.
    pub spec: Value,
    /// Observed state reported by workers.
    pub status: Option<Value>,
    /// The composer that owns this resource.
    pub owner: Option<ResourceRef>,
    /// The root of its composition tree.
    pub root: Option<ResourceRef>,
    /// Attached provider config override.
    pub provider_config: Option<String>,
    /// Spec generation.
    pub generation: i64,
    /// Newest reconciled generation.
    pub synced_gen: i64,
    /// Health reported by the latest reconcile.
    pub health_ok: bool,
    /// Generation that failed terminally (0 = none).
    pub failure_gen: i64,
    /// Consecutive transient failures of the current generation.
    pub failure_attempts: i32,
    /// Finalizers blocking removal.
    pub finalizers: Vec<String>,
    /// When deletion was requested.
    pub deletion_requested_at: Option<DateTime<Utc>>,
    /// Orphan deadline (finite) or quarantine (infinity, read as `None` plus `quarantined`).
    pub orphan_until: Option<DateTime<Utc>>,
    /// Whether an operator quarantined the resource.
    pub quarantined: bool,
    /// Derived phase.
    pub phase: Phase,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Time of the latest change.
    pub updated_at: DateTime<Utc>,
    /// Change-log position of the latest change.
    pub position: Position,
    /// Stored conditions, ordered by type.
    pub conditions: Vec<Condition>,
}

impl Resource {
    /// The optimistic-concurrency token over the user-owned part: identity,
    /// kind version, spec (through its generation), labels and deletion state.
    /// Status and lifecycle progress do not move it.
    pub fn etag(&self) -> String {
        let mut hash = Sha256::new();
        hash.update(self.id.as_bytes());
        hash.update(self.kind_version.to_be_bytes());
        hash.update(self.generation.to_be_bytes());
        for (key, value) in &self.labels {
            // Length prefixes keep ("ab","c") and ("a","bc") apart.
            hash.update((key.len() as u64).to_be_bytes());
            hash.update(key.as_bytes());
            hash.update((value.len() as u64).to_be_bytes());
            hash.update(value.as_bytes());
        }
        hash.update([u8::from(self.deletion_requested_at.is_some())]);
        hash.update(self.provider_config.as_deref().unwrap_or("").as_bytes());
        let digest = hash.finalize();
        digest[..12].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether the latest generation has been reconciled.
    pub fn synced(&self) -> bool {
        self.synced_gen >= self.generation
    }

    /// This resource as a reference.
    pub fn reference(&self) -> ResourceRef {
        ResourceRef {
            kind: self.kind.clone(),
            name: self.name.clone(),
        }
    }

    /// The conditions to show: the stored ones plus `Ready` and `Synced`
    /// derived from the lifecycle scalars when not stored.
    pub fn conditions_with_derived(&self) -> Vec<Condition> {
        let mut all = self.conditions.clone();
        for derived in [self.derived_synced(), self.derived_ready()] {
            if !all.iter().any(|c| c.type_ == derived.type_) {
                all.push(derived);
            }
        }
        all.sort_by(|a, b| a.type_.cmp(&b.type_));
        all
    }

    fn derived(&self, type_: &str, status: ConditionStatus, reason: &str, message: String) -> Condition {
        Condition {
            type_: type_.to_owned(),
            status,
            reason: reason.to_owned(),
            message,
            observed_generation: self.synced_gen,
            last_transition_at: self.updated_at,
            updated_at: self.updated_at,
            expires_at: None,
        }
    }

    fn derived_synced(&self) -> Condition {
        if self.failure_gen == self.generation {
            self.derived(
                "Synced",
                ConditionStatus::False,
                "ReconcileFailed",
                format!("generation {} failed terminally", self.generation),
            )
        } else if self.synced() {
            self.derived(
                "Synced",
                ConditionStatus::True,
                "Reconciled",
                format!("generation {} is reconciled", self.generation),
            )
        } else {
            self.derived(
                "Synced",
                ConditionStatus::Unknown,
                "Reconciling",
                format!("generation {} is not reconciled yet", self.generation),
            )
        }
    }

    fn derived_ready(&self) -> Condition {
        let (status, reason, message) = match self.phase {
            Phase::Ready => (
                ConditionStatus::True,
                "Available",
                "the resource is reconciled and healthy",
            ),
            Phase::Reconciling => (
                ConditionStatus::Unknown,
                "Reconciling",
                "the resource is being reconciled",
            ),
            Phase::Degraded => (
                ConditionStatus::False,
                "Unhealthy",
                "the resource reports itself unhealthy",
            ),
            Phase::Failed => (
                ConditionStatus::False,
                "ReconcileFailed",
                "reconciling the resource failed",
            ),
            Phase::Deleting => (ConditionStatus::False, "Deleting", "the resource is being deleted"),
            Phase::Orphaned => (ConditionStatus::False, "Orphaned", "the resource's composer dropped it"),
            Phase::Quarantined => (
                ConditionStatus::False,
                "Quarantined",
                "an operator set the resource aside",
            ),
        };
        self.derived("Ready", status, reason, message.to_owned())
    }
}

/// Truth value of a condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionStatus {
    /// Holds.
    True,
    /// Does not hold.
    False,
    /// Not known.
    Unknown,
}

impl ConditionStatus {
    /// The stored spelling.
    pub fn as_db(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }

    /// Parses the stored spelling.
    pub fn from_db(value: &str) -> Option<Self> {
        match value {
            "True" => Some(ConditionStatus::True),
            "False" => Some(ConditionStatus::False),
            "Unknown" => Some(ConditionStatus::Unknown),
            _ => None,
        }
    }
}

/// A stored or derived condition.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// Type, unique per resource.
    pub type_: String,
    /// Truth value.
    pub status: ConditionStatus,
    /// Machine-readable cause.
    pub reason: String,
    /// Human-readable explanation.
    pub message: String,
    /// Generation the condition was computed for.
    pub observed_generation: i64,
    /// When the status last flipped.
    pub last_transition_at: DateTime<Utc>,
    /// When status, reason or message last changed.
    pub updated_at: DateTime<Utc>,
    /// A liveness condition's lapse time: past it, the report no longer
    /// holds. `None` = an ordinary condition.
    pub expires_at: Option<DateTime<Utc>>,
}

/// Shortest liveness window of a reported condition, in milliseconds.
pub const MIN_LIVENESS_MS: i64 = 1_000;

/// Longest liveness window of a reported condition, in milliseconds.
pub const MAX_LIVENESS_MS: i64 = 24 * 3600 * 1_000;

/// Reason a liveness condition reads with once its report has lapsed.
pub const REPORT_EXPIRED_REASON: &str = "ReportExpired";

impl Condition {
    /// The condition as read once its liveness window has passed without a
    /// new report: Unknown, since whoever reported it has not confirmed it
    /// (it may be gone, partitioned or just slow, which no reader can tell
    /// apart). The last report's status and reason move into the message.
    pub fn lapsed(self) -> Condition {
        let Some(expires_at) = self.expires_at else {
            return self;
        };
        let was = if self.reason.is_empty() {
            self.status.as_db().to_owned()
        } else {
            format!("{} ({})", self.status.as_db(), self.reason)
        };
        Condition {
            status: ConditionStatus::Unknown,
            reason: REPORT_EXPIRED_REASON.to_owned(),
            message: format!(
                "not reported again within its liveness window; the last report, {was}, lapsed at {}",
                expires_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
            last_transition_at: if self.status == ConditionStatus::Unknown {
                self.last_transition_at
            } else {
                expires_at
            },
            updated_at: expires_at.max(self.updated_at),
            ..self
        }
    }
}

/// A condition as a writer supplies it (times are stamped by the store).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConditionInput {
    /// Type, unique within one batch.
    #[serde(rename = "type")]
    pub type_: String,
    /// Truth value as stored ("True", "False", "Unknown").
    pub status: &'static str,
    /// Machine-readable cause.
    pub reason: String,
    /// Human-readable explanation.
    pub message: String,
    /// Liveness window in milliseconds ([`MIN_LIVENESS_MS`] to
    /// [`MAX_LIVENESS_MS`]); `None` = an ordinary condition.
    #[serde(rename = "livenessMs", skip_serializing_if = "Option::is_none")]
    pub liveness_ms: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_round_trip_through_the_database_spelling() {
        for phase in Phase::ALL {
            assert_eq!(Phase::from_db(phase.as_db()), Some(phase));
        }
        assert_eq!(Phase::from_db("Nope"), None);
    }
}
