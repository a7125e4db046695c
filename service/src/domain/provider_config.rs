//! Provider configs: named worker configuration documents of one
//! (kind, kind_version), the pair's default or a resource's override.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::names::{validate_kind_name, validate_kind_version, validate_resource_name};
use super::resource::MAX_SPEC_BYTES;
use super::resource::ResourceRef;
use super::violation::Violation;

/// Largest config spec, in bytes of JSON (the same limit as resource specs).
pub const MAX_CONFIG_SPEC_BYTES: usize = MAX_SPEC_BYTES;
/// Largest opaque data bundle of a config, in bytes.
pub const MAX_CONFIG_DATA_BYTES: usize = 1024 * 1024;
/// Most configs one composition may own.
pub const MAX_COMPOSED_CONFIGS: usize = 100;

/// A stored provider config.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderConfig {
    /// Cluster-wide unique name.
    pub name: String,
    /// Kind the config is for.
    pub kind: String,
    /// Kind version the config is for.
    pub kind_version: i32,
    /// Whether it is the default of its pair.
    pub is_default: bool,
    /// The configuration document (a JSON object).
    pub spec: Value,
    /// The opaque bundle; empty = none.
    pub data: Vec<u8>,
    /// The composer that emitted it; `None` for configs applied through the API.
    pub owner: Option<ResourceRef>,
    /// Moves on every change.
    pub revision: i64,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Last changed.
    pub updated_at: DateTime<Utc>,
}

impl ProviderConfig {
    /// The optimistic-concurrency token: the identity of this incarnation
    /// (name and creation time, so a re-created config never reuses one)
    /// and its revision.
    pub fn etag(&self) -> String {
        let mut hash = Sha256::new();
        hash.update((self.name.len() as u64).to_be_bytes());
        hash.update(self.name.as_bytes());
        hash.update(self.created_at.timestamp_micros().to_be_bytes());
        hash.update(self.revision.to_be_bytes());
        let digest = hash.finalize();
        digest[..12].iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The caller-owned content of a config, as applied or emitted.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigContent {
    /// Name.
    pub name: String,
    /// Kind.
    pub kind: String,
    /// Kind version.
    pub kind_version: i32,
    /// Whether it is the pair's default.
    pub is_default: bool,
    /// Configuration document (a JSON object).
    pub spec: Value,
    /// Opaque bundle.
    pub data: Vec<u8>,
}

impl ConfigContent {
    /// Checks everything that needs no database: names, the spec's shape
    /// and size, the bundle's size. Field paths start at `at` (e.g.
    /// "/provider_config").
    pub fn validate(&self, at: &str) -> Result<(), Vec<Violation>> {
        let mut problems = Vec::new();
        problems.extend(validate_resource_name(&format!("{at}/name"), &self.name).err());
        problems.extend(validate_kind_name(&format!("{at}/kind"), &self.kind).err());
        problems.extend(validate_kind_version(&format!("{at}/kind_version"), self.kind_version).err());
        if !self.spec.is_object() {
            problems.push(Violation::new(format!("{at}/spec"), "must be a JSON object"));
        } else {
            let size = serde_json::to_vec(&self.spec).map(|b| b.len()).unwrap_or(usize::MAX);
            if size > MAX_CONFIG_SPEC_BYTES {
                problems.push(Violation::new(
                    format!("{at}/spec"),
                    format!("is {size} bytes of JSON; the limit is {MAX_CONFIG_SPEC_BYTES}"),
                ));
            }
        }
        if self.data.len() > MAX_CONFIG_DATA_BYTES {
            problems.push(Violation::new(
                format!("{at}/data"),
                format!("is {} bytes; the limit is {MAX_CONFIG_DATA_BYTES}", self.data.len()),
            ));
        }
        if problems.is_empty() { Ok(()) } else { Err(problems) }
    }

    /// Whether storing this content over `stored` changes nothing.
    pub fn same_as(&self, stored: &ProviderConfig) -> bool {
        self.is_default == stored.is_default && self.spec == stored.spec && self.data == stored.data
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn content() -> ConfigContent {
        ConfigContent {
            name: "acme-prod".into(),
            kind: "vpc".into(),
            kind_version: 1,
            is_default: false,
            spec: json!({"region": "eu-west-1"}),
            data: Vec::new(),
        }
    }

    #[test]
    fn valid_content_passes() {
        assert_eq!(content().validate("/provider_config"), Ok(()));
    }

    #[test]
    fn every_problem_is_named_by_its_field() {
        let bad = ConfigContent {
            name: "Not A Name".into(),
            kind: "".into(),
            kind_version: 0,
            spec: json!([1]),
            data: vec![0; MAX_CONFIG_DATA_BYTES + 1],
            ..content()
        };
        let fields: Vec<String> = bad
            .validate("/provider_config")
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|v| v.field)
            .collect();
        assert_eq!(
            fields,
            [
                "/provider_config/name",
                "/provider_config/kind",
                "/provider_config/kind_version",
                "/provider_config/spec",
                "/provider_config/data"
            ]
        );
    }

    #[test]
    fn the_etag_moves_with_the_revision_and_the_incarnation() {
        let now = Utc::now();
        let stored = ProviderConfig {
            name: "acme-prod".into(),
            kind: "vpc".into(),
            kind_version: 1,
            is_default: false,
            spec: json!({}),
            data: Vec::new(),
            owner: None,
            revision: 1,
            created_at: now,
            updated_at: now,
        };
        let next = ProviderConfig {
            revision: 2,
            ..stored.clone()
        };
        let recreated = ProviderConfig {
            created_at: now + chrono::Duration::microseconds(1),
            ..stored.clone()
        };
        assert_ne!(stored.etag(), next.etag());
        assert_ne!(stored.etag(), recreated.etag());
        assert_eq!(stored.etag(), stored.clone().etag());
    }
}
