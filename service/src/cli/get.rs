//! `converge get`: resources of a kind (or of every kind), kinds, provider
//! configs, reactor bindings, a resource's operations, cluster members.
//! Pages are followed to the end, or to `--limit` objects.

use clap::Args;
use converge_sdk::Client;
use converge_sdk::proto::v1 as pb;
use serde_json::Value;

use super::envelope;
use super::error::CliError;
use super::output::{Format, Table, age, parse_phase, print, print_documents};

/// Examples in `--help`.
pub const EXAMPLES: &str = "\
Examples:
  converge get noop                      # resources of kind noop
  converge get noop hello -o yaml        # one resource, as an applyable document
  converge get resources -l team=payments,tier!=dev --phase failed
  converge get resources --roots -o name
  converge get kinds
  converge get providerconfigs           # or: pc
  converge get reactorbindings           # or: rb
  converge get operations account demo-payments
  converge get members -o wide
  converge get summary                   # counts by kind and phase, top failures
  converge get summary noop -l team=payments --fresh

The first word is a kind, or one of: resources, kinds, providerconfigs (pc),
reactorbindings (rb), operations (ops), members, summary. A kind named like one of
these is listed with `converge get resources KIND`.";

/// Most objects asked for per page.
const PAGE_SIZE: i32 = 500;

/// Arguments of `converge get`.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// What to list: a kind, or resources, kinds, providerconfigs,
    /// reactorbindings, operations, members.
    #[arg(value_name = "WHAT")]
    pub what: String,

    /// A name (or, after `resources` and `operations`, a kind then a name).
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,

    /// Label selector, e.g. `team=payments,tier in (web,api),!legacy`.
    #[arg(short = 'l', long = "selector")]
    pub selector: Option<String>,

    /// Only resources in this phase (ready, reconciling, degraded, failed,
    /// deleting, orphaned, quarantined); repeatable.
    #[arg(long, value_parser = parse_phase)]
    pub phase: Vec<pb::Phase>,

    /// Only resources at this kind version.
    #[arg(long)]
    pub kind_version: Option<i32>,

    /// Only roots (resources no composer owns).
    #[arg(long)]
    pub roots: bool,

    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,

    /// Stop after this many objects (all pages are read otherwise).
    #[arg(long)]
    pub limit: Option<usize>,

    /// `get summary`: count now instead of reading the engine's snapshot.
    #[arg(long)]
    pub fresh: bool,
}

