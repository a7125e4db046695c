//! `store-bench`: reads at scale (issue 48, "10M stored"). Bulk-loads N
//! resources of one kind straight into the database with SQL, then times,
//! through the gRPC API of a `converge serve` process, the reads an
//! operator makes: GetResource, ListResources (first page, a deep keyset
//! page, a label-selected page, first and deep, and a first page of a rarer
//! label), GetFleetSummary (from the
//! snapshot and counted fresh) and ExplainResource (a Ready, a queued and a
//! Failed resource): p50, p99, mean and max of each. It then runs the same
//! reads once more through the store layer's own functions on a connection
//! with `auto_explain` loaded, so every statement a read runs is shown with
//! its `EXPLAIN (ANALYZE, BUFFERS)` plan, and reports which use an index.
//! Also the load time, the database's and the resources table's sizes and
//! the host's load averages.
//!
//! By default it starts a durable embedded PostgreSQL (production settings)
//! in `--data-dir`, which is kept: `--reuse` skips the load when the rows
//! are there, `--remove` deletes the directory at the end. The load is
//! resumable: it continues after the rows already loaded.
//!
//! ```sh
//! cargo build --release --bin converge --bin store-bench
//! target/release/store-bench --resources 10000000 --json store.json --plans store-plans.txt
//! target/release/store-bench --resources 10000000 --reuse --json store.json   # measure again
//! ```
//!
//! What the load writes (a resource as the engine leaves it, without its
//! history): `resources` rows (labels `team` (100 values), `env` (3), `app`
//! (1,000), a small spec and status; 98.3% Ready, 1% Reconciling, 0.5%
//! Failed, 0.2% Degraded), the `Synced=False` condition of each Failed one
//! and the queued reconcile task of each Reconciling one. Not written: the
//! events, the change log and the spec revisions (no read here uses them).
//! The rows go in with triggers off (`session_replication_role = replica`,
//! which needs a superuser), so the change log stays empty.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::str::FromStr as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use converge_integration::bench::{Latency, durable_postgres};
use converge_integration::kinds::{apply_kind, work_manifest};
use converge_integration::processes::{connect_when_up, converge_process_with, free_local_addr};
use converge_proto::v1::{
    ExplainResourceRequest, GetFleetSummaryRequest, GetResourceRequest, ListResourcesRequest, Phase as ProtoPhase,
};
use converge_sdk::Client;
use converge_service::domain::labels::LabelSelector;
use converge_service::domain::page_token::{PageToken, PositionPart};
use converge_service::store::resources::{ListCursor, ResourceFilter};
use converge_service::store::summary::SummaryFilter;
use converge_service::store::{explain, resources, summary, unserved};
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tracing_subscriber::layer::SubscriberExt as _;

/// The kind the load stores.
const KIND: &str = "stored";
/// The label selector of the label-selected pages (1% of the resources).
const SELECTOR: &str = "team=t42";
/// A rarer label (0.1%: 1,000 values of `app`).
const RARE_SELECTOR: &str = "app=app-42";
/// The cluster liveness window the server runs with (its default).
const LIVENESS_SECS: i32 = 15;
/// The failure reasons a summary lists by default.
const TOP_FAILURES: usize = 10;

/// Bulk-load N resources and time the reads at that size.
#[derive(Debug, Parser)]
#[command(name = "store-bench", about)]
struct Args {
    /// Resources to store.
    #[arg(long, default_value_t = 10_000_000)]
    resources: u64,
    /// Resources per INSERT statement (one transaction each).
    #[arg(long, default_value_t = 1_000_000)]
    chunk: u64,
    /// The embedded cluster's directory, kept after the run.
    #[arg(long, default_value_os_t = std::env::temp_dir().join("converge-store-bench"))]
    data_dir: PathBuf,
    /// An existing database instead of the embedded one (converge migrates
    /// it; the load needs a superuser).
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
    /// Do not load: the database already holds the resources.
    #[arg(long)]
    reuse: bool,
    /// Timed calls per read.
    #[arg(long, default_value_t = 500)]
    samples: usize,
    /// Timed fresh fleet summaries (each counts every resource).
    #[arg(long, default_value_t = 10)]
    fresh_samples: usize,
    /// Untimed calls before each read's timed ones.
    #[arg(long, default_value_t = 10)]
    warmup: usize,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the plans of every read's statements here.
    #[arg(long)]
    plans: Option<PathBuf>,
    /// Delete --data-dir at the end.
    #[arg(long)]
    remove: bool,
}

