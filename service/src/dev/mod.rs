//! `converge dev`: the control plane plus the composition demo in one
//! process.
//!
//! The server is started exactly as `serve` starts it (by the caller); this
//! module then applies the example kinds, runs their providers in-process
//! through the SDK's worker runtime (over loopback gRPC to the server's own
//! address, like any external worker), applies a demo BOM and follows its
//! tree until it settles: a progress line while it reconciles, then a
//! summary. It keeps serving (and following the BOM) until SIGINT/SIGTERM,
//! or exits after the summary with `--exit-when-ready`.

use std::io::{IsTerminal as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use converge_examples::{Latency, bom};
use converge_sdk::Client;
use converge_sdk::proto::v1 as pb;
use converge_sdk::worker::convert::json_to_struct;
use converge_sdk::worker::{Worker, WorkerError};
use converge_service::config::DevArgs;
use converge_service::server::{RunningServer, ShutdownSignal};
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::cli::tree::{self as view, Snapshot};

/// Region of the demo BOM.
const REGION: &str = "us-east-1";
/// The default provider config of the demo's accounts (the simulated cloud's
/// organisation and tags).
const DEFAULT_ACCOUNT_CONFIG: &str = "sim-cloud";
/// How often the tree is read.
const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// Without a terminal, an unchanged progress line is repeated this often.
const PLAIN_REPEAT: Duration = Duration::from_secs(5);
/// How long the demo worker gets to finish its tasks on shutdown.
const WORKER_DRAIN: Duration = Duration::from_secs(5);
/// Most demo tasks running at once.
const WORKER_PARALLEL: usize = 64;
/// Width of the progress line when the terminal's is unknown.
const DEFAULT_COLUMNS: usize = 80;

/// Checks the flags before anything starts: the BOM they describe must
/// compose (the composer's messages are clearer than a schema violation).
pub fn check(args: &DevArgs) -> anyhow::Result<()> {
    let spec: bom::compose::BomSpec =
        serde_json::from_value(bom_spec(args)).context("building the BOM spec from the flags")?;
    bom::compose::compose(&args.bom_name, &spec).context("invalid --teams or --bom-name")?;
    Ok(())
}

/// Runs the demo against the started server, then shuts everything down:
/// the worker first (its stream would hold the server's drain open), then
/// the server.
pub async fn run(args: &DevArgs, running: RunningServer, mut signals: ShutdownSignal) -> anyhow::Result<()> {
    let addr = dial_addr(running.local_addr().context("the demo needs the TCP listener")?);
    let mut worker = None;
    let outcome = demo(args, addr, &mut worker, &mut signals).await;
    if let Some(worker) = worker {
        worker.stop().await;
    }
    let stopped = running.shutdown().await.context("shutting down");
    outcome.and(stopped)
}

/// The address a client on this host uses to reach a server bound to
/// `bound` (a wildcard address is reached over loopback).
fn dial_addr(bound: SocketAddr) -> SocketAddr {
    match bound.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::new(Ipv4Addr::LOCALHOST.into(), bound.port()),
        IpAddr::V6(ip) if ip.is_unspecified() => SocketAddr::new(Ipv6Addr::LOCALHOST.into(), bound.port()),
        _ => bound,
    }
}

async fn demo(
    args: &DevArgs,
    addr: SocketAddr,
    worker: &mut Option<DemoWorker>,
    signals: &mut ShutdownSignal,
) -> anyhow::Result<()> {
    let endpoint = format!("http://{addr}");
    let client = Client::connect(endpoint.clone())
        .await
        .context("connecting to the server")?;
    apply_kinds(&client).await?;
    apply_configs(&client, args).await?;
    *worker = DemoWorker::start(&endpoint, Latency::from_millis(args.delay_ms), &args.external_kinds)?;
    let bom = pb::ResourceRef {
        kind: bom_kind(args).to_owned(),
        name: args.bom_name.clone(),
    };
    let created = apply_bom(&client, args).await?;
    println!(
        "converge dev: serving on {addr}; {} {}/{} with teams {} (provider latency ~{} ms)",
        if created { "created" } else { "applied" },
        bom_kind(args),
        args.bom_name,
        args.teams.join(", "),
        args.delay_ms
    );
    if !args.external_kinds.is_empty() {
        println!(
            "converge dev: kinds {} are left to workers in other processes",
            args.external_kinds.join(", ")
        );
    }
    follow(&client, args, &bom, addr, signals).await
}

