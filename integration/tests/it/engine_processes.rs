//! The engine with real processes: the noop worker binary, the converge
//! binary, and kills (SIGKILL) of both mid-run.

use std::time::Duration;

use converge_integration::api::{self, apply, apply_manifest, count, work_kind};
use converge_integration::processes::{
    connect_when_up, converge_process, crash_postgres_state, free_local_addr, noop_worker, signal, worked,
};
use converge_integration::{TestDatabase, TestServer, eventually};
use converge_proto::v1::{KindConfig, UpdateKindConfigRequest};
use converge_proto::worker_v1::work_stream_request::Payload as Up;
use converge_proto::worker_v1::work_stream_response::Payload as Down;
use converge_proto::worker_v1::{KindVersion, StageComplete, Subscribe, WorkStreamRequest};
use converge_sdk::Client;
use nix::sys::signal::Signal;
use serde_json::json;

async fn apply_many(client: &Client, prefix: &str, n: usize) -> anyhow::Result<()> {
    let mut writers = Vec::new();
    for w in 0..8 {
        let client = client.clone();
        let prefix = prefix.to_owned();
        writers.push(tokio::spawn(async move {
            for i in (w..n).step_by(8) {
                client
                    .resources()
                    .apply_resource(apply("noop", &format!("{prefix}{i}"), json!({"i": i})))
                    .await?;
            }
            anyhow::Ok(())
        }));
    }
    for writer in writers {
        writer.await??;
    }
    Ok(())
}

/// A server with the noop kind, uncapped (the manifest's cap of 5 would
/// make the run about the cap).
async fn uncapped_noop_server() -> anyhow::Result<(TestServer, Client)> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, work_kind("noop", 1, None)).await?;
    let uncapped = KindConfig {
        max_inflight: 0,
        ..Default::default()
    };
    update_noop_config(&client, uncapped, "max_inflight").await?;
    Ok((server, client))
}

/// Sets the field `path` of the noop kind's config to its value in `config`.
async fn update_noop_config(client: &Client, config: KindConfig, path: &str) -> anyhow::Result<()> {
    client
        .kinds()
        .update_kind_config(UpdateKindConfigRequest {
            config: Some(KindConfig {
                kind: "noop".into(),
                kind_version: 1,
                ..config
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec![path.into()],
            }),
            ..Default::default()
        })
        .await?;
    Ok(())
}

#[tokio::test]
async fn ten_thousand_noop_resources_reach_ready_each_generation_worked_once() -> anyhow::Result<()> {
    const N: usize = 10_000;
    let scratch = tempfile::tempdir()?;
    let record = scratch.path().join("worked.log");
    let (server, client) = uncapped_noop_server().await?;
    let mut worker = noop_worker(&server.address(), 64, 0, &record)?;
    apply_many(&client, "n", N).await?;
    let pool = server.database().pool().clone();
    eventually(Duration::from_secs(300), || async {
        let ready = count(&pool, "SELECT count(*) FROM resources WHERE phase = 'Ready'").await?;
        Ok((ready == N as i64).then_some(()))
    })
    .await?;
    let counts = worked(&record)?;
    assert_eq!(counts.len(), N, "every resource was worked");
    let repeats: Vec<(&String, &usize)> = counts.iter().filter(|(_, n)| **n != 1).collect();
    assert!(repeats.is_empty(), "each generation worked exactly once: {repeats:?}");
    assert_eq!(count(&pool, "SELECT count(*) FROM work_queue").await?, 0);
    signal(&worker, Signal::SIGTERM)?;
    let status = tokio::time::timeout(Duration::from_secs(15), worker.wait()).await??;
    assert!(status.success(), "the worker drains and exits cleanly: {status}");
    server.shutdown().await
}

