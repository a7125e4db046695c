//! Exponential backoff with jitter for reconnects and config retries.

use std::time::Duration;

use rand::Rng as _;

/// Doubles from `base` up to `max`; each delay is drawn uniformly from the
/// upper half of the current step ("equal jitter"), so workers that lost the
/// same broker do not reconnect in lockstep but still back off steadily.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    base: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    pub(crate) fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max: max.max(base),
            attempt: 0,
        }
    }

    /// The ceiling of the next delay, before jitter.
    fn step(&self) -> Duration {
        let factor = 2u32.saturating_pow(self.attempt.min(30));
        self.base.saturating_mul(factor).min(self.max)
    }

    /// The next delay; grows the step for the one after.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let step = self.step();
        self.attempt = self.attempt.saturating_add(1);
        let half = step / 2;
        let jitter_nanos = u64::try_from((step - half).as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(rand::rng().random_range(0..=jitter_nanos))
    }

    /// Back to the base delay (after a healthy session).
    pub(crate) fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_the_cap_with_jitter_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let first = b.next_delay();
        assert!(
            first >= Duration::from_millis(50) && first <= Duration::from_millis(100),
            "{first:?}"
        );
        let second = b.next_delay();
        assert!(
            second >= Duration::from_millis(100) && second <= Duration::from_millis(200),
            "{second:?}"
        );
        for _ in 0..40 {
            let d = b.next_delay();
            assert!(d <= Duration::from_secs(1), "{d:?}");
        }
        assert!(b.next_delay() >= Duration::from_millis(500));
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }
}
