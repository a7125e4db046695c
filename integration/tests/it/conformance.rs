//! The worker SDK conformance suite (conformance/README.md): one real
//! converge server per language (plus a TLS one for the `mtls` scenario),
//! that language's conformance worker as an OS process, and every scenario
//! driven through the public API. A failing scenario is reported as
//! `[<language>] <scenario>: <what went wrong>`; the other scenarios still
//! run.
//!
//! Languages run one at a time (a lock), so their timing-sensitive
//! scenarios (heartbeats, deadlines) do not compete for the CPU.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::process::Stdio;
use std::time::Duration;

use converge_integration::api::{self, apply, events, find, json, object, wait_phase};
use converge_integration::languages::{Language, apply_conformance_kinds, command_like};
use converge_integration::otlp::{Received, Receiver};
use converge_integration::pki::{Leaf, TestCa, replace};
use converge_integration::processes::{connect_when_up, converge_process_with, free_local_addr, signal, stop_cleanly};
use converge_integration::{TestDatabase, TestServer, eventually};
use converge_proto::v1::{
    ApplyProviderConfigRequest, Condition, DeleteResourceRequest, KindConfig, ListResourceEventsRequest, Phase,
    PlanAction, PlanComposer, PlanResourceRequest, PlanResourceResponse, ProviderConfig, Resource, ResourcePlan,
    UpdateKindConfigRequest, plan_resource_request,
};
use converge_sdk::Client;
use converge_sdk::tls::{ClientTls, ClientTlsFiles, DEFAULT_RELOAD_INTERVAL};
use converge_service::config::{Role, TlsArgs};
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// One language at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long an unattested lease survives on the test server: shorter than
/// the heartbeat scenario's sleep, so only heartbeats keep that task, and
/// longer than a worker's reconnect after a server restart (its backoff
/// reaches 1-2 s by the time the server is back).
const STALE_AFTER: Duration = Duration::from_secs(4);
/// The workers' heartbeat interval.
const HEARTBEAT_MS: &str = "300";
/// The workers' bounded concurrency.
const MAX_PARALLEL: usize = 4;
/// How long the `mtls` scenario watches a worker without a client
/// certificate get no work.
const REFUSED_FOR: Duration = Duration::from_secs(2);
/// The Rust worker's TLS file poll in the `tls-reload` scenario (the other
/// SDKs read their files at every connection).
const TLS_RELOAD_MS: u64 = 200;

/// One language's run: its server, worker and log.
struct Suite {
    language: Language,
    database: TestDatabase,
    listen: SocketAddr,
    server: Option<TestServer>,
    client: Client,
    worker: Child,
    command: Command,
    scratch: tempfile::TempDir,
}

