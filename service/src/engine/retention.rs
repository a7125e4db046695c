//! Trims event runs, the change log, idempotency records, failed reactor
//! deliveries and finished operations by age (and event timelines by
//! length), in small batches so a sweep never holds locks for long.

use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::RetentionArgs;
use crate::store::{StoreError, changes, events, operations, plans, reactors, requests};

/// Rows deleted per statement.
const BATCH: i64 = 5_000;
/// Statements per table per sweep, bounding one sweep's work.
const MAX_BATCHES: usize = 20;

/// What one sweep deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Event runs deleted for age.
    pub old_events: u64,
    /// Event runs deleted beyond the per-timeline limit.
    pub excess_events: u64,
    /// Change-log entries deleted.
    pub changes: u64,
    /// Idempotency records deleted.
    pub requests: u64,
    /// Failed reactor deliveries deleted (kept as long as events).
    pub failed_deliveries: u64,
    /// Finished operations deleted.
    pub operations: u64,
    /// Plan requests their callers left behind.
    pub plans: u64,
}

/// Runs one sweep. `timelines` includes the per-timeline backstop: it ranks
/// every event run (seconds at a million resources), and is only needed once
/// per process, because the limit is a startup flag and every new run trims
/// its own timeline.
pub async fn sweep(pool: &PgPool, retention: &RetentionArgs, timelines: bool) -> Result<SweepReport, StoreError> {
    let mut report = SweepReport::default();
    if retention.event_max_age_secs > 0 {
        report.old_events = drain(|| events::trim_by_age(pool, retention.event_max_age_secs, BATCH)).await?;
    }
    if timelines && retention.event_runs_per_timeline > 0 {
        let keep = i64::from(retention.event_runs_per_timeline);
        report.excess_events = drain(|| events::trim_timelines(pool, keep, BATCH)).await?;
    }
    report.changes = drain(|| changes::trim_by_age(pool, retention.change_log_max_age_secs, BATCH)).await?;
    report.requests = drain(|| requests::trim(pool, retention.request_id_max_age_secs, BATCH)).await?;
    if retention.event_max_age_secs > 0 {
        let max_age = retention.event_max_age_secs as f64;
        report.failed_deliveries = drain(|| reactors::trim_failed(pool, max_age, BATCH)).await?;
    }
    let max_age = retention.operation_max_age_secs as f64;
    report.operations = drain(|| operations::trim_finished(pool, max_age, BATCH)).await?;
    report.plans = drain(|| plans::trim_expired(pool, BATCH)).await?;
    Ok(report)
}

async fn drain<F, Fut>(mut step: F) -> Result<u64, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<u64, StoreError>>,
{
    let mut total = 0;
    for _ in 0..MAX_BATCHES {
        let deleted = step().await?;
        total += deleted;
        if deleted < BATCH as u64 {
            break;
        }
    }
    Ok(total)
}

/// Sweeps every `interval` until `stop` flips.
pub fn spawn(
    pool: PgPool,
    retention: RetentionArgs,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut timelines_trimmed = false;
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = tick.tick() => match sweep(&pool, &retention, !timelines_trimmed).await {
                    Ok(report) => {
                        timelines_trimmed = true;
                        if report != SweepReport::default() {
                            tracing::debug!(?report, "retention sweep");
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "retention sweep failed"),
                },
            }
        }
    })
}
