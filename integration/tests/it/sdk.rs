//! The Rust SDK's names that match the Go, Python and TypeScript SDKs,
//! against a real server: error reasons read as the proto enum
//! `converge.v1.ErrorReason`, and a worker built from a `Reactions` table.

use converge_integration::TestServer;
use converge_integration::api::{apply, apply_manifest, apply_ok, get, spawn_worker, wait_phase};
use converge_proto::v1::{GetOperationRequest, GetResourceRequest, KindPolicy, Phase};
use converge_sdk::error::{ERROR_DOMAIN, reason_name};
use converge_sdk::worker::{Outcome, Reactions, UNKNOWN_REACTION_REASON, Worker};
use converge_sdk::{ErrorReason, StatusExt};
use serde_json::json;
use tonic::Code;

#[tokio::test]
async fn the_sdk_reads_reasons_as_the_proto_enum() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;

    let missing = client
        .resources()
        .get_resource(GetResourceRequest {
            kind: "x".into(),
            name: "y".into(),
        })
        .await
        .expect_err("no such resource");
    assert_eq!(missing.code(), Code::NotFound);
    assert_eq!(missing.error_reason(), ErrorReason::ResourceNotFound, "{missing:?}");
    assert!(missing.has_reason(ErrorReason::ResourceNotFound));
    let info = missing.error_info().expect("ErrorInfo");
    assert_eq!(info.domain, ERROR_DOMAIN);
    assert_eq!(info.reason, reason_name(ErrorReason::ResourceNotFound));

    let malformed = client
        .operations()
        .get_operation(GetOperationRequest { uid: "y".into() })
        .await
        .expect_err("not a UUID");
    assert_eq!(malformed.code(), Code::InvalidArgument);
    assert!(malformed.has_reason(ErrorReason::InvalidField), "{malformed:?}");
    assert!(!malformed.has_reason(ErrorReason::ResourceNotFound));
    server.shutdown().await
}

/// A kind with one `work` reaction that gives up after two transient
/// failures.
fn kind(name: &str) -> converge_proto::v1::KindManifest {
    converge_proto::v1::KindManifest {
        policy: Some(KindPolicy {
            max_transient_attempts: 2,
            ..Default::default()
        }),
        ..converge_integration::kinds::work_manifest(name)
    }
}

/// A `Reactions` table serves its reaction; a reaction it has no handler for
/// fails transiently with reason UnknownReaction until the kind's attempts
/// are used up, as in the other SDKs.
#[tokio::test]
async fn a_reactions_table_serves_its_reactions_and_retries_unknown_ones() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, kind("rx-table")).await?;
    apply_manifest(&client, kind("rx-unknown")).await?;
    let table = Reactions::new(converge_sdk::worker::KindVersion::new("rx-table", 1))
        .reaction("work", |request| async move {
            Ok(Outcome::new().with_status(json!({"seen": request.generation})))
        });
    let without_work = Reactions::new(converge_sdk::worker::KindVersion::new("rx-unknown", 1))
        .reaction("other", |_| async { Ok(Outcome::new()) });
    let _worker = spawn_worker(
        Worker::builder()
            .endpoint(server.address())
            .reconnect_backoff(
                std::time::Duration::from_millis(10),
                std::time::Duration::from_millis(100),
            )
            .provider(table)
            .provider(without_work),
    );

    apply_ok(&client, apply("rx-table", "a", json!({}))).await?;
    let served = wait_phase(&client, "rx-table", "a", Phase::Ready).await?;
    assert_eq!(
        served.status.as_ref().map(converge_integration::api::json),
        Some(json!({"seen": 1})),
        "{served:?}"
    );

    apply_ok(&client, apply("rx-unknown", "b", json!({}))).await?;
    let failed = wait_phase(&client, "rx-unknown", "b", Phase::Failed).await?;
    assert_eq!(
        failed.failure_attempts, 2,
        "retried once (transient), then failed: {failed:?}"
    );
    let synced = get(&client, "rx-unknown", "b")
        .await?
        .conditions
        .into_iter()
        .find(|c| c.r#type == "Synced");
    assert_eq!(synced.map(|c| c.reason).as_deref(), Some(UNKNOWN_REACTION_REASON));
    server.shutdown().await
}
