//! Example kinds for converge: their manifests and the providers that serve
//! them.
//!
//! The composition demo ([`bom`]) is what `converge dev` runs: a `bom`
//! resource composes a small networking tree (accounts, a transit gateway,
//! VPCs and routes wired by value flows) whose leaves are served by
//! simulated providers ([`sim`]), and rolls their status up into a summary.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use converge_examples::{Latency, register};
//! use converge_sdk::worker::Worker;
//!
//! let worker = register(Worker::builder().endpoint("http://127.0.0.1:50051"), Latency::DEFAULT).build()?;
//! worker.run(async { tokio::signal::ctrl_c().await.ok(); }).await?;
//! # Ok(())
//! # }
//! ```

pub mod bom;
pub use converge_sdk::manifest;
pub mod publisher;
pub mod sim;

use converge_sdk::proto::v1 as pb;
use converge_sdk::worker::WorkerBuilder;

pub use manifest::{ManifestError, parse_apply_request};
pub use sim::Latency;

/// The manifests of the demo kinds (embedded from `examples/bom/*.json`), in
/// the order to apply them: leaves first, then `bom`.
pub fn manifests() -> Result<Vec<pb::KindManifest>, ManifestError> {
    bom::MANIFEST_FILES
        .iter()
        .map(|(file, json)| parse_apply_request(file, json).map(|request| request.manifest.unwrap_or_default()))
        .collect()
}

/// Registers a provider for every demo kind on `builder`; the leaf providers
/// sleep `latency` per task.
pub fn register(builder: WorkerBuilder, latency: Latency) -> WorkerBuilder {
    bom::register(builder, latency)
}

#[cfg(test)]
mod tests {
    use converge_sdk::worker::convert::struct_to_json;
    use serde_json::{Value, json};

    use super::*;
    use crate::bom::compose::{BomSpec, compose};

    fn schemas() -> Vec<(String, Value, Value)> {
        manifests()
            .unwrap()
            .into_iter()
            .map(|m| {
                (
                    m.kind,
                    struct_to_json(m.spec_schema.unwrap()),
                    struct_to_json(m.status_schema.unwrap()),
                )
            })
            .collect()
    }

    fn spec_validator(kind: &str) -> jsonschema::Validator {
        let (_, spec, _) = schemas().into_iter().find(|(k, _, _)| k == kind).unwrap();
        jsonschema::draft202012::new(&spec).unwrap()
    }

    #[test]
    fn the_manifests_cover_the_demo_kinds_with_the_expected_reactions() {
        let manifests = manifests().unwrap();
        let kinds: Vec<&str> = manifests.iter().map(|m| m.kind.as_str()).collect();
        assert_eq!(kinds, ["account", "tgw", "vpc", "route", "bom", "bom-cel"]);
        for m in &manifests {
            if m.kind == bom::BOM_CEL {
                // Composed by the server from its composition: no reactions.
                assert!(m.reactions.is_empty() && m.composition.is_some());
                continue;
            }
            assert_eq!(m.kind_version, bom::KIND_VERSION);
            let reactions: Vec<(&str, i32, &[i32])> = m
                .reactions
                .iter()
                .map(|r| (r.name.as_str(), r.trigger, r.emits.as_slice()))
                .collect();
            let (spec_change, settled) = (pb::Trigger::SpecChange as i32, pb::Trigger::ChildrenSettled as i32);
            let emit = |e: pb::Emit| e as i32;
            if m.kind == "bom" {
                assert_eq!(
                    reactions,
                    [
                        (
                            "compose",
                            spec_change,
                            &[emit(pb::Emit::Children), emit(pb::Emit::Edges), emit(pb::Emit::Status)][..]
                        ),
                        (
                            "rollup",
                            settled,
                            &[emit(pb::Emit::Status), emit(pb::Emit::Conditions)][..]
                        ),
                    ]
                );
            } else {
                let work = (
                    "work",
                    spec_change,
                    &[emit(pb::Emit::Status), emit(pb::Emit::Conditions)][..],
                );
                if m.kind == "account" {
                    let rotate = (
                        bom::ROTATE_CREDENTIALS_REACTION,
                        pb::Trigger::Operation as i32,
                        &[emit(pb::Emit::OperationOutput), emit(pb::Emit::Status)][..],
                    );
                    assert_eq!(reactions, [work, rotate]);
                    assert_eq!(m.reactions[1].verb, bom::ROTATE_CREDENTIALS);
                    assert!(m.reactions[1].input_schema.is_some());
                } else {
                    assert_eq!(reactions, [work]);
                }
            }
        }
    }

