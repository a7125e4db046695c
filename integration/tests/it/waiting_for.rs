//! ResourceService.ExplainResource over real gRPC, with real SDK workers on
//! the real worker stream: every cause a resource can wait on is produced
//! for real, and the answer must name it precisely (names, counts, times).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use converge_integration::api::{
    self, apply, apply_manifest, apply_ok, expect_error, find, reaction, spawn_worker, wait_phase,
};
use converge_integration::{TestServer, eventually};
use converge_proto::v1::wait::Cause;
use converge_proto::v1::{
    ApplyResourceRequest, DeleteResourceRequest, Emit, ExplainResourceRequest, ExplainResourceResponse, KindManifest,
    KindPolicy, Phase, QuarantineResourceRequest, ReconcileResourceRequest, TaskCause, TaskType, Trigger, Wait,
};
use converge_sdk::Client;
use converge_sdk::worker::{
    ChildSpec, DepEdge, HandlerError, KindVersion, Outcome, Provider, ProviderConfigSpec, ReactionRequest,
    ResourceRef as WorkerRef, Stage, Worker, WorkerBuilder, async_trait,
};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tonic::Code;

const CELL_FINALIZER: &str = "test.converge.dev/cell";
const STACK_FINALIZER: &str = "test.converge.dev/stack";

/// How the scripted worker answers one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Succeeds (healthy).
    Healthy,
    /// Holds the task until the mode changes, then answers by the new mode.
    Hang,
    /// Fails transiently ("not yet").
    Transient,
    /// Fails terminally (reason "Impossible").
    Terminal,
    /// Asks to be called again in a minute.
    Requeue,
}

/// Modes by "kind/name" (work) and "kind/name#teardown", shared with the test.
#[derive(Clone, Default)]
struct Script {
    modes: Arc<Mutex<HashMap<String, Mode>>>,
}

impl Script {
    fn set(&self, key: &str, mode: Mode) {
        if let Ok(mut modes) = self.modes.lock() {
            modes.insert(key.to_owned(), mode);
        }
    }

    fn mode(&self, key: &str) -> Mode {
        self.modes
            .lock()
            .map(|m| m.get(key).copied().unwrap_or(Mode::Healthy))
            .unwrap_or(Mode::Healthy)
    }

    /// The answer for `key`, once it no longer hangs.
    async fn answer(&self, key: &str, success: Outcome) -> Result<Outcome, HandlerError> {
        loop {
            match self.mode(key) {
                Mode::Hang => tokio::time::sleep(Duration::from_millis(50)).await,
                Mode::Healthy => return Ok(success),
                Mode::Transient => return Err(HandlerError::transient("not yet").with_reason("NotYet")),
                Mode::Terminal => return Err(HandlerError::terminal("cannot ever work").with_reason("Impossible")),
                Mode::Requeue => return Ok(success.with_requeue_after(Duration::from_secs(60))),
            }
        }
    }
}

/// Serves a leaf kind: work and teardown answer by the script.
#[derive(Clone)]
struct Leaf {
    kind: &'static str,
    script: Script,
}

#[async_trait]
impl Provider for Leaf {
    fn kind(&self) -> KindVersion {
        KindVersion::new(self.kind, 1)
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        let key = format!("{}/{}", self.kind, request.resource.name);
        if request.stage == Stage::Delete {
            return self.script.answer(&format!("{key}#teardown"), Outcome::new()).await;
        }
        let out = json!({"out": request.resource.name});
        self.script.answer(&key, Outcome::new().with_status(out)).await
    }
}

/// Serves `stack` for these tests: composes the cells, edges and config its
/// spec lists; unlike the harness's `Stacks`, its edges carry no value flow
/// (a dependent waits on its dependency's sync alone) and its rollup only
/// flags that it ran; its teardown succeeds.
#[derive(Clone)]
struct Composer;

