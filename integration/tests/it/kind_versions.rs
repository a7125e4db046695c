//! Two versions of one kind served side by side by different worker
//! processes: tasks go strictly to a worker of the resource's version, a
//! resource moved to v2 is reconciled only by v2 workers, a retired v1 takes
//! no new resources while its existing ones keep being served, schema
//! evolution reports v2's violations, and v1's manifest cannot be deleted
//! while resources remain on it (the refusal names them).

use std::path::Path;
use std::time::Duration;

use converge_integration::api::{apply_manifest, apply_ok, expect_error, fields, object};
use converge_integration::kinds::work_manifest;
use converge_integration::processes::stdworker;
use converge_integration::{TestServer, eventually};
use converge_proto::v1::{
    ApplyResourceRequest, DeleteKindManifestRequest, DeleteResourceRequest, GetResourceRequest, KindConfig,
    KindManifest, Phase, Resource, UpdateKindConfigRequest,
};
use converge_sdk::Client;
use serde_json::{Value, json};
use tokio::process::Child;
use tonic::Code;

/// Records `<name> <kind_version> <generation> <worker>` per task.
const PROGRAM: &str = r#"#!/usr/bin/env python3
import json, os, sys
doc = json.load(sys.stdin)
with open(os.path.join(os.environ["RECORD_DIR"], "runs"), "a") as f:
    f.write("%s %s %s %s\n" % (doc["resource"]["name"], doc["kind_version"], doc["generation"], os.environ["WORKER"]))
print(json.dumps({"status": {"seen": doc["generation"]}}))
"#;

fn manifest(version: i32, schema: Value) -> KindManifest {
    KindManifest {
        kind_version: version,
        spec_schema: Some(object(schema)),
        ..work_manifest("svc")
    }
}

fn worker(address: &str, dir: &Path, version: i32) -> anyhow::Result<Child> {
    let tag = format!("w{version}");
    stdworker(
        address,
        dir,
        PROGRAM,
        &[&format!("svc:{version}")],
        &[("WORKER", &tag)],
        &[],
    )
}