impl Suite {
    async fn start(language: Language) -> anyhow::Result<Self> {
        let scratch = tempfile::tempdir()?;
        let database = TestDatabase::new().await?;
        let listen: SocketAddr = free_local_addr()?.parse()?;
        let server = serve(&database, listen).await?;
        let client = server.client().await?;
        apply_conformance_kinds(&client).await?;
        let mut command = language.command(scratch.path()).await?;
        command
            .env("CONVERGE_BROKER_ADDR", format!("http://{listen}"))
            .env("CONFORMANCE_MAX_PARALLEL", MAX_PARALLEL.to_string())
            .env("CONFORMANCE_DRAIN_TIMEOUT_MS", "10000")
            .env("CONFORMANCE_HEARTBEAT_MS", HEARTBEAT_MS)
            .env("CONFORMANCE_LOG", scratch.path().join("conformance.log"))
            .env(
                "LOG_LEVEL",
                std::env::var("CONFORMANCE_WORKER_LOG").unwrap_or_else(|_| "warn".to_owned()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true);
        let worker = spawn_worker(&mut command, scratch.path())?;
        Ok(Self {
            language,
            database,
            listen,
            server: Some(server),
            client,
            worker,
            command,
            scratch,
        })
    }

    /// The log lines so far.
    fn log(&self) -> Vec<Value> {
        std::fs::read_to_string(self.scratch.path().join("conformance.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The log lines of `event` for resource `name`.
    fn lines(&self, event: &str, name: &str) -> Vec<Value> {
        self.log()
            .into_iter()
            .filter(|l| l["event"] == event && l["name"] == name)
            .collect()
    }

    /// A unique resource name for `scenario`.
    fn name(&self, scenario: &str) -> String {
        format!("{}-{scenario}", self.language.name())
    }

    async fn apply(&self, name: &str, spec: Value) -> anyhow::Result<()> {
        self.client
            .resources()
            .apply_resource(apply("conf-leaf", name, spec))
            .await?;
        Ok(())
    }

    async fn ready(&self, kind: &str, name: &str) -> anyhow::Result<Resource> {
        wait_phase(&self.client, kind, name, Phase::Ready).await
    }

    async fn delete(&self, kind: &str, name: &str) -> anyhow::Result<()> {
        self.client
            .resources()
            .delete_resource(DeleteResourceRequest {
                kind: kind.into(),
                name: name.into(),
                allow_missing: true,
                ..Default::default()
            })
            .await?;
        eventually(Duration::from_secs(30), || async {
            Ok(find(&self.client, kind, name).await?.is_none().then_some(()))
        })
        .await
    }

    /// Stops the server (a drain) and starts it again on the same address
    /// and database.
    async fn restart_server(&mut self) -> anyhow::Result<()> {
        if let Some(server) = self.server.take() {
            server.shutdown().await?;
        }
        let server = serve(&self.database, self.listen).await?;
        self.client = server.client().await?;
        self.server = Some(server);
        Ok(())
    }

    async fn set_deadline(&self, secs: i32) -> anyhow::Result<()> {
        self.client
            .kinds()
            .update_kind_config(UpdateKindConfigRequest {
                config: Some(KindConfig {
                    kind: "conf-leaf".into(),
                    kind_version: 1,
                    task_deadline_secs: secs,
                    ..Default::default()
                }),
                update_mask: Some(prost_types::FieldMask {
                    paths: vec!["task_deadline_secs".into()],
                }),
                ..Default::default()
            })
            .await?;
        Ok(())
    }

    /// The reasons of the resource's reconcile events, oldest first.
    async fn reconcile_reasons(&self, name: &str) -> anyhow::Result<Vec<String>> {
        let events = self
            .client
            .resources()
            .list_resource_events(ListResourceEventsRequest {
                kind: "conf-leaf".into(),
                name: name.into(),
                category: Some("reconcile".into()),
                ..Default::default()
            })
            .await?
            .into_inner()
            .events;
        Ok(events.into_iter().rev().map(|e| e.reason).collect())
    }
}

async fn serve(database: &TestDatabase, listen: SocketAddr) -> anyhow::Result<TestServer> {
    let database = database.clone();
    TestServer::start_with(database, Role::All, |config| {
        config.serve.listen_addr = listen.into();
        config.reaper.stale_after = STALE_AFTER;
    })
    .await
}

fn spawn_worker(command: &mut Command, scratch: &Path) -> anyhow::Result<Child> {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(scratch.join("worker.stderr"))?;
    Ok(command.stderr(stderr).spawn()?)
}

fn status_json(resource: &Resource) -> Value {
    resource.status.as_ref().map(json).unwrap_or(Value::Null)
}

fn condition<'a>(resource: &'a Resource, type_: &str) -> Option<&'a Condition> {
    resource.conditions.iter().find(|c| c.r#type == type_)
}

type Scenario = for<'a> fn(&'a mut Suite) -> Pin<Box<dyn Future<Output = anyhow::Result<()>> + 'a>>;

/// Every scenario, in the order they run (drain last: it stops the worker).
const SCENARIOS: [(&str, Scenario); 21] = [
    ("ready", |s| Box::pin(ready(s))),
    ("events-and-liveness", |s| Box::pin(events_and_liveness(s))),
    ("heartbeats", |s| Box::pin(heartbeats(s))),
    ("deadline", |s| Box::pin(deadline(s))),
    ("transient-then-success", |s| Box::pin(transient_then_success(s))),
    ("transient-then-terminal", |s| Box::pin(transient_then_terminal(s))),
    ("terminal", |s| Box::pin(terminal(s))),
    ("requeue-after", |s| Box::pin(requeue_after(s))),
    ("panic-isolation", |s| Box::pin(panic_isolation(s))),
    ("provider-config", |s| Box::pin(provider_config(s))),
    ("compose-value-flows", |s| Box::pin(compose_value_flows(s))),
    ("teardown-order", |s| Box::pin(teardown_order(s))),
    ("plan", |s| Box::pin(plan(s))),
    ("bounded-concurrency", |s| Box::pin(bounded_concurrency(s))),
    ("reconnect", |s| Box::pin(reconnect(s))),
    ("broker-drain", |s| Box::pin(broker_drain(s))),
    ("worker-killed", |s| Box::pin(worker_killed(s))),
    ("mtls", |s| Box::pin(mtls(s))),
    ("tls-reload", |s| Box::pin(tls_reload(s))),
    ("trace", |s| Box::pin(trace(s))),
    ("graceful-drain", |s| Box::pin(graceful_drain(s))),
];

async fn ready(s: &mut Suite) -> anyhow::Result<()> {
    let name = s.name("ready");
    s.apply(&name, json!({"value": "hello"})).await?;
    let resource = s.ready("conf-leaf", &name).await?;
    let status = status_json(&resource);
    anyhow::ensure!(
        status["language"] == s.language.name(),
        "served by {}",
        status["language"]
    );
    anyhow::ensure!(status["value"] == "hello" && status["attempt"] == 1, "status {status}");
    anyhow::ensure!(status["trigger"] == "spec_change", "trigger {}", status["trigger"]);
    let ready = condition(&resource, "Ready").ok_or_else(|| anyhow::anyhow!("no Ready condition"))?;
    anyhow::ensure!(ready.reason == "Conformed", "Ready reason {}", ready.reason);
    Ok(())
}

async fn events_and_liveness(s: &mut Suite) -> anyhow::Result<()> {
    let name = s.name("observed");
    let spec = json!({
        "livenessMs": 60_000,
        "events": [
            {"category": "conformance", "type": "Warning", "reason": "Observed", "message": "seen"},
            {"reason": "Defaulted"}
        ]
    });
    s.apply(&name, spec).await?;
    let resource = s.ready("conf-leaf", &name).await?;
    let reachable = condition(&resource, "Reachable").ok_or_else(|| anyhow::anyhow!("no Reachable condition"))?;
    anyhow::ensure!(
        reachable.status == converge_proto::v1::ConditionStatus::True as i32 && reachable.expire_time.is_some(),
        "Reachable {reachable:?}"
    );
    let events = events(&s.client, "conf-leaf", &name).await?;
    let worker: Vec<(&str, &str, i32, &str, &str)> = events
        .iter()
        .filter(|e| e.actor.starts_with("worker"))
        .map(|e| {
            (
                e.category.as_str(),
                e.reason.as_str(),
                e.r#type,
                e.message.as_str(),
                e.actor.as_str(),
            )
        })
        .collect();
    let warning = converge_proto::v1::EventType::Warning as i32;
    let normal = converge_proto::v1::EventType::Normal as i32;
    let without_actor: Vec<(&str, &str, i32, &str)> = worker.iter().map(|e| (e.0, e.1, e.2, e.3)).collect();
    anyhow::ensure!(
        without_actor.contains(&("conformance", "Observed", warning, "seen"))
            && without_actor.contains(&("worker", "Defaulted", normal, ""))
            && worker.iter().all(|e| api::is_plaintext_worker_actor(e.4)),
        "worker events {worker:?}"
    );
    Ok(())
}

async fn heartbeats(s: &mut Suite) -> anyhow::Result<()> {
    let name = s.name("heartbeats");
    // Twice the time an unattested lease survives.
    s.apply(&name, json!({"sleepMs": 2 * STALE_AFTER.as_millis()})).await?;
    let status = status_json(&s.ready("conf-leaf", &name).await?);
    anyhow::ensure!(status["attempt"] == 1, "the slow task ran again: {status}");
    let starts = s.lines("start", &name).len();
    anyhow::ensure!(starts == 1, "{starts} starts: the lease was lost");
    Ok(())
}

async fn deadline(s: &mut Suite) -> anyhow::Result<()> {
    let name = s.name("deadline");
    s.set_deadline(1).await?;
    s.apply(&name, json!({"hang": true})).await?;
    let outcome = eventually(Duration::from_secs(30), || async {
        let reasons = s.reconcile_reasons(&name).await?;
        Ok(reasons.iter().any(|r| r == "DeadlineExceeded").then_some(reasons))
    })
    .await;
    let ended = s.lines("end", &name).len();
    s.delete("conf-leaf", &name).await?;
    s.set_deadline(0).await?;
    outcome.map_err(|e| anyhow::anyhow!("no DeadlineExceeded failure: {e}"))?;
    anyhow::ensure!(ended >= 1, "the cancelled handler wrote no end line");
    Ok(())
}

async fn transient_then_success(s: &mut Suite) -> anyhow::Result<()> {
    let name = s.name("transient");
    s.apply(&name, json!({"failTransient": 2})).await?;
    let status = status_json(&s.ready("conf-leaf", &name).await?);
    anyhow::ensure!(status["attempt"] == 3, "status {status}");
    let reasons = s.reconcile_reasons(&name).await?;
    anyhow::ensure!(
        reasons.iter().filter(|r| *r == "ConformanceTransient").count() >= 1,
        "reconcile events {reasons:?}"
    );
    Ok(())
}

async fn transient_then_terminal(s: &mut Suite) -> anyhow::Result<()> {
    let name = s.name("exhausted");
    s.apply(&name, json!({"failTransient": 99})).await?;
    wait_phase(&s.client, "conf-leaf", &name, Phase::Failed).await?;
    // maxTransientAttempts is 4 in the kind's policy.
    let starts = s.lines("start", &name).len();
    anyhow::ensure!(starts == 4, "{starts} attempts, not 4");
    Ok(())
}

async fn terminal(s: &mut Suite) -> anyhow::Result<()> {
    let name = s.name("terminal");
    s.apply(&name, json!({"failTerminal": true})).await?;
    let failed = wait_phase(&s.client, "conf-leaf", &name, Phase::Failed).await?;
    let synced = condition(&failed, "Synced").ok_or_else(|| anyhow::anyhow!("no Synced condition"))?;
    anyhow::ensure!(
        synced.reason == "ConformanceTerminal",
        "Synced reason {}",
        synced.reason
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let starts = s.lines("start", &name).len();
    anyhow::ensure!(starts == 1, "{starts} attempts of a terminal failure");
    Ok(())
}

async fn requeue_after(s: &mut Suite) -> anyhow::Result<()> {
    let name = s.name("requeue");
    s.apply(&name, json!({"requeueMs": 500})).await?;
    let status = status_json(&s.ready("conf-leaf", &name).await?);
    anyhow::ensure!(status["requeuedGeneration"] == 1, "status {status}");
    let starts = s.lines("start", &name).len();
    anyhow::ensure!(starts == 2, "{starts} runs, not 2");
    let reasons = s.reconcile_reasons(&name).await?;
    anyhow::ensure!(reasons.is_empty(), "a requeue is not a failure: {reasons:?}");
    Ok(())
}

async fn panic_isolation(s: &mut Suite) -> anyhow::Result<()> {
    let panics = s.name("panic");
    let fine = s.name("beside-panic");
    s.apply(&panics, json!({"panic": true})).await?;
    s.apply(&fine, json!({"sleepMs": 200})).await?;
    s.ready("conf-leaf", &fine).await?;
    let failed = eventually(Duration::from_secs(30), || async {
        let reasons = s.reconcile_reasons(&panics).await?;
        Ok((!reasons.is_empty()).then_some(reasons))
    })
    .await;
    let resource = find(&s.client, "conf-leaf", &panics).await?;
    s.delete("conf-leaf", &panics).await?;
    failed.map_err(|e| anyhow::anyhow!("the panic was not reported as a failure: {e}"))?;
    let resource = resource.ok_or_else(|| anyhow::anyhow!("the panicking resource vanished"))?;
    anyhow::ensure!(
        resource.phase != Phase::Failed as i32,
        "a panic is a transient failure, but the resource is FAILED"
    );
    Ok(())
}

async fn provider_config(s: &mut Suite) -> anyhow::Result<()> {
    let config = |name: &str, is_default: bool, spec: Value| ApplyProviderConfigRequest {
        provider_config: Some(ProviderConfig {
            name: name.into(),
            kind: "conf-leaf".into(),
            kind_version: 1,
            is_default,
            spec: Some(object(spec)),
            ..Default::default()
        }),
        ..Default::default()
    };
    let default_name = format!("{}-default", s.language.name());
    let custom_name = format!("{}-custom", s.language.name());
    s.client
        .provider_configs()
        .apply_provider_config(config(&default_name, true, json!({"region": "eu", "tier": "a"})))
        .await?;
    // The push reaches the running worker. The default rides its own
    // message, not the task: a task dispatched in the moment before the push
    // arrives runs without it, so a new generation is applied until one sees
    // it (as for the changed default below).
    let first = s.name("config-first");
    eventually(Duration::from_secs(20), || async {
        s.apply(&first, json!({"value": rand_value()})).await?;
        let resource = s.ready("conf-leaf", &first).await?;
        Ok((status_json(&resource)["config"] == json!({"region": "eu", "tier": "a"})).then_some(()))
    })
    .await
    .map_err(|e| anyhow::anyhow!("pushed default never reached the worker: {e}"))?;
    // A changed default, live.
    s.client
        .provider_configs()
        .apply_provider_config(config(&default_name, true, json!({"region": "us", "tier": "a"})))
        .await?;
    let second = s.name("config-second");
    eventually(Duration::from_secs(20), || async {
        s.apply(&second, json!({"value": rand_value()})).await?;
        let resource = s.ready("conf-leaf", &second).await?;
        Ok((status_json(&resource)["config"]["region"] == "us").then_some(()))
    })
    .await
    .map_err(|e| anyhow::anyhow!("the changed default never reached the worker: {e}"))?;
    // An override merges over the default.
    s.client
        .provider_configs()
        .apply_provider_config(config(&custom_name, false, json!({"tier": "b"})))
        .await?;
    let merged = s.name("config-override");
    let mut request = apply("conf-leaf", &merged, json!({}));
    request.provider_config = Some(custom_name.clone());
    s.client.resources().apply_resource(request).await?;
    let status = status_json(&s.ready("conf-leaf", &merged).await?);
    anyhow::ensure!(
        status["config"] == json!({"region": "us", "tier": "b"}),
        "override merged: {status}"
    );
    for name in [&first, &second, &merged] {
        s.delete("conf-leaf", name).await?;
    }
    Ok(())
}

/// A value that makes each apply a new generation.
fn rand_value() -> String {
    uuid::Uuid::new_v4().to_string()
}

async fn compose_value_flows(s: &mut Suite) -> anyhow::Result<()> {
    let root = s.name("tree");
    let (a, b) = (format!("{root}-a"), format!("{root}-b"));
    let spec = json!({"children": [
        {"name": a, "spec": {"value": "from-a"}},
        {"name": b, "spec": {}, "flows": [{"from": a, "source": "/value", "field": "/value"}]}
    ]});
    s.client
        .resources()
        .apply_resource(apply("conf-composite", &root, spec))
        .await?;
    let tree = s.ready("conf-composite", &root).await?;
    let status = status_json(&tree);
    anyhow::ensure!(
        status["phase"] == "ready" && status["children"] == 2 && status["ready"] == 2,
        "rollup status {status}"
    );
    let child = s.ready("conf-leaf", &b).await?;
    let spec = child.spec.as_ref().map(json).unwrap_or(Value::Null);
    anyhow::ensure!(
        spec["value"] == "from-a",
        "the flowed value did not arrive: spec {spec}"
    );
    let child_status = status_json(&child);
    anyhow::ensure!(child_status["value"] == "from-a", "child status {child_status}");
    Ok(())
}

async fn teardown_order(s: &mut Suite) -> anyhow::Result<()> {
    let root = s.name("tree");
    let (a, b) = (format!("{root}-a"), format!("{root}-b"));
    s.delete("conf-composite", &root).await?;
    let teardowns: Vec<String> = s
        .log()
        .into_iter()
        .filter(|l| l["event"] == "teardown" && (l["name"] == a.as_str() || l["name"] == b.as_str()))
        .filter_map(|l| l["name"].as_str().map(str::to_owned))
        .collect();
    anyhow::ensure!(
        teardowns == [b, a],
        "teardown order {teardowns:?}: the dependent goes first"
    );
    Ok(())
}

/// Plans `spec` for the `conf-composite` `name`, waiting up to `timeout`
/// for the composer.
async fn plan_composite(
    s: &Suite,
    name: &str,
    spec: Value,
    timeout: Duration,
) -> Result<PlanResourceResponse, tonic::Status> {
    Ok(s.client
        .resources()
        .plan_resource(PlanResourceRequest {
            change: Some(plan_resource_request::Change::Apply(apply(
                "conf-composite",
                name,
                spec,
            ))),
            max_depth: 0,
            compose_timeout: Some(prost_types::Duration {
                seconds: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
                nanos: 0,
            }),
        })
        .await?
        .into_inner())
}

/// The (action, kind/name) of each child a plan lists.
fn planned_children(plan: &ResourcePlan) -> Vec<(PlanAction, String)> {
    let mut out: Vec<(PlanAction, String)> = plan
        .children
        .iter()
        .map(|c| {
            let name = c
                .resource
                .as_ref()
                .map(|r| format!("{}/{}", r.kind, r.name))
                .unwrap_or_default();
            (PlanAction::try_from(c.action).unwrap_or(PlanAction::Unspecified), name)
        })
        .collect();
    out.sort_by(|a, b| a.1.cmp(&b.1));
    out
}

/// A composer worker asked to plan: it gets the plan flag, its answer is
/// the plan's children and edges, it causes no side effect (the log's
/// `side-effect` lines, which the same compose writes when it is real, stay
/// at zero) and nothing is stored; a composer that does not answer in time
/// fails the plan with COMPOSER_TIMED_OUT.
async fn plan(s: &mut Suite) -> anyhow::Result<()> {
    let root = s.name("planned");
    let (a, b, c) = (format!("{root}-a"), format!("{root}-b"), format!("{root}-c"));
    let spec = |names: &[&String]| {
        let children: Vec<Value> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let previous: Vec<&String> = i.checked_sub(1).map(|p| vec![names[p]]).unwrap_or_default();
                json!({"name": n, "spec": {"value": n}, "dependsOn": previous})
            })
            .collect();
        json!({"children": children})
    };
    let side_effects = |s: &Suite| s.lines("side-effect", &root).len();

    // A new tree, composed by the worker in plan mode.
    let answer = plan_composite(s, &root, spec(&[&a, &b]), Duration::from_secs(10)).await?;
    let tree = answer.plan.unwrap_or_default();
    anyhow::ensure!(answer.changes, "a new tree plans changes");
    anyhow::ensure!(
        PlanComposer::try_from(tree.composer) == Ok(PlanComposer::Worker),
        "composer {:?}, not the worker: {}",
        tree.composer,
        tree.not_planned
    );
    let leaf = |n: &String| format!("conf-leaf/{n}");
    anyhow::ensure!(
        planned_children(&tree) == [(PlanAction::Create, leaf(&a)), (PlanAction::Create, leaf(&b))],
        "planned children {:?} ({})",
        planned_children(&tree),
        tree.not_planned
    );
    anyhow::ensure!(tree.edges_added.len() == 1, "planned edges {:?}", tree.edges_added);
    let starts = s.lines("start", &root);
    anyhow::ensure!(
        !starts.is_empty() && starts.iter().all(|l| l["plan"] == true && l["reaction"] == "compose"),
        "the composer's start lines {starts:?}: it must run with the plan flag"
    );
    anyhow::ensure!(side_effects(s) == 0, "planning caused a side effect");
    anyhow::ensure!(
        find(&s.client, "conf-composite", &root).await?.is_none(),
        "planning stored the resource"
    );

    // Applied for real: the same compose causes its side effect.
    s.client
        .resources()
        .apply_resource(apply("conf-composite", &root, spec(&[&a, &b])))
        .await?;
    s.ready("conf-composite", &root).await?;
    let real = s.lines("side-effect", &root);
    anyhow::ensure!(
        !real.is_empty() && real.iter().all(|l| l["plan"] == false),
        "the real compose's side-effect lines {real:?}"
    );
    let effects = real.len();

    // One child more: exactly it, and still no side effect from planning.
    let answer = plan_composite(s, &root, spec(&[&a, &b, &c]), Duration::from_secs(10)).await?;
    let tree = answer.plan.unwrap_or_default();
    anyhow::ensure!(
        PlanAction::try_from(tree.action) == Ok(PlanAction::Update),
        "action {:?}",
        tree.action
    );
    anyhow::ensure!(
        planned_children(&tree) == [(PlanAction::Create, leaf(&c))] && tree.unchanged_children == 2,
        "planned children {:?}, {} unchanged ({})",
        planned_children(&tree),
        tree.unchanged_children,
        tree.not_planned
    );
    anyhow::ensure!(side_effects(s) == effects, "planning caused a side effect");

    // A composer that does not answer within the plan's compose timeout.
    let hung = plan_composite(s, &root, json!({"hang": true, "children": []}), Duration::from_secs(1)).await;
    match hung {
        Err(status) => {
            let details = tonic_types::StatusExt::get_error_details(&status);
            let reason = details.error_info().map(|i| i.reason.clone()).unwrap_or_default();
            anyhow::ensure!(
                status.code() == tonic::Code::DeadlineExceeded && reason == "COMPOSER_TIMED_OUT",
                "a hung composer answered {:?} {reason}: {}",
                status.code(),
                status.message()
            );
        }
        Ok(answer) => anyhow::bail!("a hung composer's plan succeeded: {answer:?}"),
    }
    anyhow::ensure!(side_effects(s) == effects, "planning caused a side effect");
    s.delete("conf-composite", &root).await
}

async fn bounded_concurrency(s: &mut Suite) -> anyhow::Result<()> {
    let names: Vec<String> = (0..3 * MAX_PARALLEL).map(|i| s.name(&format!("wide-{i}"))).collect();
    for name in &names {
        s.apply(name, json!({"sleepMs": 400})).await?;
    }
    for name in &names {
        s.ready("conf-leaf", name).await?;
    }
    let mut running = 0usize;
    let mut most = 0usize;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for line in s.log() {
        let Some(name) = line["name"].as_str().filter(|n| names.iter().any(|m| m == n)) else {
            continue;
        };
        match line["event"].as_str() {
            Some("start") => {
                running += 1;
                *seen.entry(name.to_owned()).or_default() += 1;
            }
            Some("end") => running = running.saturating_sub(1),
            _ => {}
        }
        most = most.max(running);
    }
    anyhow::ensure!(seen.len() == names.len(), "only {} of {} ran", seen.len(), names.len());
    anyhow::ensure!(
        most <= MAX_PARALLEL,
        "{most} handlers ran at once, the limit is {MAX_PARALLEL}"
    );
    anyhow::ensure!(most >= 2, "handlers never overlapped ({most}): concurrency is not used");
    Ok(())
}

async fn reconnect(s: &mut Suite) -> anyhow::Result<()> {
    let name = s.name("reconnect");
    s.apply(&name, json!({"sleepMs": 3000})).await?;
    eventually(Duration::from_secs(20), || async {
        Ok((!s.lines("start", &name).is_empty()).then_some(()))
    })
    .await?;
    // The server goes away mid-task and comes back on the same address and
    // database: the worker reconnects, resumes the lease and delivers the
    // result it buffered.
    s.restart_server().await?;
    let status = status_json(&s.ready("conf-leaf", &name).await?);
    anyhow::ensure!(status["attempt"] == 1, "the task ran again after the restart: {status}");
    let starts = s.lines("start", &name).len();
    anyhow::ensure!(starts == 1, "{starts} starts");
    Ok(())
}

/// The server drains (a graceful stop) while the worker's handlers finish
/// one after another, before, during and after the drain's last read of the
/// stream: every result is kept by the worker until the broker
/// acknowledges it, and sent again on the next stream if it was not, so
/// nothing is lost and no task runs twice.
async fn broker_drain(s: &mut Suite) -> anyhow::Result<()> {
    let names: Vec<String> = (0..MAX_PARALLEL).map(|i| s.name(&format!("drained-{i}"))).collect();
    for (i, name) in names.iter().enumerate() {
        s.apply(name, json!({"sleepMs": 200 + 350 * i})).await?;
    }
    eventually(Duration::from_secs(20), || async {
        Ok(names.iter().all(|n| !s.lines("start", n).is_empty()).then_some(()))
    })
    .await?;
    s.restart_server().await?;
    for name in &names {
        let status = status_json(&s.ready("conf-leaf", name).await?);
        anyhow::ensure!(status["attempt"] == 1, "{name} ran again after the drain: {status}");
        let starts = s.lines("start", name).len();
        anyhow::ensure!(starts == 1, "{name}: {starts} starts");
    }
    Ok(())
}

async fn worker_killed(s: &mut Suite) -> anyhow::Result<()> {
    let name = s.name("killed");
    s.apply(&name, json!({"sleepMs": 3000})).await?;
    eventually(Duration::from_secs(20), || async {
        Ok((!s.lines("start", &name).is_empty()).then_some(()))
    })
    .await?;
    // SIGKILL mid-task: no drain, no result. A new worker process gets the
    // task again and nothing is lost.
    s.worker.kill().await?;
    s.worker = spawn_worker(&mut s.command, s.scratch.path())?;
    let status = status_json(&s.ready("conf-leaf", &name).await?);
    let starts = s.lines("start", &name).len();
    anyhow::ensure!(
        starts == 2,
        "{starts} starts: the killed worker's task should run once more"
    );
    anyhow::ensure!(status["attempt"].as_i64() >= Some(2), "status {status}");
    Ok(())
}

/// The certificates of the `mtls` scenario: a CA, the server's keypair
/// (localhost, 127.0.0.1), the runner's client identity and the worker's.
struct MtlsFiles {
    dir: std::path::PathBuf,
    ca: std::path::PathBuf,
    server: (std::path::PathBuf, std::path::PathBuf),
    runner: (std::path::PathBuf, std::path::PathBuf),
    worker: (std::path::PathBuf, std::path::PathBuf),
    identity: String,
    /// Another keypair for the worker, signed by the same CA, that the
    /// `tls-reload` scenario rotates the worker's files to.
    rotated: Leaf,
    rotated_identity: String,
}

impl MtlsFiles {
    fn new(dir: std::path::PathBuf, language: Language) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        let ca = TestCa::new("converge conformance CA")?;
        let ca_file = dir.join("ca.pem");
        replace(&ca_file, &ca.pem())?;
        let identity = format!("spiffe://converge.test/conformance/{}", language.name());
        let rotated_identity = format!("spiffe://converge.test/conformance/{}-rotated", language.name());
        Ok(Self {
            rotated: ca.client(Some(&rotated_identity))?,
            rotated_identity,
            server: ca.server()?.write(&dir, "server")?,
            runner: ca
                .client(Some("spiffe://converge.test/conformance/runner"))?
                .write(&dir, "runner")?,
            worker: ca.client(Some(&identity))?.write(&dir, "worker")?,
            ca: ca_file,
            dir,
            identity,
        })
    }
}