/// The measure of "spread out": at the shortest interval the server
/// allows (5 s) and 1,000 resources, how many resyncs complete in the
/// busiest 100 ms window of one interval. An even spread is 20; a burst per
/// kind would be 1,000, one per second 200.
#[tokio::test]
async fn resyncs_of_a_thousand_resources_at_the_shortest_interval_are_spread_over_it() -> anyhow::Result<()> {
    const N: usize = 1_000;
    let scratch = tempfile::tempdir()?;
    let (server, client) = uncapped_noop_server().await?;
    let mut worker = noop_worker(&server.address(), 64, 0, &scratch.path().join("worked.log"))?;
    apply_many(&client, "s", N).await?;
    let pool = server.database().pool().clone();
    eventually(Duration::from_secs(120), || async {
        let ready = count(&pool, "SELECT count(*) FROM resources WHERE phase = 'Ready'").await?;
        Ok((ready == N as i64).then_some(()))
    })
    .await?;

    let shortest = KindConfig {
        resync_interval_secs: 5,
        ..Default::default()
    };
    update_noop_config(&client, shortest, "resync_interval_secs").await?;
    // The first round follows the applies' own spread; by 15 s the rounds
    // follow the walk.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let windows: Vec<(f64, i64)> = sqlx::query_as(
        "SELECT floor(extract(epoch FROM last_reconciled_at) * 10)::float8, count(*)
         FROM resources WHERE kind = 'noop' AND last_reconciled_at > now() - interval '5 seconds'
         GROUP BY 1",
    )
    .fetch_all(&pool)
    .await?;
    let resynced: i64 = windows.iter().map(|(_, n)| n).sum();
    let busiest = windows.iter().map(|(_, n)| *n).max().unwrap_or(0);
    eprintln!(
        "resync spread: {resynced} of {N} resynced in the last 5 s, busiest 100 ms window {busiest}, {} windows used",
        windows.len()
    );
    assert!(resynced >= 800, "only {resynced} of {N} resynced in one interval");
    assert!(busiest <= 100, "{busiest} resyncs completed in one 100 ms window");
    let generations = count(&pool, "SELECT count(*) FROM resources WHERE generation <> 1").await?;
    assert_eq!(generations, 0, "a resync bumps no generation");
    worker.kill().await?;
    server.shutdown().await
}