/// What resource `i` (from 1) looks like; mirrors the CASE of [`LOAD_CHUNK`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Ready,
    Queued,
    Failed,
    Degraded,
}

fn shape_of(i: u64) -> Shape {
    if i.is_multiple_of(200) {
        Shape::Failed
    } else if i % 100 == 1 {
        Shape::Queued
    } else if i % 500 == 3 {
        Shape::Degraded
    } else {
        Shape::Ready
    }
}

fn name_of(i: u64) -> String {
    format!("r-{i:08}")
}

/// Resources $1..=$2 of the kind, created 250 ms apart from $4 (epoch
/// seconds) on; $3 is the kind's manifest version for the queued tasks.
/// Run with triggers off, inside one transaction.
const LOAD_CHUNK: &str = "
WITH src AS (
    SELECT i, 1 + i % 4 AS gen, to_timestamp($4 + i * 0.25) AS born,
           CASE WHEN i % 200 = 0 THEN 'failed' WHEN i % 100 = 1 THEN 'queued'
                WHEN i % 500 = 3 THEN 'degraded' ELSE 'ready' END AS shape
    FROM generate_series($1::bigint, $2::bigint) AS i
),
shaped AS (
    SELECT src.*, CASE WHEN shape IN ('ready', 'degraded') THEN gen ELSE gen - 1 END AS synced FROM src
),
created AS (
    INSERT INTO resources (kind, kind_version, name, labels, spec, status, generation, synced_gen, health_ok,
                           failure_gen, failure_attempts, last_reconciled_at, created_at, updated_at)
    SELECT 'stored', 1, 'r-' || lpad(i::text, 8, '0'),
           jsonb_build_object('team', 't' || i % 100, 'env', (ARRAY['dev', 'staging', 'prod'])[1 + i % 3],
                              'app', 'app-' || i % 1000),
           jsonb_build_object('image', 'registry.example/app-' || i % 1000 || ':v' || gen, 'replicas', 1 + i % 5,
                              'region', (ARRAY['eu-west-1', 'us-east-1', 'ap-south-1'])[1 + i % 3],
                              'ports', jsonb_build_array(8080, 9090)),
           CASE WHEN synced > 0 THEN jsonb_build_object('endpoint', 'http://app-' || i || '.internal:8080',
                                                        'observedGeneration', synced) END,
           gen, synced, shape <> 'degraded',
           CASE WHEN shape = 'failed' THEN gen ELSE 0 END,
           CASE WHEN shape = 'failed' THEN 3 ELSE 0 END,
           CASE WHEN synced > 0 THEN born + interval '2 seconds' END,
           born, born + interval '2 seconds'
    FROM shaped ORDER BY i
    RETURNING id, kind, kind_version, generation, phase, shard_id
),
failed AS (
    INSERT INTO resource_conditions (resource_id, type, status, reason, message, observed_generation)
    SELECT id, 'Synced', 'False', 'ReconcileFailed', 'store-bench: the provider refused the spec', generation
    FROM created WHERE phase = 'Failed'
    RETURNING 1
),
queued AS (
    INSERT INTO work_queue (resource_id, task_type, kind, kind_version, generation, manifest_version, shard_id)
    SELECT id, 'reconcile', kind, kind_version, generation, $3, shard_id
    FROM created WHERE phase = 'Reconciling' ORDER BY id
    RETURNING 1
)
SELECT (SELECT count(*) FROM created), (SELECT count(*) FROM failed), (SELECT count(*) FROM queued)";

/// Sqlx's notices (auto_explain's plans on the plan pool), collected.
#[derive(Clone, Default)]
struct Notices(Arc<Mutex<Vec<String>>>);

impl Notices {
    fn take(&self) -> Vec<String> {
        self.0.lock().map(|mut n| std::mem::take(&mut *n)).unwrap_or_default()
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Notices {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "message" {
                    value.clone_into(&mut self.0);
                }
            }
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" && self.0.is_empty() {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        if let Ok(mut notices) = self.0.lock() {
            notices.push(message.0);
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let notices = Notices::default();
    let filter =
        tracing_subscriber::filter::Targets::new().with_target("sqlx::postgres::notice", tracing::Level::TRACE);
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(tracing_subscriber::Layer::with_filter(notices.clone(), filter)),
    )?;

