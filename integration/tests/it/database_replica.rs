//! `DATABASE_READ_URL`: a real converge process on a private primary and a
//! streaming standby of it. Stale-tolerant reads are served by the standby
//! (seen by pausing its replay: a fresh apply stays invisible to them until
//! replay resumes), writes never touch it, and with the standby stopped
//! those reads fall back to the primary while writes go on.

use std::time::{Duration, Instant};

use converge_integration::api::{apply, apply_manifest, find, work_kind};
use converge_integration::eventually;
use converge_integration::postgres::PrivateServer;
use converge_integration::processes::{connect_when_up, converge_process_with, free_local_addr, stop_cleanly};
use converge_proto::v1::{GetResourceGraphRequest, ListResourceEventsRequest, ListResourcesRequest};
use converge_sdk::Client;
use serde_json::json;
use sqlx::postgres::PgPool;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// Names of the `noop` resources ListResources returns.
async fn listed(client: &Client) -> anyhow::Result<Vec<String>> {
    let page = client
        .resources()
        .list_resources(ListResourcesRequest {
            kind: Some("noop".into()),
            page_size: 1000,
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut names: Vec<String> = page.resources.into_iter().map(|r| r.name).collect();
    names.sort();
    Ok(names)
}

/// Whether each stale-tolerant read sees `name`: GetResource,
/// ListResources, GetResourceGraph and ListResourceEvents (which answer
/// NOT_FOUND for a resource they cannot see), in that order.
async fn seen_by(client: &Client, name: &str) -> anyhow::Result<[bool; 4]> {
    let got = find(client, "noop", name).await?.is_some();
    let in_list = listed(client).await?.iter().any(|n| n == name);
    let graph = client
        .resources()
        .get_resource_graph(GetResourceGraphRequest {
            kind: "noop".into(),
            name: name.into(),
            ..Default::default()
        })
        .await
        .is_ok();
    let events = client
        .resources()
        .list_resource_events(ListResourceEventsRequest {
            kind: "noop".into(),
            name: name.into(),
            ..Default::default()
        })
        .await
        .is_ok();
    Ok([got, in_list, graph, events])
}

/// Whether every stale-tolerant read sees `name`.
async fn visible(client: &Client, name: &str) -> anyhow::Result<bool> {
    Ok(seen_by(client, name).await?.iter().all(|seen| *seen))
}

/// Whether no stale-tolerant read sees `name`.
async fn invisible(client: &Client, name: &str) -> anyhow::Result<bool> {
    Ok(seen_by(client, name).await?.iter().all(|seen| !seen))
}

async fn overall_health(client: &Client) -> anyhow::Result<ServingStatus> {
    let mut health = HealthClient::new(client.channel());
    Ok(health
        .check(HealthCheckRequest { service: String::new() })
        .await?
        .into_inner()
        .status())
}

/// Sessions converge holds on `pool`'s server under `application_name`.
async fn sessions(pool: &PgPool, application_name: &str) -> anyhow::Result<i64> {
    Ok(
        sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND datname = 'converge'",
        )
        .bind(application_name)
        .fetch_one(pool)
        .await?,
    )
}

#[tokio::test]
async fn stale_tolerant_reads_go_to_the_replica_and_fall_back_to_the_primary() -> anyhow::Result<()> {
    let started = Instant::now();
    let primary = PrivateServer::primary().await?;
    converge_service::db::ensure_database(&primary.connect_options("postgres")?, "converge").await?;
    let mut standby = primary.standby().await?;
    let standby_admin = PgPool::connect_with(standby.connect_options("postgres")?).await?;
    let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
        .fetch_one(&standby_admin)
        .await?;
    assert!(in_recovery, "the standby is a standby");

    let scratch = tempfile::tempdir()?;
    let addr = free_local_addr()?;
    let address = format!("http://{addr}");
    let read_url = standby.url("converge")?;
    let mut server = converge_process_with(
        &primary.url("converge")?,
        &addr,
        &scratch.path().join("converge.log"),
        &[("DATABASE_READ_URL", &read_url), ("LOG_LEVEL", "info")],
    )?;
    let client = connect_when_up(&address).await?;
    apply_manifest(&client, work_kind("noop", 1, None)).await?;
    client
        .resources()
        .apply_resource(apply("noop", "first", json!({})))
        .await?;
    eventually(Duration::from_secs(10), || async {
        Ok(visible(&client, "first").await?.then_some(()))
    })
    .await?;
    // converge reads from the standby under its own application name.
    assert!(sessions(&standby_admin, "converge-read").await? >= 1);
    assert_eq!(
        sessions(&standby_admin, "converge").await?,
        0,
        "nothing else runs on the standby"
    );

    // With replay paused the standby lags: an apply succeeds (writes and the
    // reads inside them are on the primary) but the reads do not see it.
    sqlx::query("SELECT pg_wal_replay_pause()")
        .execute(&standby_admin)
        .await?;
    let applied = client
        .resources()
        .apply_resource(apply("noop", "second", json!({"n": 2})))
        .await?
        .into_inner();
    assert!(applied.created, "written on the primary");
    let watched_kinds = client
        .kinds()
        .get_kind_manifest(converge_proto::v1::GetKindManifestRequest {
            kind: "noop".into(),
            kind_version: 1,
        })
        .await;
    assert!(watched_kinds.is_ok(), "kind reads stay on the primary");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        invisible(&client, "second").await?,
        "a paused replica has not replayed the apply"
    );
    assert_eq!(listed(&client).await?, ["first"]);
    sqlx::query("SELECT pg_wal_replay_resume()")
        .execute(&standby_admin)
        .await?;
    eventually(Duration::from_secs(10), || async {
        Ok(visible(&client, "second").await?.then_some(()))
    })
    .await?;
    standby_admin.close().await;

    // The standby stops: writes go on, the reads fall back to the primary
    // (and so see the latest apply at once), health stays SERVING.
    standby.stop().await?;
    let began = Instant::now();
    client
        .resources()
        .apply_resource(apply("noop", "third", json!({})))
        .await?;
    assert!(visible(&client, "third").await?, "read from the primary");
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "falling back took {:?}",
        began.elapsed()
    );
    for i in 0..20 {
        let name = format!("down{i}");
        client
            .resources()
            .apply_resource(apply("noop", &name, json!({})))
            .await?;
        assert!(find(&client, "noop", &name).await?.is_some());
    }
    assert_eq!(listed(&client).await?.len(), 23, "down0..down19, first, second, third");
    assert_eq!(overall_health(&client).await?, ServingStatus::Serving);

    // A process that boots while the replica is down starts, writes and
    // reads all the same.
    let second_addr = free_local_addr()?;
    let mut second = converge_process_with(
        &primary.url("converge")?,
        &second_addr,
        &scratch.path().join("second.log"),
        &[("DATABASE_READ_URL", &read_url)],
    )?;
    let second_client = connect_when_up(&format!("http://{second_addr}")).await?;
    second_client
        .resources()
        .apply_resource(apply("noop", "booted", json!({})))
        .await?;
    assert!(visible(&second_client, "booted").await?);
    stop_cleanly(&mut second).await?;

    // Back up: once the probe has seen it answer, the reads return to it.
    standby.start().await?;
    let standby_admin = PgPool::connect_with(standby.connect_options("postgres")?).await?;
    eventually(Duration::from_secs(20), || async {
        Ok(
            (find(&client, "noop", "down0").await?.is_some() && sessions(&standby_admin, "converge-read").await? >= 1)
                .then_some(()),
        )
    })
    .await?;
    sqlx::query("SELECT pg_wal_replay_pause()")
        .execute(&standby_admin)
        .await?;
    client
        .resources()
        .apply_resource(apply("noop", "fourth", json!({})))
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        invisible(&client, "fourth").await?,
        "served by the (paused) replica again"
    );
    sqlx::query("SELECT pg_wal_replay_resume()")
        .execute(&standby_admin)
        .await?;
    eventually(Duration::from_secs(10), || async {
        Ok(visible(&client, "fourth").await?.then_some(()))
    })
    .await?;
    standby_admin.close().await;

    assert!(server.try_wait()?.is_none(), "converge kept running");
    stop_cleanly(&mut server).await?;
    let log = std::fs::read_to_string(scratch.path().join("converge.log"))?;
    assert!(log.contains("the read replica is unreachable"), "{log}");
    assert!(log.contains("the read replica answers again"), "{log}");
    assert!(!log.contains("ERROR"), "{log}");
    eprintln!("replica test ran in {:?}", started.elapsed());
    Ok(())
}
