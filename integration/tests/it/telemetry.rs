//! Telemetry end to end against real `converge` processes: the spans of one
//! reconcile reach a real OTLP receiver (the opentelemetry-proto gRPC trace
//! service, served by this test) as one correctly parented trace, and the
//! Prometheus endpoint parses with an exposition-format parser and moves as
//! the work does.

use std::collections::HashMap;
use std::time::Duration;

use converge_integration::api::{self, apply, wait_phase};
use converge_integration::kinds::{Cells, apply_kind, cell_manifest};
use converge_integration::otlp::{Received, Receiver};
use converge_integration::processes::{
    ProcessSite, connect_when_up, converge_process_with, free_local_addr, http_get, stop_cleanly,
};
use converge_integration::{TestDatabase, eventually};
use converge_proto::v1::Phase;
use converge_sdk::worker::Worker;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use serde_json::json;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_follows_a_resource_from_apply_through_the_worker_to_the_fence() -> anyhow::Result<()> {
    let receiver = Receiver::default();
    let endpoint = receiver.serve().await?;

    // The worker exports its spans as an application would: a
    // tracing-opentelemetry layer and the W3C propagator.
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint.clone())
        .build()?;
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("test-worker")
                .build(),
        )
        .with_batch_exporter(exporter)
        .build();
    opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
    tracing_subscriber::registry()
        .with(
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("test-worker"))
                .with_filter(
                    tracing_subscriber::filter::Targets::new().with_target("converge_sdk", tracing::Level::INFO),
                ),
        )
        .try_init()?;

    let database = TestDatabase::new().await?;
    let site = ProcessSite::new(&database)?;
    let url = database.url()?;
    let addr = site.address().trim_start_matches("http://").to_owned();
    let mut server = converge_process_with(
        &url,
        &addr,
        &site.scratch().join("converge.log"),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_METRICS_EXPORTER", "none"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    )?;
    let client = connect_when_up(&site.address()).await?;
    apply_kind(&client, cell_manifest()).await?;
    let _worker = api::spawn_worker(
        Worker::builder()
            .endpoint(site.address())
            .provider(Cells::default())
            .heartbeat_interval(Duration::from_millis(500)),
    );
    client
        .resources()
        .apply_resource(apply("cell", "traced", json!({"salt": "one"})))
        .await?;
    wait_phase(&client, "cell", "traced", Phase::Ready).await?;

    let _ = provider.force_flush();
    let spans = eventually(Duration::from_secs(20), || async {
        let spans = receiver.spans();
        let by_id: HashMap<&[u8], &Received> = spans.iter().map(|s| (s.span_id.as_slice(), s)).collect();
        let Some(apply) = spans
            .iter()
            .find(|s| s.name == "/converge.v1.ResourceService/ApplyResource")
        else {
            return Ok(None);
        };
        let in_trace: Vec<&Received> = spans.iter().filter(|s| s.trace_id == apply.trace_id).collect();
        let reconcile = in_trace.iter().find(|s| s.name == "reconcile cell");
        let handle = in_trace.iter().find(|s| s.name.starts_with("handle cell"));
        let complete = in_trace.iter().find(|s| s.name.starts_with("complete "));
        Ok(match (reconcile, handle, complete) {
            (Some(reconcile), Some(handle), Some(complete)) => {
                // Parents: apply <- reconcile <- {handler, completion}.
                anyhow::ensure!(
                    reconcile.parent == apply.span_id,
                    "reconcile is not the apply's child: {spans:?}"
                );
                anyhow::ensure!(
                    handle.parent == reconcile.span_id,
                    "handler is not the reconcile's child"
                );
                anyhow::ensure!(
                    complete.parent == reconcile.span_id,
                    "completion is not the reconcile's child"
                );
                anyhow::ensure!(by_id.contains_key(apply.parent.as_slice()) || apply.parent.is_empty());
                // The apply's store operations are its children, named by
                // operation; the engine's own loops start no traces.
                anyhow::ensure!(
                    in_trace
                        .iter()
                        .any(|s| s.parent == apply.span_id && s.name.starts_with("resources.")),
                    "no store span under the apply: {in_trace:?}"
                );
                anyhow::ensure!(
                    !spans.iter().any(|s| s.parent.is_empty() && s.name.starts_with("work.")),
                    "an engine loop started a trace: {spans:?}"
                );
                Some((apply.service.clone(), handle.service.clone()))
            }
            _ => None,
        })
    })
    .await?;
    assert_eq!(spans, ("converge".to_owned(), "test-worker".to_owned()));
    stop_cleanly(&mut server).await?;
    Ok(())
}

/// The scrape, parsed by a real exposition-format parser.
async fn scrape(addr: &str) -> anyhow::Result<prometheus_parse::Scrape> {
    let (code, body) = http_get(addr, "/metrics").await?;
    anyhow::ensure!(code == 200, "GET /metrics answered {code}");
    Ok(prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned())))?)
}