/// Applies the manifests of the demo kinds (a no-op when they are current).
async fn apply_kinds(client: &Client) -> anyhow::Result<()> {
    let manifests = converge_examples::manifests().context("reading the example manifests")?;
    for manifest in manifests {
        let name = format!("{}:{}", manifest.kind, manifest.kind_version);
        client
            .kinds()
            .apply_kind_manifest(pb::ApplyKindManifestRequest {
                manifest: Some(manifest),
                ..Default::default()
            })
            .await
            .with_context(|| format!("applying the kind manifest {name}"))?;
    }
    Ok(())
}

/// The simulated cloud's default for every account, and the override the
/// demo BOM's accounts carry; each applied only when missing, so a change
/// made while the demo ran survives a restart.
async fn apply_configs(client: &Client, args: &DevArgs) -> anyhow::Result<()> {
    let configs = [
        (
            DEFAULT_ACCOUNT_CONFIG.to_owned(),
            true,
            json!({"org": "o-demo", "tags": {"managed-by": "converge"}}),
        ),
        (account_config(args), false, json!({"tags": {"cost-center": "cc-100"}})),
    ];
    for (name, is_default, spec) in configs {
        let existing = client
            .provider_configs()
            .get_provider_config(pb::GetProviderConfigRequest { name: name.clone() })
            .await;
        match existing {
            Ok(_) => continue,
            Err(status) if status.code() == tonic::Code::NotFound => {}
            Err(status) => return Err(status).with_context(|| format!("reading the provider config {name}")),
        }
        let spec = json_to_struct(spec, "spec").context("building a provider config spec")?;
        client
            .provider_configs()
            .apply_provider_config(pb::ApplyProviderConfigRequest {
                provider_config: Some(pb::ProviderConfig {
                    name: name.clone(),
                    kind: bom::ACCOUNT.to_owned(),
                    kind_version: bom::KIND_VERSION,
                    is_default,
                    spec: Some(spec),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .with_context(|| format!("applying the provider config {name}"))?;
    }
    Ok(())
}

/// The override attached to the demo BOM's accounts.
fn account_config(args: &DevArgs) -> String {
    format!("{}-accounts", args.bom_name)
}

/// The demo BOM's spec.
fn bom_spec(args: &DevArgs) -> serde_json::Value {
    let mut spec = json!({"teams": args.teams, "region": REGION, "accountConfig": account_config(args)});
    if !args.fail_teams.is_empty() {
        spec["failTeams"] = json!(args.fail_teams);
    }
    spec
}

/// The kind the demo's BOM is applied as: `bom-cel` with `--cel`.
fn bom_kind(args: &DevArgs) -> &'static str {
    if args.cel { bom::BOM_CEL } else { bom::BOM }
}

/// Applies the demo BOM; true when it was created.
async fn apply_bom(client: &Client, args: &DevArgs) -> anyhow::Result<bool> {
    let spec = json_to_struct(bom_spec(args), "spec").context("building the BOM spec")?;
    let response = client
        .resources()
        .apply_resource(pb::ApplyResourceRequest {
            kind: bom_kind(args).to_owned(),
            kind_version: bom::KIND_VERSION,
            name: args.bom_name.clone(),
            spec: Some(spec),
            ..Default::default()
        })
        .await
        .with_context(|| format!("applying {}/{}", bom_kind(args), args.bom_name))?;
    Ok(response.into_inner().created)
}

/// The demo providers, served in-process by the SDK's worker runtime.
struct DemoWorker {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), WorkerError>>,
}

impl DemoWorker {
    /// Starts the providers of the demo kinds not in `external`; `None` when
    /// every kind is served elsewhere.
    fn start(endpoint: &str, latency: Latency, external: &[String]) -> anyhow::Result<Option<Self>> {
        if bom::KINDS.iter().all(|kind| external.iter().any(|e| e == kind)) {
            return Ok(None);
        }
        let builder = Worker::builder()
            .endpoint(endpoint)
            .max_parallel(WORKER_PARALLEL)
            .drain_timeout(WORKER_DRAIN)
            .agent("converge dev");
        let worker = bom::register_except(builder, latency, external)
            .build()
            .context("building the demo worker")?;
        let (stop, stop_rx) = oneshot::channel::<()>();
        let task = tokio::spawn(worker.run(async {
            let _ = stop_rx.await;
        }));
        Ok(Some(Self { stop, task }))
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        match self.task.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "the demo worker did not drain cleanly"),
            Err(error) => tracing::warn!(%error, "the demo worker task failed"),
        }
    }
}