/// A server of its own on `listen` (any free port when None), TLS with
/// client certificates of `files`' CA required, so the plaintext worker of
/// the other scenarios cannot take its work.
async fn mtls_server(
    database: &TestDatabase,
    listen: Option<SocketAddr>,
    files: &MtlsFiles,
) -> anyhow::Result<TestServer> {
    let tls = TlsArgs {
        tls_cert_file: Some(files.server.0.clone()),
        tls_key_file: Some(files.server.1.clone()),
        tls_client_ca_file: Some(files.ca.clone()),
        tls_reload_interval_secs: 1,
        ..TlsArgs::default()
    };
    TestServer::start_with(database.clone(), Role::All, |config| {
        config.serve.tls = tls;
        if let Some(listen) = listen {
            config.serve.listen_addr = listen.into();
        }
    })
    .await
}

/// The runner's own mTLS client of `server`.
async fn mtls_client(server: &TestServer, files: &MtlsFiles) -> anyhow::Result<Client> {
    let runner = ClientTls::load(
        &ClientTlsFiles {
            ca: files.ca.clone(),
            identity: Some(files.runner.clone()),
        },
        DEFAULT_RELOAD_INTERVAL,
    )?;
    Ok(Client::connect_tls(https(server), runner).await?)
}

fn https(server: &TestServer) -> String {
    server.address().replacen("http://", "https://", 1)
}