/// What the first word asked for.
enum Target<'a> {
    Resources(Option<&'a str>, Option<&'a str>),
    Kinds(Option<&'a str>),
    ProviderConfigs(Option<&'a str>),
    ReactorBindings(Option<&'a str>),
    Operations(&'a str, &'a str),
    Members,
    Summary(Option<&'a str>),
}

fn target(args: &GetArgs) -> Result<Target<'_>, CliError> {
    let names: Vec<&str> = args.names.iter().map(String::as_str).collect();
    let too_many = |usage: &str| CliError::Invalid(format!("too many names: {usage}"));
    let one = |usage: &str| match names.as_slice() {
        [] => Ok(None),
        [n] => Ok(Some(*n)),
        _ => Err(too_many(usage)),
    };
    Ok(match args.what.as_str() {
        "resources" | "resource" => match names.as_slice() {
            [] => Target::Resources(None, None),
            [kind] => Target::Resources(Some(kind), None),
            [kind, name] => Target::Resources(Some(kind), Some(name)),
            _ => return Err(too_many("get resources [KIND [NAME]]")),
        },
        "kinds" | "kind" => Target::Kinds(one("get kinds [KIND]")?),
        "providerconfigs" | "providerconfig" | "pc" => Target::ProviderConfigs(one("get providerconfigs [NAME]")?),
        "reactorbindings" | "reactorbinding" | "rb" => Target::ReactorBindings(one("get reactorbindings [NAME]")?),
        "operations" | "operation" | "ops" => match names.as_slice() {
            [kind, name] => Target::Operations(kind, name),
            _ => {
                return Err(CliError::Invalid(
                    "operations are listed per resource: get operations KIND NAME".to_owned(),
                ));
            }
        },
        "members" | "member" => {
            if !names.is_empty() {
                return Err(too_many("get members"));
            }
            Target::Members
        }
        "summary" => Target::Summary(one("get summary [KIND]")?),
        kind => Target::Resources(Some(kind), one("get KIND [NAME]")?),
    })
}

/// Runs `converge get`.
pub async fn run(client: &Client, args: &GetArgs) -> Result<(), CliError> {
    match target(args)? {
        Target::Resources(kind, Some(name)) => {
            let kind = kind.unwrap_or_default();
            let resource = get_resource(client, kind, name).await?;
            show_resources(args, vec![resource], true)
        }
        Target::Resources(kind, None) => {
            let resources = list_resources(client, args, kind).await?;
            // An empty list of a kind nobody declared is a typo, not "none".
            if let (true, Some(kind)) = (resources.is_empty(), kind) {
                check_kind(client, kind).await?;
            }
            show_resources(args, resources, false)
        }
        Target::Kinds(kind) => {
            let mut all = Vec::new();
            let mut page_token = String::new();
            loop {
                let page = client
                    .kinds()
                    .list_kind_manifests(pb::ListKindManifestsRequest {
                        kind: kind.map(str::to_owned),
                        page_size: PAGE_SIZE,
                        page_token,
                    })
                    .await?
                    .into_inner();
                all.extend(page.manifests);
                if page.next_page_token.is_empty() || limited(args, all.len()) {
                    break;
                }
                page_token = page.next_page_token;
            }
            truncate(args, &mut all);
            show_kinds(args, all)
        }
        Target::ProviderConfigs(Some(name)) => {
            let config = client
                .provider_configs()
                .get_provider_config(pb::GetProviderConfigRequest { name: name.to_owned() })
                .await?
                .into_inner()
                .provider_config
                .ok_or_else(|| CliError::NotFound(format!("provider config {name:?}")))?;
            show_configs(args, vec![config], true)
        }
        Target::ProviderConfigs(None) => {
            let mut all = Vec::new();
            let mut page_token = String::new();
            loop {
                let page = client
                    .provider_configs()
                    .list_provider_configs(pb::ListProviderConfigsRequest {
                        page_size: PAGE_SIZE,
                        page_token,
                        ..Default::default()
                    })
                    .await?
                    .into_inner();
                all.extend(page.provider_configs);
                if page.next_page_token.is_empty() || limited(args, all.len()) {
                    break;
                }
                page_token = page.next_page_token;
            }
            truncate(args, &mut all);
            show_configs(args, all, false)
        }
        Target::ReactorBindings(Some(name)) => {
            let binding = client
                .reactor_bindings()
                .get_reactor_binding(pb::GetReactorBindingRequest { name: name.to_owned() })
                .await?
                .into_inner()
                .reactor_binding
                .ok_or_else(|| CliError::NotFound(format!("reactor binding {name:?}")))?;
            show_bindings(args, vec![binding], true)
        }
        Target::ReactorBindings(None) => {
            let mut all = Vec::new();
            let mut page_token = String::new();
            loop {
                let page = client
                    .reactor_bindings()
                    .list_reactor_bindings(pb::ListReactorBindingsRequest {
                        page_size: PAGE_SIZE,
                        page_token,
                        ..Default::default()
                    })
                    .await?
                    .into_inner();
                all.extend(page.reactor_bindings);
                if page.next_page_token.is_empty() || limited(args, all.len()) {
                    break;
                }
                page_token = page.next_page_token;
            }
            truncate(args, &mut all);
            show_bindings(args, all, false)
        }
        Target::Operations(kind, name) => {
            let mut all = Vec::new();
            let mut page_token = String::new();
            loop {
                let page = client
                    .operations()
                    .list_operations(pb::ListOperationsRequest {
                        kind: kind.to_owned(),
                        name: name.to_owned(),
                        page_size: PAGE_SIZE,
                        page_token,
                        ..Default::default()
                    })
                    .await?
                    .into_inner();
                all.extend(page.operations);
                if page.next_page_token.is_empty() || limited(args, all.len()) {
                    break;
                }
                page_token = page.next_page_token;
            }
            truncate(args, &mut all);
            show_operations(args, all)
        }
        Target::Members => {
            let mut members = client
                .cluster()
                .list_cluster_members(pb::ListClusterMembersRequest { ready_only: false })
                .await?
                .into_inner()
                .members;
            truncate(args, &mut members);
            show_members(args, members)
        }
        Target::Summary(kind) => {
            super::admin::summary(client, kind, args.selector.as_deref(), args.fresh, args.output).await
        }
    }
}

fn limited(args: &GetArgs, n: usize) -> bool {
    args.limit.is_some_and(|limit| n >= limit)
}

fn truncate<T>(args: &GetArgs, items: &mut Vec<T>) {
    if let Some(limit) = args.limit {
        items.truncate(limit);
    }
}

/// The kinds read to suggest a name for a mistyped one, at most.
const KINDS_COMPARED: usize = 5_000;

/// Succeeds when a manifest of `kind` exists; else a not-found error that
/// names the closest existing kind, if one is close.
pub async fn check_kind(client: &Client, kind: &str) -> Result<(), CliError> {
    let exists = !client
        .kinds()
        .list_kind_manifests(pb::ListKindManifestsRequest {
            kind: Some(kind.to_owned()),
            page_size: 1,
            page_token: String::new(),
        })
        .await?
        .into_inner()
        .manifests
        .is_empty();
    if exists {
        return Ok(());
    }
    let mut names: Vec<String> = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .kinds()
            .list_kind_manifests(pb::ListKindManifestsRequest {
                kind: None,
                page_size: PAGE_SIZE,
                page_token,
            })
            .await?
            .into_inner();
        names.extend(page.manifests.into_iter().map(|m| m.kind));
        if page.next_page_token.is_empty() || names.len() >= KINDS_COMPARED {
            break;
        }
        page_token = page.next_page_token;
    }
    let shown = converge_service::domain::names::first_chars(kind, 64);
    let mut message = format!("no kind named {shown:?} (see `converge get kinds`)");
    if let Some(close) = closest(kind, &names) {
        message = format!("no kind named {shown:?}; did you mean {close:?}?");
    }
    Err(CliError::NotFound(message))
}

/// The name in `names` closest to `typed`, when it is close enough to be
/// the one meant: a few edits away, or differing only in case.
fn closest<'a>(typed: &str, names: &'a [String]) -> Option<&'a str> {
    let typed_lower = typed.to_lowercase();
    names
        .iter()
        .map(|n| (strsim::damerau_levenshtein(&typed_lower, &n.to_lowercase()), n))
        .filter(|(distance, n)| *distance <= (n.chars().count() / 3).clamp(1, 3))
        .min_by_key(|(distance, n)| (*distance, n.as_str()))
        .map(|(_, n)| n.as_str())
}

