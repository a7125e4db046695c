//! Claims of reconcile and teardown tasks, shared by the streams of one
//! broker (issue 48). With many streams of a few slots each, a claim per
//! stream made the database run one small `claim_work` per stream and
//! round, all of them scanning the same head of the queue past each other's
//! locked rows (docs/scaling.md). Here the streams of a kind version take
//! turns: one claims at least [`BATCH`] tasks, keeps what its free slots
//! take and leaves the rest to the next streams that ask, so a broker makes
//! one claim where its streams made up to `BATCH / slots`.
//!
//! The tasks left over are leased to this broker and held by no stream:
//! nobody attests them, and other brokers cannot claim them, so they are
//! handed out only while young ([`FRESH_FOR`]) and put back otherwise, as
//! if never claimed (`leases::unclaim`: the attempt count does not move); a
//! broker that dies with some leaves them to the reaper, like any lease it
//! held.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::PgPool;
use tokio::time::Instant;
use uuid::Uuid;

use crate::domain::shard::ShardRange;
use crate::store::StoreResult;
use crate::store::leases;
use crate::store::work::{self, ClaimedTask};

/// Fewest tasks a claim asks for: what a stream's free slots do not take
/// waits for the broker's next streams.
pub const BATCH: usize = 64;
/// Most worker streams on a broker for which each claim takes exactly its
/// free slots: with few streams the claims are already large, and taking
/// more would only leave tasks for the other streams to wait for.
pub const FEW_STREAMS: usize = 8;
/// How long a task left over by a claim may wait for a stream.
const FRESH_FOR: Duration = Duration::from_millis(250);

/// A kind version's tasks claimed and not yet taken, with when claimed;
/// locked by the stream claiming for it.
type LeftOver = Arc<tokio::sync::Mutex<VecDeque<(ClaimedTask, Instant)>>>;

/// Tasks claimed and not yet taken by a stream, per kind version.
#[derive(Debug, Default)]
pub struct Claims {
    kinds: Mutex<HashMap<(String, i32), LeftOver>>,
}

impl Claims {
    fn left_over(&self, kind: &str, version: i32) -> LeftOver {
        let mut kinds = self.kinds.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        kinds.entry((kind.to_owned(), version)).or_default().clone()
    }

    /// Up to `free` tasks of (kind, version) for a stream of broker
    /// `member`, which has `streams` worker streams: left over by an earlier
    /// claim if any, else claimed (with more than [`FEW_STREAMS`] streams,
    /// at least [`BATCH`], the rest kept for the next stream; one claim per
    /// kind version at a time).
    #[allow(clippy::too_many_arguments)]
    pub async fn take(
        &self,
        pool: &PgPool,
        member: &str,
        kind: &str,
        version: i32,
        free: usize,
        shards: Option<ShardRange>,
        streams: usize,
    ) -> StoreResult<Vec<ClaimedTask>> {
        if free == 0 {
            return Ok(Vec::new());
        }
        let left = self.left_over(kind, version);
        let mut left = left.lock().await;
        let stale = drain_stale(&mut left);
        if !stale.is_empty() {
            leases::unclaim(pool, member, &stale).await?;
        }
        if left.is_empty() && streams <= FEW_STREAMS {
            // As many claims at once as streams, each of its free slots.
            drop(left);
            return work::claim(
                pool,
                member,
                kind,
                version,
                i64::try_from(free).unwrap_or(i64::MAX),
                shards,
            )
            .await;
        }
        if left.is_empty() {
            let limit = i64::try_from(free.max(BATCH)).unwrap_or(i64::MAX);
            let now = Instant::now();
            let mut claimed = work::claim(pool, member, kind, version, limit, shards).await?;
            // Handed out oldest first, as queued (ADR 17): a claim returns
            // its rows in no particular order, and task ids are time-ordered.
            claimed.sort_by_key(|task| task.work_id);
            left.extend(claimed.into_iter().map(|task| (task, now)));
        }
        let n = free.min(left.len());
        let now = Instant::now();
        Ok(left
            .drain(..n)
            .map(|(mut task, at)| {
                // The deadline ran from the claim.
                let waited = now.duration_since(at).as_secs_f64();
                task.deadline_secs = task.deadline_secs.map(|d| (d - waited).max(0.001));
                task
            })
            .collect())
    }

    /// Releases every task left over (the broker is closing).
    pub async fn release_all(&self, pool: &PgPool, member: &str) {
        let all: Vec<_> = {
            let kinds = self.kinds.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            kinds.values().cloned().collect()
        };
        for left in all {
            let tokens: Vec<Uuid> = left.lock().await.drain(..).map(|(t, _)| t.lease_token).collect();
            if let Err(e) = leases::unclaim(pool, member, &tokens).await {
                tracing::debug!(error = %e, "could not release claimed tasks no stream took; the reaper frees them");
            }
        }
    }
}

/// Removes the tasks that waited longer than [`FRESH_FOR`]; returns their
/// leases.
fn drain_stale(left: &mut VecDeque<(ClaimedTask, Instant)>) -> Vec<Uuid> {
    let now = Instant::now();
    let mut stale = Vec::new();
    while let Some((_, at)) = left.front() {
        if now.duration_since(*at) <= FRESH_FOR {
            break;
        }
        if let Some((task, _)) = left.pop_front() {
            stale.push(task.lease_token);
        }
    }
    stale
}
