//! A cluster of real `converge` processes on one database: brokers tiling
//! the shards and listing their workers as members join and leave, a member
//! killed with tasks in flight, and a rolling restart under load.
//!
//! The processes run with the default membership timing (a heartbeat every
//! 5 s, a 15 s liveness window) and reaper timing (a lease not attested for
//! 20 s is freed): joins and graceful leaves re-tile at once (they notify),
//! a crash is noticed when the liveness window lapses.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use converge_integration::api::{self, apply, apply_manifest, count, work_kind};
use converge_integration::processes::{
    connect_when_up, converge_process_with, free_local_addr, noop_worker, signal, stop_cleanly, worked,
};
use converge_integration::{TestDatabase, eventually};
use converge_proto::v1::{ClusterMember, KindConfig, ListClusterMembersRequest, MemberRole, UpdateKindConfigRequest};
use converge_sdk::Client;
use nix::sys::signal::Signal;
use serde_json::json;
use sqlx::PgPool;
use tokio::process::Child;

/// Default liveness window plus one heartbeat: a crashed member's shards
/// are re-tiled by then.
const TAKEOVER: Duration = Duration::from_secs(15 + 5);

/// One database and a scratch directory for the processes' logs and the
/// workers' records.
struct Fleet {
    scratch: tempfile::TempDir,
    url: String,
    pool: PgPool,
    _database: TestDatabase,
}

/// A converge process of the fleet, restartable on the same address.
struct Node {
    child: Child,
    addr: String,
    role: &'static str,
    name: String,
    starts: usize,
}

impl Fleet {
    async fn new() -> anyhow::Result<Self> {
        let database = TestDatabase::new().await?;
        Ok(Self {
            scratch: tempfile::tempdir()?,
            url: database.url()?,
            pool: database.pool().clone(),
            _database: database,
        })
    }

    fn path(&self, file: &str) -> PathBuf {
        self.scratch.path().join(file)
    }

    /// Starts a `role` process called `name` on a free address.
    fn start(&self, role: &'static str, name: &str) -> anyhow::Result<Node> {
        let addr = free_local_addr()?;
        let child = self.spawn(role, name, &addr, 1)?;
        Ok(Node {
            child,
            addr,
            role,
            name: name.to_owned(),
            starts: 1,
        })
    }

    fn spawn(&self, role: &str, name: &str, addr: &str, start: usize) -> anyhow::Result<Child> {
        let log = self.path(&format!("{name}.{start}.log"));
        converge_process_with(&self.url, addr, &log, &[("ROLE", role), ("SHUTDOWN_TIMEOUT_SECS", "5")])
    }

    /// Starts `node` again on its address after it exited.
    fn restart(&self, node: &mut Node) -> anyhow::Result<()> {
        node.starts += 1;
        node.child = self.spawn(node.role, &node.name, &node.addr, node.starts)?;
        Ok(())
    }

    fn record(&self, name: &str) -> PathBuf {
        self.path(&format!("{name}.record"))
    }
}