/// One resource by kind and name.
pub async fn get_resource(client: &Client, kind: &str, name: &str) -> Result<pb::Resource, CliError> {
    client
        .resources()
        .get_resource(pb::GetResourceRequest {
            kind: kind.to_owned(),
            name: name.to_owned(),
        })
        .await?
        .into_inner()
        .resource
        .ok_or_else(|| CliError::NotFound(format!("{kind}/{name}")))
}

async fn list_resources(client: &Client, args: &GetArgs, kind: Option<&str>) -> Result<Vec<pb::Resource>, CliError> {
    let mut all = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .resources()
            .list_resources(pb::ListResourcesRequest {
                kind: kind.map(str::to_owned),
                kind_version: args.kind_version,
                phases: args.phase.iter().map(|p| *p as i32).collect(),
                label_selector: args.selector.clone().unwrap_or_default(),
                roots_only: args.roots,
                page_size: PAGE_SIZE,
                page_token,
                ..Default::default()
            })
            .await?
            .into_inner();
        all.extend(page.resources);
        if page.next_page_token.is_empty() || limited(args, all.len()) {
            break;
        }
        page_token = page.next_page_token;
    }
    truncate(args, &mut all);
    Ok(all)
}

/// `Ready`, `Reconciling`, ... as shown in tables.
pub fn phase(p: i32) -> &'static str {
    super::tree::phase_name(p)
}

fn labels_text(labels: &std::collections::BTreeMap<String, String>) -> String {
    let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if pairs.is_empty() {
        "<none>".to_owned()
    } else {
        pairs.join(",")
    }
}

fn reference(r: Option<&pb::ResourceRef>) -> String {
    r.map_or_else(|| "-".to_owned(), |r| format!("{}/{}", r.kind, r.name))
}

