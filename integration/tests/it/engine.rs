//! The reconcile engine end to end: resources applied through the API are
//! worked by SDK workers over the real worker stream and reach READY, with
//! retries, terminal failures, requeue-after, caps across brokers and
//! deadlines.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use converge_integration::api::{self, apply, apply_manifest, apply_ok, count, work_kind};
use converge_integration::{TestDatabase, TestServer, eventually};
use converge_proto::v1::{
    GetResourceRequest, KindConfig, ListResourcesRequest, Phase, ReconcileResourceRequest, Resource,
    UpdateKindConfigRequest,
};
use converge_sdk::Client;
use converge_sdk::worker::{HandlerError, KindVersion, Outcome, Provider, ReactionRequest, Worker, async_trait};
use converge_service::config::Role;
use converge_service::store::work::{self, OrphanCursor};
use serde_json::json;
use tokio::sync::oneshot;

type Behaviour = Arc<dyn Fn(&ReactionRequest, usize) -> Result<Outcome, HandlerError> + Send + Sync>;

/// A scriptable provider for kind `job` version 1 that records what it ran.
#[derive(Clone)]
struct Scripted {
    calls: Arc<Mutex<HashMap<(String, i64), usize>>>,
    running: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    delay: Duration,
    /// The first attempt of every resource never finishes on its own.
    hang_first: bool,
    behaviour: Behaviour,
}

impl Scripted {
    fn new(delay: Duration, behaviour: Behaviour) -> Self {
        Self {
            calls: Arc::default(),
            running: Arc::default(),
            peak: Arc::default(),
            delay,
            hang_first: false,
            behaviour,
        }
    }

    fn ok() -> Self {
        Self::new(
            Duration::ZERO,
            Arc::new(|req, _| Ok(Outcome::new().with_status(json!({"seen": req.generation})))),
        )
    }

