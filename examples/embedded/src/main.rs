//! `converge-files`: an application that embeds converge.
//!
//! Each `NAME=CONTENT` argument is a `local-file` resource; the application's
//! own provider writes it to `--root/NAME` and reports its size, and removes
//! the file when the resource is deleted (`--delete NAME`, through the kind's
//! finalizer). A watch prints every change of the files' resources until all
//! of them are Ready.
//!
//! By default converge runs inside this process, on an embedded PostgreSQL in
//! `--data-dir`, reached over an in-memory transport: the application opens no
//! port. `--serve-grpc ADDR` also serves the gRPC API so the `converge` CLI
//! can look in. `--connect URL` runs the same code against a converge service
//! instead: the one line that differs is the builder's first call.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use converge_embedded::Converge;
use converge_sdk::Client;
use converge_sdk::proto::v1 as pb;
use converge_sdk::worker::convert::json_to_struct;
use converge_sdk::worker::{HandlerError, KindVersion, Outcome, Provider, ReactionRequest, Stage};
use futures::StreamExt;
use serde_json::json;

/// The kind this application manages.
const KIND: &str = "local-file";

/// Its finalizer: a file's resource is gone only once the file is.
const FINALIZER: &str = "files.example/remove";

#[derive(Debug, Parser)]
#[command(
    name = "converge-files",
    about = "Local files managed as converge resources by an embedded control plane"
)]
struct Args {
    /// Where the files are written.
    #[arg(long)]
    root: PathBuf,
    /// Where the embedded control plane keeps its PostgreSQL.
    #[arg(long, default_value = "converge-files-state", conflicts_with = "connect")]
    data_dir: PathBuf,
    /// Use the converge service at this address instead of embedding one.
    #[arg(long)]
    connect: Option<String>,
    /// Also serve gRPC on this address (embedded only), for the CLI and
    /// external workers.
    #[arg(long, conflicts_with = "connect")]
    serve_grpc: Option<SocketAddr>,
    /// Files to delete.
    #[arg(long = "delete")]
    deletes: Vec<String>,
    /// After everything is Ready, keep serving until SIGTERM or SIGINT.
    #[arg(long)]
    hold: bool,
    /// Measure this many apply→Ready round trips of one file, one at a
    /// time, and print them as JSON.
    #[arg(long)]
    latency: Option<usize>,
    /// Files to write, as NAME=CONTENT.
    files: Vec<String>,
}

/// Writes and removes the files.
struct Files {
    root: PathBuf,
}

#[converge_sdk::worker::async_trait]
impl Provider for Files {
    fn kind(&self) -> KindVersion {
        KindVersion::new(KIND, 1)
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        let path = self.root.join(&request.resource.name);
        if request.stage == Stage::Delete {
            return match tokio::fs::remove_file(&path).await {
                Ok(()) => Ok(Outcome::new()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Outcome::new()),
                Err(e) => Err(HandlerError::transient(format!("removing {}: {e}", path.display()))),
            };
        }
        let content = request.resource.spec["content"].as_str().unwrap_or_default();
        tokio::fs::write(&path, content)
            .await
            .map_err(|e| HandlerError::transient(format!("writing {}: {e}", path.display())))?;
        Ok(Outcome::new().with_status(json!({"path": path.display().to_string(), "bytes": content.len()})))
    }
}

