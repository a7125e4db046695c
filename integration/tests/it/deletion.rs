//! The deletion lifecycle end to end: the reverse-dependency teardown
//! cascade, a stuck teardown, orphan grace and quarantine, with in-process
//! SDK workers whose finalizer kinds record every teardown call.
//!
//! A `stack` root composes `cell` children from its spec (cells and edges
//! "from depends on to"); both kinds carry a finalizer, so every node's
//! teardown runs on the worker and the recorded call order shows the order
//! of the cascade.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use converge_integration::api::{
    self, apply, apply_manifest, apply_ok, count, expect_error, find, get, reaction, spawn_worker,
};
use converge_integration::kinds::Stacks;
use converge_integration::processes::{
    connect_when_up, converge_process, crash_postgres_state, free_local_addr, signal,
};
use converge_integration::{TestDatabase, TestServer, eventually};
use converge_proto::v1::{
    ActOnResourcesRequest, ConditionStatus, DeleteResourceRequest, Emit, KindManifest, KindPolicy,
    ListResourceEventsRequest, Phase, QuarantineResourceRequest, ReconcileResourceRequest, Resource, ResourceAction,
    Trigger, UnquarantineResourceRequest,
};
use converge_sdk::Client;
use converge_sdk::worker::{
    HandlerError, KindVersion, Outcome, Provider, ReactionRequest, Stage, Worker, WorkerBuilder, async_trait,
};
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tonic::Code;

/// Finalizer of `cell`.
const CELL_FINALIZER: &str = "test.converge.dev/cell";
/// Finalizer of `stack`.
const STACK_FINALIZER: &str = "test.converge.dev/stack";
/// Orphan grace of `cell`, in seconds.
const GRACE_SECS: i32 = 2;

/// One recorded teardown call.
#[derive(Debug, Clone)]
struct Teardown {
    /// `cell/<name>` or `stack/<name>`.
    node: String,
    started: u64,
    finished: u64,
    succeeded: bool,
}

/// What the workers observed, shared by both providers.
#[derive(Clone, Default)]
struct Log {
    clock: Arc<AtomicU64>,
    teardowns: Arc<Mutex<Vec<Teardown>>>,
    /// Work runs per cell name.
    works: Arc<Mutex<HashMap<String, usize>>>,
    /// Cells whose work fails (transiently) while listed.
    failing: Arc<Mutex<HashSet<String>>>,
    /// Nodes whose teardown fails (transiently) while listed.
    stuck: Arc<Mutex<HashSet<String>>>,
    /// Nodes whose teardown fails terminally while listed.
    broken: Arc<Mutex<HashSet<String>>>,
    /// Pause of every teardown call.
    teardown_delay: Duration,
}

impl Log {
    fn teardowns(&self) -> Vec<Teardown> {
        self.teardowns.lock().map(|t| t.clone()).unwrap_or_default()
    }

    fn teardowns_of(&self, node: &str) -> Vec<Teardown> {
        self.teardowns().into_iter().filter(|t| t.node == node).collect()
    }