    // The database: given, or the embedded one in --data-dir.
    let (database_url, embedded) = match &args.database_url {
        Some(url) => (url.clone(), None),
        None => {
            std::fs::create_dir_all(&args.data_dir)?;
            // The server may run as another user (as root: `postgres`).
            std::fs::set_permissions(&args.data_dir, std::fs::Permissions::from_mode(0o755))?;
            // The durable defaults, but a smaller WAL: the load writes the
            // whole table once, and 4 GB of WAL beside it would not fit the
            // disks this runs on. Reads do not touch the WAL.
            let settings = [("max_wal_size".to_owned(), "1GB".to_owned())];
            let (server, url) = durable_postgres(&args.data_dir.join("db"), "converge_store", &settings).await?;
            (url, Some(server))
        }
    };
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect_with(PgConnectOptions::from_str(&database_url)?)
        .await?;

    // converge migrates the database and serves the API.
    let addr = free_local_addr()?;
    let log = args.data_dir.join("converge.log");
    std::fs::create_dir_all(&args.data_dir)?;
    let mut server = converge_process_with(&database_url, &addr, &log, &[])
        .context("starting converge (build it with --bin converge, next to store-bench)")?;
    let client = connect_when_up(&format!("http://{addr}")).await?;
    apply_kind(&client, work_manifest(KIND)).await?;
    let manifest_version: i64 =
        sqlx::query_scalar("SELECT manifest_version FROM kind_config WHERE kind = $1 AND kind_version = 1")
            .bind(KIND)
            .fetch_one(&pool)
            .await?;

    let load = load(&pool, &args, manifest_version).await?;
    let total = args.resources;

    let load_before = load_average();
    eprintln!("measuring through the API (load average {load_before})");
    let mut reads = serde_json::Map::new();
    let mut plans = Vec::new();
    let timed = Timer {
        samples: args.samples,
        warmup: args.warmup,
    };

    // GetResource, random names.
    let mut rng = Lcg(0x2545_f491_4f6c_dd1d);
    let latency = timed
        .run("GetResource", |_| {
            let name = name_of(1 + rng.below(total));
            let client = client.clone();
            async move {
                let resource = client
                    .resources()
                    .get_resource(GetResourceRequest {
                        kind: KIND.into(),
                        name: name.clone(),
                    })
                    .await?
                    .into_inner()
                    .resource
                    .context("no resource")?;
                anyhow::ensure!(resource.name == name, "asked {name}, got {}", resource.name);
                Ok(())
            }
        })
        .await?;
    reads.insert("get".into(), latency.to_json());

    // ListResources: first pages and deep keyset pages, all and label-selected.
    let deep = total / 2;
    let selected = total / 100 / 2;
    for (key, selector, page_size, offset) in [
        ("list_first_100", "", 0, None),
        ("list_first_1000", "", 1000, None),
        ("list_deep_100", "", 0, Some(deep)),
        ("list_deep_1000", "", 1000, Some(deep)),
        ("list_label_first_100", SELECTOR, 0, None),
        ("list_label_deep_100", SELECTOR, 0, Some(selected)),
        ("list_rare_label_first_100", RARE_SELECTOR, 0, None),
    ] {
        let (token, expected) = match offset {
            Some(offset) => {
                let (token, expected) = deep_token(&client, &pool, selector, offset).await?;
                (token, Some(expected))
            }
            None => (String::new(), None),
        };
        let size = usize::try_from(if page_size == 0 { 100 } else { page_size })?;
        let label = format!("ListResources {key}");
        let latency = timed
            .run(&label, |_| {
                let (client, token, expected) = (client.clone(), token.clone(), expected.clone());
                async move {
                    let page = client
                        .resources()
                        .list_resources(ListResourcesRequest {
                            kind: Some(KIND.into()),
                            label_selector: selector.into(),
                            page_size,
                            page_token: token,
                            ..Default::default()
                        })
                        .await?
                        .into_inner();
                    anyhow::ensure!(page.resources.len() == size, "a page of {}", page.resources.len());
                    if let Some(expected) = expected {
                        let first = &page.resources[0].name;
                        anyhow::ensure!(*first == expected, "the deep page starts at {first}, not {expected}");
                    }
                    if let Some((key, value)) = selector.split_once('=') {
                        anyhow::ensure!(
                            page.resources
                                .iter()
                                .all(|r| r.labels.get(key).map(String::as_str) == Some(value)),
                            "a resource outside {selector}"
                        );
                    }
                    Ok(())
                }
            })
            .await?;
        let mut figures = latency.to_json();
        figures["offset"] = json!(offset.unwrap_or(0));
        figures["page_size"] = json!(size);
        reads.insert(key.into(), figures);
    }

