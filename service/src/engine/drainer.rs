//! The drainer: applies the results workers left in `work_outbox`, many per
//! transaction, over this member's shard range; then re-checks owners whose
//! rollup was held back by a child settling in a concurrent transaction.
//! Woken by `outbox_ready` and by a failsafe poll; idempotent and safe on
//! several pods at once (SKIP LOCKED, fenced rows).

use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::db::notify::{Channel, Notifications};
use crate::domain::shard::ShardRange;
use crate::store::{StoreError, work};

/// Drainer tuning.
#[derive(Debug, Clone, Copy)]
pub struct DrainerConfig {
    /// Outbox rows applied per transaction.
    pub batch: i32,
    /// Poll interval when no wake-up arrives.
    pub failsafe: Duration,
    /// Poll interval while rollup rechecks are armed.
    pub recheck_poll: Duration,
    /// How long an armed rollup recheck is kept while its owner stays blocked.
    pub recheck_window: Duration,
    /// Poll interval while results are flowing.
    pub busy_poll: Duration,
    /// How long the drainer keeps polling fast after the last sign of work.
    pub linger: Duration,
}

impl Default for DrainerConfig {
    fn default() -> Self {
        Self {
            batch: 500,
            failsafe: Duration::from_secs(1),
            recheck_poll: Duration::from_millis(25),
            recheck_window: Duration::from_secs(5),
            busy_poll: Duration::from_millis(5),
            linger: Duration::from_millis(120),
        }
    }
}

/// Runs the drainer until `stop` flips.
pub fn spawn(
    pool: PgPool,
    notifications: &Notifications,
    config: DrainerConfig,
    shards: watch::Receiver<Option<ShardRange>>,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let mut wake = notifications.subscribe(&[Channel::OutboxReady]);
    tokio::spawn(async move {
        // Wake-ups are throttled to one per 5 ms window fleet-wide, so after
        // any sign of work the drainer polls fast for a while to catch
        // results appended just after the wake it saw.
        let mut busy_until = tokio::time::Instant::now();
        loop {
            let range = *shards.borrow();
            let mut pause = config.failsafe;
            if let Some(range) = range {
                match pass(&pool, &config, range).await {
                    // More may be waiting: go again at once.
                    Ok(Pass { drained, .. }) if drained >= config.batch => pause = Duration::ZERO,
                    Ok(Pass { drained, armed }) => {
                        if drained > 0 {
                            busy_until = tokio::time::Instant::now() + config.linger;
                        }
                        if armed {
                            pause = config.recheck_poll;
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "drain pass failed"),
                }
            }
            if tokio::time::Instant::now() < busy_until {
                pause = pause.min(config.busy_poll);
            }
            if pause.is_zero() {
                if *stop.borrow() {
                    break;
                }
                continue;
            }
            tokio::select! {
                _ = stop.changed() => break,
                _ = wake.recv() => busy_until = tokio::time::Instant::now() + config.linger,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    })
}

/// What one pass did.
struct Pass {
    drained: i32,
    /// Whether rollup rechecks remain armed (poll again soon).
    armed: bool,
}

async fn pass(pool: &PgPool, config: &DrainerConfig, range: ShardRange) -> Result<Pass, StoreError> {
    let drained = work::drain_outbox(pool, config.batch, range).await?;
    let armed = work::rollup_rechecks_armed(pool, range).await?;
    if armed {
        work::drain_rollup_rechecks(pool, config.batch, range, config.recheck_window.as_secs_f64()).await?;
    }
    Ok(Pass { drained, armed })
}
