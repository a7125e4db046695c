//! The BOM rollup, as a pure function of the settled subtree.
//!
//! The rollup runs once every child has settled (synced, failed or set
//! aside), so a child that is not synced for its generation, not being
//! deleted and not set aside has failed. The summary counts the children by
//! kind and by state, collects the ids per team, and sets `Ready`: true when
//! every child is ready, else false with reason `ChildrenNotReady` and a
//! message naming each child that is not.

use std::collections::BTreeMap;

use converge_sdk::worker::{Condition, ConditionStatus, Resource};
use serde_json::{Map, Value, json};

use super::{ACCOUNT, NETWORK_TEAM, ROUTE, TGW, VPC};

/// Where one child stands, as far as the rollup can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChildState {
    /// Synced and healthy.
    Ready,
    /// Its current generation failed.
    Failed,
    /// Synced but reporting itself unhealthy.
    Degraded,
    /// Set aside by an operator.
    Quarantined,
    /// Being torn down (no longer wanted, or its owner is going).
    Deleting,
    /// Dropped by the composer and waiting out its grace period.
    Orphaned,
}

impl ChildState {
    /// Classifies a settled descendant.
    pub fn of(r: &Resource) -> Self {
        if r.delete_time.is_some() {
            Self::Deleting
        } else if r.quarantined {
            Self::Quarantined
        } else if r.orphan_expire_time.is_some() {
            Self::Orphaned
        } else if r.ready {
            Self::Ready
        } else if r.observed_generation >= r.generation {
            Self::Degraded
        } else {
            Self::Failed
        }
    }

    /// Lower-case name, as used in the status.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Failed => "failed",
            Self::Degraded => "degraded",
            Self::Quarantined => "quarantined",
            Self::Deleting => "deleting",
            Self::Orphaned => "orphaned",
        }
    }

    /// Whether the child is on its way out and no longer counts towards the
    /// BOM's readiness.
    fn is_leaving(self) -> bool {
        matches!(self, Self::Deleting | Self::Orphaned)
    }
}

/// The rollup's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The BOM's new status.
    pub status: Value,
    /// Its `Ready` condition.
    pub ready: Condition,
    /// Whether every (wanted) child is ready.
    pub healthy: bool,
}

/// Summarises the subtree `descendants` of the BOM whose uid is `root_uid`
/// (a descendant with that uid, if any, is skipped).
pub fn summarise(root_uid: &str, descendants: &[Resource]) -> Summary {
    let mut by_kind: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let mut by_state: BTreeMap<&str, u64> = BTreeMap::new();
    let mut teams: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    let mut network = Map::new();
    let mut not_ready = Vec::new();
    let (mut children, mut ready) = (0_u64, 0_u64);

    let mut sorted: Vec<&Resource> = descendants.iter().filter(|r| r.uid != root_uid).collect();
    sorted.sort_by(|a, b| (kind_rank(&a.kind), &a.kind, &a.name).cmp(&(kind_rank(&b.kind), &b.kind, &b.name)));

    for r in sorted {
        let state = ChildState::of(r);
        *by_state.entry(state.as_str()).or_default() += 1;
        if state.is_leaving() {
            continue;
        }
        children += 1;
        let counts = by_kind.entry(r.kind.as_str()).or_default();
        counts.0 += 1;
        if state == ChildState::Ready {
            counts.1 += 1;
            ready += 1;
        } else {
            not_ready.push(format!("{}/{} ({})", r.kind, r.name, state.as_str()));
        }

        let team = r.spec.get("team").and_then(Value::as_str);
        let (id_field, bucket) = match (r.kind.as_str(), team) {
            (ACCOUNT, Some(NETWORK_TEAM)) => ("accountId", &mut network),
            (TGW, _) => ("tgwId", &mut network),
            (ACCOUNT, Some(team)) => ("accountId", teams.entry(team.to_owned()).or_default()),
            (VPC, Some(team)) => ("vpcId", teams.entry(team.to_owned()).or_default()),
            (ROUTE, Some(team)) => ("routeId", teams.entry(team.to_owned()).or_default()),
            _ => continue,
        };
        if let Some(id) = r.status.as_ref().and_then(|s| s.get(id_field)) {
            bucket.insert(id_field.to_owned(), id.clone());
        }
        if r.kind != TGW && team != Some(NETWORK_TEAM) {
            let all_ready = bucket.get("ready").and_then(Value::as_bool).unwrap_or(true);
            bucket.insert("ready".to_owned(), Value::Bool(all_ready && state == ChildState::Ready));
        }
    }

    let healthy = not_ready.is_empty();
    let ready_condition = if healthy {
        Condition::new("Ready", ConditionStatus::True)
            .with_reason("AllChildrenReady")
            .with_message(format!("{ready} of {children} children ready"))
    } else {
        Condition::new("Ready", ConditionStatus::False)
            .with_reason("ChildrenNotReady")
            .with_message(format!(
                "{} of {children} children not ready: {}",
                not_ready.len(),
                not_ready.join(", ")
            ))
    };
    let by_kind: Map<String, Value> = by_kind
        .into_iter()
        .map(|(kind, (total, ready))| (kind.to_owned(), json!({"total": total, "ready": ready})))
        .collect();
    let status = json!({
        "phase": if healthy { "ready" } else { "degraded" },
        "children": children,
        "ready": ready,
        "byKind": by_kind,
        "byState": by_state,
        "network": network,
        "teams": teams,
        "notReady": not_ready,
    });
    Summary {
        status,
        ready: ready_condition,
        healthy,
    }
}

