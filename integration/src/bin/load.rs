//! `converge-load`: the load tool. Applies N `noop` resources (flat) or M
//! `bom` trees (composed, 3 x teams + 2 children each) through the API,
//! served by K worker processes, and reports apply rate, apply→Ready
//! throughput, p50/p95/p99 apply→Ready latency (database clock), peak
//! work_queue depth and the server's RSS, next to the single-row commit
//! ceiling that pgbench measures on the same database in the same run.
//!
//! By default it starts everything itself: a durable embedded PostgreSQL in a
//! scratch directory (production settings, not the tests' `fsync=off`), one
//! `converge serve` process on it, and the workers. Build the binaries first:
//!
//! ```sh
//! cargo build --release --bin converge --bin converge-noop-worker --bin converge-demo-worker --bin converge-load
//! target/release/converge-load --resources 100000
//! target/release/converge-load --mode bom --trees 2000
//! target/release/converge-load --mode stack --trees 10000 --children 100 --watchers 100
//! ```
//!
//! `--mode stack` applies `--trees` roots of the kind `stack`, each composing
//! `--children` `cell` children. The composition is declared as data in the
//! kind's manifest (CEL, evaluated by the server, ADR 49), so the roots need
//! no worker; the cells are served by the worker processes
//! (converge-noop-worker serving `cell`). It reports, besides the usual
//! figures, the rollup latency of every root (its Ready commit minus its last
//! child's sync commit, database clock, as compose-bench measures it) and the
//! database's size (`stack`).
//!
//! `--watchers W` (stack mode) opens W watch streams before the applies,
//! each watching one label group of the trees (root i and its children carry
//! `team=t{i % W}`), plus `--firehose-watchers` streams watching everything;
//! they run during the whole run and report change→delivery latency (arrival
//! minus the change's `update_time`, the same host clock), the messages
//! delivered, and how far behind each was when the run's last change
//! committed (`watch`). One more firehose watcher leaves once the applies are
//! sent, stays away `--resume-after-secs` and resumes from its last position;
//! once the trees are all Ready the tool changes one root a second (a new
//! `rev` recomposes its children), at least `--churn-roots` of them and
//! until the resuming watcher is back, and reports their rollup latency
//! without a backlog (`watch.churned_rollup_ms`). The resuming watcher
//! reports the catch-up time and whether it got every change of the log
//! since its position exactly once (`watch.resume`).
//!
//! `--verb` declares a verb on the flat kind (unused: its cost when idle);
//! `--operations N` also invokes it on N resources after the run;
//! `--resync-secs N` gives the flat kind a resync interval and counts the
//! resyncs after the run; `--explain N` times N ExplainResource calls on
//! each of three resource shapes after the run.
//!
//! `--tls` serves over mTLS with certificates made for the run (the
//! workers and the tool present a client certificate) and reports the cost
//! of a new connection either way (`connect_ms_p50`).
//!
//! `--brokers N` runs the cluster shape of a deployment instead of one
//! process: one `control` process serving the API and N `broker` processes
//! on the same database, the workers spread over the brokers round-robin;
//! it reports the brokers' CPU and peak RSS (`brokers`). With `--workers 200
//! --worker-parallel 8` that is 200 worker streams (issue 48).
//!
//! `--database-url` uses an existing database (converge migrates it) and
//! `--target` an already running converge (then nothing is started and RSS
//! is not reported). `--json FILE` writes the results for comparison across
//! commits.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::str::FromStr as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, ValueEnum};
use converge_integration::bench::durable_postgres;
use converge_integration::kinds::{apply_kind, work_manifest};
use converge_integration::watchers::{self, WatchLog, Watcher};
use converge_proto::v1::wait::Cause as WaitCause;
use converge_proto::v1::{
    ApplyProviderConfigRequest, ApplyResourceRequest, BatchApplyResourcesRequest, ComposedResource, Composition,
    DeleteResourceRequest, Emit, ExplainResourceRequest, FieldConversion, GetKindMigrationRequest,
    InvokeOperationRequest, KindManifest, KindPolicy, ProviderConfig, Reaction, SpecConversion,
    StartKindMigrationRequest, Trigger, WatchResourcesRequest,
};
use converge_sdk::Client;
use converge_service::db::embedded::{EmbeddedPostgres, find_bindir};
use converge_service::domain::position::Position;
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::process::{Child, Command};

/// Most items the server takes in one BatchApplyResources call.
const MAX_BATCH: usize = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Independent `noop` resources.
    Flat,
    /// `bom` roots composing accounts, VPCs, a gateway and routes.
    Bom,
    /// `stack` roots composing `--children` cells each (a composition
    /// declared as data).
    Stack,
}

/// Load converge and measure it.
#[derive(Debug, Parser)]
#[command(name = "converge-load", about)]
struct Args {
    /// What to apply.
    #[arg(long, value_enum, default_value = "flat")]
    mode: Mode,
    /// Resources to apply (flat mode).
    #[arg(long, default_value_t = 10_000)]
    resources: usize,
    /// Trees to apply (bom and stack modes).
    #[arg(long, default_value_t = 100)]
    trees: usize,
    /// Children per tree (stack mode).
    #[arg(long, default_value_t = 100)]
    children: usize,
    /// Stack mode: watch streams opened before the applies, each watching
    /// one label group of the trees (0 = no watchers).
    #[arg(long, default_value_t = 0)]
    watchers: usize,
    /// Stack mode, with --watchers: streams watching every change.
    #[arg(long, default_value_t = 1)]
    firehose_watchers: usize,
    /// Stack mode, with --watchers: how long the resuming watcher stays
    /// away (0 = no resuming watcher).
    #[arg(long, default_value_t = 300)]
    resume_after_secs: u64,
    /// Stack mode, with --watchers: once all are Ready, change at least this
    /// many roots, one a second (and more while the resuming watcher is
    /// still away), to measure rollup latency without a backlog.
    #[arg(long, default_value_t = 30)]
    churn_roots: usize,
    /// Teams per tree (bom mode): 3 children per team plus 2 shared.
    #[arg(long, default_value_t = 3)]
    teams: usize,
    /// Worker processes (one stream each).
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Run one `control` process and this many `broker` processes instead
    /// of one process of every role; the workers connect to the brokers
    /// round-robin (0 = one process).
    #[arg(long, default_value_t = 0, conflicts_with = "target")]
    brokers: usize,
    /// Tasks each worker process runs at once.
    #[arg(long, default_value_t = 256)]
    worker_parallel: usize,
    /// Concurrent API writers.
    #[arg(long, default_value_t = 8)]
    writers: usize,
    /// Resources per apply call: above 1 a writer sends BatchApplyResources
    /// calls of this many items; 1 sends one ApplyResource per resource.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// An existing database instead of a fresh embedded one.
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
    /// A running converge (`http://host:port`) instead of starting one; needs
    /// --database-url for the measurements.
    #[arg(long)]
    target: Option<String>,
    /// Seconds of pgbench for the commit ceiling (0 = skip).
    #[arg(long, default_value_t = 10)]
    pgbench_secs: u64,
    /// Give up waiting for Ready after this many seconds.
    #[arg(long, default_value_t = 3600)]
    timeout_secs: u64,
    /// Also write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Serve over mTLS: certificates are made for the run (a CA, the
    /// server's, one client certificate with a SPIFFE ID for the tool and
    /// the workers), so the figure includes TLS on every connection.
    #[arg(long, conflicts_with = "target")]
    tls: bool,
    /// Run the server with an authorization policy of this many bindings
    /// (0 = no policy): N-1 label-scoped bindings of other identities, then
    /// the one that grants this tool and its workers everything, so every
    /// decision walks them all.
    #[arg(long, default_value_t = 0, conflicts_with = "target")]
    authz_bindings: usize,
    /// Flat mode: label resource i `team=t{i % N}` (0 = no labels).
    #[arg(long, default_value_t = 0)]
    labels: usize,
    /// Flat mode, with --tls, --authz-bindings >= 2 and --labels >= 2: after
    /// the run, time this many first pages of ListResources as the reader
    /// of team 1 (a grant scoped to `team=t1`), against the same page asked
    /// with `-l team=t1` by an unscoped identity (`scoped_list`).
    #[arg(long, default_value_t = 0)]
    scoped_list: usize,
    /// Flat mode: the first N resources reference one provider config
    /// override; after the run it is edited once and the time until all N
    /// have reconciled again is reported (`config_push`). 0 = no configs.
    #[arg(long, default_value_t = 0)]
    config_users: usize,
    /// Flat mode: one enabled reactor binding on the loaded kind's SYNCED,
    /// to a reactor kind the workers also serve; reports how long the
    /// deliveries took to drain (`deliveries`).
    #[arg(long)]
    binding: bool,
    /// Flat mode: the loaded kind declares a verb (an OPERATION reaction),
    /// so the run shows what a declared but unused verb costs.
    #[arg(long)]
    verb: bool,
    /// Flat mode: after the run, invoke the verb (implies --verb) on this many
    /// resources, `--writers` calls at a time, and report the invoke rate and
    /// how long until every operation finished (`operations`).
    #[arg(long, default_value_t = 0)]
    operations: usize,
    /// Flat mode: the loaded kind resyncs every N seconds (its policy's
    /// resync interval), during the run and after it; reports the resyncs
    /// per second over `--resync-observe-secs` after all are Ready
    /// (`resync`). 0 = no resync.
    #[arg(long, default_value_t = 0)]
    resync_secs: i32,
    /// How long to count resyncs after the run (with --resync-secs).
    #[arg(long, default_value_t = 30)]
    resync_observe_secs: u64,
    /// Flat mode: after the run, time this many ExplainResource calls on
    /// each of three shapes (a Ready resource, one queued for a kind no
    /// worker serves, under a concurrency cap, and one of that kind being
    /// deleted, its teardown queued), sampled among the loaded resources and
    /// 1,000 of the unserved kind; reports p50/p99 per shape (`explain`).
    #[arg(long, default_value_t = 0)]
    explain: usize,
    /// Flat mode: after the run, time this many GetFleetSummary calls as an
    /// operator makes them (served from the snapshot once the first has
    /// counted), and up to 20 counted at call time (`fresh`); reports
    /// p50/p99 of each (`summary`).
    #[arg(long, default_value_t = 0)]
    summary: usize,
    /// With --explain: write EXPLAIN (ANALYZE, BUFFERS) of the read's facts
    /// statement, for one resource of each shape, to this file.
    #[arg(long)]
    explain_plans: Option<PathBuf>,
    /// Profile the run: pg_stat_statements top statements and sampled wait
    /// events (embedded database only), and, when `perf` is installed, a CPU
    /// profile of the server written to this file (`perf report -i FILE`).
    #[arg(long)]
    profile: Option<PathBuf>,
    /// Flat mode: run this command (split on whitespace, no shell) as the
    /// worker processes instead of converge-noop-worker, e.g. another
    /// language's noop worker. It gets the broker address in
    /// CONVERGE_BROKER_ADDR and BROKER_ADDR and the parallelism in
    /// WORKER_MAX_PARALLEL, and must serve `noop` v1.
    #[arg(long)]
    worker_command: Option<String>,
    /// Flat mode: after the run, apply `noop` v2 (its manifest converts v1
    /// specs with one CEL field edit), migrate every resource to it with a
    /// kind migration, and report the migration's rate, its ratio to this
    /// run's apply-to-Ready rate, and how long until all are Ready on v2
    /// (`migration`). The workers serve both versions.
    #[arg(long)]
    migrate: bool,
}

