//! Spec history and rollback over real gRPC, with an in-process worker on
//! the real worker stream.

use std::time::Duration;

use converge_integration::api::{apply, apply_manifest, apply_ok, count, expect_error, json, spawn_worker, work_kind};
use converge_integration::{TestServer, eventually};
use converge_proto::v1::{
    DeleteResourceRequest, GetResourceRequest, KindConfig, ListSpecRevisionsRequest, Phase, RollbackResourceRequest,
    SpecRevision, SpecRevisionSource, UpdateKindConfigRequest,
};
use converge_sdk::Client;
use converge_sdk::worker::{HandlerError, KindVersion, Outcome, Provider, ReactionRequest, Worker, async_trait};
use serde_json::{Value, json};
use tonic::Code;

/// Reports the spec it worked as its status.
struct Echo;

#[async_trait]
impl Provider for Echo {
    fn kind(&self) -> KindVersion {
        KindVersion::new("doc", 1)
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        Ok(Outcome::new().with_status(json!({"worked": request.resource.spec})))
    }
}

async fn history(client: &Client, name: &str) -> anyhow::Result<Vec<SpecRevision>> {
    let mut all = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .resources()
            .list_spec_revisions(ListSpecRevisionsRequest {
                kind: "doc".into(),
                name: name.into(),
                page_size: 2,
                page_token: token.clone(),
            })
            .await?
            .into_inner();
        all.extend(page.revisions);
        if page.next_page_token.is_empty() {
            return Ok(all);
        }
        token = page.next_page_token;
    }
}

fn generations(revisions: &[SpecRevision]) -> Vec<i64> {
    revisions.iter().map(|r| r.generation).collect()
}

fn spec(revision: &SpecRevision) -> Value {
    revision.spec.as_ref().map(json).unwrap_or(Value::Null)
}

fn rollback(name: &str, generation: i64) -> RollbackResourceRequest {
    RollbackResourceRequest {
        kind: "doc".into(),
        name: name.into(),
        target_generation: generation,
        ..Default::default()
    }
}

#[tokio::test]
async fn five_changes_then_a_rollback_to_the_second_is_generation_six() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, work_kind("doc", 1, None)).await?;
    let _worker = spawn_worker(Worker::builder().endpoint(server.address()).provider(Echo));
    for v in 1..=5 {
        apply_ok(&client, apply("doc", "d", json!({"v": v}))).await?;
    }
    // A labels-only change is no new generation and no revision.
    let mut relabel = apply("doc", "d", json!({"v": 5}));
    relabel.labels = [("team".to_owned(), "a".to_owned())].into();
    apply_ok(&client, relabel).await?;
    assert_eq!(generations(&history(&client, "d").await?), [5, 4, 3, 2, 1]);

    let rolled = client
        .resources()
        .rollback_resource(rollback("d", 2))
        .await?
        .into_inner()
        .resource
        .ok_or_else(|| anyhow::anyhow!("no resource"))?;
    assert_eq!(rolled.generation, 6);
    assert_eq!(rolled.spec.as_ref().map(json), Some(json!({"v": 2})));
    assert_eq!(rolled.labels.get("team").map(String::as_str), Some("a"), "labels stay");
    let revisions = history(&client, "d").await?;
    assert_eq!(generations(&revisions), [6, 5, 4, 3, 2, 1]);
    assert_eq!(revisions[0].source, SpecRevisionSource::Rollback as i32);
    assert_eq!(revisions[0].restored_generation, Some(2));
    assert_eq!(spec(&revisions[0]), json!({"v": 2}));
    assert_eq!(revisions[1].source, SpecRevisionSource::Apply as i32);

    // The resource reconciles to the restored spec.
    eventually(Duration::from_secs(20), || async {
        let now = client
            .resources()
            .get_resource(GetResourceRequest {
                kind: "doc".into(),
                name: "d".into(),
            })
            .await?
            .into_inner()
            .resource;
        Ok(now.filter(|r| {
            r.phase == Phase::Ready as i32
                && r.observed_generation == 6
                && r.status.as_ref().map(json) == Some(json!({"worked": {"v": 2}}))
        }))
    })
    .await?;

    // Rolling back to the spec it has now changes nothing.
    let same = client
        .resources()
        .rollback_resource(rollback("d", 2))
        .await?
        .into_inner()
        .resource
        .ok_or_else(|| anyhow::anyhow!("no resource"))?;
    assert_eq!(same.generation, 6);
    server.shutdown().await
}

#[tokio::test]
async fn history_is_trimmed_to_the_kind_limit_and_goes_with_the_resource() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, work_kind("doc", 1, None)).await?;
    client
        .kinds()
        .update_kind_config(UpdateKindConfigRequest {
            config: Some(KindConfig {
                kind: "doc".into(),
                kind_version: 1,
                revision_limit: 3,
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["revision_limit".into()],
            }),
            ..Default::default()
        })
        .await?;
    for v in 1..=6 {
        apply_ok(&client, apply("doc", "t", json!({"v": v}))).await?;
    }
    assert_eq!(generations(&history(&client, "t").await?), [6, 5, 4]);
    let gone = client.resources().rollback_resource(rollback("t", 2)).await;
    expect_error(gone, Code::NotFound, "REVISION_NOT_FOUND");
    let bad = client.resources().rollback_resource(rollback("t", 0)).await;
    expect_error(bad, Code::InvalidArgument, "INVALID_FIELD");
    // validate_only writes nothing.
    let dry = client
        .resources()
        .rollback_resource(RollbackResourceRequest {
            validate_only: true,
            ..rollback("t", 4)
        })
        .await?
        .into_inner()
        .resource
        .ok_or_else(|| anyhow::anyhow!("no resource"))?;
    assert_eq!(dry.generation, 7);
    assert_eq!(generations(&history(&client, "t").await?), [6, 5, 4]);

    client
        .resources()
        .delete_resource(DeleteResourceRequest {
            kind: "doc".into(),
            name: "t".into(),
            ..Default::default()
        })
        .await?;
    let left = count(server.database().pool(), "SELECT count(*) FROM spec_revisions").await?;
    assert_eq!(left, 0, "history goes with the resource");
    server.shutdown().await
}
