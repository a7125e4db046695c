//! Keeps the fleet summary's snapshot (`store::summary`) fresh while it is
//! used: GetFleetSummary served it in the last ten minutes, or this process
//! exports metrics (the resources-by-phase gauge reads it). A pass retakes it
//! only when the resources table was written since (or it is older than
//! [`MAX_AGE`]), on one member at a time, and the next pass waits at least
//! [`PACE`] times as long as the count took, so a large fleet under load
//! spends at most about 5% of one database backend on it. Unused, a pass is
//! one cheap read; the writers of resources never pay anything.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::domain::admin::FleetSummary;
use crate::store::summary;

/// How often the snapshot is checked.
pub const INTERVAL: Duration = Duration::from_secs(15);

/// A snapshot older than this is taken again even if nothing was written
/// (statistics may be off, or reset).
pub const MAX_AGE: Duration = Duration::from_secs(300);

/// The next pass waits at least this many times the last count's duration.
pub const PACE: u32 = 20;

/// Failure reasons a snapshot keeps (GetFleetSummary's default).
pub const TOP_FAILURES: usize = 10;

/// The latest snapshot this member has read, for the gauge.
pub type SharedSummary = Arc<Mutex<Option<FleetSummary>>>;

/// Reads the latest snapshot.
pub fn latest(shared: &SharedSummary) -> Option<FleetSummary> {
    shared.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// Checks the snapshot every `interval` (or longer, see [`PACE`]) until
/// `stop` flips. With `shared` (metrics on) it is always wanted, and
/// `shared` is kept at the stored one.
pub fn spawn(
    pool: PgPool,
    shared: Option<SharedSummary>,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut wait = Duration::ZERO;
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            let started = Instant::now();
            wait = match summary::refresh(&pool, shared.is_some(), MAX_AGE, TOP_FAILURES).await {
                Ok(true) => interval.max(started.elapsed() * PACE),
                Ok(false) => interval,
                Err(e) => {
                    tracing::warn!(error = %e, "taking the fleet summary snapshot failed");
                    interval
                }
            };
            if let Some(shared) = &shared {
                match summary::snapshot(&pool).await {
                    Ok(snapshot) => *shared.lock().unwrap_or_else(PoisonError::into_inner) = snapshot,
                    Err(e) => tracing::debug!(error = %e, "reading the fleet summary snapshot failed"),
                }
            }
        }
    })
}
