//! The one-call commands on one resource: `reconcile`, `quarantine`,
//! `unquarantine`, `events`, `invoke`, `history` and `rollback`; and the
//! reactor deliveries' `deliveries list` and `redrive`.

use std::time::{Duration, Instant};

use clap::Args;
use converge_proto::json::{json_to_struct, struct_to_json};
use converge_sdk::Client;
use converge_sdk::proto::v1 as pb;

use super::admin::{self, Selection};
use super::envelope;
use super::error::CliError;
use super::output::{Format, Table, age, parse_duration, print, print_documents, yaml};

/// Examples of `invoke` in `--help`.
pub const INVOKE_EXAMPLES: &str = "\
Examples:
  converge invoke account demo-payments rotate_credentials --input '{\"reason\": \"quarterly\"}'
  converge invoke account demo-payments rotate_credentials --wait   # prints the output";

/// Examples of `reconcile` in `--help`.
pub const RECONCILE_EXAMPLES: &str = "\
Examples:
  converge reconcile noop hello                   # run the reconcile again now
  converge reconcile noop hello --reset-backoff   # and forget the failed attempts
  converge reconcile noop -l team=payments --reason 'provider fixed' --dry-run";

/// Examples of `quarantine` in `--help`.
pub const QUARANTINE_EXAMPLES: &str = "\
Examples:
  converge quarantine noop hello -m 'provider outage, INC-1234'
  converge quarantine noop -l region=eu-west-1 -m 'provider outage, INC-1234'
  converge describe noop hello                    # Quarantined: yes, with the note";

/// Examples of `unquarantine` in `--help`.
pub const UNQUARANTINE_EXAMPLES: &str = "\
Examples:
  converge unquarantine noop hello -m 'provider is back'";

/// Examples of `events` in `--help`.
pub const EVENTS_EXAMPLES: &str = "\
Examples:
  converge events bom demo
  converge events account demo-payments --warnings --limit 20
  converge events noop hello --category lifecycle -o yaml";

/// Examples of `history` in `--help`.
pub const HISTORY_EXAMPLES: &str = "\
Examples:
  converge history bom demo
  converge history bom demo -o yaml               # with the spec of each generation";

/// Examples of `rollback` in `--help`.
pub const ROLLBACK_EXAMPLES: &str = "\
Examples:
  converge rollback bom demo --to-generation 2 --dry-run
  converge rollback bom demo --to-generation 2";

/// Examples of `deliveries` in `--help`.
pub const DELIVERIES_EXAMPLES: &str = "\
Examples:
  converge deliveries list --failed               # every delivery that gave up
  converge deliveries list --binding on-sync -o wide
  converge deliveries list --resource app/web --failed -o yaml";

/// Examples of `redrive` in `--help`.
pub const REDRIVE_EXAMPLES: &str = "\
Examples:
  converge redrive --binding on-sync --reason 'sink fixed, INC-1234' --dry-run
  converge redrive --binding on-sync --reason 'sink fixed, INC-1234'
  converge redrive --id 0190f5a2-7c4e-7000-8000-000000000001 --reason 'retry after the fix'
  converge redrive app -l team=payments --reason 'webhook endpoint is back'";

/// A resource named by kind and name.
#[derive(Debug, Args)]
pub struct Target {
    /// Kind of the resource.
    pub kind: String,
    /// Name of the resource.
    pub name: String,
}

/// Arguments of `converge reconcile`: one resource, or many with a
/// selector (through the admin service).
#[derive(Debug, Args)]
pub struct ReconcileArgs {
    #[command(flatten)]
    selection: Selection,
    /// Also reset the retry backoff (failure attempts back to 0); one
    /// resource only (for many: `converge reset-backoff`).
    #[arg(long, requires = "name")]
    reset_backoff: bool,
}

/// Arguments of `converge quarantine` and `unquarantine`: one resource, or
/// many with a selector (through the admin service).
#[derive(Debug, Args)]
pub struct QuarantineArgs {
    #[command(flatten)]
    selection: Selection,
    /// A note recorded on the event (and the condition); the reason of a
    /// bulk call when --reason is not given.
    #[arg(short = 'm', long)]
    message: Option<String>,
}

/// The single resource of a selection that names one.
fn single(selection: &Selection) -> Option<Target> {
    selection.name.as_ref().map(|name| Target {
        kind: selection.kind.clone(),
        name: name.clone(),
    })
}