#[async_trait]
impl Provider for Composer {
    fn kind(&self) -> KindVersion {
        KindVersion::new("stack", 1)
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        match request.stage {
            Stage::Delete => Ok(Outcome::new()),
            Stage::Compose => {
                let spec = &request.resource.spec;
                let mut outcome = Outcome::new().with_status(json!({"composed": true}));
                if let Some(name) = spec.get("config").and_then(Value::as_str) {
                    outcome = outcome.with_config(ProviderConfigSpec {
                        name: name.into(),
                        kind: "cell".into(),
                        kind_version: 1,
                        is_default: false,
                        spec: Some(json!({})),
                        data: Vec::new(),
                    });
                }
                for cell in spec.get("cells").and_then(Value::as_array).into_iter().flatten() {
                    outcome = outcome.with_child(ChildSpec {
                        kind: "cell".into(),
                        kind_version: 1,
                        name: cell.as_str().unwrap_or_default().into(),
                        labels: BTreeMap::new(),
                        spec: json!({}),
                        provider_config: None,
                    });
                }
                for edge in spec.get("edges").and_then(Value::as_array).into_iter().flatten() {
                    let end = |i: usize| edge.get(i).and_then(Value::as_str).unwrap_or_default().to_owned();
                    outcome = outcome.with_edge(DepEdge {
                        dependent: WorkerRef::new("cell", end(0)),
                        dependency: WorkerRef::new("cell", end(1)),
                        value_flows: Vec::new(),
                    });
                }
                Ok(outcome)
            }
            _ => Ok(Outcome::new().with_status(json!({"rolled_up": true}))),
        }
    }
}

/// `probe`: one work reaction, with the given policy.
fn probe_manifest(policy: KindPolicy) -> KindManifest {
    KindManifest {
        kind: "probe".into(),
        kind_version: 1,
        description: "a scripted leaf".into(),
        reactions: vec![reaction("work", Trigger::SpecChange, &[Emit::Status])],
        policy: Some(policy),
        ..Default::default()
    }
}