    fn calls(&self) -> HashMap<(String, i64), usize> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

#[async_trait]
impl Provider for Scripted {
    fn kind(&self) -> KindVersion {
        KindVersion::new("job", 1)
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        let attempt = {
            let mut calls = self.calls.lock().map_err(|_| HandlerError::transient("poisoned"))?;
            let entry = calls
                .entry((request.resource.name.clone(), request.generation))
                .or_default();
            *entry += 1;
            *entry
        };
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        if self.hang_first && attempt == 1 {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let result = (self.behaviour)(&request, attempt);
        self.running.fetch_sub(1, Ordering::SeqCst);
        result
    }
}

/// Runs a worker until the returned sender fires (or is dropped).
fn run_worker(address: String, provider: Scripted, parallel: usize) -> oneshot::Sender<()> {
    api::spawn_worker(
        Worker::builder()
            .endpoint(address)
            .provider(provider)
            .max_parallel(parallel)
            .heartbeat_interval(Duration::from_millis(500))
            .drain_timeout(Duration::from_secs(5)),
    )
}

async fn get(client: &Client, name: &str) -> anyhow::Result<Resource> {
    client
        .resources()
        .get_resource(GetResourceRequest {
            kind: "job".into(),
            name: name.into(),
        })
        .await?
        .into_inner()
        .resource
        .ok_or_else(|| anyhow::anyhow!("no resource"))
}

async fn wait_phase(client: &Client, name: &str, phase: Phase, timeout: Duration) -> anyhow::Result<Resource> {
    eventually(timeout, || async {
        let resource = get(client, name).await?;
        Ok((resource.phase() == phase).then_some(resource))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{name} never reached {phase:?}: {e}"))
}

async fn count_phase(client: &Client, phase: Phase) -> anyhow::Result<usize> {
    let mut count = 0;
    let mut request = ListResourcesRequest {
        kind: Some("job".into()),
        phases: vec![phase.into()],
        page_size: 1000,
        ..Default::default()
    };
    loop {
        let page = client.resources().list_resources(request.clone()).await?.into_inner();
        count += page.resources.len();
        if page.next_page_token.is_empty() {
            return Ok(count);
        }
        request.page_token = page.next_page_token;
    }
}

async fn set_config(client: &Client, config: KindConfig, paths: &[&str]) -> anyhow::Result<()> {
    client
        .kinds()
        .update_kind_config(UpdateKindConfigRequest {
            config: Some(config),
            update_mask: Some(prost_types::FieldMask {
                paths: paths.iter().map(|p| (*p).to_owned()).collect(),
            }),
            ..Default::default()
        })
        .await?;
    Ok(())
}

fn job_config() -> KindConfig {
    KindConfig {
        kind: "job".into(),
        kind_version: 1,
        ..Default::default()
    }
}

#[tokio::test]
async fn applied_resources_are_worked_once_per_generation_and_become_ready() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, work_kind("job", 1, None)).await?;
    set_config(
        &client,
        KindConfig {
            max_inflight: 0,
            ..job_config()
        },
        &["max_inflight"],
    )
    .await?;
    let provider = Scripted::ok();
    let _worker = run_worker(server.address(), provider.clone(), 32);

    const N: usize = 300;
    let mut writers = Vec::new();
    for w in 0..4 {
        let client = client.clone();
        writers.push(tokio::spawn(async move {
            for i in (w..N).step_by(4) {
                client
                    .resources()
                    .apply_resource(apply("job", &format!("j{i}"), json!({"n": i})))
                    .await?;
            }
            anyhow::Ok(())
        }));
    }
    for writer in writers {
        writer.await??;
    }
    eventually(Duration::from_secs(60), || async {
        Ok((count_phase(&client, Phase::Ready).await? == N).then_some(()))
    })
    .await?;
    let ready = get(&client, "j7").await?;
    assert_eq!(ready.observed_generation, 1);
    assert_eq!(ready.status.as_ref().map(api::json), Some(json!({"seen": 1})));

    // A spec change is worked again, once.
    apply_ok(&client, apply("job", "j7", json!({"n": "changed"}))).await?;
    let again = wait_phase(&client, "j7", Phase::Ready, Duration::from_secs(20)).await?;
    assert_eq!(again.observed_generation, 2);
    let calls = provider.calls();
    assert_eq!(calls.len(), N + 1, "every (resource, generation) was worked");
    assert!(calls.values().all(|n| *n == 1), "and each exactly once: {calls:?}");
    server.shutdown().await
}

/// Listening for notifications takes no query connection: a server whose
/// pool has two connections still serves applies, works them to READY, and
/// wakes on notifications (with five listeners on the pool, as before, it
/// could not even answer an apply).
#[tokio::test]
async fn a_server_with_a_pool_of_two_connections_works_resources_to_ready() -> anyhow::Result<()> {
    let server = TestServer::start_with(TestDatabase::new().await?, Role::All, |config| {
        config.max_connections = 2;
    })
    .await?;
    let client = server.client().await?;
    apply_manifest(&client, work_kind("job", 1, None)).await?;
    let _worker = run_worker(server.address(), Scripted::ok(), 8);
    const N: usize = 20;
    for i in 0..N {
        apply_ok(&client, apply("job", &format!("small{i}"), json!({"n": i}))).await?;
    }
    eventually(Duration::from_secs(60), || async {
        Ok((count_phase(&client, Phase::Ready).await? == N).then_some(()))
    })
    .await?;
    server.shutdown().await
}

/// A result whose resource is locked does not stall its worker stream: the
/// direct completion gives up on the lock, the result waits in the outbox,
/// and the drain applies it once the lock is gone.
#[tokio::test]
async fn a_result_blocked_by_a_row_lock_waits_in_the_outbox_and_is_applied_after() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, work_kind("job", 1, None)).await?;
    apply_ok(&client, apply("job", "held", json!({}))).await?;
    let pool = server.database().pool();
    let mut holder = pool.begin().await?;
    sqlx::query("SELECT 1 FROM resources WHERE kind = 'job' AND name = 'held' FOR UPDATE")
        .execute(&mut *holder)
        .await?;

    let _worker = run_worker(server.address(), Scripted::ok(), 4);
    eventually(Duration::from_secs(30), || async {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM work_outbox o JOIN resources r ON r.id = o.resource_id
             WHERE r.kind = 'job' AND r.name = 'held'",
        )
        .fetch_one(pool)
        .await?;
        Ok((waiting == 1).then_some(()))
    })
    .await?;
    assert_ne!(
        get(&client, "held").await?.phase(),
        Phase::Ready,
        "not while the row is locked"
    );
    // The stream still serves: another resource is worked meanwhile.
    apply_ok(&client, apply("job", "free", json!({}))).await?;
    wait_phase(&client, "free", Phase::Ready, Duration::from_secs(30)).await?;

    holder.rollback().await?;
    let ready = wait_phase(&client, "held", Phase::Ready, Duration::from_secs(30)).await?;
    assert_eq!(ready.observed_generation, 1);
    server.shutdown().await
}

