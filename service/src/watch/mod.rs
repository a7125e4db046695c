//! Resource watches: one change-log reader per process, fanned out in memory.
//!
//! The [`WatchHub`] follows `resource_changes` below the database frontier
//! (see ADR 3), turns each change into a shared, already-encoded message and
//! offers it to every subscriber whose filter matches. Subscribers get a
//! bounded queue; one that falls behind is cut off (the stream ends with
//! RESOURCE_EXHAUSTED) rather than buffered without bound. A recent window of
//! changes is kept in memory so a new subscriber can join at its position
//! without a gap; one further behind first catches up from the database.

mod hub;

pub use hub::{HubConfig, Subscription, SubscriptionEnd, WatchHub};

use std::collections::BTreeMap;
use std::sync::Arc;

use converge_proto::v1 as pb;

use crate::domain::labels::LabelSelector;
use crate::domain::position::Position;
use crate::domain::resource::{Resource, ResourceRef};

/// What happened to a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    /// Created.
    Added,
    /// Changed in any way (soft delete included).
    Modified,
    /// Physically removed.
    Deleted,
}

impl ChangeType {
    /// The proto event type.
    pub fn to_proto(self) -> pb::WatchEventType {
        match self {
            ChangeType::Added => pb::WatchEventType::Added,
            ChangeType::Modified => pb::WatchEventType::Modified,
            ChangeType::Deleted => pb::WatchEventType::Deleted,
        }
    }
}

/// One delivered change: the resource's state after it, shared by all
/// subscribers that receive it.
#[derive(Debug)]
pub struct Change {
    /// What happened.
    pub change: ChangeType,
    /// Its change-log position (a resume point).
    pub position: Position,
    /// The resource's id.
    pub id: uuid::Uuid,
    /// The resource's kind.
    pub kind: String,
    /// Its kind version.
    pub kind_version: i32,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its owner.
    pub owner: Option<ResourceRef>,
    /// Its root.
    pub root: Option<ResourceRef>,
    /// The state, as the API returns it.
    pub resource: pb::Resource,
}

impl Change {
    /// A change for `resource` at `position`.
    pub fn new(change: ChangeType, position: Position, resource: Resource, manifest_version: i64) -> Self {
        Self {
            change,
            position,
            id: resource.id,
            kind: resource.kind.clone(),
            kind_version: resource.kind_version,
            labels: resource.labels.clone(),
            owner: resource.owner.clone(),
            root: resource.root.clone(),
            resource: crate::contract::convert::resource_to_proto(resource, manifest_version),
        }
    }
}

/// An item on a subscriber's queue.
#[derive(Debug, Clone)]
pub enum Delivery {
    /// A change that matched the subscriber's filter.
    Change(Arc<Change>),
    /// A resume point: every matching change up to here has been delivered.
    Bookmark(Position),
}

/// Which resources a watcher wants; evaluated against each change's new state.
#[derive(Debug, Clone, Default)]
pub struct WatchFilter {
    /// Only this kind.
    pub kind: Option<String>,
    /// Only this kind version.
    pub kind_version: Option<i32>,
    /// Label requirements.
    pub selector: LabelSelector,
    /// Only direct children of this resource.
    pub owner: Option<ResourceRef>,
    /// Only descendants of this root.
    pub root: Option<ResourceRef>,
    /// Only the resource of this name (with `kind`).
    pub name: Option<String>,
}

impl WatchFilter {
    /// Whether `change` passes the filter.
    pub fn matches(&self, change: &Change) -> bool {
        self.kind.as_ref().is_none_or(|k| *k == change.kind)
            && self.name.as_ref().is_none_or(|n| *n == change.resource.name)
            && self.kind_version.is_none_or(|v| v == change.kind_version)
            && self.owner.as_ref().is_none_or(|o| change.owner.as_ref() == Some(o))
            && self.root.as_ref().is_none_or(|r| change.root.as_ref() == Some(r))
            && self.selector.matches(&change.labels)
    }
}
