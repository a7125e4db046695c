//! The simulated cloud behind the demo kinds: provider latency and ids.
//!
//! Nothing is called: a leaf "provisions" by sleeping a while and deriving
//! its id from its kind and name, so the same resource always gets the same
//! id (in any process, on any run) and re-running a task is harmless.

use std::time::Duration;

/// Simulated provider latency: each leaf task sleeps a uniformly random time
/// between half and one and a half times the base, so siblings finish in a
/// visible, varying order. A zero base means no sleep (for tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latency {
    base_ms: u64,
}

impl Latency {
    /// The demo's default: 200-600 ms per task.
    pub const DEFAULT: Self = Self::from_millis(400);
    /// No latency.
    pub const NONE: Self = Self::from_millis(0);

    /// A latency around `base_ms` milliseconds.
    pub const fn from_millis(base_ms: u64) -> Self {
        Self { base_ms }
    }

    /// The base in milliseconds.
    pub fn base_millis(self) -> u64 {
        self.base_ms
    }

    /// One random draw.
    pub fn sample(self) -> Duration {
        if self.base_ms == 0 {
            return Duration::ZERO;
        }
        let low = self.base_ms / 2;
        let high = self.base_ms.saturating_add(self.base_ms / 2);
        Duration::from_millis(rand::random_range(low..=high))
    }

    /// Sleeps one random draw.
    pub async fn wait(self) {
        let delay = self.sample();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
    }
}

impl Default for Latency {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// 64-bit FNV-1a over `kind`, a separator and `name`: stable across builds
/// and platforms, unlike `std`'s hasher.
fn fingerprint(kind: &str, name: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    kind.bytes()
        .chain([b'/'])
        .chain(name.bytes())
        .fold(OFFSET, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(PRIME))
}

/// `acct-` and 12 digits.
pub fn account_id(name: &str) -> String {
    format!("acct-{:012}", fingerprint("account", name) % 1_000_000_000_000)
}

/// `vpc-` and 12 hex digits.
pub fn vpc_id(name: &str) -> String {
    format!("vpc-{:012x}", fingerprint("vpc", name) & 0xffff_ffff_ffff)
}

/// `tgw-` and 12 hex digits.
pub fn tgw_id(name: &str) -> String {
    format!("tgw-{:012x}", fingerprint("tgw", name) & 0xffff_ffff_ffff)
}

/// `key-` and 16 hex digits: the access key an operation issues for an
/// account (the same on every run of that operation).
pub fn access_key_id(account: &str, operation: &str) -> String {
    format!("key-{:016x}", fingerprint(account, operation))
}

/// `rtb-` and 12 hex digits.
pub fn route_id(name: &str) -> String {
    format!("rtb-{:012x}", fingerprint("route", name) & 0xffff_ffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_shaped_and_kind_specific() {
        assert_eq!(account_id("demo-search"), account_id("demo-search"));
        assert_ne!(account_id("demo-search"), account_id("demo-ledger"));
        let acct = account_id("demo-search");
        assert!(
            acct.len() == 17 && acct[5..].bytes().all(|b| b.is_ascii_digit()),
            "{acct}"
        );
        for (id, prefix) in [
            (vpc_id("demo-search"), "vpc-"),
            (tgw_id("demo-search"), "tgw-"),
            (route_id("demo-search"), "rtb-"),
        ] {
            let hex = id.strip_prefix(prefix).unwrap();
            assert!(hex.len() == 12 && hex.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        }
        assert_ne!(vpc_id("x")[4..], tgw_id("x")[4..]);
    }

    #[test]
    fn latency_stays_in_its_band() {
        assert_eq!(Latency::NONE.sample(), Duration::ZERO);
        for _ in 0..100 {
            let d = Latency::DEFAULT.sample();
            assert!((200..=600).contains(&d.as_millis()), "{d:?}");
        }
    }
}