impl Node {
    fn address(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn pid(&self) -> anyhow::Result<i32> {
        let pid = self
            .child
            .id()
            .ok_or_else(|| anyhow::anyhow!("{} is not running", self.name))?;
        Ok(i32::try_from(pid)?)
    }

    /// Waits until it answers.
    async fn client(&self) -> anyhow::Result<Client> {
        connect_when_up(&self.address()).await
    }
}

async fn members(client: &Client, ready_only: bool) -> anyhow::Result<Vec<ClusterMember>> {
    Ok(client
        .cluster()
        .list_cluster_members(ListClusterMembersRequest { ready_only })
        .await?
        .into_inner()
        .members)
}

/// The ready members with `role` and a shard range, by pid, when their
/// ranges tile all 256 shards.
fn tiling(members: &[ClusterMember], role: MemberRole) -> Option<BTreeSet<i32>> {
    let mut ranges: Vec<(i32, i32, i32)> = members
        .iter()
        .filter(|m| m.ready && m.role() == role)
        .filter_map(|m| m.shard_range.map(|r| (r.lo, r.hi, m.pid)))
        .collect();
    ranges.sort_unstable();
    let mut next = 0;
    for (lo, hi, _) in &ranges {
        if *lo != next || hi < lo {
            return None;
        }
        next = hi + 1;
    }
    (next == 256).then(|| ranges.iter().map(|(_, _, pid)| *pid).collect())
}

/// Waits until the ready members of `role` are exactly `pids` and their
/// ranges tile the shards.
async fn wait_tiled(client: &Client, role: MemberRole, pids: &[i32], within: Duration) -> anyhow::Result<()> {
    let want: BTreeSet<i32> = pids.iter().copied().collect();
    eventually(within, || async {
        let listed = members(client, true).await?;
        let ready: BTreeSet<i32> = listed.iter().filter(|m| m.role() == role).map(|m| m.pid).collect();
        Ok((ready == want && tiling(&listed, role).as_ref() == Some(&want)).then_some(()))
    })
    .await
}

/// The noop kind, uncapped (the test manifest's cap of 5 would make a run
/// about the cap).
async fn uncapped_noop(client: &Client) -> anyhow::Result<()> {
    apply_manifest(client, work_kind("noop", 1, None)).await?;
    client
        .kinds()
        .update_kind_config(UpdateKindConfigRequest {
            config: Some(KindConfig {
                kind: "noop".into(),
                kind_version: 1,
                max_inflight: 0,
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["max_inflight".into()],
            }),
            ..Default::default()
        })
        .await?;
    Ok(())
}

/// The records of several workers added up.
fn worked_by(records: &[&Path]) -> anyhow::Result<HashMap<String, usize>> {
    let mut total = HashMap::new();
    for record in records {
        for (line, n) in worked(record)? {
            *total.entry(line).or_default() += n;
        }
    }
    Ok(total)
}

async fn ready_count(pool: &PgPool) -> anyhow::Result<i64> {
    count(pool, "SELECT count(*) FROM resources WHERE phase = 'Ready'").await
}

#[tokio::test]
async fn brokers_tile_the_shards_list_their_workers_and_retile_as_they_join_and_leave() -> anyhow::Result<()> {
    let fleet = Fleet::new().await?;
    let mut control = fleet.start("control", "control")?;
    let mut a = fleet.start("broker", "a")?;
    let mut b = fleet.start("broker", "b")?;
    let client = control.client().await?;
    a.client().await?;
    b.client().await?;
    uncapped_noop(&client).await?;

    wait_tiled(
        &client,
        MemberRole::Broker,
        &[a.pid()?, b.pid()?],
        Duration::from_secs(20),
    )
    .await?;
    let listed = members(&client, false).await?;
    let control_member = listed
        .iter()
        .find(|m| m.pid == control.pid().unwrap_or_default())
        .ok_or_else(|| anyhow::anyhow!("the control process is not listed: {listed:?}"))?;
    assert_eq!(control_member.role(), MemberRole::Control);
    assert!(control_member.ready);
    assert!(
        control_member.broker_counters.is_none(),
        "a control member has no broker"
    );
    assert!(control_member.workers.is_empty());
    let config = api::json(
        control_member
            .config
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("no config"))?,
    );
    assert_eq!(config["role"], "control");
    assert_eq!(config["listenAddr"], control.addr.as_str());

    // A noop worker on each broker: each lists its own, as of its next heartbeat.
    let mut worker_a = noop_worker(&a.address(), 4, 0, &fleet.record("worker-a"))?;
    let mut worker_b = noop_worker(&b.address(), 6, 0, &fleet.record("worker-b"))?;
    let (pid_a, pid_b) = (a.pid()?, b.pid()?);
    eventually(Duration::from_secs(20), || async {
        let listed = members(&client, true).await?;
        let listed_worker = |pid: i32, max_inflight: i32| {
            listed.iter().any(|m| {
                m.pid == pid
                    && m.connected_workers == 1
                    && m.workers.len() == 1
                    && m.workers[0].max_inflight == max_inflight
                    && m.workers[0].agent.starts_with("converge-sdk-rust/")
                    && m.workers[0]
                        .kinds
                        .iter()
                        .map(|k| (k.kind.as_str(), k.kind_version, k.ready))
                        .eq([("noop", 1, true)])
            })
        };
        Ok((listed_worker(pid_a, 4) && listed_worker(pid_b, 6)).then_some(()))
    })
    .await?;

