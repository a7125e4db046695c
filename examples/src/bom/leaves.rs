//! The leaf handlers: `account` (and its `rotate_credentials` verb), `vpc`,
//! `tgw` and `route`.
//!
//! Each sleeps the simulated latency and answers with its status (a
//! deterministic id plus the values it was given) and `Ready=True`. A field
//! that a value flow fills from an upstream is required before work starts:
//! if it is missing the handler fails transiently and the broker retries.

use std::collections::BTreeMap;

use converge_sdk::worker::{Condition, ConditionStatus, HandlerError, Outcome, ReactionRequest, StageInput};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::sim::{self, Latency};

/// Spec of an `account`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AccountSpec {
    team: String,
    region: String,
}

/// Spec of a `vpc`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct VpcSpec {
    team: String,
    cidr: String,
    account_id: Option<String>,
}

/// Spec of a `tgw`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TgwSpec {
    region: String,
    account_id: Option<String>,
}

/// Spec of a `route`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RouteSpec {
    team: String,
    destination_cidr: String,
    vpc_id: Option<String>,
    tgw_id: Option<String>,
    #[serde(default)]
    simulate_failure: bool,
}

/// The simulated cloud's settings an `account` is created with: the kind's
/// default provider config merged with the account's override.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AccountConfig {
    #[serde(default)]
    org: Option<String>,
    #[serde(default)]
    tags: BTreeMap<String, String>,
}

/// Works an `account`.
pub(super) async fn account(request: &ReactionRequest, latency: Latency) -> Result<Outcome, HandlerError> {
    let spec: AccountSpec = spec_of(request)?;
    let config: AccountConfig = match request.effective_config() {
        Some(config) => serde_json::from_value(config).map_err(|e| {
            HandlerError::terminal(format!("invalid account provider config: {e}")).with_reason("InvalidConfig")
        })?,
        None => AccountConfig::default(),
    };
    latency.wait().await;
    let id = sim::account_id(&request.resource.name);
    let mut message = format!("account {id} for team {} in {}", spec.team, spec.region);
    let mut status = json!({"accountId": id, "team": spec.team, "region": spec.region});
    if let Some(org) = config.org {
        message.push_str(&format!(", org {org}"));
        status["org"] = json!(org);
    }
    if !config.tags.is_empty() {
        status["tags"] = json!(config.tags);
    }
    // The key belongs to the last rotation, not to the spec: keep it.
    if let Some(credentials) = request.resource.status.as_ref().and_then(|s| s.get("credentials")) {
        status["credentials"] = credentials.clone();
    }
    Ok(provisioned(status, message))
}

/// Runs `rotate_credentials` on an `account`: issues a new access key
/// (derived from the operation, so a retried run issues the same one),
/// records it in the status and returns it as the output.
pub(super) async fn rotate_credentials(request: &ReactionRequest, latency: Latency) -> Result<Outcome, HandlerError> {
    let StageInput::Operate(input) = &request.input else {
        return Err(HandlerError::terminal(
            "an operation task arrived without its operation",
        ));
    };
    let operation = &input.operation;
    let reason = operation
        .input
        .as_ref()
        .and_then(|i| i.get("reason"))
        .and_then(Value::as_str)
        .unwrap_or("unspecified")
        .to_owned();
    latency.wait().await;
    let key_id = sim::access_key_id(&request.resource.name, &operation.uid);
    let mut status = request.resource.status.clone().unwrap_or_else(|| json!({}));
    status["credentials"] = json!({"keyId": key_id, "operation": operation.uid});
    Ok(Outcome::new()
        .with_status(status)
        .with_operation_output(json!({"keyId": key_id, "reason": reason, "requestedBy": operation.requested_by})))
}

/// Works a `vpc`.
pub(super) async fn vpc(request: &ReactionRequest, latency: Latency) -> Result<Outcome, HandlerError> {
    let spec: VpcSpec = spec_of(request)?;
    let account_id = upstream(spec.account_id, "accountId", "account")?;
    latency.wait().await;
    let id = sim::vpc_id(&request.resource.name);
    let message = format!(
        "vpc {id} ({}) for team {} in account {account_id}",
        spec.cidr, spec.team
    );
    Ok(provisioned(
        json!({"vpcId": id, "accountId": account_id, "cidr": spec.cidr}),
        message,
    ))
}

/// Works a `tgw`.
pub(super) async fn tgw(request: &ReactionRequest, latency: Latency) -> Result<Outcome, HandlerError> {
    let spec: TgwSpec = spec_of(request)?;
    let account_id = upstream(spec.account_id, "accountId", "network account")?;
    latency.wait().await;
    let id = sim::tgw_id(&request.resource.name);
    let message = format!("transit gateway {id} in account {account_id}, {}", spec.region);
    Ok(provisioned(
        json!({"tgwId": id, "accountId": account_id, "region": spec.region}),
        message,
    ))
}

/// Works a `route`; fails terminally when the spec asks for it.
pub(super) async fn route(request: &ReactionRequest, latency: Latency) -> Result<Outcome, HandlerError> {
    let spec: RouteSpec = spec_of(request)?;
    let vpc_id = upstream(spec.vpc_id, "vpcId", "vpc")?;
    let tgw_id = upstream(spec.tgw_id, "tgwId", "transit gateway")?;
    latency.wait().await;
    if spec.simulate_failure {
        return Err(HandlerError::terminal(format!(
            "simulated failure: team {} is listed in the BOM's failTeams",
            spec.team
        ))
        .with_reason("SimulatedFailure"));
    }
    let id = sim::route_id(&request.resource.name);
    let message = format!("route {id}: {} via {tgw_id} to {vpc_id}", spec.destination_cidr);
    Ok(provisioned(
        json!({"routeId": id, "vpcId": vpc_id, "tgwId": tgw_id, "destinationCidr": spec.destination_cidr}),
        message,
    ))
}

/// The resource's spec as `T`; a spec that does not fit is a terminal error
/// (retrying the same spec cannot help).
fn spec_of<T: DeserializeOwned>(request: &ReactionRequest) -> Result<T, HandlerError> {
    serde_json::from_value(request.resource.spec.clone()).map_err(|e| {
        HandlerError::terminal(format!("invalid {} spec: {e}", request.resource.kind)).with_reason("InvalidSpec")
    })
}

/// A value that flows in from an upstream, or a transient error saying it
/// has not arrived yet.
fn upstream(value: Option<String>, field: &str, from: &str) -> Result<String, HandlerError> {
    value.filter(|v| !v.is_empty()).ok_or_else(|| {
        HandlerError::transient(format!("spec.{field} is not set yet (it flows from the {from})"))
            .with_reason("WaitingForUpstream")
    })
}

fn provisioned(status: serde_json::Value, message: String) -> Outcome {
    Outcome::new().with_status(status).with_condition(
        Condition::new("Ready", ConditionStatus::True)
            .with_reason("Provisioned")
            .with_message(message),
    )
}
