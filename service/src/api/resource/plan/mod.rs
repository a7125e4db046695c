//! What a change would do to the tree, computed without writing (issue 46):
//! the resource's own changes, and for a composer the children it would
//! create, change, delete or orphan, level by level, with the edges and the
//! provider configs that would move. A composition declared as data (ADR
//! 49) is evaluated here; a composer worker is asked through a broker
//! ([`worker`]). The proposed resource has already been through the write
//! path in a rolled-back transaction (the caller's part), so what is planned
//! here is a resource the server would accept.

mod worker;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use converge_proto::v1 as pb;
use serde_json::Value;
use uuid::Uuid;

use crate::api::ApiState;
use crate::contract::status::ApiError;
use crate::domain::composition::{ChildSpec, ConfigSpec, Edge};
use crate::domain::plan::{TreeMember, diff, teardown_order};
use crate::domain::provider_config::ProviderConfig;
use crate::domain::resource::{Resource, ResourceRef};
use crate::store::pipeline::{self, MemberRow};
use crate::store::plans::PlanRequest;
use crate::store::{graph, kinds, provider_configs};
use converge_proto::json::json_to_value;

/// Most resources one plan visits (all levels).
pub const MAX_PLANNED: usize = 10_000;
/// Most dependents listed per resource.
const MAX_DEPENDENTS: i64 = 100;
/// Levels planned when the request says 0.
pub const DEFAULT_DEPTH: i32 = 3;
/// Most levels a request may ask for.
pub const MAX_DEPTH: i32 = 8;
/// How long a plan waits for composer workers when the request says nothing.
pub const DEFAULT_COMPOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a request may ask a plan to wait for composer workers.
pub const MAX_COMPOSE_TIMEOUT: Duration = Duration::from_secs(60);

/// A resource as a plan sees it: proposed, and what is stored now.
struct Node {
    kind: String,
    kind_version: i32,
    name: String,
    labels: BTreeMap<String, String>,
    spec: Value,
    provider_config: Option<String>,
    /// The stored resource's id, generation, spec, labels, version and
    /// override; `None` when it would be created.
    current: Option<Current>,
}

struct Current {
    id: Uuid,
    generation: i64,
    kind_version: i32,
    labels: BTreeMap<String, String>,
    spec: Value,
    provider_config: Option<String>,
}

/// One plan's walk: what it may still visit, and until when it waits for
/// composer workers.
struct Planner<'a> {
    state: &'a ApiState,
    budget: usize,
    deadline: tokio::time::Instant,
    /// The levels asked for: the depth of the resource planned.
    max_depth: i32,
}

/// Plans applying `proposed` (the resource as the write path would store
/// it) over `current` (stored now, if any), waiting up to `compose_timeout`
/// in all for composer workers.
pub(super) async fn plan_apply(
    state: &ApiState,
    current: Option<&Resource>,
    proposed: &pb::Resource,
    max_depth: i32,
    compose_timeout: Duration,
) -> Result<pb::PlanResourceResponse, ApiError> {
    let node = Node {
        kind: proposed.kind.clone(),
        kind_version: proposed.kind_version,
        name: proposed.name.clone(),
        labels: proposed.labels.clone().into_iter().collect(),
        spec: proposed.spec.clone().map_or_else(
            || Value::Object(serde_json::Map::new()),
            converge_proto::json::struct_to_json,
        ),
        provider_config: Some(proposed.provider_config.clone()).filter(|p| !p.is_empty()),
        current: current.map(|c| Current {
            id: c.id,
            generation: c.generation,
            kind_version: c.kind_version,
            labels: c.labels.clone(),
            spec: c.spec.clone(),
            provider_config: c.provider_config.clone(),
        }),
    };
    let mut planner = Planner {
        state,
        budget: MAX_PLANNED,
        deadline: tokio::time::Instant::now() + compose_timeout,
        max_depth,
    };
    let plan = planner.node(node, &BTreeSet::new(), max_depth).await?;
    let changes = has_changes(&plan);
    Ok(pb::PlanResourceResponse {
        plan: Some(plan),
        changes,
    })
}

