//! Reactors end to end: bindings and their refusals, one delivery per
//! transition and matching binding, failures that stop retrying, their
//! listing and redrive, and deliveries that survive a killed worker process
//! and a killed server.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use converge_integration::api::{self, apply, apply_manifest, apply_ok, expect_error, fields, find, spawn_worker};
use converge_integration::kinds::sink_manifest;
use converge_integration::processes::{ProcessSite, crash_postgres_state, signal, stdworker, stop_cleanly};
use converge_integration::{TestDatabase, TestServer, eventually};
use converge_proto::v1::redrive_reactor_deliveries_request::Target as RedriveTarget;
use converge_proto::v1::{
    ApplyReactorBindingRequest, DeleteReactorBindingRequest, DeleteResourceRequest, DeliveryResourceSelector, Emit,
    GetReactorBindingRequest, KindManifest, KindPolicy, ListReactorBindingsRequest, ListReactorDeliveriesRequest,
    ListResourceEventsRequest, Phase, Reaction, ReactorBinding, ReactorDelivery, RedriveReactorDeliveriesRequest,
    ResourceRef, Transition, Trigger,
};
use converge_sdk::Client;
use converge_sdk::worker::{
    HandlerError, KindVersion, Outcome, Provider, ReactionRequest, StageInput, Worker, async_trait,
};
use nix::sys::signal::Signal;
use serde_json::json;
use tokio::process::Child;
use tonic::Code;

const FINALIZER: &str = "app.test/cleanup";

/// A watched kind: a worker reaction and a teardown.
fn app_manifest() -> KindManifest {
    KindManifest {
        kind: "app".into(),
        kind_version: 1,
        reactions: vec![
            Reaction {
                name: "work".into(),
                trigger: Trigger::SpecChange.into(),
                emits: vec![Emit::Status.into(), Emit::Conditions.into()],
                ..Default::default()
            },
            Reaction {
                name: "teardown".into(),
                trigger: Trigger::DeleteRequested.into(),
                emits: vec![Emit::Finalizer.into()],
                ..Default::default()
            },
        ],
        finalizer_name: FINALIZER.into(),
        ..Default::default()
    }
}

/// Works `app`: healthy unless the spec says `"healthy": false`, failing
/// terminally when it says `"fail": true`.
#[derive(Clone)]
struct App;

#[async_trait]
impl Provider for App {
    fn kind(&self) -> KindVersion {
        KindVersion::new("app", 1)
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        if request.reaction == "teardown" {
            return Ok(Outcome::new());
        }
        let spec = &request.resource.spec;
        if spec["fail"] == json!(true) {
            return Err(HandlerError::terminal("told to fail").with_reason("Told"));
        }
        let healthy = spec["healthy"] != json!(false);
        Ok(Outcome::new()
            .with_status(json!({"worked": request.generation}))
            .with_healthy(healthy))
    }
}

/// One delivery a sink received.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Delivered {
    binding: String,
    transition: String,
    resource: String,
    generation: i64,
    dedup_token: String,
}

/// A reactor that records what it receives; fails terminally for
/// resources labelled `sink=fail`.
#[derive(Clone, Default)]
struct Sink {
    seen: Arc<Mutex<Vec<Delivered>>>,
}

impl Sink {
    fn seen(&self) -> Vec<Delivered> {
        let mut seen = self.seen.lock().map(|s| s.clone()).unwrap_or_default();
        seen.sort();
        seen
    }

    /// (binding, transition, resource) of everything received, sorted.
    fn summary(&self) -> Vec<(String, String, String)> {
        self.seen()
            .into_iter()
            .map(|d| (d.binding, d.transition, d.resource))
            .collect()
    }
}

#[async_trait]
impl Provider for Sink {
    fn kind(&self) -> KindVersion {
        KindVersion::new("sink", 1)
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        let StageInput::React(input) = &request.input else {
            return Err(HandlerError::terminal("not a react task"));
        };
        if let Ok(mut seen) = self.seen.lock() {
            seen.push(Delivered {
                binding: input.binding.clone(),
                transition: format!("{:?}", input.transition).to_lowercase(),
                resource: request.resource.name.clone(),
                generation: request.generation,
                dedup_token: input.dedup_token.clone(),
            });
        }
        if request.resource.labels.get("sink").map(String::as_str) == Some("fail") {
            return Err(HandlerError::terminal("the sink refuses this one").with_reason("Refused"));
        }
        Ok(Outcome::new())
    }
}