/// This language's worker on a TLS server at `address`, presenting
/// `identity` when given, with `env` besides; its stderr goes to
/// `files.dir`/worker.stderr, its log lines to the suite's log.
fn tls_worker(
    s: &Suite,
    address: &str,
    files: &MtlsFiles,
    identity: Option<&(std::path::PathBuf, std::path::PathBuf)>,
    env: &[(&str, &str)],
) -> anyhow::Result<Child> {
    let mut command = command_like(&s.command);
    command
        .env("CONVERGE_BROKER_ADDR", address)
        .env("CONVERGE_TLS_CA_FILE", &files.ca)
        .env_remove("CONVERGE_TLS_CERT_FILE")
        .env_remove("CONVERGE_TLS_KEY_FILE")
        .envs(env.iter().copied());
    if let Some((cert, key)) = identity {
        command
            .env("CONVERGE_TLS_CERT_FILE", cert)
            .env("CONVERGE_TLS_KEY_FILE", key);
    }
    spawn_worker(&mut command, &files.dir)
}

/// The actors of the worker events of resource `name`, by reason.
async fn worker_actors(client: &Client, name: &str) -> anyhow::Result<Vec<(String, String)>> {
    Ok(events(client, "conf-leaf", name)
        .await?
        .into_iter()
        .filter(|e| e.actor.starts_with("worker"))
        .map(|e| (e.reason, e.actor))
        .collect())
}

