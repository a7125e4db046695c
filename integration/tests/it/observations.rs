//! Worker-reported observations end to end with a real worker process (the
//! stdworker running a small program): events aggregated into runs next to
//! the server's own, in lists and live event watches; refused events; events
//! that come with a failure; and a liveness condition that reads Unknown
//! once its reports stop.

use std::path::Path;
use std::time::Duration;

use converge_integration::api::{self, apply, apply_manifest, apply_ok, find, json, wait_phase};
use converge_integration::processes::stdworker;
use converge_integration::{TestServer, eventually};
use converge_proto::v1::{
    Condition, ConditionStatus, Emit, EventType, KindManifest, KindPolicy, ListResourceEventsRequest, Phase, Reaction,
    ResourceEvent, Trigger, WatchResourceEventsRequest,
};
use converge_sdk::Client;
use serde_json::json;
use tokio::process::Child;
use tokio_stream::StreamExt;

/// Per spec: `runs` reconciles of one generation, each reporting a `Probed`
/// event in the `probe` timeline and the last one a `ProbeSlow` warning too
/// (requeueing in between); `bad`: an event with an unusable reason; `fail`:
/// a terminal failure with an `Attempted` event; `live`: a `Reachable`
/// liveness condition (2 s), renewed every 0.5 s until
/// `$RECORD_DIR/stop-<name>` exists.
const PROGRAM: &str = r#"#!/usr/bin/env python3
import json, os, sys
doc = json.load(sys.stdin)
d = os.environ["RECORD_DIR"]
res = doc["resource"]
spec = res["spec"]
status = res["status"] or {}
gen = doc["generation"]
if spec.get("bad"):
    print(json.dumps({"events": [{"reason": "not camel case", "message": "x"}]}))
elif spec.get("fail"):
    print(json.dumps({"events": [{"category": "probe", "reason": "Attempted", "message": "tried once",
                                   "detail": {"endpoint": "https://example.invalid"}}],
                      "error": {"message": "the endpoint refused", "terminal": True, "reason": "Refused"}}))
elif spec.get("live"):
    out = {"status": {"gen": gen},
           "conditions": [{"type": "Reachable", "status": "True", "reason": "Probed", "liveness_secs": 2}]}
    if not os.path.exists(os.path.join(d, "stop-" + res["name"])):
        out["requeue_after_secs"] = 0.5
    print(json.dumps(out))
else:
    n = (status.get("runs", 0) + 1) if status.get("gen") == gen else 1
    events = [{"category": "probe", "reason": "Probed", "message": "probe %d" % n}]
    out = {"status": {"gen": gen, "runs": n}}
    if n < spec.get("runs", 1):
        out["requeue_after_secs"] = 0.2
    else:
        events.append({"category": "probe", "type": "Warning", "reason": "ProbeSlow", "message": "slow"})
    out["events"] = events
    print(json.dumps(out))
"#;

fn manifest() -> KindManifest {
    KindManifest {
        kind: "probe".into(),
        kind_version: 1,
        reactions: vec![Reaction {
            name: "work".into(),
            trigger: Trigger::SpecChange.into(),
            emits: vec![Emit::Status.into(), Emit::Conditions.into()],
            ..Default::default()
        }],
        policy: Some(KindPolicy::default()),
        ..Default::default()
    }
}

fn worker(address: &str, dir: &Path) -> anyhow::Result<Child> {
    stdworker(address, dir, PROGRAM, &["probe:1"], &[], &[])
}

/// Every event run of `name`, newest first.
async fn runs(client: &Client, name: &str) -> anyhow::Result<Vec<ResourceEvent>> {
    Ok(client
        .resources()
        .list_resource_events(ListResourceEventsRequest {
            kind: "probe".into(),
            name: name.into(),
            page_size: 100,
            ..Default::default()
        })
        .await?
        .into_inner()
        .events)
}

fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.r#type == type_)
}