    // GetFleetSummary: fresh counts first (the first also takes the snapshot
    // when there is none), then the snapshot an operator's calls read.
    for (key, fresh, samples) in [
        ("summary_fresh", true, args.fresh_samples),
        ("summary_snapshot", false, args.samples),
    ] {
        let timer = Timer {
            samples,
            warmup: if fresh { 1 } else { args.warmup },
        };
        let latency = timer
            .run(key, |_| {
                let client = client.clone();
                async move {
                    let answer = client
                        .admin()
                        .get_fleet_summary(GetFleetSummaryRequest {
                            fresh,
                            ..Default::default()
                        })
                        .await?
                        .into_inner();
                    anyhow::ensure!(
                        u64::try_from(answer.total).unwrap_or(0) >= total,
                        "a summary counted {} of {total}",
                        answer.total
                    );
                    Ok(())
                }
            })
            .await?;
        reads.insert(key.into(), latency.to_json());
    }

    // ExplainResource on three shapes.
    for (key, shape, phase) in [
        ("explain_ready", Shape::Ready, ProtoPhase::Ready),
        ("explain_queued", Shape::Queued, ProtoPhase::Reconciling),
        ("explain_failed", Shape::Failed, ProtoPhase::Failed),
    ] {
        let latency = timed
            .run(key, |_| {
                let name = name_of(rng.of_shape(shape, total));
                let client = client.clone();
                async move {
                    let answer = client
                        .resources()
                        .explain_resource(ExplainResourceRequest {
                            kind: KIND.into(),
                            name: name.clone(),
                        })
                        .await?
                        .into_inner();
                    let resource = answer.resource.context("no resource")?;
                    anyhow::ensure!(resource.phase == phase as i32, "{name} is in phase {}", resource.phase);
                    Ok(())
                }
            })
            .await?;
        reads.insert(key.into(), latency.to_json());
    }
    let load_after = load_average();

