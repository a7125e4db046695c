//! Watch benchmark: change-to-delivery latency on an idle system, delivery
//! throughput to many watchers, and memory with stalled watchers.
//!
//! Starts its own server (in this process) on a private PostgreSQL, so the
//! figures are repeatable on any machine:
//!
//! ```sh
//! cargo run --release -p converge-integration --bin watch-bench
//! ```

use std::time::{Duration, Instant};

use anyhow::Context;
use converge_integration::kinds::{apply_kind, work_manifest};
use converge_integration::{TestDatabase, TestServer};
use converge_proto::v1::{ApplyResourceRequest, WatchEventType, WatchResourcesRequest};
use converge_sdk::Client;
use converge_service::config::Role;

const WATCHERS: usize = 100;
const THROUGHPUT_CHANGES: usize = 5_000;
const WRITERS: usize = 8;
const LATENCY_SAMPLES: usize = 300;
const STALLED: usize = 20;
const STALL_CHANGES: usize = 20_000;

fn spec(i: usize, padding: usize) -> prost_types::Struct {
    use prost_types::value::Kind;
    let mut fields = std::collections::BTreeMap::new();
    fields.insert(
        "i".to_owned(),
        prost_types::Value {
            kind: Some(Kind::NumberValue(i as f64)),
        },
    );
    if padding > 0 {
        fields.insert(
            "pad".to_owned(),
            prost_types::Value {
                kind: Some(Kind::StringValue("p".repeat(padding))),
            },
        );
    }
    prost_types::Struct { fields }
}

fn apply(name: String, i: usize, padding: usize) -> ApplyResourceRequest {
    ApplyResourceRequest {
        kind: "bench".into(),
        kind_version: 1,
        name,
        spec: Some(spec(i, padding)),
        ..Default::default()
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

async fn open_watch(client: &Client) -> anyhow::Result<tonic::Streaming<converge_proto::v1::WatchResourcesResponse>> {
    let mut stream = client
        .resources()
        .watch_resources(WatchResourcesRequest {
            send_initial_events: Some(false),
            ..Default::default()
        })
        .await?
        .into_inner();
    let start = stream.message().await?.context("no start bookmark")?;
    anyhow::ensure!(start.initial_events_end, "expected the start bookmark");
    Ok(stream)
}

async fn latency(server: &TestServer) -> anyhow::Result<(Duration, Duration, Duration, Duration)> {
    let client = server.client().await?;
    let watcher = server.client().await?;
    let mut stream = open_watch(&watcher).await?;
    let mut from_commit = Vec::with_capacity(LATENCY_SAMPLES);
    let mut from_send = Vec::with_capacity(LATENCY_SAMPLES);
    for i in 0..LATENCY_SAMPLES {
        // Idle between samples so each change meets a quiet reader.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let sent = Instant::now();
        client.resources().apply_resource(apply("lat".into(), i, 0)).await?;
        let committed = Instant::now();
        loop {
            let message = stream.message().await?.context("watch ended")?;
            if message.r#type() != WatchEventType::Bookmark {
                break;
            }
        }
        let received = Instant::now();
        from_commit.push(received.saturating_duration_since(committed));
        from_send.push(received - sent);
    }
    from_commit.sort();
    from_send.sort();
    Ok((
        percentile(&from_commit, 0.5),
        percentile(&from_commit, 0.99),
        percentile(&from_send, 0.5),
        percentile(&from_send, 0.99),
    ))
}

async fn throughput(server: &TestServer) -> anyhow::Result<(f64, f64, Duration)> {
    let mut readers = Vec::new();
    for _ in 0..WATCHERS {
        let client = server.client().await?;
        let mut stream = open_watch(&client).await?;
        readers.push(tokio::spawn(async move {
            let mut received = 0usize;
            while received < THROUGHPUT_CHANGES {
                let message = stream.message().await?.context("watch ended")?;
                if message.r#type() != WatchEventType::Bookmark {
                    received += 1;
                }
            }
            anyhow::Ok(Instant::now())
        }));
    }
    let started = Instant::now();
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let client = server.client().await?;
        writers.push(tokio::spawn(async move {
            for i in (w..THROUGHPUT_CHANGES).step_by(WRITERS) {
                // Distinct names: every change is a creation, so none collapse.
                client.resources().apply_resource(apply(format!("t{i}"), i, 0)).await?;
            }
            anyhow::Ok(Instant::now())
        }));
    }
    let mut written = started;
    for writer in writers {
        written = written.max(writer.await??);
    }
    let mut delivered = started;
    for reader in readers {
        delivered = delivered.max(reader.await??);
    }
    let write_secs = (written - started).as_secs_f64();
    let deliver_secs = (delivered - started).as_secs_f64();
    Ok((
        THROUGHPUT_CHANGES as f64 / write_secs,
        (THROUGHPUT_CHANGES * WATCHERS) as f64 / deliver_secs,
        delivered.saturating_duration_since(written),
    ))
}

async fn stalled_memory(server: &TestServer) -> anyhow::Result<(u64, u64, u64)> {
    let before = rss_kib();
    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        let client = server.client().await?;
        stalled.push((open_watch(&client).await?, client));
    }
    let client = server.client().await?;
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let client = client.clone();
        writers.push(tokio::spawn(async move {
            for i in (w..STALL_CHANGES).step_by(WRITERS) {
                client
                    .resources()
                    .apply_resource(apply(format!("s{}", i % 1000), i, 2048))
                    .await?;
            }
            anyhow::Ok(())
        }));
    }
    let mut peak = before;
    for writer in writers {
        while !writer.is_finished() {
            peak = peak.max(rss_kib());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        writer.await??;
    }
    let after = rss_kib();
    drop(stalled);
    Ok((before, peak.max(after), after))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let server = TestServer::start_with(database, Role::All, |_| {}).await?;
    let client = server.client().await?;
    apply_kind(&client, work_manifest("bench")).await?;

    let (commit_p50, commit_p99, send_p50, send_p99) = latency(&server).await?;
    println!("idle change-to-delivery latency ({LATENCY_SAMPLES} samples, 1 watcher):");
    println!("  from apply answered: p50 {commit_p50:?}, p99 {commit_p99:?}");
    println!("  from apply sent:     p50 {send_p50:?}, p99 {send_p99:?}");

    let (write_rate, delivery_rate, tail) = throughput(&server).await?;
    println!("throughput: {THROUGHPUT_CHANGES} changes by {WRITERS} writers, {WATCHERS} watchers:");
    println!(
        "  writes {write_rate:.0}/s; deliveries {delivery_rate:.0}/s across watchers; last delivery {tail:?} after the last write"
    );

    let (before, peak, after) = stalled_memory(&server).await?;
    println!(
        "memory with {STALLED} stalled watchers and {STALL_CHANGES} ~2 KiB changes: RSS {before} KiB before, peak {peak} KiB, {after} KiB after (process incl. clients)"
    );
    println!(
        "{{\"latency_commit_p50_ms\":{:.2},\"latency_commit_p99_ms\":{:.2},\"latency_send_p50_ms\":{:.2},\"latency_send_p99_ms\":{:.2},\"write_rate\":{write_rate:.0},\"delivery_rate\":{delivery_rate:.0},\"rss_before_kib\":{before},\"rss_peak_kib\":{peak},\"rss_after_kib\":{after}}}",
        commit_p50.as_secs_f64() * 1e3,
        commit_p99.as_secs_f64() * 1e3,
        send_p50.as_secs_f64() * 1e3,
        send_p99.as_secs_f64() * 1e3,
    );
    server.shutdown().await
}
