//! The reaper: the engine's backstops, run on every control pod (each
//! statement is idempotent and locks with SKIP LOCKED, so pods share it).
//! Frees leases whose holders stopped attesting them (of tasks, reactor
//! deliveries and operations), fails tasks and operations past their
//! deadline, re-queues lagging resources that lost their task (a walk over
//! resources, a slice per pass, and the whole table at once after a crash
//! empties the unlogged queue), drops tasks of deleted or frozen resources (a
//! walk over the waiting tasks, a slice per pass), hands orphans whose grace period
//! ended to teardown, and sweeps the deletion cascade (queues teardowns of
//! unblocked nodes, removes finished ones; also the restart path after a crash
//! emptied the queue). Both sweeps are free when nothing is orphaned or being
//! deleted.

use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::store::work::{self, ReapReport, Sweeps};
use crate::store::{StoreError, operations, reactors};

/// Reaper timing.
#[derive(Debug, Clone, Copy)]
pub struct ReaperConfig {
    /// Pause between passes while the backstops find nothing.
    pub interval: Duration,
    /// Pause after a pass that found work: a backlog (after a crash, or a
    /// cascade in progress) drains in quick passes of `batch` rows.
    pub busy_interval: Duration,
    /// A lease not attested for this long is freed (workers attest every 5 s).
    pub stale_after: Duration,
    /// Rows handled per backstop per pass.
    pub batch: i32,
}

impl Default for ReaperConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            busy_interval: Duration::from_millis(100),
            stale_after: Duration::from_secs(20),
            batch: 1000,
        }
    }
}

/// Pause after a pass, as a multiple of how long the pass took: the reaper
/// spends at most about 1/(1 + this) of its time in passes.
const DUTY_CYCLE_PAUSE: u32 = 9;

/// Runs reaper passes until `stop` flips.
pub fn spawn(pool: PgPool, config: ReaperConfig, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut pause = config.interval;
        let mut sweeps = Sweeps::default();
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = tokio::time::sleep(pause) => {
                    let stale_secs = config.stale_after.as_secs_f64();
                    let mut started = std::time::Instant::now();
                    let pass = async {
                        // The pass is timed from when the database answers:
                        // after an outage the first connection can take
                        // seconds to open, and that wait is not work to
                        // scale the pause by.
                        drop(pool.acquire().await?);
                        started = std::time::Instant::now();
                        let report = work::reap(&pool, stale_secs, config.batch, &mut sweeps).await?;
                        let deliveries = reactors::reap(&pool, stale_secs, config.batch).await?;
                        let operations = operations::reap(&pool, stale_secs, config.batch).await?;
                        Ok::<_, StoreError>((report, deliveries, operations))
                    };
                    // A stop is heard while a pass waits on the database, too.
                    let passed = tokio::select! {
                        _ = stop.changed() => return,
                        passed = pass => passed,
                    };
                    pause = match passed {
                        Ok((report, deliveries, operations)) => {
                            count_recoveries(&report, deliveries, operations);
                            let chosen = if report != ReapReport::default()
                                || deliveries > 0
                                || operations > 0
                                || sweeps.lagging.recovering
                            {
                                tracing::debug!(?report, deliveries, operations, "reaper pass");
                                config.busy_interval
                            } else {
                                config.interval
                            };
                            // The backstops scan what lags; under a large
                            // backlog a pass gets slow. Keep them to about a
                            // tenth of the time so they never compete with
                            // the work itself.
                            chosen.max(started.elapsed() * DUTY_CYCLE_PAUSE)
                        }
                        // A failed pass spent its time waiting for the
                        // database, not working: scaling the pause by it
                        // would idle the backstops for up to 90 s after an
                        // outage (a pass waits up to the pool's 10 s acquire
                        // timeout), just when a crash has emptied the queue.
                        Err(e) => {
                            tracing::warn!(error = %e, "reaper pass failed");
                            config.interval
                        }
                    };
                }
            }
        }
    })
}

/// Counts what a pass took back (when metrics are on): leases of lost
/// workers, tasks past their deadline (cancelled as transient failures),
/// lagging resources queued again, and reactor deliveries and operations
/// whose workers went away.
fn count_recoveries(report: &ReapReport, deliveries: i32, operations: i32) {
    let Some(m) = crate::telemetry::metrics() else {
        return;
    };
    let causes = [
        ("stale_lease", u64::try_from(report.stale).unwrap_or(0)),
        ("deadline", u64::try_from(report.overdue).unwrap_or(0)),
        ("lagging", u64::try_from(report.requeued).unwrap_or(0)),
        ("delivery", u64::try_from(deliveries).unwrap_or(0)),
        ("operation", u64::try_from(operations).unwrap_or(0)),
    ];
    for (cause, n) in causes {
        if n > 0 {
            m.recoveries
                .add(n, &[opentelemetry::KeyValue::new("converge.cause", cause)]);
        }
    }
}