async fn mtls(s: &mut Suite) -> anyhow::Result<()> {
    let files = MtlsFiles::new(s.scratch.path().join("mtls"), s.language)?;
    let server = mtls_server(&TestDatabase::new().await?, None, &files).await?;
    let outcome = mtls_on(s, &server, &files).await;
    let stopped = server.shutdown().await;
    outcome?;
    stopped
}

async fn mtls_on(s: &Suite, server: &TestServer, files: &MtlsFiles) -> anyhow::Result<()> {
    let address = https(server);
    let client = mtls_client(server, files).await?;
    apply_conformance_kinds(&client).await?;
    let start = |identity| tls_worker(s, &address, files, identity, &[]);

    // Without a client certificate the server refuses the handshake: the
    // worker keeps trying and gets no work.
    let name = s.name("mtls");
    let spec = json!({"value": "certified", "events": [{"reason": "Certified"}]});
    let mut anonymous = start(None)?;
    client
        .resources()
        .apply_resource(apply("conf-leaf", &name, spec))
        .await?;
    tokio::time::sleep(REFUSED_FOR).await;
    let exited = anonymous.try_wait()?;
    anonymous.kill().await.ok();
    anyhow::ensure!(
        exited.is_none(),
        "the worker without a client certificate exited ({exited:?}) instead of retrying"
    );
    let resource = find(&client, "conf-leaf", &name)
        .await?
        .ok_or_else(|| anyhow::anyhow!("{name} vanished"))?;
    let starts = s.lines("start", &name).len();
    anyhow::ensure!(
        resource.phase != Phase::Ready as i32 && starts == 0,
        "a worker without a client certificate got work: phase {}, {starts} starts",
        resource.phase
    );

    // With one, the same task runs and is attributed to its SPIFFE ID.
    let mut certified = start(Some(&files.worker))?;
    let ready = wait_phase(&client, "conf-leaf", &name, Phase::Ready).await;
    let actors = worker_actors(&client, &name).await;
    certified.kill().await.ok();
    let status = status_json(&ready.map_err(|e| anyhow::anyhow!("never ready over mTLS: {e}"))?);
    anyhow::ensure!(
        status["language"] == s.language.name() && status["value"] == "certified",
        "status {status}"
    );
    let actor = format!("worker:{}", files.identity);
    let actors = actors?;
    anyhow::ensure!(
        actors.iter().any(|(reason, a)| reason == "Certified" && *a == actor)
            && actors.iter().all(|(_, a)| *a == actor),
        "worker events {actors:?}, want each by {actor}"
    );
    Ok(())
}