/// Display order of the demo kinds: the order they are provisioned in.
fn kind_rank(kind: &str) -> usize {
    [ACCOUNT, TGW, VPC, ROUTE]
        .iter()
        .position(|k| *k == kind)
        .unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bom::compose::{BomSpec, compose};
    use crate::sim;

    /// The composed children of a 3-team BOM as the rollup sees them: all
    /// ready with their ids, except `route/demo-ledger`, which failed.
    fn subtree() -> Vec<Resource> {
        let spec = BomSpec {
            teams: vec!["payments".into(), "search".into(), "ledger".into()],
            region: "us-east-1".into(),
            fail_teams: vec!["ledger".into()],
            account_config: None,
        };
        let composition = compose("demo", &spec).unwrap();
        composition
            .children
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let failed = c.kind == "route" && c.name == "demo-ledger";
                let status = match c.kind.as_str() {
                    "account" => json!({"accountId": sim::account_id(&c.name)}),
                    "vpc" => json!({"vpcId": sim::vpc_id(&c.name)}),
                    "tgw" => json!({"tgwId": sim::tgw_id(&c.name)}),
                    _ => json!({"routeId": sim::route_id(&c.name)}),
                };
                Resource {
                    uid: format!("uid-{i}"),
                    kind: c.kind,
                    kind_version: c.kind_version,
                    name: c.name,
                    labels: c.labels,
                    spec: c.spec,
                    status: (!failed).then_some(status),
                    generation: 2,
                    observed_generation: if failed { 0 } else { 2 },
                    ready: !failed,
                    healthy: true,
                    owner: None,
                    root: None,
                    finalizers: Vec::new(),
                    delete_time: None,
                    orphan_expire_time: None,
                    quarantined: false,
                }
            })
            .collect()
    }

    #[test]
    fn a_failed_route_degrades_the_bom_and_is_named() {
        let summary = summarise("root", &subtree());
        assert!(!summary.healthy);
        assert_eq!(summary.ready.condition_type, "Ready");
        assert_eq!(summary.ready.status, ConditionStatus::False);
        assert_eq!(summary.ready.reason, "ChildrenNotReady");
        assert_eq!(
            summary.ready.message,
            "1 of 11 children not ready: route/demo-ledger (failed)"
        );
        let s = &summary.status;
        assert_eq!(s["phase"], "degraded");
        assert_eq!(s["children"], 11);
        assert_eq!(s["ready"], 10);
        assert_eq!(
            s["byKind"],
            json!({
                "account": {"total": 4, "ready": 4},
                "route": {"total": 3, "ready": 2},
                "tgw": {"total": 1, "ready": 1},
                "vpc": {"total": 3, "ready": 3},
            })
        );
        assert_eq!(s["byState"], json!({"ready": 10, "failed": 1}));
        assert_eq!(s["notReady"], json!(["route/demo-ledger (failed)"]));
        assert_eq!(
            s["network"],
            json!({"accountId": sim::account_id("demo-network"), "tgwId": sim::tgw_id("demo-tgw")})
        );
        assert_eq!(
            s["teams"]["payments"],
            json!({
                "accountId": sim::account_id("demo-payments"),
                "vpcId": sim::vpc_id("demo-payments"),
                "routeId": sim::route_id("demo-payments"),
                "ready": true,
            })
        );
        assert_eq!(
            s["teams"]["ledger"],
            json!({
                "accountId": sim::account_id("demo-ledger"),
                "vpcId": sim::vpc_id("demo-ledger"),
                "ready": false,
            })
        );
    }

    #[test]
    fn all_ready_is_ready_and_leaving_children_do_not_count() {
        let mut tree = subtree();
        for r in &mut tree {
            r.ready = true;
            r.observed_generation = r.generation;
        }
        // A dropped child on its way out, and the root itself, are ignored.
        let mut gone = tree[0].clone();
        gone.uid = "gone".into();
        gone.name = "demo-old".into();
        gone.ready = false;
        gone.delete_time = Some(chrono::Utc::now());
        tree.push(gone);
        let mut root = tree[0].clone();
        root.uid = "root".into();
        root.ready = false;
        tree.push(root);

        let summary = summarise("root", &tree);
        assert!(summary.healthy);
        assert_eq!(summary.ready.status, ConditionStatus::True);
        assert_eq!(summary.ready.reason, "AllChildrenReady");
        assert_eq!(summary.ready.message, "11 of 11 children ready");
        assert_eq!(summary.status["phase"], "ready");
        assert_eq!(summary.status["byState"], json!({"ready": 11, "deleting": 1}));
        assert_eq!(summary.status["notReady"], json!([]));
    }

    #[test]
    fn states_follow_the_lifecycle_scalars() {
        let mut r = subtree().remove(0);
        assert_eq!(ChildState::of(&r), ChildState::Ready);
        r.ready = false;
        assert_eq!(ChildState::of(&r), ChildState::Degraded);
        r.observed_generation = 1;
        assert_eq!(ChildState::of(&r), ChildState::Failed);
        r.quarantined = true;
        assert_eq!(ChildState::of(&r), ChildState::Quarantined);
        r.delete_time = Some(chrono::Utc::now());
        assert_eq!(ChildState::of(&r), ChildState::Deleting);
    }
}