    // The plans: the same reads once more through the store functions the
    // API calls, with auto_explain logging every statement back as a notice.
    eprintln!("plans of every read's statements");
    let plan_pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(PgConnectOptions::from_str(&database_url)?.options([
            ("session_preload_libraries", "auto_explain"),
            ("auto_explain.log_min_duration", "0"),
            ("auto_explain.log_analyze", "on"),
            ("auto_explain.log_buffers", "on"),
            ("auto_explain.log_nested_statements", "on"),
            ("auto_explain.log_level", "notice"),
        ]))
        .await?;
    let mut index_use = serde_json::Map::new();
    let mut plan_text = String::new();
    {
        let p = &plan_pool;
        let all = ResourceFilter {
            kind: Some(KIND.into()),
            ..Default::default()
        };
        let labelled = ResourceFilter {
            selector: LabelSelector::from_str(SELECTOR)?,
            ..all.clone()
        };
        let deep_cursor = cursor_at(&pool, "", deep).await?;
        let selected_cursor = cursor_at(&pool, SELECTOR, selected).await?;
        let get_name = name_of(1 + rng.below(total));
        let ready = name_of(rng.of_shape(Shape::Ready, total));
        let queued = name_of(rng.of_shape(Shape::Queued, total));
        let failed = name_of(rng.of_shape(Shape::Failed, total));
        notices.take();
        let mut capture = |key: &str, what: String| {
            let statements = notices.take();
            let verdict = verdict(&statements);
            plan_text.push_str(&format!("==== {key}: {what}\n-- {verdict}\n\n"));
            for statement in &statements {
                plan_text.push_str(statement);
                plan_text.push_str("\n\n");
            }
            index_use.insert(key.into(), json!(verdict));
            plans.push(json!({"read": key, "call": what, "verdict": verdict, "statements": statements}));
        };
        resources::get(p, KIND, &get_name).await?;
        capture("get", format!("store::resources::get({KIND}, {get_name})"));
        resources::list(p, &all, None, 101).await?;
        capture(
            "list_first_100",
            "store::resources::list(kind, first page, 100 + 1)".into(),
        );
        resources::list(p, &all, Some(deep_cursor.0), 101).await?;
        capture(
            "list_deep_100",
            format!("store::resources::list(kind, after row {deep}, 100 + 1)"),
        );
        resources::list(p, &labelled, None, 101).await?;
        capture(
            "list_label_first_100",
            format!("store::resources::list(kind, {SELECTOR}, first page, 100 + 1)"),
        );
        resources::list(p, &labelled, Some(selected_cursor.0), 101).await?;
        capture(
            "list_label_deep_100",
            format!("store::resources::list(kind, {SELECTOR}, after match {selected}, 100 + 1)"),
        );
        let rare = ResourceFilter {
            selector: LabelSelector::from_str(RARE_SELECTOR)?,
            ..all.clone()
        };
        resources::list(p, &rare, None, 101).await?;
        capture(
            "list_rare_label_first_100",
            format!("store::resources::list(kind, {RARE_SELECTOR}, first page, 100 + 1)"),
        );
        summary::count(p, &SummaryFilter::default(), TOP_FAILURES).await?;
        capture("summary_fresh", "store::summary::count(everything, top 10)".into());
        summary::current_snapshot(p, Duration::from_secs(60)).await?;
        unserved::unserved(p, LIVENESS_SECS).await?;
        capture(
            "summary_snapshot",
            "store::summary::current_snapshot + store::unserved::unserved".into(),
        );
        for (key, name) in [
            ("explain_ready", ready),
            ("explain_queued", queued),
            ("explain_failed", failed),
        ] {
            explain::resource_and_facts(p, KIND, &name, LIVENESS_SECS).await?;
            capture(key, format!("store::explain::resource_and_facts({KIND}, {name})"));
        }
    }
    if let Some(path) = &args.plans {
        std::fs::write(path, &plan_text)?;
    }

    let sizes = sizes(&pool).await?;
    let results = json!({
        "resources": total,
        "kind": KIND,
        "selector": SELECTOR,
        "load": load,
        "sizes": sizes,
        "reads": reads,
        "index_use": index_use,
        "load_average": {"before": load_before, "after": load_after},
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "samples": args.samples,
        "warmup": args.warmup,
        "plans": plans,
    });
    println!("{total} resources stored; load {load}");
    println!("sizes: {sizes}");
    println!(
        "{:<22} {:>9} {:>9} {:>9} {:>9}  index use",
        "read", "p50 ms", "p99 ms", "mean ms", "max ms"
    );
    for (key, figures) in &reads {
        let at = |f: &str| figures[f].as_f64().unwrap_or(0.0);
        let uses = index_use
            .get(key.as_str())
            .and_then(|v| v.as_str())
            .unwrap_or("(as list_first_100 / list_deep_100)");
        println!(
            "{key:<22} {:>9.2} {:>9.2} {:>9.2} {:>9.2}  {uses}",
            at("p50_ms"),
            at("p99_ms"),
            at("mean_ms"),
            at("max_ms")
        );
    }
    println!("load average before {load_before}, after {load_after}");
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&results)?)?;
    }

    let _ = server.start_kill();
    let _ = server.wait().await;
    drop((pool, plan_pool));
    if let Some(database) = embedded {
        database.stop(Duration::from_secs(60))?;
    }
    if args.remove {
        std::fs::remove_dir_all(&args.data_dir)?;
    }
    Ok(())
}

