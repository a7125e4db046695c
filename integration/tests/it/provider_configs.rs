//! Provider configs end to end: the API and its refusals, defaults pushed
//! live to workers on two brokers, workers that wait for their default, the
//! override merged into tasks and re-reconciled on edit (with a real
//! `converge-stdworker` process), and configs owned by a composer.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use converge_integration::api::{
    apply, apply_manifest, apply_ok, expect_error, fields, get, json, object, spawn_worker, work_kind,
};
use converge_integration::processes::{ProcessSite, crash_postgres_state, signal, stdworker, stop_cleanly};
use converge_integration::{TestDatabase, TestServer, eventually};
use converge_proto::v1::{
    ApplyProviderConfigRequest, DeleteKindManifestRequest, DeleteProviderConfigRequest, DeleteResourceRequest, Emit,
    GetProviderConfigRequest, KindManifest, ListProviderConfigsRequest, ListResourceEventsRequest,
    ListResourcesRequest, Phase, ProviderConfig, Reaction, Resource, ResourceRef, Trigger,
};
use converge_sdk::Client;
use converge_sdk::worker::{
    ChildSpec, HandlerError, KindVersion, Outcome, Provider, ProviderConfig as WorkerConfig, ProviderConfigSpec,
    ReactionRequest, Worker, async_trait,
};
use converge_service::config::Role;
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::process::Child;
use tonic::Code;

fn config(name: &str, kind: &str, is_default: bool, spec: Value) -> ProviderConfig {
    ProviderConfig {
        name: name.into(),
        kind: kind.into(),
        kind_version: 1,
        is_default,
        spec: Some(object(spec)),
        ..Default::default()
    }
}

fn apply_config(config: ProviderConfig) -> ApplyProviderConfigRequest {
    ApplyProviderConfigRequest {
        provider_config: Some(config),
        ..Default::default()
    }
}

async fn put(client: &Client, config: ProviderConfig) -> anyhow::Result<ProviderConfig> {
    client
        .provider_configs()
        .apply_provider_config(apply_config(config))
        .await?
        .into_inner()
        .provider_config
        .ok_or_else(|| anyhow::anyhow!("no config in the response"))
}

/// A kind whose configs must name a region (and may name an account).
fn cloud_manifest(kind: &str) -> KindManifest {
    KindManifest {
        config_schema: Some(object(json!({
            "type": "object",
            "properties": {"region": {"type": "string"}, "account": {"type": "string"}},
            "additionalProperties": false
        }))),
        ..work_kind(kind, 1, None)
    }
}

