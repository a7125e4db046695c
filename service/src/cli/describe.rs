//! `converge describe KIND NAME`: one resource for a person to read —
//! identity, lifecycle, conditions, spec and status, owner, children by
//! phase, dependencies, recent events, and what it is waiting for.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use clap::Args;
use converge_proto::json::struct_to_json;
use converge_sdk::Client;
use converge_sdk::proto::v1 as pb;

use super::envelope::timestamp;
use super::error::CliError;
use super::get::{get_resource, phase};
use super::output::{Table, print, yaml};
use super::verbs::{Target, events_table, list_events};

/// Examples in `--help`.
pub const EXAMPLES: &str = "\
Examples:
  converge describe noop hello
  converge describe bom demo --events 20";

/// Children listed by name under "Children" (the rest are counted).
const CHILDREN_SHOWN: usize = 10;
/// Dependencies outside the resource's graph whose phase is read (a
/// resource with more shows `-` for the rest).
const DEPENDENCIES_READ: usize = 20;

/// Arguments of `converge describe`.
#[derive(Debug, Args)]
pub struct DescribeArgs {
    #[command(flatten)]
    target: Target,
    /// How many recent event runs to show.
    #[arg(long, default_value_t = 10)]
    events: usize,
}

/// Runs `converge describe`.
pub async fn run(client: &Client, args: &DescribeArgs) -> Result<(), CliError> {
    let t = &args.target;
    let r = get_resource(client, &t.kind, &t.name).await?;
    let graph = client
        .resources()
        .get_resource_graph(pb::GetResourceGraphRequest {
            kind: t.kind.clone(),
            name: t.name.clone(),
            page_size: 1000,
            page_token: String::new(),
        })
        .await?
        .into_inner();
    let events = list_events(client, t, None, None, false, args.events).await?;
    let explained = match client
        .resources()
        .explain_resource(pb::ExplainResourceRequest {
            kind: t.kind.clone(),
            name: t.name.clone(),
        })
        .await
    {
        Ok(answer) => Some(answer.into_inner()),
        // A server older than the method: describe without the section's
        // content rather than not at all.
        Err(status) if status.code() == tonic::Code::Unimplemented => None,
        Err(status) => return Err(status.into()),
    };
    let sibling_phases = dependency_phases(client, &r, &graph).await?;
    let mut out = String::new();
    header(&mut out, &r, explained.as_ref());
    conditions(&mut out, &r);
    section(&mut out, "Spec", r.spec.clone())?;
    section(&mut out, "Status", r.status.clone())?;
    children(&mut out, &r, &graph);
    dependencies(&mut out, &r, &graph, &sibling_phases);
    waiting_for(&mut out, explained.as_ref());
    let _ = writeln!(out, "Events:");
    let table = events_table(&events).render();
    if table.is_empty() {
        let _ = writeln!(out, "  <none>");
    } else {
        for line in table.lines() {
            let _ = writeln!(out, "  {line}");
        }
    }
    print(&out)
}

fn field(out: &mut String, label: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "{:<18}{value}", format!("{label}:"));
}

fn reference(r: Option<&pb::ResourceRef>) -> Option<String> {
    r.map(|r| format!("{}/{}", r.kind, r.name))
}

/// The phases of this resource's dependencies that its own graph does not
/// hold (siblings in its owner's tree, or other roots), read one by one:
/// at most [`DEPENDENCIES_READ`] of them. A dependency that does not exist
/// (yet) is `Missing`.
async fn dependency_phases(
    client: &Client,
    r: &pb::Resource,
    graph: &pb::GetResourceGraphResponse,
) -> Result<BTreeMap<(String, String), String>, CliError> {
    let in_graph = |d: &pb::ResourceRef| {
        graph
            .nodes
            .iter()
            .chain(graph.root.as_ref())
            .any(|n| n.kind == d.kind && n.name == d.name)
    };
    let mut phases = BTreeMap::new();
    for edge in &graph.edges {
        let (Some(dependent), Some(dependency)) = (&edge.dependent, &edge.dependency) else {
            continue;
        };
        let key = (dependency.kind.clone(), dependency.name.clone());
        if dependent.kind != r.kind
            || dependent.name != r.name
            || in_graph(dependency)
            || phases.contains_key(&key)
            || phases.len() >= DEPENDENCIES_READ
        {
            continue;
        }
        let found = client
            .resources()
            .get_resource(pb::GetResourceRequest {
                kind: dependency.kind.clone(),
                name: dependency.name.clone(),
            })
            .await;
        let shown = match found {
            Ok(answer) => answer.into_inner().resource.map_or("Missing", |d| phase(d.phase)),
            Err(status) if status.code() == tonic::Code::NotFound => "Missing",
            Err(status) => return Err(status.into()),
        };
        phases.insert(key, shown.to_owned());
    }
    Ok(phases)
}