#[tokio::test]
async fn the_reaper_queues_lost_tasks_again_and_recovers_an_emptied_queue() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, work_kind("job", 1, None)).await?;
    let pool = server.database().pool();

    // A single task goes missing: the reaper's walk over resources finds
    // the resource lagging without one.
    apply_ok(&client, apply("job", "dropped", json!({}))).await?;
    sqlx::query("DELETE FROM work_queue w USING resources r WHERE r.id = w.resource_id AND r.name = 'dropped'")
        .execute(pool)
        .await?;
    let tasks_of = "SELECT count(*) FROM work_queue w JOIN resources r ON r.id = w.resource_id WHERE r.name = ";
    assert_eq!(count(pool, &format!("{tasks_of}'dropped'")).await?, 0);
    let worker = run_worker(server.address(), Scripted::ok(), 4);
    wait_phase(&client, "dropped", Phase::Ready, Duration::from_secs(30)).await?;
    drop(worker);

    // What crash recovery does to the unlogged queue: every task and the
    // marker are gone. A reaper puts the marker back and re-queues.
    apply_ok(&client, apply("job", "wiped", json!({}))).await?;
    sqlx::query("TRUNCATE work_queue, work_queue_intact")
        .execute(pool)
        .await?;
    assert_eq!(count(pool, &format!("{tasks_of}'wiped'")).await?, 0);
    let _worker = run_worker(server.address(), Scripted::ok(), 4);
    wait_phase(&client, "wiped", Phase::Ready, Duration::from_secs(30)).await?;
    assert_eq!(
        count(pool, "SELECT count(*) FROM work_queue_intact").await?,
        1,
        "the recovery put the marker back"
    );
    assert_eq!(get(&client, "dropped").await?.observed_generation, 1);
    server.shutdown().await
}

#[tokio::test]
async fn the_reaper_drops_tasks_whose_resource_is_gone_and_keeps_the_others() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, work_kind("job", 1, None)).await?;
    let pool = server.database().pool();
    // Between two live tasks, one left behind by a resource that is gone
    // (the write paths drop such tasks themselves; this is the race they
    // can lose).
    apply_ok(&client, apply("job", "before", json!({}))).await?;
    sqlx::query(
        "INSERT INTO work_queue (resource_id, task_type, kind, kind_version, generation, shard_id)
         VALUES (gen_random_uuid(), 'reconcile', 'job', 1, 1, 7)",
    )
    .execute(pool)
    .await?;
    apply_ok(&client, apply("job", "after", json!({}))).await?;
    let orphans =
        "SELECT count(*) FROM work_queue w WHERE NOT EXISTS (SELECT 1 FROM resources r WHERE r.id = w.resource_id)";

    // The walk goes a slice at a time and ends where the queue ends.
    let mut after: Option<OrphanCursor> = None;
    let mut slices = 0;
    loop {
        let (_dropped, next) = work::drop_orphaned_work(pool, after.as_ref(), 1).await?;
        slices += 1;
        assert!(slices <= 4, "a walk over three tasks in slices of one ends");
        match next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    eventually(Duration::from_secs(30), || async {
        Ok((count(pool, orphans).await? == 0).then_some(()))
    })
    .await?;
    assert_eq!(
        count(pool, "SELECT count(*) FROM work_queue").await?,
        2,
        "the tasks of live resources stay"
    );
    server.shutdown().await
}

