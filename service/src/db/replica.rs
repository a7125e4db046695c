//! Reads that tolerate staleness, routed to a streaming replica
//! (`DATABASE_READ_URL`) while it answers, to the primary otherwise.
//!
//! Which reads those are is the API's choice (see ADR 0032); this module only
//! routes them. The replica counts as down from the moment a read on it
//! fails for want of a connection (that read is then run again on the
//! primary) or a periodic [`ReadPool::check_replica`] fails, and as up again
//! once a check succeeds. So a replica that goes away costs at most one slow
//! read per process, never a failed one, and writes never touch it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::PgPool;

use super::probe::Probe;

/// Longest a check of the replica may take before the replica counts as down.
pub const REPLICA_CHECK_LIMIT: Duration = Duration::from_secs(2);

/// Failures that say the database could not be reached (so the same read
/// may succeed elsewhere).
pub trait Unreachable {
    /// Whether the failure is a lost or refused connection.
    fn is_unreachable(&self) -> bool;
}

/// Where a read ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadSource {
    /// The primary (no replica configured, or it is down).
    Primary,
    /// The replica.
    Replica,
}

/// The pool stale-tolerant reads run on; cheap to clone.
#[derive(Debug, Clone)]
pub struct ReadPool {
    primary: PgPool,
    replica: Option<Arc<Replica>>,
}

#[derive(Debug)]
struct Replica {
    pool: PgPool,
    up: AtomicBool,
}

impl ReadPool {
    /// Reads on the primary only (no replica configured).
    pub fn primary_only(primary: PgPool) -> Self {
        Self { primary, replica: None }
    }

    /// Reads on `replica` while it answers, on `primary` otherwise. The
    /// replica starts as up; the first failed read or check says otherwise.
    pub fn with_replica(primary: PgPool, replica: PgPool) -> Self {
        Self {
            primary,
            replica: Some(Arc::new(Replica {
                pool: replica,
                up: AtomicBool::new(true),
            })),
        }
    }

    /// Whether a replica is configured.
    pub fn has_replica(&self) -> bool {
        self.replica.is_some()
    }

    /// The pool a read runs on now, and which one it is.
    pub fn current(&self) -> (&PgPool, ReadSource) {
        match &self.replica {
            Some(replica) if replica.up.load(Ordering::Relaxed) => (&replica.pool, ReadSource::Replica),
            _ => (&self.primary, ReadSource::Primary),
        }
    }

    /// Runs `read` on the current pool; when that is the replica and the
    /// read fails for want of a connection, marks the replica down and runs
    /// `read` again on the primary. `read` gets the pool by value (a cheap
    /// handle) so the future it returns borrows nothing of this call.
    pub async fn run<T, E, F, Fut>(&self, mut read: F) -> Result<T, E>
    where
        E: Unreachable + std::fmt::Display,
        F: FnMut(PgPool) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let (pool, source) = self.current();
        match read(pool.clone()).await {
            Err(e) if source == ReadSource::Replica && e.is_unreachable() => {
                self.mark_replica(false, Some(&e));
                read(self.primary.clone()).await
            }
            outcome => outcome,
        }
    }

    /// Checks the replica (if any) with `probe` and records the outcome.
    pub async fn check_replica(&self, probe: &mut Probe) {
        if self.replica.is_some() {
            // A slow replica counts as down too: its reads have the primary.
            let up = probe.check(REPLICA_CHECK_LIMIT).await.answered();
            self.mark_replica(up, None);
        }
    }

    /// A probe of the replica (if any), on a connection of its own.
    pub fn replica_probe(&self) -> Option<Probe> {
        self.replica
            .as_ref()
            .map(|replica| Probe::following(replica.pool.clone(), "converge-read-probe"))
    }

    fn mark_replica(&self, up: bool, cause: Option<&dyn std::fmt::Display>) {
        let Some(replica) = &self.replica else { return };
        if replica.up.swap(up, Ordering::Relaxed) == up {
            return;
        }
        if up {
            tracing::info!("the read replica answers again; stale-tolerant reads go to it");
        } else {
            match cause {
                Some(e) => {
                    tracing::warn!(error = %e, "the read replica is unreachable; reads fall back to the primary")
                }
                None => tracing::warn!("the read replica is unreachable; reads fall back to the primary"),
            }
        }
    }

    /// Closes the replica pool (the primary is closed by its owner).
    pub async fn close(&self) {
        if let Some(replica) = &self.replica {
            replica.pool.close().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    /// A replica pool on a port nobody listens on.
    fn unreachable_pool() -> Result<PgPool, Box<dyn std::error::Error>> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let options = sqlx::postgres::PgConnectOptions::new().host("127.0.0.1").port(port);
        Ok(super::super::replica_pool_options(2).connect_lazy_with(options))
    }

    #[tokio::test]
    async fn reads_fall_back_to_the_primary_when_the_replica_is_unreachable() -> Result<(), Box<dyn std::error::Error>>
    {
        let db = crate::testing::TestDatabase::new().await?;
        let reads = ReadPool::with_replica(db.pool().clone(), unreachable_pool()?);
        assert_eq!(reads.current().1, ReadSource::Replica);
        let one: i32 = reads
            .run(|pool| async move {
                sqlx::query_scalar("SELECT 1")
                    .fetch_one(&pool)
                    .await
                    .map_err(StoreError::from)
            })
            .await?;
        assert_eq!(one, 1);
        assert_eq!(reads.current().1, ReadSource::Primary, "marked down by the failed read");

        let mut probe = reads.replica_probe().ok_or("no probe")?;
        reads.check_replica(&mut probe).await;
        assert_eq!(reads.current().1, ReadSource::Primary, "still down");
        Ok(())
    }

    #[tokio::test]
    async fn a_replica_that_answers_serves_the_reads() -> Result<(), Box<dyn std::error::Error>> {
        let db = crate::testing::TestDatabase::new().await?;
        // The test database stands in for a replica of itself.
        let replica = super::super::replica_pool_options(2).connect_lazy_with(db.connect_options()?);
        let reads = ReadPool::with_replica(db.pool().clone(), replica);
        reads.mark_replica(false, None);
        let mut probe = reads.replica_probe().ok_or("no probe")?;
        reads.check_replica(&mut probe).await;
        assert_eq!(reads.current().1, ReadSource::Replica, "back up after a good check");
        assert_eq!(
            ReadPool::primary_only(db.pool().clone()).current().1,
            ReadSource::Primary
        );
        Ok(())
    }
}
