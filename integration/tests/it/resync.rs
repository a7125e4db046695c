//! Periodic resync end to end with a real worker process (the stdworker
//! running a small program): settled resources are re-observed about once
//! per interval without a generation bump, drift reported by a resync
//! degrades and a later healthy one restores, live edits turn it on and off,
//! and a recomposing resync brings back a child deleted out of band.

use std::path::Path;

use anyhow::Context as _;
use std::time::Duration;

use converge_integration::api::{apply, apply_manifest, apply_ok, find, reaction, wait_phase};
use converge_integration::processes::stdworker;
use converge_integration::{TestServer, eventually};
use converge_proto::v1::{
    DeleteResourceRequest, Emit, KindConfig, KindManifest, KindPolicy, Phase, Reaction, Trigger,
    UpdateKindConfigRequest,
};
use converge_sdk::Client;
use serde_json::json;
use tokio::process::Child;

/// Records `<name> <stage> <trigger> <generation>` per task in
/// `$RECORD_DIR/runs`; composes one child `<name>-child`; works healthy
/// unless `$RECORD_DIR/unhealthy-<name>` exists; rolls up as healthy when
/// every descendant is, naming those that are not.
const PROGRAM: &str = r#"#!/usr/bin/env python3
import json, os, sys
doc = json.load(sys.stdin)
d = os.environ["RECORD_DIR"]
res = doc["resource"]
with open(os.path.join(d, "runs"), "a") as f:
    f.write("%s %s %s %s\n" % (res["name"], doc["stage"], doc["trigger"], doc["generation"]))
if doc["stage"] == "compose":
    print(json.dumps({"children": [{"kind": "leaf", "kind_version": 1, "name": res["name"] + "-child", "spec": {}}],
                      "status": {"composed": doc["generation"]}}))
elif doc["stage"] == "rollup":
    down = [r["kind"] + "/" + r["name"] for r in doc["input"]["descendants"] if not r["healthy"]]
    print(json.dumps({"status": {"notReady": down}, "healthy": not down,
                      "conditions": [{"type": "Ready", "status": "False" if down else "True",
                                      "reason": "ChildrenNotReady" if down else "ChildrenReady",
                                      "message": ", ".join(down)}]}))
elif doc["stage"] == "work":
    healthy = not os.path.exists(os.path.join(d, "unhealthy-" + res["name"]))
    print(json.dumps({"status": {"seen": doc["generation"]}, "healthy": healthy,
                      "conditions": [{"type": "Ready", "status": "True" if healthy else "False",
                                      "reason": "Probed" if healthy else "Drifted"}]}))
"#;

fn manifest(kind: &str, reactions: Vec<Reaction>, policy: KindPolicy) -> KindManifest {
    KindManifest {
        kind: kind.into(),
        kind_version: 1,
        reactions,
        policy: Some(policy),
        ..Default::default()
    }
}

fn worker(address: &str, dir: &Path, kinds: &[&str]) -> anyhow::Result<Child> {
    let kinds: Vec<String> = kinds.iter().map(|k| format!("{k}:1")).collect();
    let kinds: Vec<&str> = kinds.iter().map(String::as_str).collect();
    stdworker(address, dir, PROGRAM, &kinds, &[], &[])
}

/// The runs of `name` with `trigger` recorded so far.
fn runs(dir: &Path, name: &str, trigger: &str) -> usize {
    std::fs::read_to_string(dir.join("runs"))
        .map(|s| {
            s.lines()
                .filter(|l| {
                    let parts: Vec<&str> = l.split(' ').collect();
                    parts.first() == Some(&name) && parts.get(2) == Some(&trigger)
                })
                .count()
        })
        .unwrap_or(0)
}

async fn set_resync(client: &Client, kind: &str, secs: i32) -> anyhow::Result<()> {
    client
        .kinds()
        .update_kind_config(UpdateKindConfigRequest {
            config: Some(KindConfig {
                kind: kind.into(),
                kind_version: 1,
                resync_interval_secs: secs,
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["resync_interval_secs".into()],
            }),
            ..Default::default()
        })
        .await?;
    Ok(())
}

#[tokio::test]
async fn resync_reobserves_settled_resources_and_reports_drift() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    let work = reaction("work", Trigger::SpecChange, &[Emit::Status, Emit::Conditions]);
    apply_manifest(&client, manifest("probe", vec![work], KindPolicy::default())).await?;
    let scratch = tempfile::tempdir()?;
    let dir = scratch.path();
    let mut process = worker(&server.address(), dir, &["probe"])?;
    let names: Vec<String> = (0..10).map(|i| format!("p{i}")).collect();
    for name in &names {
        apply_ok(&client, apply("probe", name, json!({}))).await?;
    }
    for name in &names {
        wait_phase(&client, "probe", name, Phase::Ready).await?;
    }
    // Off: nothing is re-observed.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(names.iter().all(|n| runs(dir, n, "resync") == 0));

    // Turned on live, for the first kind: every resource is re-observed,
    // at the same generation.
    set_resync(&client, "probe", 5).await?;
    eventually(Duration::from_secs(30), || async {
        Ok(names.iter().all(|n| runs(dir, n, "resync") >= 1).then_some(()))
    })
    .await?;
    for name in &names {
        let resource = find(&client, "probe", name)
            .await?
            .ok_or_else(|| anyhow::anyhow!("gone"))?;
        assert_eq!(resource.generation, 1, "{name}");
    }

    // Drift: a resync that reports unhealthy degrades without a new
    // generation; a later healthy one restores Ready.
    std::fs::write(dir.join("unhealthy-p3"), "")?;
    let degraded = wait_phase(&client, "probe", "p3", Phase::Degraded).await?;
    assert_eq!(degraded.generation, 1);
    std::fs::remove_file(dir.join("unhealthy-p3"))?;
    wait_phase(&client, "probe", "p3", Phase::Ready).await?;

    // About once per interval, not in a loop.
    let per_resource = runs(dir, "p0", "resync");
    assert!(per_resource <= 8, "p0 resynced {per_resource} times in about 30 s");

    // Turned off live: no more resyncs (one already queued may still land).
    set_resync(&client, "probe", 0).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before: Vec<usize> = names.iter().map(|n| runs(dir, n, "resync")).collect();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after: Vec<usize> = names.iter().map(|n| runs(dir, n, "resync")).collect();
    assert_eq!(before, after);
    process.kill().await?;
    server.shutdown().await
}

