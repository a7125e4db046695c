//! Composition benchmark: time for a root composing 500 children in a
//! 10-deep layered dependency graph to reach Ready, and rollup latency (the
//! root's Ready commit minus its last child's sync commit, both on the
//! database clock) on an idle system.
//!
//! Starts its own server and SDK workers (in this process) on a private
//! PostgreSQL:
//!
//! ```sh
//! cargo run --release -p converge-integration --bin compose-bench -- [ROLLUP_SAMPLES]
//! ```

use std::time::{Duration, Instant};

use converge_integration::kinds::{Cells, Stacks, apply_kind, cell_manifest, layered, stack, stack_manifest};
use converge_integration::{TestDatabase, TestServer, eventually};
use converge_proto::v1::ApplyResourceRequest;
use converge_sdk::Client;
use converge_sdk::worker::Worker;
use converge_service::config::Role;
use serde_json::{Value, json};

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len().max(1) as f64 - 1.0) * p).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

async fn apply_stack(client: &Client, name: &str, spec: Value) -> anyhow::Result<()> {
    let object = converge_sdk::worker::convert::json_to_struct(spec, "/spec")
        .map_err(|e| anyhow::anyhow!("spec is not an object: {e:?}"))?;
    client
        .resources()
        .apply_resource(ApplyResourceRequest {
            kind: "stack".into(),
            kind_version: 1,
            name: name.into(),
            spec: Some(object),
            ..Default::default()
        })
        .await?;
    Ok(())
}

/// Waits until the root is Ready; returns the milliseconds between its last
/// child's sync commit and its own (database clock).
async fn rollup_lag_ms(pool: &sqlx::PgPool, root: &str) -> anyhow::Result<f64> {
    eventually(Duration::from_secs(300), || async {
        let lag: Option<f64> = sqlx::query_scalar(
            "SELECT (extract(epoch FROM r.updated_at - (SELECT max(c.last_reconciled_at) FROM resources c
                                                         WHERE c.owner_id = r.id)) * 1000)::float8
             FROM resources r WHERE r.kind = 'stack' AND r.name = $1 AND r.phase = 'Ready'",
        )
        .bind(root)
        .fetch_optional(pool)
        .await?
        .flatten();
        Ok(lag)
    })
    .await
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let samples: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20);
    let server = TestServer::start_with(TestDatabase::new().await?, Role::All, |_| {}).await?;
    let client = server.client().await?;
    apply_kind(&client, cell_manifest()).await?;
    apply_kind(&client, stack_manifest()).await?;
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

    // Rollup latency: small roots, one at a time, on an otherwise idle system.
    let mut lags = Vec::new();
    for i in 0..samples {
        let cells: Vec<(String, Value)> = (0..5).map(|c| (format!("r{i}-c{c}"), json!({}))).collect();
        let refs: Vec<(&str, Value)> = cells.iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
        let root = format!("roll{i}");
        apply_stack(&client, &root, stack(&refs, &[])).await?;
        lags.push(rollup_lag_ms(&pool, &root).await?);
    }
    lags.sort_by(f64::total_cmp);
    println!(
        "rollup latency after the last child settles ({samples} roots of 5 children, idle): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        percentile(&lags, 0.5),
        percentile(&lags, 0.99),
        lags.last().copied().unwrap_or_default()
    );

    // 500 children, 10 layers of 50, each past the first depending on two.
    let (cells, edges) = layered(10, 50);
    let cell_refs: Vec<(&str, Value)> = cells.iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
    let edge_refs: Vec<(&str, &str)> = edges.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let started = Instant::now();
    apply_stack(&client, "layered", stack(&cell_refs, &edge_refs)).await?;
    let lag = rollup_lag_ms(&pool, "layered").await?;
    let elapsed = started.elapsed();
    println!(
        "500 children in a 10-deep layered graph: apply -> root Ready in {:.2} s (rollup {lag:.1} ms after the last child)",
        elapsed.as_secs_f64()
    );
    println!(
        "{{\"rollup_p50_ms\":{:.2},\"rollup_p99_ms\":{:.2},\"layered_500_secs\":{:.3}}}",
        percentile(&lags, 0.5),
        percentile(&lags, 0.99),
        elapsed.as_secs_f64()
    );
    let _ = stop.send(());
    let _ = running.await;
    server.shutdown().await
}
