//! The resync duty: re-pends each settled resource of a kind with
//! `resync_interval_secs > 0` about once per interval, without a generation
//! bump (trigger RESYNC), so workers re-observe the world and report drift.
//!
//! Each kind version is walked by name, one small slice per step (every
//! 100 ms), sized from the kind's count (taken again every minute) so that
//! a whole walk takes about half the interval: the load is spread over the
//! interval instead of arriving as a burst per kind, or per second. The
//! settings are read once a second, so live edits (turning resync on,
//! changing the interval or `resync_recomposes`) apply within a second; with
//! no resync-enabled kind that read is the duty's whole cost.

use std::collections::HashMap;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::store::StoreError;
use crate::store::resync::{self, ResyncPolicy};

/// Pause between walk steps. Small steps make the resyncs of one kind
/// arrive about evenly: at 1,000 resources and a 5 s interval, some 20 per
/// step rather than 200 once a second.
pub const STEP: Duration = Duration::from_millis(100);
/// How often the settings are read.
const SETTINGS_EVERY: Duration = Duration::from_secs(1);
/// Bounds of a slice (per step).
const MIN_SLICE: i32 = 10;
const MAX_SLICE: i32 = 2_000;

/// How often a kind is counted again to size its slices (the kind may grow
/// or shrink while it is walked).
const RECOUNT: Duration = Duration::from_secs(60);

/// Where the walk of one kind version stands.
#[derive(Debug, Clone, Default)]
struct Walk {
    after: Option<String>,
    /// Slice size, from the kind's last count.
    slice: i32,
    /// When the kind was last counted (`None` = not yet).
    counted_at: Option<tokio::time::Instant>,
}

impl Walk {
    /// The slice that makes a walk of `rows` resources take half of
    /// `interval_secs`.
    fn slice_for(rows: i64, interval_secs: i32) -> i32 {
        let steps = (f64::from(interval_secs) / 2.0 / STEP.as_secs_f64()).max(1.0);
        let slice = (rows as f64 / steps).ceil();
        (slice as i32).clamp(MIN_SLICE, MAX_SLICE)
    }
}

/// The duty's state: the settings last read and where each walk stands.
#[derive(Debug, Default)]
struct Duty {
    policies: Vec<ResyncPolicy>,
    read_at: Option<tokio::time::Instant>,
    walks: HashMap<(String, i32), Walk>,
}

impl Duty {
    /// Runs one step over every enabled kind version (reading the settings
    /// again when they are a second old); returns the resyncs queued.
    async fn step(&mut self, pool: &PgPool) -> Result<i64, StoreError> {
        if self.read_at.is_none_or(|at| at.elapsed() >= SETTINGS_EVERY) {
            self.policies = resync::enabled(pool).await?;
            self.read_at = Some(tokio::time::Instant::now());
            let policies = &self.policies;
            self.walks.retain(|key, _| {
                policies
                    .iter()
                    .any(|p| (p.kind.as_str(), p.kind_version) == (key.0.as_str(), key.1))
            });
        }
        let mut queued = 0;
        for policy in &self.policies {
            let walk = self
                .walks
                .entry((policy.kind.clone(), policy.kind_version))
                .or_default();
            queued += i64::from(step(pool, policy, walk).await?);
        }
        Ok(queued)
    }
}

async fn step(pool: &PgPool, policy: &ResyncPolicy, walk: &mut Walk) -> Result<i32, StoreError> {
    if walk.counted_at.is_none_or(|at| at.elapsed() >= RECOUNT) {
        let rows = resync::size(pool, &policy.kind).await?;
        walk.slice = Walk::slice_for(rows, policy.resync_interval_secs);
        walk.counted_at = Some(tokio::time::Instant::now());
    }
    let done = resync::queue(pool, policy, walk.after.as_deref(), walk.slice).await?;
    // Another process holding the walk answers with the position kept.
    walk.after = done.next_after;
    Ok(done.queued)
}

/// Runs the duty until `stop` flips.
pub fn spawn(pool: PgPool, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut duty = Duty::default();
        let mut steps = tokio::time::interval(STEP);
        steps.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = steps.tick() => {}
            }
            // A stop is heard while a step waits on the database, too.
            let stepped = tokio::select! {
                _ = stop.changed() => return,
                stepped = duty.step(&pool) => stepped,
            };
            match stepped {
                Ok(0) => {}
                Ok(queued) => tracing::debug!(queued, "resyncs queued"),
                Err(e) => tracing::warn!(error = %e, "resync pass failed"),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_takes_about_half_the_interval() {
        // 1M resources, 1 h interval: 18,000 steps of 56.
        assert_eq!(Walk::slice_for(1_000_000, 3600), 56);
        // 1,000 at the shortest interval: 25 steps of 40.
        assert_eq!(Walk::slice_for(1_000, 5), 40);
        // Small kinds still move a useful slice; huge ones are bounded.
        assert_eq!(Walk::slice_for(10, 3600), MIN_SLICE);
        assert_eq!(Walk::slice_for(100_000_000, 60), MAX_SLICE);
        assert_eq!(Walk::slice_for(5_000, 10), 100);
    }
}
