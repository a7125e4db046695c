//! PostgreSQL restarted under load: a real converge process and a real noop
//! worker on a private PostgreSQL server that is stopped (fast shutdown),
//! and later killed (a crash), while applies keep coming.
//!
//! While the database is away the health service answers NOT_SERVING and
//! calls fail fast with UNAVAILABLE and a RetryInfo; converge keeps running;
//! when the database is back it serves again on its own, keeps its shards
//! and its worker, and every apply that succeeded reaches Ready.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use converge_integration::api::{apply, apply_manifest, work_kind};
use converge_integration::eventually;
use converge_integration::postgres::PrivateServer;
use converge_integration::processes::{
    connect_when_up, converge_process_with, free_local_addr, noop_worker, signal, stop_cleanly, worked,
};
use converge_proto::v1::{GetResourceRequest, ListClusterMembersRequest};
use converge_sdk::Client;
use nix::sys::signal::Signal;
use serde_json::json;
use sqlx::postgres::PgPool;
use tokio::process::Child;
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::StatusExt;

/// The services whose health is checked besides the overall one ("").
const SERVICES: [&str; 3] = ["", "converge.v1.ResourceService", "converge.worker.v1.WorkerService"];

/// Longest an API call may take while the database is away.
const FAIL_FAST: Duration = Duration::from_secs(3);

/// How the applies of the load went.
#[derive(Debug, Default)]
struct Outcomes {
    /// Names applied successfully.
    applied: Vec<String>,
    /// Failed applies: code, whether they carried a RetryInfo, how long they took.
    failed: Vec<(Code, bool, Duration)>,
}

/// Writers of the load, each applying one resource after another.
const WRITERS: usize = 4;

/// Starts [`WRITERS`] writers applying `load-<writer>-<n>` resources until
/// `stop` flips.
fn spawn_load(
    client: &Client,
    outcomes: &Arc<Mutex<Outcomes>>,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..WRITERS)
        .map(|writer| spawn_writer(writer, client.clone(), outcomes.clone(), stop.clone()))
        .collect()
}