/// Processes started for the run; killed when dropped.
struct Fleet {
    server: Option<Child>,
    /// With `--brokers`: the broker processes and their addresses.
    brokers: Vec<(Child, String)>,
    workers: Vec<Child>,
    _database: Option<(EmbeddedPostgres, tempfile::TempDir)>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let bin_dir = std::env::current_exe()?
        .parent()
        .map(Path::to_path_buf)
        .context("no directory for the binaries")?;

    // The database: given, or a fresh durable embedded cluster.
    let (database_url, embedded) = match &args.database_url {
        Some(url) => (url.clone(), None),
        None => {
            let dir = tempfile::Builder::new().prefix("converge-load-").tempdir()?;
            // The server may run as another user (as root: `postgres`).
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
            let mut settings = Vec::new();
            if args.profile.is_some() {
                settings.push(("shared_preload_libraries".into(), "pg_stat_statements".into()));
            }
            let (server, url) = durable_postgres(&dir.path().join("db"), "converge_load", &settings).await?;
            (url, Some((server, dir)))
        }
    };
    let mut fleet = Fleet {
        server: None,
        brokers: Vec::new(),
        workers: Vec::new(),
        _database: embedded,
    };

    let pki = args.tls.then(LoadPki::new).transpose()?;
    let policy = (args.authz_bindings > 0)
        .then(|| load_policy(args.authz_bindings))
        .transpose()?;
    // The server: given, or one process of ours.
    let address = match &args.target {
        Some(target) => target.clone(),
        None => {
            // One converge process of `role` on `addr`, with the run's TLS and policy.
            let serve = |role: &str, addr: &str| -> anyhow::Result<Child> {
                let mut command = Command::new(bin_dir.join("converge"));
                if let Some(pki) = &pki {
                    command
                        .env("TLS_CERT_FILE", pki.path("server.crt"))
                        .env("TLS_KEY_FILE", pki.path("server.key"))
                        .env("TLS_CLIENT_CA_FILE", pki.path("ca.pem"));
                }
                if let Some(policy) = &policy {
                    command
                        .env("AUTHZ_POLICY_FILE", policy.path())
                        .env("AUTHZ_PLAINTEXT_IDENTITY", LOAD_IDENTITY);
                }
                command
                    .arg("serve")
                    .env("ROLE", role)
                    .env("DATABASE_URL", &database_url)
                    .env("LISTEN_ADDR", addr)
                    .env("HEALTH_ADDR", "127.0.0.1:0")
                    .env("LOG_LEVEL", "warn")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .kill_on_drop(true)
                    .spawn()
                    .context("starting converge (build it with --bin converge)")
            };
            let addr = free_addr()?;
            fleet.server = Some(serve(if args.brokers > 0 { "control" } else { "all" }, &addr)?);
            let scheme = if pki.is_some() { "https" } else { "http" };
            for _ in 0..args.brokers {
                let broker_addr = free_addr()?;
                fleet
                    .brokers
                    .push((serve("broker", &broker_addr)?, format!("{scheme}://{broker_addr}")));
            }
            format!("{scheme}://{addr}")
        }
    };
    let client = connect(&address, pki.as_ref()).await?;
    // What a new connection costs before its first answer (TCP, the TLS
    // handshake when on, HTTP/2 setup, one small call), median of 50.
    let connect_ms = connect_cost(&address, pki.as_ref()).await?;
    eprintln!("new connection + first call: p50 {connect_ms:.2} ms");
    // The tool's own probes must not compete with what they measure: no
    // parallel workers (a count over a million rows would take both cores).
    let probe_options = PgConnectOptions::from_str(&database_url)?.options([("max_parallel_workers_per_gather", "0")]);
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect_with(probe_options)
        .await?;
    let profiling = args.profile.is_some() && fleet._database.is_some();
    if profiling {
        sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .execute(&pool)
            .await?;
    }

    let ceiling = if args.pgbench_secs > 0 {
        Some(pgbench_ceiling(&database_url, args.pgbench_secs).await?)
    } else {
        None
    };
    if let Some(tps) = ceiling {
        eprintln!(
            "pgbench single-row UPDATE, 8 clients, {} s: {tps:.0} commits/s",
            args.pgbench_secs
        );
    }

    let (worker_bin, total) = match args.mode {
        Mode::Flat => {
            let mut manifest = work_manifest("noop");
            if args.verb || args.operations > 0 {
                manifest.reactions.push(Reaction {
                    name: format!("operate:{LOAD_VERB}"),
                    trigger: Trigger::Operation.into(),
                    emits: vec![Emit::OperationOutput.into()],
                    verb: LOAD_VERB.into(),
                    ..Default::default()
                });
            }
            if args.resync_secs > 0 {
                manifest.policy = Some(KindPolicy {
                    resync_interval_secs: args.resync_secs,
                    ..Default::default()
                });
            }
            apply_kind(&client, manifest).await?;
            if args.config_users > 0 {
                apply_override(&client, 1).await?;
            }
            if args.binding {
                apply_binding(&client).await?;
            }
            ("converge-noop-worker", args.resources)
        }
        Mode::Bom => {
            for manifest in converge_examples::manifests()? {
                apply_kind(&client, manifest).await?;
            }
            ("converge-demo-worker", args.trees)
        }
        Mode::Stack => {
            apply_kind(&client, work_manifest("cell")).await?;
            apply_kind(&client, stack_manifest()?).await?;
            ("converge-noop-worker", args.trees)
        }
    };
    anyhow::ensure!(
        args.watchers == 0 || args.mode == Mode::Stack,
        "--watchers needs --mode stack"
    );
    let external: Option<Vec<&str>> = match (&args.worker_command, args.mode) {
        (Some(command), Mode::Flat) => Some(command.split_whitespace().collect()),
        (Some(_), _) => anyhow::bail!("--worker-command serves the flat mode's noop kind only"),
        (None, _) => None,
    };
    let broker_addresses: Vec<String> = fleet.brokers.iter().map(|(_, a)| a.clone()).collect();
    for i in 0..args.workers {
        let address = broker_addresses
            .get(i % broker_addresses.len().max(1))
            .unwrap_or(&address);
        let mut command = match external.as_deref() {
            Some([program, rest @ ..]) => {
                let mut command = Command::new(program);
                command.args(rest);
                command
            }
            Some([]) => anyhow::bail!("--worker-command is empty"),
            None => Command::new(bin_dir.join(worker_bin)),
        };
        if let Some(pki) = &pki {
            command
                .env("WORKER_TLS_CA_FILE", pki.path("ca.pem"))
                .env("WORKER_TLS_CERT_FILE", pki.path("client.crt"))
                .env("WORKER_TLS_KEY_FILE", pki.path("client.key"));
        }
        let child = command
            .env("CONVERGE_BROKER_ADDR", address)
            .env("BROKER_ADDR", address)
            .env("WORKER_MAX_PARALLEL", args.worker_parallel.to_string())
            .env(
                "WORKER_KINDS",
                match (args.mode, args.binding, args.migrate) {
                    (Mode::Stack, _, _) => "cell:1",
                    (_, true, true) => "noop:1,noop:2,noop-sink:1",
                    (_, true, false) => "noop:1,noop-sink:1",
                    (_, false, true) => "noop:1,noop:2",
                    (_, false, false) => "noop:1",
                },
            )
            .env("NOOP_DELAY_MS", "0")
            .env("DEMO_DELAY_MS", "0")
            .env("LOG_LEVEL", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| match &args.worker_command {
                Some(command) => format!("starting {command:?}"),
                None => format!("starting {worker_bin} (build it with --bin {worker_bin})"),
            })?;
        fleet.workers.push(child);
    }