#[tokio::test]
async fn a_killed_workers_leases_are_reclaimed_and_stale_results_dropped() -> anyhow::Result<()> {
    let scratch = tempfile::tempdir()?;
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, work_kind("noop", 1, None)).await?;
    let pool = server.database().pool().clone();

    // A raw worker takes one task and answers with an old epoch: dropped.
    let mut raw = client.workers();
    let (up, up_rx) = tokio::sync::mpsc::channel(8);
    up.send(WorkStreamRequest {
        payload: Some(Up::Subscribe(Subscribe {
            kinds: vec![KindVersion {
                kind: "noop".into(),
                kind_version: 1,
            }],
            max_inflight: 1,
            ..Default::default()
        })),
    })
    .await?;
    let mut down = raw
        .work_stream(tokio_stream::wrappers::ReceiverStream::new(up_rx))
        .await?
        .into_inner();
    client
        .resources()
        .apply_resource(apply("noop", "fenced", json!({})))
        .await?;
    let task = loop {
        match down.message().await? {
            Some(message) => {
                if let Some(Down::Task(task)) = message.payload {
                    break task;
                }
            }
            None => anyhow::bail!("no task"),
        }
    };
    let stale = StageComplete {
        lease_token: task.lease_token.clone(),
        claim_epoch: task.claim_epoch - 1,
        generation: task.generation,
        manifest_version: task.manifest_version,
        status: Some(api::object(json!({"from": "stale"}))),
        ..Default::default()
    };
    up.send(WorkStreamRequest {
        payload: Some(Up::Complete(stale)),
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let synced = count(
        &pool,
        "SELECT count(*) FROM resources WHERE name = 'fenced' AND status IS NULL",
    )
    .await?;
    assert_eq!(synced, 1, "a stale completion changes nothing");
    // ... and is counted where operators see it.
    eventually(Duration::from_secs(10), || async {
        let members = client
            .cluster()
            .list_cluster_members(converge_proto::v1::ListClusterMembersRequest::default())
            .await?
            .into_inner()
            .members;
        let stale: i64 = members
            .iter()
            .filter_map(|m| m.broker_counters.as_ref())
            .map(|c| c.stale)
            .sum();
        let connected: i32 = members.iter().map(|m| m.connected_workers).sum();
        Ok((stale >= 1 && connected >= 1).then_some(()))
    })
    .await?;
    let fresh = StageComplete {
        lease_token: task.lease_token.clone(),
        claim_epoch: task.claim_epoch,
        generation: task.generation,
        manifest_version: task.manifest_version,
        status: Some(api::object(json!({"from": "fresh"}))),
        ..Default::default()
    };
    up.send(WorkStreamRequest {
        payload: Some(Up::Complete(fresh)),
    })
    .await?;
    eventually(Duration::from_secs(10), || async {
        let ready = count(
            &pool,
            "SELECT count(*) FROM resources WHERE name = 'fenced' AND phase = 'Ready'",
        )
        .await?;
        Ok((ready == 1).then_some(()))
    })
    .await?;
    drop(up);

    // A slow worker holds leases and is killed; another finishes the work.
    let slow_record = scratch.path().join("slow.log");
    let mut slow = noop_worker(&server.address(), 20, 60_000, &slow_record)?;
    apply_many(&client, "k", 40).await?;
    // The kind is capped at 5 tasks in flight (work_kind's policy).
    eventually(Duration::from_secs(20), || async {
        let leased = count(&pool, "SELECT count(*) FROM work_queue WHERE broker_id IS NOT NULL").await?;
        Ok((leased == 5).then_some(()))
    })
    .await?;
    signal(&slow, Signal::SIGKILL)?;
    slow.wait().await?;
    let fast_record = scratch.path().join("fast.log");
    let mut fast = noop_worker(&server.address(), 20, 0, &fast_record)?;
    eventually(Duration::from_secs(60), || async {
        let ready = count(
            &pool,
            "SELECT count(*) FROM resources WHERE name LIKE 'k%' AND phase = 'Ready'",
        )
        .await?;
        Ok((ready == 40).then_some(()))
    })
    .await?;
    assert!(
        worked(&slow_record).map(|c| c.is_empty()).unwrap_or(true),
        "the killed worker finished nothing"
    );
    assert_eq!(worked(&fast_record)?.len(), 40);
    signal(&fast, Signal::SIGTERM)?;
    fast.wait().await?;
    server.shutdown().await
}

#[tokio::test]
async fn a_server_killed_mid_run_recovers_everything_after_restart() -> anyhow::Result<()> {
    const N: usize = 1_500;
    let scratch = tempfile::tempdir()?;
    let database = TestDatabase::new().await?;
    let url = database.url()?;
    let pool = database.pool().clone();
    let addr = free_local_addr()?;
    let address = format!("http://{addr}");
    let mut server = converge_process(&url, &addr, &scratch.path().join("first.log"))?;
    let client = connect_when_up(&address).await?;
    apply_manifest(&client, work_kind("noop", 1, None)).await?;
    apply_many(&client, "c", N).await?;
    // The worker starts once everything is queued, so the kill finds most
    // of the work in flight however fast the engine is.
    let record = scratch.path().join("worked.log");
    let mut worker = noop_worker(&address, 32, 20, &record)?;
    eventually(Duration::from_secs(60), || async {
        let ready = count(&pool, "SELECT count(*) FROM resources WHERE phase = 'Ready'").await?;
        Ok((ready > 0).then_some(()))
    })
    .await?;
    let in_flight = count(&pool, "SELECT count(*) FROM resources WHERE phase <> 'Ready'").await?;
    assert!(
        in_flight > 1_000,
        "killed mid-run with {in_flight} resources still in flight"
    );

    signal(&server, Signal::SIGKILL)?;
    server.wait().await?;
    // As if PostgreSQL itself had crashed: unlogged tables come back empty.
    crash_postgres_state(&pool).await?;

    let mut restarted = converge_process(&url, &addr, &scratch.path().join("second.log"))?;
    eventually(Duration::from_secs(300), || async {
        let ready = count(&pool, "SELECT count(*) FROM resources WHERE phase = 'Ready'").await?;
        Ok((ready == N as i64).then_some(()))
    })
    .await?;
    assert_eq!(worked(&record)?.len(), N, "nothing was lost");
    signal(&worker, Signal::SIGTERM)?;
    worker.wait().await?;
    signal(&restarted, Signal::SIGTERM)?;
    let status = tokio::time::timeout(Duration::from_secs(20), restarted.wait()).await??;
    assert!(status.success(), "{status}");
    Ok(())
}