fn spawn_writer(
    writer: usize,
    client: Client,
    outcomes: Arc<Mutex<Outcomes>>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for i in 0.. {
            if *stop.borrow() {
                break;
            }
            let name = format!("load-{writer}-{i}");
            let began = Instant::now();
            let mut resources = client.resources();
            let call = resources.apply_resource(apply("noop", &name, json!({"i": i})));
            let outcome = tokio::time::timeout(Duration::from_secs(30), call).await;
            {
                let mut outcomes = outcomes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                match outcome {
                    Ok(Ok(_)) => outcomes.applied.push(name),
                    Ok(Err(status)) => {
                        let retry = status.get_error_details().retry_info().is_some();
                        outcomes.failed.push((status.code(), retry, began.elapsed()));
                    }
                    Err(_) => outcomes.failed.push((Code::DeadlineExceeded, false, began.elapsed())),
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

async fn health_of(client: &Client, service: &str) -> anyhow::Result<ServingStatus> {
    let mut health = HealthClient::new(client.channel());
    Ok(health
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await?
        .into_inner()
        .status())
}

/// Waits until every service in [`SERVICES`] reports `status`.
async fn wait_health(client: &Client, status: ServingStatus, within: Duration) -> anyhow::Result<()> {
    eventually(within, || async {
        for service in SERVICES {
            if health_of(client, service).await? != status {
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
    .await
}

/// Checks what the API and the process do while the database is away.
async fn check_outage(client: &Client, server: &mut Child) -> anyhow::Result<()> {
    wait_health(client, ServingStatus::NotServing, Duration::from_secs(5)).await?;
    let began = Instant::now();
    let status = client
        .resources()
        .get_resource(GetResourceRequest {
            kind: "noop".into(),
            name: "load-0".into(),
        })
        .await
        .err()
        .ok_or_else(|| anyhow::anyhow!("a read succeeded with the database away"))?;
    assert!(began.elapsed() < FAIL_FAST, "the call took {:?}", began.elapsed());
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let details = status.get_error_details();
    assert_eq!(
        details.error_info().map(|i| i.reason.as_str()),
        Some("DATABASE_UNAVAILABLE")
    );
    assert!(details.retry_info().is_some(), "{status:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(server.try_wait()?.is_none(), "converge kept running");
    Ok(())
}

/// Waits until the load is seen to apply again after an outage.
async fn wait_applied_more(outcomes: &Mutex<Outcomes>, than: usize) -> anyhow::Result<()> {
    eventually(Duration::from_secs(20), || async {
        let applied = outcomes.lock().map(|o| o.applied.len()).unwrap_or(0);
        Ok((applied >= than + 40).then_some(()))
    })
    .await
}

fn applied_so_far(outcomes: &Mutex<Outcomes>) -> usize {
    outcomes.lock().map(|o| o.applied.len()).unwrap_or(0)
}

/// Waits until every one of `names` is Ready.
async fn wait_ready(pool: &PgPool, names: &[String]) -> anyhow::Result<()> {
    eventually(Duration::from_secs(40), || async {
        let ready: i64 = sqlx::query_scalar("SELECT count(*) FROM resources WHERE name = ANY($1) AND phase = 'Ready'")
            .bind(names)
            .fetch_one(pool)
            .await?;
        Ok((ready == names.len() as i64).then_some(()))
    })
    .await
}

/// This process's membership as the API reports it: it has a shard range
/// and its worker.
async fn check_membership(client: &Client) -> anyhow::Result<()> {
    eventually(Duration::from_secs(20), || async {
        let members = client
            .cluster()
            .list_cluster_members(ListClusterMembersRequest::default())
            .await?
            .into_inner()
            .members;
        let ok = members.len() == 1
            && members[0].ready
            && members[0].shard_range.is_some()
            && members[0].connected_workers >= 1;
        Ok(ok.then_some(()))
    })
    .await
}

/// How PostgreSQL is taken away.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// `pg_ctl stop -m fast`.
    Stop,
    /// SIGKILL of the postmaster.
    Kill,
}

/// What one outage is checked against.
struct Outage<'a> {
    client: &'a Client,
    server: &'a mut Child,
    log: &'a Path,
    outcomes: &'a Mutex<Outcomes>,
}

impl Outage<'_> {
    /// Takes the database away with `fault`, checks the outage is served as
    /// one, starts the database again and waits until converge serves and
    /// applies again.
    async fn ride_out(&mut self, database: &mut PrivateServer, fault: Fault) -> anyhow::Result<()> {
        match fault {
            Fault::Stop => database.stop().await?,
            Fault::Kill => database.kill().await?,
        }
        check_outage(self.client, self.server)
            .await
            .map_err(|e| with_log(e, self.log))?;
        let before = applied_so_far(self.outcomes);
        database.start().await?;
        wait_health(self.client, ServingStatus::Serving, Duration::from_secs(15))
            .await
            .map_err(|e| with_log(e, self.log))?;
        wait_applied_more(self.outcomes, before).await
    }
}

#[tokio::test]
async fn a_restarted_database_is_ridden_out_and_nothing_is_lost() -> anyhow::Result<()> {
    let started = Instant::now();
    let mut database = PrivateServer::primary().await?;
    converge_service::db::ensure_database(&database.connect_options("postgres")?, "converge").await?;
    let scratch = tempfile::tempdir()?;
    let addr = free_local_addr()?;
    let address = format!("http://{addr}");
    let log = scratch.path().join("converge.log");
    let mut server = converge_process_with(&database.url("converge")?, &addr, &log, &[("LOG_LEVEL", "info")])?;
    let client = connect_when_up(&address).await?;
    apply_manifest(&client, work_kind("noop", 1, None)).await?;
    let mut worker = noop_worker(&address, 16, 0, &scratch.path().join("worked"))?;
    check_membership(&client).await?;

    let outcomes = Arc::new(Mutex::new(Outcomes::default()));
    let (stop_load, stop_rx) = tokio::sync::watch::channel(false);
    let load = spawn_load(&client, &outcomes, &stop_rx);
    wait_applied_more(&outcomes, 0).await?;

    // A fast shutdown (`pg_ctl stop -m fast`), down for a few seconds.
    let mut outage = Outage {
        client: &client,
        server: &mut server,
        log: &log,
        outcomes: &outcomes,
    };
    outage.ride_out(&mut database, Fault::Stop).await?;
    check_membership(&client).await?;
    // Results the broker held while the database was away were kept,
    // written when it came back and only then acknowledged to the worker
    // (which keeps and re-sends them until then): no task ran twice, and
    // the outage delayed them by its length, not by the lease timeout.
    {
        let pool = PgPool::connect_with(database.connect_options("converge")?).await?;
        let so_far = outcomes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .applied
            .clone();
        wait_ready(&pool, &so_far).await.map_err(|e| with_log(e, &log))?;
        pool.close().await;
        let repeats: Vec<(String, usize)> = worked(&scratch.path().join("worked"))?
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .collect();
        assert!(
            repeats.is_empty(),
            "tasks ran again after a database restart: {repeats:?}"
        );
    }

    // A crash: the postmaster is killed; unlogged tables come back empty.
    outage.ride_out(&mut database, Fault::Kill).await?;

    stop_load.send(true)?;
    for writer in load {
        writer.await?;
    }
    let outcomes = std::mem::take(&mut *outcomes.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    for (code, retry, took) in &outcomes.failed {
        assert_eq!(*code, Code::Unavailable, "a failed apply was {code:?}");
        assert!(*retry, "an UNAVAILABLE apply carried no RetryInfo");
        assert!(*took < Duration::from_secs(11), "a failed apply took {took:?}");
    }
    let pool = PgPool::connect_with(database.connect_options("converge")?).await?;
    if let Err(e) = wait_ready(&pool, &outcomes.applied).await {
        let why = explain_not_ready(&pool, &outcomes.applied).await?;
        return Err(with_log(e, &log).context(why));
    }
    check_membership(&client).await?;
    // The notifications listener is back on its own connection.
    eventually(Duration::from_secs(10), || async {
        let listening: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'converge' AND query LIKE 'LISTEN%'",
        )
        .fetch_one(&pool)
        .await?;
        Ok((listening == 1).then_some(()))
    })
    .await?;
    assert!(server.try_wait()?.is_none(), "converge kept running");
    eprintln!(
        "{} applies succeeded and reached Ready, {} failed UNAVAILABLE; {:?} in all",
        outcomes.applied.len(),
        outcomes.failed.len(),
        started.elapsed()
    );
    pool.close().await;
    stop_cleanly(&mut worker).await?;
    stop_cleanly(&mut server).await?;
    Ok(())
}

/// The drain's bound in these tests: `SHUTDOWN_TIMEOUT_SECS`.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn sigterm_with_the_database_down_exits_within_the_shutdown_bound() -> anyhow::Result<()> {
    const PROCESSES: usize = 3;
    let mut database = PrivateServer::primary().await?;
    converge_service::db::ensure_database(&database.connect_options("postgres")?, "converge").await?;
    let url = database.url("converge")?;
    let scratch = tempfile::tempdir()?;
    let timeout = SHUTDOWN_TIMEOUT.as_secs().to_string();
    let mut nodes = Vec::new();
    for i in 0..PROCESSES {
        let addr = free_local_addr()?;
        let log = scratch.path().join(format!("converge-{i}.log"));
        let env = [("LOG_LEVEL", "info"), ("SHUTDOWN_TIMEOUT_SECS", timeout.as_str())];
        let child = converge_process_with(&url, &addr, &log, &env)?;
        let client = connect_when_up(&format!("http://{addr}")).await?;
        nodes.push((child, client, log, addr));
    }
    // Work in flight: a worker holds leases through the first process, so
    // its drain has streams to end as well.
    apply_manifest(&nodes[0].1, work_kind("noop", 1, None)).await?;
    let mut worker = noop_worker(
        &format!("http://{}", nodes[0].3),
        8,
        600_000,
        &scratch.path().join("worked"),
    )?;
    for i in 0..8 {
        nodes[0]
            .1
            .resources()
            .apply_resource(apply("noop", &format!("held-{i}"), json!({})))
            .await?;
    }
    let pool = PgPool::connect_with(database.connect_options("converge")?).await?;
    eventually(Duration::from_secs(20), || async {
        let leased: i64 = sqlx::query_scalar("SELECT count(*) FROM work_queue WHERE lease_token IS NOT NULL")
            .fetch_one(&pool)
            .await?;
        Ok((leased > 0).then_some(()))
    })
    .await?;
    pool.close().await;

    database.stop().await?;
    for (_, client, log, _) in &nodes {
        wait_health(client, ServingStatus::NotServing, Duration::from_secs(5))
            .await
            .map_err(|e| with_log(e, log))?;
    }
    // All at once, as a rollout or a node drain does.
    let began = Instant::now();
    for (child, ..) in &nodes {
        signal(child, Signal::SIGTERM)?;
    }
    // The documented bound: the shutdown timeout plus SHUTDOWN_CLEANUP (5 s),
    // and a moment for the process to exit and be reaped.
    let bound = SHUTDOWN_TIMEOUT + converge_service::server::SHUTDOWN_CLEANUP + Duration::from_secs(2);
    for (child, _, log, _) in &mut nodes {
        let status = match tokio::time::timeout_at((began + bound).into(), child.wait()).await {
            Ok(status) => status?,
            Err(_) => {
                return Err(with_log(
                    anyhow::anyhow!("a converge process still ran {:?} after SIGTERM", began.elapsed()),
                    log,
                ));
            }
        };
        // A requested stop exits 0 even when the database kept it from
        // leaving the registry (the row ages out).
        assert!(status.success(), "exited with {status}");
    }
    eprintln!("{PROCESSES} processes exited {:?} after SIGTERM", began.elapsed());
    worker.kill().await?;
    Ok(())
}

/// What keeps some of `names` from Ready: the first that are not, the
/// first that do not exist, and the task queue.
async fn explain_not_ready(pool: &PgPool, names: &[String]) -> anyhow::Result<String> {
    let stuck: Vec<(String, String, i64, i64)> = sqlx::query_as(
        "SELECT name, phase, generation, synced_gen FROM resources
          WHERE name = ANY($1) AND phase <> 'Ready' ORDER BY name LIMIT 20",
    )
    .bind(names)
    .fetch_all(pool)
    .await?;
    let missing: Vec<String> = sqlx::query_scalar(
        "SELECT n FROM unnest($1::text[]) AS n WHERE NOT EXISTS (SELECT 1 FROM resources WHERE name = n) LIMIT 20",
    )
    .bind(names)
    .fetch_all(pool)
    .await?;
    let queue: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT r.name, q.broker_id FROM work_queue q JOIN resources r ON r.id = q.resource_id LIMIT 20",
    )
    .fetch_all(pool)
    .await?;
    let outbox: i64 = sqlx::query_scalar("SELECT count(*) FROM work_outbox")
        .fetch_one(pool)
        .await?;
    Ok(format!(
        "not Ready: {stuck:?}; missing: {missing:?}; queued: {queue:?}; results waiting: {outbox}"
    ))
}

/// `error`, followed by the tail of the converge log.
fn with_log(error: anyhow::Error, log: &Path) -> anyhow::Error {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(40)..].join("\n");
    error.context(format!("converge log (tail):\n{tail}"))
}