#[tokio::test]
async fn the_api_stores_configs_and_refuses_what_it_must() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, cloud_manifest("cloud")).await?;
    apply_manifest(&client, work_kind("other", 1, None)).await?;
    let configs = client.provider_configs();

    let created = configs
        .clone()
        .apply_provider_config(apply_config(config(
            "eu",
            "cloud",
            true,
            json!({"region": "eu-west-1"}),
        )))
        .await?
        .into_inner();
    assert!(created.created);
    let stored = created.provider_config.ok_or_else(|| anyhow::anyhow!("no config"))?;
    assert!(!stored.etag.is_empty());
    // A no-op re-apply writes nothing: same etag, same update time.
    let again = put(&client, config("eu", "cloud", true, json!({"region": "eu-west-1"}))).await?;
    assert_eq!(
        (again.etag.clone(), again.update_time),
        (stored.etag.clone(), stored.update_time)
    );

    // A second default of the pair.
    let second = configs
        .clone()
        .apply_provider_config(apply_config(config(
            "us",
            "cloud",
            true,
            json!({"region": "us-east-1"}),
        )))
        .await;
    assert_eq!(
        fields(&expect_error(second, Code::AlreadyExists, "DEFAULT_CONFIG_EXISTS")),
        ["/provider_config/is_default"]
    );
    // The config schema, one violation per pointer.
    let bad = configs
        .clone()
        .apply_provider_config(apply_config(config(
            "bad",
            "cloud",
            false,
            json!({"region": 7, "zone": "a"}),
        )))
        .await;
    let violations = expect_error(bad, Code::InvalidArgument, "CONFIG_SCHEMA_VIOLATION");
    assert!(
        fields(&violations).contains(&"/provider_config/spec/region"),
        "{violations:?}"
    );
    // Oversized data, unknown kind, a malformed name, a kind change, a stale etag.
    let mut big = config("big", "cloud", false, json!({}));
    big.data = vec![0; 1024 * 1024 + 1];
    let big = configs.clone().apply_provider_config(apply_config(big)).await;
    assert_eq!(
        fields(&expect_error(big, Code::ResourceExhausted, "CONFIG_DATA_TOO_LARGE")),
        ["/provider_config/data"]
    );
    let unknown = configs
        .clone()
        .apply_provider_config(apply_config(config("x", "nokind", false, json!({}))))
        .await;
    expect_error(unknown, Code::NotFound, "KIND_NOT_FOUND");
    let malformed = configs
        .clone()
        .apply_provider_config(apply_config(config("Not_A_Name", "cloud", false, json!({}))))
        .await;
    expect_error(malformed, Code::InvalidArgument, "INVALID_NAME");
    let moved = configs
        .clone()
        .apply_provider_config(apply_config(config("eu", "other", true, json!({}))))
        .await;
    assert_eq!(
        fields(&expect_error(moved, Code::InvalidArgument, "INVALID_FIELD")),
        ["/provider_config/kind"]
    );
    let mut stale = config("eu", "cloud", true, json!({"region": "eu-central-1"}));
    stale.etag = "0123456789abcdef01234567".into();
    let stale = configs.clone().apply_provider_config(apply_config(stale)).await;
    expect_error(stale, Code::Aborted, "ETAG_MISMATCH");
    // validate_only stores nothing.
    configs
        .clone()
        .apply_provider_config(ApplyProviderConfigRequest {
            validate_only: true,
            ..apply_config(config("dry", "cloud", false, json!({"region": "x"})))
        })
        .await?;
    let dry = configs
        .clone()
        .get_provider_config(GetProviderConfigRequest { name: "dry".into() })
        .await;
    expect_error(dry, Code::NotFound, "PROVIDER_CONFIG_NOT_FOUND");
    // Nothing a refused call touched changed.
    let unchanged = configs
        .clone()
        .get_provider_config(GetProviderConfigRequest { name: "eu".into() })
        .await?
        .into_inner()
        .provider_config
        .ok_or_else(|| anyhow::anyhow!("no config"))?;
    assert_eq!(unchanged, stored);

    // References: missing, of another kind, and one that holds the config.
    let missing = client
        .resources()
        .apply_resource(converge_proto::v1::ApplyResourceRequest {
            provider_config: Some("nope".into()),
            ..apply("cloud", "r1", json!({}))
        })
        .await;
    assert_eq!(
        fields(&expect_error(missing, Code::NotFound, "PROVIDER_CONFIG_NOT_FOUND")),
        ["/provider_config"]
    );
    let mismatch = client
        .resources()
        .apply_resource(converge_proto::v1::ApplyResourceRequest {
            provider_config: Some("eu".into()),
            ..apply("other", "r1", json!({}))
        })
        .await;
    expect_error(mismatch, Code::InvalidArgument, "PROVIDER_CONFIG_KIND_MISMATCH");
    put(&client, config("acct-b", "cloud", false, json!({"account": "b"}))).await?;
    apply_ok(
        &client,
        converge_proto::v1::ApplyResourceRequest {
            provider_config: Some("acct-b".into()),
            ..apply("cloud", "r1", json!({}))
        },
    )
    .await?;
    let in_use = configs
        .clone()
        .delete_provider_config(DeleteProviderConfigRequest {
            name: "acct-b".into(),
            ..Default::default()
        })
        .await;
    assert_eq!(
        fields(&expect_error(
            in_use,
            Code::FailedPrecondition,
            "PROVIDER_CONFIG_IN_USE"
        )),
        ["cloud/r1"]
    );
    let listed = client
        .resources()
        .list_resources(ListResourcesRequest {
            provider_config: Some("acct-b".into()),
            ..Default::default()
        })
        .await?
        .into_inner()
        .resources;
    assert_eq!(listed.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["r1"]);

    // A manifest change whose config schema rejects a stored config, and a
    // manifest that still has configs, are refused.
    let mut stricter = cloud_manifest("cloud");
    stricter.config_schema = Some(object(json!({"type": "object", "required": ["region"]})));
    let rejected = apply_manifest(&client, stricter).await;
    let offenders = expect_error(rejected, Code::FailedPrecondition, "SCHEMA_REJECTS_EXISTING_CONFIGS");
    assert_eq!(fields(&offenders), ["provider_configs/acct-b"]);
    put(&client, config("o", "other", false, json!({}))).await?;
    let delete_other = DeleteKindManifestRequest {
        kind: "other".into(),
        kind_version: 1,
        ..Default::default()
    };
    let in_use = client.kinds().delete_kind_manifest(delete_other.clone()).await;
    expect_error(in_use, Code::FailedPrecondition, "KIND_IN_USE");
    configs
        .clone()
        .delete_provider_config(DeleteProviderConfigRequest {
            name: "o".into(),
            ..Default::default()
        })
        .await?;
    client.kinds().delete_kind_manifest(delete_other).await?;

    // Lists: filters and pages.
    for i in 0..5 {
        put(&client, config(&format!("page-{i}"), "cloud", false, json!({}))).await?;
    }
    let defaults = configs
        .clone()
        .list_provider_configs(ListProviderConfigsRequest {
            is_default: Some(true),
            ..Default::default()
        })
        .await?
        .into_inner()
        .provider_configs;
    assert_eq!(defaults.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["eu"]);
    let mut names = Vec::new();
    let mut token = String::new();
    loop {
        let page = configs
            .clone()
            .list_provider_configs(ListProviderConfigsRequest {
                kind: Some("cloud".into()),
                page_size: 3,
                page_token: token.clone(),
                ..Default::default()
            })
            .await?
            .into_inner();
        names.extend(page.provider_configs.into_iter().map(|c| c.name));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(
        names,
        ["acct-b", "eu", "page-0", "page-1", "page-2", "page-3", "page-4"]
    );

    // Detached, the config can go; a default can be deleted with its etag.
    apply_ok(
        &client,
        converge_proto::v1::ApplyResourceRequest {
            provider_config: Some(String::new()),
            ..apply("cloud", "r1", json!({}))
        },
    )
    .await?;
    configs
        .clone()
        .delete_provider_config(DeleteProviderConfigRequest {
            name: "acct-b".into(),
            ..Default::default()
        })
        .await?;
    configs
        .clone()
        .delete_provider_config(DeleteProviderConfigRequest {
            name: "eu".into(),
            etag: Some(stored.etag.clone()),
            ..Default::default()
        })
        .await?;
    let gone = configs
        .clone()
        .get_provider_config(GetProviderConfigRequest { name: "eu".into() })
        .await;
    expect_error(gone, Code::NotFound, "PROVIDER_CONFIG_NOT_FOUND");
    server.shutdown().await
}