/// Arguments of `converge events`.
#[derive(Debug, Args)]
pub struct EventsArgs {
    #[command(flatten)]
    target: Target,
    /// Only runs of this category (lifecycle, reconcile, operation, ...).
    #[arg(long)]
    category: Option<String>,
    /// Only runs with this reason.
    #[arg(long)]
    reason: Option<String>,
    /// Only warnings.
    #[arg(long)]
    warnings: bool,
    /// At most this many runs (newest first).
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    output: Format,
}

/// Arguments of `converge invoke`.
#[derive(Debug, Args)]
pub struct InvokeArgs {
    #[command(flatten)]
    target: Target,
    /// The verb (declared by a reaction of the resource's kind).
    verb: String,
    /// The input, a JSON (or YAML) object.
    #[arg(long)]
    input: Option<String>,
    /// Wait for the operation to finish and print its output.
    #[arg(long)]
    wait: bool,
    /// How long --wait waits (e.g. 30s, 2m); exit code 5 when it runs out.
    #[arg(long, default_value = "2m", value_parser = parse_duration, requires = "wait")]
    timeout: Duration,
    /// Have the server check the request without recording it.
    #[arg(long)]
    dry_run: bool,
}

/// Arguments of `converge history`.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    target: Target,
    /// Output format (json and yaml print `SpecRevision` documents with
    /// their specs; wide adds the creation time).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    output: Format,
}

/// Arguments of `converge rollback`.
#[derive(Debug, Args)]
pub struct RollbackArgs {
    #[command(flatten)]
    target: Target,
    /// The generation whose spec to restore (see `converge history`).
    #[arg(long = "to-generation")]
    to_generation: i64,
    /// Have the server check the rollback without writing.
    #[arg(long)]
    dry_run: bool,
}

/// Arguments of `converge deliveries`.
#[derive(Debug, Args)]
pub struct DeliveriesArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: DeliveriesCommand,
}

/// The `deliveries` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum DeliveriesCommand {
    /// List recorded reactor deliveries, oldest first.
    List(DeliveriesListArgs),
}

/// Arguments of `converge deliveries list`.
#[derive(Debug, Args)]
pub struct DeliveriesListArgs {
    /// Only deliveries of this binding.
    #[arg(long)]
    binding: Option<String>,
    /// Only deliveries of this watched resource (KIND/NAME).
    #[arg(long)]
    resource: Option<String>,
    /// Only deliveries that gave up.
    #[arg(long)]
    failed: bool,
    /// At most this many.
    #[arg(long, default_value_t = 500)]
    limit: usize,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    output: Format,
}

/// Arguments of `converge redrive`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["kind", "binding", "id"])))]
pub struct RedriveArgs {
    /// Redrive the given-up deliveries of resources of this kind (with -l).
    kind: Option<String>,
    /// Label selector over the resources of KIND (empty: all of them).
    #[arg(short = 'l', long = "selector", requires = "kind", default_value = "")]
    selector: String,
    /// Redrive every given-up delivery of this binding.
    #[arg(long)]
    binding: Option<String>,
    /// Redrive one delivery by id.
    #[arg(long)]
    id: Option<String>,
    /// Why (recorded on the events and in the audit log).
    #[arg(long)]
    reason: String,
    /// Have the server count what would be redriven, changing nothing.
    #[arg(long)]
    dry_run: bool,
}

fn name(t: &Target) -> String {
    format!("Resource/{}/{}", t.kind, t.name)
}

/// Runs `converge reconcile`.
pub async fn reconcile(client: &Client, args: &ReconcileArgs) -> Result<(), CliError> {
    let Some(target) = single(&args.selection).filter(|_| args.selection.reason.is_none() && !args.selection.dry_run)
    else {
        return admin::act(client, pb::ResourceAction::Reconcile, &args.selection).await;
    };
    client
        .resources()
        .reconcile_resource(pb::ReconcileResourceRequest {
            kind: target.kind.clone(),
            name: target.name.clone(),
            reset_backoff: args.reset_backoff,
            request_id: String::new(),
        })
        .await?;
    print(&format!("{} reconcile requested\n", name(&target)))
}

/// A quarantine or release of many resources: the note doubles as the reason.
async fn quarantine_many(client: &Client, action: pb::ResourceAction, args: &QuarantineArgs) -> Result<(), CliError> {
    let mut selection = args.selection.clone();
    selection.reason = selection.reason.or_else(|| args.message.clone());
    admin::act(client, action, &selection).await
}