/// Prints resources in the chosen format; `single` for a named one.
fn show_resources(args: &GetArgs, resources: Vec<pb::Resource>, single: bool) -> Result<(), CliError> {
    match args.output {
        Format::Json | Format::Yaml => print_documents(
            args.output,
            resources.iter().map(envelope::resource_value).collect(),
            single,
        ),
        Format::Name => print(
            &resources
                .iter()
                .map(|r| format!("Resource/{}/{}\n", r.kind, r.name))
                .collect::<String>(),
        ),
        Format::Table | Format::Wide => {
            let wide = args.output == Format::Wide;
            let mut header = vec!["KIND", "NAME", "PHASE", "SYNCED", "AGE"];
            if wide {
                header.extend(["VERSION", "OWNER", "PROVIDER-CONFIG", "LABELS"]);
            }
            let mut table = Table::new(&header);
            for r in &resources {
                let mut row = vec![
                    r.kind.clone(),
                    r.name.clone(),
                    phase(r.phase).to_owned(),
                    format!("{}/{}", r.observed_generation, r.generation),
                    age(r.create_time.as_ref()),
                ];
                if wide {
                    row.extend([
                        r.kind_version.to_string(),
                        reference(r.owner.as_ref()),
                        if r.provider_config.is_empty() {
                            "-".to_owned()
                        } else {
                            r.provider_config.clone()
                        },
                        labels_text(&r.labels),
                    ]);
                }
                table.row(row);
            }
            empty_or(table, "No resources found.")
        }
    }
}

/// Prints the table, or `none` on stderr when it has no rows (as kubectl
/// does, so a script reading stdout sees nothing).
fn empty_or(table: Table, none: &str) -> Result<(), CliError> {
    let text = table.render();
    if text.is_empty() {
        eprintln!("{none}");
        return Ok(());
    }
    print(&text)
}

fn show_documents<T>(
    args: &GetArgs,
    items: &[T],
    single: bool,
    value: fn(&T) -> Value,
    name: fn(&T) -> String,
    table: impl FnOnce(bool) -> Table,
    none: &str,
) -> Result<(), CliError> {
    match args.output {
        Format::Json | Format::Yaml => print_documents(args.output, items.iter().map(value).collect(), single),
        Format::Name => print(&items.iter().map(|i| format!("{}\n", name(i))).collect::<String>()),
        Format::Table | Format::Wide => empty_or(table(args.output == Format::Wide), none),
    }
}

fn show_kinds(args: &GetArgs, kinds: Vec<pb::KindManifest>) -> Result<(), CliError> {
    show_documents(
        args,
        &kinds,
        false,
        envelope::kind_manifest_value,
        |k| envelope::kind_display(&k.kind, k.kind_version),
        |wide| {
            let mut header = vec!["KIND", "VERSION", "REACTIONS", "AGE"];
            if wide {
                header.extend(["MAX-INFLIGHT", "FINALIZER", "DESCRIPTION"]);
            }
            let mut table = Table::new(&header);
            for k in &kinds {
                let reactions: Vec<&str> = k.reactions.iter().map(|r| r.name.as_str()).collect();
                let mut row = vec![
                    k.kind.clone(),
                    k.kind_version.to_string(),
                    reactions.join(","),
                    age(k.create_time.as_ref()),
                ];
                if wide {
                    let inflight = k.policy.as_ref().map_or(0, |p| p.max_inflight);
                    row.extend([
                        if inflight == 0 {
                            "-".to_owned()
                        } else {
                            inflight.to_string()
                        },
                        if k.finalizer_name.is_empty() {
                            "-".to_owned()
                        } else {
                            k.finalizer_name.clone()
                        },
                        converge_service::domain::names::first_chars(&k.description, 60).to_owned(),
                    ]);
                }
                table.row(row);
            }
            table
        },
        "No kinds found.",
    )
}

fn show_configs(args: &GetArgs, configs: Vec<pb::ProviderConfig>, single: bool) -> Result<(), CliError> {
    show_documents(
        args,
        &configs,
        single,
        envelope::provider_config_value,
        |c| format!("ProviderConfig/{}", c.name),
        |wide| {
            let mut header = vec!["NAME", "KIND", "VERSION", "DEFAULT", "AGE"];
            if wide {
                header.extend(["OWNER", "DATA-BYTES"]);
            }
            let mut table = Table::new(&header);
            for c in &configs {
                let mut row = vec![
                    c.name.clone(),
                    c.kind.clone(),
                    c.kind_version.to_string(),
                    c.is_default.to_string(),
                    age(c.create_time.as_ref()),
                ];
                if wide {
                    row.extend([reference(c.owner.as_ref()), c.data.len().to_string()]);
                }
                table.row(row);
            }
            table
        },
        "No provider configs found.",
    )
}