/// Plans deleting `current`: the teardown order of its tree.
pub(super) async fn plan_delete(state: &ApiState, current: &Resource) -> Result<pb::PlanResourceResponse, ApiError> {
    let page = graph::page(&state.pool, &current.kind, &current.name, None, MAX_PLANNED).await?;
    let mut members = vec![TreeMember {
        resource: ResourceRef {
            kind: current.kind.clone(),
            name: current.name.clone(),
        },
        owner: None,
    }];
    let mut edges = Vec::new();
    if let Some(page) = page {
        members.extend(page.nodes.iter().map(|n| TreeMember {
            resource: ResourceRef {
                kind: n.kind.clone(),
                name: n.name.clone(),
            },
            owner: n.owner.clone(),
        }));
        edges = page.edges.into_iter().map(|e| (e.dependent, e.dependency)).collect();
    }
    let order = teardown_order(&members, &edges);
    let dependents = graph::dependents(&state.pool, current.id, MAX_DEPENDENTS).await?;
    let plan = pb::ResourcePlan {
        resource: Some(reference(&current.kind, &current.name)),
        kind_version: current.kind_version,
        action: pb::PlanAction::Delete as i32,
        composer: pb::PlanComposer::Unspecified as i32,
        dependents: dependents.iter().map(|r| reference(&r.kind, &r.name)).collect(),
        teardown_order: order.iter().map(|r| reference(&r.kind, &r.name)).collect(),
        ..Default::default()
    };
    Ok(pb::PlanResourceResponse {
        plan: Some(plan),
        changes: true,
    })
}