    // Samplers: progress line, queue depth, server RSS.
    let server_pid = fleet.server.as_ref().and_then(Child::id);
    if profiling {
        sqlx::query("SELECT pg_stat_statements_reset()").execute(&pool).await?;
    }
    let mut perf = match (&args.profile, server_pid) {
        (Some(file), Some(pid)) => Command::new("perf")
            .args(["record", "-F", "99", "-g", "-p", &pid.to_string(), "-o"])
            .arg(file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .ok(),
        _ => None,
    };
    // Watchers: opened before the applies, so they see the whole run.
    let groups = stack_groups(&args);
    let mut watchers = if args.watchers > 0 {
        Some(
            Watchers::open(
                &pool,
                &address,
                pki.as_ref(),
                args.watchers,
                args.firehose_watchers,
                args.resume_after_secs,
            )
            .await?,
        )
    } else {
        None
    };
    let waits = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::<String, i64>::new()));
    let wait_sampler = profiling.then(|| tokio::spawn(sample_waits(pool.clone(), waits.clone())));
    let applied = Arc::new(AtomicI64::new(0));
    let peak_queue = Arc::new(AtomicI64::new(0));
    let peak_rss = Arc::new(AtomicI64::new(0));
    let lagging = Arc::new(AtomicI64::new(i64::MAX));
    let started = Instant::now();
    let db_started: f64 = sqlx::query_scalar("SELECT extract(epoch FROM clock_timestamp())::float8")
        .fetch_one(&pool)
        .await?;
    let sampler = tokio::spawn(sample(
        pool.clone(),
        args.mode,
        total,
        server_pid,
        applied.clone(),
        peak_queue.clone(),
        peak_rss.clone(),
        lagging.clone(),
        started,
    ));

    // Apply.
    let mut writers = Vec::new();
    let batch = args.batch.clamp(1, MAX_BATCH);
    let chunks = total.div_ceil(batch);
    for w in 0..args.writers.max(1) {
        let client = client.clone();
        let applied = applied.clone();
        let (mode, teams, step, users) = (args.mode, args.teams, args.writers.max(1), args.config_users);
        let (labels, children) = if mode == Mode::Stack {
            (groups, args.children)
        } else {
            (args.labels, 0)
        };
        writers.push(tokio::spawn(async move {
            for chunk in (w..chunks).step_by(step) {
                let items = chunk * batch..((chunk + 1) * batch).min(total);
                let count = items.len() as i64;
                if batch == 1 {
                    client
                        .resources()
                        .apply_resource(request(mode, items.start, teams, users, labels, children))
                        .await?;
                } else {
                    let requests = items
                        .map(|i| request(mode, i, teams, users, labels, children))
                        .collect();
                    client
                        .resources()
                        .batch_apply_resources(BatchApplyResourcesRequest {
                            requests,
                            ..Default::default()
                        })
                        .await?;
                }
                applied.fetch_add(count, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    for writer in writers {
        writer.await??;
    }
    let apply_secs = started.elapsed().as_secs_f64();
    if let Some(watchers) = &mut watchers {
        // The run goes on (the trees compose and settle) while it is away.
        watchers.leave();
    }

    // Wait for Ready.
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    // The progress sampler's count reaches zero, then exact counts confirm.
    loop {
        if lagging.load(Ordering::Relaxed) == 0
            && lagging_count(&pool).await? == 0
            && ready_count(&pool, args.mode).await? >= total as i64
        {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "not everything was Ready within the timeout");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The end is the last sync's commit on the database clock, so the poll
    // interval above does not blur it.
    let ready_secs = last_ready_at(&pool, args.mode).await? - db_started;
    sampler.abort();
    eprintln!();
    if let Some(sampler) = wait_sampler {
        sampler.abort();
    }
    if let Some(perf) = &mut perf {
        // SIGINT makes perf write its file and exit.
        if let Some(pid) = perf.id() {
            let _ = std::process::Command::new("kill")
                .args(["-INT", &pid.to_string()])
                .status();
        }
        let _ = perf.wait().await;
    }
    if profiling {
        print_profile(&pool, &waits).await?;
    }
    let rss_end = server_pid.and_then(rss_bytes);

    let (p50, p95, p99) = latency_percentiles(&pool, args.mode).await?;
    let stack = if args.mode == Mode::Stack {
        Some(measure_stack(&pool).await?)
    } else {
        None
    };
    let peak_rss_at_ready = peak_rss.load(Ordering::Relaxed);
    let watch = match watchers {
        Some(watchers) => Some(
            watchers
                .finish(
                    &client,
                    &pool,
                    total,
                    groups,
                    args.children,
                    args.churn_roots,
                    deadline,
                    server_pid,
                    &peak_rss,
                )
                .await?,
        ),
        None => None,
    };
    let rss_after_watch = server_pid.and_then(rss_bytes);
    let deliveries = if args.mode == Mode::Flat && args.binding {
        Some(measure_deliveries(&pool, total, db_started, deadline).await?)
    } else {
        None
    };
    let config_push = if args.mode == Mode::Flat && args.config_users > 0 {
        Some(measure_config_push(&client, &pool, args.config_users, deadline).await?)
    } else {
        None
    };
    let resync = if args.mode == Mode::Flat && args.resync_secs > 0 {
        Some(measure_resync(&pool, args.resync_observe_secs).await?)
    } else {
        None
    };
    let operations = if args.mode == Mode::Flat && args.operations > 0 {
        let count = args.operations.min(total);
        Some(measure_operations(&client, &pool, count, args.writers, deadline).await?)
    } else {
        None
    };
    let explain = if args.mode == Mode::Flat && args.explain > 0 {
        Some(measure_explain(&client, &pool, total, args.explain, args.explain_plans.as_deref()).await?)
    } else {
        None
    };
    let scoped_list = match (&pki, args.scoped_list) {
        (Some(pki), n) if n > 0 && args.mode == Mode::Flat && args.authz_bindings >= 2 && args.labels >= 2 => {
            Some(measure_scoped_list(&client, &address, pki, n).await?)
        }
        (_, 0) => None,
        _ => anyhow::bail!("--scoped-list needs --tls, --authz-bindings >= 2 and --labels >= 2 in flat mode"),
    };
    let summary = if args.mode == Mode::Flat && args.summary > 0 {
        Some(measure_summary(&client, total, args.summary).await?)
    } else {
        None
    };
    let throughput = total as f64 / ready_secs;
    let migration = if args.mode == Mode::Flat && args.migrate {
        Some(measure_migration(&client, &pool, total, throughput, deadline).await?)
    } else {
        None
    };
    let worker_usage = worker_usage(&fleet.workers);
    let broker_children: Vec<&Child> = fleet.brokers.iter().map(|(c, _)| c).collect();
    let broker_usage = worker_usage_of(&broker_children);
    let resources = match args.mode {
        Mode::Flat => total,
        // A root, a shared account and gateway, and an account, VPC and route per team.
        Mode::Bom => total * (3 + 3 * args.teams),
        Mode::Stack => total * (1 + args.children),
    };
    // The ceiling compares commits of single rows: count resources, not trees.
    let resources_per_sec = resources as f64 / ready_secs;
    let results = json!({
        "mode": match args.mode { Mode::Flat => "flat", Mode::Bom => "bom", Mode::Stack => "stack" },
        "count": total,
        "resources": resources,
        "resources_per_sec": resources_per_sec,
        "workers": args.workers,
        "worker_parallel": args.worker_parallel,
        "writers": args.writers,
        "batch": args.batch,
        "apply_secs": apply_secs,
        "apply_per_sec": total as f64 / apply_secs,
        "ready_secs": ready_secs,
        "ready_per_sec": throughput,
        "latency_ms": {"p50": p50, "p95": p95, "p99": p99},
        "peak_work_queue": peak_queue.load(Ordering::Relaxed),
        "server_rss_mb": {
            "peak": peak_rss.load(Ordering::Relaxed) as f64 / 1048576.0,
            "end": rss_end.map(|b| b as f64 / 1048576.0),
        },
        "pgbench_commits_per_sec": ceiling,
        "ratio_to_ceiling": ceiling.map(|c| resources_per_sec / c),
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "config_push": config_push,
        "deliveries": deliveries,
        "operations": operations,
        "resync": resync,
        "explain": explain,
        "summary": summary,
        "scoped_list": scoped_list,
        "migration": migration,
        "labels": args.labels,
        "worker_command": args.worker_command,
        "tls": args.tls,
        "authz_bindings": args.authz_bindings,
        "connect_ms_p50": connect_ms,
        "worker_cpu_secs": worker_usage.cpu_secs,
        "worker_rss_peak_mb": worker_usage.rss_peak_mb,
        "brokers": (args.brokers > 0).then(|| json!({
            "processes": args.brokers,
            "streams": args.workers,
            "cpu_secs": broker_usage.cpu_secs,
            "rss_peak_mb": broker_usage.rss_peak_mb,
            "rss_peak_mb_per_stream": broker_usage.rss_peak_mb / args.workers.max(1) as f64,
        })),
    });
    let mut results = results;
    if let (Some(stack), Some(object)) = (stack, results.as_object_mut()) {
        object.insert("children".into(), json!(args.children));
        object.insert("stack".into(), stack);
        object.insert("watch".into(), json!(watch));
        // The peak until all were Ready, and after the watch phase (the
        // resuming watcher and the changes made while it was away).
        object.insert(
            "server_rss_mb_stack".into(),
            json!({
                "peak_until_ready": peak_rss_at_ready as f64 / 1048576.0,
                "peak_overall": peak_rss.load(Ordering::Relaxed) as f64 / 1048576.0,
                "after_watch": rss_after_watch.map(|b| b as f64 / 1048576.0),
            }),
        );
    }
    let unit = match args.mode {
        Mode::Flat => "resources",
        Mode::Bom | Mode::Stack => "trees",
    };
    println!(
        "{total} {unit}: applied in {apply_secs:.1} s ({:.0}/s); all Ready after {ready_secs:.1} s ({throughput:.0}/s)",
        total as f64 / apply_secs
    );
    println!("apply->Ready latency p50 {p50:.1} ms, p95 {p95:.1} ms, p99 {p99:.1} ms");
    println!(
        "peak work_queue {}, server RSS peak {:.0} MB, end {}",
        peak_queue.load(Ordering::Relaxed),
        peak_rss.load(Ordering::Relaxed) as f64 / 1048576.0,
        rss_end.map_or_else(|| "n/a".to_owned(), |b| format!("{:.0} MB", b as f64 / 1048576.0))
    );
    println!(
        "workers: {:.1} s of CPU, peak RSS {:.0} MB (summed over {} processes)",
        worker_usage.cpu_secs,
        worker_usage.rss_peak_mb,
        fleet.workers.len()
    );
    if args.brokers > 0 {
        println!(
            "brokers: {} processes, {} streams, {:.1} s of CPU, peak RSS {:.0} MB summed",
            args.brokers, args.workers, broker_usage.cpu_secs, broker_usage.rss_peak_mb
        );
    }
    if let Some(c) = ceiling {
        println!(
            "{resources_per_sec:.0} resources/s; ratio to the single-row commit ceiling: {:.3}",
            resources_per_sec / c
        );
    }
    println!("{results}");
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&results)?)?;
    }
    for worker in &mut fleet.workers {
        let _ = worker.start_kill();
    }
    if let Some(server) = &mut fleet.server {
        let _ = server.start_kill();
        let _ = server.wait().await;
    }
    Ok(())
}

fn free_addr() -> anyhow::Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.to_string())
}

/// The identity of this tool and its workers: their client certificate's
/// with `--tls`, the plaintext identity without.
const LOAD_IDENTITY: &str = "spiffe://converge.load/worker";

/// A policy file of `bindings` bindings, the last granting [`LOAD_IDENTITY`]
/// everything (see `--authz-bindings`).
fn load_policy(bindings: usize) -> anyhow::Result<tempfile::NamedTempFile> {
    use std::fmt::Write as _;
    let mut text = String::from(
        "roles:\n  - name: all\n    rules:\n      - {verbs: [\"*\"], kinds: [\"*\"]}\n      - {verbs: [\"*\"], objects: [\"*\"]}\n  - name: team\n    rules:\n      - {verbs: [read, write], kinds: [noop]}\nbindings:\n",
    );
    for i in 1..bindings {
        writeln!(
            text,
            "  - {{role: team, subjects: [\"spiffe://converge.load/team-{i}/*\"], selector: \"team=t{i}\"}}"
        )?;
    }
    writeln!(text, "  - {{role: all, subjects: [\"{LOAD_IDENTITY}\"]}}")?;
    let mut file = tempfile::Builder::new()
        .prefix("converge-load-policy-")
        .suffix(".yaml")
        .tempfile()?;
    std::io::Write::write_all(&mut file, text.as_bytes())?;
    Ok(file)
}

/// Certificates for a `--tls` run, in a scratch directory.
struct LoadPki {
    dir: tempfile::TempDir,
}

impl LoadPki {
    fn new() -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("converge-load-pki-").tempdir()?;
        let ca = converge_integration::pki::TestCa::new("converge-load CA")?;
        std::fs::write(dir.path().join("ca.pem"), ca.pem())?;
        ca.server()?.write(dir.path(), "server")?;
        ca.client(Some(LOAD_IDENTITY))?.write(dir.path(), "client")?;
        ca.client(Some(TEAM_READER))?.write(dir.path(), "team")?;
        Ok(Self { dir })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn client_tls(&self) -> anyhow::Result<converge_sdk::tls::ClientTls> {
        Ok(converge_sdk::tls::ClientTls::load(
            &converge_sdk::tls::ClientTlsFiles {
                ca: self.path("ca.pem"),
                identity: Some((self.path("client.crt"), self.path("client.key"))),
            },
            converge_sdk::tls::DEFAULT_RELOAD_INTERVAL,
        )?)
    }
}

async fn connect_once(address: &str, pki: Option<&LoadPki>) -> anyhow::Result<Client> {
    Ok(match pki {
        Some(pki) => Client::connect_tls(address.to_owned(), pki.client_tls()?).await?,
        None => Client::connect(address.to_owned()).await?,
    })
}

async fn connect(address: &str, pki: Option<&LoadPki>) -> anyhow::Result<Client> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match connect_once(address, pki).await {
            Ok(client) => return Ok(client),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Median milliseconds from dialling to the first answer on a new connection.
async fn connect_cost(address: &str, pki: Option<&LoadPki>) -> anyhow::Result<f64> {
    let mut samples = Vec::with_capacity(50);
    for _ in 0..50 {
        let started = Instant::now();
        let client = connect_once(address, pki).await?;
        client
            .kinds()
            .list_kind_manifests(converge_proto::v1::ListKindManifestsRequest::default())
            .await?;
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}

/// Applies the reactor kind `noop-sink` and one binding on noop's SYNCED.
async fn apply_binding(client: &Client) -> anyhow::Result<()> {
    converge_integration::kinds::bind_synced_sink(client, "noop-sink", "load-synced", "noop").await
}

/// Polls the counting query `sql` every 20 ms until it counts nothing;
/// fails with `timeout_message` past `deadline`.
async fn wait_for_none(
    pool: &PgPool,
    sql: &'static str,
    deadline: Instant,
    timeout_message: &str,
) -> anyhow::Result<()> {
    loop {
        let left: i64 = sqlx::query_scalar(sql).fetch_one(pool).await?;
        if left == 0 {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "{timeout_message}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until every delivery the run recorded was made; reports when the
/// last one finished relative to the run's start and the delivery rate.
async fn measure_deliveries(
    pool: &PgPool,
    total: usize,
    db_started: f64,
    deadline: Instant,
) -> anyhow::Result<serde_json::Value> {
    wait_for_none(
        pool,
        "SELECT count(*) FROM reactor_deliveries WHERE failed_at IS NULL",
        deadline,
        "the deliveries did not drain within the timeout",
    )
    .await?;
    let now: f64 = sqlx::query_scalar("SELECT extract(epoch FROM clock_timestamp())::float8")
        .fetch_one(pool)
        .await?;
    let failed: i64 = sqlx::query_scalar("SELECT count(*) FROM reactor_deliveries")
        .fetch_one(pool)
        .await?;
    let secs = now - db_started;
    println!(
        "{total} deliveries made {secs:.1} s after the run started ({:.0}/s); {failed} failed",
        total as f64 / secs
    );
    Ok(json!({"count": total, "drained_secs": secs, "per_sec": total as f64 / secs, "failed": failed}))
}

/// Counts the resources reconciled again (resynced: the load changes no
/// spec after the run) during `secs` from now.
async fn measure_resync(pool: &PgPool, secs: u64) -> anyhow::Result<serde_json::Value> {
    let started: f64 = sqlx::query_scalar("SELECT extract(epoch FROM clock_timestamp())::float8")
        .fetch_one(pool)
        .await?;
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let resynced: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM resources WHERE kind = 'noop' AND last_reconciled_at >= to_timestamp($1)",
    )
    .bind(started)
    .fetch_one(pool)
    .await?;
    let per_sec = resynced as f64 / secs as f64;
    println!("{resynced} resources resynced in the {secs} s after the run ({per_sec:.0}/s)");
    Ok(json!({"window_secs": secs, "resynced": resynced, "per_sec": per_sec}))
}

/// The verb `--verb` declares on the loaded kind.
const LOAD_VERB: &str = "touch";

/// Invokes the load verb on the first `count` resources, `writers` calls at
/// a time; reports the invoke rate and when the last operation finished.
async fn measure_operations(
    client: &Client,
    pool: &PgPool,
    count: usize,
    writers: usize,
    deadline: Instant,
) -> anyhow::Result<serde_json::Value> {
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut invokers = tokio::task::JoinSet::new();
    for _ in 0..writers.max(1) {
        let (client, next) = (client.clone(), next.clone());
        invokers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok::<_, anyhow::Error>(());
                }
                client
                    .operations()
                    .invoke_operation(InvokeOperationRequest {
                        kind: "noop".into(),
                        name: format!("load-{i}"),
                        verb: LOAD_VERB.into(),
                        ..Default::default()
                    })
                    .await?;
            }
        });
    }
    while let Some(invoker) = invokers.join_next().await {
        invoker??;
    }
    let invoke_secs = started.elapsed().as_secs_f64();
    wait_for_none(
        pool,
        "SELECT count(*) FROM operations WHERE state IN ('pending', 'running')",
        deadline,
        "the operations did not finish within the timeout",
    )
    .await?;
    let secs = started.elapsed().as_secs_f64();
    let failed: i64 = sqlx::query_scalar("SELECT count(*) FROM operations WHERE state = 'failed'")
        .fetch_one(pool)
        .await?;
    println!(
        "{count} operations: invoked in {invoke_secs:.1} s ({:.0}/s); all finished after {secs:.1} s ({:.0}/s); {failed} failed",
        count as f64 / invoke_secs,
        count as f64 / secs
    );
    Ok(json!({
        "count": count,
        "invoke_secs": invoke_secs,
        "invoke_per_sec": count as f64 / invoke_secs,
        "finished_secs": secs,
        "per_sec": count as f64 / secs,
        "failed": failed,
    }))
}

/// The provider config the first `--config-users` resources reference.
const OVERRIDE: &str = "load-override";

/// Applies the override at `revision` (its spec changes with it).
async fn apply_override(client: &Client, revision: i64) -> anyhow::Result<()> {
    let spec = converge_sdk::worker::convert::json_to_struct(json!({"revision": revision}), "/spec")?;
    client
        .provider_configs()
        .apply_provider_config(ApplyProviderConfigRequest {
            provider_config: Some(ProviderConfig {
                name: OVERRIDE.into(),
                kind: "noop".into(),
                kind_version: 1,
                spec: Some(spec),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await?;
    Ok(())
}

/// Edits the override once all is Ready and measures the push: the edit's
/// own call (which re-pends every user in its transaction) and the time
/// until every user has reconciled again, on the database clock. Also
/// counts resources that reconciled again without referencing it (0 when
/// the push touches exactly its users).
async fn measure_config_push(
    client: &Client,
    pool: &PgPool,
    users: usize,
    deadline: Instant,
) -> anyhow::Result<serde_json::Value> {
    let edited_at: f64 = sqlx::query_scalar("SELECT extract(epoch FROM clock_timestamp())::float8")
        .fetch_one(pool)
        .await?;
    let call = Instant::now();
    apply_override(client, 2).await?;
    let apply_ms = call.elapsed().as_secs_f64() * 1000.0;
    let again = |users_only: bool| {
        let sql = "SELECT count(*) FROM resources WHERE kind = 'noop'
                     AND (provider_config IS NOT DISTINCT FROM $2) = $3
                     AND last_reconciled_at >= to_timestamp($1)";
        sqlx::query_scalar::<_, i64>(sql)
            .bind(edited_at)
            .bind(OVERRIDE)
            .bind(users_only)
            .fetch_one(pool)
    };
    loop {
        if again(true).await? >= users as i64 {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the config push did not finish within the timeout"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let done: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM max(last_reconciled_at))::float8 FROM resources WHERE provider_config = $1",
    )
    .bind(OVERRIDE)
    .fetch_one(pool)
    .await?;
    let others = again(false).await?;
    let reconciled_secs = done - edited_at;
    println!(
        "config push to {users} resources: the edit took {apply_ms:.0} ms; all reconciled again after \
         {reconciled_secs:.2} s ({:.0}/s); {others} other resources reconciled",
        users as f64 / reconciled_secs
    );
    Ok(json!({
        "users": users,
        "apply_ms": apply_ms,
        "reconciled_secs": reconciled_secs,
        "reconciled_per_sec": users as f64 / reconciled_secs,
        "others_reconciled": others,
    }))
}

/// The identity `--scoped-list` reads as: bound to team 1 of the policy
/// `--authz-bindings` writes (scope `team=t1`).
const TEAM_READER: &str = "spiffe://converge.load/team-1/reader";

/// Times first pages of ListResources under a label-scoped grant (see
/// `--scoped-list`); every scoped answer must be a full page of team 1.
async fn measure_scoped_list(
    client: &Client,
    address: &str,
    pki: &LoadPki,
    samples: usize,
) -> anyhow::Result<serde_json::Value> {
    let tls = converge_sdk::tls::ClientTls::load(
        &converge_sdk::tls::ClientTlsFiles {
            ca: pki.path("ca.pem"),
            identity: Some((pki.path("team.crt"), pki.path("team.key"))),
        },
        converge_sdk::tls::DEFAULT_RELOAD_INTERVAL,
    )?;
    let reader = Client::connect_tls(address.to_owned(), tls).await?;
    let mut shapes = serde_json::Map::new();
    for (shape, caller, selector) in [
        ("scoped", &reader, ""),
        ("selected", client, "team=t1"),
        ("unfiltered", client, ""),
    ] {
        let mut millis = Vec::with_capacity(samples);
        for _ in 0..samples {
            let started = Instant::now();
            let page = caller
                .resources()
                .list_resources(converge_proto::v1::ListResourcesRequest {
                    kind: Some("noop".into()),
                    label_selector: selector.into(),
                    page_size: 100,
                    ..Default::default()
                })
                .await?
                .into_inner();
            millis.push(started.elapsed().as_secs_f64() * 1000.0);
            anyhow::ensure!(
                page.resources.len() == 100,
                "{shape}: a page of {}",
                page.resources.len()
            );
            if shape != "unfiltered" {
                anyhow::ensure!(
                    page.resources
                        .iter()
                        .all(|r| r.labels.get("team").map(String::as_str) == Some("t1")),
                    "{shape}: a resource outside team 1"
                );
            }
        }
        millis.sort_by(f64::total_cmp);
        let at = |q: f64| millis[((millis.len() - 1) as f64 * q).round() as usize];
        let (p50, p99) = (at(0.5), at(0.99));
        println!("ListResources first page of 100, {shape}: {samples} calls, p50 {p50:.2} ms, p99 {p99:.2} ms");
        shapes.insert(shape.into(), json!({"calls": samples, "p50_ms": p50, "p99_ms": p99}));
    }
    Ok(serde_json::Value::Object(shapes))
}

/// Migrates every loaded resource from `noop` v1 to v2 (see `--migrate`).
async fn measure_migration(
    client: &Client,
    pool: &PgPool,
    total: usize,
    ready_per_sec: f64,
    deadline: Instant,
) -> anyhow::Result<serde_json::Value> {
    let v2 = KindManifest {
        kind_version: 2,
        conversions: vec![SpecConversion {
            from_version: 1,
            spec: String::new(),
            fields: vec![FieldConversion {
                path: "origin".into(),
                value: "'v1:' + name".into(),
                remove: false,
            }],
        }],
        ..work_manifest("noop")
    };
    apply_kind(client, v2).await?;
    let started = Instant::now();
    let migration = client
        .migrations()
        .start_kind_migration(StartKindMigrationRequest {
            kind: "noop".into(),
            from_version: 1,
            to_version: 2,
            ..Default::default()
        })
        .await?
        .into_inner()
        .migration
        .context("no migration in the answer")?;
    let done = loop {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the migration did not finish within the timeout"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = client
            .migrations()
            .get_kind_migration(GetKindMigrationRequest {
                uid: migration.uid.clone(),
            })
            .await?
            .into_inner()
            .migration
            .context("no migration in the answer")?;
        eprint!("\rmigrating: {}/{} converted", now.converted, now.total);
        if now.done {
            break now;
        }
    };
    eprintln!();
    anyhow::ensure!(
        done.converted == total as i64 && done.failed == 0,
        "the migration converted {} and failed {} of {total}",
        done.converted,
        done.failed
    );
    // Start to end on the server's clock.
    let seconds =
        |t: &Option<prost_types::Timestamp>| t.as_ref().map_or(0.0, |t| t.seconds as f64 + f64::from(t.nanos) / 1e9);
    let migrate_secs = seconds(&done.end_time) - seconds(&done.create_time);
    loop {
        let ready: i64 =
            sqlx::query_scalar("SELECT count(*) FROM resources WHERE kind = 'noop' AND kind_version = 2 AND is_ready")
                .fetch_one(pool)
                .await?;
        if ready >= total as i64 {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "not everything was Ready on v2 within the timeout"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ready_on_v2_secs = started.elapsed().as_secs_f64();
    let rate = total as f64 / migrate_secs;
    println!(
        "migration of {total}: {migrate_secs:.1} s ({rate:.0}/s, {:.2} of the apply-to-Ready rate); all Ready on v2 after {ready_on_v2_secs:.1} s",
        rate / ready_per_sec
    );
    Ok(json!({
        "migrated": total,
        "migrate_secs": migrate_secs,
        "migrate_per_sec": rate,
        "ratio_to_ready_per_sec": rate / ready_per_sec,
        "ready_on_v2_secs": ready_on_v2_secs,
    }))
}

/// Times GetFleetSummary (see `--summary`); every answer must count every
/// loaded resource.
async fn measure_summary(client: &Client, total: usize, samples: usize) -> anyhow::Result<serde_json::Value> {
    let mut shapes = serde_json::Map::new();
    for (shape, fresh, calls) in [("snapshot", false, samples), ("fresh", true, samples.min(20))] {
        let mut millis = Vec::with_capacity(calls);
        for _ in 0..calls {
            let started = Instant::now();
            let answer = client
                .admin()
                .get_fleet_summary(converge_proto::v1::GetFleetSummaryRequest {
                    fresh,
                    ..Default::default()
                })
                .await?
                .into_inner();
            millis.push(started.elapsed().as_secs_f64() * 1000.0);
            anyhow::ensure!(
                usize::try_from(answer.total).unwrap_or(0) >= total,
                "a summary counted {} of {total} resources",
                answer.total
            );
        }
        millis.sort_by(f64::total_cmp);
        let at = |q: f64| millis[((millis.len() - 1) as f64 * q).round() as usize];
        let (p50, p99, max) = (at(0.5), at(0.99), at(1.0));
        println!("GetFleetSummary, {shape}: {calls} calls, p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms");
        shapes.insert(
            shape.into(),
            json!({"calls": calls, "p50_ms": p50, "p99_ms": p99, "max_ms": max}),
        );
    }
    Ok(serde_json::Value::Object(shapes))
}

/// Resources of the unserved kind `--explain` adds (half of them deleted).
const IDLE_RESOURCES: usize = 1000;

/// Times ExplainResource on three shapes of resource (see `--explain`):
/// `samples` sequential calls each, names drawn by a fixed LCG so runs
/// compare. Every answer is checked to name the shape's first cause.
async fn measure_explain(
    client: &Client,
    pool: &PgPool,
    total: usize,
    samples: usize,
    plans: Option<&Path>,
) -> anyhow::Result<serde_json::Value> {
    // A kind no worker serves (the workers subscribe to noop only), capped,
    // with a finalizer so a deleted one waits for its teardown.
    let mut idle = work_manifest("idle");
    idle.finalizer_name = "load.converge.dev/idle".into();
    idle.reactions.push(Reaction {
        name: "teardown".into(),
        trigger: Trigger::DeleteRequested.into(),
        emits: vec![Emit::Finalizer.into()],
        ..Default::default()
    });
    idle.policy = Some(KindPolicy {
        max_inflight: 4,
        ..Default::default()
    });
    apply_kind(client, idle).await?;
    let requests = (0..IDLE_RESOURCES)
        .map(|i| ApplyResourceRequest {
            kind: "idle".into(),
            kind_version: 1,
            name: format!("idle-{i}"),
            ..Default::default()
        })
        .collect();
    client
        .resources()
        .batch_apply_resources(BatchApplyResourcesRequest {
            requests,
            ..Default::default()
        })
        .await?;
    for i in 0..IDLE_RESOURCES / 2 {
        client
            .resources()
            .delete_resource(DeleteResourceRequest {
                kind: "idle".into(),
                name: format!("idle-{i}"),
                ..Default::default()
            })
            .await?;
    }

    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |bound: usize| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((seed >> 33) as usize) % bound.max(1)
    };
    let half = IDLE_RESOURCES / 2;
    let mut shapes = serde_json::Map::new();
    let mut plan_text = String::new();
    for shape in ["ready", "queued_no_worker", "deleting"] {
        let mut millis = Vec::with_capacity(samples);
        let mut mismatched = 0usize;
        let mut first_name = None;
        for _ in 0..samples {
            let (kind, name) = match shape {
                "ready" => ("noop", format!("load-{}", next(total))),
                "queued_no_worker" => ("idle", format!("idle-{}", half + next(half))),
                _ => ("idle", format!("idle-{}", next(half))),
            };
            first_name.get_or_insert_with(|| (kind, name.clone()));
            let started = Instant::now();
            let answer = client
                .resources()
                .explain_resource(ExplainResourceRequest {
                    kind: kind.into(),
                    name,
                })
                .await?
                .into_inner();
            millis.push(started.elapsed().as_secs_f64() * 1000.0);
            let first = answer.waiting_for.first().and_then(|w| w.cause.as_ref());
            let expected = match shape {
                "ready" => first.is_none(),
                "queued_no_worker" => matches!(first, Some(WaitCause::NoWorker(_))),
                _ => matches!(first, Some(WaitCause::Deletion(_))),
            };
            mismatched += usize::from(!expected);
        }
        millis.sort_by(f64::total_cmp);
        let at = |q: f64| millis[((millis.len() - 1) as f64 * q).round() as usize];
        let (p50, p99, max) = (at(0.5), at(0.99), at(1.0));
        println!(
            "ExplainResource, {shape}: {samples} calls, p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms; \
             {mismatched} answers without the expected cause"
        );
        shapes.insert(
            shape.into(),
            json!({"calls": samples, "p50_ms": p50, "p99_ms": p99, "max_ms": max, "mismatched": mismatched}),
        );
        if let (Some(_), Some((kind, name))) = (plans, first_name) {
            let id: uuid::Uuid = sqlx::query_scalar("SELECT id FROM resources WHERE kind = $1 AND name = $2")
                .bind(kind)
                .bind(&name)
                .fetch_one(pool)
                .await?;
            let sql = format!("EXPLAIN (ANALYZE, BUFFERS) {}", converge_service::store::explain::FACTS);
            let lines: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                .bind(id)
                .bind(10_i32)
                .bind(10_i64)
                .fetch_all(pool)
                .await?;
            plan_text.push_str(&format!("-- {shape}: {kind}/{name}\n{}\n\n", lines.join("\n")));
        }
    }
    if let Some(path) = plans {
        std::fs::write(path, plan_text)?;
        println!("plans of the facts statement written to {}", path.display());
    }
    Ok(serde_json::Value::Object(shapes))
}

fn request(
    mode: Mode,
    i: usize,
    teams: usize,
    config_users: usize,
    labels: usize,
    children: usize,
) -> ApplyResourceRequest {
    match mode {
        Mode::Flat => ApplyResourceRequest {
            kind: "noop".into(),
            kind_version: 1,
            name: format!("load-{i}"),
            provider_config: (i < config_users).then(|| OVERRIDE.to_owned()),
            labels: if labels > 0 {
                BTreeMap::from([("team".to_owned(), format!("t{}", i % labels))])
            } else {
                BTreeMap::new()
            },
            ..Default::default()
        },
        Mode::Bom => {
            let teams: Vec<String> = (0..teams).map(|t| format!("team{t}")).collect();
            let spec =
                converge_sdk::worker::convert::json_to_struct(json!({"teams": teams, "region": "eu-west-1"}), "/spec")
                    .unwrap_or_default();
            ApplyResourceRequest {
                kind: "bom".into(),
                kind_version: 1,
                name: format!("load-{i}"),
                spec: Some(spec),
                ..Default::default()
            }
        }
        Mode::Stack => stack_request(i, labels, children, 0),
    }
}

fn kind_of(mode: Mode) -> &'static str {
    match mode {
        Mode::Flat => "noop",
        Mode::Bom => "bom",
        Mode::Stack => "stack",
    }
}

async fn ready_count(pool: &PgPool, mode: Mode) -> anyhow::Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM resources WHERE kind = $1 AND phase = 'Ready'")
            .bind(kind_of(mode))
            .fetch_one(pool)
            .await?,
    )
}

/// When the last resource of the run was synced (seconds since the epoch,
/// database clock).
async fn last_ready_at(pool: &PgPool, mode: Mode) -> anyhow::Result<f64> {
    let at: Option<f64> =
        sqlx::query_scalar("SELECT extract(epoch FROM max(last_reconciled_at))::float8 FROM resources WHERE kind = $1")
            .bind(kind_of(mode))
            .fetch_one(pool)
            .await?;
    at.context("nothing was synced")
}

/// Resources not yet synced (a scan of the whole table).
async fn lagging_count(pool: &PgPool) -> anyhow::Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM resources WHERE synced_gen < generation")
            .fetch_one(pool)
            .await?,
    )
}

/// p50/p95/p99 of apply→Ready in ms: the commit of the apply (created_at) to
/// the drain that synced the generation (last_reconciled_at), both on the
/// database clock.
async fn latency_percentiles(pool: &PgPool, mode: Mode) -> anyhow::Result<(f64, f64, f64)> {
    let row: (Option<f64>, Option<f64>, Option<f64>) = sqlx::query_as(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms),
                percentile_cont(0.95) WITHIN GROUP (ORDER BY ms),
                percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)
         FROM (SELECT (extract(epoch FROM last_reconciled_at - created_at) * 1000)::float8 AS ms
               FROM resources WHERE kind = $1 AND phase = 'Ready') l",
    )
    .bind(kind_of(mode))
    .fetch_one(pool)
    .await?;
    Ok((row.0.unwrap_or(0.0), row.1.unwrap_or(0.0), row.2.unwrap_or(0.0)))
}

