//! Keeps the fleet summary's snapshot (`store::summary::refresh`) that
//! GetFleetSummary serves and the resources-by-phase gauge reads. A pass
//! takes a new snapshot only when the resources table was written since the
//! last one (or that one is older than [`MAX_AGE`]), on one member at a
//! time: a quiet fleet costs one statistics read per interval, and the
//! writers of resources pay nothing.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

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

/// Failure reasons a snapshot keeps (GetFleetSummary's default).
pub const TOP_FAILURES: usize = 10;

/// The latest snapshot this member has read, for the gauge.
pub type SharedSummary = Arc<Mutex<Option<FleetSummary>>>;

/// Reads the latest snapshot.
pub fn latest(shared: &SharedSummary) -> Option<FleetSummary> {
    shared.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// Refreshes the snapshot every `interval` until `stop` flips, and keeps
/// `shared` (when given) at the stored one.
pub fn spawn(
    pool: PgPool,
    shared: Option<SharedSummary>,
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
                    match summary::refresh(&pool, MAX_AGE, TOP_FAILURES).await {
                        Ok(true) => tracing::debug!("took a fleet summary snapshot"),
                        Ok(false) => {}
                        Err(e) => tracing::warn!(error = %e, "taking the fleet summary snapshot failed"),
                    }
                    if let Some(shared) = &shared {
                        match summary::snapshot(&pool).await {
                            Ok(snapshot) => {
                                *shared.lock().unwrap_or_else(PoisonError::into_inner) = snapshot.map(|(_, s)| s);
                            }
                            Err(e) => tracing::debug!(error = %e, "reading the fleet summary snapshot failed"),
                        }
                    }
                }
            }
        }
    })
}