fn show_bindings(args: &GetArgs, bindings: Vec<pb::ReactorBinding>, single: bool) -> Result<(), CliError> {
    show_documents(
        args,
        &bindings,
        single,
        envelope::reactor_binding_value,
        |b| format!("ReactorBinding/{}", b.name),
        |wide| {
            let mut header = vec!["NAME", "WATCH", "TRANSITION", "REACTOR", "ENABLED", "PENDING", "FAILED"];
            if wide {
                header.extend(["LABELS", "LAST-FAILURE"]);
            }
            let mut table = Table::new(&header);
            for b in &bindings {
                let mut row = vec![
                    b.name.clone(),
                    b.watch_kind.clone(),
                    envelope::transition_name(b.transition)
                        .trim_start_matches("TRANSITION_")
                        .to_lowercase(),
                    b.reactor.clone(),
                    b.enabled.unwrap_or(true).to_string(),
                    b.pending_deliveries.to_string(),
                    b.failed_deliveries.to_string(),
                ];
                if wide {
                    row.extend([
                        labels_text(&b.label_match),
                        converge_service::domain::names::first_chars(&b.last_failure, 60).to_owned(),
                    ]);
                }
                table.row(row);
            }
            table
        },
        "No reactor bindings found.",
    )
}

fn show_operations(args: &GetArgs, operations: Vec<pb::Operation>) -> Result<(), CliError> {
    show_documents(
        args,
        &operations,
        false,
        envelope::operation_value,
        |o| format!("Operation/{}", o.uid),
        |wide| {
            let mut header = vec!["UID", "VERB", "STATE", "ATTEMPTS", "AGE"];
            if wide {
                header.extend(["REQUESTED-BY", "PENDING", "ERROR"]);
            }
            let mut table = Table::new(&header);
            for o in &operations {
                let mut row = vec![
                    o.uid.clone(),
                    o.verb.clone(),
                    envelope::operation_state_name(o.state)
                        .trim_start_matches("OPERATION_STATE_")
                        .to_lowercase(),
                    o.attempts.to_string(),
                    age(o.create_time.as_ref()),
                ];
                if wide {
                    row.extend([
                        o.requested_by.clone(),
                        o.pending_reason.clone(),
                        o.error.as_ref().map_or_else(String::new, |e| e.message.clone()),
                    ]);
                }
                table.row(row);
            }
            table
        },
        "No operations found.",
    )
}

fn show_members(args: &GetArgs, members: Vec<pb::ClusterMember>) -> Result<(), CliError> {
    show_documents(
        args,
        &members,
        false,
        envelope::member_value,
        |m| format!("ClusterMember/{}", m.member_id),
        |wide| {
            let mut header = vec!["MEMBER", "ROLE", "READY", "SHARDS", "WORKERS", "IN-FLIGHT", "AGE"];
            if wide {
                header.extend(["HOST", "PID", "VERSION"]);
            }
            let mut table = Table::new(&header);
            for m in &members {
                let role = pb::MemberRole::try_from(m.role).map_or("MEMBER_ROLE_UNSPECIFIED", |r| r.as_str_name());
                let mut row = vec![
                    m.member_id.clone(),
                    role.trim_start_matches("MEMBER_ROLE_").to_lowercase(),
                    m.ready.to_string(),
                    m.shard_range
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), |r| format!("{}-{}", r.lo, r.hi)),
                    m.connected_workers.to_string(),
                    m.in_flight.to_string(),
                    age(m.start_time.as_ref()),
                ];
                if wide {
                    row.extend([m.hostname.clone(), m.pid.to_string(), m.version.clone()]);
                }
                table.row(row);
            }
            table
        },
        "No members found.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_close_kind_is_suggested() {
        let names: Vec<String> = ["noop", "account", "vpc", "route"].map(String::from).to_vec();
        assert_eq!(closest("nop", &names), Some("noop"));
        assert_eq!(closest("accuont", &names), Some("account"));
        assert_eq!(closest("Account", &names), Some("account"));
        assert_eq!(closest("vcp", &names), Some("vpc"));
        assert_eq!(closest("nosuchkind", &names), None);
        assert_eq!(closest("x", &names), None);
    }

    #[test]
    fn phases_parse_in_any_case() {
        assert_eq!(parse_phase("ready"), Ok(pb::Phase::Ready));
        assert_eq!(parse_phase("Failed"), Ok(pb::Phase::Failed));
        assert_eq!(parse_phase("PHASE_DELETING"), Ok(pb::Phase::Deleting));
        assert!(parse_phase("unspecified").is_err());
        assert!(parse_phase("done").is_err());
    }
}
