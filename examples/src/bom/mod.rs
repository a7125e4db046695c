//! The BOM composition demo: a `bom` composite kind and the four leaf kinds
//! it composes (`account`, `vpc`, `tgw`, `route`), with one [`Provider`] per
//! kind.
//!
//! - `bom` has a `compose` reaction (spec change → children, edges, status;
//!   see [`compose`]) and a `rollup` reaction (children settled → status,
//!   conditions; see [`rollup`]).
//! - The leaves each have a `work` reaction (spec change → status,
//!   conditions) that simulates a cloud call (see [`crate::sim`]).
//!
//! The manifests are the JSON files in `examples/bom/`.

pub mod compose;
mod leaves;
pub mod rollup;

use converge_sdk::worker::{
    HandlerError, KindVersion, Outcome, Provider, ReactionRequest, StageInput, WorkerBuilder, async_trait,
};

use crate::sim::Latency;

/// The composite kind.
pub const BOM: &str = "bom";
/// The same BOM declared as data: converge composes and rolls it up from
/// the CEL of its manifest (examples/bom/bom-cel.json), no worker involved.
pub const BOM_CEL: &str = "bom-cel";
/// A team's (or the shared network's) account.
pub const ACCOUNT: &str = "account";
/// A team's VPC.
pub const VPC: &str = "vpc";
/// The shared transit gateway.
pub const TGW: &str = "tgw";
/// A team's route through the transit gateway.
pub const ROUTE: &str = "route";
/// The version of every demo kind.
pub const KIND_VERSION: i32 = 1;
/// The demo kinds, in the order they are provisioned.
pub const KINDS: [&str; 5] = [BOM, ACCOUNT, TGW, VPC, ROUTE];

/// The `team` of the shared network account (and so a reserved team name).
pub const NETWORK_TEAM: &str = "network";

/// The composer reaction of `bom`.
pub const COMPOSE: &str = "compose";
/// The rollup reaction of `bom`.
pub const ROLLUP: &str = "rollup";
/// The reaction of every leaf kind.
pub const WORK: &str = "work";
/// The verb of `account` that issues a new access key.
pub const ROTATE_CREDENTIALS: &str = "rotate_credentials";
/// The reaction of that verb.
pub const ROTATE_CREDENTIALS_REACTION: &str = "operate:rotate_credentials";

/// The manifest files, `(path under examples/, content)`, in the order to
/// apply them.
pub const MANIFEST_FILES: [(&str, &str); 6] = [
    ("bom/account.json", include_str!("../../bom/account.json")),
    ("bom/tgw.json", include_str!("../../bom/tgw.json")),
    ("bom/vpc.json", include_str!("../../bom/vpc.json")),
    ("bom/route.json", include_str!("../../bom/route.json")),
    ("bom/bom.json", include_str!("../../bom/bom.json")),
    ("bom/bom-cel.json", include_str!("../../bom/bom-cel.json")),
];

/// The status field holding a demo kind's own id (what a listing shows).
pub fn id_field(kind: &str) -> Option<&'static str> {
    match kind {
        ACCOUNT => Some("accountId"),
        VPC => Some("vpcId"),
        TGW => Some("tgwId"),
        ROUTE => Some("routeId"),
        _ => None,
    }
}

/// Registers a provider for every demo kind on `builder`; the leaves sleep
/// `latency` per task.
pub fn register(builder: WorkerBuilder, latency: Latency) -> WorkerBuilder {
    register_except(builder, latency, &[])
}

/// Registers a provider for every demo kind not in `external` (kinds another
/// worker process serves, e.g. the Go and Python ports of the leaves).
pub fn register_except(builder: WorkerBuilder, latency: Latency, external: &[String]) -> WorkerBuilder {
    let served = |kind: &&str| !external.iter().any(|e| e == kind);
    let builder = if served(&BOM) {
        builder.provider(BomProvider)
    } else {
        builder
    };
    [ACCOUNT, TGW, VPC, ROUTE]
        .into_iter()
        .filter(served)
        .fold(builder, |builder, kind| {
            builder.provider(LeafProvider { kind, latency })
        })
}