/// CPU time and peak memory of the worker processes, summed.
struct WorkerUsage {
    cpu_secs: f64,
    rss_peak_mb: f64,
}

/// Reads the workers' user + system CPU time (/proc/<pid>/stat, in clock
/// ticks of 1/100 s on Linux) and peak RSS (VmHWM) while they still run.
fn worker_usage(workers: &[Child]) -> WorkerUsage {
    worker_usage_of(&workers.iter().collect::<Vec<_>>())
}

/// [`worker_usage`] of any processes.
fn worker_usage_of(processes: &[&Child]) -> WorkerUsage {
    let mut usage = WorkerUsage {
        cpu_secs: 0.0,
        rss_peak_mb: 0.0,
    };
    for pid in processes.iter().filter_map(|c| c.id()) {
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // Fields after the parenthesised command name; utime and stime
            // are fields 14 and 15 of the whole line.
            let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
            let fields: Vec<&str> = after.split_whitespace().collect();
            let ticks: f64 = [11, 12]
                .iter()
                .filter_map(|i| fields.get(*i).and_then(|f| f.parse::<f64>().ok()))
                .sum();
            usage.cpu_secs += ticks / 100.0;
        }
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            let kb: f64 = status
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            usage.rss_peak_mb += kb / 1024.0;
        }
    }
    usage
}

