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
}