/// Serves `bom`: composes the tree and rolls it up.
#[derive(Debug, Clone, Copy, Default)]
pub struct BomProvider;

#[async_trait]
impl Provider for BomProvider {
    fn kind(&self) -> KindVersion {
        KindVersion::new(BOM, KIND_VERSION)
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        match request.reaction.as_str() {
            COMPOSE => {
                let spec: compose::BomSpec = serde_json::from_value(request.resource.spec.clone())
                    .map_err(|e| HandlerError::terminal(format!("invalid bom spec: {e}")).with_reason("InvalidSpec"))?;
                let composition = compose::compose(&request.resource.name, &spec)
                    .map_err(|e| HandlerError::terminal(e.to_string()).with_reason("InvalidSpec"))?;
                let status = serde_json::json!({"phase": "composed", "children": composition.children.len()});
                Ok(Outcome {
                    status: Some(status),
                    children: composition.children,
                    edges: composition.edges,
                    ..Outcome::default()
                })
            }
            ROLLUP => {
                let StageInput::Rollup(input) = &request.input else {
                    return Err(HandlerError::terminal("a rollup task arrived without its rollup input"));
                };
                let summary = rollup::summarise(&request.resource.uid, &input.descendants);
                Ok(Outcome::new()
                    .with_status(summary.status)
                    .with_condition(summary.ready)
                    .with_healthy(summary.healthy))
            }
            other => Err(HandlerError::unknown_reaction(other, &self.kind())),
        }
    }
}

/// Serves one leaf kind.
#[derive(Debug, Clone, Copy)]
pub struct LeafProvider {
    kind: &'static str,
    latency: Latency,
}

impl LeafProvider {
    /// The provider of leaf `kind` (`account`, `vpc`, `tgw` or `route`), or
    /// `None` for another kind.
    pub fn new(kind: &str, latency: Latency) -> Option<Self> {
        [ACCOUNT, VPC, TGW, ROUTE]
            .into_iter()
            .find(|k| *k == kind)
            .map(|kind| Self { kind, latency })
    }
}

