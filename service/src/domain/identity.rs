//! Workload identities a server admits: SPIFFE IDs, matched exactly or by
//! a path prefix.

use std::fmt;
use std::str::FromStr;

/// Longest identity pattern accepted, in bytes (a SPIFFE ID's limit).
pub const MAX_PATTERN_BYTES: usize = 2048;

/// One entry of an allowlist: `spiffe://td/path` admits exactly that ID;
/// `spiffe://td/path/*` admits every ID below `spiffe://td/path/`;
/// `spiffe://td/*` admits the whole trust domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityPattern {
    /// Exactly this ID.
    Exact(String),
    /// Every ID that starts with this prefix (which ends in `/`).
    Below(String),
}

impl IdentityPattern {
    /// Whether `identity` is admitted.
    pub fn admits(&self, identity: &str) -> bool {
        match self {
            IdentityPattern::Exact(id) => id == identity,
            IdentityPattern::Below(prefix) => identity.len() > prefix.len() && identity.starts_with(prefix.as_str()),
        }
    }
}

impl FromStr for IdentityPattern {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let value = value.trim();
        if value.len() > MAX_PATTERN_BYTES {
            return Err(format!("an identity pattern is at most {MAX_PATTERN_BYTES} bytes"));
        }
        let Some(rest) = value.strip_prefix("spiffe://") else {
            return Err(
                "an identity pattern is a SPIFFE ID (spiffe://trust-domain/path), optionally ending in /*".into(),
            );
        };
        let (body, below) = match rest.strip_suffix("/*") {
            Some(body) => (body, true),
            None => (rest, false),
        };
        let domain = body.split('/').next().unwrap_or_default();
        if domain.is_empty() || body.ends_with('/') || body.contains("//") || body.contains('*') {
            return Err(
                "an identity pattern needs a trust domain and non-empty path segments; only a final /* is a wildcard"
                    .into(),
            );
        }
        Ok(if below {
            IdentityPattern::Below(format!("spiffe://{body}/"))
        } else {
            IdentityPattern::Exact(format!("spiffe://{body}"))
        })
    }
}

impl fmt::Display for IdentityPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdentityPattern::Exact(id) => f.write_str(id),
            IdentityPattern::Below(prefix) => write!(f, "{prefix}*"),
        }
    }
}

/// Whether any of `patterns` admits `identity`.
pub fn admitted(patterns: &[IdentityPattern], identity: &str) -> bool {
    patterns.iter().any(|p| p.admits(identity))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(s: &str) -> IdentityPattern {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn exact_and_prefix_patterns_admit_what_they_say() {
        let exact = pattern("spiffe://prod.example/ns/platform/sa/cli");
        assert!(exact.admits("spiffe://prod.example/ns/platform/sa/cli"));
        assert!(!exact.admits("spiffe://prod.example/ns/platform/sa/cli2"));
        let below = pattern("spiffe://prod.example/ns/workers/*");
        assert!(below.admits("spiffe://prod.example/ns/workers/sa/vpc"));
        assert!(!below.admits("spiffe://prod.example/ns/workers"));
        assert!(!below.admits("spiffe://prod.example/ns/workersx/sa"));
        let domain = pattern("spiffe://prod.example/*");
        assert!(domain.admits("spiffe://prod.example/anything"));
        assert!(!domain.admits("spiffe://prod.example.evil/anything"));
        assert_eq!(below.to_string(), "spiffe://prod.example/ns/workers/*");
    }

    #[test]
    fn malformed_patterns_are_refused() {
        for bad in [
            "",
            "prod.example/x",
            "spiffe://",
            "spiffe:///x",
            "spiffe://td/a/",
            "spiffe://td/*/a",
            "spiffe://td/a*",
            "spiffe://td//a",
        ] {
            assert!(bad.parse::<IdentityPattern>().is_err(), "{bad}");
        }
    }
}