async fn tls_reload(s: &mut Suite) -> anyhow::Result<()> {
    let files = MtlsFiles::new(s.scratch.path().join("tls-reload"), s.language)?;
    let database = TestDatabase::new().await?;
    let listen: SocketAddr = free_local_addr()?.parse()?;
    let mut server = Some(mtls_server(&database, Some(listen), &files).await?);
    let outcome = tls_reload_on(s, &mut server, &database, listen, &files).await;
    let stopped = match server {
        Some(server) => server.shutdown().await,
        None => Ok(()),
    };
    outcome?;
    stopped
}

/// The worker presents the identity of its files as they are when it
/// reconnects: files caught mid-rotation (a new key beside the old
/// certificate) keep the last good identity, a completed rotation presents
/// the new one. A server restart forces each reconnect.
async fn tls_reload_on(
    s: &Suite,
    server: &mut Option<TestServer>,
    database: &TestDatabase,
    listen: SocketAddr,
    files: &MtlsFiles,
) -> anyhow::Result<()> {
    let address = format!("https://{listen}");
    let reload_ms = TLS_RELOAD_MS.to_string();
    let mut worker = tls_worker(
        s,
        &address,
        files,
        Some(&files.worker),
        &[("CONFORMANCE_TLS_RELOAD_MS", &reload_ms)],
    )?;
    let outcome = async {
        let first = server.as_ref().ok_or_else(|| anyhow::anyhow!("no server"))?;
        apply_conformance_kinds(&mtls_client(first, files).await?).await?;
        // Applies a resource with one spec event and returns the actors of
        // its worker events once it is ready.
        let served = |step: &'static str, client: Client| async move {
            let name = s.name(&format!("reload-{step}"));
            let spec = json!({"value": step, "events": [{"reason": "Reloaded"}]});
            client
                .resources()
                .apply_resource(apply("conf-leaf", &name, spec))
                .await?;
            wait_phase(&client, "conf-leaf", &name, Phase::Ready)
                .await
                .map_err(|e| anyhow::anyhow!("{step}: never ready: {e}"))?;
            worker_actors(&client, &name).await
        };
        let expect = |step: &str, actors: Vec<(String, String)>, identity: &str| {
            let actor = format!("worker:{identity}");
            anyhow::ensure!(
                actors.iter().any(|(reason, _)| reason == "Reloaded") && actors.iter().all(|(_, a)| *a == actor),
                "{step}: worker events {actors:?}, want each by {actor}"
            );
            Ok(())
        };

        let before = served("before", mtls_client(first, files).await?).await?;
        expect("before the rotation", before, &files.identity)?;

        // Mid-rotation: the new key has replaced the old, the certificate
        // not yet. The pair does not match, so the last good one is kept.
        replace(&files.worker.1, &files.rotated.key_pem)?;
        let client = restart(server, database, listen, files).await?;
        let mid = served("mid", client).await?;
        expect("mid-rotation", mid, &files.identity)?;

        replace(&files.worker.0, &files.rotated.cert_pem)?;
        let client = restart(server, database, listen, files).await?;
        let after = served("after", client).await?;
        expect("after the rotation", after, &files.rotated_identity)
    }
    .await;
    worker.kill().await.ok();
    outcome
}