/// When a worker was told of a default, and what it was.
type Sighting = (Instant, Option<WorkerConfig>);

/// Records every default config change a worker is told of.
#[derive(Clone, Default)]
struct ConfigProbe {
    seen: Arc<Mutex<Vec<Sighting>>>,
}

impl ConfigProbe {
    /// When the worker was first told the default's spec is `spec`.
    fn seen_at(&self, spec: &Value) -> Option<Instant> {
        let seen = self.seen.lock().ok()?;
        seen.iter()
            .find(|(_, c)| c.as_ref().and_then(|c| c.spec.as_ref()) == Some(spec))
            .map(|(at, _)| *at)
    }

    fn last(&self) -> Option<Option<WorkerConfig>> {
        self.seen.lock().ok()?.last().map(|(_, c)| c.clone())
    }
}

#[async_trait]
impl Provider for ConfigProbe {
    fn kind(&self) -> KindVersion {
        KindVersion::new("cloud", 1)
    }

    async fn handle(&self, _request: ReactionRequest) -> Result<Outcome, HandlerError> {
        Ok(Outcome::new())
    }

    fn on_config(&self, config: Option<WorkerConfig>) {
        if let Ok(mut seen) = self.seen.lock() {
            seen.push((Instant::now(), config));
        }
    }
}

