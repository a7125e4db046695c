//! Database notifications: one `LISTEN` connection per process, shared by
//! every loop that wakes on a `NOTIFY`.
//!
//! The connection lives outside the query pool, so the pool's size is all
//! query capacity (each loop used to hold a pool connection of its own for
//! listening, five in all). Every subscriber also has a failsafe poll, so a
//! missed notification costs latency, never correctness; [`Notice::Missed`]
//! says when one may have been missed (a reconnect, or a subscriber that fell
//! behind) so it can look at once instead of at its next poll.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::{PgListener, PgPoolOptions};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

/// Notices buffered per subscriber before it counts as fallen behind.
const BUFFER: usize = 1024;

/// Pause before reconnecting after the listener failed.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// The channels converge's schema notifies on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channel {
    /// A kind manifest was stored or removed; the payload is `kind:version`.
    KindManifestChanged,
    /// The resource change log grew.
    ResourceChanged,
    /// A resource event was recorded.
    EventChanged,
    /// Workers' results wait in the outbox.
    OutboxReady,
    /// Tasks became claimable.
    WorkReady,
    /// Cluster membership changed.
    ClusterChanged,
    /// The default provider config of a pair changed; the payload is
    /// `kind:version`.
    ProviderConfigChanged,
    /// A plan waits for a composer worker; the payload is `kind:version`.
    PlanRequested,
    /// A composer worker answered a plan; the payload is the request id.
    PlanAnswered,
}

impl Channel {
    /// Every channel, in the order they are listened to.
    pub const ALL: [Channel; 9] = [
        Channel::KindManifestChanged,
        Channel::ResourceChanged,
        Channel::EventChanged,
        Channel::OutboxReady,
        Channel::WorkReady,
        Channel::ClusterChanged,
        Channel::ProviderConfigChanged,
        Channel::PlanRequested,
        Channel::PlanAnswered,
    ];

    /// The channel's name in `NOTIFY`.
    pub const fn name(self) -> &'static str {
        match self {
            Channel::KindManifestChanged => "kind_manifest_changed",
            Channel::ResourceChanged => "resource_changed",
            Channel::EventChanged => "event_changed",
            Channel::OutboxReady => "outbox_ready",
            Channel::WorkReady => "work_ready",
            Channel::ClusterChanged => "cluster_changed",
            Channel::ProviderConfigChanged => "provider_config_changed",
            Channel::PlanRequested => "plan_requested",
            Channel::PlanAnswered => "plan_answered",
        }
    }

    fn from_name(name: &str) -> Option<Channel> {
        Channel::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// What a subscriber is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A notification on one of its channels.
    Notified {
        /// The channel.
        channel: Channel,
        /// The payload (empty for wake-ups).
        payload: Arc<str>,
    },
    /// Notifications may have been missed: look now.
    Missed,
}

/// The process's notification feed; cheap to clone.
#[derive(Debug, Clone)]
pub struct Notifications {
    feed: broadcast::Sender<Notice>,
}

impl Notifications {
    /// Starts listening on every [`Channel`] over a connection of its own to
    /// the database behind `pool`, until `stop` flips.
    pub fn spawn(pool: &PgPool, stop: watch::Receiver<bool>) -> (Self, JoinHandle<()>) {
        let (feed, _) = broadcast::channel(BUFFER);
        // A pool of one that never retires its connection: the listener's own.
        let own = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .max_lifetime(None)
            .idle_timeout(None)
            .connect_lazy_with((*pool.connect_options()).clone());
        let task = tokio::spawn(run(own, pool.clone(), feed.clone(), stop));
        (Self { feed }, task)
    }

    /// Tells this process's subscribers of `channel` about a change this
    /// process has just committed, as if its `NOTIFY` had arrived. They
    /// react at once instead of after the listener's hop, or after their
    /// next poll when the schema's throttle window swallowed the `NOTIFY`
    /// (a second change within 5 ms of the first, as a result following its
    /// apply on an idle system). Other processes still learn of the change
    /// from the database. Meant for occasional use: a flood of local notices
    /// makes slow subscribers fall behind (they then see [`Notice::Missed`]).
    pub fn local(&self, channel: Channel) {
        // No subscriber is no error: nothing in this process listens.
        let _ = self.feed.send(Notice::Notified {
            channel,
            payload: Arc::from(""),
        });
    }

    /// A subscription to `channels`.
    pub fn subscribe(&self, channels: &[Channel]) -> Subscription {
        Subscription {
            feed: self.feed.subscribe(),
            channels: channels.to_vec(),
        }
    }
}