/// The `local-file` kind.
fn manifest() -> anyhow::Result<pb::KindManifest> {
    let schema = json!({
        "type": "object",
        "properties": {"content": {"type": "string", "maxLength": 65536}},
        "required": ["content"],
        "additionalProperties": false
    });
    let reaction = |name: &str, trigger: pb::Trigger, emit: pb::Emit| pb::Reaction {
        name: name.to_owned(),
        trigger: trigger.into(),
        emits: vec![emit.into()],
        ..Default::default()
    };
    Ok(pb::KindManifest {
        kind: KIND.to_owned(),
        kind_version: 1,
        description: "A file under the application's root directory".to_owned(),
        spec_schema: Some(json_to_struct(schema, "spec_schema")?),
        reactions: vec![
            reaction("write", pb::Trigger::SpecChange, pb::Emit::Status),
            reaction("remove", pb::Trigger::DeleteRequested, pb::Emit::Finalizer),
        ],
        finalizer_name: FINALIZER.to_owned(),
        ..Default::default()
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let files = parse_files(&args.files)?;
    std::fs::create_dir_all(&args.root).with_context(|| format!("creating {}", args.root.display()))?;

    // The one line that chooses where converge runs.
    let builder = match &args.connect {
        Some(address) => Converge::connect(address.clone()),
        None => Converge::embedded(args.data_dir.clone()),
    };
    let builder = match args.serve_grpc {
        Some(addr) => builder.serve_grpc(addr),
        None => builder,
    };
    let converge = builder
        .kind(manifest()?)
        .provider(Files {
            root: args.root.clone(),
        })
        .agent("converge-files")
        .start()
        .await?;
    match (&args.connect, converge.grpc_addr()) {
        (Some(address), _) => println!("converge-files: connected to {address}"),
        (None, Some(addr)) => println!("converge-files: converge embedded, also serving gRPC on {addr}"),
        (None, None) => println!("converge-files: converge embedded (in-process transport, no port)"),
    }

    let outcome = run(&converge.client(), &args, &files).await;
    let stopped = converge.shutdown().await.context("stopping converge");
    outcome.and(stopped)
}

async fn run(client: &Client, args: &Args, files: &BTreeMap<String, String>) -> anyhow::Result<()> {
    sync(client, files, &args.deletes).await?;
    println!(
        "converge-files: all ready ({} files under {})",
        files.len(),
        args.root.display()
    );
    if let Some(samples) = args.latency {
        latency(client, &args.root, samples).await?;
    }
    if args.hold {
        wait_for_signal().await?;
    }
    Ok(())
}

/// Applies `files`, deletes `deletes`, and follows a watch until every file
/// is Ready at the applied generation and every deleted one is gone.
async fn sync(client: &Client, files: &BTreeMap<String, String>, deletes: &[String]) -> anyhow::Result<()> {
    let mut watch = client
        .resources()
        .watch_resources(pb::WatchResourcesRequest {
            kind: Some(KIND.to_owned()),
            send_initial_events: Some(false),
            ..Default::default()
        })
        .await
        .context("watching the files")?
        .into_inner();
    let mut waiting: BTreeMap<String, Option<i64>> = BTreeMap::new();
    for (name, content) in files {
        let applied = apply(client, name, content).await?;
        if applied.phase == pb::Phase::Ready as i32 && applied.observed_generation == applied.generation {
            println!("{KIND}/{name} Ready (unchanged)");
        } else {
            waiting.insert(name.clone(), Some(applied.generation));
        }
    }
    for name in deletes {
        let deleted = client
            .resources()
            .delete_resource(pb::DeleteResourceRequest {
                kind: KIND.to_owned(),
                name: name.clone(),
                ..Default::default()
            })
            .await;
        match deleted {
            Ok(_) => {
                waiting.insert(name.clone(), None);
            }
            Err(status) if status.code() == tonic::Code::NotFound => println!("{KIND}/{name} already gone"),
            Err(status) => return Err(status).with_context(|| format!("deleting {KIND}/{name}")),
        }
    }
    while !waiting.is_empty() {
        let Some(message) = watch.next().await else {
            bail!("the watch ended before every file settled");
        };
        let message = message.context("watching the files")?;
        let Some(resource) = message.resource else { continue };
        let gone = message.r#type == pb::WatchEventType::Deleted as i32;
        let phase = pb::Phase::try_from(resource.phase).map_or("?", |p| p.as_str_name());
        if gone {
            println!("{KIND}/{} deleted", resource.name);
        } else {
            println!("{KIND}/{} {phase} generation {}", resource.name, resource.generation);
        }
        let settled = match waiting.get(&resource.name) {
            Some(None) => gone,
            Some(Some(generation)) => {
                resource.phase == pb::Phase::Ready as i32 && resource.observed_generation >= *generation
            }
            None => false,
        };
        if settled {
            waiting.remove(&resource.name);
        }
    }
    Ok(())
}

async fn apply(client: &Client, name: &str, content: &str) -> anyhow::Result<pb::Resource> {
    let applied = client
        .resources()
        .apply_resource(pb::ApplyResourceRequest {
            kind: KIND.to_owned(),
            kind_version: 1,
            name: name.to_owned(),
            spec: Some(json_to_struct(json!({"content": content}), "spec")?),
            ..Default::default()
        })
        .await
        .with_context(|| format!("applying {KIND}/{name}"))?
        .into_inner();
    applied.resource.context("the apply answered no resource")
}

/// Applies a new generation of one file `samples` times, each after the
/// previous one was Ready, and prints the apply→Ready times and this
/// process's peak memory as JSON.
async fn latency(client: &Client, root: &Path, samples: usize) -> anyhow::Result<()> {
    let name = "latency-probe";
    let mut times = Vec::with_capacity(samples);
    for i in 0..samples {
        let started = Instant::now();
        let files = BTreeMap::from([(name.to_owned(), format!("sample {i} at {started:?}"))]);
        sync(client, &files, &[]).await?;
        times.push(started.elapsed());
    }
    times.sort();
    let at = |q: f64| {
        let index = ((times.len() as f64 - 1.0) * q).round() as usize;
        times.get(index).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    let report = json!({
        "samples": samples,
        "p50_ms": at(0.5),
        "p99_ms": at(0.99),
        "max_ms": times.last().map_or(0.0, Duration::as_secs_f64) * 1000.0,
        "peak_rss_kb": peak_rss_kb(),
        "root": root.display().to_string(),
    });
    println!("{report}");
    Ok(())
}

/// This process's peak resident set (Linux), in KiB.
fn peak_rss_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

/// `NAME=CONTENT` arguments.
fn parse_files(args: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    args.iter()
        .map(|arg| match arg.split_once('=') {
            Some((name, content)) if !name.is_empty() => Ok((name.to_owned(), content.to_owned())),
            _ => bail!("{arg:?} is not NAME=CONTENT"),
        })
        .collect()
}

async fn wait_for_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(())
}