#[tokio::test]
async fn a_backlog_is_worked_oldest_first() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, work_kind("job", 1, None)).await?;

    // Applied one by one with no worker connected: a backlog whose tasks
    // fall in shards all over the ring.
    let names: Vec<String> = (0..24).map(|i| format!("queued-{i:02}")).collect();
    for name in &names {
        apply_ok(&client, apply("job", name, json!({}))).await?;
    }
    // The first four resources get newer tasks than all the others (as if
    // queued again): the order is the tasks', not the resources' (ADR 17;
    // a pick along an index of resource ids would take these four first).
    let pool = server.database().pool();
    for name in &names[..4] {
        tokio::time::sleep(Duration::from_millis(2)).await;
        sqlx::query(
            "UPDATE work_queue SET id = time_ordered_uuid()
             WHERE resource_id = (SELECT id FROM resources WHERE kind = 'job' AND name = $1)",
        )
        .bind(name)
        .execute(pool)
        .await?;
    }
    let expected: Vec<String> = names[4..].iter().chain(&names[..4]).cloned().collect();

    // One task at a time: each claim takes the oldest task still waiting.
    let order = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&order);
    let provider = Scripted::new(
        Duration::ZERO,
        Arc::new(move |req, _| {
            if let Ok(mut seen) = seen.lock() {
                seen.push(req.resource.name.clone());
            }
            Ok(Outcome::new())
        }),
    );
    let _worker = run_worker(server.address(), provider, 1);
    for name in &names {
        wait_phase(&client, name, Phase::Ready, Duration::from_secs(30)).await?;
    }
    let order = order.lock().map(|o| o.clone()).unwrap_or_default();
    assert_eq!(order, expected, "tasks are claimed in the order they were queued");
    server.shutdown().await
}

#[tokio::test]
async fn transient_failures_retry_then_turn_terminal_and_a_spec_change_clears_failed() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    let mut manifest = work_kind("job", 1, None);
    if let Some(policy) = manifest.policy.as_mut() {
        policy.max_transient_attempts = 3;
    }
    apply_manifest(&client, manifest).await?;
    let provider = Scripted::new(
        Duration::ZERO,
        Arc::new(|req, attempt| {
            let spec = serde_json::to_value(&req.resource.spec).unwrap_or_default();
            match spec.get("mode").and_then(|m| m.as_str()) {
                Some("flaky") if attempt < 3 => Err(HandlerError::transient(format!("try {attempt} failed"))),
                Some("broken") => Err(HandlerError::transient("always broken")),
                Some("fatal") => Err(HandlerError::terminal("cannot ever work")),
                _ => Ok(Outcome::new().with_status(json!({"ok": true}))),
            }
        }),
    );
    let _worker = run_worker(server.address(), provider.clone(), 8);

    apply_ok(&client, apply("job", "flaky", json!({"mode": "flaky"}))).await?;
    apply_ok(&client, apply("job", "broken", json!({"mode": "broken"}))).await?;
    apply_ok(&client, apply("job", "fatal", json!({"mode": "fatal"}))).await?;

    // Retries with backoff (1 s, 2 s) until the third attempt succeeds.
    let flaky = wait_phase(&client, "flaky", Phase::Ready, Duration::from_secs(30)).await?;
    assert_eq!(flaky.failure_attempts, 0);
    assert_eq!(provider.calls().get(&("flaky".into(), 1)), Some(&3));

    // Three transient failures are terminal (max_transient_attempts = 3).
    let broken = wait_phase(&client, "broken", Phase::Failed, Duration::from_secs(30)).await?;
    assert_eq!((broken.failed_generation, broken.failure_attempts), (1, 3));
    // A terminal error stops at once.
    let fatal = wait_phase(&client, "fatal", Phase::Failed, Duration::from_secs(10)).await?;
    assert_eq!(provider.calls().get(&("fatal".into(), 1)), Some(&1));
    assert_eq!(fatal.failure_attempts, 1);
    assert_eq!(count_phase(&client, Phase::Failed).await?, 2, "listed by phase");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        provider.calls().get(&("broken".into(), 1)),
        Some(&3),
        "no retry after terminal"
    );

    // A spec change clears Failed.
    apply_ok(&client, apply("job", "broken", json!({"mode": "fine"}))).await?;
    let fixed = wait_phase(&client, "broken", Phase::Ready, Duration::from_secs(20)).await?;
    assert_eq!(fixed.observed_generation, 2);
    assert_eq!(count_phase(&client, Phase::Failed).await?, 1);

    // ReconcileResource retries a terminally failed generation on demand.
    client
        .resources()
        .reconcile_resource(ReconcileResourceRequest {
            kind: "job".into(),
            name: "fatal".into(),
            reset_backoff: true,
            ..Default::default()
        })
        .await?;
    eventually(Duration::from_secs(10), || async {
        Ok((provider.calls().get(&("fatal".into(), 1)) == Some(&2)).then_some(()))
    })
    .await?;
    server.shutdown().await
}