/// `cell`: work plus a teardown under a finalizer; orphans wait ten minutes.
fn cell_manifest() -> KindManifest {
    KindManifest {
        kind: "cell".into(),
        kind_version: 1,
        description: "a scripted leaf with a teardown".into(),
        reactions: vec![
            reaction("work", Trigger::SpecChange, &[Emit::Status]),
            reaction("teardown", Trigger::DeleteRequested, &[Emit::Finalizer]),
        ],
        finalizer_name: CELL_FINALIZER.into(),
        policy: Some(KindPolicy {
            orphan_grace_secs: 600,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `stack`: compose, rollup and a teardown under a finalizer.
fn stack_manifest() -> KindManifest {
    KindManifest {
        kind: "stack".into(),
        kind_version: 1,
        description: "a composer that rolls up".into(),
        reactions: vec![
            reaction(
                "compose",
                Trigger::SpecChange,
                &[Emit::Children, Emit::Edges, Emit::Status, Emit::Configs],
            ),
            reaction("rollup", Trigger::ChildrenSettled, &[Emit::Status]),
            reaction("teardown", Trigger::DeleteRequested, &[Emit::Finalizer]),
        ],
        finalizer_name: STACK_FINALIZER.into(),
        ..Default::default()
    }
}

fn worker(address: String, script: &Script) -> WorkerBuilder {
    Worker::builder()
        .endpoint(address)
        .provider(Leaf {
            kind: "probe",
            script: script.clone(),
        })
        .provider(Leaf {
            kind: "cell",
            script: script.clone(),
        })
        .provider(Composer)
        .max_parallel(64)
        .heartbeat_interval(Duration::from_millis(500))
}

struct Fixture {
    server: TestServer,
    client: Client,
    script: Script,
}

impl Fixture {
    /// A server with the three kinds (`probe` under `policy`) and no worker yet.
    async fn new(policy: KindPolicy) -> anyhow::Result<Self> {
        let server = TestServer::start().await?;
        let client = server.client().await?;
        apply_manifest(&client, probe_manifest(policy)).await?;
        apply_manifest(&client, cell_manifest()).await?;
        apply_manifest(&client, stack_manifest()).await?;
        Ok(Self {
            server,
            client,
            script: Script::default(),
        })
    }

    fn start_worker(&self) -> oneshot::Sender<()> {
        spawn_worker(worker(self.server.address(), &self.script))
    }

    async fn explain(&self, kind: &str, name: &str) -> anyhow::Result<ExplainResourceResponse> {
        Ok(self
            .client
            .resources()
            .explain_resource(ExplainResourceRequest {
                kind: kind.into(),
                name: name.into(),
            })
            .await?
            .into_inner())
    }

    /// Polls until the answer for kind/name satisfies `check`.
    async fn explain_until(
        &self,
        kind: &str,
        name: &str,
        what: &str,
        check: impl Fn(&ExplainResourceResponse) -> bool,
    ) -> anyhow::Result<ExplainResourceResponse> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let request = ExplainResourceRequest {
                kind: kind.into(),
                name: name.into(),
            };
            // The resource may not be composed yet.
            let answer = match self.client.resources().explain_resource(request).await {
                Ok(answer) => Some(answer.into_inner()),
                Err(status) if status.code() == Code::NotFound => None,
                Err(status) => return Err(status.into()),
            };
            if let Some(answer) = &answer
                && check(answer)
            {
                return Ok(answer.clone());
            }
            if tokio::time::Instant::now() >= deadline {
                anyhow::bail!("{kind}/{name}: no {what} within 30 s; last answer: {answer:#?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn apply(&self, request: ApplyResourceRequest) -> anyhow::Result<()> {
        apply_ok(&self.client, request).await.map(|_| ())
    }
}

fn causes(answer: &ExplainResourceResponse) -> Vec<&Cause> {
    answer.waiting_for.iter().filter_map(|w| w.cause.as_ref()).collect()
}

fn messages(answer: &ExplainResourceResponse) -> Vec<&str> {
    answer.waiting_for.iter().map(|w| w.message.as_str()).collect()
}

fn first_cause(answer: &ExplainResourceResponse) -> Option<&Cause> {
    answer.waiting_for.first().and_then(|w: &Wait| w.cause.as_ref())
}

fn seconds(ts: &Option<prost_types::Timestamp>) -> f64 {
    ts.as_ref()
        .map(|t| t.seconds as f64 + f64::from(t.nanos) / 1e9)
        .unwrap_or(f64::NAN)
}

fn refs(list: &[converge_proto::v1::WaitingResource]) -> Vec<(String, Phase)> {
    list.iter()
        .map(|w| {
            let r = w.r#ref.clone().unwrap_or_default();
            (format!("{}/{}", r.kind, r.name), w.phase())
        })
        .collect()
}

fn stack_spec(cells: &[&str], edges: &[(&str, &str)]) -> Value {
    json!({
        "cells": cells,
        "edges": edges.iter().map(|(from, to)| json!([from, to])).collect::<Vec<_>>(),
    })
}

#[tokio::test]
async fn a_queued_resource_names_the_missing_worker_then_the_worker_holding_it_then_nothing() -> anyhow::Result<()> {
    let fx = Fixture::new(KindPolicy {
        task_deadline_secs: 120,
        ..Default::default()
    })
    .await?;
    fx.apply(apply("probe", "p1", json!({}))).await?;

    let answer = fx.explain("probe", "p1").await?;
    assert_eq!(answer.resource.as_ref().map(|r| r.phase()), Some(Phase::Reconciling));
    let [Cause::NoWorker(no_worker), Cause::Queued(queued)] = causes(&answer)[..] else {
        panic!("expected no_worker then queued: {answer:#?}");
    };
    assert_eq!((no_worker.kind.as_str(), no_worker.kind_version), ("probe", 1));
    assert_eq!(no_worker.unready_workers, 0);
    assert_eq!(queued.task(), TaskType::Reconcile);
    assert_eq!(queued.cause(), TaskCause::Change);
    assert_eq!(queued.claims, 0);
    assert!(
        seconds(&queued.eligible_time) <= seconds(&answer.read_time),
        "{answer:#?}"
    );
    assert_eq!(
        answer.next_due_time, queued.eligible_time,
        "a queued task is due at once"
    );
    assert_eq!(
        messages(&answer)[0],
        "no ready worker is connected for kind \"probe\" version 1"
    );

    // A worker takes it and holds it: "running", on this member, with its
    // deadline as the next due time.
    fx.script.set("probe/p1", Mode::Hang);
    let _worker = fx.start_worker();
    let answer = fx
        .explain_until("probe", "p1", "running", |a| {
            matches!(first_cause(a), Some(Cause::Running(_)))
        })
        .await?;
    let [Cause::Running(running)] = causes(&answer)[..] else {
        panic!("expected running only: {answer:#?}");
    };
    assert_eq!(running.task(), TaskType::Reconcile);
    assert_eq!(running.member, fx.server.member_id());
    assert_eq!(running.claims, 1);
    let heartbeat = seconds(&running.heartbeat_time);
    let deadline = seconds(&running.deadline_time);
    assert!(heartbeat <= seconds(&answer.read_time) + 0.001, "{answer:#?}");
    assert!(
        (deadline - heartbeat - 120.0).abs() < 5.0,
        "deadline about 120 s after the claim: {answer:#?}"
    );
    assert_eq!(answer.next_due_time, running.deadline_time);

    // Released, it is Ready and nothing holds it back or is scheduled.
    fx.script.set("probe/p1", Mode::Healthy);
    wait_phase(&fx.client, "probe", "p1", Phase::Ready).await?;
    let answer = fx
        .explain_until("probe", "p1", "nothing", |a| a.waiting_for.is_empty())
        .await?;
    assert_eq!(answer.next_due_time, None, "{answer:#?}");
    assert_eq!(answer.resource.as_ref().map(|r| r.phase()), Some(Phase::Ready));
    Ok(())
}

#[tokio::test]
async fn a_task_behind_the_concurrency_cap_names_the_cap() -> anyhow::Result<()> {
    let fx = Fixture::new(KindPolicy {
        max_inflight: 1,
        ..Default::default()
    })
    .await?;
    fx.script.set("probe/first", Mode::Hang);
    let _worker = fx.start_worker();
    fx.apply(apply("probe", "first", json!({}))).await?;
    fx.explain_until("probe", "first", "running", |a| {
        matches!(first_cause(a), Some(Cause::Running(_)))
    })
    .await?;

    fx.apply(apply("probe", "second", json!({}))).await?;
    // The worker registry is as of the broker's last membership heartbeat.
    let answer = fx
        .explain_until("probe", "second", "the cap first", |a| {
            matches!(first_cause(a), Some(Cause::ConcurrencyCap(_)))
        })
        .await?;
    let [Cause::ConcurrencyCap(cap), Cause::Queued(queued)] = causes(&answer)[..] else {
        panic!("expected concurrency_cap then queued: {answer:#?}");
    };
    assert_eq!((cap.in_flight, cap.limit), (1, 1));
    assert_eq!(queued.claims, 0);
    assert_eq!(
        messages(&answer)[0],
        "kind \"probe\" version 1 is at its concurrency cap: 1 in flight of 1"
    );

    fx.script.set("probe/first", Mode::Healthy);
    wait_phase(&fx.client, "probe", "second", Phase::Ready).await?;
    assert!(fx.explain("probe", "second").await?.waiting_for.is_empty());
    Ok(())
}

#[tokio::test]
async fn a_dependent_names_its_upstream_and_a_composite_its_children() -> anyhow::Result<()> {
    let fx = Fixture::new(KindPolicy::default()).await?;
    fx.script.set("cell/b", Mode::Hang);
    let _worker = fx.start_worker();
    // a depends on b; b hangs in its worker.
    fx.apply(apply("stack", "s", stack_spec(&["a", "b"], &[("a", "b")])))
        .await?;

    let answer = fx
        .explain_until("cell", "b", "running", |a| {
            matches!(first_cause(a), Some(Cause::Running(_)))
        })
        .await?;
    assert_eq!(answer.waiting_for.len(), 1, "{answer:#?}");

    let answer = fx.explain("cell", "a").await?;
    let [Cause::Dependencies(deps)] = causes(&answer)[..] else {
        panic!("expected dependencies only: {answer:#?}");
    };
    assert_eq!(deps.total, 1);
    assert_eq!(refs(&deps.first), [("cell/b".to_owned(), Phase::Reconciling)]);
    assert_eq!(
        messages(&answer)[0],
        "waiting for 1 upstream dependency to sync: cell/b (Reconciling)"
    );
    assert_eq!(answer.next_due_time, None, "a waits for b, not for a timer");

    let answer = fx
        .explain_until("stack", "s", "children", |a| {
            matches!(first_cause(a), Some(Cause::Children(_)))
        })
        .await?;
    let [Cause::Children(children)] = causes(&answer)[..] else {
        panic!("expected children only: {answer:#?}");
    };
    assert_eq!((children.total, children.progressing), (2, 2));
    let by_phase: Vec<(Phase, i32)> = children.by_phase.iter().map(|p| (p.phase(), p.count)).collect();
    assert_eq!(by_phase, [(Phase::Reconciling, 2)]);
    assert_eq!(
        refs(&children.first),
        [
            ("cell/a".to_owned(), Phase::Reconciling),
            ("cell/b".to_owned(), Phase::Reconciling)
        ]
    );

    fx.script.set("cell/b", Mode::Healthy);
    wait_phase(&fx.client, "stack", "s", Phase::Ready).await?;
    for (kind, name) in [("stack", "s"), ("cell", "a"), ("cell", "b")] {
        fx.explain_until(kind, name, "nothing", |a| a.waiting_for.is_empty())
            .await?;
    }
    Ok(())
}

#[tokio::test]
async fn failures_name_the_attempt_the_retry_time_and_the_last_error() -> anyhow::Result<()> {
    let fx = Fixture::new(KindPolicy {
        max_transient_attempts: 3,
        ..Default::default()
    })
    .await?;
    fx.script.set("probe/flaky", Mode::Transient);
    fx.script.set("probe/broken", Mode::Terminal);
    fx.script.set("probe/later", Mode::Requeue);
    let _worker = fx.start_worker();
    for name in ["flaky", "broken", "later"] {
        fx.apply(apply("probe", name, json!({}))).await?;
    }

    // Backoff: attempt n of 3, retrying at a time after the read.
    let answer = fx
        .explain_until("probe", "flaky", "retry_backoff", |a| {
            matches!(first_cause(a), Some(Cause::RetryBackoff(_)))
        })
        .await?;
    let [Cause::RetryBackoff(backoff)] = causes(&answer)[..] else {
        panic!("expected retry_backoff only: {answer:#?}");
    };
    let resource = answer.resource.clone().unwrap_or_default();
    assert_eq!(backoff.task(), TaskType::Reconcile);
    assert_eq!(backoff.attempt, resource.failure_attempts);
    assert!((1..3).contains(&backoff.attempt), "{answer:#?}");
    assert_eq!(backoff.max_attempts, 3);
    assert!(seconds(&backoff.retry_time) > seconds(&answer.read_time), "{answer:#?}");
    assert_eq!(answer.next_due_time, backoff.retry_time);
    assert_eq!(
        (backoff.last_error_reason.as_str(), backoff.last_error.as_str()),
        ("NotYet", "not yet")
    );
    assert!(
        messages(&answer)[0].starts_with(&format!(
            "reconcile failed (attempt {} of 3) and is retried at ",
            backoff.attempt
        )),
        "{answer:#?}"
    );

    // The third failure uses up the budget.
    let answer = fx
        .explain_until("probe", "flaky", "failed", |a| {
            matches!(first_cause(a), Some(Cause::Failed(_)))
        })
        .await?;
    let [Cause::Failed(failed)] = causes(&answer)[..] else {
        panic!("expected failed only: {answer:#?}");
    };
    assert!(failed.budget_exhausted);
    assert_eq!((failed.attempts, failed.generation), (3, 1));
    assert_eq!(failed.last_error_reason, "NotYet");
    assert_eq!(answer.next_due_time, None, "a failed generation waits for a person");

    // A terminal error: not the budget.
    let answer = fx
        .explain_until("probe", "broken", "failed", |a| {
            matches!(first_cause(a), Some(Cause::Failed(_)))
        })
        .await?;
    let [Cause::Failed(failed)] = causes(&answer)[..] else {
        panic!("expected failed only: {answer:#?}");
    };
    assert!(!failed.budget_exhausted);
    assert_eq!(failed.task(), TaskType::Reconcile);
    assert_eq!(
        (failed.last_error_reason.as_str(), failed.last_error.as_str()),
        ("Impossible", "cannot ever work")
    );
    assert_eq!(
        messages(&answer)[0],
        "reconcile of generation 1 failed terminally: Impossible: cannot ever work; \
         a new spec or ReconcileResource retries it"
    );

    // "Come back in a minute" is no failure.
    let answer = fx
        .explain_until("probe", "later", "requeued", |a| {
            matches!(first_cause(a), Some(Cause::Requeued(_)))
        })
        .await?;
    let [Cause::Requeued(requeued)] = causes(&answer)[..] else {
        panic!("expected requeued only: {answer:#?}");
    };
    let ahead = seconds(&requeued.retry_time) - seconds(&answer.read_time);
    assert!(
        (50.0..=60.5).contains(&ahead),
        "retry about a minute ahead: {answer:#?}"
    );
    assert_eq!(answer.next_due_time, requeued.retry_time);
    Ok(())
}

#[tokio::test]
async fn a_quarantined_and_an_orphaned_resource_say_so_with_their_times() -> anyhow::Result<()> {
    let fx = Fixture::new(KindPolicy::default()).await?;
    let _worker = fx.start_worker();
    fx.apply(apply("probe", "aside", json!({}))).await?;
    wait_phase(&fx.client, "probe", "aside", Phase::Ready).await?;
    fx.client
        .resources()
        .quarantine_resource(QuarantineResourceRequest {
            kind: "probe".into(),
            name: "aside".into(),
            message: "disk maintenance".into(),
            ..Default::default()
        })
        .await?;
    let answer = fx.explain("probe", "aside").await?;
    let [Cause::Quarantined(quarantined)] = causes(&answer)[..] else {
        panic!("expected quarantined only: {answer:#?}");
    };
    assert!(quarantined.message.contains("disk maintenance"), "{answer:#?}");
    let since = seconds(&quarantined.since_time);
    assert!(since <= seconds(&answer.read_time) && since > seconds(&answer.read_time) - 30.0);
    assert_eq!(answer.next_due_time, None);

    // A composer that stops emitting c2 leaves it orphaned for 600 s.
    fx.apply(apply("stack", "s", stack_spec(&["c1", "c2"], &[]))).await?;
    wait_phase(&fx.client, "stack", "s", Phase::Ready).await?;
    fx.apply(apply("stack", "s", stack_spec(&["c1"], &[]))).await?;
    wait_phase(&fx.client, "cell", "c2", Phase::Orphaned).await?;
    let answer = fx.explain("cell", "c2").await?;
    let [Cause::Orphaned(orphaned)] = causes(&answer)[..] else {
        panic!("expected orphaned only: {answer:#?}");
    };
    let owner = orphaned.owner.clone().unwrap_or_default();
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("stack", "s"));
    let ahead = seconds(&orphaned.teardown_time) - seconds(&answer.read_time);
    assert!(
        (560.0..=600.5).contains(&ahead),
        "teardown about 600 s ahead: {answer:#?}"
    );
    assert_eq!(answer.next_due_time, orphaned.teardown_time);
    Ok(())
}

#[tokio::test]
async fn a_deletion_names_the_dependents_children_and_finalizers_it_waits_for() -> anyhow::Result<()> {
    let fx = Fixture::new(KindPolicy::default()).await?;
    let _worker = fx.start_worker();
    // x depends on y; x's teardown hangs.
    fx.apply(apply("stack", "s", stack_spec(&["x", "y"], &[("x", "y")])))
        .await?;
    wait_phase(&fx.client, "stack", "s", Phase::Ready).await?;
    fx.script.set("cell/x#teardown", Mode::Hang);
    fx.client
        .resources()
        .delete_resource(DeleteResourceRequest {
            kind: "stack".into(),
            name: "s".into(),
            ..Default::default()
        })
        .await?;

    // x: only its own finalizer, whose teardown a worker holds.
    let answer = fx
        .explain_until("cell", "x", "teardown running", |a| {
            causes(a).iter().any(|c| matches!(c, Cause::Running(_)))
        })
        .await?;
    let [Cause::Deletion(deletion), Cause::Running(running)] = causes(&answer)[..] else {
        panic!("expected deletion then running: {answer:#?}");
    };
    assert_eq!((deletion.dependents_total, deletion.children_total), (0, 0));
    assert_eq!(deletion.finalizers, [CELL_FINALIZER]);
    assert_eq!(running.task(), TaskType::Teardown);
    assert!(
        messages(&answer)[0].ends_with(&format!("waiting for finalizers [{CELL_FINALIZER}]")),
        "{answer:#?}"
    );

    // y: its dependent x goes first.
    let answer = fx.explain("cell", "y").await?;
    let [Cause::Deletion(deletion)] = causes(&answer)[..] else {
        panic!("expected deletion only: {answer:#?}");
    };
    assert_eq!(deletion.dependents_total, 1);
    assert_eq!(refs(&deletion.dependents), [("cell/x".to_owned(), Phase::Deleting)]);
    assert_eq!(deletion.children_total, 0);
    assert_eq!(deletion.finalizers, [CELL_FINALIZER]);

    // s: both children go first.
    let answer = fx.explain("stack", "s").await?;
    let [Cause::Deletion(deletion)] = causes(&answer)[..] else {
        panic!("expected deletion only: {answer:#?}");
    };
    assert_eq!(deletion.children_total, 2);
    assert_eq!(
        refs(&deletion.children),
        [
            ("cell/x".to_owned(), Phase::Deleting),
            ("cell/y".to_owned(), Phase::Deleting)
        ]
    );
    assert_eq!(deletion.finalizers, [STACK_FINALIZER]);
    assert!(
        messages(&answer)[0].contains("waiting for 2 children: cell/x (Deleting), cell/y (Deleting)"),
        "{answer:#?}"
    );

    // Released, the tree goes, and the read says NOT_FOUND like GetResource.
    fx.script.set("cell/x#teardown", Mode::Healthy);
    eventually(Duration::from_secs(30), || async {
        Ok(find(&fx.client, "stack", "s").await?.is_none().then_some(()))
    })
    .await?;
    expect_error(
        fx.client
            .resources()
            .explain_resource(ExplainResourceRequest {
                kind: "stack".into(),
                name: "s".into(),
            })
            .await,
        Code::NotFound,
        "RESOURCE_NOT_FOUND",
    );
    Ok(())
}

#[tokio::test]
async fn a_dangling_provider_config_override_is_named_as_missing() -> anyhow::Result<()> {
    let fx = Fixture::new(KindPolicy::default()).await?;
    let _worker = fx.start_worker();
    fx.apply(apply("cell", "user", json!({}))).await?;
    wait_phase(&fx.client, "cell", "user", Phase::Ready).await?;
    // The API refuses to attach a missing config and to delete one in use,
    // so a dangling override is a state only the database can hold (the
    // broker guards against it at dispatch); written directly here.
    sqlx::query("UPDATE resources SET provider_config = 'shared' WHERE kind = 'cell' AND name = 'user'")
        .execute(fx.server.database().pool())
        .await?;
    let answer = fx.explain("cell", "user").await?;
    let [Cause::ProviderConfigMissing(missing)] = causes(&answer)[..] else {
        panic!("expected provider_config_missing only: {answer:#?}");
    };
    assert_eq!(missing.name, "shared");
    assert_eq!(
        messages(&answer)[0],
        "provider config \"shared\" does not exist: apply it or detach it from the resource"
    );

    // A reconcile now fails on it in the broker, and the backoff names the
    // broker's reason.
    fx.client
        .resources()
        .reconcile_resource(ReconcileResourceRequest {
            kind: "cell".into(),
            name: "user".into(),
            ..Default::default()
        })
        .await?;
    let answer = fx
        .explain_until("cell", "user", "retry_backoff", |a| {
            causes(a).iter().any(|c| matches!(c, Cause::RetryBackoff(_)))
        })
        .await?;
    let [Cause::ProviderConfigMissing(_), Cause::RetryBackoff(backoff)] = causes(&answer)[..] else {
        panic!("expected provider_config_missing then retry_backoff: {answer:#?}");
    };
    assert_eq!(backoff.last_error_reason, "ProviderConfigMissing");
    assert!(backoff.last_error.contains("\"shared\""), "{answer:#?}");
    Ok(())
}

#[tokio::test]
async fn a_lagging_resource_whose_task_was_lost_is_named_unscheduled() -> anyhow::Result<()> {
    let fx = Fixture::new(KindPolicy::default()).await?;
    fx.apply(apply("probe", "lost", json!({}))).await?;
    // The queue is UNLOGGED: a crash empties it. Emptied here the same way.
    sqlx::query("DELETE FROM work_queue")
        .execute(fx.server.database().pool())
        .await?;
    let answer = fx.explain("probe", "lost").await?;
    let [Cause::Unscheduled(unscheduled)] = causes(&answer)[..] else {
        panic!("expected unscheduled only: {answer:#?}");
    };
    let resource = answer.resource.clone().unwrap_or_default();
    assert_eq!(unscheduled.since_time, resource.update_time);
    assert!(messages(&answer)[0].starts_with("generation 1 is not reconciled and no task is queued"));
    Ok(())
}

#[tokio::test]
async fn malformed_and_unknown_keys_are_refused_like_get_resource() -> anyhow::Result<()> {
    let fx = Fixture::new(KindPolicy::default()).await?;
    let refused = fx
        .client
        .resources()
        .explain_resource(ExplainResourceRequest {
            kind: "Not A Kind".into(),
            name: "-bad-".into(),
        })
        .await;
    let violations = expect_error(refused, Code::InvalidArgument, "INVALID_NAME");
    assert_eq!(api::fields(&violations), ["/kind", "/name"]);
    expect_error(
        fx.client
            .resources()
            .explain_resource(ExplainResourceRequest {
                kind: "probe".into(),
                name: "absent".into(),
            })
            .await,
        Code::NotFound,
        "RESOURCE_NOT_FOUND",
    );
    Ok(())
}
