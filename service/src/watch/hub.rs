//! The per-process change-log reader and its subscribers.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use uuid::Uuid;

use super::{Change, ChangeType, Delivery, WatchFilter};
use crate::catalog::KindCatalog;
use crate::db::notify::{self, Channel, Notice, Notifications};
use crate::domain::position::Position;
use crate::store::StoreError;
use crate::store::changes::{self, ChangeRow};
use crate::store::resources;

/// Tuning of the hub.
#[derive(Debug, Clone, Copy)]
pub struct HubConfig {
    /// Queued deliveries per subscriber before it is cut off as too slow.
    pub queue_capacity: usize,
    /// Recent changes kept in memory for subscribers joining at a recent position.
    pub window: usize,
    /// Change-log entries read per statement.
    pub page: usize,
    /// Poll interval while changes are arriving.
    pub busy_poll: Duration,
    /// How long to keep polling fast after the last change or wake-up.
    pub linger: Duration,
    /// Poll interval while changes are held back by an unfinished transaction.
    pub held_back_poll: Duration,
    /// Poll interval when idle (a missed notification costs at most this).
    pub idle_poll: Duration,
    /// Interval of periodic bookmarks for subscribers that asked for them.
    pub bookmark_interval: Duration,
}

impl Default for HubConfig {
    fn default() -> Self {
        Self {
            queue_capacity: 4096,
            window: 4096,
            page: 1000,
            busy_poll: Duration::from_millis(10),
            linger: Duration::from_millis(150),
            held_back_poll: Duration::from_millis(50),
            idle_poll: Duration::from_secs(1),
            bookmark_interval: Duration::from_secs(5),
        }
    }
}

/// Why a subscription ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscriptionEnd {
    /// The subscriber read too slowly and its queue filled.
    Lagged,
    /// The server is shutting down.
    ShuttingDown,
    /// Retention trimmed changes the subscriber had not received yet.
    TooOld,
    /// The database failed while catching up.
    Unavailable,
}

struct Subscriber {
    filter: WatchFilter,
    from: Position,
    bookmarks: bool,
    tx: mpsc::Sender<Delivery>,
    end: Arc<Mutex<Option<SubscriptionEnd>>>,
}

struct State {
    /// Every change at or below this position has been offered to subscribers.
    reached: Position,
    /// Recent changes, oldest first.
    window: VecDeque<Arc<Change>>,
    /// Every offered change above this position is in `window`.
    window_start: Position,
    subscribers: HashMap<u64, Subscriber>,
    closed: bool,
}

/// The change-log reader shared by all watches of this process.
pub struct WatchHub {
    pool: PgPool,
    catalog: Arc<KindCatalog>,
    config: HubConfig,
    state: Mutex<State>,
    next_id: AtomicU64,
    event_wake: watch::Sender<u64>,
    closed: watch::Sender<bool>,
}

impl std::fmt::Debug for WatchHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchHub")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A subscriber's end of the hub.
#[derive(Debug)]
pub struct Subscription {
    rx: mpsc::Receiver<Delivery>,
    end: Arc<Mutex<Option<SubscriptionEnd>>>,
    id: u64,
    hub: Arc<WatchHub>,
}

impl Subscription {
    /// The next delivery; `None` when the subscription ended (see [`Subscription::end`]).
    pub async fn recv(&mut self) -> Option<Delivery> {
        self.rx.recv().await
    }

    /// Why the subscription ended, once it has.
    pub fn end(&self) -> Option<SubscriptionEnd> {
        *self.end.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.remove(self.id);
    }
}

fn set_end(end: &Mutex<Option<SubscriptionEnd>>, why: SubscriptionEnd) {
    let mut slot = end.lock().unwrap_or_else(|p| p.into_inner());
    slot.get_or_insert(why);
}