/// One loop's view of the feed.
#[derive(Debug)]
pub struct Subscription {
    feed: broadcast::Receiver<Notice>,
    channels: Vec<Channel>,
}

impl Subscription {
    /// The next notice for this subscription; `None` once the feed has
    /// stopped.
    pub async fn next(&mut self) -> Option<Notice> {
        loop {
            match self.feed.recv().await {
                Ok(Notice::Notified { channel, payload }) => {
                    if self.channels.contains(&channel) {
                        return Some(Notice::Notified { channel, payload });
                    }
                }
                Ok(Notice::Missed) | Err(broadcast::error::RecvError::Lagged(_)) => return Some(Notice::Missed),
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// The next notice, for loops that poll as well and stop on a signal of
    /// their own: once the feed has stopped it never returns (they carry on
    /// with their polls).
    pub async fn recv(&mut self) -> Notice {
        match self.next().await {
            Some(notice) => notice,
            None => std::future::pending().await,
        }
    }
}

async fn run(pool: PgPool, primary: PgPool, feed: broadcast::Sender<Notice>, mut stop: watch::Receiver<bool>) {
    loop {
        // The primary pool's current options: their password may have been
        // renewed since the last connect (db::auth).
        pool.set_connect_options((*primary.connect_options()).clone());
        tokio::select! {
            _ = stop.changed() => break,
            failed = listen(&pool, &feed) => {
                tracing::debug!(error = %failed, "database listener failed; reconnecting");
                let _ = feed.send(Notice::Missed);
            }
        }
        tokio::select! {
            _ = stop.changed() => break,
            _ = tokio::time::sleep(RECONNECT_PAUSE) => {}
        }
    }
    pool.close().await;
}

/// Forwards notifications until the connection fails; returns why.
async fn listen(pool: &PgPool, feed: &broadcast::Sender<Notice>) -> sqlx::Error {
    let mut listener = match PgListener::connect_with(pool).await {
        Ok(listener) => listener,
        Err(e) => return e,
    };
    if let Err(e) = listener.listen_all(Channel::ALL.map(Channel::name)).await {
        return e;
    }
    // Anything sent while this connection was not listening is lost.
    let _ = feed.send(Notice::Missed);
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => {
                if let Some(channel) = Channel::from_name(notification.channel()) {
                    let _ = feed.send(Notice::Notified {
                        channel,
                        payload: Arc::from(notification.payload()),
                    });
                }
            }
            // The connection dropped; the next call reconnects and re-listens.
            Ok(None) => {
                let _ = feed.send(Notice::Missed);
            }
            Err(e) => return e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestDatabase;

    /// A running feed on `pool`, stopped when dropped.
    struct Feed {
        notifications: Notifications,
        /// Where probes are sent from.
        pool: PgPool,
        stop: watch::Sender<bool>,
        task: JoinHandle<()>,
    }

    impl Feed {
        fn start(pool: &PgPool) -> Self {
            let (stop, stop_rx) = watch::channel(false);
            let (notifications, task) = Notifications::spawn(pool, stop_rx);
            Self {
                notifications,
                pool: pool.clone(),
                stop,
                task,
            }
        }

        /// A subscription to `channels`, once the listener is listening:
        /// probes on the first channel until one comes back. (Its first
        /// `Missed` says so too, but may be sent before the subscription
        /// exists, and a notification sent before LISTEN is lost.)
        async fn subscribe(&self, channels: &[Channel]) -> Result<Subscription, sqlx::Error> {
            let mut subscription = self.notifications.subscribe(channels);
            for attempt in 0.. {
                let probe = format!("probe-{attempt}");
                notify(&self.pool, channels[0], &probe).await?;
                let seen = tokio::time::timeout(Duration::from_millis(200), async {
                    // Earlier probes and the listener's `Missed` go by first.
                    while subscription.recv().await
                        != (Notice::Notified {
                            channel: channels[0],
                            payload: Arc::from(probe.as_str()),
                        })
                    {}
                })
                .await;
                if seen.is_ok() {
                    break;
                }
            }
            Ok(subscription)
        }

        async fn stop(self) -> Result<(), tokio::task::JoinError> {
            let _ = self.stop.send(true);
            self.task.await
        }
    }

    async fn next(subscription: &mut Subscription) -> Notice {
        tokio::time::timeout(Duration::from_secs(10), subscription.recv())
            .await
            .unwrap_or(Notice::Missed)
    }

    async fn notify(pool: &PgPool, channel: Channel, payload: &str) -> Result<(), sqlx::Error> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(channel.name())
            .bind(payload)
            .execute(pool)
            .await
            .map(drop)
    }

    /// The next notification, past any `Missed`.
    async fn notified(subscription: &mut Subscription) -> Option<(Channel, String)> {
        for _ in 0..3 {
            if let Notice::Notified { channel, payload } = next(subscription).await {
                return Some((channel, payload.to_string()));
            }
        }
        None
    }

    #[tokio::test]
    async fn subscribers_see_their_channels_only_and_payloads_arrive() -> Result<(), Box<dyn std::error::Error>> {
        let db = TestDatabase::new().await?;
        let feed = Feed::start(db.pool());
        let mut work = feed.subscribe(&[Channel::WorkReady]).await?;
        let mut kinds = feed.subscribe(&[Channel::KindManifestChanged]).await?;

        notify(db.pool(), Channel::KindManifestChanged, "noop:1").await?;
        notify(db.pool(), Channel::WorkReady, "").await?;
        assert_eq!(
            notified(&mut kinds).await,
            Some((Channel::KindManifestChanged, "noop:1".into()))
        );
        assert_eq!(notified(&mut work).await, Some((Channel::WorkReady, String::new())));
        feed.stop().await?;
        // A stopped feed ends its subscriptions.
        assert_eq!(work.next().await, None);
        Ok(())
    }

    #[tokio::test]
    async fn local_notices_reach_this_process_subscribers_of_their_channel() -> Result<(), Box<dyn std::error::Error>> {
        let db = TestDatabase::new().await?;
        let feed = Feed::start(db.pool());
        let mut changes = feed.subscribe(&[Channel::ResourceChanged]).await?;
        let mut work = feed.subscribe(&[Channel::WorkReady]).await?;

        feed.notifications.local(Channel::ResourceChanged);
        assert_eq!(
            notified(&mut changes).await,
            Some((Channel::ResourceChanged, String::new()))
        );
        // Another channel's subscriber hears of it neither locally nor from
        // the database: a local notice sends no NOTIFY.
        let other = tokio::time::timeout(Duration::from_millis(300), work.recv()).await;
        assert!(other.is_err(), "WorkReady subscriber was told {other:?}");
        feed.stop().await?;
        Ok(())
    }

    #[tokio::test]
    async fn listening_takes_no_connection_from_the_pool() -> Result<(), Box<dyn std::error::Error>> {
        let db = TestDatabase::new().await?;
        let pool = crate::db::pool_options(1)
            .min_connections(0)
            .connect_with(db.connect_options()?)
            .await?;
        let feed = Feed::start(&pool);
        let mut work = feed.subscribe(&[Channel::WorkReady]).await?;
        // The pool's only connection is free for queries while listening: each
        // NOTIFY goes through it, and one comes back. (Several tries, since a
        // listener that reconnects in between loses what was sent meanwhile;
        // were the connection taken, the first NOTIFY would fail to acquire.)
        let mut seen = Vec::new();
        for attempt in 0..20 {
            let payload = format!("x-{attempt}");
            notify(&pool, Channel::WorkReady, &payload).await?;
            let heard = tokio::time::timeout(Duration::from_secs(1), async {
                loop {
                    let notice = work.recv().await;
                    seen.push(notice.clone());
                    if let Notice::Notified { payload: p, .. } = notice
                        && *p == *payload
                    {
                        break;
                    }
                }
            })
            .await;
            if heard.is_ok() {
                feed.stop().await?;
                return Ok(());
            }
        }
        panic!("no NOTIFY through a pool of one came back; notices: {seen:?}");
    }

    #[tokio::test]
    async fn a_dropped_listener_connection_is_reported_and_replaced() -> Result<(), Box<dyn std::error::Error>> {
        let db = TestDatabase::new().await?;
        let feed = Feed::start(db.pool());
        let mut work = feed.subscribe(&[Channel::WorkReady]).await?;

        // Kill the listening backend from another session.
        let killed: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity a
             WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
               AND a.query ILIKE 'LISTEN%' AND pg_terminate_backend(a.pid)",
        )
        .fetch_one(db.pool())
        .await?;
        assert_eq!(killed, 1);
        assert_eq!(next(&mut work).await, Notice::Missed);

        // Notifications flow again once it has re-listened.
        let mut delivered = false;
        for _ in 0..50 {
            notify(db.pool(), Channel::WorkReady, "again").await?;
            let notice = tokio::time::timeout(Duration::from_millis(200), work.recv()).await;
            if let Ok(Notice::Notified { payload, .. }) = notice {
                assert_eq!(&*payload, "again");
                delivered = true;
                break;
            }
        }
        assert!(delivered, "no notification after the listener was replaced");
        feed.stop().await?;
        Ok(())
    }
}