/// Runs `converge quarantine`.
pub async fn quarantine(client: &Client, args: &QuarantineArgs) -> Result<(), CliError> {
    let Some(target) = single(&args.selection).filter(|_| args.selection.reason.is_none() && !args.selection.dry_run)
    else {
        return quarantine_many(client, pb::ResourceAction::Quarantine, args).await;
    };
    client
        .resources()
        .quarantine_resource(pb::QuarantineResourceRequest {
            kind: target.kind.clone(),
            name: target.name.clone(),
            message: args.message.clone().unwrap_or_default(),
            request_id: String::new(),
        })
        .await?;
    print(&format!("{} quarantined\n", name(&target)))
}

/// Runs `converge unquarantine`.
pub async fn unquarantine(client: &Client, args: &QuarantineArgs) -> Result<(), CliError> {
    let Some(target) = single(&args.selection).filter(|_| args.selection.reason.is_none() && !args.selection.dry_run)
    else {
        return quarantine_many(client, pb::ResourceAction::Unquarantine, args).await;
    };
    client
        .resources()
        .unquarantine_resource(pb::UnquarantineResourceRequest {
            kind: target.kind.clone(),
            name: target.name.clone(),
            message: args.message.clone().unwrap_or_default(),
            request_id: String::new(),
        })
        .await?;
    print(&format!("{} released\n", name(&target)))
}

/// Reads up to `limit` event runs of a resource, newest first.
pub async fn list_events(
    client: &Client,
    target: &Target,
    category: Option<String>,
    reason: Option<String>,
    warnings: bool,
    limit: usize,
) -> Result<Vec<pb::ResourceEvent>, CliError> {
    let mut all = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .resources()
            .list_resource_events(pb::ListResourceEventsRequest {
                kind: target.kind.clone(),
                name: target.name.clone(),
                category: category.clone(),
                r#type: if warnings { pb::EventType::Warning as i32 } else { 0 },
                reason: reason.clone(),
                page_size: i32::try_from(limit.clamp(1, 1000)).unwrap_or(1000),
                page_token,
                ..Default::default()
            })
            .await?
            .into_inner();
        all.extend(page.events);
        if page.next_page_token.is_empty() || all.len() >= limit {
            break;
        }
        page_token = page.next_page_token;
    }
    all.truncate(limit);
    Ok(all)
}

/// The event table: newest first.
pub fn events_table(events: &[pb::ResourceEvent]) -> Table {
    let mut table = Table::new(&["LAST", "TYPE", "REASON", "COUNT", "CATEGORY", "MESSAGE"]);
    for e in events {
        let kind = if e.r#type == pb::EventType::Warning as i32 {
            "Warning"
        } else {
            "Normal"
        };
        table.row(vec![
            age(e.last_time.as_ref()),
            kind.to_owned(),
            e.reason.clone(),
            e.count.to_string(),
            e.category.clone(),
            converge_service::domain::names::first_chars(&e.message, 120).to_owned(),
        ]);
    }
    table
}

/// Runs `converge events`.
pub async fn events(client: &Client, args: &EventsArgs) -> Result<(), CliError> {
    let events = list_events(
        client,
        &args.target,
        args.category.clone(),
        args.reason.clone(),
        args.warnings,
        args.limit,
    )
    .await?;
    match args.output {
        Format::Json | Format::Yaml => {
            print_documents(args.output, events.iter().map(envelope::event_value).collect(), false)
        }
        Format::Name => print(
            &events
                .iter()
                .map(|e| format!("ResourceEvent/{}\n", e.uid))
                .collect::<String>(),
        ),
        Format::Table | Format::Wide => {
            let text = events_table(&events).render();
            if text.is_empty() {
                eprintln!("No events found.");
                return Ok(());
            }
            print(&text)
        }
    }
}

