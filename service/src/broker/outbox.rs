//! Result writes to the outbox, shared by the streams of one broker (issue
//! 48). With many streams of a few slots each, every stream appended its
//! own few results: one `append_outbox` transaction (and WAL flush) per
//! stream and round (docs/scaling.md). Here a stream that writes first
//! queues its results; whichever stream holds the writer takes everything
//! queued, from every stream, and appends it in one transaction, so the
//! writes per second follow the database's commit latency, not the number
//! of streams. A lone writer waits for nobody: this is group commit, not a
//! timer.
//!
//! Results and their acknowledgements stay per stream: each stream gets
//! back which of its own leases were accepted.

use std::collections::{HashSet, VecDeque};
use std::sync::{Mutex, PoisonError};

use sqlx::PgPool;
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::store::work::{self, TaskResult};
use crate::store::{StoreError, StoreResult};

/// Most results one append takes; the rest wait for the next.
const MAX_BATCH: usize = 2_000;

/// One stream's results waiting for the writer.
struct Queued {
    results: Vec<TaskResult>,
    reply: oneshot::Sender<StoreResult<Vec<Uuid>>>,
}

/// The broker's queue of results to append, and its one writer.
#[derive(Default)]
pub struct Outbox {
    queued: Mutex<VecDeque<Queued>>,
    writer: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox").finish_non_exhaustive()
    }
}

impl Outbox {
    /// Appends `results` to the outbox together with whatever the broker's
    /// other streams append meanwhile; returns the leases of `results` the
    /// fence accepted.
    pub async fn append(&self, pool: &PgPool, results: Vec<TaskResult>) -> StoreResult<Vec<Uuid>> {
        let (reply, mut answer) = oneshot::channel();
        self.lock().push_back(Queued { results, reply });
        loop {
            tokio::select! {
                biased;
                answer = &mut answer => {
                    // The writer that took our results went away before it
                    // answered (it was cancelled): they may or may not be
                    // written, so the stream keeps them and writes them
                    // again; the fence drops them if they were.
                    return answer.unwrap_or(Err(StoreError::Unavailable(sqlx::Error::PoolClosed)));
                }
                writer = self.writer.lock() => {
                    self.write_queued(pool).await;
                    drop(writer);
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Queued>> {
        self.queued.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends what is queued (up to [`MAX_BATCH`] results) and answers each
    /// stream with its accepted leases. A batch the database refuses is
    /// written again stream by stream, so that one stream's bad result
    /// fails only that stream's write.
    async fn write_queued(&self, pool: &PgPool) {
        let batch: Vec<Queued> = {
            let mut queued = self.lock();
            let mut taken = Vec::new();
            let mut size = 0;
            while let Some(next) = queued.front() {
                if size > 0 && size + next.results.len() > MAX_BATCH {
                    break;
                }
                size += next.results.len();
                taken.extend(queued.pop_front());
            }
            taken
        };
        if batch.is_empty() {
            return;
        }
        if batch.len() == 1 {
            for one in batch {
                let written = work::append_outbox(pool, &one.results).await;
                let _ = one.reply.send(written);
            }
            return;
        }
        let mut all = Vec::with_capacity(batch.iter().map(|q| q.results.len()).sum());
        let mut streams = Vec::with_capacity(batch.len());
        for Queued { results, reply } in batch {
            streams.push((results.len(), reply));
            all.extend(results);
        }
        match work::append_outbox(pool, &all).await {
            Ok(accepted) => {
                let accepted: HashSet<Uuid> = accepted.into_iter().collect();
                let mut rest = all.as_slice();
                for (len, reply) in streams {
                    let (mine, after) = rest.split_at(len.min(rest.len()));
                    rest = after;
                    let leases = mine.iter().map(|r| r.lease).filter(|l| accepted.contains(l)).collect();
                    let _ = reply.send(Ok(leases));
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, streams = streams.len(), "a shared result write failed; writing per stream");
                let mut rest = all.as_slice();
                for (len, reply) in streams {
                    let (mine, after) = rest.split_at(len.min(rest.len()));
                    rest = after;
                    let _ = reply.send(work::append_outbox(pool, mine).await);
                }
            }
        }
    }
}
