//! Compositions declared as data against a worker composer (ADR 49), in one
//! sitting on one private PostgreSQL: the same tree — a root composing N
//! `cell` children listed in its spec, rolled up into a count of the ready
//! ones — once as `stack` (the Rust SDK composer of the integration kinds,
//! over the worker stream) and once as `stack-cel` (CEL evaluated by the
//! server, no worker for the root).
//!
//! 1. Compose latency: a root of 100 children applied on an idle system,
//!    time until its children are written (the root's `composed_gen`
//!    reaches its generation), polled every millisecond; alternating kinds.
//! 2. Throughput: ROOTS roots of CHILDREN children each, applied in batches
//!    of 500, time until every root is Ready; the two kinds alternate, two
//!    runs each.
//!
//! ```sh
//! cargo run --release -p converge-integration --bin cel-bench -- [ROOTS] [CHILDREN] [SAMPLES]
//! cargo run --release -p converge-integration --bin cel-bench -- plan [SAMPLES]
//! ```
//!
//! With `plan`: `PlanResource` latency instead (issue 46) — the demo's BOM
//! with three teams (new, stored unchanged, one team more) and a stack of
//! 100 children (new, stored unchanged, one child more), each as a
//! composition declared as data (`bom-cel`, `stack-cel`) and as a composer
//! worker asked in plan mode (`bom`, `stack`: the demo's and the
//! integration kinds' Rust SDK composers, in this process over loopback).

use std::time::{Duration, Instant};

use converge_integration::kinds::{Cells, Stacks, apply_kind, cell_manifest, stack, stack_manifest};
use converge_integration::{TestDatabase, TestServer, eventually};
use converge_proto::v1::plan_resource_request::Change;
use converge_proto::v1::{
    ApplyResourceRequest, BatchApplyResourcesRequest, ComposedResource, Composition, KindManifest, PlanResourceRequest,
};
use converge_sdk::Client;
use converge_sdk::worker::Worker;
use converge_service::config::Role;
use serde_json::{Value, json};
use sqlx::PgPool;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len().max(1) as f64 - 1.0) * p).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

fn object(value: Value) -> anyhow::Result<prost_types::Struct> {
    converge_sdk::worker::convert::json_to_struct(value, "/spec").map_err(|e| anyhow::anyhow!("{e:?}"))
}

/// `stack-cel`: the `stack` tree (without edges) as a composition.
fn stack_cel() -> anyhow::Result<KindManifest> {
    Ok(KindManifest {
        kind: "stack-cel".into(),
        kind_version: 1,
        description: "stack, composed by the server".into(),
        composition: Some(Composition {
            resources: vec![ComposedResource {
                id: "cells".into(),
                kind: "cell".into(),
                kind_version: 1,
                name: "${each.name}".into(),
                for_each: "spec.cells".into(),
                spec: Some(object(json!({}))?),
                ..Default::default()
            }],
            rollup: Some(converge_integration::kinds::cells_rollup()),
        }),
        ..Default::default()
    })
}

fn root(kind: &str, name: &str, children: usize) -> anyhow::Result<ApplyResourceRequest> {
    let cells: Vec<(String, Value)> = (0..children).map(|c| (format!("{name}-c{c}"), json!({}))).collect();
    let refs: Vec<(&str, Value)> = cells.iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
    Ok(ApplyResourceRequest {
        kind: kind.into(),
        kind_version: 1,
        name: name.into(),
        spec: Some(object(stack(&refs, &[]))?),
        ..Default::default()
    })
}

async fn ready_roots(pool: &PgPool, kind: &str, prefix: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT count(*) FROM resources WHERE kind = $1 AND owner_id IS NULL AND name LIKE $2 || '%' AND phase = 'Ready'",
    )
    .bind(kind)
    .bind(prefix)
    .fetch_one(pool)
    .await?)
}