#[tokio::test]
async fn requeue_after_comes_back_without_failing() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, work_kind("job", 1, None)).await?;
    let provider = Scripted::new(
        Duration::ZERO,
        Arc::new(|_, attempt| {
            if attempt < 3 {
                Ok(Outcome::new()
                    .with_status(json!({"state": "provisioning"}))
                    .with_requeue_after(Duration::from_millis(300)))
            } else {
                Ok(Outcome::new().with_status(json!({"state": "done"})))
            }
        }),
    );
    let _worker = run_worker(server.address(), provider.clone(), 4);
    apply_ok(&client, apply("job", "slow", json!({}))).await?;
    let pending = eventually(Duration::from_secs(10), || async {
        let r = get(&client, "slow").await?;
        Ok((r.status.is_some()).then_some(r))
    })
    .await?;
    assert_eq!(pending.phase(), Phase::Reconciling, "not settled yet");
    assert_eq!(pending.failure_attempts, 0);
    let done = wait_phase(&client, "slow", Phase::Ready, Duration::from_secs(10)).await?;
    assert_eq!(done.status.as_ref().map(api::json), Some(json!({"state": "done"})));
    assert_eq!(provider.calls().get(&("slow".into(), 1)), Some(&3));
    server.shutdown().await
}

#[tokio::test]
async fn requeued_work_is_delivered_when_it_falls_due_not_on_the_next_poll() -> anyhow::Result<()> {
    // Past the session's fast polling after a result (120 ms) and between
    // two idle polls (500 ms apart), where the old behaviour was latest.
    const DELAY: Duration = Duration::from_millis(700);
    const ROUNDS: usize = 7;
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, work_kind("job", 1, None)).await?;
    // When each attempt started, and when the one before it answered.
    let starts: Arc<Mutex<Vec<std::time::Instant>>> = Arc::default();
    let seen = starts.clone();
    let provider = Scripted::new(
        Duration::ZERO,
        Arc::new(move |_, attempt| {
            if let Ok(mut starts) = seen.lock() {
                starts.push(std::time::Instant::now());
            }
            if attempt <= ROUNDS {
                Ok(Outcome::new().with_requeue_after(DELAY))
            } else {
                Ok(Outcome::new().with_status(json!({"state": "done"})))
            }
        }),
    );
    let _worker = run_worker(server.address(), provider, 4);
    apply_ok(&client, apply("job", "poller", json!({}))).await?;
    wait_phase(&client, "poller", Phase::Ready, Duration::from_secs(30)).await?;
    let starts = starts.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(starts.len(), ROUNDS + 1);
    // Lateness beyond the asked-for delay, per round. The idle poll is
    // 500 ms, so before due work had a timer it was late by 0-500 ms
    // (about 250 ms typically); the median says which it is.
    let mut late: Vec<Duration> = starts
        .windows(2)
        .map(|pair| (pair[1] - pair[0]).saturating_sub(DELAY))
        .collect();
    late.sort();
    let median = late[late.len() / 2];
    assert!(
        (starts[1] - starts[0]) >= DELAY,
        "never early: {:?}",
        starts[1] - starts[0]
    );
    eprintln!("requeued work was late by {late:?}");
    assert!(median < Duration::from_millis(100), "late by {late:?}");
    server.shutdown().await
}

#[tokio::test]
async fn max_inflight_holds_across_two_brokers_and_can_be_raised_live() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let a = TestServer::start_on(database.clone(), Role::All).await?;
    let b = TestServer::start_on(database, Role::All).await?;
    let client = a.client().await?;
    apply_manifest(&client, work_kind("job", 1, None)).await?;
    set_config(
        &client,
        KindConfig {
            max_inflight: 3,
            ..job_config()
        },
        &["max_inflight"],
    )
    .await?;
    // One shared tally across both workers.
    let provider = Scripted::new(
        Duration::from_millis(100),
        Arc::new(|_, _| Ok(Outcome::new().with_status(json!({})))),
    );
    let _wa = run_worker(a.address(), provider.clone(), 10);
    let _wb = run_worker(b.address(), provider.clone(), 10);
    for i in 0..40 {
        apply_ok(&client, apply("job", &format!("c{i}"), json!({}))).await?;
    }
    eventually(Duration::from_secs(60), || async {
        Ok((count_phase(&client, Phase::Ready).await? == 40).then_some(()))
    })
    .await?;
    let capped_peak = provider.peak.load(Ordering::SeqCst);
    assert!(capped_peak <= 3, "max_inflight 3 was exceeded: {capped_peak}");

    set_config(
        &client,
        KindConfig {
            max_inflight: 12,
            ..job_config()
        },
        &["max_inflight"],
    )
    .await?;
    provider.peak.store(0, Ordering::SeqCst);
    for i in 40..100 {
        apply_ok(&client, apply("job", &format!("c{i}"), json!({}))).await?;
    }
    eventually(Duration::from_secs(60), || async {
        Ok((count_phase(&client, Phase::Ready).await? == 100).then_some(()))
    })
    .await?;
    let raised_peak = provider.peak.load(Ordering::SeqCst);
    assert!(
        raised_peak > 3 && raised_peak <= 12,
        "raised cap not in effect: {raised_peak}"
    );
    a.shutdown().await?;
    b.shutdown().await
}