impl Planner<'_> {
    /// Plans one node and, for a composer, its children; `flowed` are the spec
    /// pointers value flows fill (left out of the diff).
    async fn node(&mut self, node: Node, flowed: &BTreeSet<String>, depth: i32) -> Result<pb::ResourcePlan, ApiError> {
        let state = self.state;
        self.budget = self.budget.saturating_sub(1);
        let skip = |p: &str| flowed.contains(p);
        let (action, spec_changes, reconciles) = match &node.current {
            None => (pb::PlanAction::Create, diff(None, &node.spec, &skip), true),
            Some(current) => {
                let spec_changes = diff(Some(&current.spec), &node.spec, &skip);
                let moved = !spec_changes.is_empty() || current.kind_version != node.kind_version;
                let changed = moved || current.labels != node.labels || current.provider_config != node.provider_config;
                let action = if changed {
                    pb::PlanAction::Update
                } else {
                    pb::PlanAction::Unchanged
                };
                (
                    action,
                    spec_changes,
                    moved || current.provider_config != node.provider_config,
                )
            }
        };
        let mut plan = pb::ResourcePlan {
            resource: Some(reference(&node.kind, &node.name)),
            kind_version: node.kind_version,
            action: action as i32,
            spec_changes: spec_changes.into_iter().map(field_change).collect(),
            reconciles,
            composer: pb::PlanComposer::None as i32,
            provider_config: match &node.current {
                Some(c) if c.provider_config == node.provider_config => None,
                None if node.provider_config.is_none() => None,
                _ => Some(node.provider_config.clone().unwrap_or_default()),
            },
            ..Default::default()
        };
        // Dependents matter only when it reconciles; an unchanged child of a
        // large composition is not worth a read.
        if let Some(current) = node.current.as_ref().filter(|_| reconciles) {
            plan.dependents = graph::dependents(&state.pool, current.id, MAX_DEPENDENTS)
                .await?
                .iter()
                .map(|r| reference(&r.kind, &r.name))
                .collect();
        }
        let compiled = state.catalog.current(&state.pool, &node.kind, node.kind_version).await;
        let Some(compiled) = compiled else {
            return Ok(plan);
        };
        let by_worker = compiled.plan.compose.is_some();
        if !by_worker && compiled.composition.is_none() {
            return Ok(plan);
        }
        plan.composer = if by_worker {
            pb::PlanComposer::Worker
        } else {
            pb::PlanComposer::Server
        } as i32;
        // A child that does not reconcile is not composed again: its worker
        // is not asked (the resource planned is, so its plan shows what
        // stays).
        if by_worker && !plan.reconciles && depth < self.max_depth {
            return Ok(plan);
        }
        if depth <= 0 {
            plan.not_planned = "the request's max_depth is reached".to_owned();
            return Ok(plan);
        }
        // What an apply would then fail with is the plan's answer, not an error.
        let (children, edges, configs) = match &compiled.composition {
            Some(composition) if !by_worker => match composition.compose(&node.name, &node.labels, &node.spec) {
                Ok(composed) => (composed.children, composed.edges, None),
                Err(message) => {
                    plan.not_planned = clip(format!(
                        "the composition does not evaluate (the apply would fail with CompositionEvaluationFailed): {message}"
                    ));
                    return Ok(plan);
                }
            },
            _ => match self.ask_worker(&node, &plan).await? {
                worker::Answer::Composed(composed) => (composed.children, composed.edges, Some(composed.configs)),
                worker::Answer::Failed(failure) => {
                    let reason = failure.reason.as_deref().unwrap_or("no reason");
                    plan.not_planned = clip(format!(
                        "the composer worker's handler failed (the apply would fail the same way, {reason}): {}",
                        failure.message
                    ));
                    return Ok(plan);
                }
            },
        };
        let (observed, stored_edges) = match &node.current {
            Some(current) => (
                pipeline::children(&state.pool, current.id, i64::try_from(MAX_PLANNED).unwrap_or(i64::MAX)).await?,
                pipeline::edges(&state.pool, current.id).await?,
            ),
            None => (Vec::new(), Vec::new()),
        };
        if let Some(configs) = configs {
            let owned = match &node.current {
                Some(current) => provider_configs::owned_by(&state.pool, current.id).await?,
                None => Vec::new(),
            };
            plan.provider_configs = plan_configs(configs, owned);
        }
        self.children(&mut plan, children, &edges, observed, stored_edges, depth)
            .await?;
        Ok(plan)
    }

    /// A composer worker's composition of `node`, asked through a broker.
    async fn ask_worker(&self, node: &Node, plan: &pb::ResourcePlan) -> Result<worker::Answer, ApiError> {
        let generation = match &node.current {
            Some(current) if plan.reconciles => current.generation + 1,
            Some(current) => current.generation,
            None => 1,
        };
        let request = PlanRequest {
            kind: node.kind.clone(),
            kind_version: node.kind_version,
            resource_id: node.current.as_ref().map(|c| c.id),
            name: node.name.clone(),
            labels: node.labels.clone(),
            spec: node.spec.clone(),
            provider_config: node.provider_config.clone(),
            generation,
        };
        worker::compose(self.state, &request, self.deadline).await
    }

    /// Compares the desired children and edges with the stored ones and plans
    /// each child that changes.
    async fn children(
        &mut self,
        plan: &mut pb::ResourcePlan,
        desired: Vec<ChildSpec>,
        desired_edges: &[Edge],
        observed: Vec<MemberRow>,
        stored_edges: Vec<pipeline::EdgeRow>,
        depth: i32,
    ) -> Result<(), ApiError> {
        let state = self.state;
        // Pointers of each child's spec that value flows fill, stored or declared.
        let mut flowed: HashMap<(String, String), BTreeSet<String>> = HashMap::new();
        for edge in desired_edges {
            let key = (edge.dependent.kind.clone(), edge.dependent.name.clone());
            flowed
                .entry(key)
                .or_default()
                .extend(edge.flows.iter().map(|f| f.dependent.clone()));
        }
        for edge in &stored_edges {
            let key = (edge.dependent_kind.clone(), edge.dependent_name.clone());
            flowed
                .entry(key)
                .or_default()
                .extend(edge.value_flows.0.iter().map(|f| f.dependent.clone()));
        }
        let mut stored: HashMap<(String, String), MemberRow> = observed
            .into_iter()
            .filter(|m| m.deletion_requested_at.is_none())
            .map(|m| ((m.kind.clone(), m.name.clone()), m))
            .collect();
        for child in desired {
            let key = (child.kind.clone(), child.name.clone());
            let current = stored.remove(&key).map(|m| Current {
                id: m.id,
                generation: m.generation,
                kind_version: m.kind_version,
                labels: m.labels.0,
                spec: m.spec.0,
                provider_config: m.provider_config,
            });
            if self.budget == 0 {
                plan.not_planned = format!("the plan's size cap ({MAX_PLANNED} resources) is reached");
                break;
            }
            let node = Node {
                kind: child.kind,
                kind_version: child.kind_version,
                name: child.name,
                labels: child.labels,
                spec: child.spec,
                provider_config: child.provider_config,
                current,
            };
            let empty = BTreeSet::new();
            let child_flowed = flowed.get(&key).unwrap_or(&empty);
            let child_plan = Box::pin(self.node(node, child_flowed, depth - 1)).await?;
            if has_changes(&child_plan) {
                plan.children.push(child_plan);
            } else {
                plan.unchanged_children += 1;
            }
        }
        // What is stored and no longer desired goes: at once, or after its
        // kind's orphan grace.
        let mut gone: Vec<MemberRow> = stored.into_values().collect();
        gone.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
        let mut graces: HashMap<(String, i32), i32> = HashMap::new();
        for member in gone {
            let key = (member.kind.clone(), member.kind_version);
            let grace = match graces.get(&key) {
                Some(grace) => *grace,
                None => {
                    let mut conn = state.pool.acquire().await.map_err(crate::store::StoreError::from)?;
                    let grace = kinds::get_config(&mut conn, &member.kind, member.kind_version, false)
                        .await?
                        .map_or(0, |c| c.orphan_grace_secs);
                    graces.insert(key, grace);
                    grace
                }
            };
            let action = if grace > 0 {
                pb::PlanAction::Orphan
            } else {
                pb::PlanAction::Delete
            };
            plan.children.push(pb::ResourcePlan {
                resource: Some(reference(&member.kind, &member.name)),
                kind_version: member.kind_version,
                action: action as i32,
                ..Default::default()
            });
        }
        // Edges, compared as (dependent, dependency, flows).
        let key_of = |dk: &str, dn: &str, uk: &str, un: &str, flows: Vec<(String, String)>| {
            (dk.to_owned(), dn.to_owned(), uk.to_owned(), un.to_owned(), flows)
        };
        let want: BTreeSet<_> = desired_edges
            .iter()
            .map(|e| {
                key_of(
                    &e.dependent.kind,
                    &e.dependent.name,
                    &e.dependency.kind,
                    &e.dependency.name,
                    e.flows
                        .iter()
                        .map(|f| (f.dependent.clone(), f.source.clone()))
                        .collect(),
                )
            })
            .collect();
        let have: BTreeSet<_> = stored_edges
            .iter()
            .map(|e| {
                key_of(
                    &e.dependent_kind,
                    &e.dependent_name,
                    &e.dependency_kind,
                    &e.dependency_name,
                    e.value_flows
                        .0
                        .iter()
                        .map(|f| (f.dependent.clone(), f.source.clone()))
                        .collect(),
                )
            })
            .collect();
        let edge =
            |(dk, dn, uk, un, flows): &(String, String, String, String, Vec<(String, String)>)| pb::DependencyEdge {
                dependent: Some(reference(dk, dn)),
                dependency: Some(reference(uk, un)),
                value_flows: flows
                    .iter()
                    .map(|(dependent, source)| pb::ValueFlow {
                        dependent_field: dependent.clone(),
                        source_field: source.clone(),
                    })
                    .collect(),
            };
        plan.edges_added = want.difference(&have).map(edge).collect();
        plan.edges_removed = have.difference(&want).map(edge).collect();
        Ok(())
    }
}