/// Resident set size of a process, from /proc.
fn rss_bytes(pid: u32) -> Option<i64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: i64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[allow(clippy::too_many_arguments)]
async fn sample(
    pool: PgPool,
    mode: Mode,
    total: usize,
    server_pid: Option<u32>,
    applied: Arc<AtomicI64>,
    peak_queue: Arc<AtomicI64>,
    peak_rss: Arc<AtomicI64>,
    lagging_now: Arc<AtomicI64>,
    started: Instant,
) {
    loop {
        // Counting a backlog of a million rows takes a noticeable share of
        // two cores: probe at most 5% of the time (every second while the
        // counts are cheap, less often as they grow).
        let probe = Instant::now();
        let queue: i64 = sqlx::query_scalar("SELECT count(*) FROM work_queue")
            .fetch_one(&pool)
            .await
            .unwrap_or(0);
        peak_queue.fetch_max(queue, Ordering::Relaxed);
        let rss = server_pid.and_then(rss_bytes).unwrap_or(0);
        peak_rss.fetch_max(rss, Ordering::Relaxed);
        // A flat resource is unsynced exactly while it has a task: its task
        // is queued by the insert and deleted by the sync's transaction. So
        // the queue count serves both, and the sampler scans one table, not
        // two (a scan of 100k resources took 43 ms, 2% of the database's
        // time in a 100k run).
        let lagging = match mode {
            Mode::Flat => queue,
            Mode::Bom | Mode::Stack => lagging_count(&pool).await.unwrap_or(i64::MAX),
        };
        lagging_now.store(lagging, Ordering::Relaxed);
        let pause = (probe.elapsed() * 19).max(Duration::from_secs(1));
        eprint!(
            "\r{:>6.1}s applied {}/{total}  not yet synced {lagging}  queue {queue}  server RSS {} MB   ",
            started.elapsed().as_secs_f64(),
            applied.load(Ordering::Relaxed),
            rss / 1048576
        );
        let _ = std::io::stderr().flush();
        tokio::time::sleep(pause).await;
    }
}

