//! The operator's commands: `get summary`, and the actions on many
//! resources at once (`reconcile`, `quarantine`, `unquarantine` with a
//! selector, and `clear-failure`, `reset-backoff`, `release-lease`,
//! `force-finalize`), over `converge.v1.AdminService`.

use clap::Args;
use converge_sdk::Client;
use converge_sdk::proto::v1 as pb;

use super::envelope;
use super::error::CliError;
use super::output::{Format, Table, age, parse_phase, print, print_documents};

/// Examples of the admin actions in `--help`.
pub const ACTION_EXAMPLES: &str = "\
Examples:
  converge clear-failure noop hello --reason 'quota raised, INC-1234'
  converge reset-backoff noop -l team=payments --reason 'API is back' --dry-run
  converge release-lease noop hello --reason 'worker wedged'
  converge force-finalize noop hello --reason 'account closed; nothing to clean'";

/// Resources one call acts on (the server's maximum).
const PAGE_SIZE: i32 = 1000;

/// Which resources an action is for, and why.
#[derive(Debug, Clone, Args)]
pub struct Selection {
    /// Kind of the resources.
    pub kind: String,
    /// One resource by name (or use -l/--phase for many).
    pub name: Option<String>,
    /// Label selector: every matching resource of the kind.
    #[arg(short = 'l', long = "selector", conflicts_with = "name")]
    pub selector: Option<String>,
    /// Only resources in this phase; repeatable.
    #[arg(long, value_parser = parse_phase, conflicts_with = "name")]
    pub phase: Vec<pb::Phase>,
    /// Why (recorded with your identity on each resource's event and in the
    /// audit log).
    #[arg(long)]
    pub reason: Option<String>,
    /// Count and name what would be acted on; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

impl Selection {
    /// Whether this selects many resources (a selector or phases, or
    /// neither a name).
    pub fn is_bulk(&self) -> bool {
        self.name.is_none()
    }
}

/// Arguments of an admin action command.
#[derive(Debug, Args)]
pub struct ActionArgs {
    #[command(flatten)]
    pub selection: Selection,
}

/// Runs `action` on the selection, a page at a time, reporting progress on
/// stderr and a summary line on stdout.
pub async fn act(client: &Client, action: pb::ResourceAction, selection: &Selection) -> Result<(), CliError> {
    let verb = action
        .as_str_name()
        .trim_start_matches("RESOURCE_ACTION_")
        .to_lowercase();
    let reason = selection
        .reason
        .clone()
        .filter(|r| !r.trim().is_empty())
        .ok_or_else(|| {
            CliError::Invalid(format!(
                "{verb} needs --reason: say why (it is recorded with your identity)"
            ))
        })?;
    let mut request = pb::ActOnResourcesRequest {
        action: action.into(),
        kind: selection.kind.clone(),
        name: selection.name.clone().unwrap_or_default(),
        label_selector: selection.selector.clone().unwrap_or_default(),
        phases: selection.phase.iter().map(|p| (*p).into()).collect(),
        reason,
        validate_only: selection.dry_run,
        page_size: PAGE_SIZE,
        page_token: String::new(),
        request_id: uuid::Uuid::new_v4().to_string(),
    };
    let mut acted = 0i64;
    let mut total = 0i64;
    loop {
        let page = client.admin().act_on_resources(request.clone()).await?.into_inner();
        if request.page_token.is_empty() {
            total = page.matched_count;
        }
        if selection.dry_run {
            let mut text = format!("{total} {} resource(s) would be acted on ({verb})\n", selection.kind);
            for name in &page.names {
                text.push_str(&format!("Resource/{}/{name}\n", selection.kind));
            }
            if total > i64::try_from(page.names.len()).unwrap_or(i64::MAX) {
                text.push_str("...\n");
            }
            return print(&text);
        }
        acted += page.acted_count;
        if selection.is_bulk() && !page.next_page_token.is_empty() {
            eprintln!("{verb}: {acted}/{total}");
        }
        if page.next_page_token.is_empty() {
            break;
        }
        request.page_token = page.next_page_token;
        request.request_id = uuid::Uuid::new_v4().to_string();
    }
    match &selection.name {
        Some(name) => print(&format!("Resource/{}/{name} {verb}: done\n", selection.kind)),
        None => print(&format!("{verb}: {acted} {} resource(s)\n", selection.kind)),
    }
}

/// Prints the fleet summary (`converge get summary [KIND]`).
pub async fn summary(
    client: &Client,
    kind: Option<&str>,
    selector: Option<&str>,
    fresh: bool,
    format: Format,
) -> Result<(), CliError> {
    let summary = client
        .admin()
        .get_fleet_summary(pb::GetFleetSummaryRequest {
            kind: kind.map(str::to_owned),
            label_selector: selector.unwrap_or_default().to_owned(),
            fresh,
            top_failures: 0,
        })
        .await?
        .into_inner();
    if matches!(format, Format::Json | Format::Yaml) {
        return print_documents(format, vec![envelope::fleet_summary_value(&summary)], true);
    }
    let phase = |p: i32| {
        envelope::phase_proto_name(p)
            .trim_start_matches("PHASE_")
            .to_lowercase()
    };
    let mut text = format!(
        "{} resources, counted {} ago\n\n",
        summary.total,
        age(summary.as_of.as_ref())
    );
    let mut counts = Table::new(&["KIND", "VERSION", "PHASE", "COUNT"]);
    for c in &summary.phase_counts {
        counts.row(vec![
            c.kind.clone(),
            c.kind_version.to_string(),
            phase(c.phase),
            c.count.to_string(),
        ]);
    }
    text.push_str(&counts.render());
    if !summary.top_failures.is_empty() {
        let mut failures = Table::new(&["KIND", "STAGE", "REASON", "COUNT", "EXAMPLE", "MESSAGE"]);
        for f in &summary.top_failures {
            failures.row(vec![
                f.kind.clone(),
                f.stage.clone(),
                f.reason.clone(),
                f.count.to_string(),
                f.example.as_ref().map(|e| e.name.clone()).unwrap_or_default(),
                f.example_message.chars().take(60).collect(),
            ]);
        }
        text.push_str("\nTop failures:\n");
        text.push_str(&failures.render());
    }
    if !summary.oldest.is_empty() {
        let mut oldest = Table::new(&["PHASE", "RESOURCE", "WAITING"]);
        for o in &summary.oldest {
            oldest.row(vec![
                phase(o.phase),
                o.resource
                    .as_ref()
                    .map(|r| format!("{}/{}", r.kind, r.name))
                    .unwrap_or_default(),
                age(o.since.as_ref()),
            ]);
        }
        text.push_str("\nLongest waits:\n");
        text.push_str(&oldest.render());
    }
    if !summary.unserved.is_empty() {
        let mut unserved = Table::new(&["KIND", "VERSION", "TASKS", "OLDEST"]);
        for u in &summary.unserved {
            unserved.row(vec![
                u.kind.clone(),
                u.kind_version.to_string(),
                u.tasks.to_string(),
                age(u.oldest_since.as_ref()),
            ]);
        }
        text.push_str("\nNo worker connected for:\n");
        text.push_str(&unserved.render());
    }
    print(&text)
}