fn header(out: &mut String, r: &pb::Resource, explained: Option<&pb::ExplainResourceResponse>) {
    field(out, "Name", format!("{}/{}", r.kind, r.name));
    field(out, "Kind version", r.kind_version);
    field(out, "UID", &r.uid);
    let labels: Vec<String> = r.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    field(
        out,
        "Labels",
        if labels.is_empty() {
            "<none>".to_owned()
        } else {
            labels.join(",")
        },
    );
    field(out, "Phase", phase(r.phase));
    field(
        out,
        "Generation",
        format!("{} (observed {})", r.generation, r.observed_generation),
    );
    if r.failure_attempts > 0 {
        field(out, "Failure attempts", r.failure_attempts);
    }
    if r.failed_generation > 0 {
        field(out, "Failed generation", r.failed_generation);
    }
    if r.quarantined {
        let wait = explained
            .into_iter()
            .flat_map(|e| &e.waiting_for)
            .find_map(|w| match &w.cause {
                Some(pb::wait::Cause::Quarantined(q)) => Some(q),
                _ => None,
            });
        let mut line = "yes".to_owned();
        if let Some(since) = wait.and_then(|q| q.since_time.as_ref()) {
            let _ = write!(line, ", since {}", timestamp(since));
        }
        if let Some(note) = wait.map(|q| q.message.as_str()).filter(|m| !m.is_empty()) {
            let _ = write!(line, ": {note}");
        }
        field(out, "Quarantined", line);
    }
    if !r.provider_config.is_empty() {
        field(out, "Provider config", &r.provider_config);
    }
    if let Some(owner) = reference(r.owner.as_ref()) {
        field(out, "Owner", owner);
    }
    if let Some(root) = reference(r.root.as_ref()) {
        field(out, "Root", root);
    }
    if !r.finalizers.is_empty() {
        field(out, "Finalizers", r.finalizers.join(","));
    }
    let time = |t: Option<&prost_types::Timestamp>| t.map(timestamp);
    if let Some(t) = time(r.create_time.as_ref()) {
        field(out, "Created", t);
    }
    if let Some(t) = time(r.update_time.as_ref()) {
        field(out, "Updated", t);
    }
    if let Some(t) = time(r.delete_time.as_ref()) {
        field(out, "Deletion requested", t);
    }
    if let Some(t) = time(r.orphan_expire_time.as_ref()) {
        field(out, "Orphan teardown at", t);
    }
}

fn conditions(out: &mut String, r: &pb::Resource) {
    let _ = writeln!(out, "Conditions:");
    let mut table = Table::new(&["TYPE", "STATUS", "REASON", "MESSAGE"]);
    for c in &r.conditions {
        let status = match pb::ConditionStatus::try_from(c.status) {
            Ok(pb::ConditionStatus::True) => "True",
            Ok(pb::ConditionStatus::False) => "False",
            _ => "Unknown",
        };
        table.row(vec![
            c.r#type.clone(),
            status.to_owned(),
            c.reason.clone(),
            c.message.clone(),
        ]);
    }
    indent(out, &table.render());
}

fn indent(out: &mut String, text: &str) {
    if text.trim().is_empty() {
        let _ = writeln!(out, "  <none>");
        return;
    }
    for line in text.lines() {
        let _ = writeln!(out, "  {line}");
    }
}

fn section(out: &mut String, title: &str, value: Option<prost_types::Struct>) -> Result<(), CliError> {
    let _ = writeln!(out, "{title}:");
    match value.map(struct_to_json) {
        Some(v) if v.as_object().is_some_and(|o| !o.is_empty()) => indent(out, &yaml(&v)),
        _ => indent(out, ""),
    }
    Ok(())
}