#[tokio::test]
async fn a_default_is_pushed_to_every_worker_on_two_brokers() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let first = TestServer::start_on(database.clone(), Role::All).await?;
    let second = TestServer::start_on(database, Role::All).await?;
    let client = first.client().await?;
    apply_manifest(&client, cloud_manifest("cloud")).await?;
    let probes = [ConfigProbe::default(), ConfigProbe::default()];
    let mut stops = Vec::new();
    for (probe, server) in probes.iter().zip([&first, &second]) {
        // The periodic re-pull is ten minutes away: a config seen within
        // seconds was pushed. (How fast a push is, is a benchmark figure,
        // `converge-load --config-users`, not an assertion here: a loaded
        // CI host once took 1.06 s.)
        stops.push(spawn_worker(
            Worker::builder()
                .endpoint(server.address())
                .provider(probe.clone())
                .config_refresh_interval(Duration::from_secs(600)),
        ));
    }
    // Both workers are connected (they announced "no default" at prime).
    eventually(Duration::from_secs(10), || async {
        Ok(probes.iter().all(|p| p.last().is_some()).then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;

    for (step, spec) in [json!({"region": "eu-west-1"}), json!({"region": "eu-central-1"})]
        .into_iter()
        .enumerate()
    {
        let applied = Instant::now();
        put(&client, config("default", "cloud", true, spec.clone())).await?;
        for (i, probe) in probes.iter().enumerate() {
            let at = eventually(Duration::from_secs(10), || async { Ok(probe.seen_at(&spec)) }).await?;
            let took = at.saturating_duration_since(applied);
            assert!(
                took < Duration::from_secs(10),
                "step {step}: worker {i} saw it after {took:?}"
            );
        }
    }
    client
        .provider_configs()
        .delete_provider_config(DeleteProviderConfigRequest {
            name: "default".into(),
            ..Default::default()
        })
        .await?;
    for probe in &probes {
        eventually(Duration::from_secs(5), || async {
            Ok(matches!(probe.last(), Some(None)).then_some(()))
        })
        .await?;
    }
    drop(stops);
    second.shutdown().await?;
    first.shutdown().await
}

/// A stdworker program that reports the configuration it was given (and the
/// trigger) as the resource's status, and appends one line per run to
/// `$RECORD_DIR/<name>`.
const REPORTING_PROGRAM: &str = r#"#!/usr/bin/env python3
import json, os, sys
doc = json.load(sys.stdin)
name = doc["resource"]["name"]
with open(os.path.join(os.environ["RECORD_DIR"], name), "a") as f:
    f.write(json.dumps({"trigger": doc["trigger"], "generation": doc["generation"]}) + "\n")
print(json.dumps({"status": {"config": doc["provider_config"], "trigger": doc["trigger"]}}))
"#;

fn reporting_worker(address: &str, dir: &Path, extra: &[&str]) -> anyhow::Result<Child> {
    stdworker(address, dir, REPORTING_PROGRAM, &["cloud:1"], &[], extra)
}

/// How many times the program ran for `name`.
fn runs(dir: &Path, name: &str) -> usize {
    std::fs::read_to_string(dir.join(name))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

async fn ready_with(client: &Client, name: &str, expected: &Value) -> anyhow::Result<Resource> {
    eventually(Duration::from_secs(30), || async {
        // A composed child may not exist yet.
        let Ok(resource) = get(client, "cloud", name).await else {
            return Ok(None);
        };
        let status = resource.status.as_ref().map(json).unwrap_or(Value::Null);
        Ok((resource.phase == Phase::Ready as i32 && status["config"] == *expected).then_some(resource))
    })
    .await
}

#[tokio::test]
async fn a_worker_that_needs_its_default_gets_no_tasks_until_it_arrives() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, cloud_manifest("cloud")).await?;
    let scratch = tempfile::tempdir()?;
    let mut worker = reporting_worker(&server.address(), scratch.path(), &["--require-config", "cloud:1"])?;
    apply_ok(&client, apply("cloud", "waits", json!({}))).await?;

    // Connected and unready: the task is not sent.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(runs(scratch.path(), "waits"), 0);
    assert_eq!(get(&client, "cloud", "waits").await?.phase, Phase::Reconciling as i32);

    put(
        &client,
        config("default", "cloud", true, json!({"region": "eu-west-1"})),
    )
    .await?;
    let started = Instant::now();
    ready_with(&client, "waits", &json!({"region": "eu-west-1"})).await?;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the worker turned ready only after {:?}",
        started.elapsed()
    );
    worker.kill().await?;
    server.shutdown().await
}