/// Milliseconds from the apply's answer until the root's children are written.
async fn compose_latency(client: &Client, pool: &PgPool, kind: &str, name: &str) -> anyhow::Result<f64> {
    client.resources().apply_resource(root(kind, name, 100)?).await?;
    let started = Instant::now();
    loop {
        let composed: Option<bool> =
            sqlx::query_scalar("SELECT composed_gen >= generation FROM resources WHERE kind = $1 AND name = $2")
                .bind(kind)
                .bind(name)
                .fetch_optional(pool)
                .await?;
        if composed == Some(true) {
            let elapsed = started.elapsed().as_secs_f64() * 1000.0;
            eventually(Duration::from_secs(60), || async {
                Ok((ready_roots(pool, kind, name).await? == 1).then_some(()))
            })
            .await?;
            return Ok(elapsed);
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(60),
            "{kind}/{name} never composed"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Seconds from the first apply until all `roots` roots are Ready.
async fn throughput(
    client: &Client,
    pool: &PgPool,
    kind: &str,
    run: usize,
    roots: usize,
    children: usize,
) -> anyhow::Result<f64> {
    let prefix = format!("{kind}-r{run}-");
    let started = Instant::now();
    for batch in (0..roots).collect::<Vec<_>>().chunks(500) {
        let requests = batch
            .iter()
            .map(|i| root(kind, &format!("{prefix}{i}"), children))
            .collect::<anyhow::Result<Vec<_>>>()?;
        client
            .resources()
            .batch_apply_resources(BatchApplyResourcesRequest {
                requests,
                ..Default::default()
            })
            .await?;
    }
    let target = i64::try_from(roots)?;
    eventually(Duration::from_secs(1800), || async {
        Ok((ready_roots(pool, kind, &prefix).await? == target).then_some(()))
    })
    .await?;
    Ok(started.elapsed().as_secs_f64())
}

/// Milliseconds of `samples` PlanResource calls for `request`, sorted.
async fn plan_latency(client: &Client, request: &ApplyResourceRequest, samples: usize) -> anyhow::Result<Vec<f64>> {
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        let started = Instant::now();
        client
            .resources()
            .plan_resource(PlanResourceRequest {
                change: Some(Change::Apply(request.clone())),
                max_depth: 0,
                compose_timeout: None,
            })
            .await?;
        out.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    out.sort_by(f64::total_cmp);
    Ok(out)
}

async fn plan_bench(samples: usize) -> anyhow::Result<()> {
    let server = TestServer::start_with(TestDatabase::new().await?, Role::All, |_| {}).await?;
    let client = server.client().await?;
    for manifest in converge_examples::manifests()? {
        apply_kind(&client, manifest).await?;
    }
    apply_kind(&client, cell_manifest()).await?;
    apply_kind(&client, stack_cel()?).await?;
    apply_kind(&client, stack_manifest()).await?;
    let worker = converge_examples::register(
        Worker::builder().endpoint(server.address()).provider(Stacks::default()),
        converge_examples::Latency::NONE,
    )
    .max_parallel(64)
    .build()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(async {
        let _ = stopped.await;
    }));
    let pool = server.database().pool().clone();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let bom_of = |kind: &str, name: &str, teams: &[&str]| -> anyhow::Result<ApplyResourceRequest> {
        Ok(ApplyResourceRequest {
            kind: kind.into(),
            kind_version: 1,
            name: name.into(),
            spec: Some(object(json!({"teams": teams, "region": "us-east-1"}))?),
            ..Default::default()
        })
    };
    let bom = |name: &str, teams: &[&str]| bom_of("bom-cel", name, teams);
    let worker_bom = |name: &str, teams: &[&str]| bom_of("bom", name, teams);
    // Stored trees (their roots composed; the leaves need not be Ready).
    for request in [
        bom("stored", &["a", "b", "c"])?,
        root("stack-cel", "stored", 100)?,
        worker_bom("wstored", &["a", "b", "c"])?,
        root("stack", "wstored", 100)?,
    ] {
        client.resources().apply_resource(request).await?;
    }
    eventually(Duration::from_secs(60), || async {
        let composed = sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM resources WHERE name IN ('stored', 'wstored') AND composed_gen >= generation
                 AND kind IN ('bom', 'bom-cel', 'stack', 'stack-cel')",
        )
        .fetch_one(&pool)
        .await?;
        Ok((composed == 4).then_some(()))
    })
    .await?;
    let cases = [
        ("bom-cel, 3 teams (11 children), new", bom("fresh", &["a", "b", "c"])?),
        (
            "bom-cel, 3 teams (11 children), stored, unchanged",
            bom("stored", &["a", "b", "c"])?,
        ),
        (
            "bom-cel, 3 teams, stored, one team more",
            bom("stored", &["a", "b", "c", "d"])?,
        ),
        ("stack-cel, 100 children, new", root("stack-cel", "fresh", 100)?),
        (
            "stack-cel, 100 children, stored, unchanged",
            root("stack-cel", "stored", 100)?,
        ),
        (
            "stack-cel, 100 children, stored, one child more",
            root("stack-cel", "stored", 101)?,
        ),
        (
            "bom (worker), 3 teams (11 children), new",
            worker_bom("wfresh", &["a", "b", "c"])?,
        ),
        (
            "bom (worker), 3 teams (11 children), stored, unchanged",
            worker_bom("wstored", &["a", "b", "c"])?,
        ),
        (
            "bom (worker), 3 teams, stored, one team more",
            worker_bom("wstored", &["a", "b", "c", "d"])?,
        ),
        ("stack (worker), 100 children, new", root("stack", "wfresh", 100)?),
        (
            "stack (worker), 100 children, stored, unchanged",
            root("stack", "wstored", 100)?,
        ),
        (
            "stack (worker), 100 children, stored, one child more",
            root("stack", "wstored", 101)?,
        ),
    ];
    for (label, request) in cases {
        let latency = plan_latency(&client, &request, samples).await?;
        println!(
            "PlanResource {label} ({samples} samples): p50 {:.2} ms, p99 {:.2} ms",
            percentile(&latency, 0.5),
            percentile(&latency, 0.99)
        );
    }
    let _ = stop.send(());
    running.await??;
    server.shutdown().await
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("plan") {
        let samples = std::env::args().nth(2).and_then(|a| a.parse().ok()).unwrap_or(200);
        return plan_bench(samples).await;
    }
    let arg = |i: usize, default: usize| std::env::args().nth(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (roots, children, samples) = (arg(1, 10_000), arg(2, 3), arg(3, 30));
    let server = TestServer::start_with(TestDatabase::new().await?, Role::All, |_| {}).await?;
    let client = server.client().await?;
    apply_kind(&client, cell_manifest()).await?;
    apply_kind(&client, stack_manifest()).await?;
    apply_kind(&client, stack_cel()?).await?;
    let worker = Worker::builder()
        .endpoint(server.address())
        .provider(Cells::default())
        .provider(Stacks::default())
        .max_parallel(64)
        .build()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(async {
        let _ = stopped.await;
    }));
    let pool = server.database().pool().clone();
    // Let the worker subscribe and converge's own sessions see stack-cel.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mut latency = [Vec::new(), Vec::new()];
    for i in 0..samples {
        for (k, kind) in ["stack", "stack-cel"].into_iter().enumerate() {
            latency[k].push(compose_latency(&client, &pool, kind, &format!("{kind}-lat{i}")).await?);
        }
    }
    for (k, kind) in ["stack", "stack-cel"].into_iter().enumerate() {
        latency[k].sort_by(f64::total_cmp);
        println!(
            "{kind}: compose latency of 100 children ({samples} samples, idle): p50 {:.1} ms, p99 {:.1} ms",
            percentile(&latency[k], 0.5),
            percentile(&latency[k], 0.99)
        );
    }

    let total = roots * (children + 1);
    let mut runs = Vec::new();
    for run in 0..2 {
        for kind in ["stack", "stack-cel"] {
            let secs = throughput(&client, &pool, kind, run, roots, children).await?;
            println!(
                "{kind} run {run}: {roots} roots x {children} children ({total} resources) apply -> all Ready in {secs:.1} s = {:.0} resources/s",
                total as f64 / secs
            );
            runs.push((kind, secs));
        }
    }
    let mean = |kind: &str| {
        let own: Vec<f64> = runs.iter().filter(|(k, _)| *k == kind).map(|(_, s)| *s).collect();
        own.iter().sum::<f64>() / own.len().max(1) as f64
    };
    println!(
        "{{\"worker_compose_p50_ms\":{:.2},\"worker_compose_p99_ms\":{:.2},\"cel_compose_p50_ms\":{:.2},\"cel_compose_p99_ms\":{:.2},\"worker_secs\":{:.2},\"cel_secs\":{:.2},\"cel_over_worker_speed\":{:.3}}}",
        percentile(&latency[0], 0.5),
        percentile(&latency[0], 0.99),
        percentile(&latency[1], 0.5),
        percentile(&latency[1], 0.99),
        mean("stack"),
        mean("stack-cel"),
        mean("stack") / mean("stack-cel")
    );
    let _ = stop.send(());
    let _ = running.await;
    server.shutdown().await
}