impl WatchHub {
    /// Starts the hub at the current head of the change log; it runs until `stop` flips.
    pub async fn start(
        pool: PgPool,
        notifications: &Notifications,
        catalog: Arc<KindCatalog>,
        config: HubConfig,
        stop: watch::Receiver<bool>,
    ) -> Result<(Arc<Self>, JoinHandle<()>), StoreError> {
        let start = changes::head(&pool).await?;
        let hub = Arc::new(Self {
            pool,
            catalog,
            config,
            state: Mutex::new(State {
                reached: start,
                window: VecDeque::new(),
                window_start: start,
                subscribers: HashMap::new(),
                closed: false,
            }),
            next_id: AtomicU64::new(1),
            event_wake: watch::channel(0).0,
            closed: watch::channel(false).0,
        });
        let changes = notifications.subscribe(&[Channel::ResourceChanged, Channel::EventChanged]);
        let task = tokio::spawn(hub.clone().run(changes, stop));
        Ok((hub, task))
    }

    /// The database pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// A receiver that changes whenever an event run may have been written.
    pub fn event_wake(&self) -> watch::Receiver<u64> {
        self.event_wake.subscribe()
    }

    /// A receiver that becomes `true` when the hub shuts down.
    pub fn closed(&self) -> watch::Receiver<bool> {
        self.closed.subscribe()
    }

    /// Subscribes to matching changes after `from`. A position older than the
    /// in-memory window is caught up from the database first.
    pub fn subscribe(self: &Arc<Self>, filter: WatchFilter, from: Position, bookmarks: bool) -> Subscription {
        let (tx, rx) = mpsc::channel(self.config.queue_capacity);
        let end = Arc::new(Mutex::new(None));
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let subscriber = Subscriber {
            filter,
            from,
            bookmarks,
            tx,
            end: end.clone(),
        };
        if let Err(subscriber) = self.try_join(id, Box::new(subscriber)) {
            tokio::spawn(self.clone().catch_up(id, subscriber));
        }
        Subscription {
            rx,
            end,
            id,
            hub: self.clone(),
        }
    }