/// Follows the BOM: progress while it reconciles, a summary each time it
/// settles in a new state. Returns on a signal, or (with
/// `--exit-when-ready`) after the first summary or at the timeout.
async fn follow(
    client: &Client,
    args: &DevArgs,
    bom: &pb::ResourceRef,
    addr: SocketAddr,
    signals: &mut ShutdownSignal,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let deadline = args.exit_when_ready.then(|| started + args.timeout());
    let mut progress = Progress::new();
    let mut since = Some(started);
    let mut summarised: Option<(i64, i32)> = None;
    let mut first = true;
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = signals.recv() => {
                progress.clear();
                eprintln!("converge dev: shutdown requested; stopping");
                return Ok(());
            }
            _ = tick.tick() => {}
        }
        // The demo's kinds are shown in provisioning order.
        let read = view::snapshot(client, bom).await;
        let snap = match read.map(|s| {
            s.map(|s| Snapshot {
                kind_order: &bom::KINDS,
                ..s
            })
        }) {
            Ok(Some(snap)) => Some(snap),
            Ok(None) => {
                progress.show(
                    &format!("{}/{} does not exist (deleted?)", bom.kind, bom.name),
                    "missing",
                );
                None
            }
            Err(status) => {
                tracing::warn!(%status, "cannot read the BOM's tree");
                None
            }
        };
        if let Some(snap) = snap {
            if snap.settled() {
                if summarised != Some(snap.settled_key()) {
                    // Settled on the very first read: nothing changed since an earlier run.
                    let elapsed = since.filter(|_| !first).map(|t| t.elapsed());
                    progress.clear();
                    print!("{}", snap.summary(elapsed));
                    if args.exit_when_ready {
                        if snap.ready() {
                            return Ok(());
                        }
                        bail!(
                            "{} settled {}: {}",
                            snap.root_name(),
                            view::phase_name(snap.root.phase),
                            snap.root_message()
                        );
                    }
                    if summarised.is_none() {
                        print!("{}", hints(args, addr));
                    }
                    println!(
                        "Following {}: apply a new spec and it reconciles here again.",
                        snap.root_name()
                    );
                    let _ = std::io::stdout().flush();
                    summarised = Some(snap.settled_key());
                    since = None;
                }
            } else {
                let start = *since.get_or_insert_with(Instant::now);
                let line = snap.progress_line(start.elapsed());
                let key = snap.progress_line(Duration::ZERO);
                progress.show(&line, &key);
            }
        }
        first = false;
        if let Some(deadline) = deadline
            && Instant::now() >= deadline
        {
            progress.clear();
            bail!(
                "{}/{} did not settle within {}s (use --timeout to wait longer)",
                bom.kind,
                bom.name,
                args.timeout().as_secs()
            );
        }
    }
}

/// How to talk to the running demo: the client commands of this binary.
fn hints(args: &DevArgs, addr: SocketAddr) -> String {
    let server = if addr.to_string() == "127.0.0.1:50051" {
        String::new()
    } else {
        format!(" --server http://{addr}")
    };
    let bom_name = &args.bom_name;
    let mut teams = args.teams.clone();
    let extra = (1..)
        .map(|i| if i == 1 { "risk".to_owned() } else { format!("risk{i}") })
        .find(|t| !teams.contains(t))
        .unwrap_or_default();
    teams.push(extra);
    let mut spec = bom_spec(args);
    spec["teams"] = json!(teams);
    // One-line JSON documents are YAML documents: `apply -f -` reads them.
    let apply = json!({
        "apiVersion": "converge.dev/v1", "type": "Resource",
        "kind": bom_kind(args), "kindVersion": bom::KIND_VERSION, "name": bom_name, "spec": spec
    });
    let retag = json!({
        "apiVersion": "converge.dev/v1", "type": "ProviderConfig",
        "name": account_config(args), "kind": bom::ACCOUNT, "kindVersion": bom::KIND_VERSION,
        "spec": {"tags": {"cost-center": "cc-200"}}
    });
    let first_team = args
        .teams
        .first()
        .cloned()
        .unwrap_or_else(|| bom::NETWORK_TEAM.to_owned());
    let account = format!("{bom_name}-{first_team}");
    let (kind, verb) = (bom_kind(args), bom::ROTATE_CREDENTIALS);
    format!(
        "\nconverge keeps serving on {addr} (Ctrl-C stops it). Talk to it:\n\
         \x20 converge get resources{server} -o wide\n\
         \x20 converge describe{server} {kind} {bom_name}\n\
         \x20 converge graph{server} {kind} {bom_name}\n\
         \x20 converge watch{server} {kind}\n\
         \x20 echo '{apply}' | converge apply{server} -f -   # add a team\n\
         \x20 echo '{retag}' | converge apply{server} -f -   # retag the accounts live\n\
         \x20 converge invoke{server} {account_kind} {account} {verb} --input '{{\"reason\": \"demo\"}}' --wait   # rotate a key\n\n",
        account_kind = bom::ACCOUNT,
    )
}