/// The children (direct and deeper) counted by phase, the ones not Ready
/// named first.
fn children(out: &mut String, r: &pb::Resource, graph: &pb::GetResourceGraphResponse) {
    let _ = writeln!(out, "Children:");
    if graph.nodes.is_empty() {
        indent(out, "");
        return;
    }
    let mut by_phase: BTreeMap<i32, usize> = BTreeMap::new();
    for n in &graph.nodes {
        *by_phase.entry(n.phase).or_default() += 1;
    }
    let counts: Vec<String> = by_phase
        .iter()
        .map(|(p, n)| format!("{n} {}", phase(*p).to_lowercase()))
        .collect();
    let more = if graph.next_page_token.is_empty() {
        ""
    } else {
        " (first page)"
    };
    let _ = writeln!(out, "  {} in the tree{more}: {}", graph.nodes.len(), counts.join(", "));
    let mut nodes: Vec<&pb::GraphNode> = graph.nodes.iter().collect();
    nodes.sort_by_key(|n| (n.phase == pb::Phase::Ready as i32, n.kind.clone(), n.name.clone()));
    let mut table = Table::new(&["KIND", "NAME", "PHASE", "SYNCED", "OWNER"]);
    for n in nodes.iter().take(CHILDREN_SHOWN) {
        let owner = reference(n.owner.as_ref()).unwrap_or_default();
        let direct = n.owner.as_ref().is_some_and(|o| o.kind == r.kind && o.name == r.name);
        table.row(vec![
            n.kind.clone(),
            n.name.clone(),
            phase(n.phase).to_owned(),
            format!("{}/{}", n.observed_generation, n.generation),
            if direct { "(this)".to_owned() } else { owner },
        ]);
    }
    indent(out, &table.render());
    if nodes.len() > CHILDREN_SHOWN {
        let _ = writeln!(out, "  ... and {} more", nodes.len() - CHILDREN_SHOWN);
    }
}

/// The edges whose dependent is this resource: what it waits to be synced,
/// each with its phase (from the graph, else from `read`).
fn dependencies(
    out: &mut String,
    r: &pb::Resource,
    graph: &pb::GetResourceGraphResponse,
    read: &BTreeMap<(String, String), String>,
) {
    let _ = writeln!(out, "Depends on:");
    let mut phases: BTreeMap<(String, String), String> = graph
        .nodes
        .iter()
        .chain(graph.root.as_ref())
        .map(|n| ((n.kind.clone(), n.name.clone()), phase(n.phase).to_owned()))
        .collect();
    phases.extend(read.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut table = Table::new(&["DEPENDENCY", "PHASE", "VALUES"]);
    for edge in &graph.edges {
        let (Some(dependent), Some(dependency)) = (&edge.dependent, &edge.dependency) else {
            continue;
        };
        if dependent.kind != r.kind || dependent.name != r.name {
            continue;
        }
        let known = phases.get(&(dependency.kind.clone(), dependency.name.clone()));
        let flows: Vec<String> = edge
            .value_flows
            .iter()
            .map(|f| format!("{} <- {}", f.dependent_field, f.source_field))
            .collect();
        table.row(vec![
            format!("{}/{}", dependency.kind, dependency.name),
            known.map_or("-", String::as_str).to_owned(),
            flows.join(", "),
        ]);
    }
    indent(out, &table.render());
}

/// The snake_case name of a wait's cause, printed before its message so a
/// script can match on it.
fn cause_name(cause: Option<&pb::wait::Cause>) -> &'static str {
    use pb::wait::Cause;
    match cause {
        Some(Cause::Dependencies(_)) => "dependencies",
        Some(Cause::Children(_)) => "children",
        Some(Cause::NoWorker(_)) => "no_worker",
        Some(Cause::ConcurrencyCap(_)) => "concurrency_cap",
        Some(Cause::Queued(_)) => "queued",
        Some(Cause::Running(_)) => "running",
        Some(Cause::Applying(_)) => "applying",
        Some(Cause::RetryBackoff(_)) => "retry_backoff",
        Some(Cause::Requeued(_)) => "requeued",
        Some(Cause::Failed(_)) => "failed",
        Some(Cause::Quarantined(_)) => "quarantined",
        Some(Cause::Orphaned(_)) => "orphaned",
        Some(Cause::Deletion(_)) => "deletion",
        Some(Cause::ProviderConfigMissing(_)) => "provider_config_missing",
        Some(Cause::Unhealthy(_)) => "unhealthy",
        Some(Cause::Unscheduled(_)) => "unscheduled",
        None => "unknown",
    }
}

/// The ExplainResource answer: one line per cause, most decisive first,
/// then when the control plane next acts by itself.
fn waiting_for(out: &mut String, explained: Option<&pb::ExplainResourceResponse>) {
    let _ = writeln!(out, "Waiting for:");
    let Some(explained) = explained else {
        let _ = writeln!(out, "  (the server does not answer ExplainResource)");
        return;
    };
    if explained.waiting_for.is_empty() {
        let _ = writeln!(out, "  nothing");
    }
    for wait in &explained.waiting_for {
        let _ = writeln!(out, "  {}: {}", cause_name(wait.cause.as_ref()), wait.message);
    }
    if let Some(due) = &explained.next_due_time {
        let _ = writeln!(out, "  next due at {}", timestamp(due));
    }
}