/// Durable single-row commits per second on this database: pgbench, 8
/// clients, each transaction one UPDATE of one of 1,000 rows.
async fn pgbench_ceiling(database_url: &str, secs: u64) -> anyhow::Result<f64> {
    let pool = PgPoolOptions::new().max_connections(1).connect(database_url).await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS load_ceiling (id integer PRIMARY KEY, n bigint NOT NULL DEFAULT 0)")
        .execute(&pool)
        .await?;
    sqlx::query("INSERT INTO load_ceiling (id) SELECT g FROM generate_series(1, 1000) g ON CONFLICT DO NOTHING")
        .execute(&pool)
        .await?;
    let script = tempfile::NamedTempFile::new()?;
    std::fs::write(
        script.path(),
        "\\set id random(1, 1000)\nUPDATE load_ceiling SET n = n + 1 WHERE id = :id;\n",
    )?;
    // pgbench ships with the server binaries the embedded launcher finds.
    let output = Command::new(find_bindir()?.join("pgbench"))
        .args(["-n", "-c", "8", "-j", "2", "-T", &secs.to_string(), "-f"])
        .arg(script.path())
        .arg(database_url)
        .output()
        .await
        .context("running pgbench")?;
    sqlx::query("DROP TABLE load_ceiling").execute(&pool).await?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "pgbench failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|t| t.parse().ok())
        .context("no tps in pgbench's output")
}