    /// Registers the subscriber if the window covers its position, after
    /// queueing the window's changes it has not seen.
    fn try_join(&self, id: u64, subscriber: Box<Subscriber>) -> Result<(), Box<Subscriber>> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.closed {
            set_end(&subscriber.end, SubscriptionEnd::ShuttingDown);
            return Ok(());
        }
        if subscriber.from < state.window_start {
            return Err(subscriber);
        }
        for change in &state.window {
            if change.position > subscriber.from && subscriber.filter.matches(change) {
                // The queue holds at least a whole window, so this only fails
                // when the subscriber is already gone.
                if subscriber.tx.try_send(Delivery::Change(change.clone())).is_err() {
                    set_end(&subscriber.end, SubscriptionEnd::Lagged);
                    return Ok(());
                }
            }
        }
        state.subscribers.insert(id, *subscriber);
        Ok(())
    }

    /// Reads the change log from the subscriber's position until the window
    /// covers it, then joins.
    async fn catch_up(self: Arc<Self>, id: u64, mut subscriber: Box<Subscriber>) {
        loop {
            match changes::horizon(&self.pool).await {
                Ok(horizon) if subscriber.from < horizon => {
                    set_end(&subscriber.end, SubscriptionEnd::TooOld);
                    return;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "watch catch-up failed");
                    set_end(&subscriber.end, SubscriptionEnd::Unavailable);
                    return;
                }
            }
            subscriber = match self.try_join(id, subscriber) {
                Ok(()) => return,
                Err(subscriber) => subscriber,
            };
            let page = match changes::read_after(&self.pool, subscriber.from, self.config.page).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(error = %e, "watch catch-up failed");
                    set_end(&subscriber.end, SubscriptionEnd::Unavailable);
                    return;
                }
            };
            let built = match self.build(&page.rows).await {
                Ok(built) => built,
                Err(e) => {
                    tracing::warn!(error = %e, "watch catch-up failed");
                    set_end(&subscriber.end, SubscriptionEnd::Unavailable);
                    return;
                }
            };
            for change in built {
                if subscriber.filter.matches(&change) && subscriber.tx.send(Delivery::Change(change)).await.is_err() {
                    return; // the watcher went away
                }
            }
            let reached = page.reached(subscriber.from, self.config.page);
            if page.rows.is_empty() {
                // Nothing readable yet: the hub is ahead only by what it has
                // in its window, which the next join attempt covers.
                tokio::time::sleep(self.config.busy_poll).await;
            }
            subscriber.from = reached;
        }
    }

    fn remove(&self, id: u64) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.subscribers.remove(&id);
    }

    /// The number of live subscribers (for diagnostics and tests).
    pub fn subscriber_count(&self) -> usize {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).subscribers.len()
    }

    async fn run(self: Arc<Self>, mut changes: notify::Subscription, mut stop: watch::Receiver<bool>) {
        let mut next_poll = Instant::now();
        let mut fast_until = Instant::now();
        let mut next_bookmark = Instant::now() + self.config.bookmark_interval;
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                notice = changes.recv() => match notice {
                    Notice::Notified { channel: Channel::EventChanged, .. } => {
                        self.event_wake.send_modify(|n| *n = n.wrapping_add(1));
                        continue;
                    }
                    Notice::Notified { .. } => {
                        fast_until = Instant::now() + self.config.linger;
                        next_poll = Instant::now();
                    }
                    Notice::Missed => {
                        self.event_wake.send_modify(|n| *n = n.wrapping_add(1));
                        next_poll = Instant::now();
                    }
                },
                _ = tokio::time::sleep_until(next_poll) => {}
            }
            if Instant::now() < next_poll {
                continue;
            }
            let now = Instant::now();
            match self.poll().await {
                Ok(Progress::Delivered) => {
                    fast_until = now + self.config.linger;
                    next_poll = now + self.config.busy_poll;
                }
                Ok(Progress::HeldBack) => next_poll = now + self.config.held_back_poll,
                Ok(Progress::Idle) if now < fast_until => next_poll = now + self.config.busy_poll,
                Ok(Progress::Idle) => next_poll = now + self.config.idle_poll,
                Err(e) => {
                    tracing::warn!(error = %e, "watch reader failed; retrying");
                    next_poll = now + self.config.idle_poll;
                }
            }
            // Event streams poll on their own; keep them moving on the failsafe too.
            if now >= next_bookmark {
                self.bookmark();
                self.event_wake.send_modify(|n| *n = n.wrapping_add(1));
                next_bookmark = now + self.config.bookmark_interval;
            }
        }
        self.shut_down();
    }

    fn shut_down(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.closed = true;
        for (_, subscriber) in state.subscribers.drain() {
            set_end(&subscriber.end, SubscriptionEnd::ShuttingDown);
        }
        let _ = self.closed.send(true);
    }

    fn bookmark(&self) {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        for subscriber in state.subscribers.values() {
            if subscriber.bookmarks && state.reached > subscriber.from {
                // A full queue will be cut off by the next change anyway.
                let _ = subscriber.tx.try_send(Delivery::Bookmark(state.reached));
            }
        }
    }

    /// Reads and offers everything readable; reports what it found.
    async fn poll(&self) -> Result<Progress, StoreError> {
        if self.unwatched() {
            // Nobody to offer changes to: move up to the frontier without
            // reading the log (under a bulk load, reading it was the hub's
            // whole cost). A subscriber that joined meanwhile finds the
            // hub at most at the frontier and is served by the next poll.
            let mut conn = self.pool.acquire().await?;
            let frontier = changes::frontier(&mut conn).await?;
            self.pass_unwatched(Position { txid: frontier, seq: 0 });
            return Ok(Progress::Idle);
        }
        let mut delivered = false;
        loop {
            let reached = self.state.lock().unwrap_or_else(|p| p.into_inner()).reached;
            let page = changes::read_after(&self.pool, reached, self.config.page).await?;
            let full = page.rows.len() >= self.config.page;
            let next = page.reached(reached, self.config.page);
            if !self.pass_unwatched(next) {
                let built = self.build(&page.rows).await?;
                delivered |= !built.is_empty();
                self.offer(built, next);
            }
            if !full {
                break;
            }
        }
        if delivered {
            return Ok(Progress::Delivered);
        }
        let reached = self.state.lock().unwrap_or_else(|p| p.into_inner()).reached;
        if changes::pending_after(&self.pool, reached).await? {
            Ok(Progress::HeldBack)
        } else {
            Ok(Progress::Idle)
        }
    }

    /// Whether nobody is subscribed right now.
    fn unwatched(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .subscribers
            .is_empty()
    }

    /// With nobody subscribed, moves past changes without reading the
    /// resources behind them (under a bulk load that read is most of the
    /// hub's cost): the window restarts at `reached`, and a watch that
    /// starts below it later catches up from the change log. False (and
    /// nothing done) when anyone is subscribed.
    fn pass_unwatched(&self, reached: Position) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if !state.subscribers.is_empty() {
            return false;
        }
        if reached > state.reached {
            state.reached = reached;
        }
        state.window.clear();
        state.window_start = state.reached;
        true
    }

    fn offer(&self, built: Vec<Arc<Change>>, reached: Position) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut lagged = Vec::new();
        for change in built {
            for (id, subscriber) in &state.subscribers {
                if change.position > subscriber.from
                    && subscriber.filter.matches(&change)
                    && subscriber.tx.try_send(Delivery::Change(change.clone())).is_err()
                {
                    set_end(&subscriber.end, SubscriptionEnd::Lagged);
                    lagged.push(*id);
                }
            }
            for id in lagged.drain(..) {
                state.subscribers.remove(&id);
            }
            state.window.push_back(change);
            while state.window.len() > self.config.window {
                if let Some(evicted) = state.window.pop_front() {
                    state.window_start = evicted.position;
                }
            }
        }
        if reached > state.reached {
            state.reached = reached;
        }
    }

    /// Turns change-log entries into deliverable changes: several entries of
    /// one resource collapse into its latest state, at its last position,
    /// typed by its last entry (a deletion wins). A creation followed by a
    /// change collapses to MODIFIED, never ADDED: the collapse may span a
    /// subscriber's start, and the subscriber may already hold the resource.
    async fn build(&self, rows: &[ChangeRow]) -> Result<Vec<Arc<Change>>, StoreError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        // Per resource: the type of its collapsed change and its last entry.
        let mut order: Vec<Uuid> = Vec::new();
        let mut seen: HashMap<Uuid, (ChangeType, usize)> = HashMap::new();
        for (i, row) in rows.iter().enumerate() {
            let kind = match row.change.as_str() {
                "added" => ChangeType::Added,
                "deleted" => ChangeType::Deleted,
                _ => ChangeType::Modified,
            };
            match seen.get_mut(&row.resource_id) {
                Some((collapsed, last)) => {
                    *last = i;
                    if *collapsed != ChangeType::Deleted {
                        *collapsed = if kind == ChangeType::Deleted {
                            ChangeType::Deleted
                        } else {
                            ChangeType::Modified
                        };
                    }
                }
                None => {
                    order.push(row.resource_id);
                    seen.insert(row.resource_id, (kind, i));
                }
            }
        }
        let live: Vec<Uuid> = seen
            .iter()
            .filter(|(_, (kind, _))| *kind != ChangeType::Deleted)
            .map(|(id, _)| *id)
            .collect();
        let mut conn = self.pool.acquire().await?;
        let mut states: HashMap<Uuid, crate::domain::resource::Resource> = resources::get_many(&mut conn, &live)
            .await?
            .into_iter()
            .map(|r| (r.id, r))
            .collect();
        let mut built: Vec<(usize, Arc<Change>)> = Vec::with_capacity(seen.len());
        for id in order {
            let Some((kind, last)) = seen.get(&id).copied() else {
                continue;
            };
            let row = &rows[last];
            let resource = match kind {
                ChangeType::Deleted => row
                    .image
                    .as_ref()
                    .and_then(|image| resources::resource_from_image(&image.0)),
                // Gone since: its deletion entry follows in a later page.
                _ => states.remove(&id),
            };
            let Some(resource) = resource else { continue };
            let version = self
                .catalog
                .cached_version(&resource.kind, resource.kind_version)
                .unwrap_or(0);
            built.push((last, Arc::new(Change::new(kind, row.position(), resource, version))));
        }
        built.sort_by_key(|(last, _)| *last);
        Ok(built.into_iter().map(|(_, change)| change).collect())
    }
}

/// What one poll found.
enum Progress {
    /// Changes were delivered.
    Delivered,
    /// Nothing readable, but entries wait behind an unfinished transaction.
    HeldBack,
    /// Nothing new.
    Idle,
}
