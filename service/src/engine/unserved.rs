//! Tasks no worker serves: samples them per (kind, kind_version) for the
//! metrics, and applies the kinds' `unserved_condition_after_secs` policy
//! (marks the resources whose task has waited that long with
//! `WorkerAvailable=False`, and removes the mark once a worker serves the
//! pair or took the task). Runs on every control pod: each statement is
//! idempotent, marking skips marked resources, and the touched rows are
//! locked with SKIP LOCKED.
//!
//! With the policy off everywhere a pass is one read of `kind_config` and
//! the member rows plus one probe of an empty partial index; the grouped
//! count for the metrics runs only while metrics are on. Each pass handles
//! at most [`BATCHES_PER_PASS`] batches of [`BATCH`] rows per pair (and as
//! many for the removal), continuing where the previous pass stopped.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::store::StoreError;
use crate::store::unserved::{self, MarkingPair, UnservedTasks};

/// How often a pass runs.
pub const PASS_INTERVAL: Duration = Duration::from_secs(5);

/// Rows examined per batch.
pub const BATCH: i64 = 1000;

/// Batches per pair (and for the removal) per pass.
pub const BATCHES_PER_PASS: usize = 10;

/// The latest sample, read by the metric callbacks.
pub type SharedFigures = Arc<Mutex<Vec<UnservedTasks>>>;

/// Reads the latest sample.
pub fn latest(figures: &SharedFigures) -> Vec<UnservedTasks> {
    figures.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// Where the passes continue: per marking pair, the last task id examined;
/// for the removal, the last resource id examined.
#[derive(Debug, Default)]
struct Cursors {
    marking: BTreeMap<(String, i32), Uuid>,
    clearing: Option<Uuid>,
}

/// Runs passes every `interval` until `stop` flips. `liveness` is the
/// membership liveness window; `figures`, when metrics are on, receives
/// the sample of each pass.
pub fn spawn(
    pool: PgPool,
    interval: Duration,
    liveness: Duration,
    figures: Option<SharedFigures>,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let liveness_secs = i32::try_from(liveness.as_secs().max(1)).unwrap_or(i32::MAX);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut cursors = Cursors::default();
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = tick.tick() => {
                    if let Err(e) = pass(&pool, liveness_secs, figures.as_ref(), &mut cursors).await {
                        tracing::debug!(error = %e, "a pass over tasks no worker serves failed");
                    }
                }
            }
        }
    })
}

async fn pass(
    pool: &PgPool,
    liveness_secs: i32,
    figures: Option<&SharedFigures>,
    cursors: &mut Cursors,
) -> Result<(), StoreError> {
    if let Some(figures) = figures {
        let sample = unserved::unserved(pool, liveness_secs).await?;
        *figures.lock().unwrap_or_else(PoisonError::into_inner) = sample;
    }
    let pairs = unserved::marking_pairs(pool, liveness_secs).await?;
    // A pair that is served again (or whose policy went off) starts over
    // the next time it is unserved.
    cursors
        .marking
        .retain(|(kind, version), _| pairs.iter().any(|p| p.kind == *kind && p.kind_version == *version));
    for pair in &pairs {
        mark_pair(pool, pair, cursors).await?;
    }
    if unserved::any_marked(pool).await? {
        for _ in 0..BATCHES_PER_PASS {
            let batch = unserved::clear(pool, liveness_secs, cursors.clearing, BATCH).await?;
            if batch.changed > 0 {
                tracing::debug!(
                    cleared = batch.changed,
                    "removed WorkerAvailable=False from resources a worker serves"
                );
            }
            if batch.examined < BATCH {
                // The end of the marked resources: start over next pass.
                cursors.clearing = None;
                break;
            }
            cursors.clearing = batch.last;
        }
    }
    Ok(())
}

async fn mark_pair(pool: &PgPool, pair: &MarkingPair, cursors: &mut Cursors) -> Result<(), StoreError> {
    let key = (pair.kind.clone(), pair.kind_version);
    for _ in 0..BATCHES_PER_PASS {
        let after = cursors.marking.get(&key).copied();
        let batch = unserved::mark(pool, pair, after, BATCH).await?;
        if batch.changed > 0 {
            tracing::info!(
                kind = %pair.kind,
                kind_version = pair.kind_version,
                marked = batch.changed,
                "marked resources whose task waits with no worker (WorkerAvailable=False)"
            );
        }
        if let Some(last) = batch.last {
            cursors.marking.insert(key.clone(), last);
        }
        if batch.examined < BATCH {
            break;
        }
    }
    Ok(())
}