#[tokio::test]
async fn an_override_is_merged_and_editing_it_reconciles_exactly_its_users() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, cloud_manifest("cloud")).await?;
    put(
        &client,
        config("default", "cloud", true, json!({"region": "eu-west-1", "account": "a"})),
    )
    .await?;
    put(&client, config("team-b", "cloud", false, json!({"account": "b"}))).await?;
    let scratch = tempfile::tempdir()?;
    let mut worker = reporting_worker(&server.address(), scratch.path(), &[])?;
    for name in ["b1", "b2"] {
        apply_ok(
            &client,
            converge_proto::v1::ApplyResourceRequest {
                provider_config: Some("team-b".into()),
                ..apply("cloud", name, json!({}))
            },
        )
        .await?;
    }
    apply_ok(&client, apply("cloud", "plain", json!({}))).await?;
    let merged = json!({"region": "eu-west-1", "account": "b"});
    for name in ["b1", "b2"] {
        ready_with(&client, name, &merged).await?;
    }
    let plain = ready_with(&client, "plain", &json!({"region": "eu-west-1", "account": "a"})).await?;

    // Editing the override re-runs its two users at the same generation.
    let before: BTreeMap<&str, Resource> = [
        ("b1", get(&client, "cloud", "b1").await?),
        ("b2", get(&client, "cloud", "b2").await?),
    ]
    .into();
    put(
        &client,
        config("team-b", "cloud", false, json!({"account": "b", "region": "us-east-1"})),
    )
    .await?;
    let edited = json!({"region": "us-east-1", "account": "b"});
    for (name, old) in &before {
        let now = ready_with(&client, name, &edited).await?;
        assert_eq!(
            now.generation, old.generation,
            "{name}: a config change moves no generation"
        );
        assert_eq!(runs(scratch.path(), name), 2, "{name}");
        let status = now.status.as_ref().map(json).unwrap_or(Value::Null);
        assert_eq!(status["trigger"], "config_change");
        let events = client
            .resources()
            .list_resource_events(ListResourceEventsRequest {
                kind: "cloud".into(),
                name: (*name).into(),
                ..Default::default()
            })
            .await?
            .into_inner()
            .events;
        assert!(
            events.iter().any(|e| e.reason == "ProviderConfigChanged"),
            "{name}: {events:?}"
        );
    }
    // The resource without the override was left alone.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(runs(scratch.path(), "plain"), 1);
    assert_eq!(get(&client, "cloud", "plain").await?.update_time, plain.update_time);

    // Moving a resource to the override re-runs it too, without a new generation.
    let moved = apply_ok(
        &client,
        converge_proto::v1::ApplyResourceRequest {
            provider_config: Some("team-b".into()),
            ..apply("cloud", "plain", json!({}))
        },
    )
    .await?;
    let moved = moved.resource.ok_or_else(|| anyhow::anyhow!("no resource"))?;
    assert_eq!(moved.generation, plain.generation);
    ready_with(&client, "plain", &edited).await?;
    worker.kill().await?;
    server.shutdown().await
}