    #[test]
    fn composed_children_satisfy_their_spec_schemas_before_and_after_value_flows() {
        let spec = BomSpec {
            teams: vec!["payments".into(), "search".into(), "ledger".into()],
            region: "us-east-1".into(),
            fail_teams: vec!["search".into()],
            account_config: Some("demo-accounts".into()),
        };
        let composition = compose("demo", &spec).unwrap();
        for child in &composition.children {
            let validator = spec_validator(&child.kind);
            assert!(validator.is_valid(&child.spec), "{} {}", child.kind, child.spec);
            let mut flowed = child.spec.clone();
            for edge in composition.edges.iter().filter(|e| e.dependent.name == child.name) {
                if edge.dependent.kind != child.kind {
                    continue;
                }
                for flow in &edge.value_flows {
                    let field = flow.dependent_field.trim_start_matches('/');
                    flowed[field] = json!("some-id");
                }
            }
            assert!(validator.is_valid(&flowed), "{} {}", child.kind, flowed);
        }
    }

    #[test]
    fn the_bom_schema_refuses_what_the_composer_would() {
        let bom = spec_validator("bom");
        assert!(bom.is_valid(&json!({"teams": ["payments"], "region": "us-east-1"})));
        assert!(bom.is_valid(&json!({"teams": ["a"], "region": "eu-west-3", "failTeams": ["a"]})));
        assert!(bom.is_valid(&json!({"teams": ["a"], "region": "eu-west-3", "accountConfig": "demo-accounts"})));
        assert!(!bom.is_valid(&json!({"teams": ["a"], "region": "eu-west-3", "accountConfig": ""})));
        assert!(!bom.is_valid(&json!({"teams": [], "region": "us-east-1"})));
        assert!(!bom.is_valid(&json!({"teams": ["network"], "region": "us-east-1"})));
        assert!(!bom.is_valid(&json!({"teams": ["a", "a"], "region": "us-east-1"})));
        assert!(!bom.is_valid(&json!({"teams": ["Bad_Name"], "region": "us-east-1"})));
        assert!(!bom.is_valid(&json!({"teams": ["a"]})));
        assert!(!bom.is_valid(&json!({"teams": ["a"], "region": "us-east-1", "extra": 1})));
    }

    #[test]
    fn statuses_match_their_status_schemas() {
        let status_validator = |kind: &str| {
            let (_, _, status) = schemas().into_iter().find(|(k, _, _)| k == kind).unwrap();
            jsonschema::draft202012::new(&status).unwrap()
        };
        let cases = [
            (
                "account",
                json!({"accountId": sim::account_id("x"), "team": "a", "region": "r"}),
            ),
            (
                "vpc",
                json!({"vpcId": sim::vpc_id("x"), "accountId": "a", "cidr": "10.1.0.0/16"}),
            ),
            (
                "tgw",
                json!({"tgwId": sim::tgw_id("x"), "accountId": "a", "region": "r"}),
            ),
            (
                "route",
                json!({"routeId": sim::route_id("x"), "vpcId": "v", "tgwId": "t", "destinationCidr": "c"}),
            ),
            ("bom", json!({"phase": "composed", "children": 11})),
            ("bom", bom::rollup::summarise("root", &[]).status),
        ];
        for (kind, status) in cases {
            assert!(status_validator(kind).is_valid(&status), "{kind} {status}");
        }
    }
}