    // A third broker joins: three ranges.
    let mut c = fleet.start("broker", "c")?;
    c.client().await?;
    let pid_c = c.pid()?;
    wait_tiled(
        &client,
        MemberRole::Broker,
        &[pid_a, pid_b, pid_c],
        Duration::from_secs(20),
    )
    .await?;

    // One leaves gracefully: back to two, and its row is gone.
    stop_cleanly(&mut b.child).await?;
    wait_tiled(&client, MemberRole::Broker, &[pid_a, pid_c], Duration::from_secs(20)).await?;
    let listed = members(&client, false).await?;
    assert!(
        listed.iter().all(|m| m.pid != pid_b),
        "a graceful leave removes the row"
    );

    worker_a.kill().await?;
    worker_b.kill().await?;
    for node in [&mut a, &mut c, &mut control] {
        stop_cleanly(&mut node.child).await?;
    }
    Ok(())
}

#[tokio::test]
async fn a_killed_members_shards_and_in_flight_tasks_are_taken_over() -> anyhow::Result<()> {
    const N: i64 = 200;
    const HELD: usize = 6;
    let fleet = Fleet::new().await?;
    let mut nodes = Vec::new();
    for name in ["p1", "p2", "p3"] {
        nodes.push(fleet.start("all", name)?);
    }
    let client = nodes[1].client().await?;
    for node in &nodes {
        node.client().await?;
    }
    let pids: Vec<i32> = nodes.iter().map(Node::pid).collect::<anyhow::Result<_>>()?;
    wait_tiled(&client, MemberRole::All, &pids, Duration::from_secs(20)).await?;
    uncapped_noop(&client).await?;
    let victim = members(&client, true)
        .await?
        .into_iter()
        .find(|m| m.pid == pids[0])
        .map(|m| m.member_id)
        .ok_or_else(|| anyhow::anyhow!("p1 is not listed"))?;

    // A slow worker on p1 takes HELD tasks and sits on them.
    let slow_record = fleet.record("slow");
    let mut slow = noop_worker(&nodes[0].address(), HELD, 120_000, &slow_record)?;
    for i in 0..N {
        client
            .resources()
            .apply_resource(apply("noop", &format!("r{i}"), json!({"i": i})))
            .await?;
    }
    let held: Vec<String> = eventually(Duration::from_secs(20), || async {
        let held: Vec<String> = sqlx::query_scalar(
            "SELECT r.name FROM work_queue w JOIN resources r ON r.id = w.resource_id
             WHERE w.broker_id = $1 AND w.lease_token IS NOT NULL ORDER BY r.name",
        )
        .bind(&victim)
        .fetch_all(&fleet.pool)
        .await?;
        Ok((held.len() == HELD).then_some(held))
    })
    .await?;

    // Workers on the other two start on the rest; p1 dies mid-run.
    let fast_records = [fleet.record("fast2"), fleet.record("fast3")];
    let mut fast2 = noop_worker(&nodes[1].address(), 8, 20, &fast_records[0])?;
    let mut fast3 = noop_worker(&nodes[2].address(), 8, 20, &fast_records[1])?;
    signal(&nodes[0].child, Signal::SIGKILL)?;
    nodes[0].child.wait().await?;
    let killed = tokio::time::Instant::now();

    // Its shards go to the survivors once its heartbeat lapses.
    wait_tiled(&client, MemberRole::All, &pids[1..], TAKEOVER + Duration::from_secs(10)).await?;
    let took = killed.elapsed();
    assert!(took <= TAKEOVER + Duration::from_secs(5), "the takeover took {took:?}");
    let listed = members(&client, false).await?;
    let dead = listed
        .iter()
        .find(|m| m.member_id == victim)
        .ok_or_else(|| anyhow::anyhow!("the killed member's row went early"))?;
    assert!(!dead.ready, "a member that stopped heartbeating is not ready");

    // Its leases lapse and the survivors run those tasks: everything is
    // Ready, each generation worked once, the held ones elsewhere.
    eventually(Duration::from_secs(60), || async {
        Ok((ready_count(&fleet.pool).await? == N).then_some(()))
    })
    .await?;
    eprintln!("takeover after {took:?}, all ready after {:?}", killed.elapsed());
    let records: Vec<&Path> = fast_records.iter().map(PathBuf::as_path).collect();
    let counts = worked_by(&records)?;
    assert_eq!(
        counts.len(),
        N as usize,
        "every resource was worked by the survivors' workers"
    );
    let repeats: Vec<_> = counts.iter().filter(|(_, n)| **n != 1).collect();
    assert!(repeats.is_empty(), "each generation worked once: {repeats:?}");
    for name in &held {
        assert_eq!(
            counts.get(&format!("noop/{name} 1")),
            Some(&1),
            "{name} re-ran elsewhere"
        );
    }
    assert!(worked(&slow_record)?.is_empty(), "the slow worker finished nothing");

    slow.kill().await?;
    fast2.kill().await?;
    fast3.kill().await?;
    for node in &mut nodes[1..] {
        stop_cleanly(&mut node.child).await?;
    }
    Ok(())
}

