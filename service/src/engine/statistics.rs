//! Planner statistics kept in step with fast-growing tables: a table that
//! holds more than twice the rows its statistics claim is analysed, which
//! also replans the cached plans that use it.
//! Autovacuum alone lags a bulk load by minutes, and can record a queue
//! table as empty at a quiet moment; plans that believe a full table empty
//! scan it whole once per row at hand (the 1M load run stalled on that).
//! Cheap when nothing grew: one catalog read per table.
//! Safe on several pods at once (one pod analyses a table at a time).

use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::store::statistics;

/// How often the statistics are checked.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// Checks the statistics every `interval` until `stop` flips.
pub fn spawn(pool: PgPool, interval: Duration, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = tick.tick() => match statistics::refresh(&pool).await {
                    Ok(0) => {}
                    Ok(analysed) => tracing::debug!(analysed, "refreshed planner statistics"),
                    Err(e) => tracing::warn!(error = %e, "checking planner statistics failed"),
                },
            }
        }
    })
}
