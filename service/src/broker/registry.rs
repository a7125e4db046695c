//! The worker streams a broker has open, as its membership heartbeat lists
//! them: each session keeps a small view of itself up to date (readiness
//! when an `Interest` arrives, its held count once per loop turn), and the
//! heartbeat reads the views once per beat. Nothing here runs per task.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};

use super::BrokerStats;
use crate::cluster::LoadSource;
use crate::domain::shard::{
    ConnectedWorker, MAX_LISTED_AGENT_BYTES, MAX_LISTED_KINDS, MAX_LISTED_WORKERS, MemberLoad, ServedKind,
};

/// The open sessions of one broker, by the order they connected.
#[derive(Debug, Default)]
pub(super) struct SessionRegistry {
    next: AtomicU64,
    open: Mutex<BTreeMap<u64, Arc<SessionView>>>,
}

/// What the listing shows of one session, fixed at subscribe time except
/// for readiness and the held count.
#[derive(Debug)]
pub(super) struct SessionView {
    identity: String,
    agent: String,
    kinds: Vec<(String, i32)>,
    max_inflight: i32,
    connected_at: DateTime<Utc>,
    unready: Mutex<BTreeSet<(String, i32)>>,
    in_flight: AtomicI32,
}

/// How a session describes itself when it opens.
#[derive(Debug)]
pub(super) struct SessionInfo {
    /// Transport identity of the worker.
    pub identity: String,
    /// The worker's agent string.
    pub agent: String,
    /// The subscribed pairs.
    pub kinds: Vec<(String, i32)>,
    /// The applied concurrency ceiling.
    pub max_inflight: usize,
}

impl SessionRegistry {
    /// Lists a new session until the returned guard is dropped (its agent
    /// cut to [`MAX_LISTED_AGENT_BYTES`], its first [`MAX_LISTED_KINDS`]
    /// pairs).
    pub(super) fn open(self: &Arc<Self>, info: SessionInfo) -> Listed {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut agent = info.agent;
        if agent.len() > MAX_LISTED_AGENT_BYTES {
            let mut cut = MAX_LISTED_AGENT_BYTES;
            while !agent.is_char_boundary(cut) {
                cut -= 1;
            }
            agent.truncate(cut);
        }
        let mut kinds = info.kinds;
        kinds.truncate(MAX_LISTED_KINDS);
        let view = Arc::new(SessionView {
            identity: info.identity,
            agent,
            kinds,
            max_inflight: i32::try_from(info.max_inflight).unwrap_or(i32::MAX),
            connected_at: Utc::now(),
            unready: Mutex::default(),
            in_flight: AtomicI32::new(0),
        });
        if let Ok(mut open) = self.open.lock() {
            open.insert(id, view.clone());
        }
        Listed {
            registry: self.clone(),
            id,
            view,
        }
    }

    /// The oldest `limit` sessions, as the heartbeat reports them.
    pub(super) fn workers(&self, limit: usize) -> Vec<ConnectedWorker> {
        let views: Vec<Arc<SessionView>> = match self.open.lock() {
            Ok(open) => open.values().take(limit).cloned().collect(),
            Err(_) => return Vec::new(),
        };
        views.iter().map(|view| view.worker()).collect()
    }
}

impl SessionView {
    fn worker(&self) -> ConnectedWorker {
        let unready = self.unready.lock().map(|set| set.clone()).unwrap_or_default();
        ConnectedWorker {
            identity: self.identity.clone(),
            agent: self.agent.clone(),
            kinds: self
                .kinds
                .iter()
                .map(|pair| ServedKind {
                    kind: pair.0.clone(),
                    kind_version: pair.1,
                    ready: !unready.contains(pair),
                })
                .collect(),
            max_inflight: self.max_inflight,
            in_flight: self.in_flight.load(Ordering::Relaxed).max(0),
            connected_at: self.connected_at,
        }
    }
}

/// A session's entry in the registry; dropping it unlists the session.
#[derive(Debug)]
pub(super) struct Listed {
    registry: Arc<SessionRegistry>,
    id: u64,
    view: Arc<SessionView>,
}

impl Listed {
    /// Records the worker's readiness for `pair`.
    pub(super) fn set_ready(&self, pair: &(String, i32), ready: bool) {
        if let Ok(mut unready) = self.view.unready.lock() {
            if ready {
                unready.remove(pair);
            } else {
                unready.insert(pair.clone());
            }
        }
    }

    /// Records how much the session holds.
    pub(super) fn set_in_flight(&self, held: usize) {
        let held = i32::try_from(held).unwrap_or(i32::MAX);
        self.view.in_flight.store(held, Ordering::Relaxed);
    }
}

impl Drop for Listed {
    fn drop(&mut self) {
        if let Ok(mut open) = self.registry.open.lock() {
            open.remove(&self.id);
        }
    }
}

/// The broker's load for the heartbeat: its counters and its sessions.
#[derive(Debug)]
pub(super) struct BrokerLoad {
    pub(super) stats: Arc<BrokerStats>,
    pub(super) sessions: Arc<SessionRegistry>,
}

impl LoadSource for BrokerLoad {
    fn load(&self) -> MemberLoad {
        MemberLoad {
            workers: self.sessions.workers(MAX_LISTED_WORKERS),
            ..self.stats.load()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(identity: &str, kinds: &[(&str, i32)]) -> SessionInfo {
        SessionInfo {
            identity: identity.into(),
            agent: "test/1".into(),
            kinds: kinds.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
            max_inflight: 4,
        }
    }

    #[test]
    fn lists_open_sessions_oldest_first_with_readiness_until_dropped() {
        let registry = Arc::new(SessionRegistry::default());
        let first = registry.open(info("a", &[("x", 1), ("y", 2)]));
        let second = registry.open(info("b", &[("z", 1)]));
        first.set_ready(&("y".into(), 2), false);
        first.set_in_flight(3);
        let listed = registry.workers(10);
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].identity, "a");
        assert_eq!(listed[0].in_flight, 3);
        assert_eq!(listed[0].max_inflight, 4);
        let ready: Vec<bool> = listed[0].kinds.iter().map(|k| k.ready).collect();
        assert_eq!(ready, [true, false]);
        assert_eq!(registry.workers(1).len(), 1, "the listing is capped");
        drop(first);
        let left: Vec<String> = registry.workers(10).into_iter().map(|w| w.identity).collect();
        assert_eq!(left, ["b"]);
        drop(second);
        assert!(registry.workers(10).is_empty());
    }

    #[test]
    fn a_listing_is_bounded_per_worker() {
        let registry = Arc::new(SessionRegistry::default());
        let many: Vec<(String, i32)> = (0..100).map(|i| (format!("k{i:03}"), 1)).collect();
        let _open = registry.open(SessionInfo {
            identity: "a".into(),
            agent: "é".repeat(100),
            kinds: many,
            max_inflight: 1,
        });
        let listed = registry.workers(10);
        assert_eq!(listed[0].kinds.len(), MAX_LISTED_KINDS);
        assert!(listed[0].agent.len() <= MAX_LISTED_AGENT_BYTES);
        assert_eq!(listed[0].agent.chars().count(), MAX_LISTED_AGENT_BYTES / 2);
    }
}
