//! `converge plan` and `converge diff`: what applying documents (or deleting
//! a resource) would do, from `ResourceService.PlanResource`, written as a
//! tree with `+` (created), `~` (changed), `-` (deleted) and `!` (orphaned)
//! markers. `diff` adds each changed field. Exit 0 when nothing would
//! change, 6 when something would.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;
use converge_sdk::Client;
use converge_sdk::proto::v1 as pb;

use super::apply;
use super::envelope::Object;
use super::error::CliError;
use super::output::{parse_duration, print};

/// Examples of `converge plan`.
pub const EXAMPLES: &str = "Examples:
  converge plan -f bom.yaml                 # the children a change would add, change or prune
  converge diff -f bom.yaml                 # the same with every changed field
  converge plan --delete bom-cel/demo       # the teardown order of a tree
  converge plan -f resources/ --max-depth 1";

/// Arguments of `converge plan` and `converge diff`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Documents with the resources to plan (kind manifests and other
    /// objects in them are skipped): a file, a directory or `-`. Repeatable.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE|DIR|-",
        required_unless_present = "delete"
    )]
    pub files: Vec<PathBuf>,

    /// Plan deleting a resource, as KIND/NAME, instead.
    #[arg(long, value_name = "KIND/NAME", conflicts_with = "files")]
    pub delete: Option<String>,

    /// Levels of composition planned below each resource (1-8; 3 by default).
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..=8))]
    pub max_depth: Option<i32>,

    /// How long each plan waits for composer workers' answers (a kind whose
    /// compose a worker runs is planned by a connected worker; at most 60s).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub compose_timeout: std::time::Duration,
}

/// Plans every resource named; `fields` prints each changed field.
pub async fn run(client: &Client, args: &PlanArgs, fields: bool) -> Result<(), CliError> {
    let mut requests = Vec::new();
    if let Some(target) = &args.delete {
        let Some((kind, name)) = target.split_once('/') else {
            return Err(CliError::Invalid(format!("--delete {target:?}: expected KIND/NAME")));
        };
        requests.push((
            format!("delete {target}"),
            pb::plan_resource_request::Change::Delete(pb::ResourceRef {
                kind: kind.to_owned(),
                name: name.to_owned(),
            }),
        ));
    } else {
        for document in apply::read_files(&args.files)? {
            match document.object {
                Object::Resource(request) => {
                    requests.push((document.source, pb::plan_resource_request::Change::Apply(request)))
                }
                other => eprintln!(
                    "converge: {}: skipping {} (plan covers resources)",
                    document.source,
                    other.display_name()
                ),
            }
        }
        if requests.is_empty() {
            return Err(CliError::Invalid(
                "no Resource documents to plan among the files".to_owned(),
            ));
        }
    }
    let mut out = String::new();
    let mut changes = false;
    for (source, change) in requests {
        let answer = client
            .resources()
            .plan_resource(pb::PlanResourceRequest {
                change: Some(change),
                max_depth: args.max_depth.unwrap_or(0),
                compose_timeout: Some(prost_types::Duration {
                    seconds: i64::try_from(args.compose_timeout.as_secs()).unwrap_or(i64::MAX),
                    nanos: i32::try_from(args.compose_timeout.subsec_nanos()).unwrap_or(0),
                }),
            })
            .await
            .map_err(|status| {
                CliError::Status(tonic::Status::new(
                    status.code(),
                    format!("{source}: {}", status.message()),
                ))
            })?
            .into_inner();
        changes |= answer.changes;
        if let Some(plan) = &answer.plan {
            write_plan(&mut out, plan, 0, fields);
        }
    }
    let summary = if changes { "changes planned" } else { "no changes" };
    let _ = writeln!(out, "{summary}");
    print(&out)?;
    if changes { Err(CliError::ChangesPlanned) } else { Ok(()) }
}

fn marker(action: i32) -> &'static str {
    match pb::PlanAction::try_from(action) {
        Ok(pb::PlanAction::Create) => "+",
        Ok(pb::PlanAction::Update) => "~",
        Ok(pb::PlanAction::Delete) => "-",
        Ok(pb::PlanAction::Orphan) => "!",
        _ => "=",
    }
}