/// The server goes away and comes back on the same address and database;
/// the worker reconnects with its files as they are then. Returns a client
/// of the new server.
async fn restart(
    server: &mut Option<TestServer>,
    database: &TestDatabase,
    listen: SocketAddr,
    files: &MtlsFiles,
) -> anyhow::Result<Client> {
    // The Rust SDK polls its files: let it see them first.
    tokio::time::sleep(Duration::from_millis(4 * TLS_RELOAD_MS)).await;
    if let Some(old) = server.take() {
        old.shutdown().await?;
    }
    let new = mtls_server(database, Some(listen), files).await?;
    let client = mtls_client(&new, files).await?;
    *server = Some(new);
    Ok(client)
}

async fn trace(s: &mut Suite) -> anyhow::Result<()> {
    // The server must export its spans, which a server in this process
    // cannot do beside the other tests: a converge process of its own,
    // exporting to a receiver in the test, on a database of its own.
    let receiver = Receiver::default();
    let endpoint = receiver.serve().await?;
    let dir = s.scratch.path().join("trace");
    std::fs::create_dir_all(&dir)?;
    let database = TestDatabase::new().await?;
    let addr = free_local_addr()?;
    let mut server = converge_process_with(
        &database.url()?,
        &addr,
        &dir.join("converge.log"),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_METRICS_EXPORTER", "none"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    )?;
    let outcome = trace_on(s, &receiver, &endpoint, &format!("http://{addr}"), &dir).await;
    let stopped = stop_cleanly(&mut server).await;
    outcome?;
    stopped
}

/// The handler span of a task, exported by the worker, is a child of a span
/// the server exported: same trace, its parent the server's reconcile span.
async fn trace_on(s: &Suite, receiver: &Receiver, endpoint: &str, address: &str, dir: &Path) -> anyhow::Result<()> {
    let client = connect_when_up(address).await?;
    apply_conformance_kinds(&client).await?;
    let mut command = command_like(&s.command);
    command
        .env("CONVERGE_BROKER_ADDR", address)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let mut worker = spawn_worker(&mut command, dir)?;
    let service = format!("converge-conformance-{}", s.language.name());
    let name = s.name("traced");
    let outcome = async {
        client
            .resources()
            .apply_resource(apply("conf-leaf", &name, json!({"value": "traced"})))
            .await?;
        wait_phase(&client, "conf-leaf", &name, Phase::Ready).await?;
        let found = eventually(Duration::from_secs(20), || async {
            let spans = receiver.spans();
            Ok(spans
                .iter()
                .filter(|h| h.service == service && h.name == "handle conf-leaf:1 work")
                .find_map(|handle| {
                    spans
                        .iter()
                        .find(|p| p.trace_id == handle.trace_id && p.span_id == handle.parent)
                        .map(|parent| (handle.clone(), parent.clone()))
                }))
        })
        .await;
        let summary = |spans: Vec<Received>| -> Vec<String> {
            spans
                .iter()
                .filter(|s| s.service != "converge" || s.name.starts_with("reconcile"))
                .map(|s| format!("{}: {}", s.service, s.name))
                .collect()
        };
        let (handle, parent) = found.map_err(|e| {
            anyhow::anyhow!(
                "no handler span of {service} with an exported parent ({e}); spans: {:?}",
                summary(receiver.spans())
            )
        })?;
        anyhow::ensure!(
            parent.service == "converge" && parent.name == "reconcile conf-leaf",
            "the handler span's parent is {}'s {:?}, not the server's reconcile span",
            parent.service,
            parent.name
        );
        anyhow::ensure!(handle.trace_id == parent.trace_id);
        Ok(())
    }
    .await;
    worker.kill().await.ok();
    outcome
}

async fn graceful_drain(s: &mut Suite) -> anyhow::Result<()> {
    let name = s.name("drain");
    s.apply(&name, json!({"sleepMs": 2000})).await?;
    eventually(Duration::from_secs(20), || async {
        Ok((!s.lines("start", &name).is_empty()).then_some(()))
    })
    .await?;
    signal(&s.worker, Signal::SIGTERM)?;
    let exit = tokio::time::timeout(Duration::from_secs(20), s.worker.wait()).await??;
    anyhow::ensure!(exit.success(), "the worker exited with {exit} after SIGTERM");
    let resource = find(&s.client, "conf-leaf", &name)
        .await?
        .ok_or_else(|| anyhow::anyhow!("gone"))?;
    let status = status_json(&resource);
    anyhow::ensure!(
        resource.phase == Phase::Ready as i32 && status["attempt"] == 1,
        "the drained task's result did not land before exit: phase {}, status {status}",
        resource.phase
    );
    // Leave a worker for whatever runs next.
    s.worker = spawn_worker(&mut s.command, s.scratch.path())?;
    Ok(())
}

async fn run(language: Language) -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let mut suite = Suite::start(language).await?;
    let mut failures = Vec::new();
    for (scenario, run) in SCENARIOS {
        let started = std::time::Instant::now();
        match tokio::time::timeout(Duration::from_secs(90), run(&mut suite)).await {
            Ok(Ok(())) => eprintln!(
                "[{}] {scenario}: ok ({:.1} s)",
                language.name(),
                started.elapsed().as_secs_f64()
            ),
            Ok(Err(e)) => failures.push(format!("[{}] {scenario}: {e:#}", language.name())),
            Err(_) => failures.push(format!("[{}] {scenario}: timed out after 90 s", language.name())),
        }
    }
    suite.worker.kill().await.ok();
    if let Some(server) = suite.server.take() {
        server.shutdown().await?;
    }
    if !failures.is_empty() {
        // Kept for a look: the worker's stderr and the conformance log.
        let kept = suite.scratch.keep();
        anyhow::bail!(
            "{} scenario(s) failed:\n{}\n(worker stderr and log kept in {})",
            failures.len(),
            failures.join("\n"),
            kept.display()
        );
    }
    Ok(())
}

#[tokio::test]
async fn rust_conformance() -> anyhow::Result<()> {
    run(Language::Rust).await
}

#[tokio::test]
async fn go_conformance() -> anyhow::Result<()> {
    run(Language::Go).await
}

#[tokio::test]
async fn python_conformance() -> anyhow::Result<()> {
    run(Language::Python).await
}

#[tokio::test]
async fn typescript_conformance() -> anyhow::Result<()> {
    run(Language::TypeScript).await
}
