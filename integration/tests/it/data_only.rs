//! Data-only kinds (issue 42): a manifest with no reactions. Its resources
//! are validated, stored, watched and Ready as written, at every
//! generation, with no task and no worker; deleted without one; and a
//! composed child that depends on one is released by it.

use std::collections::BTreeMap;
use std::time::Duration;

use converge_integration::api::{apply, apply_manifest, apply_ok, expect_error, get, spawn_worker, wait_phase};
use converge_integration::kinds::{Cells, cell_manifest};
use converge_integration::{TestServer, eventually};
use converge_proto::v1::{
    DeleteResourceRequest, GetResourceRequest, KindManifest, Phase, WatchEventType, WatchResourcesRequest,
};
use converge_sdk::Client;
use converge_sdk::worker::{
    ChildSpec, DepEdge, HandlerError, KindVersion, Outcome, Provider, ReactionRequest, ResourceRef, Stage, Worker,
    async_trait,
};
use serde_json::json;
use tokio_stream::StreamExt;
use tonic::Code;

/// `settings`: data only, with a spec schema.
fn settings_manifest() -> KindManifest {
    KindManifest {
        kind: "settings".into(),
        kind_version: 1,
        description: "data only".into(),
        spec_schema: Some(converge_integration::api::object(json!({
            "type": "object",
            "properties": {"region": {"type": "string"}},
            "required": ["region"],
        }))),
        ..Default::default()
    }
}

/// `site`: composes one cell that depends on the settings its spec names.
#[derive(Clone)]
struct Sites;

#[async_trait]
impl Provider for Sites {
    fn kind(&self) -> KindVersion {
        KindVersion::new("site", 1)
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        match request.stage {
            Stage::Compose => {
                let settings = request
                    .resource
                    .spec
                    .get("settings")
                    .and_then(|v| v.as_str())
                    .unwrap_or_default();
                let child = format!("{}-app", request.resource.name);
                Ok(Outcome::new()
                    .with_status(json!({"composed": true}))
                    .with_child(ChildSpec {
                        kind: "cell".into(),
                        kind_version: 1,
                        name: child.clone(),
                        labels: BTreeMap::new(),
                        spec: json!({}),
                        provider_config: None,
                    })
                    .with_edge(DepEdge {
                        dependent: ResourceRef::new("cell", child),
                        dependency: ResourceRef::new("settings", settings),
                        value_flows: Vec::new(),
                    }))
            }
            _ => Ok(Outcome::new()),
        }
    }
}

fn site_manifest() -> KindManifest {
    let mut manifest = converge_integration::kinds::stack_manifest();
    manifest.kind = "site".into();
    manifest.reactions.truncate(1);
    manifest
}

/// The resource of the next change a watch delivers (bookmarks skipped).
async fn next_change(
    watch: &mut tonic::Streaming<converge_proto::v1::WatchResourcesResponse>,
) -> anyhow::Result<converge_proto::v1::Resource> {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(15), watch.next())
            .await?
            .ok_or_else(|| anyhow::anyhow!("the watch ended"))??;
        if message.r#type() != WatchEventType::Bookmark {
            return Ok(message.resource.unwrap_or_default());
        }
    }
}

async fn phase(client: &Client, kind: &str, name: &str) -> anyhow::Result<Phase> {
    Ok(Phase::try_from(get(client, kind, name).await?.phase)?)
}

#[tokio::test]
async fn a_data_only_kind_is_ready_as_written_and_releases_its_dependents() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, settings_manifest()).await?;
    // A data-only kind cannot carry a finalizer: nothing would clear it.
    let mut finalized = settings_manifest();
    finalized.kind = "sealed".into();
    finalized.finalizer_name = "converge.dev/sealed".into();
    expect_error(
        apply_manifest(&client, finalized).await,
        Code::InvalidArgument,
        "INVALID_KIND_MANIFEST",
    );

    let mut watch = client
        .resources()
        .watch_resources(WatchResourcesRequest {
            kind: Some("settings".into()),
            ..Default::default()
        })
        .await?
        .into_inner();
    // The (empty) snapshot ends before anything is written.
    loop {
        let message = tokio::time::timeout(Duration::from_secs(15), watch.next())
            .await?
            .ok_or_else(|| anyhow::anyhow!("the watch ended"))??;
        if message.initial_events_end {
            break;
        }
    }

    // Validated, stored and Ready in the answer itself: no worker exists.
    expect_error(
        client
            .resources()
            .apply_resource(apply("settings", "bad", json!({"region": 7})))
            .await,
        Code::InvalidArgument,
        "SPEC_SCHEMA_VIOLATION",
    );
    let written = apply_ok(&client, apply("settings", "eu", json!({"region": "eu-west-1"}))).await?;
    let resource = written.resource.unwrap_or_default();
    assert_eq!((resource.phase(), resource.generation), (Phase::Ready, 1));
    let pool = server.database().pool().clone();
    let tasks: i64 = sqlx::query_scalar("SELECT count(*) FROM work_queue WHERE kind = 'settings'")
        .fetch_one(&pool)
        .await?;
    assert_eq!(tasks, 0);

    // Watched like any resource: Ready at its first generation...
    let first = next_change(&mut watch).await?;
    assert_eq!((first.generation, first.phase()), (1, Phase::Ready));

    // ...and at the next, at once too.
    apply_ok(&client, apply("settings", "eu", json!({"region": "eu-central-1"}))).await?;
    let updated = get(&client, "settings", "eu").await?;
    assert_eq!((updated.phase(), updated.generation), (Phase::Ready, 2));
    let second = next_change(&mut watch).await?;
    assert_eq!((second.generation, second.phase()), (2, Phase::Ready));

    // A composed child that depends on it: released once the site composes.
    apply_manifest(&client, cell_manifest()).await?;
    apply_manifest(&client, site_manifest()).await?;
    let _cells = spawn_worker(
        Worker::builder()
            .endpoint(server.address())
            .provider(Cells::default())
            .provider(Sites)
            .heartbeat_interval(Duration::from_millis(500)),
    );
    apply_ok(&client, apply("site", "shop", json!({"settings": "eu"}))).await?;
    wait_phase(&client, "cell", "shop-app", Phase::Ready).await?;
    assert_eq!(phase(&client, "settings", "eu").await?, Phase::Ready);

    // Deleted without a worker or a teardown.
    apply_ok(&client, apply("settings", "spare", json!({"region": "us-east-1"}))).await?;
    client
        .resources()
        .delete_resource(DeleteResourceRequest {
            kind: "settings".into(),
            name: "spare".into(),
            ..Default::default()
        })
        .await?;
    eventually(Duration::from_secs(15), || async {
        let gone = client
            .resources()
            .get_resource(GetResourceRequest {
                kind: "settings".into(),
                name: "spare".into(),
            })
            .await
            .is_err_and(|s| s.code() == Code::NotFound);
        Ok(gone.then_some(()))
    })
    .await?;
    server.shutdown().await
}
