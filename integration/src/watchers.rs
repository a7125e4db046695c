//! Watchers for the load tool (`converge-load --watchers`): streams of
//! `WatchResources` that record every change they receive (its position,
//! when it arrived and how long after the change), reconnect from their last
//! position when the server cuts them off, and the checks made on the
//! records afterwards (latency percentiles, when a position was reached, and
//! whether a resumed watcher got every change of the log exactly once).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use converge_proto::v1::{WatchEventType, WatchResourcesRequest};
use converge_sdk::Client;
use converge_service::domain::position::Position;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use uuid::Uuid;

/// One change as a watcher received it.
#[derive(Debug, Clone, Copy)]
pub struct Seen {
    /// Its change-log position.
    pub position: Position,
    /// When it arrived (seconds since the epoch, this host's clock).
    pub received: f64,
    /// Arrival minus the resource's `update_time` (the change's transaction
    /// on the database clock, the same host clock), in milliseconds.
    pub latency_ms: f32,
}

/// What one watcher has received so far.
#[derive(Debug, Default)]
pub struct WatchLog {
    /// Every change, in arrival order.
    pub seen: Vec<Seen>,
    /// The resource of each change (kept only when asked: the resumed
    /// watcher's changes are compared with the change log).
    pub ids: Vec<Uuid>,
    /// The last position received (change or bookmark).
    pub position: Position,
    /// Times the server cut the stream off (too slow, or unavailable) and
    /// the watcher resumed from its position.
    pub resumes: u32,
}

impl WatchLog {
    /// When the watcher first received a change at or past `due` (seconds
    /// since the epoch), if it has.
    pub fn reached_at(&self, due: Position) -> Option<f64> {
        self.seen.iter().find(|s| s.position >= due).map(|s| s.received)
    }

    /// Changes at or below `due` that arrived after `at`: how many the
    /// watcher still had to receive at that moment.
    pub fn behind_at(&self, at: f64, due: Position) -> usize {
        self.seen
            .iter()
            .filter(|s| s.received > at && s.position <= due)
            .count()
    }
}

/// A running watcher.
pub struct Watcher {
    /// Its records, shared with its task.
    pub log: Arc<Mutex<WatchLog>>,
    stop: watch::Sender<bool>,
    task: JoinHandle<anyhow::Result<()>>,
}

/// Now, in seconds since the epoch.
pub fn now_epoch() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

async fn open(
    client: &Client,
    filter: &WatchResourcesRequest,
    from: Option<Position>,
) -> anyhow::Result<(
    tonic::Streaming<converge_proto::v1::WatchResourcesResponse>,
    Option<Position>,
)> {
    let mut request = filter.clone();
    request.resource_version = from.map(|p| p.to_string()).unwrap_or_default();
    request.send_initial_events = Some(false);
    let mut stream = client.resources().watch_resources(request).await?.into_inner();
    if from.is_some() {
        return Ok((stream, None));
    }
    let start = stream
        .message()
        .await?
        .context("the watch ended before its start bookmark")?;
    anyhow::ensure!(start.initial_events_end, "expected the start bookmark");
    let position = start
        .resource_version
        .parse()
        .context("the start bookmark's position")?;
    Ok((stream, Some(position)))
}

impl Watcher {
    /// Opens a watch with `filter` (at the head of the log, or right after
    /// `from`) and follows it in a task until [`Watcher::stop`]. Returns once
    /// the server has answered (the start bookmark of a new watch).
    pub async fn start(
        client: Client,
        filter: WatchResourcesRequest,
        from: Option<Position>,
        keep_ids: bool,
    ) -> anyhow::Result<Self> {
        let (stream, start) = open(&client, &filter, from).await?;
        let log = Arc::new(Mutex::new(WatchLog {
            position: start.or(from).unwrap_or_default(),
            ..WatchLog::default()
        }));
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(follow(client, filter, stream, log.clone(), stopped, keep_ids));
        Ok(Self { log, stop, task })
    }

    /// The last position received.
    pub fn position(&self) -> Position {
        self.log.lock().map(|l| l.position).unwrap_or_default()
    }

    /// Closes the stream; returns the records.
    pub async fn stop(self) -> anyhow::Result<WatchLog> {
        let _ = self.stop.send(true);
        self.task.await??;
        let log = Arc::try_unwrap(self.log)
            .map_err(|_| anyhow::anyhow!("the watcher's log is still shared"))?
            .into_inner()
            .map_err(|_| anyhow::anyhow!("the watcher's log is poisoned"))?;
        Ok(log)
    }
}