/// Loads the resources missing (those after the last one loaded), then
/// VACUUM ANALYZE; returns what was loaded and how long it took, or the
/// record of the load that filled the database when there was nothing to do.
async fn load(pool: &PgPool, args: &Args, manifest_version: i64) -> anyhow::Result<serde_json::Value> {
    let record = args.data_dir.join("load.json");
    let present: i64 = sqlx::query_scalar("SELECT count(*) FROM resources WHERE kind = $1")
        .bind(KIND)
        .fetch_one(pool)
        .await?;
    let present = u64::try_from(present)?;
    if present >= args.resources {
        anyhow::ensure!(
            present == args.resources,
            "the database holds {present} resources, more than --resources"
        );
        eprintln!("{present} resources already stored: not loading");
        return Ok(std::fs::read(&record)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or(json!({"loaded": 0})));
    }
    anyhow::ensure!(
        !args.reuse,
        "--reuse: the database holds {present} of {} resources",
        args.resources
    );
    // The creation times end now: 250 ms apart, the last one a moment ago.
    let start_epoch: f64 = sqlx::query_scalar("SELECT extract(epoch FROM now())::float8 - $1 * 0.25")
        .bind(args.resources as f64)
        .fetch_one(pool)
        .await?;
    let started = Instant::now();
    let mut next = present + 1;
    let (mut failed, mut queued) = (0i64, 0i64);
    while next <= args.resources {
        let end = (next + args.chunk.max(1) - 1).min(args.resources);
        let mut tx = pool.begin().await?;
        // No triggers: the change log and reactions of a bulk load are not
        // what is measured (and foreign keys are not checked: the rows are
        // consistent by construction).
        sqlx::query("SET LOCAL session_replication_role = replica")
            .execute(&mut *tx)
            .await?;
        let (rows, f, q): (i64, i64, i64) = sqlx::query_as(LOAD_CHUNK)
            .bind(i64::try_from(next)?)
            .bind(i64::try_from(end)?)
            .bind(manifest_version)
            .bind(start_epoch)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        anyhow::ensure!(
            u64::try_from(rows)? == end - next + 1,
            "chunk {next}..={end} stored {rows}"
        );
        failed += f;
        queued += q;
        let secs = started.elapsed().as_secs_f64();
        eprintln!(
            "loaded {end} of {} ({:.0}/s, {secs:.0} s)",
            args.resources,
            (end - present) as f64 / secs
        );
        next = end + 1;
    }
    let insert_secs = started.elapsed().as_secs_f64();
    let vacuum = Instant::now();
    for table in ["resources", "resource_conditions", "work_queue"] {
        sqlx::query(sqlx::AssertSqlSafe(format!("VACUUM (ANALYZE) {table}")))
            .execute(pool)
            .await?;
    }
    let vacuum_secs = vacuum.elapsed().as_secs_f64();
    let loaded = json!({
        "loaded": args.resources - present,
        "chunk": args.chunk,
        "insert_secs": insert_secs,
        "vacuum_analyze_secs": vacuum_secs,
        "per_sec": (args.resources - present) as f64 / insert_secs,
        "failed_conditions": failed,
        "queued_tasks": queued,
    });
    std::fs::write(&record, serde_json::to_vec_pretty(&loaded)?)?;
    Ok(loaded)
}

/// Times `samples` calls of `call` after `warmup` untimed ones.
struct Timer {
    samples: usize,
    warmup: usize,
}

impl Timer {
    async fn run<F, Fut>(&self, label: &str, mut call: F) -> anyhow::Result<Latency>
    where
        F: FnMut(usize) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<()>>,
    {
        for i in 0..self.warmup {
            call(i).await.with_context(|| format!("{label} (warm-up)"))?;
        }
        let mut millis = Vec::with_capacity(self.samples);
        for i in 0..self.samples {
            let started = Instant::now();
            call(i).await.with_context(|| label.to_owned())?;
            millis.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        let latency = Latency::of(millis);
        eprintln!(
            "{label}: {} calls, p50 {:.2} ms, p99 {:.2} ms, mean {:.2} ms, max {:.2} ms",
            latency.calls, latency.p50, latency.p99, latency.mean, latency.max
        );
        Ok(latency)
    }
}

/// A fixed pseudo-random sequence, so runs compare.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % bound.max(1)
    }

    /// A random resource number (from 1) of `shape`.
    fn of_shape(&mut self, shape: Shape, total: u64) -> u64 {
        loop {
            let i = 1 + self.below(total);
            if shape_of(i) == shape {
                return i;
            }
        }
    }
}

