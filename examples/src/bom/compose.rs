//! The BOM composer, as a pure function of the BOM's name and spec.
//!
//! A BOM `N` with teams `T1..Tk` composes `3k + 2` children:
//!
//! - `account/N-network`, the shared network account, and `tgw/N-tgw`, the
//!   transit gateway in it (`/accountId` flows from the account);
//! - per team `T` (at position `i`, from 1): `account/N-T`; `vpc/N-T` with
//!   range `10.i.0.0/16` in that account (`/accountId` flows from it); and
//!   `route/N-T` sending that range to the VPC through the gateway (`/vpcId`
//!   flows from the VPC, `/tgwId` from the gateway).
//!
//! Each dependent is worked only once its dependencies are synced, so the
//! tree fills in three waves: accounts, then the gateway and the VPCs, then
//! the routes.

use std::collections::BTreeMap;

use converge_sdk::worker::{ChildSpec, DepEdge, ResourceRef, ValueFlow};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ACCOUNT, KIND_VERSION, NETWORK_TEAM, ROUTE, TGW, VPC};

/// Longest resource name the server accepts.
const MAX_NAME_LEN: usize = 253;

/// Most teams a BOM can have: each takes one `10.i.0.0/16` range.
pub const MAX_TEAMS: usize = 200;

/// The spec of a `bom`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BomSpec {
    /// Teams to provision, in order.
    pub teams: Vec<String>,
    /// Region of everything composed.
    pub region: String,
    /// Demo only: teams whose route fails terminally.
    #[serde(default)]
    pub fail_teams: Vec<String>,
    /// Provider config attached to every composed account as its override.
    #[serde(default)]
    pub account_config: Option<String>,
}

/// Why a BOM cannot be composed. The spec schema already refuses most of
/// these; the composer checks again because a schema can be edited.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComposeError {
    /// `teams` is empty.
    #[error("the BOM lists no teams")]
    NoTeams,
    /// More teams than VPC ranges.
    #[error("the BOM lists {0} teams; at most {MAX_TEAMS} are supported")]
    TooManyTeams(usize),
    /// A team appears twice.
    #[error("team {0:?} is listed twice")]
    DuplicateTeam(String),
    /// A team uses the name of the shared account.
    #[error("team name {NETWORK_TEAM:?} is reserved for the shared network account")]
    ReservedTeam,
    /// A child name would be too long.
    #[error("child name {0:?} is longer than {MAX_NAME_LEN} characters; use a shorter BOM or team name")]
    NameTooLong(String),
}

/// The desired children and their dependency edges.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Composition {
    /// The children, shared ones first, then per team account, vpc, route.
    pub children: Vec<ChildSpec>,
    /// The edges, with their value flows.
    pub edges: Vec<DepEdge>,
}

/// Composes the BOM named `bom` with `spec`.
pub fn compose(bom: &str, spec: &BomSpec) -> Result<Composition, ComposeError> {
    if spec.teams.is_empty() {
        return Err(ComposeError::NoTeams);
    }
    if spec.teams.len() > MAX_TEAMS {
        return Err(ComposeError::TooManyTeams(spec.teams.len()));
    }
    for (i, team) in spec.teams.iter().enumerate() {
        if team == NETWORK_TEAM {
            return Err(ComposeError::ReservedTeam);
        }
        if spec.teams[..i].contains(team) {
            return Err(ComposeError::DuplicateTeam(team.clone()));
        }
    }

    let mut out = Composition::default();
    let network = child_name(bom, NETWORK_TEAM)?;
    let tgw = child_name(bom, "tgw")?;
    let account = |name: &str, team: Option<&str>, spec_json: Value| ChildSpec {
        provider_config: spec.account_config.clone(),
        ..child(ACCOUNT, name, team, spec_json)
    };
    out.children.push(account(
        &network,
        None,
        json!({"team": NETWORK_TEAM, "region": spec.region}),
    ));
    out.children
        .push(child(TGW, &tgw, None, json!({"region": spec.region})));
    out.edges.push(edge((TGW, &tgw), (ACCOUNT, &network), &["/accountId"]));

    for (i, team) in spec.teams.iter().enumerate() {
        let name = child_name(bom, team)?;
        let cidr = format!("10.{}.0.0/16", i + 1);
        let mut route = json!({"team": team, "destinationCidr": cidr});
        if spec.fail_teams.contains(team) {
            route["simulateFailure"] = Value::Bool(true);
        }
        out.children
            .push(account(&name, Some(team), json!({"team": team, "region": spec.region})));
        out.children
            .push(child(VPC, &name, Some(team), json!({"team": team, "cidr": cidr})));
        out.children.push(child(ROUTE, &name, Some(team), route));
        out.edges.push(edge((VPC, &name), (ACCOUNT, &name), &["/accountId"]));
        out.edges.push(edge((ROUTE, &name), (VPC, &name), &["/vpcId"]));
        out.edges.push(edge((ROUTE, &name), (TGW, &tgw), &["/tgwId"]));
    }
    Ok(out)
}