fn binding(name: &str, transition: Transition) -> ReactorBinding {
    ReactorBinding {
        name: name.into(),
        watch_kind: "app".into(),
        transition: transition.into(),
        reactor: "sink".into(),
        ..Default::default()
    }
}

async fn bind(client: &Client, binding: ReactorBinding) -> anyhow::Result<ReactorBinding> {
    client
        .reactor_bindings()
        .apply_reactor_binding(ApplyReactorBindingRequest {
            reactor_binding: Some(binding),
            ..Default::default()
        })
        .await?
        .into_inner()
        .reactor_binding
        .ok_or_else(|| anyhow::anyhow!("no binding in the response"))
}

async fn get_binding(client: &Client, name: &str) -> anyhow::Result<ReactorBinding> {
    client
        .reactor_bindings()
        .get_reactor_binding(GetReactorBindingRequest { name: name.into() })
        .await?
        .into_inner()
        .reactor_binding
        .ok_or_else(|| anyhow::anyhow!("no binding"))
}

async fn kinds(client: &Client) -> anyhow::Result<()> {
    apply_manifest(client, app_manifest()).await?;
    apply_manifest(client, sink_manifest("sink")).await?;
    Ok(())
}

async fn delete(client: &Client, name: &str) -> anyhow::Result<()> {
    client
        .resources()
        .delete_resource(DeleteResourceRequest {
            kind: "app".into(),
            name: name.into(),
            ..Default::default()
        })
        .await?;
    Ok(())
}

#[tokio::test]
async fn bindings_are_validated_and_refusals_store_nothing() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    kinds(&client).await?;
    let refuse = |b: ReactorBinding| {
        let client = client.clone();
        async move {
            client
                .reactor_bindings()
                .apply_reactor_binding(ApplyReactorBindingRequest {
                    reactor_binding: Some(b),
                    ..Default::default()
                })
                .await
        }
    };
    let unknown = refuse(ReactorBinding {
        watch_kind: "nothing".into(),
        ..binding("x", Transition::Synced)
    })
    .await;
    assert_eq!(
        fields(&expect_error(unknown, Code::NotFound, "KIND_NOT_FOUND")),
        ["/reactor_binding/watch_kind"]
    );
    let not_reactor = refuse(ReactorBinding {
        reactor: "app".into(),
        watch_kind: "sink".into(),
        ..binding("x", Transition::Synced)
    })
    .await;
    expect_error(not_reactor, Code::InvalidArgument, "NOT_A_REACTOR");
    apply_manifest(&client, api::work_kind("plain", 1, None)).await?;
    let plain = refuse(ReactorBinding {
        reactor: "plain".into(),
        ..binding("x", Transition::Synced)
    })
    .await;
    assert_eq!(
        fields(&expect_error(plain, Code::InvalidArgument, "NOT_A_REACTOR")),
        ["/reactor_binding/reactor"]
    );
    let itself = refuse(ReactorBinding {
        reactor: "app".into(),
        ..binding("x", Transition::Synced)
    })
    .await;
    expect_error(itself, Code::InvalidArgument, "INVALID_FIELD");
    let unset = refuse(binding("x", Transition::Unspecified)).await;
    assert_eq!(
        fields(&expect_error(unset, Code::InvalidArgument, "INVALID_FIELD")),
        ["/reactor_binding/transition"]
    );
    let labels = refuse(ReactorBinding {
        label_match: [("bad key!".to_owned(), "v".to_owned())].into(),
        ..binding("x", Transition::Synced)
    })
    .await;
    expect_error(labels, Code::InvalidArgument, "INVALID_LABELS");
    let listed = client
        .reactor_bindings()
        .list_reactor_bindings(ListReactorBindingsRequest::default())
        .await?
        .into_inner()
        .reactor_bindings;
    assert!(listed.is_empty(), "{listed:?}");

    // A reactor kind owns no resources.
    let resource = client.resources().apply_resource(apply("sink", "s", json!({}))).await;
    expect_error(resource, Code::FailedPrecondition, "KIND_IS_REACTOR");

    // Stored, unchanged on re-apply, guarded by its etag, deleted.
    let stored = bind(&client, binding("ok", Transition::Synced)).await?;
    assert_eq!(stored.enabled, Some(true));
    let again = bind(&client, binding("ok", Transition::Synced)).await?;
    assert_eq!(
        (again.etag.clone(), again.update_time),
        (stored.etag.clone(), stored.update_time)
    );
    let stale = refuse(ReactorBinding {
        etag: "00000000000000000000000f".into(),
        ..binding("ok", Transition::Created)
    })
    .await;
    expect_error(stale, Code::Aborted, "ETAG_MISMATCH");
    // A kind a binding names cannot be deleted.
    let in_use = client
        .kinds()
        .delete_kind_manifest(converge_proto::v1::DeleteKindManifestRequest {
            kind: "sink".into(),
            kind_version: 1,
            ..Default::default()
        })
        .await;
    expect_error(in_use, Code::FailedPrecondition, "KIND_IN_USE");
    client
        .reactor_bindings()
        .delete_reactor_binding(DeleteReactorBindingRequest {
            name: "ok".into(),
            etag: Some(stored.etag),
            ..Default::default()
        })
        .await?;
    let gone = client
        .reactor_bindings()
        .get_reactor_binding(GetReactorBindingRequest { name: "ok".into() })
        .await;
    expect_error(gone, Code::NotFound, "REACTOR_BINDING_NOT_FOUND");
    server.shutdown().await
}

