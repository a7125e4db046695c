//! Samples the work queue and the outbox for the metrics: queue depth and
//! the age of the oldest due task by kind, and the drain lag. Runs only
//! when metrics are on; a pass is one scan of the (unlogged) queue and one
//! index probe, every [`SAMPLE_INTERVAL`], never per claim.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::store::work::{self, QueueFigure};

/// How often the queue is sampled.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);

/// The latest sample, read by the metric callbacks.
#[derive(Debug, Default, Clone)]
pub struct QueueSample {
    /// Figures by kind.
    pub kinds: Vec<QueueFigure>,
    /// Age of the oldest result not yet drained, in seconds.
    pub drain_lag_secs: f64,
}

/// The shared latest sample.
pub type SharedSample = Arc<Mutex<QueueSample>>;

/// Reads the latest sample.
pub fn latest(sample: &SharedSample) -> QueueSample {
    sample.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// Samples every `interval` until `stop` flips.
pub fn spawn(
    pool: PgPool,
    sample: SharedSample,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = tick.tick() => {
                    let taken = async {
                        Ok::<_, crate::store::StoreError>(QueueSample {
                            kinds: work::queue_figures(&pool).await?,
                            drain_lag_secs: work::drain_lag_secs(&pool).await?,
                        })
                    };
                    match taken.await {
                        Ok(taken) => *sample.lock().unwrap_or_else(PoisonError::into_inner) = taken,
                        Err(e) => tracing::debug!(error = %e, "sampling the work queue failed"),
                    }
                }
            }
        }
    })
}