/// `bom-suffix`, if it is short enough. Both parts are valid name pieces
/// (the BOM's name is a resource name; teams match the schema's pattern).
fn child_name(bom: &str, suffix: &str) -> Result<String, ComposeError> {
    let name = format!("{bom}-{suffix}");
    if name.len() > MAX_NAME_LEN {
        return Err(ComposeError::NameTooLong(name));
    }
    Ok(name)
}

fn child(kind: &str, name: &str, team: Option<&str>, spec: Value) -> ChildSpec {
    let labels = team
        .map(|t| BTreeMap::from([("team".to_owned(), t.to_owned())]))
        .unwrap_or_default();
    ChildSpec {
        kind: kind.to_owned(),
        kind_version: KIND_VERSION,
        name: name.to_owned(),
        labels,
        spec,
        provider_config: None,
    }
}

/// An edge whose flows copy each pointer from the dependency's status to the
/// same pointer in the dependent's spec.
fn edge(dependent: (&str, &str), dependency: (&str, &str), fields: &[&str]) -> DepEdge {
    DepEdge {
        dependent: ResourceRef::new(dependent.0, dependent.1),
        dependency: ResourceRef::new(dependency.0, dependency.1),
        value_flows: fields
            .iter()
            .map(|f| ValueFlow {
                dependent_field: (*f).to_owned(),
                source_field: (*f).to_owned(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(teams: &[&str], fail: &[&str]) -> BomSpec {
        BomSpec {
            teams: teams.iter().map(|t| (*t).to_owned()).collect(),
            region: "us-east-1".to_owned(),
            fail_teams: fail.iter().map(|t| (*t).to_owned()).collect(),
            account_config: None,
        }
    }

    fn names(c: &Composition) -> Vec<String> {
        c.children.iter().map(|c| format!("{}/{}", c.kind, c.name)).collect()
    }

    fn edges(c: &Composition) -> Vec<String> {
        c.edges
            .iter()
            .map(|e| {
                let flows: Vec<String> = e
                    .value_flows
                    .iter()
                    .map(|f| format!("{}<-{}", f.dependent_field, f.source_field))
                    .collect();
                format!(
                    "{}/{} -> {}/{} [{}]",
                    e.dependent.kind,
                    e.dependent.name,
                    e.dependency.kind,
                    e.dependency.name,
                    flows.join(",")
                )
            })
            .collect()
    }

    #[test]
    fn every_account_and_only_accounts_carry_the_account_config() {
        let configured = BomSpec {
            account_config: Some("demo-accounts".into()),
            ..spec(&["a", "b"], &[])
        };
        let composition = compose("demo", &configured).unwrap();
        for child in &composition.children {
            let expected = (child.kind == ACCOUNT).then_some("demo-accounts");
            assert_eq!(
                child.provider_config.as_deref(),
                expected,
                "{}/{}",
                child.kind,
                child.name
            );
        }
        assert!(
            compose("demo", &spec(&["a"], &[]))
                .unwrap()
                .children
                .iter()
                .all(|c| c.provider_config.is_none())
        );
    }

    #[test]
    fn three_teams_make_eleven_children_wired_by_value_flows() {
        let c = compose("demo", &spec(&["payments", "search", "ledger"], &[])).unwrap();
        assert_eq!(
            names(&c),
            [
                "account/demo-network",
                "tgw/demo-tgw",
                "account/demo-payments",
                "vpc/demo-payments",
                "route/demo-payments",
                "account/demo-search",
                "vpc/demo-search",
                "route/demo-search",
                "account/demo-ledger",
                "vpc/demo-ledger",
                "route/demo-ledger",
            ]
        );
        assert_eq!(
            edges(&c),
            [
                "tgw/demo-tgw -> account/demo-network [/accountId<-/accountId]",
                "vpc/demo-payments -> account/demo-payments [/accountId<-/accountId]",
                "route/demo-payments -> vpc/demo-payments [/vpcId<-/vpcId]",
                "route/demo-payments -> tgw/demo-tgw [/tgwId<-/tgwId]",
                "vpc/demo-search -> account/demo-search [/accountId<-/accountId]",
                "route/demo-search -> vpc/demo-search [/vpcId<-/vpcId]",
                "route/demo-search -> tgw/demo-tgw [/tgwId<-/tgwId]",
                "vpc/demo-ledger -> account/demo-ledger [/accountId<-/accountId]",
                "route/demo-ledger -> vpc/demo-ledger [/vpcId<-/vpcId]",
                "route/demo-ledger -> tgw/demo-tgw [/tgwId<-/tgwId]",
            ]
        );
        assert!(c.children.iter().all(|c| c.kind_version == KIND_VERSION));
        let by_name = |kind: &str, name: &str| {
            c.children
                .iter()
                .find(|c| c.kind == kind && c.name == name)
                .unwrap()
                .clone()
        };
        assert_eq!(
            by_name("account", "demo-network").spec,
            json!({"team": "network", "region": "us-east-1"})
        );
        assert!(by_name("account", "demo-network").labels.is_empty());
        assert_eq!(by_name("tgw", "demo-tgw").spec, json!({"region": "us-east-1"}));
        assert_eq!(
            by_name("vpc", "demo-search").spec,
            json!({"team": "search", "cidr": "10.2.0.0/16"})
        );
        assert_eq!(by_name("vpc", "demo-search").labels["team"], "search");
        assert_eq!(
            by_name("route", "demo-ledger").spec,
            json!({"team": "ledger", "destinationCidr": "10.3.0.0/16"})
        );
    }

    #[test]
    fn fail_teams_mark_only_their_route() {
        let c = compose("demo", &spec(&["a", "b"], &["b", "not-a-team"])).unwrap();
        let failing: Vec<String> = c
            .children
            .iter()
            .filter(|c| c.spec.get("simulateFailure").is_some())
            .map(|c| format!("{}/{}", c.kind, c.name))
            .collect();
        assert_eq!(failing, ["route/demo-b"]);
    }

    #[test]
    fn bad_team_lists_are_refused() {
        assert_eq!(compose("d", &spec(&[], &[])), Err(ComposeError::NoTeams));
        assert_eq!(
            compose("d", &spec(&["a", "b", "a"], &[])),
            Err(ComposeError::DuplicateTeam("a".into()))
        );
        assert_eq!(compose("d", &spec(&["network"], &[])), Err(ComposeError::ReservedTeam));
        let long = "x".repeat(250);
        assert!(matches!(
            compose(&long, &spec(&["abcd"], &[])),
            Err(ComposeError::NameTooLong(_))
        ));
        let many: Vec<String> = (0..=MAX_TEAMS).map(|i| format!("t{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(
            compose("d", &spec(&many, &[])),
            Err(ComposeError::TooManyTeams(MAX_TEAMS + 1))
        );
    }
}