/// Samples what the database's busy backends wait on, ten times a second.
async fn sample_waits(pool: PgPool, waits: Arc<std::sync::Mutex<std::collections::BTreeMap<String, i64>>>) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT COALESCE(wait_event_type || ':' || wait_event, 'CPU'), count(*)
             FROM pg_stat_activity
             WHERE state = 'active' AND backend_type = 'client backend' AND pid <> pg_backend_pid()
             GROUP BY 1",
        )
        .fetch_all(&pool)
        .await
        .unwrap_or_default();
        if let Ok(mut waits) = waits.lock() {
            for (event, n) in rows {
                *waits.entry(event).or_default() += n;
            }
        }
    }
}

/// Prints the top statements by total time and the sampled wait events.
async fn print_profile(
    pool: &PgPool,
    waits: &std::sync::Mutex<std::collections::BTreeMap<String, i64>>,
) -> anyhow::Result<()> {
    let top: Vec<(String, i64, f64, f64)> = sqlx::query_as(
        "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 110), calls,
                total_exec_time, mean_exec_time
         FROM pg_stat_statements
         WHERE query NOT ILIKE '%pg_stat%'
         ORDER BY total_exec_time DESC LIMIT 15",
    )
    .fetch_all(pool)
    .await?;
    println!("top statements by total time (pg_stat_statements):");
    for (query, calls, total, mean) in top {
        println!("  {total:>9.0} ms {calls:>8} calls {mean:>7.3} ms/call  {query}");
    }
    let mut events: Vec<(String, i64)> = waits
        .lock()
        .map(|w| w.iter().map(|(k, v)| (k.clone(), *v)).collect())
        .unwrap_or_default();
    events.sort_by_key(|e| std::cmp::Reverse(e.1));
    let total: i64 = events.iter().map(|e| e.1).sum();
    println!("sampled active backends by wait event (CPU = not waiting):");
    for (event, n) in events.iter().take(10) {
        println!("  {:>5.1}%  {event}", *n as f64 * 100.0 / total.max(1) as f64);
    }
    Ok(())
}

/// Label groups of stack mode: root i and its children carry
/// `team=t{i % groups}`, one group per watcher.
fn stack_groups(args: &Args) -> usize {
    if args.mode == Mode::Stack {
        args.watchers.max(1)
    } else {
        0
    }
}

/// `stack`: one `cell` child per entry of `spec.cells`, named after the root,
/// carrying the root's `team` label and its `rev`; Ready when every child is
/// (a composition declared as data, evaluated by the server).
fn stack_manifest() -> anyhow::Result<KindManifest> {
    let object = |value: serde_json::Value| {
        converge_sdk::worker::convert::json_to_struct(value, "/spec").map_err(|e| anyhow::anyhow!("{e:?}"))
    };
    Ok(KindManifest {
        kind: "stack".into(),
        kind_version: 1,
        description: "converge-load: a root composing cells (composition as data)".into(),
        composition: Some(Composition {
            resources: vec![ComposedResource {
                id: "cells".into(),
                kind: "cell".into(),
                kind_version: 1,
                name: "${metadata.name}-${each}".into(),
                for_each: "spec.cells".into(),
                labels: BTreeMap::from([("team".to_owned(), "${metadata.labels.team}".to_owned())]),
                spec: Some(object(json!({"rev": "${spec.rev}"}))?),
                ..Default::default()
            }],
            rollup: Some(converge_integration::kinds::cells_rollup()),
        }),
        ..Default::default()
    })
}

/// Root `load-{i}` of stack mode, composing `children` cells, at `rev`.
fn stack_request(i: usize, groups: usize, children: usize, rev: u64) -> ApplyResourceRequest {
    let cells: Vec<String> = (0..children).map(|c| format!("c{c}")).collect();
    let spec =
        converge_sdk::worker::convert::json_to_struct(json!({"cells": cells, "rev": rev}), "/spec").unwrap_or_default();
    ApplyResourceRequest {
        kind: "stack".into(),
        kind_version: 1,
        name: format!("load-{i}"),
        labels: BTreeMap::from([("team".to_owned(), format!("t{}", i % groups.max(1)))]),
        spec: Some(spec),
        ..Default::default()
    }
}

/// Stack mode, once every root is Ready: rollup latency per root (its
/// Ready commit minus its last child's sync commit, database clock, as
/// compose-bench measures it), the children counted, and the database's size.
async fn measure_stack(pool: &PgPool) -> anyhow::Result<serde_json::Value> {
    let row = rollup_latency(pool, 1).await?;
    let sizes: (i64, i64, i64) = sqlx::query_as(
        "SELECT pg_database_size(current_database()), pg_total_relation_size('resources'),
                pg_total_relation_size('resource_changes')",
    )
    .fetch_one(pool)
    .await?;
    let mb = |b: i64| b as f64 / 1048576.0;
    println!(
        "rollup latency after the last child settles ({} roots, {} children): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        row.3,
        row.4,
        row.0.unwrap_or(0.0),
        row.1.unwrap_or(0.0),
        row.2.unwrap_or(0.0)
    );
    println!(
        "database {:.0} MB (resources {:.0} MB, change log {:.0} MB)",
        mb(sizes.0),
        mb(sizes.1),
        mb(sizes.2)
    );
    Ok(json!({
        "roots_ready": row.3,
        "children": row.4,
        "rollup_ms": {"p50": row.0, "p99": row.1, "max": row.2},
        "database_mb": mb(sizes.0),
        "resources_table_mb": mb(sizes.1),
        "change_log_mb": mb(sizes.2),
    }))
}

/// Rollup latency of the Ready roots at `generation` or above, in ms (p50,
/// p99, max), with the roots and their children counted: a root's Ready
/// commit (the rollup's drain) minus its last child's sync commit.
async fn rollup_latency(
    pool: &PgPool,
    generation: i64,
) -> anyhow::Result<(Option<f64>, Option<f64>, Option<f64>, i64, i64)> {
    Ok(sqlx::query_as(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms),
                percentile_cont(0.99) WITHIN GROUP (ORDER BY ms),
                max(ms), count(*), coalesce(sum(children), 0)::bigint
         FROM (SELECT (extract(epoch FROM r.last_reconciled_at - c.last) * 1000)::float8 AS ms, c.children
               FROM resources r
               JOIN (SELECT owner_id, max(last_reconciled_at) AS last, count(*) AS children
                     FROM resources WHERE owner_id IS NOT NULL GROUP BY owner_id) c ON c.owner_id = r.id
               WHERE r.kind = 'stack' AND r.phase = 'Ready' AND r.generation >= $1) l",
    )
    .bind(generation)
    .fetch_one(pool)
    .await?)
}

/// The newest change-log position.
async fn log_head(pool: &PgPool) -> anyhow::Result<Position> {
    let head: Option<(i64, i64)> =
        sqlx::query_as("SELECT txid, seq FROM resource_changes ORDER BY txid DESC, seq DESC LIMIT 1")
            .fetch_optional(pool)
            .await?;
    Ok(head.map(|(txid, seq)| Position { txid, seq }).unwrap_or_default())
}

/// Per label group, the position of its newest change (rv_* is the
/// position of a resource's latest change).
async fn group_heads(pool: &PgPool) -> anyhow::Result<BTreeMap<String, Position>> {
    let rows: Vec<(Option<String>, i64, i64)> = sqlx::query_as(
        "SELECT DISTINCT ON (labels->>'team') labels->>'team', rv_txid, rv_seq
         FROM resources ORDER BY labels->>'team', rv_txid DESC, rv_seq DESC",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(g, txid, seq)| Some((g?, Position { txid, seq })))
        .collect())
}

/// The resuming watcher, once back.
struct Resumed {
    /// Where it left.
    from: Position,
    /// When it left and came back (seconds since the epoch).
    left: f64,
    returned: f64,
    /// The log's head when it came back.
    head: Position,
    watcher: Watcher,
}

/// The watchers of a stack run (see `--watchers`).
struct Watchers {
    groups: Vec<Watcher>,
    firehose: Vec<Watcher>,
    leave: Option<tokio::sync::oneshot::Sender<()>>,
    resumed: Option<tokio::task::JoinHandle<anyhow::Result<Resumed>>>,
    back: tokio::sync::watch::Receiver<bool>,
}

impl Watchers {
    async fn open(
        pool: &PgPool,
        address: &str,
        pki: Option<&LoadPki>,
        groups: usize,
        firehose: usize,
        away_secs: u64,
    ) -> anyhow::Result<Self> {
        let started = Instant::now();
        let mut group_watchers = Vec::with_capacity(groups);
        for g in 0..groups {
            let filter = WatchResourcesRequest {
                label_selector: format!("team=t{g}"),
                ..Default::default()
            };
            group_watchers.push(Watcher::start(connect(address, pki).await?, filter, None, false).await?);
        }
        let mut firehose_watchers = Vec::with_capacity(firehose);
        for _ in 0..firehose {
            firehose_watchers
                .push(Watcher::start(connect(address, pki).await?, Default::default(), None, false).await?);
        }
        let (leave, left) = tokio::sync::oneshot::channel();
        let (back_tx, back) = tokio::sync::watch::channel(away_secs == 0);
        let resumed = if away_secs > 0 {
            let client = connect(address, pki).await?;
            let first = Watcher::start(client.clone(), Default::default(), None, false).await?;
            let probe = pool.clone();
            Some(tokio::spawn(async move {
                let _ = left.await;
                let from = first.position();
                first.stop().await?;
                let left = watchers::now_epoch();
                eprintln!("\nresuming watcher: left at {from}, back in {away_secs} s");
                tokio::time::sleep(Duration::from_secs(away_secs)).await;
                let head = log_head(&probe).await?;
                let returned = watchers::now_epoch();
                let watcher = Watcher::start(client, Default::default(), Some(from), true).await?;
                let _ = back_tx.send(true);
                eprintln!("\nresuming watcher: back from {from}, head {head}");
                anyhow::Ok(Resumed {
                    from,
                    left,
                    returned,
                    head,
                    watcher,
                })
            }))
        } else {
            None
        };
        eprintln!(
            "{} watchers open ({groups} label groups, {firehose} firehose{}) in {:.1} s",
            groups + firehose + usize::from(away_secs > 0),
            if away_secs > 0 { ", 1 resuming" } else { "" },
            started.elapsed().as_secs_f64()
        );
        Ok(Self {
            groups: group_watchers,
            firehose: firehose_watchers,
            leave: Some(leave),
            resumed,
            back,
        })
    }