#[tokio::test]
async fn each_transition_is_delivered_once_per_matching_enabled_binding() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    kinds(&client).await?;
    for b in [
        binding("synced-a", Transition::Synced),
        binding("synced-b", Transition::Synced),
        ReactorBinding {
            enabled: Some(false),
            ..binding("synced-off", Transition::Synced)
        },
        ReactorBinding {
            label_match: [("tier".to_owned(), "gold".to_owned())].into(),
            ..binding("synced-gold", Transition::Synced)
        },
        binding("created", Transition::Created),
        binding("degraded", Transition::Degraded),
        binding("failed", Transition::Failed),
        binding("deleted", Transition::Deleted),
    ] {
        bind(&client, b).await?;
    }
    let sink = Sink::default();
    let _worker = spawn_worker(
        Worker::builder()
            .endpoint(server.address())
            .provider(App)
            .provider(sink.clone()),
    );
    let mut gold = apply("app", "gold", json!({}));
    gold.labels = BTreeMap::from([("tier".to_owned(), "gold".to_owned())]);
    apply_ok(&client, gold).await?;
    apply_ok(&client, apply("app", "sick", json!({"healthy": false}))).await?;
    apply_ok(&client, apply("app", "broken", json!({"fail": true}))).await?;

    let s = |b: &str, t: &str, r: &str| (b.to_owned(), t.to_owned(), r.to_owned());
    let mut expected = vec![
        s("created", "created", "broken"),
        s("created", "created", "gold"),
        s("created", "created", "sick"),
        s("degraded", "degraded", "sick"),
        s("failed", "failed", "broken"),
        s("synced-a", "synced", "gold"),
        s("synced-a", "synced", "sick"),
        s("synced-b", "synced", "gold"),
        s("synced-b", "synced", "sick"),
        s("synced-gold", "synced", "gold"),
    ];
    expected.sort();
    eventually(Duration::from_secs(30), || async {
        Ok((sink.summary() == expected).then_some(()))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}: got {:?}", sink.summary()))?;
    // The token names the resource, transition, generation and binding.
    for d in sink.seen() {
        assert!(
            d.dedup_token
                .ends_with(&format!(":{}:{}:{}", d.transition, d.generation, d.binding)),
            "{d:?}"
        );
    }

    // A new generation of gold syncs again; deleting it tears it down, then
    // DELETED fires once it is gone.
    apply_ok(&client, {
        let mut next = apply("app", "gold", json!({"v": 2}));
        next.labels = BTreeMap::from([("tier".to_owned(), "gold".to_owned())]);
        next
    })
    .await?;
    // Synced before the delete: a delete that lands first drops the
    // unclaimed reconcile, and generation 2 never syncs.
    eventually(Duration::from_secs(30), || async {
        let gold = find(&client, "app", "gold").await?;
        Ok(gold.filter(|r| r.generation == 2 && r.phase == Phase::Ready as i32))
    })
    .await?;
    delete(&client, "gold").await?;
    expected.extend([
        s("deleted", "deleted", "gold"),
        s("synced-a", "synced", "gold"),
        s("synced-b", "synced", "gold"),
        s("synced-gold", "synced", "gold"),
    ]);
    expected.sort();
    eventually(Duration::from_secs(30), || async {
        Ok((sink.summary() == expected).then_some(()))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}: got {:?}", sink.summary()))?;
    let counts = get_binding(&client, "synced-a").await?;
    assert_eq!((counts.pending_deliveries, counts.failed_deliveries), (0, 0));
    server.shutdown().await
}

#[tokio::test]
async fn a_terminal_failure_is_recorded_and_not_retried() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    kinds(&client).await?;
    bind(&client, binding("on-sync", Transition::Synced)).await?;
    let sink = Sink::default();
    let _worker = spawn_worker(
        Worker::builder()
            .endpoint(server.address())
            .provider(App)
            .provider(sink.clone()),
    );
    let mut refused = apply("app", "refused", json!({}));
    refused.labels = BTreeMap::from([("sink".to_owned(), "fail".to_owned())]);
    apply_ok(&client, refused).await?;
    let failed = eventually(Duration::from_secs(30), || async {
        let b = get_binding(&client, "on-sync").await?;
        Ok((b.failed_deliveries == 1).then_some(b))
    })
    .await?;
    assert_eq!(failed.pending_deliveries, 0);
    assert!(failed.last_failure.contains("refuses"), "{failed:?}");
    let events = client
        .resources()
        .list_resource_events(ListResourceEventsRequest {
            kind: "app".into(),
            name: "refused".into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .events;
    assert!(
        events
            .iter()
            .any(|e| e.reason == "ReactorDeliveryFailed" && e.message.contains("on-sync")),
        "{events:?}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(sink.seen().len(), 1, "a terminal failure is not retried");
    server.shutdown().await
}

#[tokio::test]
async fn deliveries_recorded_before_a_binding_changes_are_still_made() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    kinds(&client).await?;
    bind(&client, binding("on-create", Transition::Created)).await?;
    // No reactor is connected: the delivery waits.
    apply_ok(&client, apply("app", "early", json!({}))).await?;
    let pending = get_binding(&client, "on-create").await?;
    assert_eq!(pending.pending_deliveries, 1);
    // Disabled: the next transition records nothing, the recorded one stays.
    bind(
        &client,
        ReactorBinding {
            enabled: Some(false),
            ..binding("on-create", Transition::Created)
        },
    )
    .await?;
    apply_ok(&client, apply("app", "late", json!({}))).await?;
    let sink = Sink::default();
    let _worker = spawn_worker(Worker::builder().endpoint(server.address()).provider(sink.clone()));
    eventually(Duration::from_secs(30), || async {
        Ok((sink.summary().len() == 1).then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        sink.summary(),
        [("on-create".to_owned(), "created".to_owned(), "early".to_owned())]
    );
    assert_eq!(get_binding(&client, "on-create").await?.pending_deliveries, 0);
    server.shutdown().await
}

/// A stdworker program for the reactor: appends its dedup token to
/// `$RECORD_DIR/tokens`, then sleeps `$SLEEP_SECS` before succeeding.
const SLOW_SINK: &str = r#"#!/usr/bin/env python3
import json, os, sys, time
doc = json.load(sys.stdin)
with open(os.path.join(os.environ["RECORD_DIR"], "tokens"), "a") as f:
    f.write(doc["input"]["dedup_token"] + "\n")
time.sleep(float(os.environ.get("SLEEP_SECS", "0")))
"#;

fn sink_process(address: &str, dir: &Path, sleep_secs: &str) -> anyhow::Result<Child> {
    stdworker(address, dir, SLOW_SINK, &["sink:1"], &[("SLEEP_SECS", sleep_secs)], &[])
}

fn tokens(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("tokens"))
        .map(|s| s.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_delivery_whose_worker_is_killed_is_made_again_with_the_same_token() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    kinds(&client).await?;
    bind(&client, binding("on-create", Transition::Created)).await?;
    let scratch = tempfile::tempdir()?;
    let mut slow = sink_process(&server.address(), scratch.path(), "60")?;
    apply_ok(&client, apply("app", "a", json!({}))).await?;
    eventually(Duration::from_secs(20), || async {
        Ok((tokens(scratch.path()).len() == 1).then_some(()))
    })
    .await?;
    slow.kill().await?;

    let mut quick = sink_process(&server.address(), scratch.path(), "0")?;
    eventually(Duration::from_secs(30), || async {
        let b = get_binding(&client, "on-create").await?;
        Ok((b.pending_deliveries == 0 && tokens(scratch.path()).len() >= 2).then_some(()))
    })
    .await?;
    let seen = tokens(scratch.path());
    assert!(seen.iter().all(|t| *t == seen[0]), "{seen:?}");
    quick.kill().await?;
    server.shutdown().await
}

#[tokio::test]
async fn deliveries_recorded_before_a_server_crash_are_made_after_restart() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let pool = database.pool().clone();
    let site = ProcessSite::new(&database)?;
    let address = site.address();
    let (mut server, client) = site.start("first.log").await?;
    kinds(&client).await?;
    bind(&client, binding("on-create", Transition::Created)).await?;
    for i in 0..20 {
        apply_ok(&client, apply("app", &format!("r{i}"), json!({}))).await?;
    }
    signal(&server, Signal::SIGKILL)?;
    server.wait().await?;
    crash_postgres_state(&pool).await?;
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM reactor_deliveries")
        .fetch_one(&pool)
        .await?;
    assert_eq!(recorded, 20, "deliveries are durable (logged)");

    let (mut restarted, client) = site.start("second.log").await?;
    let mut worker = sink_process(&address, site.scratch(), "0")?;
    eventually(Duration::from_secs(30), || async {
        let b = get_binding(&client, "on-create").await?;
        Ok((b.pending_deliveries == 0).then_some(()))
    })
    .await?;
    let mut seen = tokens(site.scratch());
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 20, "{seen:?}");
    worker.kill().await?;
    stop_cleanly(&mut restarted).await
}

#[tokio::test]
async fn the_publisher_chain_writes_each_synced_bom_to_its_sink() -> anyhow::Result<()> {
    use converge_examples::publisher;
    let server = TestServer::start().await?;
    let client = server.client().await?;
    for manifest in converge_examples::manifests()? {
        apply_manifest(&client, manifest).await?;
    }
    let (file, json) = publisher::MANIFEST_FILE;
    apply_manifest(
        &client,
        converge_examples::parse_apply_request(file, json)?
            .manifest
            .ok_or_else(|| anyhow::anyhow!("no manifest"))?,
    )
    .await?;
    let scratch = tempfile::tempdir()?;
    let sink = scratch.path().join("boms.jsonl");
    client
        .provider_configs()
        .apply_provider_config(converge_proto::v1::ApplyProviderConfigRequest {
            provider_config: Some(converge_proto::v1::ProviderConfig {
                name: "publisher-sink".into(),
                kind: publisher::PUBLISHER.into(),
                kind_version: publisher::KIND_VERSION,
                is_default: true,
                spec: Some(api::object(json!({"path": sink.display().to_string()}))),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await?;
    bind(
        &client,
        ReactorBinding {
            name: "publish-boms".into(),
            watch_kind: "bom".into(),
            transition: Transition::Synced.into(),
            reactor: publisher::PUBLISHER.into(),
            ..Default::default()
        },
    )
    .await?;
    let _worker = spawn_worker(publisher::register(converge_examples::register(
        Worker::builder().endpoint(server.address()),
        converge_examples::Latency::from_millis(0),
    )));
    apply_ok(
        &client,
        apply("bom", "demo", json!({"teams": ["payments"], "region": "us-east-1"})),
    )
    .await?;
    let line = eventually(Duration::from_secs(60), || async {
        let text = std::fs::read_to_string(&sink).unwrap_or_default();
        Ok(text.lines().next().map(str::to_owned))
    })
    .await?;
    let published: serde_json::Value = serde_json::from_str(&line)?;
    assert_eq!(published["bom"], "demo");
    assert_eq!(published["binding"], "publish-boms");
    assert!(published["status"].is_object(), "{published}");
    server.shutdown().await
}

/// A reactor of kind `flaky` that fails (transiently) while `failing` is
/// set and records every delivery it sees.
#[derive(Clone, Default)]
struct Flaky {
    failing: Arc<std::sync::atomic::AtomicBool>,
    seen: Arc<Mutex<Vec<Delivered>>>,
}

impl Flaky {
    fn seen_of(&self, resource: &str) -> Vec<Delivered> {
        self.seen
            .lock()
            .map(|s| s.iter().filter(|d| d.resource == resource).cloned().collect())
            .unwrap_or_default()
    }
}

#[async_trait]
impl Provider for Flaky {
    fn kind(&self) -> KindVersion {
        KindVersion::new("flaky", 1)
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        let StageInput::React(input) = &request.input else {
            return Err(HandlerError::terminal("not a react task"));
        };
        if let Ok(mut seen) = self.seen.lock() {
            seen.push(Delivered {
                binding: input.binding.clone(),
                transition: format!("{:?}", input.transition).to_lowercase(),
                resource: request.resource.name.clone(),
                generation: request.generation,
                dedup_token: input.dedup_token.clone(),
            });
        }
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(HandlerError::transient("the endpoint is down"));
        }
        Ok(Outcome::new())
    }
}

async fn deliveries(client: &Client, request: ListReactorDeliveriesRequest) -> anyhow::Result<Vec<ReactorDelivery>> {
    Ok(client
        .reactor_bindings()
        .list_reactor_deliveries(request)
        .await?
        .into_inner()
        .reactor_deliveries)
}

fn redrive_request(target: RedriveTarget, reason: &str) -> RedriveReactorDeliveriesRequest {
    RedriveReactorDeliveriesRequest {
        target: Some(target),
        reason: reason.into(),
        ..Default::default()
    }
}

fn selected(kind: &str, selector: &str) -> RedriveTarget {
    RedriveTarget::Resources(DeliveryResourceSelector {
        kind: kind.into(),
        label_selector: selector.into(),
    })
}

#[tokio::test]
async fn a_delivery_that_gave_up_is_listed_and_redriven_once() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    kinds(&client).await?;
    let mut flaky = sink_manifest("flaky");
    flaky.policy = Some(KindPolicy {
        max_transient_attempts: 2,
        ..Default::default()
    });
    apply_manifest(&client, flaky).await?;
    // A reactor kind no worker serves: its deliveries stay pending.
    apply_manifest(&client, sink_manifest("idle")).await?;
    bind(
        &client,
        ReactorBinding {
            reactor: "flaky".into(),
            ..binding("on-sync", Transition::Synced)
        },
    )
    .await?;
    bind(
        &client,
        ReactorBinding {
            reactor: "idle".into(),
            ..binding("on-sync-idle", Transition::Synced)
        },
    )
    .await?;
    let reactor = Flaky::default();
    reactor.failing.store(true, std::sync::atomic::Ordering::SeqCst);
    let _worker = spawn_worker(
        Worker::builder()
            .endpoint(server.address())
            .provider(App)
            .provider(reactor.clone()),
    );
    for (name, team) in [("web", "a"), ("db", "b")] {
        let mut app = apply("app", name, json!({}));
        app.labels = BTreeMap::from([("team".to_owned(), team.to_owned())]);
        apply_ok(&client, app).await?;
    }
    eventually(Duration::from_secs(30), || async {
        Ok((get_binding(&client, "on-sync").await?.failed_deliveries == 2).then_some(()))
    })
    .await?;

    // Listed: by binding, by resource, only those that gave up.
    let given_up = deliveries(
        &client,
        ListReactorDeliveriesRequest {
            binding: Some("on-sync".into()),
            only_given_up: true,
            ..Default::default()
        },
    )
    .await?;
    assert_eq!(given_up.len(), 2, "{given_up:?}");
    for d in &given_up {
        assert_eq!(d.attempts, 2, "{d:?}");
        assert!(
            d.fail_time.is_some() && d.last_error.contains("endpoint is down"),
            "{d:?}"
        );
    }
    let web = deliveries(
        &client,
        ListReactorDeliveriesRequest {
            resource: Some(ResourceRef {
                kind: "app".into(),
                name: "web".into(),
            }),
            ..Default::default()
        },
    )
    .await?;
    assert_eq!(
        web.len(),
        2,
        "one given up (on-sync), one pending (on-sync-idle): {web:?}"
    );
    let pending = web
        .iter()
        .find(|d| d.binding == "on-sync-idle")
        .ok_or_else(|| anyhow::anyhow!("no pending delivery: {web:?}"))?;
    assert!(pending.fail_time.is_none());
    let web_given_up = web
        .iter()
        .find(|d| d.binding == "on-sync")
        .ok_or_else(|| anyhow::anyhow!("no given-up delivery: {web:?}"))?
        .clone();
    let page = client
        .reactor_bindings()
        .list_reactor_deliveries(ListReactorDeliveriesRequest {
            only_given_up: true,
            page_size: 1,
            ..Default::default()
        })
        .await?
        .into_inner();
    assert_eq!(page.reactor_deliveries.len(), 1);
    let rest = client
        .reactor_bindings()
        .list_reactor_deliveries(ListReactorDeliveriesRequest {
            only_given_up: true,
            page_size: 1,
            page_token: page.next_page_token,
            ..Default::default()
        })
        .await?
        .into_inner();
    assert_eq!(rest.reactor_deliveries.len(), 1);
    assert_ne!(rest.reactor_deliveries[0].id, page.reactor_deliveries[0].id);

    // Refusals change nothing.
    let redrives = client.reactor_bindings();
    let violations = expect_error(
        redrives
            .clone()
            .redrive_reactor_deliveries(redrive_request(selected("app", "team in (a"), "fixed"))
            .await,
        Code::InvalidArgument,
        "INVALID_LABEL_SELECTOR",
    );
    assert_eq!(fields(&violations), ["/resources/label_selector"]);
    let violations = expect_error(
        redrives
            .clone()
            .redrive_reactor_deliveries(redrive_request(selected("app", "team=a"), " "))
            .await,
        Code::InvalidArgument,
        "INVALID_FIELD",
    );
    assert_eq!(fields(&violations), ["/reason"]);
    let violations = expect_error(
        redrives
            .clone()
            .redrive_reactor_deliveries(RedriveReactorDeliveriesRequest {
                limit: 1001,
                ..redrive_request(selected("app", "team=a"), "fixed")
            })
            .await,
        Code::InvalidArgument,
        "INVALID_FIELD",
    );
    assert_eq!(fields(&violations), ["/limit"]);
    expect_error(
        redrives
            .clone()
            .redrive_reactor_deliveries(redrive_request(RedriveTarget::DeliveryId(pending.id.clone()), "fixed"))
            .await,
        Code::FailedPrecondition,
        "DELIVERY_NOT_GIVEN_UP",
    );
    expect_error(
        redrives
            .clone()
            .redrive_reactor_deliveries(redrive_request(
                RedriveTarget::DeliveryId(uuid::Uuid::nil().to_string()),
                "fixed",
            ))
            .await,
        Code::NotFound,
        "REACTOR_DELIVERY_NOT_FOUND",
    );

    // validate_only counts and names, and changes nothing.
    let dry = redrives
        .clone()
        .redrive_reactor_deliveries(RedriveReactorDeliveriesRequest {
            validate_only: true,
            ..redrive_request(selected("app", "team=a"), "endpoint fixed")
        })
        .await?
        .into_inner();
    assert_eq!(dry.count, 1);
    assert_eq!(dry.first.len(), 1);
    assert_eq!(dry.first[0].id, web_given_up.id);
    assert!(dry.next_page_token.is_empty());
    assert_eq!(get_binding(&client, "on-sync").await?.failed_deliveries, 2);
    // More than the limit: a continuation covers the rest, then none is left.
    let by_binding = RedriveReactorDeliveriesRequest {
        validate_only: true,
        limit: 1,
        ..redrive_request(RedriveTarget::Binding("on-sync".into()), "endpoint fixed")
    };
    let first = redrives
        .clone()
        .redrive_reactor_deliveries(by_binding.clone())
        .await?
        .into_inner();
    assert_eq!(first.count, 1);
    assert!(!first.next_page_token.is_empty());
    let second = redrives
        .clone()
        .redrive_reactor_deliveries(RedriveReactorDeliveriesRequest {
            page_token: first.next_page_token.clone(),
            ..by_binding.clone()
        })
        .await?
        .into_inner();
    assert_eq!(second.count, 1);
    assert_ne!(second.first[0].id, first.first[0].id);
    assert!(second.next_page_token.is_empty());
    expect_error(
        redrives
            .clone()
            .redrive_reactor_deliveries(RedriveReactorDeliveriesRequest {
                page_token: first.next_page_token,
                ..redrive_request(selected("app", ""), "endpoint fixed")
            })
            .await,
        Code::InvalidArgument,
        "INVALID_PAGE_TOKEN",
    );
    assert_eq!(get_binding(&client, "on-sync").await?.failed_deliveries, 2);

    // The redrive delivers it exactly once more, with the same token.
    reactor.failing.store(false, std::sync::atomic::Ordering::SeqCst);
    let request = RedriveReactorDeliveriesRequest {
        request_id: "redrive-web".into(),
        ..redrive_request(selected("app", "team=a"), "endpoint fixed")
    };
    let done = redrives
        .clone()
        .redrive_reactor_deliveries(request.clone())
        .await?
        .into_inner();
    assert_eq!(done.count, 1);
    eventually(Duration::from_secs(30), || async {
        let b = get_binding(&client, "on-sync").await?;
        Ok((b.failed_deliveries == 1 && b.pending_deliveries == 0).then_some(()))
    })
    .await?;
    let repeated = redrives.clone().redrive_reactor_deliveries(request).await?.into_inner();
    assert_eq!(repeated, done, "a repeated request id answers the first call");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let seen = reactor.seen_of("web");
    assert_eq!(seen.len(), 3, "two failed attempts and one redriven: {seen:?}");
    assert!(
        seen.iter().all(|d| d.dedup_token == web_given_up.dedup_token),
        "{seen:?}"
    );
    let events = client
        .resources()
        .list_resource_events(ListResourceEventsRequest {
            kind: "app".into(),
            name: "web".into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .events;
    assert!(
        events
            .iter()
            .any(|e| e.reason == "ReactorDeliveryRedriven" && e.message.contains("endpoint fixed") && e.actor == "api"),
        "{events:?}"
    );
    assert_eq!(reactor.seen_of("db").len(), 2, "db was not selected");

    // The rest of the binding, by binding; then nothing is left to redrive.
    let rest = redrives
        .clone()
        .redrive_reactor_deliveries(redrive_request(
            RedriveTarget::Binding("on-sync".into()),
            "endpoint fixed",
        ))
        .await?
        .into_inner();
    assert_eq!(rest.count, 1);
    eventually(Duration::from_secs(30), || async {
        Ok((get_binding(&client, "on-sync").await?.failed_deliveries == 0).then_some(()))
    })
    .await?;
    let again = redrives
        .clone()
        .redrive_reactor_deliveries(redrive_request(
            RedriveTarget::Binding("on-sync".into()),
            "endpoint fixed",
        ))
        .await?
        .into_inner();
    assert_eq!(again.count, 0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(reactor.seen_of("db").len(), 3);
    server.shutdown().await
}