/// The keyset position after `offset` rows of the kind's list (matching
/// `selector`), newest first, and the name of the row that follows it.
async fn cursor_at(pool: &PgPool, selector: &str, offset: u64) -> anyhow::Result<(ListCursor, String)> {
    let labels = selector.split_once('=').map(|(key, value)| json!({ key: value }));
    let rows: Vec<(chrono::DateTime<chrono::Utc>, uuid::Uuid, String)> = sqlx::query_as(
        "SELECT created_at, id, name FROM resources
         WHERE kind = $1 AND ($2::jsonb IS NULL OR labels @> $2)
         ORDER BY created_at DESC, id DESC OFFSET $3 LIMIT 2",
    )
    .bind(KIND)
    .bind(labels)
    .bind(i64::try_from(offset)?)
    .fetch_all(pool)
    .await?;
    let [(created_at, id, _), (_, _, next)] = rows.as_slice() else {
        anyhow::bail!("no row at offset {offset}");
    };
    Ok((
        ListCursor {
            created_at: *created_at,
            id: *id,
        },
        next.clone(),
    ))
}

/// A page token of the kind's list (matching `selector`) positioned after
/// `offset` rows, as if a client had paged that far, and the name the page
/// starts with. The server's own token for the first page supplies the hash
/// of the filters; only the position is replaced.
async fn deep_token(client: &Client, pool: &PgPool, selector: &str, offset: u64) -> anyhow::Result<(String, String)> {
    let first = client
        .resources()
        .list_resources(ListResourcesRequest {
            kind: Some(KIND.into()),
            label_selector: selector.into(),
            page_size: 1,
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut token = PageToken::decode(&first.next_page_token).context("the first page's token")?;
    let (cursor, next) = cursor_at(pool, selector, offset).await?;
    token.position = vec![
        PositionPart::Int(cursor.created_at.timestamp_micros()),
        PositionPart::Uuid(cursor.id),
    ];
    Ok((token.encode(), next))
}

/// How the plans of a read's statements reach the rows: the scans of
/// `resources` and of the other tables, by kind of scan.
fn verdict(statements: &[String]) -> String {
    let mut scans: BTreeMap<String, usize> = BTreeMap::new();
    for statement in statements {
        for line in statement.lines() {
            let line = line.trim_start().trim_start_matches("->").trim_start();
            let line = line.strip_prefix("Parallel ").unwrap_or(line);
            for scan in ["Index Only Scan", "Index Scan", "Bitmap Index Scan", "Seq Scan"] {
                let Some(rest) = line.strip_prefix(scan) else {
                    continue;
                };
                // "Index Scan using resources_pkey on resources r" / "Seq Scan on resources r".
                let target = rest
                    .split_whitespace()
                    .skip_while(|w| *w != "using" && *w != "on")
                    .nth(1)
                    .unwrap_or("?");
                *scans.entry(format!("{scan} {target}")).or_default() += 1;
                break;
            }
        }
    }
    if scans.is_empty() {
        return "no scans (no plannable statement)".into();
    }
    scans
        .iter()
        .map(|(scan, n)| if *n > 1 { format!("{scan} x{n}") } else { scan.clone() })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Sizes of the database and of the tables the load wrote, in MB.
async fn sizes(pool: &PgPool) -> anyhow::Result<serde_json::Value> {
    let mb = 1024.0 * 1024.0;
    let database: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
        .fetch_one(pool)
        .await?;
    let tables: Vec<(String, i64, i64, i64)> = sqlx::query_as(
        "SELECT c.relname::text, pg_relation_size(c.oid), pg_indexes_size(c.oid), pg_total_relation_size(c.oid)
         FROM pg_class c WHERE c.relname IN ('resources', 'resource_conditions', 'work_queue') AND c.relkind = 'r'",
    )
    .fetch_all(pool)
    .await?;
    let indexes: Vec<(String, i64)> = sqlx::query_as(
        "SELECT i.indexrelid::regclass::text, pg_relation_size(i.indexrelid)
         FROM pg_index i WHERE i.indrelid = 'resources'::regclass ORDER BY 2 DESC",
    )
    .fetch_all(pool)
    .await?;
    let tables: serde_json::Map<String, serde_json::Value> = tables
        .into_iter()
        .map(|(name, heap, index, all)| {
            (
                name,
                json!({"heap_mb": heap as f64 / mb, "indexes_mb": index as f64 / mb, "total_mb": all as f64 / mb}),
            )
        })
        .collect();
    let indexes: serde_json::Map<String, serde_json::Value> = indexes
        .into_iter()
        .map(|(name, size)| (name, json!(size as f64 / mb)))
        .collect();
    Ok(json!({"database_mb": database as f64 / mb, "tables": tables, "resources_indexes_mb": indexes}))
}

/// The host's load averages (1, 5, 15 minutes), as `uptime` shows them.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