#[async_trait]
impl Provider for LeafProvider {
    fn kind(&self) -> KindVersion {
        KindVersion::new(self.kind, KIND_VERSION)
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        if self.kind == ACCOUNT && request.reaction == ROTATE_CREDENTIALS_REACTION {
            return leaves::rotate_credentials(&request, self.latency).await;
        }
        if request.reaction != WORK {
            return Err(HandlerError::unknown_reaction(&request.reaction, &self.kind()));
        }
        match self.kind {
            ACCOUNT => leaves::account(&request, self.latency).await,
            VPC => leaves::vpc(&request, self.latency).await,
            TGW => leaves::tgw(&request, self.latency).await,
            _ => leaves::route(&request, self.latency).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use converge_sdk::worker::{
        ConditionStatus, OperateInput, Operation, Resource, RollupInput, Stage, Trigger, WorkInput,
    };
    use serde_json::{Value, json};

    use super::*;
    use crate::sim;

    fn resource(kind: &str, name: &str, spec: Value) -> Resource {
        Resource {
            uid: format!("{kind}-{name}"),
            kind: kind.into(),
            kind_version: 1,
            name: name.into(),
            labels: BTreeMap::new(),
            spec,
            status: None,
            generation: 1,
            observed_generation: 0,
            ready: false,
            healthy: true,
            owner: None,
            root: None,
            finalizers: Vec::new(),
            delete_time: None,
            orphan_expire_time: None,
            quarantined: false,
        }
    }

    fn request(reaction: &str, stage: Stage, resource: Resource, input: StageInput) -> ReactionRequest {
        ReactionRequest {
            reaction: reaction.into(),
            stage,
            trigger: Trigger::SpecChange,
            kind: KindVersion::new(resource.kind.clone(), 1),
            resource,
            generation: 1,
            attempt: 1,
            plan: false,
            input,
            default_config: None,
            config_override: None,
            bundle_override: Vec::new(),
            deadline: None,
        }
    }

    fn work(kind: &str, name: &str, spec: Value) -> ReactionRequest {
        request(
            WORK,
            Stage::Work,
            resource(kind, name, spec),
            StageInput::Work(WorkInput::default()),
        )
    }

    fn leaf(kind: &str) -> LeafProvider {
        LeafProvider::new(kind, Latency::NONE).unwrap()
    }

    #[tokio::test]
    async fn compose_emits_the_tree_and_a_composed_status() {
        let spec = json!({"teams": ["payments", "search", "ledger"], "region": "us-east-1"});
        let out = BomProvider
            .handle(request(
                COMPOSE,
                Stage::Compose,
                resource(BOM, "demo", spec),
                StageInput::None,
            ))
            .await
            .unwrap();
        assert_eq!(out.children.len(), 11);
        assert_eq!(out.edges.len(), 10);
        assert_eq!(out.status, Some(json!({"phase": "composed", "children": 11})));

        let bad = BomProvider
            .handle(request(
                COMPOSE,
                Stage::Compose,
                resource(BOM, "demo", json!({"teams": []})),
                StageInput::None,
            ))
            .await
            .unwrap_err();
        assert!(bad.is_terminal(), "{bad:?}");
    }

    #[tokio::test]
    async fn rotate_credentials_issues_a_key_per_operation_and_keeps_it_in_the_status() {
        let mut account = resource(ACCOUNT, "demo-payments", json!({"team": "payments", "region": "r"}));
        account.status = Some(json!({"accountId": sim::account_id("demo-payments")}));
        let operate = |uid: &str, account: Resource| {
            let mut request = request(
                ROTATE_CREDENTIALS_REACTION,
                Stage::Operate,
                account,
                StageInput::Operate(OperateInput {
                    operation: Operation {
                        uid: uid.into(),
                        verb: ROTATE_CREDENTIALS.into(),
                        input: Some(json!({"reason": "quarterly"})),
                        attempts: 1,
                        requested_by: "anonymous".into(),
                    },
                }),
            );
            request.trigger = Trigger::Operation;
            request
        };
        let out = leaf(ACCOUNT).handle(operate("op-1", account.clone())).await.unwrap();
        let key = sim::access_key_id("demo-payments", "op-1");
        assert_eq!(
            out.operation_output,
            Some(json!({"keyId": key, "reason": "quarterly", "requestedBy": "anonymous"}))
        );
        let status = out.status.unwrap();
        assert_eq!(status["credentials"], json!({"keyId": key, "operation": "op-1"}));
        assert_eq!(status["accountId"], json!(sim::account_id("demo-payments")));
        // A retried run of the same operation issues the same key; another one a new key.
        let again = leaf(ACCOUNT).handle(operate("op-1", account.clone())).await.unwrap();
        assert_eq!(again.operation_output, out.operation_output);
        let other = leaf(ACCOUNT).handle(operate("op-2", account.clone())).await.unwrap();
        assert_ne!(other.operation_output, out.operation_output);
        // The next reconcile keeps the key.
        account.status = Some(status);
        let worked = leaf(ACCOUNT)
            .handle(request(
                WORK,
                Stage::Work,
                account,
                StageInput::Work(WorkInput::default()),
            ))
            .await
            .unwrap();
        assert_eq!(worked.status.unwrap()["credentials"]["keyId"], json!(key));
        // Other leaves have no verbs.
        assert!(
            leaf(VPC)
                .handle(operate("op-3", resource(VPC, "v", json!({}))))
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn rollup_reports_health() {
        let mut child = resource(ACCOUNT, "demo-network", json!({"team": "network", "region": "r"}));
        child.ready = true;
        child.observed_generation = 1;
        child.status = Some(json!({"accountId": sim::account_id("demo-network")}));
        let input = StageInput::Rollup(RollupInput {
            descendants: vec![child],
            status: None,
        });
        let out = BomProvider
            .handle(request(ROLLUP, Stage::Rollup, resource(BOM, "demo", json!({})), input))
            .await
            .unwrap();
        assert_eq!(out.healthy, Some(true));
        assert_eq!(out.conditions[0].status, ConditionStatus::True);
        assert_eq!(
            out.status.unwrap()["network"]["accountId"],
            sim::account_id("demo-network")
        );
    }

    #[tokio::test]
    async fn leaves_wait_for_their_upstream_values() {
        let err = leaf(VPC)
            .handle(work(VPC, "demo-a", json!({"team": "a", "cidr": "10.1.0.0/16"})))
            .await
            .unwrap_err();
        assert!(!err.is_terminal());
        assert!(err.message().contains("accountId"), "{err:?}");

        let err = leaf(ROUTE)
            .handle(work(
                ROUTE,
                "demo-a",
                json!({"team": "a", "destinationCidr": "10.1.0.0/16", "vpcId": "vpc-1"}),
            ))
            .await
            .unwrap_err();
        assert!(!err.is_terminal());
        assert!(err.message().contains("tgwId"), "{err:?}");

        let err = leaf(TGW)
            .handle(work(TGW, "demo-tgw", json!({"region": "r"})))
            .await
            .unwrap_err();
        assert!(!err.is_terminal());
    }

    #[tokio::test]
    async fn leaves_report_deterministic_ids_and_ready() {
        let out = leaf(ACCOUNT)
            .handle(work(ACCOUNT, "demo-a", json!({"team": "a", "region": "us-east-1"})))
            .await
            .unwrap();
        assert_eq!(
            out.status,
            Some(json!({"accountId": sim::account_id("demo-a"), "team": "a", "region": "us-east-1"}))
        );
        assert_eq!(out.conditions[0].condition_type, "Ready");
        assert_eq!(out.conditions[0].status, ConditionStatus::True);

        let out = leaf(VPC)
            .handle(work(
                VPC,
                "demo-a",
                json!({"team": "a", "cidr": "10.1.0.0/16", "accountId": "acct-1"}),
            ))
            .await
            .unwrap();
        assert_eq!(out.status.unwrap()["vpcId"], sim::vpc_id("demo-a"));

        let out = leaf(TGW)
            .handle(work(TGW, "demo-tgw", json!({"region": "r", "accountId": "acct-1"})))
            .await
            .unwrap();
        assert_eq!(out.status.unwrap()["tgwId"], sim::tgw_id("demo-tgw"));

        let out = leaf(ROUTE)
            .handle(work(
                ROUTE,
                "demo-a",
                json!({"team": "a", "destinationCidr": "10.1.0.0/16", "vpcId": "vpc-1", "tgwId": "tgw-1"}),
            ))
            .await
            .unwrap();
        assert_eq!(
            out.status,
            Some(json!({
                "routeId": sim::route_id("demo-a"),
                "vpcId": "vpc-1",
                "tgwId": "tgw-1",
                "destinationCidr": "10.1.0.0/16",
            }))
        );
    }

    #[tokio::test]
    async fn a_failing_route_fails_terminally_and_bad_specs_too() {
        let err = leaf(ROUTE)
            .handle(work(
                ROUTE,
                "demo-a",
                json!({"team": "a", "destinationCidr": "10.1.0.0/16", "vpcId": "v", "tgwId": "t", "simulateFailure": true}),
            ))
            .await
            .unwrap_err();
        assert!(err.is_terminal());
        assert_eq!(err.reason(), "SimulatedFailure");

        let err = leaf(ACCOUNT)
            .handle(work(ACCOUNT, "demo-a", json!({"team": "a"})))
            .await
            .unwrap_err();
        assert!(err.is_terminal());
        assert_eq!(err.reason(), "InvalidSpec");

        let err = leaf(ACCOUNT)
            .handle(request(
                "teardown",
                Stage::Delete,
                resource(ACCOUNT, "x", json!({})),
                StageInput::None,
            ))
            .await
            .unwrap_err();
        assert!(!err.is_terminal());
    }
}
