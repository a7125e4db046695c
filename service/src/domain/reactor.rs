//! Reactor bindings: "when a resource of one kind crosses a lifecycle
//! transition, run a reactor kind with it".

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use super::labels::validate_labels;
use super::names::{validate_kind_name, validate_kind_version, validate_resource_name};
use super::violation::Violation;

/// A lifecycle edge a binding fires on. The set is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transition {
    /// The resource was created.
    Created,
    /// A new generation was reconciled.
    Synced,
    /// The resource became Degraded.
    Degraded,
    /// The resource became Failed.
    Failed,
    /// The resource was physically removed.
    Deleted,
}

impl Transition {
    /// Every transition.
    pub const ALL: [Transition; 5] = [
        Transition::Created,
        Transition::Synced,
        Transition::Degraded,
        Transition::Failed,
        Transition::Deleted,
    ];

    /// The stored spelling (also the one in dedup tokens).
    pub fn as_db(self) -> &'static str {
        match self {
            Transition::Created => "created",
            Transition::Synced => "synced",
            Transition::Degraded => "degraded",
            Transition::Failed => "failed",
            Transition::Deleted => "deleted",
        }
    }

    /// The transition a stored spelling names.
    pub fn from_db(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_db() == value)
    }
}

/// The caller-owned content of a binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingContent {
    /// Unique name.
    pub name: String,
    /// Kind whose resources are watched.
    pub watch_kind: String,
    /// Only this version of it (`None` = every version).
    pub watch_kind_version: Option<i32>,
    /// The edge that fires the binding.
    pub transition: Transition,
    /// Labels a watched resource must all have.
    pub label_match: BTreeMap<String, String>,
    /// The reactor kind to run.
    pub reactor: String,
    /// Its version (`None` = the highest applied, non-retired at delivery).
    pub reactor_version: Option<i32>,
    /// Whether the binding fires.
    pub enabled: bool,
}

impl BindingContent {
    /// Checks what needs no database; fields are under `at`.
    pub fn validate(&self, at: &str) -> Result<(), Vec<Violation>> {
        let mut problems = Vec::new();
        problems.extend(validate_resource_name(&format!("{at}/name"), &self.name).err());
        problems.extend(validate_kind_name(&format!("{at}/watch_kind"), &self.watch_kind).err());
        problems.extend(validate_kind_name(&format!("{at}/reactor"), &self.reactor).err());
        if let Some(version) = self.watch_kind_version {
            problems.extend(validate_kind_version(&format!("{at}/watch_kind_version"), version).err());
        }
        if let Some(version) = self.reactor_version {
            problems.extend(validate_kind_version(&format!("{at}/reactor_version"), version).err());
        }
        if let Err(label_problems) = validate_labels(&self.label_match) {
            problems.extend(label_problems.into_iter().map(|mut p| {
                p.field = format!("{at}/label_match{}", p.field.trim_start_matches("/labels"));
                p
            }));
        }
        if problems.is_empty() && self.watch_kind == self.reactor {
            problems.push(Violation::new(
                format!("{at}/reactor"),
                "a reactor cannot watch its own kind",
            ));
        }
        if problems.is_empty() { Ok(()) } else { Err(problems) }
    }
}

/// A stored binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// Its content.
    pub content: BindingContent,
    /// Moves on every change.
    pub revision: i64,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Last changed.
    pub updated_at: DateTime<Utc>,
}

impl Binding {
    /// The optimistic-concurrency token: this incarnation and its revision.
    pub fn etag(&self) -> String {
        let mut hash = Sha256::new();
        hash.update((self.content.name.len() as u64).to_be_bytes());
        hash.update(self.content.name.as_bytes());
        hash.update(self.created_at.timestamp_micros().to_be_bytes());
        hash.update(self.revision.to_be_bytes());
        let digest = hash.finalize();
        digest[..12].iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// What a binding's deliveries look like right now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BindingStats {
    /// Recorded and not yet made.
    pub pending: i64,
    /// Failed for good.
    pub failed: i64,
    /// The error of the most recent failed one.
    pub last_failure: Option<String>,
}

/// A recorded delivery, as listed and redriven.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// Its id.
    pub id: uuid::Uuid,
    /// The binding that recorded it.
    pub binding: String,
    /// The reactor kind it runs.
    pub reactor: String,
    /// The reactor version it names (`None` = the latest at delivery).
    pub reactor_version: Option<i32>,
    /// The transition it reports (`None` for a spelling this build does not know).
    pub transition: Option<Transition>,
    /// The watched resource's id.
    pub resource_id: uuid::Uuid,
    /// The watched resource's kind and name, as at the transition.
    pub resource_kind: String,
    /// See `resource_kind`.
    pub resource_name: String,
    /// The generation of the transition.
    pub generation: i64,
    /// The token the reactor sees on every attempt.
    pub dedup_token: String,
    /// Attempts since it was recorded or redriven.
    pub attempts: i32,
    /// When it was recorded.
    pub created_at: DateTime<Utc>,
    /// Not attempted before.
    pub not_before: DateTime<Utc>,
    /// When it gave up (`None` while it is still being delivered).
    pub failed_at: Option<DateTime<Utc>>,
    /// The last failure.
    pub last_error: Option<String>,
    /// Whether a worker holds it.
    pub leased: bool,
}

/// Which deliveries a redrive addresses.
#[derive(Debug, Clone)]
pub enum RedriveTarget {
    /// One delivery.
    Id(uuid::Uuid),
    /// The given-up deliveries of a binding.
    Binding(String),
    /// The given-up deliveries of the resources of a kind a selector matches.
    Resources {
        /// The watched kind.
        kind: String,
        /// Over the resources' current labels.
        selector: super::labels::LabelSelector,
    },
}

/// The dedup token of a delivery, as the transition triggers build it.
pub fn dedup_token(resource_id: &uuid::Uuid, transition: Transition, generation: i64, binding: &str) -> String {
    format!("{resource_id}:{}:{generation}:{binding}", transition.as_db())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content() -> BindingContent {
        BindingContent {
            name: "publish".into(),
            watch_kind: "bom".into(),
            watch_kind_version: None,
            transition: Transition::Synced,
            label_match: BTreeMap::new(),
            reactor: "publisher".into(),
            reactor_version: Some(1),
            enabled: true,
        }
    }

    #[test]
    fn a_valid_binding_passes_and_a_reactor_cannot_watch_itself() {
        assert_eq!(content().validate("/reactor_binding"), Ok(()));
        let own = BindingContent {
            reactor: "bom".into(),
            ..content()
        };
        let fields: Vec<String> = own
            .validate("/reactor_binding")
            .unwrap_err()
            .into_iter()
            .map(|v| v.field)
            .collect();
        assert_eq!(fields, ["/reactor_binding/reactor"]);
    }

    #[test]
    fn label_problems_point_into_label_match() {
        let bad = BindingContent {
            label_match: BTreeMap::from([("bad key!".to_owned(), "v".to_owned())]),
            ..content()
        };
        let fields: Vec<String> = bad
            .validate("/reactor_binding")
            .unwrap_err()
            .into_iter()
            .map(|v| v.field)
            .collect();
        assert_eq!(fields.len(), 1);
        assert!(fields[0].starts_with("/reactor_binding/label_match"), "{fields:?}");
    }

    #[test]
    fn transitions_round_trip_their_stored_spelling() {
        for t in Transition::ALL {
            assert_eq!(Transition::from_db(t.as_db()), Some(t));
        }
        assert_eq!(Transition::from_db("ready"), None);
    }
}