#[tokio::test]
async fn worker_events_are_aggregated_into_runs_listed_and_watched() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, manifest()).await?;
    let scratch = tempfile::tempdir()?;
    let mut process = worker(&server.address(), scratch.path())?;

    // The first task waits for the worker's 0.2 s requeues, so a watch
    // opened right after the apply sees the run extended live.
    apply_ok(&client, apply("probe", "p", json!({"runs": 3}))).await?;
    let mut watch = client
        .resources()
        .watch_resource_events(WatchResourceEventsRequest {
            kind: "probe".into(),
            name: "p".into(),
            category: Some("probe".into()),
            ..Default::default()
        })
        .await?
        .into_inner();
    let watched = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(message) = watch.next().await {
            let event = message?.event.unwrap_or_default();
            if event.reason == "Probed" && event.count == 3 {
                return anyhow::Ok(event);
            }
        }
        anyhow::bail!("the event watch ended")
    })
    .await??;
    assert_eq!(watched.message, "probe 3");
    let ready = wait_phase(&client, "probe", "p", Phase::Ready).await?;
    assert_eq!(ready.generation, 1);

    // Listed next to the server's own events: one run per (type, reason)
    // streak of the worker's timeline, attributed to the worker.
    let all = eventually(Duration::from_secs(10), || async {
        let all = runs(&client, "p").await?;
        Ok(all.iter().any(|e| e.reason == "ProbeSlow").then_some(all))
    })
    .await?;
    let probe: Vec<&ResourceEvent> = all.iter().filter(|e| e.category == "probe").collect();
    let shape: Vec<(&str, i64, i32)> = probe.iter().map(|e| (e.reason.as_str(), e.count, e.r#type)).collect();
    assert_eq!(
        shape,
        [
            ("ProbeSlow", 1, EventType::Warning as i32),
            ("Probed", 3, EventType::Normal as i32)
        ]
    );
    // A worker without a SPIFFE ID is recorded by its peer address.
    assert!(
        probe
            .iter()
            .all(|e| api::is_plaintext_worker_actor(&e.actor) && e.generation == 1),
        "{probe:?}"
    );
    assert!(
        all.iter().any(|e| e.category == "lifecycle"),
        "the server's lifecycle events are listed too: {all:?}"
    );

    // An unusable event fails the task and records nothing of its outcome.
    apply_ok(&client, apply("probe", "bad", json!({"bad": true}))).await?;
    let failed = wait_phase(&client, "probe", "bad", Phase::Failed).await?;
    let synced = condition(&failed.conditions, "Synced").ok_or_else(|| anyhow::anyhow!("no Synced"))?;
    assert_eq!(synced.reason, "EventInvalid");
    assert!(synced.message.contains("/events/0/reason"), "{}", synced.message);
    assert!(runs(&client, "bad").await?.iter().all(|e| e.category != "worker"));

    // Events that come with a failure are recorded with it.
    apply_ok(&client, apply("probe", "fail", json!({"fail": true}))).await?;
    wait_phase(&client, "probe", "fail", Phase::Failed).await?;
    let fail = runs(&client, "fail").await?;
    let attempted = fail
        .iter()
        .find(|e| e.reason == "Attempted")
        .ok_or_else(|| anyhow::anyhow!("no Attempted event in {fail:?}"))?;
    assert_eq!(attempted.category, "probe");
    assert_eq!(
        attempted.detail.as_ref().map(json),
        Some(json!({"endpoint": "https://example.invalid"}))
    );
    assert!(fail.iter().any(|e| e.category == "reconcile" && e.reason == "Refused"));

    process.kill().await?;
    server.shutdown().await
}

#[tokio::test]
async fn a_liveness_condition_reads_unknown_once_its_reports_stop() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, manifest()).await?;
    let scratch = tempfile::tempdir()?;
    let mut process = worker(&server.address(), scratch.path())?;

    apply_ok(&client, apply("probe", "live", json!({"live": true}))).await?;
    // Renewed every 0.5 s, the 2 s report holds.
    let live = eventually(Duration::from_secs(30), || async {
        let resource = find(&client, "probe", "live").await?;
        Ok(resource.filter(|r| {
            condition(&r.conditions, "Reachable").is_some_and(|c| c.status == ConditionStatus::True as i32)
        }))
    })
    .await?;
    let reachable = condition(&live.conditions, "Reachable").ok_or_else(|| anyhow::anyhow!("no Reachable"))?;
    assert!(reachable.expire_time.is_some());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = find(&client, "probe", "live")
        .await?
        .ok_or_else(|| anyhow::anyhow!("gone"))?;
    let reachable = condition(&held.conditions, "Reachable").ok_or_else(|| anyhow::anyhow!("no Reachable"))?;
    assert_eq!(reachable.status, ConditionStatus::True as i32, "renewed reports hold");

    // The reports stop: within about the window, reads say Unknown and why,
    // and the resource itself settles as reported (its phase is not
    // derived from the lapse).
    std::fs::write(scratch.path().join("stop-live"), "")?;
    let lapsed = eventually(Duration::from_secs(10), || async {
        let resource = find(&client, "probe", "live").await?;
        Ok(resource.filter(|r| {
            condition(&r.conditions, "Reachable").is_some_and(|c| c.status == ConditionStatus::Unknown as i32)
        }))
    })
    .await?;
    let reachable = condition(&lapsed.conditions, "Reachable").ok_or_else(|| anyhow::anyhow!("no Reachable"))?;
    assert_eq!(reachable.reason, "ReportExpired");
    assert!(reachable.message.contains("True (Probed)"), "{}", reachable.message);
    assert_eq!(lapsed.phase, Phase::Ready as i32);

    // A new report (a new generation here) brings it back.
    std::fs::remove_file(scratch.path().join("stop-live"))?;
    apply_ok(&client, apply("probe", "live", json!({"live": true, "again": 1}))).await?;
    eventually(Duration::from_secs(30), || async {
        let resource = find(&client, "probe", "live").await?;
        Ok(resource.filter(|r| {
            r.generation == 2
                && condition(&r.conditions, "Reachable").is_some_and(|c| c.status == ConditionStatus::True as i32)
        }))
    })
    .await?;
    process.kill().await?;
    server.shutdown().await
}