fn name(r: Option<&pb::ResourceRef>) -> String {
    r.map(|r| format!("{}/{}", r.kind, r.name)).unwrap_or_default()
}

fn value(v: Option<&prost_types::Value>) -> String {
    v.map(|v| converge_proto::json::value_to_json(v.clone()).to_string())
        .unwrap_or_else(|| "(absent)".to_owned())
}

/// One line per changed field.
fn write_fields(out: &mut String, pad: &str, changes: &[pb::FieldChange]) {
    for change in changes {
        let _ = writeln!(
            out,
            "{pad}    {} {}: {} -> {}",
            match (&change.before, &change.after) {
                (None, _) => "+",
                (_, None) => "-",
                _ => "~",
            },
            change.path,
            value(change.before.as_ref()),
            value(change.after.as_ref())
        );
    }
}

/// One resource's lines, then its children's, indented.
fn write_plan(out: &mut String, plan: &pb::ResourcePlan, depth: usize, fields: bool) {
    let pad = "  ".repeat(depth);
    let mut notes = Vec::new();
    if plan.reconciles {
        notes.push("reconciles".to_owned());
    }
    if let Some(config) = &plan.provider_config {
        notes.push(if config.is_empty() {
            "provider config removed".to_owned()
        } else {
            format!("provider config {config}")
        });
    }
    if pb::PlanAction::try_from(plan.action) == Ok(pb::PlanAction::Orphan) {
        notes.push("orphaned for its kind's grace, then deleted".to_owned());
    }
    let notes = if notes.is_empty() {
        String::new()
    } else {
        format!("  ({})", notes.join(", "))
    };
    let _ = writeln!(
        out,
        "{pad}{} {}{notes}",
        marker(plan.action),
        name(plan.resource.as_ref())
    );
    if fields {
        write_fields(out, &pad, &plan.spec_changes);
    } else if !plan.spec_changes.is_empty() {
        let _ = writeln!(out, "{pad}    {} spec field(s) change", plan.spec_changes.len());
    }
    for child in &plan.children {
        write_plan(out, child, depth + 1, fields);
    }
    for config in &plan.provider_configs {
        let data = if config.data_changes { " (data changes)" } else { "" };
        let _ = writeln!(
            out,
            "{pad}  {} providerconfig/{} for {}@{}{data}",
            marker(config.action),
            config.name,
            config.kind,
            config.kind_version
        );
        if fields {
            write_fields(out, &pad, &config.spec_changes);
        }
    }
    for (sign, edges) in [("+", &plan.edges_added), ("-", &plan.edges_removed)] {
        for edge in edges {
            let flows: Vec<String> = edge
                .value_flows
                .iter()
                .map(|f| format!("{} <- {}", f.dependent_field, f.source_field))
                .collect();
            let _ = writeln!(
                out,
                "{pad}  {sign} edge {} -> {}{}",
                name(edge.dependent.as_ref()),
                name(edge.dependency.as_ref()),
                if flows.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", flows.join(", "))
                }
            );
        }
    }
    if plan.unchanged_children > 0 {
        let _ = writeln!(out, "{pad}  = {} children unchanged", plan.unchanged_children);
    }
    if !plan.not_planned.is_empty() {
        let _ = writeln!(out, "{pad}  ? children not planned: {}", plan.not_planned);
    }
    if !plan.dependents.is_empty() && plan.reconciles {
        let listed: Vec<String> = plan.dependents.iter().map(|d| name(Some(d))).collect();
        let _ = writeln!(out, "{pad}  dependents that may reconcile: {}", listed.join(", "));
    }
    if !plan.teardown_order.is_empty() {
        let _ = writeln!(out, "{pad}  teardown order:");
        for (i, r) in plan.teardown_order.iter().enumerate() {
            let _ = writeln!(out, "{pad}    {}. {}", i + 1, name(Some(r)));
        }
    }
}
