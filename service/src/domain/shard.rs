//! Shards: the unit of work partitioning between members, and what a member
//! reports about the work it holds.

/// Number of logical shards. Must equal the database's `shard_count()`.
pub const SHARD_COUNT: i32 = 256;

/// A contiguous, inclusive range of shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardRange {
    /// First shard.
    pub lo: i16,
    /// Last shard (inclusive).
    pub hi: i16,
}

/// What a member reports about its work with each heartbeat.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemberLoad {
    /// Tasks leased through the member right now.
    pub in_flight: i32,
    /// Worker streams connected to the member.
    pub connected_workers: i32,
    /// Counters since the process started, by name.
    pub counters: std::collections::BTreeMap<String, i64>,
    /// The connected worker streams, oldest first, at most
    /// [`MAX_LISTED_WORKERS`] of them (`connected_workers` is the true count).
    pub workers: Vec<ConnectedWorker>,
}

/// Most connected workers one member lists in its heartbeat.
pub const MAX_LISTED_WORKERS: usize = 256;
/// Most pairs listed per connected worker (the first, in (kind, version)
/// order); with [`MAX_LISTED_WORKERS`] and [`MAX_LISTED_AGENT_BYTES`] this
/// bounds a heartbeat's listing.
pub const MAX_LISTED_KINDS: usize = 64;
/// Longest agent string listed, in bytes (longer ones are cut).
pub const MAX_LISTED_AGENT_BYTES: usize = 128;

/// One worker stream connected to a member's broker, as its heartbeat
/// reports it. Serialized into the registry row (camelCase keys).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectedWorker {
    /// Who the transport says the worker is (SPIFFE ID, else peer address).
    pub identity: String,
    /// The agent string the worker sent (display only; may be empty).
    pub agent: String,
    /// The pairs it subscribed to (at most [`MAX_LISTED_KINDS`]), with their
    /// current readiness.
    pub kinds: Vec<ServedKind>,
    /// The concurrency ceiling it declared (as the broker applies it).
    pub max_inflight: i32,
    /// Tasks, deliveries and operations it holds.
    pub in_flight: i32,
    /// When its stream was opened.
    pub connected_at: chrono::DateTime<chrono::Utc>,
}

/// One (kind, kind_version) a connected worker serves.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServedKind {
    /// Kind name.
    pub kind: String,
    /// Kind version.
    pub kind_version: i32,
    /// Whether the worker accepts tasks of the pair right now.
    pub ready: bool,
}
