//! Engine benchmark: apply→Ready latency of a single resource on an idle
//! system, and apply→Ready throughput of many noop resources.
//!
//! Starts its own server and an SDK worker (both in this process) on a
//! private PostgreSQL:
//!
//! ```sh
//! cargo run --release -p converge-integration --bin engine-bench -- [RESOURCES] [WORKER_PARALLELISM]
//! ```

use std::time::{Duration, Instant};

use converge_integration::kinds::{apply_kind, work_manifest};
use converge_integration::{TestDatabase, TestServer};
use converge_proto::v1::{ApplyResourceRequest, Phase, WatchEventType, WatchResourcesRequest};
use converge_sdk::worker::{HandlerError, KindVersion, Outcome, Provider, ReactionRequest, Worker, async_trait};
use converge_service::config::Role;

struct Noop;

#[async_trait]
impl Provider for Noop {
    fn kind(&self) -> KindVersion {
        KindVersion::new("noop", 1)
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        Ok(Outcome::new().with_status(serde_json::json!({"observed_generation": request.generation})))
    }
}

fn apply(name: String) -> ApplyResourceRequest {
    ApplyResourceRequest {
        kind: "noop".into(),
        kind_version: 1,
        name,
        ..Default::default()
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len().max(1) as f64 - 1.0) * p).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let resources: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let parallel: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);

    let server = TestServer::start_with(TestDatabase::new().await?, Role::All, |_| {}).await?;
    let client = server.client().await?;
    apply_kind(&client, work_manifest("noop")).await?;
    let worker = Worker::builder()
        .endpoint(server.address())
        .provider(Noop)
        .max_parallel(parallel)
        .build()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(async {
        let _ = stopped.await;
    }));

    // Latency: one resource at a time on an otherwise idle system; Ready is
    // observed through a watch (no polling delay in the measurement).
    let mut stream = client
        .resources()
        .watch_resources(WatchResourcesRequest {
            send_initial_events: Some(false),
            ..Default::default()
        })
        .await?
        .into_inner();
    stream.message().await?;
    let mut samples = Vec::new();
    for i in 0..200 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let name = format!("lat{i}");
        let started = Instant::now();
        client.resources().apply_resource(apply(name.clone())).await?;
        loop {
            let Some(message) = stream.message().await? else {
                anyhow::bail!("watch ended")
            };
            let ready = message.r#type() != WatchEventType::Bookmark
                && message
                    .resource
                    .as_ref()
                    .is_some_and(|r| r.name == name && r.phase() == Phase::Ready);
            if ready {
                break;
            }
        }
        samples.push(started.elapsed());
    }
    drop(stream);
    samples.sort();
    let (p50, p99) = (percentile(&samples, 0.5), percentile(&samples, 0.99));
    println!("apply->Ready latency, 1 resource, idle (200 samples): p50 {p50:?}, p99 {p99:?}");
    // Where it goes: the engine's share is the apply's statement time to the
    // drain that synced it (database clock); the rest is the apply call
    // itself and the watch delivering the change.
    let (engine_p50, engine_p99): (Option<f64>, Option<f64>) = sqlx::query_as(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)
         FROM (SELECT extract(epoch FROM last_reconciled_at - created_at)::float8 * 1000 AS ms
               FROM resources WHERE name LIKE 'lat%') t",
    )
    .fetch_one(server.database().pool())
    .await?;
    println!(
        "  of which apply -> synced (database clock): p50 {:.1} ms, p99 {:.1} ms",
        engine_p50.unwrap_or_default(),
        engine_p99.unwrap_or_default()
    );

    // Throughput: many resources applied by 8 concurrent writers.
    let started = Instant::now();
    let mut writers = Vec::new();
    for w in 0..8 {
        let client = client.clone();
        writers.push(tokio::spawn(async move {
            for i in (w..resources).step_by(8) {
                client.resources().apply_resource(apply(format!("t{i}"))).await?;
            }
            anyhow::Ok(())
        }));
    }
    for writer in writers {
        writer.await??;
    }
    let applied = started.elapsed();
    let pool = server.database().pool().clone();
    loop {
        let ready: i64 = sqlx::query_scalar("SELECT count(*) FROM resources WHERE phase = 'Ready' AND name LIKE 't%'")
            .fetch_one(&pool)
            .await?;
        if ready as usize >= resources {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all_ready = started.elapsed();
    println!(
        "{resources} noop resources, 8 API writers, 1 worker x {parallel}: applied in {:.1} s ({:.0}/s), all Ready after {:.1} s ({:.0} resources/s apply->Ready)",
        applied.as_secs_f64(),
        resources as f64 / applied.as_secs_f64(),
        all_ready.as_secs_f64(),
        resources as f64 / all_ready.as_secs_f64()
    );
    println!(
        "{{\"latency_p50_ms\":{:.2},\"latency_p99_ms\":{:.2},\"resources\":{resources},\"apply_per_sec\":{:.0},\"ready_per_sec\":{:.0}}}",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        resources as f64 / applied.as_secs_f64(),
        resources as f64 / all_ready.as_secs_f64()
    );
    let _ = stop.send(());
    let _ = running.await;
    server.shutdown().await
}