/// (name, kind_version, generation, worker) of every task run.
fn runs(dir: &Path) -> Vec<(String, i32, i64, String)> {
    std::fs::read_to_string(dir.join("runs"))
        .map(|s| {
            s.lines()
                .filter_map(|l| {
                    let p: Vec<&str> = l.split(' ').collect();
                    Some((
                        p.first()?.to_string(),
                        p.get(1)?.parse().ok()?,
                        p.get(2)?.parse().ok()?,
                        p.get(3)?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn at(version: i32, name: &str, spec: Value) -> ApplyResourceRequest {
    ApplyResourceRequest {
        kind: "svc".into(),
        kind_version: version,
        name: name.into(),
        spec: Some(object(spec)),
        ..Default::default()
    }
}

async fn ready_at(client: &Client, name: &str, generation: i64) -> anyhow::Result<Resource> {
    eventually(Duration::from_secs(30), || async {
        let resource = client
            .resources()
            .get_resource(GetResourceRequest {
                kind: "svc".into(),
                name: name.into(),
            })
            .await?
            .into_inner()
            .resource;
        Ok(resource.filter(|r| r.phase == Phase::Ready as i32 && r.generation == generation))
    })
    .await
}

async fn retire(client: &Client, version: i32) -> anyhow::Result<()> {
    client
        .kinds()
        .update_kind_config(UpdateKindConfigRequest {
            config: Some(KindConfig {
                kind: "svc".into(),
                kind_version: version,
                retired: true,
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["retired".into()],
            }),
            ..Default::default()
        })
        .await?;
    Ok(())
}

#[tokio::test]
async fn two_versions_are_served_side_by_side_by_their_own_workers() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    let v1 = json!({"type": "object", "additionalProperties": false,
                    "properties": {"port": {"type": "integer"}}, "required": ["port"]});
    let v2 = json!({"type": "object", "additionalProperties": false,
                    "properties": {"ports": {"type": "array", "items": {"type": "integer"}, "minItems": 1}},
                    "required": ["ports"]});
    apply_manifest(&client, manifest(1, v1)).await?;
    apply_manifest(&client, manifest(2, v2)).await?;
    let scratch = tempfile::tempdir()?;
    let dir = scratch.path();
    let mut w1 = worker(&server.address(), dir, 1)?;
    let mut w2 = worker(&server.address(), dir, 2)?;

    for name in ["a", "d"] {
        apply_ok(&client, at(1, name, json!({"port": 80}))).await?;
    }
    apply_ok(&client, at(2, "b", json!({"ports": [80, 443]}))).await?;
    for name in ["a", "b", "d"] {
        ready_at(&client, name, 1).await?;
    }

    // Schema evolution: moving a to v2 with its v1 spec reports v2's violations.
    let refused = expect_error(
        client.resources().apply_resource(at(2, "a", json!({"port": 80}))).await,
        Code::InvalidArgument,
        "SPEC_SCHEMA_VIOLATION",
    );
    let mut refused_fields = fields(&refused);
    refused_fields.sort_unstable();
    assert!(refused_fields.iter().all(|f| f.starts_with("/spec")), "{refused:?}");
    assert!(!refused_fields.is_empty());
    // The upgrade path: apply at version 2 with a converted spec.
    apply_ok(&client, at(2, "a", json!({"ports": [80]}))).await?;
    ready_at(&client, "a", 2).await?;

    // Retire v1: no new resources at it, the existing ones keep being served.
    retire(&client, 1).await?;
    expect_error(
        client.resources().apply_resource(at(1, "c", json!({"port": 1}))).await,
        Code::FailedPrecondition,
        "KIND_VERSION_RETIRED",
    );
    apply_ok(&client, at(1, "d", json!({"port": 8080}))).await?;
    ready_at(&client, "d", 2).await?;

    // Strict routing: every task ran on a worker of its resource's version.
    let ran = runs(dir);
    for (name, version, generation, worker) in &ran {
        assert_eq!(
            *worker,
            format!("w{version}"),
            "{name} gen {generation} ran on {worker}"
        );
    }
    let a_runs: Vec<_> = ran.iter().filter(|r| r.0 == "a").collect();
    assert!(a_runs.iter().any(|r| r.1 == 1 && r.2 == 1 && r.3 == "w1"), "{a_runs:?}");
    assert!(a_runs.iter().any(|r| r.1 == 2 && r.2 == 2 && r.3 == "w2"), "{a_runs:?}");
    assert!(
        a_runs.iter().all(|r| r.2 < 2 || r.3 == "w2"),
        "after the move only v2 works it: {a_runs:?}"
    );
    assert!(
        ran.iter().any(|r| r.0 == "d" && r.2 == 2 && r.3 == "w1"),
        "retired v1 still serves d"
    );

    // v1's manifest cannot go while d is on it; the refusal names it.
    let in_use = expect_error(
        client
            .kinds()
            .delete_kind_manifest(DeleteKindManifestRequest {
                kind: "svc".into(),
                kind_version: 1,
                ..Default::default()
            })
            .await,
        Code::FailedPrecondition,
        "KIND_IN_USE",
    );
    assert_eq!(fields(&in_use), ["svc/d"], "{in_use:?}");
    client
        .resources()
        .delete_resource(DeleteResourceRequest {
            kind: "svc".into(),
            name: "d".into(),
            ..Default::default()
        })
        .await?;
    eventually(Duration::from_secs(30), || async {
        let deleted = client
            .kinds()
            .delete_kind_manifest(DeleteKindManifestRequest {
                kind: "svc".into(),
                kind_version: 1,
                ..Default::default()
            })
            .await
            .is_ok();
        Ok(deleted.then_some(()))
    })
    .await?;
    w1.kill().await?;
    w2.kill().await?;
    server.shutdown().await
}