/// Applies `r0`, `r1`, ... through `client` until `stop` flips, retrying a
/// name until its apply succeeds (the API process restarts meanwhile);
/// counts the applied names in `applied`.
async fn apply_steadily(client: Client, applied: Arc<AtomicUsize>, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    while !stop.load(Ordering::Relaxed) {
        let i = applied.load(Ordering::Relaxed);
        let request = apply("noop", &format!("r{i}"), json!({"i": i}));
        match client.resources().apply_resource(request).await {
            Ok(_) => {
                applied.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    Ok(())
}

/// Waits until the member with `pid` holds leases, and returns how many.
async fn held_through(client: &Client, pool: &PgPool, pid: i32) -> anyhow::Result<i64> {
    let member_id = members(client, true)
        .await?
        .into_iter()
        .find(|m| m.pid == pid)
        .map(|m| m.member_id)
        .ok_or_else(|| anyhow::anyhow!("no member with pid {pid}"))?;
    eventually(Duration::from_secs(10), || async {
        let held: i64 =
            sqlx::query_scalar("SELECT count(*) FROM work_queue WHERE broker_id = $1 AND lease_token IS NOT NULL")
                .bind(&member_id)
                .fetch_one(pool)
                .await?;
        Ok((held > 0).then_some(held))
    })
    .await
}

#[tokio::test]
async fn a_rolling_restart_under_load_leaves_everything_ready_and_each_result_applied_once() -> anyhow::Result<()> {
    const PARALLEL: usize = 8;
    let fleet = Fleet::new().await?;
    let mut nodes = vec![
        fleet.start("broker", "b1")?,
        fleet.start("broker", "b2")?,
        fleet.start("control", "control")?,
    ];
    let client = nodes[2].client().await?;
    for node in &nodes {
        node.client().await?;
    }
    uncapped_noop(&client).await?;
    let records = [fleet.record("w1"), fleet.record("w2")];
    let mut workers = vec![
        noop_worker(&nodes[0].address(), PARALLEL, 200, &records[0])?,
        noop_worker(&nodes[1].address(), PARALLEL, 200, &records[1])?,
    ];

    let applied = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let applier = tokio::spawn(apply_steadily(client.clone(), applied.clone(), stop.clone()));
    let progressed = |since: usize| {
        let applied = applied.clone();
        async move {
            eventually(Duration::from_secs(20), || async {
                Ok((applied.load(Ordering::Relaxed) >= since + 20).then_some(()))
            })
            .await
        }
    };
    progressed(0).await?;

    // One process at a time: drain (exit 0), start again on its address,
    // wait until it serves (a broker: its worker is back), and keep the load
    // going in between. A broker is stopped while its worker holds tasks
    // through it: the worker resumes them on the restarted broker.
    for node in &mut nodes {
        let before = applied.load(Ordering::Relaxed);
        if node.role == "broker" {
            let held = held_through(&client, &fleet.pool, node.pid()?).await?;
            eprintln!("stopping {} holding {held} tasks", node.name);
        }
        stop_cleanly(&mut node.child).await?;
        fleet.restart(node)?;
        node.client().await?;
        if node.role == "broker" {
            let pid = node.pid()?;
            eventually(Duration::from_secs(30), || async {
                let listed = members(&client, true).await.unwrap_or_default();
                Ok(listed
                    .iter()
                    .any(|m| m.pid == pid && m.connected_workers == 1)
                    .then_some(()))
            })
            .await?;
        }
        progressed(before).await?;
    }
    stop.store(true, Ordering::Relaxed);
    applier.await??;
    let n = applied.load(Ordering::Relaxed);

    eventually(Duration::from_secs(60), || async {
        Ok((ready_count(&fleet.pool).await? == n as i64).then_some(()))
    })
    .await?;
    assert_eq!(count(&fleet.pool, "SELECT count(*) FROM resources").await?, n as i64);
    // Every resource shows the result of its own generation.
    let mismatched = count(
        &fleet.pool,
        "SELECT count(*) FROM resources WHERE (status->>'observed_generation')::bigint IS DISTINCT FROM generation",
    )
    .await?;
    assert_eq!(mismatched, 0);
    let records: Vec<&Path> = records.iter().map(PathBuf::as_path).collect();
    let counts = worked_by(&records)?;
    assert_eq!(counts.len(), n, "every applied resource was worked");
    // A drain keeps its leases and the worker resumes them on the restarted
    // broker; a completion is kept by the worker until the broker
    // acknowledges it (written), and sent again on the next stream if the
    // broker went before that. So every generation runs exactly once.
    let repeats: Vec<(&String, &usize)> = counts.iter().filter(|(_, n)| **n != 1).collect();
    assert!(repeats.is_empty(), "generations that ran more than once: {repeats:?}");
    eprintln!("rolling restart: {n} resources applied, each generation run once");

    for worker in &mut workers {
        worker.kill().await?;
    }
    for node in &mut nodes {
        stop_cleanly(&mut node.child).await?;
    }
    Ok(())
}

/// Leases held through `member_id`.
async fn leases_through(pool: &PgPool, member_id: &str) -> anyhow::Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM work_queue WHERE broker_id = $1 AND lease_token IS NOT NULL")
            .bind(member_id)
            .fetch_one(pool)
            .await?,
    )
}

/// Applies `noop` resources `<prefix>-0..n` and waits until `total` tasks
/// are leased.
async fn apply_held(client: &Client, pool: &PgPool, prefix: &str, n: usize, total: i64) -> anyhow::Result<()> {
    for i in 0..n {
        client
            .resources()
            .apply_resource(apply("noop", &format!("{prefix}-{i}"), json!({})))
            .await?;
    }
    eventually(Duration::from_secs(20), || async {
        let leased = count(pool, "SELECT count(*) FROM work_queue WHERE lease_token IS NOT NULL").await?;
        Ok((leased == total).then_some(()))
    })
    .await
}

#[tokio::test]
async fn a_successor_frees_the_leases_no_worker_resumed_after_a_short_grace() -> anyhow::Result<()> {
    const HELD: usize = 4;
    let fleet = Fleet::new().await?;
    let addr = free_local_addr()?;
    let address = format!("http://{addr}");
    let env = [("MEMBER_IDENTITY", "pod-0")];
    let mut first = converge_process_with(&fleet.url, &addr, &fleet.path("pod-0.1.log"), &env)?;
    let client = connect_when_up(&address).await?;
    uncapped_noop(&client).await?;
    let predecessor = members(&client, true)
        .await?
        .into_iter()
        .next()
        .map(|m| m.member_id)
        .ok_or_else(|| anyhow::anyhow!("no member"))?;

    // Worker A holds its tasks for ten minutes and dies with the process:
    // nobody resumes its leases. Worker B finishes its tasks 10 s after
    // claiming them and survives: it resumes its leases on the successor.
    let (record_a, record_b) = (fleet.record("a"), fleet.record("b"));
    let mut worker_a = noop_worker(&address, HELD, 600_000, &record_a)?;
    apply_held(&client, &fleet.pool, "lost", HELD, HELD as i64).await?;
    let mut worker_b = noop_worker(&address, HELD, 10_000, &record_b)?;
    apply_held(&client, &fleet.pool, "kept", HELD, 2 * HELD as i64).await?;
    assert_eq!(leases_through(&fleet.pool, &predecessor).await?, 2 * HELD as i64);

    // The reaper frees a lease 20 s after its last attestation: not before
    // this long after the kill.
    let last_attested: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM now() - min(heartbeat_at))::float8 FROM work_queue WHERE broker_id = $1",
    )
    .bind(&predecessor)
    .fetch_one(&fleet.pool)
    .await?;
    let reaper_earliest = Duration::from_secs_f64((20.0 - last_attested).max(0.0));
    signal(&first, Signal::SIGKILL)?;
    worker_a.kill().await?;
    let killed = std::time::Instant::now();
    first.wait().await?;

    let mut second = converge_process_with(&fleet.url, &addr, &fleet.path("pod-0.2.log"), &env)?;
    connect_when_up(&address).await?;
    eventually(Duration::from_secs(30), || async {
        Ok((leases_through(&fleet.pool, &predecessor).await? == 0).then_some(()))
    })
    .await?;
    let freed_after = killed.elapsed();
    eprintln!("the predecessor's leases were all resumed or freed {freed_after:?} after the kill");
    assert!(
        freed_after >= converge_service::cluster::TAKEOVER_GRACE,
        "freed after {freed_after:?}: before the takeover grace"
    );
    assert!(
        freed_after + Duration::from_secs(2) < reaper_earliest,
        "freed after {freed_after:?}, the reaper could have from {reaper_earliest:?}"
    );

    // Everything reaches Ready through worker B. Its resumed tasks ran once:
    // had their leases been freed, their first results would have been
    // fenced out and they would have run again.
    eventually(Duration::from_secs(60), || async {
        Ok((ready_count(&fleet.pool).await? == 2 * HELD as i64).then_some(()))
    })
    .await?;
    let counts = worked(&record_b)?;
    assert_eq!(counts.len(), 2 * HELD, "{counts:?}");
    assert!(counts.values().all(|n| *n == 1), "each ran once on B: {counts:?}");
    assert!(worked(&record_a)?.is_empty());

    worker_b.kill().await?;
    stop_cleanly(&mut second).await?;
    Ok(())
}