    /// The resuming watcher leaves now.
    fn leave(&mut self) {
        if let Some(leave) = self.leave.take() {
            let _ = leave.send(());
        }
    }

    /// Once every root is Ready: notes how far behind each watcher is when
    /// the run's last change commits; keeps changing one root a second while
    /// the resuming watcher is still away; waits until it is back and has
    /// caught up, and until the trees are Ready again and every watcher has
    /// received its last change; then closes them all and reports.
    #[allow(clippy::too_many_arguments)]
    async fn finish(
        mut self,
        client: &Client,
        pool: &PgPool,
        trees: usize,
        groups: usize,
        children: usize,
        churn_roots: usize,
        deadline: Instant,
        server_pid: Option<u32>,
        peak_rss: &AtomicI64,
    ) -> anyhow::Result<serde_json::Value> {
        self.leave();
        // The run's last change: the newest update, and what each watcher is due.
        let last_change: f64 = sqlx::query_scalar("SELECT extract(epoch FROM max(updated_at))::float8 FROM resources")
            .fetch_one(pool)
            .await?;
        let run_head = log_head(pool).await?;
        let run_group_heads = group_heads(pool).await?;
        let run_entries: i64 = sqlx::query_scalar("SELECT count(*) FROM resource_changes")
            .fetch_one(pool)
            .await?;

        // While the resuming watcher is away, keep changing things.
        let mut churned = 0usize;
        let mut rev = 0u64;
        while !*self.back.borrow() || churned < churn_roots {
            if churned.is_multiple_of(trees.max(1)) {
                rev += 1;
            }
            client
                .resources()
                .apply_resource(stack_request(churned % trees.max(1), groups, children, rev))
                .await?;
            churned += 1;
            if let Some(rss) = server_pid.and_then(rss_bytes) {
                peak_rss.fetch_max(rss, Ordering::Relaxed);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        if churned > 0 {
            eprintln!("changed {churned} roots, one a second, after all were Ready");
        }
        let resumed = match self.resumed.take() {
            Some(task) => Some(task.await??),
            None => None,
        };
        // Settle: the changed trees Ready again, every watcher at its last change.
        loop {
            if let Some(rss) = server_pid.and_then(rss_bytes) {
                peak_rss.fetch_max(rss, Ordering::Relaxed);
            }
            if lagging_count(pool).await? == 0 && ready_count(pool, Mode::Stack).await? >= trees as i64 {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the changed trees were not Ready within the timeout"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        // The roots changed while the watcher was away settled one at a
        // time on a loaded system: their rollup latency without a backlog.
        let churn_rollup = if churned > 0 {
            let (p50, p99, max, roots, _) = rollup_latency(pool, 2).await?;
            println!(
                "rollup latency of the {roots} roots changed one a second: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
                p50.unwrap_or(0.0),
                p99.unwrap_or(0.0),
                max.unwrap_or(0.0)
            );
            Some(json!({"roots": roots, "p50": p50, "p99": p99, "max": max}))
        } else {
            None
        };
        let final_head = log_head(pool).await?;
        let final_group_heads = group_heads(pool).await?;
        let settle_deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let mut behind = 0;
            for (g, w) in self.groups.iter().enumerate() {
                let due = final_group_heads.get(&format!("t{g}")).copied().unwrap_or_default();
                behind += usize::from(w.position() < due);
            }
            behind += self.firehose.iter().filter(|w| w.position() < final_head).count();
            if let Some(r) = &resumed {
                behind += usize::from(r.watcher.position() < final_head);
            }
            if behind == 0 {
                break;
            }
            anyhow::ensure!(
                Instant::now() < settle_deadline,
                "{behind} watchers never received their last change"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        // Close and report.
        let mut group_logs = Vec::with_capacity(self.groups.len());
        for w in self.groups {
            group_logs.push(w.stop().await?);
        }
        let mut firehose_logs = Vec::with_capacity(self.firehose.len());
        for w in self.firehose {
            firehose_logs.push(w.stop().await?);
        }
        let summarize = |logs: &[WatchLog], due: &dyn Fn(usize) -> Position| {
            let mut latencies: Vec<f32> = Vec::new();
            let mut lags: Vec<f32> = Vec::new();
            let mut behind: Vec<f32> = Vec::new();
            let mut resumes = 0u32;
            let mut messages = 0usize;
            for (i, log) in logs.iter().enumerate() {
                let due = due(i);
                messages += log.seen.len();
                resumes += log.resumes;
                latencies.extend(log.seen.iter().filter(|s| s.position <= due).map(|s| s.latency_ms));
                let reached = log.reached_at(due).unwrap_or(f64::INFINITY);
                lags.push((((reached - last_change) * 1000.0).max(0.0)) as f32);
                behind.push(log.behind_at(last_change, due) as f32);
            }
            latencies.sort_by(f32::total_cmp);
            lags.sort_by(f32::total_cmp);
            behind.sort_by(f32::total_cmp);
            json!({
                "watchers": logs.len(),
                "messages": messages,
                "messages_in_run": latencies.len(),
                "resumes_after_cutoff": resumes,
                "latency_ms": {
                    "p50": watchers::percentile(&latencies, 0.5),
                    "p99": watchers::percentile(&latencies, 0.99),
                    "max": watchers::percentile(&latencies, 1.0),
                },
                "end_lag_ms": {
                    "p50": watchers::percentile(&lags, 0.5),
                    "max": watchers::percentile(&lags, 1.0),
                },
                "behind_at_end": {
                    "p50": watchers::percentile(&behind, 0.5),
                    "max": watchers::percentile(&behind, 1.0),
                },
            })
        };
        let group_due = |g: usize| run_group_heads.get(&format!("t{g}")).copied().unwrap_or_default();
        let groups_summary = summarize(&group_logs, &group_due);
        let firehose_summary = summarize(&firehose_logs, &|_| run_head);

        let resume = match resumed {
            Some(r) => {
                let (from, left, returned, head) = (r.from, r.left, r.returned, r.head);
                let log = r.watcher.stop().await?;
                let entries: Vec<(i64, i64, uuid::Uuid)> = sqlx::query_as(
                    "SELECT txid, seq, resource_id FROM resource_changes
                     WHERE (txid, seq) > ($1, $2) AND (txid, seq) <= ($3, $4) ORDER BY txid, seq",
                )
                .bind(from.txid)
                .bind(from.seq)
                .bind(final_head.txid)
                .bind(final_head.seq)
                .fetch_all(pool)
                .await?;
                let entries: Vec<(Position, uuid::Uuid)> = entries
                    .into_iter()
                    .map(|(txid, seq, id)| (Position { txid, seq }, id))
                    .collect();
                let received: Vec<(Position, uuid::Uuid)> = log
                    .seen
                    .iter()
                    .zip(&log.ids)
                    .filter(|(s, _)| s.position <= final_head)
                    .map(|(s, id)| (s.position, *id))
                    .collect();
                let check = watchers::exactly_once(&entries, &received);
                let caught_up = log.reached_at(head).map(|t| t - returned);
                let caught_up_messages = log.seen.iter().filter(|s| s.position <= head).count();
                println!(
                    "resumed watcher: away {:.0} s from {from}; caught up to the head at its return ({head}, {caught_up_messages} changes) in {}; {} changes received for {} log entries of {} resources: duplicated {}, unknown {}, missed {}; {} cut-offs",
                    returned - left,
                    caught_up.map_or_else(|| "never".to_owned(), |s| format!("{s:.1} s")),
                    check.received,
                    check.entries,
                    check.resources,
                    check.duplicated,
                    check.unknown,
                    check.missed,
                    log.resumes
                );
                Some(json!({
                    "away_secs": returned - left,
                    "from": from.to_string(),
                    "head_at_return": head.to_string(),
                    "catch_up_secs": caught_up,
                    "catch_up_messages": caught_up_messages,
                    "exactly_once": check.holds(),
                    "check": check,
                    "resumes_after_cutoff": log.resumes,
                }))
            }
            None => None,
        };
        let field = |v: &serde_json::Value, path: &str| match v.pointer(path) {
            Some(serde_json::Value::Number(n)) if n.is_f64() => format!("{:.1}", n.as_f64().unwrap_or_default()),
            Some(other) => other.to_string(),
            None => "n/a".to_owned(),
        };
        for (name, summary) in [("label-group", &groups_summary), ("firehose", &firehose_summary)] {
            println!(
                "{} {name} watchers: {} changes delivered ({} in the run); change->delivery p50 {} ms, p99 {} ms, max {} ms; at the run's last change: lag p50 {} ms, max {} ms, behind p50 {}, max {} changes; {} cut-offs resumed",
                field(summary, "/watchers"),
                field(summary, "/messages"),
                field(summary, "/messages_in_run"),
                field(summary, "/latency_ms/p50"),
                field(summary, "/latency_ms/p99"),
                field(summary, "/latency_ms/max"),
                field(summary, "/end_lag_ms/p50"),
                field(summary, "/end_lag_ms/max"),
                field(summary, "/behind_at_end/p50"),
                field(summary, "/behind_at_end/max"),
                field(summary, "/resumes_after_cutoff"),
            );
        }
        Ok(json!({
            "log_entries_in_run": run_entries,
            "run_head": run_head.to_string(),
            "churned_roots": churned,
            "churned_rollup_ms": churn_rollup,
            "groups": groups_summary,
            "firehose": firehose_summary,
            "resume": resume,
        }))
    }
}