    fn works_of(&self, name: &str) -> usize {
        self.works
            .lock()
            .map(|w| w.get(name).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    fn set(set: &Mutex<HashSet<String>>, node: &str, on: bool) {
        if let Ok(mut set) = set.lock() {
            if on {
                set.insert(node.to_owned());
            } else {
                set.remove(node);
            }
        }
    }

    fn contains(set: &Mutex<HashSet<String>>, node: &str) -> bool {
        set.lock().map(|s| s.contains(node)).unwrap_or(false)
    }

    /// Runs one teardown of `node`, recording it.
    async fn teardown(&self, node: String) -> Result<Outcome, HandlerError> {
        let started = self.clock.fetch_add(1, Ordering::SeqCst);
        if !self.teardown_delay.is_zero() {
            tokio::time::sleep(self.teardown_delay).await;
        }
        let broken = Self::contains(&self.broken, &node);
        let succeeded = !broken && !Self::contains(&self.stuck, &node);
        let finished = self.clock.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut teardowns) = self.teardowns.lock() {
            teardowns.push(Teardown {
                node: node.clone(),
                started,
                finished,
                succeeded,
            });
        }
        if broken {
            Err(HandlerError::terminal(format!("{node} cannot be torn down")).with_reason("Broken"))
        } else if succeeded {
            Ok(Outcome::new())
        } else {
            Err(HandlerError::transient(format!("{node} cannot be torn down yet")).with_reason("StillInUse"))
        }
    }
}

/// Serves `cell`: work reports `{out: <name>}` (or fails transiently while
/// the cell is listed as failing); teardown is recorded.
#[derive(Clone)]
struct Cells(Log);

#[async_trait]
impl Provider for Cells {
    fn kind(&self) -> KindVersion {
        KindVersion::new("cell", 1)
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        let name = request.resource.name.clone();
        if request.stage == Stage::Delete {
            return self.0.teardown(format!("cell/{name}")).await;
        }
        if let Ok(mut works) = self.0.works.lock() {
            *works.entry(name.clone()).or_default() += 1;
        }
        if Log::contains(&self.0.failing, &name) {
            return Err(HandlerError::transient(format!("{name} keeps failing")).with_reason("ToldToFail"));
        }
        Ok(Outcome::new().with_status(json!({"out": name})))
    }
}

fn cell_manifest(orphan_grace_secs: i32) -> KindManifest {
    KindManifest {
        kind: "cell".into(),
        kind_version: 1,
        description: "a leaf with a teardown".into(),
        reactions: vec![
            reaction("work", Trigger::SpecChange, &[Emit::Status]),
            reaction("teardown", Trigger::DeleteRequested, &[Emit::Finalizer]),
        ],
        finalizer_name: CELL_FINALIZER.into(),
        policy: Some(KindPolicy {
            orphan_grace_secs,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn stack_manifest() -> KindManifest {
    KindManifest {
        kind: "stack".into(),
        kind_version: 1,
        description: "a composer with a teardown".into(),
        reactions: vec![
            reaction(
                "compose",
                Trigger::SpecChange,
                &[Emit::Children, Emit::Edges, Emit::Status],
            ),
            reaction("rollup", Trigger::ChildrenSettled, &[Emit::Status, Emit::Conditions]),
            reaction("teardown", Trigger::DeleteRequested, &[Emit::Finalizer]),
        ],
        finalizer_name: STACK_FINALIZER.into(),
        ..Default::default()
    }
}

fn worker_for(address: String, log: &Log) -> WorkerBuilder {
    Worker::builder()
        .endpoint(address)
        .provider(Cells(log.clone()))
        .provider(Stacks::with_teardown({
            let log = log.clone();
            Arc::new(move |node| {
                let log = log.clone();
                Box::pin(async move { log.teardown(node).await })
            })
        }))
        .max_parallel(64)
        .heartbeat_interval(Duration::from_millis(500))
}

struct Fixture {
    server: TestServer,
    client: Client,
    log: Log,
    _worker: oneshot::Sender<()>,
}

async fn fixture(teardown_delay: Duration) -> anyhow::Result<Fixture> {
    fixture_with(teardown_delay, GRACE_SECS).await
}

async fn fixture_with(teardown_delay: Duration, grace_secs: i32) -> anyhow::Result<Fixture> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, cell_manifest(grace_secs)).await?;
    apply_manifest(&client, stack_manifest()).await?;
    let log = Log {
        teardown_delay,
        ..Log::default()
    };
    let worker = spawn_worker(worker_for(server.address(), &log));
    Ok(Fixture {
        server,
        client,
        log,
        _worker: worker,
    })
}

/// A stack spec: cell names (each with an empty spec) and edges (from
/// depends on to).
fn stack(cells: &[&str], edges: &[(&str, &str)]) -> Value {
    let cells: Vec<(&str, Value)> = cells.iter().map(|c| (*c, json!({}))).collect();
    converge_integration::kinds::stack(&cells, edges)
}

async fn wait_for<T, F>(
    client: &Client,
    kind: &str,
    name: &str,
    timeout: Duration,
    what: &str,
    check: F,
) -> anyhow::Result<T>
where
    F: Fn(Option<Resource>) -> Option<T>,
{
    let found = eventually(timeout, || async { Ok(check(find(client, kind, name).await?)) }).await;
    match found {
        Ok(value) => Ok(value),
        Err(e) => {
            let last = find(client, kind, name).await;
            Err(anyhow::anyhow!("{kind}/{name} never {what}: {e}; now {last:?}"))
        }
    }
}

async fn wait_phase(
    client: &Client,
    kind: &str,
    name: &str,
    phase: Phase,
    timeout: Duration,
) -> anyhow::Result<Resource> {
    wait_for(client, kind, name, timeout, &format!("reached {phase:?}"), |r| {
        r.filter(|r| r.phase() == phase)
    })
    .await
}

async fn wait_gone(client: &Client, kind: &str, name: &str, timeout: Duration) -> anyhow::Result<()> {
    wait_for(client, kind, name, timeout, "went away", |r| r.is_none().then_some(())).await
}

async fn delete(client: &Client, kind: &str, name: &str) -> anyhow::Result<Resource> {
    client
        .resources()
        .delete_resource(DeleteResourceRequest {
            kind: kind.into(),
            name: name.into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .resource
        .ok_or_else(|| anyhow::anyhow!("no resource in the delete response"))
}

async fn event_reasons(client: &Client, kind: &str, name: &str) -> anyhow::Result<Vec<String>> {
    Ok(client
        .resources()
        .list_resource_events(ListResourceEventsRequest {
            kind: kind.into(),
            name: name.into(),
            page_size: 100,
            ..Default::default()
        })
        .await?
        .into_inner()
        .events
        .into_iter()
        .map(|e| e.reason)
        .collect())
}

/// Asserts that every `before` node's teardown finished (successfully)
/// before any teardown call of the `after` node started.
fn assert_torn_down_before(log: &[Teardown], before: &str, after: &str) {
    let done = log
        .iter()
        .filter(|t| t.node == before && t.succeeded)
        .map(|t| t.finished)
        .max();
    let started = log.iter().filter(|t| t.node == after).map(|t| t.started).min();
    let (Some(done), Some(started)) = (done, started) else {
        panic!("{before} or {after} was never torn down: {log:?}");
    };
    assert!(
        done < started,
        "{after} was torn down (from {started}) before {before} finished ({done}): {log:?}"
    );
}

/// The nodes torn down successfully, in completion order.
fn completed(log: &[Teardown]) -> Vec<String> {
    let mut done: Vec<&Teardown> = log.iter().filter(|t| t.succeeded).collect();
    done.sort_by_key(|t| t.finished);
    done.into_iter().map(|t| t.node.clone()).collect()
}

#[tokio::test]
async fn deleting_a_vpc_tears_down_its_routes_first_then_the_vpc() -> anyhow::Result<()> {
    let f = fixture(Duration::from_millis(100)).await?;
    let spec = stack(
        &["acct", "vpc", "route-a", "route-b", "bucket"],
        &[("vpc", "acct"), ("route-a", "vpc"), ("route-b", "vpc")],
    );
    apply_ok(&f.client, apply("stack", "net", spec)).await?;
    wait_phase(&f.client, "stack", "net", Phase::Ready, Duration::from_secs(60)).await?;

    let deleted = delete(&f.client, "cell", "vpc").await?;
    assert_eq!(deleted.phase(), Phase::Deleting);
    assert!(deleted.delete_time.is_some());
    assert_eq!(deleted.finalizers, [CELL_FINALIZER]);

    wait_gone(&f.client, "cell", "vpc", Duration::from_secs(60)).await?;
    for route in ["route-a", "route-b"] {
        assert!(find(&f.client, "cell", route).await?.is_none(), "{route} is gone too");
    }
    let log = f.log.teardowns();
    assert_torn_down_before(&log, "cell/route-a", "cell/vpc");
    assert_torn_down_before(&log, "cell/route-b", "cell/vpc");
    let mut torn: Vec<String> = completed(&log);
    torn.sort();
    assert_eq!(
        torn,
        ["cell/route-a", "cell/route-b", "cell/vpc"],
        "only the vpc's tree"
    );
    // What the vpc depends on, its siblings and its owner stay.
    assert_eq!(get(&f.client, "cell", "acct").await?.phase(), Phase::Ready);
    assert_eq!(get(&f.client, "cell", "bucket").await?.phase(), Phase::Ready);
    // The owner folds the loss of the torn-down children into its rollup.
    wait_for(
        &f.client,
        "stack",
        "net",
        Duration::from_secs(30),
        "rolled up without the torn-down children",
        |r| {
            r.filter(|r| {
                r.phase() == Phase::Ready
                    && r.delete_time.is_none()
                    && r.status.as_ref().map(api::json) == Some(json!({"ready": 2, "total": 2}))
            })
        },
    )
    .await?;
    f.server.shutdown().await
}

/// The demo-like bill of materials: a network account and gateway shared by
/// two teams, each with an account, a vpc and a route.
fn bom() -> (Vec<String>, Vec<(String, String)>) {
    let mut cells: Vec<String> = vec!["net-acct".into(), "tgw".into()];
    let mut edges: Vec<(String, String)> = vec![("tgw".into(), "net-acct".into())];
    for team in ["a", "b"] {
        cells.push(format!("{team}-acct"));
        cells.push(format!("{team}-vpc"));
        cells.push(format!("{team}-route"));
        edges.push((format!("{team}-vpc"), format!("{team}-acct")));
        edges.push((format!("{team}-route"), format!("{team}-vpc")));
        edges.push((format!("{team}-route"), "tgw".into()));
    }
    (cells, edges)
}

fn bom_spec(cells: &[String], edges: &[(String, String)]) -> Value {
    let cell_refs: Vec<&str> = cells.iter().map(String::as_str).collect();
    let edge_refs: Vec<(&str, &str)> = edges.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    stack(&cell_refs, &edge_refs)
}

/// The whole tree was torn down in reverse-dependency order, the root last.
fn assert_reverse_dependency_order(log: &[Teardown], root: &str, cells: &[String], edges: &[(String, String)]) {
    for (from, to) in edges {
        assert_torn_down_before(log, &format!("cell/{from}"), &format!("cell/{to}"));
    }
    for cell in cells {
        assert_torn_down_before(log, &format!("cell/{cell}"), root);
    }
    let done = completed(log);
    assert_eq!(
        done.last().map(String::as_str),
        Some(root),
        "the root goes last: {done:?}"
    );
    let distinct: HashSet<&String> = done.iter().collect();
    assert_eq!(distinct.len(), cells.len() + 1, "every node was torn down: {done:?}");
}

#[tokio::test]
async fn deleting_the_root_tears_the_whole_tree_down_in_reverse_dependency_order() -> anyhow::Result<()> {
    let f = fixture(Duration::from_millis(50)).await?;
    let (cells, edges) = bom();
    apply_ok(&f.client, apply("stack", "bom", bom_spec(&cells, &edges))).await?;
    wait_phase(&f.client, "stack", "bom", Phase::Ready, Duration::from_secs(60)).await?;

    let deleted = delete(&f.client, "stack", "bom").await?;
    assert_eq!(deleted.phase(), Phase::Deleting);
    // The whole tree is marked in the same call.
    for cell in &cells {
        let child = find(&f.client, "cell", cell).await?;
        assert!(
            child.as_ref().is_none_or(|c| c.phase() == Phase::Deleting),
            "{cell} is Deleting (or already gone): {child:?}"
        );
    }
    // Idempotent.
    let again = delete(&f.client, "stack", "bom").await?;
    assert_eq!(again.phase(), Phase::Deleting);

    let pool = f.server.database().pool().clone();
    let events = "SELECT count(*) FROM resource_events";
    assert!(count(&pool, events).await? > 0);

    wait_gone(&f.client, "stack", "bom", Duration::from_secs(60)).await?;
    for cell in &cells {
        assert!(find(&f.client, "cell", cell).await?.is_none(), "{cell} is gone");
    }
    // Their timelines went with them.
    assert_eq!(count(&pool, events).await?, 0);
    let log = f.log.teardowns();
    assert_reverse_dependency_order(&log, "stack/bom", &cells, &edges);
    assert!(log.iter().all(|t| t.succeeded));
    assert_eq!(log.len(), cells.len() + 1, "each node torn down once: {log:?}");
    f.server.shutdown().await
}

#[tokio::test]
async fn a_stuck_teardown_keeps_its_owner_deleting_until_it_succeeds() -> anyhow::Result<()> {
    let f = fixture(Duration::ZERO).await?;
    apply_ok(
        &f.client,
        apply("stack", "st", stack(&["base", "top"], &[("top", "base")])),
    )
    .await?;
    wait_phase(&f.client, "stack", "st", Phase::Ready, Duration::from_secs(60)).await?;
    Log::set(&f.log.stuck, "cell/base", true);

    delete(&f.client, "stack", "st").await?;
    wait_gone(&f.client, "cell", "top", Duration::from_secs(30)).await?;
    // base's teardown keeps failing: it stays, Deleting, with the reason
    // surfaced, and its owner waits.
    let base = wait_for(
        &f.client,
        "cell",
        "base",
        Duration::from_secs(30),
        "surfaced its failing teardown",
        |r| {
            r.filter(|r| {
                r.conditions
                    .iter()
                    .any(|c| c.r#type == "Teardown" && c.status() == ConditionStatus::False && c.reason == "StillInUse")
            })
        },
    )
    .await?;
    assert_eq!(base.phase(), Phase::Deleting);
    assert!(
        event_reasons(&f.client, "cell", "base")
            .await?
            .contains(&"StillInUse".to_owned())
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(f.log.teardowns_of("cell/base").len() >= 2, "retried");
    assert_eq!(get(&f.client, "stack", "st").await?.phase(), Phase::Deleting);
    assert!(f.log.teardowns_of("stack/st").is_empty(), "the owner's teardown waits");

    Log::set(&f.log.stuck, "cell/base", false);
    wait_gone(&f.client, "stack", "st", Duration::from_secs(60)).await?;
    let log = f.log.teardowns();
    assert_torn_down_before(&log, "cell/top", "cell/base");
    assert_torn_down_before(&log, "cell/base", "stack/st");
    assert_eq!(completed(&log), ["cell/top", "cell/base", "stack/st"]);
    f.server.shutdown().await
}

#[tokio::test]
async fn a_terminal_teardown_failure_waits_for_reconcile_resource() -> anyhow::Result<()> {
    let f = fixture(Duration::ZERO).await?;
    apply_ok(&f.client, apply("stack", "tf", stack(&["solo"], &[]))).await?;
    wait_phase(&f.client, "stack", "tf", Phase::Ready, Duration::from_secs(60)).await?;
    Log::set(&f.log.broken, "cell/solo", true);

    delete(&f.client, "cell", "solo").await?;
    let solo = wait_for(
        &f.client,
        "cell",
        "solo",
        Duration::from_secs(30),
        "surfaced its failed teardown",
        |r| {
            r.filter(|r| {
                r.conditions
                    .iter()
                    .any(|c| c.r#type == "Teardown" && c.reason == "Broken")
            })
        },
    )
    .await?;
    assert_eq!(solo.phase(), Phase::Deleting);
    // Terminal: not retried on its own, and never skipped.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(f.log.teardowns_of("cell/solo").len(), 1);
    assert_eq!(get(&f.client, "cell", "solo").await?.phase(), Phase::Deleting);

    Log::set(&f.log.broken, "cell/solo", false);
    f.client
        .resources()
        .reconcile_resource(ReconcileResourceRequest {
            kind: "cell".into(),
            name: "solo".into(),
            ..Default::default()
        })
        .await?;
    wait_gone(&f.client, "cell", "solo", Duration::from_secs(30)).await?;
    assert_eq!(f.log.teardowns_of("cell/solo").len(), 2);
    f.server.shutdown().await
}

#[tokio::test]
async fn a_teardown_that_always_fails_is_force_finalized_and_the_tree_deletion_completes() -> anyhow::Result<()> {
    let f = fixture(Duration::ZERO).await?;
    apply_ok(
        &f.client,
        apply("stack", "ff", stack(&["base", "top"], &[("top", "base")])),
    )
    .await?;
    wait_phase(&f.client, "stack", "ff", Phase::Ready, Duration::from_secs(60)).await?;
    Log::set(&f.log.stuck, "cell/base", true);
    let force = |name: &str| ActOnResourcesRequest {
        action: ResourceAction::ForceFinalize.into(),
        kind: "cell".into(),
        name: name.into(),
        reason: "the provider lost the account; nothing left to clean".into(),
        ..Default::default()
    };
    // Refused while the resource is not being deleted; nothing changes.
    let early = f.client.admin().act_on_resources(force("base")).await;
    expect_error(early, Code::FailedPrecondition, "ACTION_NOT_APPLICABLE");
    assert_eq!(get(&f.client, "cell", "base").await?.phase(), Phase::Ready);

    delete(&f.client, "stack", "ff").await?;
    wait_gone(&f.client, "cell", "top", Duration::from_secs(30)).await?;
    wait_for(
        &f.client,
        "cell",
        "base",
        Duration::from_secs(30),
        "surfaced its failing teardown",
        |r| {
            r.filter(|r| {
                r.conditions
                    .iter()
                    .any(|c| c.r#type == "Teardown" && c.reason == "StillInUse")
            })
        },
    )
    .await?;
    let forced = f.client.admin().act_on_resources(force("base")).await?.into_inner();
    assert_eq!(forced.acted_count, 1);
    // base goes without a successful teardown; its owner's teardown runs.
    wait_gone(&f.client, "stack", "ff", Duration::from_secs(60)).await?;
    let log = f.log.teardowns();
    assert!(
        log.iter().filter(|t| t.node == "cell/base").all(|t| !t.succeeded),
        "{log:?}"
    );
    assert_eq!(completed(&log), ["cell/top", "stack/ff"]);
    f.server.shutdown().await
}

#[tokio::test]
async fn a_child_pruned_without_grace_is_torn_down_after_its_dependents() -> anyhow::Result<()> {
    let f = fixture_with(Duration::ZERO, 0).await?;
    let all = stack(&["base", "mid", "top", "other"], &[("mid", "base"), ("top", "mid")]);
    apply_ok(&f.client, apply("stack", "pr", all)).await?;
    wait_phase(&f.client, "stack", "pr", Phase::Ready, Duration::from_secs(60)).await?;

    // base and mid are no longer emitted (top's edge to mid goes too, but
    // top keeps depending on nothing): both are torn down, mid first.
    let kept = stack(&["top", "other"], &[]);
    apply_ok(&f.client, apply("stack", "pr", kept)).await?;
    wait_gone(&f.client, "cell", "base", Duration::from_secs(30)).await?;
    wait_gone(&f.client, "cell", "mid", Duration::from_secs(30)).await?;
    let log = f.log.teardowns();
    assert_torn_down_before(&log, "cell/mid", "cell/base");
    let mut torn = completed(&log);
    torn.sort();
    assert_eq!(torn, ["cell/base", "cell/mid"]);
    let root = wait_for(
        &f.client,
        "stack",
        "pr",
        Duration::from_secs(30),
        "rolled up the kept children",
        |r| r.filter(|r| r.phase() == Phase::Ready && r.observed_generation == 2),
    )
    .await?;
    assert_eq!(
        root.status.as_ref().map(api::json),
        Some(json!({"ready": 2, "total": 2}))
    );
    assert_eq!(get(&f.client, "cell", "top").await?.phase(), Phase::Ready);
    f.server.shutdown().await
}

#[tokio::test]
async fn an_orphan_re_emitted_within_grace_is_kept_and_one_not_re_emitted_is_torn_down() -> anyhow::Result<()> {
    let f = fixture(Duration::ZERO).await?;
    let spec = |cells: &[&str]| stack(cells, &[]);
    apply_ok(&f.client, apply("stack", "og", spec(&["a", "b", "c"]))).await?;
    wait_phase(&f.client, "stack", "og", Phase::Ready, Duration::from_secs(60)).await?;
    let b_before = get(&f.client, "cell", "b").await?;

    // b is dropped: Orphaned, not torn down, and it does not hold up the root.
    apply_ok(&f.client, apply("stack", "og", spec(&["a", "c"]))).await?;
    let b = wait_phase(&f.client, "cell", "b", Phase::Orphaned, Duration::from_secs(30)).await?;
    assert!(b.delete_time.is_none());
    let root = wait_for(
        &f.client,
        "stack",
        "og",
        Duration::from_secs(30),
        "rolled up without the orphan",
        |r| r.filter(|r| r.phase() == Phase::Ready && r.observed_generation == 2),
    )
    .await?;
    assert_eq!(
        root.status.as_ref().map(api::json),
        Some(json!({"ready": 2, "total": 2}))
    );

    // Re-emitted within the grace period: adopted again, nothing torn down.
    apply_ok(&f.client, apply("stack", "og", spec(&["a", "b", "c"]))).await?;
    let b = wait_phase(&f.client, "cell", "b", Phase::Ready, Duration::from_secs(30)).await?;
    assert_eq!(b.uid, b_before.uid);
    assert_eq!(b.generation, b_before.generation, "re-adoption is not a spec change");
    tokio::time::sleep(Duration::from_secs(u64::try_from(GRACE_SECS)? + 2)).await;
    let b = get(&f.client, "cell", "b").await?;
    assert_eq!(b.phase(), Phase::Ready);
    assert!(f.log.teardowns_of("cell/b").is_empty(), "b was never torn down");
    let reasons = event_reasons(&f.client, "cell", "b").await?;
    assert!(
        reasons.contains(&"Orphaned".to_owned()) && reasons.contains(&"Readopted".to_owned()),
        "{reasons:?}"
    );

    // c is dropped and not re-emitted: torn down once the window passes.
    apply_ok(&f.client, apply("stack", "og", spec(&["a", "b"]))).await?;
    let orphaned_at = std::time::Instant::now();
    wait_phase(&f.client, "cell", "c", Phase::Orphaned, Duration::from_secs(30)).await?;
    wait_gone(&f.client, "cell", "c", Duration::from_secs(30)).await?;
    assert!(
        orphaned_at.elapsed() >= Duration::from_secs(u64::try_from(GRACE_SECS)? - 1),
        "c was kept for its grace period"
    );
    assert_eq!(f.log.teardowns_of("cell/c").len(), 1, "c's teardown ran");
    wait_phase(&f.client, "stack", "og", Phase::Ready, Duration::from_secs(30)).await?;
    assert!(f.log.teardowns_of("cell/a").is_empty() && f.log.teardowns_of("cell/b").is_empty());
    f.server.shutdown().await
}

#[tokio::test]
async fn a_quarantined_failing_child_lets_its_root_roll_up_and_release_resumes_it() -> anyhow::Result<()> {
    let f = fixture(Duration::ZERO).await?;
    Log::set(&f.log.failing, "bad", true);
    apply_ok(&f.client, apply("stack", "q", stack(&["ok", "bad"], &[]))).await?;
    wait_phase(&f.client, "cell", "ok", Phase::Ready, Duration::from_secs(30)).await?;
    eventually(Duration::from_secs(30), || async {
        Ok((f.log.works_of("bad") >= 2).then_some(()))
    })
    .await?;
    // The failing child keeps the root from settling.
    assert_eq!(get(&f.client, "stack", "q").await?.phase(), Phase::Reconciling);

    let quarantine = |name: &str| QuarantineResourceRequest {
        kind: "cell".into(),
        name: name.into(),
        message: "keeps failing; investigating".into(),
        ..Default::default()
    };
    let bad = f
        .client
        .resources()
        .quarantine_resource(quarantine("bad"))
        .await?
        .into_inner()
        .resource
        .ok_or_else(|| anyhow::anyhow!("no resource"))?;
    assert_eq!(bad.phase(), Phase::Quarantined);
    assert!(bad.quarantined);
    let condition = bad
        .conditions
        .iter()
        .find(|c| c.r#type == "Quarantined")
        .ok_or_else(|| anyhow::anyhow!("no Quarantined condition: {bad:?}"))?;
    assert_eq!(condition.status(), ConditionStatus::True);
    assert!(condition.message.contains("investigating"), "{condition:?}");
    // Idempotent.
    let again = f
        .client
        .resources()
        .quarantine_resource(quarantine("bad"))
        .await?
        .into_inner();
    assert_eq!(again.resource.map(|r| r.phase()), Some(Phase::Quarantined));
    expect_error(
        f.client.resources().quarantine_resource(quarantine("ghost")).await,
        Code::NotFound,
        "RESOURCE_NOT_FOUND",
    );

    let root = wait_phase(&f.client, "stack", "q", Phase::Ready, Duration::from_secs(30)).await?;
    assert_eq!(
        root.status.as_ref().map(api::json),
        Some(json!({"ready": 1, "total": 1}))
    );
    // Nothing reconciles it while it is set aside.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let runs = f.log.works_of("bad");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(f.log.works_of("bad"), runs, "a quarantined resource is not worked");
    assert_eq!(get(&f.client, "cell", "bad").await?.phase(), Phase::Quarantined);

    // Fixed and released: it reconciles again and the root folds it in.
    Log::set(&f.log.failing, "bad", false);
    let released = f
        .client
        .resources()
        .unquarantine_resource(UnquarantineResourceRequest {
            kind: "cell".into(),
            name: "bad".into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .resource
        .ok_or_else(|| anyhow::anyhow!("no resource"))?;
    assert!(!released.quarantined);
    assert!(released.conditions.iter().all(|c| c.r#type != "Quarantined"));
    wait_phase(&f.client, "cell", "bad", Phase::Ready, Duration::from_secs(30)).await?;
    wait_for(
        &f.client,
        "stack",
        "q",
        Duration::from_secs(30),
        "rolled up with the released child",
        |r| r.filter(|r| r.status.as_ref().map(api::json) == Some(json!({"ready": 2, "total": 2}))),
    )
    .await?;
    let reasons = event_reasons(&f.client, "cell", "bad").await?;
    assert!(reasons.contains(&"Quarantined".to_owned()) && reasons.contains(&"Unquarantined".to_owned()));

    // A resource being deleted cannot be quarantined.
    Log::set(&f.log.stuck, "cell/ok", true);
    delete(&f.client, "stack", "q").await?;
    expect_error(
        f.client.resources().quarantine_resource(quarantine("ok")).await,
        Code::FailedPrecondition,
        "DELETION_PENDING",
    );
    f.server.shutdown().await
}

#[tokio::test]
async fn a_server_killed_mid_cascade_finishes_the_teardown_in_order_after_restart() -> anyhow::Result<()> {
    let scratch = tempfile::tempdir()?;
    let database = TestDatabase::new().await?;
    let url = database.url()?;
    let pool = database.pool().clone();
    let addr = free_local_addr()?;
    let address = format!("http://{addr}");
    let mut server = converge_process(&url, &addr, &scratch.path().join("first.log"))?;
    let client = connect_when_up(&address).await?;
    apply_manifest(&client, cell_manifest(GRACE_SECS)).await?;
    apply_manifest(&client, stack_manifest()).await?;
    let log = Log {
        teardown_delay: Duration::from_millis(300),
        ..Log::default()
    };
    let _worker = spawn_worker(worker_for(address.clone(), &log));

    // Four layers of three; each cell depends on every cell of the layer below.
    let name = |layer: usize, i: usize| format!("l{layer}-{i}");
    let mut cells = Vec::new();
    let mut edges = Vec::new();
    for layer in 0..4 {
        for i in 0..3 {
            cells.push(name(layer, i));
            if layer > 0 {
                for j in 0..3 {
                    edges.push((name(layer, i), name(layer - 1, j)));
                }
            }
        }
    }
    apply_ok(&client, apply("stack", "crash", bom_spec(&cells, &edges))).await?;
    wait_phase(&client, "stack", "crash", Phase::Ready, Duration::from_secs(60)).await?;

    delete(&client, "stack", "crash").await?;
    // Kill once the top layer is down and the rest is still standing.
    eventually(Duration::from_secs(60), || async {
        Ok((completed(&log.teardowns()).len() >= 3).then_some(()))
    })
    .await?;
    signal(&server, Signal::SIGKILL)?;
    server.wait().await?;
    let torn_before_crash = completed(&log.teardowns()).len();
    assert!(
        torn_before_crash < cells.len(),
        "killed mid-cascade ({torn_before_crash} torn down)"
    );
    // As if PostgreSQL itself had crashed: unlogged tables come back empty.
    crash_postgres_state(&pool).await?;

    let mut restarted = converge_process(&url, &addr, &scratch.path().join("second.log"))?;
    let client = connect_when_up(&address).await?;
    wait_gone(&client, "stack", "crash", Duration::from_secs(120)).await?;
    let remaining: i64 = sqlx::query_scalar("SELECT count(*) FROM resources")
        .fetch_one(&pool)
        .await?;
    assert_eq!(remaining, 0, "the whole tree is gone");
    assert_reverse_dependency_order(&log.teardowns(), "stack/crash", &cells, &edges);

    signal(&restarted, Signal::SIGTERM)?;
    let status = tokio::time::timeout(Duration::from_secs(20), restarted.wait()).await??;
    assert!(status.success(), "{status}");
    Ok(())
}