/// The value of the first sample named `name` whose labels include `labels`.
fn value(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .find(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            prometheus_parse::Value::Histogram(buckets) => buckets.iter().map(|b| b.count).fold(0.0, f64::max),
            prometheus_parse::Value::Summary(_) => f64::NAN,
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prometheus_endpoint_parses_and_follows_queue_latency_and_the_fence() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let site = ProcessSite::new(&database)?;
    let url = database.url()?;
    let addr = site.address().trim_start_matches("http://").to_owned();
    let metrics_addr = free_local_addr()?;
    let mut server = converge_process_with(
        &url,
        &addr,
        &site.scratch().join("converge.log"),
        &[("METRICS_ADDR", metrics_addr.as_str())],
    )?;
    let client = connect_when_up(&site.address()).await?;
    assert_eq!(http_get(&metrics_addr, "/livez").await?.0, 200);
    assert_eq!(http_get(&metrics_addr, "/readyz").await?.0, 200);
    assert_eq!(http_get(&metrics_addr, "/nothing").await?.0, 404);

    // Queue depth: tasks queued while no worker serves the kind.
    apply_kind(&client, cell_manifest()).await?;
    for i in 0..5 {
        client
            .resources()
            .apply_resource(apply("cell", &format!("c{i}"), json!({"salt": "one"})))
            .await?;
    }
    let queued = [("converge_kind", "cell"), ("converge_task_state", "queued")];
    eventually(Duration::from_secs(30), || async {
        Ok(value(&scrape(&metrics_addr).await?, "converge_queue_depth", &queued).filter(|v| *v >= 5.0))
    })
    .await?;
    // The same tasks, as waiting with no worker for the kind version.
    let pair = [("converge_kind", "cell"), ("converge_kind_version", "1")];
    eventually(Duration::from_secs(30), || async {
        Ok(value(&scrape(&metrics_addr).await?, "converge_unserved_tasks", &pair).filter(|v| *v >= 5.0))
    })
    .await?;
    let scraped = scrape(&metrics_addr).await?;
    let age = value(&scraped, "converge_unserved_task_oldest_age_seconds", &pair);
    assert!(age.is_some_and(|a| a >= 0.0), "oldest age: {age:?}");
    let apply_calls = value(
        &scraped,
        "rpc_server_call_duration_seconds_count",
        &[
            ("rpc_method", "/converge.v1.ResourceService/ApplyResource"),
            ("rpc_response_status_code", "OK"),
        ],
    );
    assert!(apply_calls.is_some_and(|n| n >= 5.0), "apply calls: {apply_calls:?}");
    let rejections_before = value(&scraped, "converge_fence_rejections_total", &[]).unwrap_or(0.0);

    // A slow worker: the queue drains, reconcile latency is recorded, and a
    // spec changed under a running task makes its result stale.
    let _worker = api::spawn_worker(
        Worker::builder()
            .endpoint(site.address())
            .provider(Cells::with_delay(Duration::from_millis(1500)))
            .max_parallel(8)
            .heartbeat_interval(Duration::from_millis(500)),
    );
    eventually(Duration::from_secs(20), || async {
        let found = api::find(&client, "cell", "c0").await?;
        Ok(found.filter(|r| r.phase == Phase::Ready as i32))
    })
    .await?;
    client
        .resources()
        .apply_resource(apply("cell", "c0", json!({"salt": "two"})))
        .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    client
        .resources()
        .apply_resource(apply("cell", "c0", json!({"salt": "three"})))
        .await?;
    for i in 0..5 {
        wait_phase(&client, "cell", &format!("c{i}"), Phase::Ready).await?;
    }
    eventually(Duration::from_secs(30), || async {
        let scraped = scrape(&metrics_addr).await?;
        let depth = value(&scraped, "converge_queue_depth", &queued).unwrap_or(f64::MAX);
        let latency = value(
            &scraped,
            "converge_reconcile_duration_seconds_count",
            &[("converge_kind", "cell")],
        );
        let rejections = value(&scraped, "converge_fence_rejections_total", &[]).unwrap_or(0.0);
        let stages = value(
            &scraped,
            "converge_reconcile_stages_total",
            &[
                ("converge_kind", "cell"),
                ("converge_stage", "work"),
                ("converge_outcome", "succeeded"),
            ],
        );
        Ok((depth == 0.0
            && latency.is_some_and(|n| n >= 5.0)
            && rejections > rejections_before
            && stages.is_some_and(|n| n >= 5.0))
        .then_some(()))
    })
    .await?;
    let scraped = scrape(&metrics_addr).await?;
    assert_eq!(value(&scraped, "converge_database_up", &[]), Some(1.0));
    assert!(value(&scraped, "converge_broker_workers_connected", &[]).is_some_and(|n| n >= 1.0));
    assert!(value(&scraped, "db_client_connection_max", &[]).is_some_and(|n| n >= 1.0));
    stop_cleanly(&mut server).await?;
    Ok(())
}