/// A composer that emits one config per entry of its spec's "configs" and
/// one child per entry of "children" ({name, config}).
#[derive(Clone)]
struct ConfigComposer;

#[async_trait]
impl Provider for ConfigComposer {
    fn kind(&self) -> KindVersion {
        KindVersion::new("stack", 1)
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        let spec = &request.resource.spec;
        let mut outcome = Outcome::new().with_status(json!({"composed": true}));
        for name in spec["configs"].as_array().into_iter().flatten() {
            let name = name.as_str().unwrap_or_default();
            outcome = outcome.with_config(ProviderConfigSpec {
                name: name.to_owned(),
                kind: "cloud".into(),
                kind_version: 1,
                is_default: false,
                spec: Some(json!({"account": name})),
                data: Vec::new(),
            });
        }
        for child in spec["children"].as_array().into_iter().flatten() {
            outcome = outcome.with_child(ChildSpec {
                kind: "cloud".into(),
                kind_version: 1,
                name: child["name"].as_str().unwrap_or_default().to_owned(),
                labels: BTreeMap::new(),
                spec: json!({}),
                provider_config: child["config"].as_str().map(str::to_owned),
            });
        }
        Ok(outcome)
    }
}

/// A leaf that reports the override it was given.
#[derive(Clone)]
struct CloudLeaf;

#[async_trait]
impl Provider for CloudLeaf {
    fn kind(&self) -> KindVersion {
        KindVersion::new("cloud", 1)
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        Ok(Outcome::new().with_status(json!({"config": request.effective_config()})))
    }
}

async fn owned_configs(client: &Client, owner: &str) -> anyhow::Result<Vec<String>> {
    Ok(client
        .provider_configs()
        .list_provider_configs(ListProviderConfigsRequest {
            owner: Some(ResourceRef {
                kind: "stack".into(),
                name: owner.into(),
            }),
            ..Default::default()
        })
        .await?
        .into_inner()
        .provider_configs
        .into_iter()
        .map(|c| c.name)
        .collect())
}

