//! The one retry loop for database work: bounded attempts with full-jitter
//! exponential backoff. Only errors that say running again is safe
//! ([`Retryable`]) are retried; everything else returns at once.

use std::time::Duration;

use super::error::StoreError;

/// Errors that may say "run the same work again".
pub trait Retryable {
    /// Whether running the work again may succeed and is safe.
    fn is_retryable(&self) -> bool;
}

impl Retryable for StoreError {
    fn is_retryable(&self) -> bool {
        StoreError::is_retryable(self)
    }
}

/// How often and how patiently work is retried.
///
/// Attempt `n` (from 1) that fails retryably is followed by a sleep drawn
/// uniformly from `[0, min(cap, base * 2^(n-1))]` ("full jitter": concurrent
/// losers of the same conflict spread out instead of colliding again), until
/// `attempts` attempts have run; the last error is then returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Most attempts, the first included (at least 1).
    pub attempts: u32,
    /// Backoff ceiling after the first failure.
    pub base: Duration,
    /// Largest backoff ceiling.
    pub cap: Duration,
}

impl RetryPolicy {
    /// Transactions the database aborted to resolve a conflict (serialization
    /// failure, deadlock): API writes and compositions alike. Four attempts
    /// sleep at most 5 + 10 + 20 ms in all, so a caller waits little longer
    /// than for the conflict itself before `CONCURRENT_MODIFICATION`.
    pub const CONFLICTS: RetryPolicy = RetryPolicy {
        attempts: 4,
        base: Duration::from_millis(5),
        cap: Duration::from_millis(100),
    };

    /// The backoff ceiling after failed attempt `attempt` (from 1).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        self.base.saturating_mul(1 << doublings).min(self.cap)
    }

    /// A jittered backoff after failed attempt `attempt` (from 1).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let ceiling = u64::try_from(self.ceiling(attempt).as_micros()).unwrap_or(u64::MAX);
        Duration::from_micros(rand::random_range(0..=ceiling))
    }

    /// Runs `work` until it succeeds, fails for good, or has run
    /// [`attempts`](Self::attempts) times. `what` names the work in logs.
    ///
    /// `work` is a closure returning a future (not an async closure: the
    /// futures of those are not yet provably `Send` when generic, and gRPC
    /// handlers need `Send`), so each attempt's future owns or shares what it
    /// borrows.
    pub async fn run<T, E, F, Fut>(&self, what: &'static str, mut work: F) -> Result<T, E>
    where
        E: Retryable + std::fmt::Display,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut attempt = 1;
        loop {
            match work().await {
                Err(e) if attempt < self.attempts && e.is_retryable() => {
                    let pause = self.backoff(attempt);
                    tracing::debug!(what, attempt, error = %e, ?pause, "database work hit a conflict; retrying");
                    tokio::time::sleep(pause).await;
                    attempt += 1;
                }
                outcome => return outcome,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Failure(bool);

    impl std::fmt::Display for Failure {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "retryable: {}", self.0)
        }
    }

    impl Retryable for Failure {
        fn is_retryable(&self) -> bool {
            self.0
        }
    }

    const FAST: RetryPolicy = RetryPolicy {
        attempts: 3,
        base: Duration::from_micros(10),
        cap: Duration::from_micros(40),
    };

    #[tokio::test]
    async fn retryable_failures_run_at_most_attempts_times() {
        let mut runs = 0;
        let outcome: Result<(), Failure> = FAST
            .run("test", || {
                runs += 1;
                async { Err(Failure(true)) }
            })
            .await;
        assert!(outcome.is_err());
        assert_eq!(runs, 3);
    }

    #[tokio::test]
    async fn other_failures_and_successes_return_at_once() {
        let mut runs = 0;
        let outcome: Result<(), Failure> = FAST
            .run("test", || {
                runs += 1;
                async { Err(Failure(false)) }
            })
            .await;
        assert!(outcome.is_err());
        assert_eq!(runs, 1);

        let mut runs = 0;
        let outcome: Result<u32, Failure> = FAST
            .run("test", || {
                runs += 1;
                let outcome = if runs < 2 { Err(Failure(true)) } else { Ok(runs) };
                async move { outcome }
            })
            .await;
        assert_eq!(outcome.ok(), Some(2));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_stays_under_its_ceiling() {
        let policy = RetryPolicy::CONFLICTS;
        assert_eq!(policy.ceiling(1), Duration::from_millis(5));
        assert_eq!(policy.ceiling(2), Duration::from_millis(10));
        assert_eq!(policy.ceiling(3), Duration::from_millis(20));
        assert_eq!(policy.ceiling(10), policy.cap);
        assert_eq!(policy.ceiling(u32::MAX), policy.cap);
        for attempt in 1..8 {
            for _ in 0..50 {
                assert!(policy.backoff(attempt) <= policy.ceiling(attempt));
            }
        }
    }
}