/// The configs a composer would create, change or delete, against those
/// its resource owns now.
fn plan_configs(desired: Vec<ConfigSpec>, owned: Vec<ProviderConfig>) -> Vec<pb::ProviderConfigPlan> {
    let mut owned: BTreeMap<String, ProviderConfig> = owned.into_iter().map(|c| (c.name.clone(), c)).collect();
    let mut out = Vec::new();
    for config in desired {
        let now = owned.remove(&config.name);
        let spec_changes: Vec<pb::FieldChange> = diff(now.as_ref().map(|c| &c.spec), &config.spec, &|_| false)
            .into_iter()
            .map(field_change)
            .collect();
        let action = match &now {
            None => pb::PlanAction::Create,
            Some(now)
                if spec_changes.is_empty()
                    && now.data == config.data
                    && now.is_default == config.is_default
                    && now.kind == config.kind
                    && now.kind_version == config.kind_version =>
            {
                continue;
            }
            Some(_) => pb::PlanAction::Update,
        };
        out.push(pb::ProviderConfigPlan {
            data_changes: now.as_ref().map_or(!config.data.is_empty(), |c| c.data != config.data),
            name: config.name,
            kind: config.kind,
            kind_version: config.kind_version,
            action: action as i32,
            spec_changes,
            is_default: config.is_default,
        });
    }
    out.extend(owned.into_values().map(|gone| pb::ProviderConfigPlan {
        name: gone.name,
        kind: gone.kind,
        kind_version: gone.kind_version,
        action: pb::PlanAction::Delete as i32,
        is_default: gone.is_default,
        ..Default::default()
    }));
    out
}

fn field_change(c: crate::domain::plan::FieldDiff) -> pb::FieldChange {
    pb::FieldChange {
        path: c.path,
        before: c.before.as_ref().map(json_to_value),
        after: c.after.as_ref().map(json_to_value),
    }
}

/// A plan's note, bounded.
fn clip(text: String) -> String {
    crate::domain::violation::clip(text, 1024)
}

/// Whether a plan changes anything, at any level.
pub(super) fn has_changes(plan: &pb::ResourcePlan) -> bool {
    plan.action != pb::PlanAction::Unchanged as i32
        || !plan.children.is_empty()
        || !plan.provider_configs.is_empty()
        || !plan.edges_added.is_empty()
        || !plan.edges_removed.is_empty()
}

fn reference(kind: &str, name: &str) -> pb::ResourceRef {
    pb::ResourceRef {
        kind: kind.to_owned(),
        name: name.to_owned(),
    }
}