#[tokio::test]
async fn a_composer_owns_the_configs_it_emits() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, cloud_manifest("cloud")).await?;
    apply_manifest(
        &client,
        KindManifest {
            kind: "stack".into(),
            kind_version: 1,
            reactions: vec![Reaction {
                name: "compose".into(),
                trigger: Trigger::SpecChange.into(),
                emits: vec![Emit::Children.into(), Emit::Configs.into(), Emit::Status.into()],
                ..Default::default()
            }],
            ..Default::default()
        },
    )
    .await?;
    let _worker = spawn_worker(
        Worker::builder()
            .endpoint(server.address())
            .provider(ConfigComposer)
            .provider(CloudLeaf),
    );
    let spec = json!({
        "configs": ["acct-x", "acct-y"],
        "children": [{"name": "x", "config": "acct-x"}, {"name": "y", "config": "acct-y"}]
    });
    apply_ok(&client, apply("stack", "s", spec)).await?;
    for (name, account) in [("x", "acct-x"), ("y", "acct-y")] {
        ready_with(&client, name, &json!({"account": account})).await?;
        assert_eq!(get(&client, "cloud", name).await?.provider_config, account);
    }
    assert_eq!(owned_configs(&client, "s").await?, ["acct-x", "acct-y"]);
    // Owned configs are not the API's to change or delete.
    let owned = client
        .provider_configs()
        .delete_provider_config(DeleteProviderConfigRequest {
            name: "acct-x".into(),
            ..Default::default()
        })
        .await;
    expect_error(owned, Code::FailedPrecondition, "PROVIDER_CONFIG_OWNED");

    // Recomposed without y and its config: both are pruned.
    let spec = json!({"configs": ["acct-x"], "children": [{"name": "x", "config": "acct-x"}]});
    apply_ok(&client, apply("stack", "s", spec)).await?;
    eventually(Duration::from_secs(20), || async {
        Ok((owned_configs(&client, "s").await? == ["acct-x"]).then_some(()))
    })
    .await?;
    // A composition naming a config that is not there is refused whole.
    let spec = json!({"configs": [], "children": [{"name": "x", "config": "nowhere"}]});
    apply_ok(&client, apply("stack", "s", spec)).await?;
    let failed = eventually(Duration::from_secs(20), || async {
        let root = get(&client, "stack", "s").await?;
        Ok((root.phase == Phase::Failed as i32).then_some(root))
    })
    .await?;
    assert!(
        failed
            .conditions
            .iter()
            .any(|c| c.message.contains("nowhere") && c.message.contains("does not exist")),
        "{:?}",
        failed.conditions
    );
    assert_eq!(owned_configs(&client, "s").await?, ["acct-x"]);

    // Removed with their owner.
    client
        .resources()
        .delete_resource(DeleteResourceRequest {
            kind: "stack".into(),
            name: "s".into(),
            ..Default::default()
        })
        .await?;
    eventually(Duration::from_secs(20), || async {
        let left = client
            .provider_configs()
            .list_provider_configs(ListProviderConfigsRequest::default())
            .await?
            .into_inner()
            .provider_configs;
        Ok(left.is_empty().then_some(()))
    })
    .await?;
    server.shutdown().await
}

#[tokio::test]
async fn a_config_rerun_lost_in_a_crash_still_happens_after_restart() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let pool = database.pool().clone();
    let site = ProcessSite::new(&database)?;
    let address = site.address();
    let (mut server, client) = site.start("first.log").await?;
    apply_manifest(&client, cloud_manifest("cloud")).await?;
    put(&client, config("team", "cloud", false, json!({"account": "v1"}))).await?;
    let worker = spawn_worker(Worker::builder().endpoint(address.clone()).provider(CloudLeaf));
    apply_ok(
        &client,
        converge_proto::v1::ApplyResourceRequest {
            provider_config: Some("team".into()),
            ..apply("cloud", "r", json!({}))
        },
    )
    .await?;
    ready_with(&client, "r", &json!({"account": "v1"})).await?;

    // Edited while no worker runs it, then the server and PostgreSQL crash:
    // the queued re-run is gone with the unlogged queue.
    drop(worker);
    tokio::time::sleep(Duration::from_millis(500)).await;
    put(&client, config("team", "cloud", false, json!({"account": "v2"}))).await?;
    signal(&server, Signal::SIGKILL)?;
    server.wait().await?;
    crash_postgres_state(&pool).await?;
    let queued: i64 = sqlx::query_scalar("SELECT count(*) FROM work_queue")
        .fetch_one(&pool)
        .await?;
    assert_eq!(queued, 0);

    let (mut restarted, client) = site.start("second.log").await?;
    let _worker = spawn_worker(Worker::builder().endpoint(address.clone()).provider(CloudLeaf));
    ready_with(&client, "r", &json!({"account": "v2"})).await?;
    stop_cleanly(&mut restarted).await
}