/// Runs `converge invoke`.
pub async fn invoke(client: &Client, args: &InvokeArgs) -> Result<(), CliError> {
    let input = match &args.input {
        Some(text) => {
            let value: serde_json::Value = serde_norway::from_str(text)
                .map_err(|e| CliError::Invalid(format!("--input is not JSON or YAML: {e}")))?;
            Some(json_to_struct(&value).ok_or_else(|| CliError::Invalid("--input must be an object".to_owned()))?)
        }
        None => None,
    };
    let operation = client
        .operations()
        .invoke_operation(pb::InvokeOperationRequest {
            kind: args.target.kind.clone(),
            name: args.target.name.clone(),
            verb: args.verb.clone(),
            input,
            request_id: String::new(),
            validate_only: args.dry_run,
        })
        .await?
        .into_inner()
        .operation
        .ok_or_else(|| CliError::Failed("the server returned no operation".to_owned()))?;
    if args.dry_run {
        // Nothing was recorded, so there is no operation id to print.
        return print(&format!(
            "Operation {} on {} accepted (dry run)\n",
            args.verb,
            name(&args.target)
        ));
    }
    if !args.wait {
        return print(&format!(
            "Operation/{} {}\n",
            operation.uid,
            envelope::operation_state_name(operation.state)
        ));
    }
    let deadline = Instant::now() + args.timeout;
    let mut current = operation;
    loop {
        match pb::OperationState::try_from(current.state) {
            Ok(pb::OperationState::Succeeded) => {
                let output = current.output.clone().map_or(serde_json::json!({}), struct_to_json);
                return print(&format!("Operation/{} succeeded\n{}", current.uid, yaml(&output)));
            }
            Ok(pb::OperationState::Failed) => {
                let message = current.error.as_ref().map_or("", |e| e.message.as_str());
                return Err(CliError::Failed(format!("Operation/{} failed: {message}", current.uid)));
            }
            _ => {}
        }
        if Instant::now() >= deadline {
            return Err(CliError::Timeout(format!(
                "Operation/{} is still {}",
                current.uid,
                envelope::operation_state_name(current.state)
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        current = client
            .operations()
            .get_operation(pb::GetOperationRequest {
                uid: current.uid.clone(),
            })
            .await?
            .into_inner()
            .operation
            .ok_or_else(|| CliError::Failed("the server returned no operation".to_owned()))?;
    }
}

/// Runs `converge history`.
pub async fn history(client: &Client, args: &HistoryArgs) -> Result<(), CliError> {
    let mut all = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .resources()
            .list_spec_revisions(pb::ListSpecRevisionsRequest {
                kind: args.target.kind.clone(),
                name: args.target.name.clone(),
                page_size: 1000,
                page_token,
            })
            .await?
            .into_inner();
        all.extend(page.revisions);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    let source = |r: &pb::SpecRevision| match pb::SpecRevisionSource::try_from(r.source) {
        Ok(pb::SpecRevisionSource::Rollback) => match r.restored_generation {
            Some(g) => format!("rollback to {g}"),
            None => "rollback".to_owned(),
        },
        Ok(pb::SpecRevisionSource::Conversion) => "conversion".to_owned(),
        _ => "apply".to_owned(),
    };
    let version = |r: &pb::SpecRevision| match r.kind_version {
        0 => "-".to_owned(),
        v => v.to_string(),
    };
    match args.output {
        Format::Json | Format::Yaml => print_documents(
            args.output,
            all.iter()
                .map(|r| envelope::spec_revision_value(&args.target.kind, &args.target.name, r))
                .collect(),
            false,
        ),
        Format::Name => print(
            &all.iter()
                .map(|r| {
                    format!(
                        "SpecRevision/{}/{}/{}\n",
                        args.target.kind, args.target.name, r.generation
                    )
                })
                .collect::<String>(),
        ),
        Format::Table | Format::Wide => {
            let wide = args.output == Format::Wide;
            let mut header = vec!["GENERATION", "VERSION", "SOURCE", "AGE"];
            if wide {
                header.push("CREATED");
            }
            let mut table = Table::new(&header);
            for r in &all {
                let mut row = vec![
                    r.generation.to_string(),
                    version(r),
                    source(r),
                    age(r.create_time.as_ref()),
                ];
                if wide {
                    row.push(
                        r.create_time
                            .as_ref()
                            .map_or_else(|| "-".to_owned(), envelope::timestamp),
                    );
                }
                table.row(row);
            }
            let text = table.render();
            if text.is_empty() {
                eprintln!("No revisions found.");
                return Ok(());
            }
            print(&text)
        }
    }
}

/// Runs `converge rollback`.
pub async fn rollback(client: &Client, args: &RollbackArgs) -> Result<(), CliError> {
    let resource = client
        .resources()
        .rollback_resource(pb::RollbackResourceRequest {
            kind: args.target.kind.clone(),
            name: args.target.name.clone(),
            target_generation: args.to_generation,
            validate_only: args.dry_run,
            ..Default::default()
        })
        .await?
        .into_inner()
        .resource
        .ok_or_else(|| CliError::Failed("the server returned no resource".to_owned()))?;
    let dry = if args.dry_run { " (dry run)" } else { "" };
    print(&format!(
        "{} rolled back to the spec of generation {} (now generation {}){dry}\n",
        name(&args.target),
        args.to_generation,
        resource.generation
    ))
}

/// The delivery table.
fn deliveries_table(deliveries: &[pb::ReactorDelivery], wide: bool) -> Table {
    let mut header = vec!["ID", "BINDING", "TRANSITION", "RESOURCE", "ATTEMPTS", "STATE", "AGE"];
    if wide {
        header.extend(["REACTOR", "DEDUP-TOKEN", "LAST-ERROR"]);
    }
    let mut table = Table::new(&header);
    for d in deliveries {
        let state = if d.fail_time.is_some() {
            "GaveUp"
        } else if d.leased {
            "Leased"
        } else {
            "Pending"
        };
        let resource = d
            .resource
            .as_ref()
            .map_or_else(String::new, |r| format!("{}/{}", r.kind, r.name));
        let mut row = vec![
            d.id.clone(),
            d.binding.clone(),
            envelope::transition_name(d.transition)
                .trim_start_matches("TRANSITION_")
                .to_lowercase(),
            resource,
            d.attempts.to_string(),
            state.to_owned(),
            age(d.create_time.as_ref()),
        ];
        if wide {
            row.extend([
                d.reactor.clone(),
                d.dedup_token.clone(),
                converge_service::domain::names::first_chars(&d.last_error, 80).to_owned(),
            ]);
        }
        table.row(row);
    }
    table
}

/// Runs `converge deliveries`.
pub async fn deliveries(client: &Client, args: &DeliveriesArgs) -> Result<(), CliError> {
    let DeliveriesCommand::List(args) = &args.command;
    let resource = match &args.resource {
        Some(text) => {
            let (kind, name) = text
                .split_once('/')
                .ok_or_else(|| CliError::Invalid(format!("--resource {text:?} is not KIND/NAME")))?;
            Some(pb::ResourceRef {
                kind: kind.to_owned(),
                name: name.to_owned(),
            })
        }
        None => None,
    };
    let mut all = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .reactor_bindings()
            .list_reactor_deliveries(pb::ListReactorDeliveriesRequest {
                binding: args.binding.clone(),
                resource: resource.clone(),
                only_given_up: args.failed,
                page_size: i32::try_from(args.limit.clamp(1, 1000)).unwrap_or(1000),
                page_token,
                ..Default::default()
            })
            .await?
            .into_inner();
        all.extend(page.reactor_deliveries);
        if page.next_page_token.is_empty() || all.len() >= args.limit {
            break;
        }
        page_token = page.next_page_token;
    }
    all.truncate(args.limit);
    match args.output {
        Format::Json | Format::Yaml => print_documents(
            args.output,
            all.iter().map(envelope::reactor_delivery_value).collect(),
            false,
        ),
        Format::Name => print(
            &all.iter()
                .map(|d| format!("ReactorDelivery/{}\n", d.id))
                .collect::<String>(),
        ),
        Format::Table | Format::Wide => {
            let text = deliveries_table(&all, args.output == Format::Wide).render();
            if text.is_empty() {
                eprintln!("No reactor deliveries found.");
                return Ok(());
            }
            print(&text)
        }
    }
}

/// Runs `converge redrive`: page after page until every matching given-up
/// delivery is covered (each call redrives at most the server's cap).
pub async fn redrive(client: &Client, args: &RedriveArgs) -> Result<(), CliError> {
    use pb::redrive_reactor_deliveries_request::Target as Which;
    let target = match (&args.kind, &args.binding, &args.id) {
        (Some(kind), _, _) => Which::Resources(pb::DeliveryResourceSelector {
            kind: kind.clone(),
            label_selector: args.selector.clone(),
        }),
        (None, Some(binding), _) => Which::Binding(binding.clone()),
        (None, None, Some(id)) => Which::DeliveryId(id.clone()),
        (None, None, None) => return Err(CliError::Invalid("name KIND, --binding or --id".to_owned())),
    };
    let mut total = 0;
    let mut first = Vec::new();
    let mut page_token = String::new();
    loop {
        let answer = client
            .reactor_bindings()
            .redrive_reactor_deliveries(pb::RedriveReactorDeliveriesRequest {
                target: Some(target.clone()),
                reason: args.reason.clone(),
                validate_only: args.dry_run,
                // A fresh id per page: a retried page is then not redone.
                request_id: uuid::Uuid::new_v4().to_string(),
                limit: 0,
                page_token,
            })
            .await?
            .into_inner();
        total += answer.count;
        if first.len() < 20 {
            first.extend(answer.first);
        }
        if answer.next_page_token.is_empty() {
            break;
        }
        page_token = answer.next_page_token;
    }
    first.truncate(20);
    let mut text = deliveries_table(&first, false).render();
    let verb = if args.dry_run {
        "would be redriven (dry run)"
    } else {
        "redriven"
    };
    text.push_str(&format!("{total} reactor deliveries {verb}\n"));
    print(&text)
}