/// The progress display: one line redrawn in place on a terminal, plain
/// lines (on change, or every few seconds) otherwise.
struct Progress {
    tty: bool,
    columns: usize,
    drawn: bool,
    last_key: String,
    last_print: Option<Instant>,
}

impl Progress {
    fn new() -> Self {
        let columns = std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.parse::<usize>().ok())
            .filter(|c| *c > 10)
            .unwrap_or(DEFAULT_COLUMNS);
        Self {
            tty: std::io::stdout().is_terminal(),
            columns,
            drawn: false,
            last_key: String::new(),
            last_print: None,
        }
    }

    /// Shows `line`; `key` is the line without its clock, so a plain
    /// display repeats only what changed.
    fn show(&mut self, line: &str, key: &str) {
        let mut out = std::io::stdout().lock();
        if self.tty {
            // One column spare: a line that fills the width wraps on some terminals.
            let _ = write!(out, "\r\x1b[2K{}", view::fit(line, self.columns - 1));
            let _ = out.flush();
            self.drawn = true;
            return;
        }
        let due = self.last_print.is_none_or(|t| t.elapsed() >= PLAIN_REPEAT);
        if key != self.last_key || due {
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
            self.last_key = key.to_owned();
            self.last_print = Some(Instant::now());
        }
    }

    /// Removes a drawn line so the next output starts on a clean line.
    fn clear(&mut self) {
        if self.drawn {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "\r\x1b[2K");
            let _ = out.flush();
            self.drawn = false;
        }
        self.last_key.clear();
        self.last_print = None;
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;
    use converge_service::config::{Cli, Command};

    use super::*;

    fn args(extra: &[&str]) -> DevArgs {
        let cli = Cli::try_parse_from(["converge", "dev"].iter().chain(extra)).expect("parses");
        match cli.command {
            Some(Command::Dev(args)) => args,
            other => panic!("not dev: {other:?}"),
        }
    }

    /// The example manifests pass the server's own manifest rules (schemas
    /// compile, reactions are legal), and the composed children of the
    /// default BOM satisfy their kinds' spec schemas.
    #[test]
    fn the_example_manifests_are_legal_and_fit_the_composition() {
        use converge_sdk::worker::convert::struct_to_json;
        use converge_service::domain::manifest::{self as domain, Emit, Trigger};

        let trigger = |raw: i32| match pb::Trigger::try_from(raw).unwrap() {
            pb::Trigger::SpecChange => Trigger::SpecChange,
            pb::Trigger::ChildrenSettled => Trigger::ChildrenSettled,
            pb::Trigger::Operation => Trigger::Operation,
            other => panic!("unexpected trigger {other:?}"),
        };
        let emit = |raw: i32| match pb::Emit::try_from(raw).unwrap() {
            pb::Emit::Children => Emit::Children,
            pb::Emit::Edges => Emit::Edges,
            pb::Emit::Status => Emit::Status,
            pb::Emit::Conditions => Emit::Conditions,
            pb::Emit::OperationOutput => Emit::OperationOutput,
            other => panic!("unexpected emit {other:?}"),
        };
        let mut compiled = std::collections::HashMap::new();
        for m in converge_examples::manifests().unwrap() {
            let policy = m.policy.unwrap_or_default();
            let manifest = domain::KindManifest {
                kind: m.kind.clone(),
                kind_version: m.kind_version,
                description: m.description,
                spec_schema: m.spec_schema.map(struct_to_json),
                status_schema: m.status_schema.map(struct_to_json),
                config_schema: m.config_schema.map(struct_to_json),
                reactions: m
                    .reactions
                    .iter()
                    .map(|r| domain::Reaction {
                        name: r.name.clone(),
                        trigger: trigger(r.trigger),
                        emits: r.emits.iter().map(|e| emit(*e)).collect(),
                        verb: Some(r.verb.clone()).filter(|v| !v.is_empty()),
                        finalizer: None,
                        input_schema: r.input_schema.clone().map(struct_to_json),
                    })
                    .collect(),
                finalizer_name: None,
                conversions: Vec::new(),
                composition: None,
                policy: domain::KindPolicy {
                    max_inflight: policy.max_inflight,
                    task_deadline_secs: policy.task_deadline_secs,
                    resync_interval_secs: policy.resync_interval_secs,
                    resync_recomposes: policy.resync_recomposes,
                    orphan_grace_secs: policy.orphan_grace_secs,
                    max_transient_attempts: policy.max_transient_attempts,
                    unserved_condition_after_secs: policy.unserved_condition_after_secs,
                    retry: domain::RetryPolicy {
                        base_ms: policy.retry_base_ms,
                        cap_ms: policy.retry_cap_ms,
                        jitter: match policy.retry_jitter {
                            2 => domain::RetryJitter::Full,
                            3 => domain::RetryJitter::Equal,
                            _ => domain::RetryJitter::None,
                        },
                    },
                },
            };
            let kind = converge_service::domain::compiled::compile_manifest(manifest)
                .unwrap_or_else(|v| panic!("{}: {v:?}", m.kind));
            compiled.insert(m.kind, kind);
        }
        let spec: converge_examples::bom::compose::BomSpec = serde_json::from_value(bom_spec(&args(&[]))).unwrap();
        let bom_schema = compiled["bom"].spec.as_ref().unwrap();
        assert!(bom_schema.is_valid(&bom_spec(&args(&[]))));
        let composition = converge_examples::bom::compose::compose("demo", &spec).unwrap();
        assert_eq!(composition.children.len(), 11);
        for child in composition.children {
            let schema = compiled[&child.kind].spec.as_ref().unwrap();
            assert!(schema.is_valid(&child.spec), "{} {}", child.kind, child.spec);
        }
    }

    #[test]
    fn flags_that_cannot_compose_are_refused_up_front() {
        assert!(check(&args(&[])).is_ok());
        let err = check(&args(&["--teams", "a,network"])).unwrap_err();
        assert!(format!("{err:#}").contains("reserved"), "{err:#}");
        let err = check(&args(&["--teams", "a,a"])).unwrap_err();
        assert!(format!("{err:#}").contains("listed twice"), "{err:#}");
    }

    #[test]
    fn wildcard_binds_are_dialled_over_loopback() {
        let v4: SocketAddr = "0.0.0.0:50051".parse().unwrap();
        assert_eq!(dial_addr(v4), "127.0.0.1:50051".parse::<SocketAddr>().unwrap());
        let v6: SocketAddr = "[::]:7".parse().unwrap();
        assert_eq!(dial_addr(v6), "[::1]:7".parse::<SocketAddr>().unwrap());
        let exact: SocketAddr = "10.0.0.1:1".parse().unwrap();
        assert_eq!(dial_addr(exact), exact);
    }

    #[test]
    fn the_bom_spec_follows_the_flags() {
        assert_eq!(
            bom_spec(&args(&[])),
            json!({"teams": ["payments", "search", "ledger"], "region": "us-east-1", "accountConfig": "demo-accounts"})
        );
        assert_eq!(
            bom_spec(&args(&["--teams", "a,b", "--fail-teams", "b"])),
            json!({"teams": ["a", "b"], "region": "us-east-1", "failTeams": ["b"], "accountConfig": "demo-accounts"})
        );
    }

    #[test]
    fn hints_name_the_bom_and_add_a_new_team() {
        let text = hints(
            &args(&["--teams", "risk", "--bom-name", "x"]),
            "127.0.0.1:50051".parse().unwrap(),
        );
        assert!(text.contains("  converge describe bom x\n"), "{text}");
        assert!(text.contains(r#""teams":["risk","risk2"]"#), "{text}");
        assert!(
            text.contains(r#""name":"x-accounts""#) && text.contains(r#""type":"ProviderConfig""#),
            "{text}"
        );
        assert!(
            text.contains("converge invoke account x-risk rotate_credentials"),
            "{text}"
        );
        let elsewhere = hints(&args(&[]), "127.0.0.1:6000".parse().unwrap());
        assert!(
            elsewhere.contains("converge graph --server http://127.0.0.1:6000 bom"),
            "{elsewhere}"
        );
    }
}