/// A plan asked of a control process for a kind whose composer worker is
/// connected to a broker process (issue 46, ADR 50): the request crosses
/// pods through the database and the worker's answer comes back; with the
/// worker gone, the plan says no composer is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plan_on_a_control_pod_is_answered_by_a_composer_worker_on_a_broker_pod() -> anyhow::Result<()> {
    use converge_proto::v1::plan_resource_request::Change;
    use converge_proto::v1::{PlanAction, PlanComposer, PlanResourceRequest};

    let fleet = Fleet::new().await?;
    let control = fleet.start("control", "control")?;
    let broker = fleet.start("broker", "broker")?;
    let client = control.client().await?;
    broker.client().await?;
    for manifest in converge_examples::manifests()? {
        apply_manifest(&client, manifest).await?;
    }
    let mut worker = tokio::process::Command::new(converge_integration::processes::binary("converge-demo-worker")?)
        .args(["--broker", &broker.address(), "--delay-ms", "0"])
        .env("LOG_LEVEL", "error")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let request = || PlanResourceRequest {
        change: Some(Change::Apply(apply(
            "bom",
            "planned",
            json!({"teams": ["a"], "region": "us-east-1"}),
        ))),
        ..Default::default()
    };
    // The worker may still be subscribing: a plan then finds no composer.
    let plan = eventually(Duration::from_secs(20), || async {
        Ok(client.resources().plan_resource(request()).await.ok())
    })
    .await?
    .into_inner()
    .plan
    .unwrap_or_default();
    assert_eq!(PlanComposer::try_from(plan.composer)?, PlanComposer::Worker);
    let created: BTreeSet<String> = plan
        .children
        .iter()
        .filter(|c| c.action == PlanAction::Create as i32)
        .filter_map(|c| c.resource.as_ref().map(|r| format!("{}/{}", r.kind, r.name)))
        .collect();
    assert_eq!(
        created,
        BTreeSet::from(
            [
                "account/planned-network",
                "tgw/planned-tgw",
                "account/planned-a",
                "vpc/planned-a",
                "route/planned-a"
            ]
            .map(String::from)
        ),
        "{plan:?}"
    );
    assert_eq!(count(&fleet.pool, "SELECT count(*) FROM resources").await?, 0);

    worker.kill().await?;
    let refused = client.resources().plan_resource(request()).await;
    api::expect_error(refused, tonic::Code::Unavailable, "COMPOSER_UNAVAILABLE");
    assert_eq!(count(&fleet.pool, "SELECT count(*) FROM plan_requests").await?, 0);
    Ok(())
}