async fn follow(
    client: Client,
    filter: WatchResourcesRequest,
    mut stream: tonic::Streaming<converge_proto::v1::WatchResourcesResponse>,
    log: Arc<Mutex<WatchLog>>,
    mut stopped: watch::Receiver<bool>,
    keep_ids: bool,
) -> anyhow::Result<()> {
    loop {
        let message = tokio::select! {
            _ = stopped.changed() => return Ok(()),
            message = stream.message() => message,
        };
        match message {
            Ok(Some(message)) => {
                let received = now_epoch();
                let position: Position = message.resource_version.parse().context("a message's position")?;
                let mut log = log.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
                log.position = position;
                if message.r#type() == WatchEventType::Bookmark {
                    continue;
                }
                let resource = message.resource.context("a change without its resource")?;
                let changed = resource
                    .update_time
                    .map_or(0.0, |t| t.seconds as f64 + f64::from(t.nanos) / 1e9);
                log.seen.push(Seen {
                    position,
                    received,
                    latency_ms: ((received - changed) * 1000.0) as f32,
                });
                if keep_ids {
                    log.ids.push(resource.uid.parse().context("a resource uid")?);
                }
            }
            // Cut off (too slow) or the server's reader failed: resume from
            // the last position, as a client should.
            Err(status) if matches!(status.code(), tonic::Code::ResourceExhausted | tonic::Code::Unavailable) => {
                let from = {
                    let mut log = log.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
                    log.resumes += 1;
                    log.position
                };
                tokio::time::sleep(Duration::from_millis(50)).await;
                stream = open(&client, &filter, Some(from)).await?.0;
            }
            Err(status) => return Err(status.into()),
            Ok(None) => anyhow::bail!("the server ended a watch"),
        }
    }
}

/// p-th percentile (0..=1) of sorted values, nearest rank.
pub fn percentile(sorted: &[f32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[index.min(sorted.len() - 1)])
}

/// How a resumed watcher's changes compare with the change log over the
/// same range of positions.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ExactlyOnce {
    /// Change-log entries in the range.
    pub entries: usize,
    /// Resources they touch.
    pub resources: usize,
    /// Changes the watcher received.
    pub received: usize,
    /// Received twice (the same position again) or out of commit order.
    pub duplicated: usize,
    /// Received at a position the log has no entry of that resource at.
    pub unknown: usize,
    /// Entries not covered: a resource whose latest entry in the range never
    /// arrived, counted with the entries after its last received change.
    pub missed: usize,
}

impl ExactlyOnce {
    /// Whether every entry arrived exactly once.
    pub fn holds(&self) -> bool {
        self.duplicated == 0 && self.unknown == 0 && self.missed == 0
    }
}

/// Compares the changes a watcher received (position and resource, in
/// arrival order) with the change log's entries over the same range. A
/// watch delivers a resource's latest state at the position of its latest
/// entry in the page it read, so several entries of one resource may arrive
/// as one change: each entry must be covered by exactly one received change
/// of its resource at or after it, received changes must sit on entries of
/// their resource, and none may repeat.
pub fn exactly_once(entries: &[(Position, Uuid)], received: &[(Position, Uuid)]) -> ExactlyOnce {
    let mut by_position: HashMap<Position, Uuid> = HashMap::with_capacity(entries.len());
    let mut last_entry: HashMap<Uuid, Position> = HashMap::new();
    for (position, id) in entries {
        by_position.insert(*position, *id);
        let last = last_entry.entry(*id).or_insert(*position);
        *last = (*last).max(*position);
    }
    let mut result = ExactlyOnce {
        entries: entries.len(),
        resources: last_entry.len(),
        received: received.len(),
        ..ExactlyOnce::default()
    };
    let mut previous: Option<Position> = None;
    let mut last_received: HashMap<Uuid, Position> = HashMap::new();
    for (position, id) in received {
        if previous.is_some_and(|p| *position <= p) {
            result.duplicated += 1;
            continue;
        }
        previous = Some(*position);
        if by_position.get(position) != Some(id) {
            result.unknown += 1;
            continue;
        }
        last_received.insert(*id, *position);
    }
    for (position, id) in entries {
        if last_received.get(id).is_none_or(|got| position > got) {
            result.missed += 1;
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(txid: i64, seq: i64) -> Position {
        Position { txid, seq }
    }

    #[test]
    fn collapsed_changes_cover_their_entries_once() {
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let log = [(at(1, 1), a), (at(1, 2), b), (at(2, 3), a), (at(3, 4), b)];
        // a's two entries arrive as one change, b's one by one.
        let got = exactly_once(&log, &[(at(1, 2), b), (at(2, 3), a), (at(3, 4), b)]);
        assert!(got.holds(), "{got:?}");
        assert_eq!((got.entries, got.resources, got.received), (4, 2, 3));
        // b's last entry never arrives.
        let got = exactly_once(&log, &[(at(1, 2), b), (at(2, 3), a)]);
        assert_eq!(got.missed, 1);
        // A change again, and one at a position of another resource (so
        // b's last entry is missed).
        let got = exactly_once(&log, &[(at(1, 2), b), (at(2, 3), a), (at(2, 3), a), (at(3, 4), a)]);
        assert_eq!((got.duplicated, got.unknown, got.missed), (1, 1, 1));
    }
}