#[tokio::test]
async fn a_recomposing_resync_brings_back_a_child_deleted_out_of_band() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    let leaf = reaction("work", Trigger::SpecChange, &[Emit::Status, Emit::Conditions]);
    apply_manifest(&client, manifest("leaf", vec![leaf], KindPolicy::default())).await?;
    let compose = reaction("compose", Trigger::SpecChange, &[Emit::Children, Emit::Status]);
    let policy = KindPolicy {
        resync_interval_secs: 5,
        resync_recomposes: true,
        ..Default::default()
    };
    apply_manifest(&client, manifest("stack", vec![compose], policy)).await?;
    let scratch = tempfile::tempdir()?;
    let dir = scratch.path();
    let mut process = worker(&server.address(), dir, &["stack", "leaf"])?;
    apply_ok(&client, apply("stack", "s1", json!({}))).await?;
    let first = wait_phase(&client, "leaf", "s1-child", Phase::Ready).await?;

    client
        .resources()
        .delete_resource(DeleteResourceRequest {
            kind: "leaf".into(),
            name: "s1-child".into(),
            ..Default::default()
        })
        .await?;
    let back = eventually(Duration::from_secs(40), || async {
        Ok(find(&client, "leaf", "s1-child")
            .await?
            .filter(|r| r.uid != first.uid && r.phase == Phase::Ready as i32))
    })
    .await?;
    assert_ne!(back.uid, first.uid, "a new incarnation");
    assert!(runs(dir, "s1", "resync") >= 1, "the composer ran for a resync");
    let root = find(&client, "stack", "s1")
        .await?
        .ok_or_else(|| anyhow::anyhow!("root gone"))?;
    assert_eq!(root.generation, 1, "no generation bump");
    process.kill().await?;
    server.shutdown().await
}

#[tokio::test]
async fn drift_found_by_a_childs_resync_demotes_its_root_and_health_restores_both() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    let leaf = reaction("work", Trigger::SpecChange, &[Emit::Status, Emit::Conditions]);
    let policy = KindPolicy {
        resync_interval_secs: 5,
        ..Default::default()
    };
    apply_manifest(&client, manifest("leaf", vec![leaf], policy)).await?;
    let compose = reaction("compose", Trigger::SpecChange, &[Emit::Children, Emit::Status]);
    let rollup = reaction("rollup", Trigger::ChildrenSettled, &[Emit::Status, Emit::Conditions]);
    apply_manifest(&client, manifest("tier", vec![compose, rollup], KindPolicy::default())).await?;
    let scratch = tempfile::tempdir()?;
    let dir = scratch.path();
    let mut process = worker(&server.address(), dir, &["tier", "leaf"])?;
    apply_ok(&client, apply("tier", "s2", json!({}))).await?;
    wait_phase(&client, "leaf", "s2-child", Phase::Ready)
        .await
        .context("child ready")?;
    wait_phase(&client, "tier", "s2", Phase::Ready)
        .await
        .context("root ready")?;

    // The world changes behind the child's back: its next resync reports
    // it, within about one interval, and the health change runs the root's
    // rollup again (the cascade), which names the child.
    std::fs::write(dir.join("unhealthy-s2-child"), "")?;
    let child = wait_phase(&client, "leaf", "s2-child", Phase::Degraded)
        .await
        .context("child degraded")?;
    let root = wait_phase(&client, "tier", "s2", Phase::Degraded)
        .await
        .context("root degraded")?;
    assert_eq!((child.generation, root.generation), (1, 1), "no generation bump");
    let ready = root
        .conditions
        .iter()
        .find(|c| c.r#type == "Ready")
        .ok_or_else(|| anyhow::anyhow!("no Ready condition on the root"))?;
    assert!(
        ready.message.contains("s2-child"),
        "the root names the child: {ready:?}"
    );

    std::fs::remove_file(dir.join("unhealthy-s2-child"))?;
    wait_phase(&client, "leaf", "s2-child", Phase::Ready).await?;
    let root = wait_phase(&client, "tier", "s2", Phase::Ready).await?;
    assert_eq!(root.generation, 1);
    process.kill().await?;
    server.shutdown().await
}