#[tokio::test]
async fn a_hung_handler_is_cancelled_at_its_deadline_and_retried() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let server = TestServer::start_with(database, Role::All, |config| {
        config.reaper.interval = Duration::from_millis(200);
    })
    .await?;
    let client = server.client().await?;
    let mut manifest = work_kind("job", 1, None);
    if let Some(policy) = manifest.policy.as_mut() {
        policy.task_deadline_secs = 1;
    }
    apply_manifest(&client, manifest).await?;
    let mut provider = Scripted::new(
        Duration::ZERO,
        Arc::new(|_, attempt| Ok(Outcome::new().with_status(json!({"attempt": attempt})))),
    );
    provider.hang_first = true;
    let _worker = run_worker(server.address(), provider.clone(), 4);
    apply_ok(&client, apply("job", "hang", json!({}))).await?;
    let done = wait_phase(&client, "hang", Phase::Ready, Duration::from_secs(30)).await?;
    assert_eq!(done.status.as_ref().map(api::json), Some(json!({"attempt": 2})));
    assert!(provider.calls().get(&("hang".into(), 1)).copied().unwrap_or(0) >= 2);
    let retried = get(&client, "hang").await?;
    assert_eq!(retried.failure_attempts, 0, "success resets the failure count");
    server.shutdown().await
}

/// With more streams on a broker than `broker::claims::FEW_STREAMS` (8),
/// the streams share their claims (one claims for several, leftovers handed
/// to the next) and their outbox appends (written together): every task is
/// still worked exactly once and every result lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_streams_share_claims_and_result_writes_and_work_each_task_once() -> anyhow::Result<()> {
    const STREAMS: usize = 12;
    const RESOURCES: usize = 600;
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, work_kind("job", 1, None)).await?;
    let provider = Scripted::new(
        Duration::from_millis(5),
        Arc::new(|req, _| Ok(Outcome::new().with_status(json!({"seen": req.generation})))),
    );
    let _workers: Vec<_> = (0..STREAMS)
        .map(|_| run_worker(server.address(), provider.clone(), 2))
        .collect();
    let pool = server.database().pool();
    eventually(Duration::from_secs(30), || async {
        let streams: i64 =
            sqlx::query_scalar("SELECT COALESCE(sum(connected_workers), 0)::bigint FROM cluster_members")
                .fetch_one(pool)
                .await?;
        Ok((streams == STREAMS as i64).then_some(()))
    })
    .await?;

    let mut writers = tokio::task::JoinSet::new();
    for w in 0..4 {
        let client = client.clone();
        writers.spawn(async move {
            for i in (w..RESOURCES).step_by(4) {
                apply_ok(&client, apply("job", &format!("many-{i:03}"), json!({}))).await?;
            }
            Ok::<_, anyhow::Error>(())
        });
    }
    while let Some(writer) = writers.join_next().await {
        writer??;
    }
    eventually(Duration::from_secs(120), || async {
        let ready = count(
            pool,
            "SELECT count(*) FROM resources WHERE kind = 'job' AND phase = 'Ready'",
        )
        .await?;
        Ok((ready == RESOURCES as i64).then_some(()))
    })
    .await?;
    let calls = provider.calls();
    assert_eq!(calls.len(), RESOURCES, "every task was worked");
    let twice: Vec<_> = calls.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "worked more than once: {twice:?}");
    assert_eq!(count(pool, "SELECT count(*) FROM work_queue").await?, 0);
    server.shutdown().await
}
