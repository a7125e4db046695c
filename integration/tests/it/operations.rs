//! Operations end to end over real gRPC with real worker processes (the
//! stdworker running a small program): a verb runs exactly once per
//! invocation, waits on a quarantined resource, is retried after its worker
//! is killed, survives a killed server, is cut by its deadline, and is
//! refused with precise errors.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use converge_integration::api::{self, apply, apply_manifest, apply_ok, expect_error, fields, json, object};
use converge_integration::processes::{ProcessSite, crash_postgres_state, signal, stdworker, stop_cleanly};
use converge_integration::{TestDatabase, TestServer, eventually};
use converge_proto::v1::{
    DeleteResourceRequest, Emit, GetOperationRequest, GetResourceRequest, InvokeOperationRequest, KindManifest,
    KindPolicy, ListOperationsRequest, ListResourceEventsRequest, ListResourcesRequest, Operation, OperationState,
    Phase, QuarantineResourceRequest, Reaction, Trigger, UnquarantineResourceRequest,
};
use converge_sdk::Client;
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::process::Child;
use tonic::Code;

const FINALIZER: &str = "db.test/cleanup";

/// A kind with two verbs: `rotate` (input schema, emits output and
/// status) and `slow` (sleeps `$SLOW_SECS`, emits output only).
fn db_manifest(kind: &str, policy: KindPolicy) -> KindManifest {
    let reaction = |name: &str, trigger: Trigger, emits: &[Emit]| Reaction {
        name: name.into(),
        trigger: trigger.into(),
        emits: emits.iter().map(|e| (*e).into()).collect(),
        ..Default::default()
    };
    KindManifest {
        kind: kind.into(),
        kind_version: 1,
        reactions: vec![
            reaction("work", Trigger::SpecChange, &[Emit::Status]),
            reaction("teardown", Trigger::DeleteRequested, &[Emit::Finalizer]),
            Reaction {
                verb: "rotate".into(),
                input_schema: Some(object(json!({
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {"reason": {"type": "string", "maxLength": 20}}
                }))),
                ..reaction(
                    "operate:rotate",
                    Trigger::Operation,
                    &[Emit::OperationOutput, Emit::Status],
                )
            },
            Reaction {
                verb: "slow".into(),
                ..reaction("operate:slow", Trigger::Operation, &[Emit::OperationOutput])
            },
        ],
        finalizer_name: FINALIZER.into(),
        policy: Some(policy),
        ..Default::default()
    }
}

/// The worker program: works specs, tears down, and runs verbs, appending
/// `<uid> <verb> <attempt>` to `$RECORD_DIR/runs` for every verb run.
const PROGRAM: &str = r#"#!/usr/bin/env python3
import json, os, sys, time
doc = json.load(sys.stdin)
if doc["stage"] == "work":
    print(json.dumps({"status": {"worked": doc["generation"]}}))
    sys.exit(0)
if doc["stage"] != "operate":
    sys.exit(0)
op = doc["input"]["operation"]
with open(os.path.join(os.environ["RECORD_DIR"], "runs"), "a") as f:
    f.write("%s %s %s\n" % (op["uid"], op["verb"], op["attempts"]))
if op["verb"] == "slow":
    time.sleep(float(os.environ.get("SLOW_SECS", "0")))
status = dict(doc["resource"]["status"] or {})
status["rotated"] = op["uid"]
print(json.dumps({"operation_output": {"uid": op["uid"], "input": op["input"], "by": op["requested_by"]},
                  "status": status,
                  "events": [{"category": "verbs", "reason": "VerbRan", "message": op["verb"]}]}))
"#;

/// A stdworker process serving `kinds` with [`PROGRAM`].
fn worker(address: &str, dir: &Path, kinds: &[&str], slow_secs: &str) -> anyhow::Result<Child> {
    let kinds: Vec<String> = kinds.iter().map(|k| format!("{k}:1")).collect();
    let kinds: Vec<&str> = kinds.iter().map(String::as_str).collect();
    stdworker(address, dir, PROGRAM, &kinds, &[("SLOW_SECS", slow_secs)], &[])
}

/// The verb runs the program recorded: (uid, verb, attempt).
fn runs(dir: &Path) -> Vec<(String, String, i64)> {
    std::fs::read_to_string(dir.join("runs"))
        .map(|s| {
            s.lines()
                .filter_map(|l| {
                    let mut parts = l.split(' ');
                    Some((
                        parts.next()?.to_owned(),
                        parts.next()?.to_owned(),
                        parts.next()?.parse().ok()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn invoke(kind: &str, name: &str, verb: &str, input: Option<Value>) -> InvokeOperationRequest {
    InvokeOperationRequest {
        kind: kind.into(),
        name: name.into(),
        verb: verb.into(),
        input: input.map(object),
        ..Default::default()
    }
}

async fn invoke_ok(client: &Client, request: InvokeOperationRequest) -> anyhow::Result<Operation> {
    client
        .operations()
        .invoke_operation(request)
        .await?
        .into_inner()
        .operation
        .ok_or_else(|| anyhow::anyhow!("no operation in the answer"))
}

async fn get_op(client: &Client, uid: &str) -> anyhow::Result<Operation> {
    client
        .operations()
        .get_operation(GetOperationRequest { uid: uid.into() })
        .await?
        .into_inner()
        .operation
        .ok_or_else(|| anyhow::anyhow!("no operation in the answer"))
}

/// Waits until operation `uid` reaches SUCCEEDED or FAILED.
async fn finished(client: &Client, uid: &str, within: Duration) -> anyhow::Result<Operation> {
    eventually(within, || async {
        let op = get_op(client, uid).await?;
        let done = [OperationState::Succeeded as i32, OperationState::Failed as i32].contains(&op.state);
        Ok(done.then_some(op))
    })
    .await
}

async fn operation_events(client: &Client, kind: &str, name: &str) -> anyhow::Result<Vec<(String, i64)>> {
    let events = client
        .resources()
        .list_resource_events(ListResourceEventsRequest {
            kind: kind.into(),
            name: name.into(),
            category: Some("operation".into()),
            ..Default::default()
        })
        .await?
        .into_inner()
        .events;
    Ok(events.into_iter().map(|e| (e.reason, e.count)).collect())
}

#[tokio::test]
async fn a_verb_invoked_on_a_hundred_resources_runs_exactly_once_each() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, db_manifest("db", KindPolicy::default())).await?;
    for i in 0..100 {
        apply_ok(&client, apply("db", &format!("db-{i}"), json!({}))).await?;
    }
    let scratch = tempfile::tempdir()?;
    let mut process = worker(&server.address(), scratch.path(), &["db"], "0")?;
    // Reconciles write the whole status as verbs do (the last writer wins):
    // let them settle first so the verbs' status is what stays.
    eventually(Duration::from_secs(60), || async {
        let listed = client
            .resources()
            .list_resources(ListResourcesRequest {
                kind: Some("db".into()),
                page_size: 1000,
                ..Default::default()
            })
            .await?
            .into_inner();
        Ok(
            (listed.resources.len() == 100 && listed.resources.iter().all(|r| r.phase == Phase::Ready as i32))
                .then_some(()),
        )
    })
    .await?;

    let mut invocations = tokio::task::JoinSet::new();
    for i in 0..100 {
        let client = client.clone();
        invocations.spawn(async move {
            let request = invoke(
                "db",
                &format!("db-{i}"),
                "rotate",
                Some(json!({"reason": format!("r{i}")})),
            );
            invoke_ok(&client, request).await.map(|op| (i, op))
        });
    }
    let mut invoked: Vec<(usize, Operation)> = Vec::new();
    while let Some(joined) = invocations.join_next().await {
        invoked.push(joined??);
    }
    invoked.sort_by_key(|(i, _)| *i);
    let invoked: Vec<Operation> = invoked.into_iter().map(|(_, op)| op).collect();
    assert!(invoked.iter().all(|op| op.state == OperationState::Pending as i32));
    assert!(invoked.iter().all(|op| op.requested_by == "anonymous"));
    let mut uids = BTreeSet::new();
    for op in &invoked {
        let done = finished(&client, &op.uid, Duration::from_secs(60)).await?;
        assert_eq!(done.state, OperationState::Succeeded as i32, "{done:?}");
        assert_eq!(done.attempts, 1);
        assert!(done.complete_time.is_some() && done.error.is_none());
        let output = json(done.output.as_ref().ok_or_else(|| anyhow::anyhow!("no output"))?);
        assert_eq!(output["uid"], json!(op.uid));
        assert_eq!(
            output["input"],
            json(op.input.as_ref().ok_or_else(|| anyhow::anyhow!("no input"))?)
        );
        assert_eq!(output["by"], json!("anonymous"));
        uids.insert(op.uid.clone());
    }
    assert_eq!(uids.len(), 100);
    let ran = runs(scratch.path());
    assert_eq!(ran.len(), 100, "each verb ran exactly once");
    assert_eq!(ran.iter().map(|r| r.0.clone()).collect::<BTreeSet<_>>(), uids);
    // The verb's worker events are recorded on its resource.
    let verb_events = client
        .resources()
        .list_resource_events(ListResourceEventsRequest {
            kind: "db".into(),
            name: "db-7".into(),
            category: Some("verbs".into()),
            ..Default::default()
        })
        .await?
        .into_inner()
        .events;
    let verb_events: Vec<(&str, i64, &str, &str)> = verb_events
        .iter()
        .map(|e| (e.reason.as_str(), e.count, e.message.as_str(), e.actor.as_str()))
        .collect();
    assert_eq!(
        verb_events.iter().map(|e| (e.0, e.1, e.2)).collect::<Vec<_>>(),
        [("VerbRan", 1, "rotate")]
    );
    // A worker without a SPIFFE ID is recorded by its peer address.
    assert!(
        verb_events.iter().all(|e| api::is_plaintext_worker_actor(e.3)),
        "{verb_events:?}"
    );

    // The reaction emits status: the resource carries the verb's status.
    let resource = client
        .resources()
        .get_resource(GetResourceRequest {
            kind: "db".into(),
            name: "db-7".into(),
        })
        .await?
        .into_inner()
        .resource
        .ok_or_else(|| anyhow::anyhow!("no resource"))?;
    let status = json(resource.status.as_ref().ok_or_else(|| anyhow::anyhow!("no status"))?);
    assert_eq!(status["rotated"], json!(invoked[7].uid));
    let events = operation_events(&client, "db", "db-7").await?;
    assert!(events.contains(&("OperationInvoked".to_owned(), 1)), "{events:?}");
    assert!(events.contains(&("OperationSucceeded".to_owned(), 1)), "{events:?}");

    // A quarantined resource's operation waits, and runs once released.
    client
        .resources()
        .quarantine_resource(QuarantineResourceRequest {
            kind: "db".into(),
            name: "db-1".into(),
            ..Default::default()
        })
        .await?;
    let waiting = invoke_ok(&client, invoke("db", "db-1", "rotate", None)).await?;
    assert_eq!(waiting.pending_reason, "Quarantined");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let still = get_op(&client, &waiting.uid).await?;
    assert_eq!(still.state, OperationState::Pending as i32);
    assert_eq!(still.pending_reason, "Quarantined");
    client
        .resources()
        .unquarantine_resource(UnquarantineResourceRequest {
            kind: "db".into(),
            name: "db-1".into(),
            ..Default::default()
        })
        .await?;
    let done = finished(&client, &waiting.uid, Duration::from_secs(30)).await?;
    assert_eq!(done.state, OperationState::Succeeded as i32);

    // Listing: newest first, keyset pages, by state and verb.
    let more = [
        invoke_ok(&client, invoke("db", "db-1", "rotate", None)).await?,
        invoke_ok(&client, invoke("db", "db-1", "rotate", None)).await?,
    ];
    for op in &more {
        finished(&client, &op.uid, Duration::from_secs(30)).await?;
    }
    let mut listed = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .operations()
            .list_operations(ListOperationsRequest {
                kind: "db".into(),
                name: "db-1".into(),
                page_size: 2,
                page_token: token.clone(),
                ..Default::default()
            })
            .await?
            .into_inner();
        assert!(page.operations.len() <= 2);
        listed.extend(page.operations.into_iter().map(|o| o.uid));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let expected = vec![
        more[1].uid.clone(),
        more[0].uid.clone(),
        waiting.uid.clone(),
        invoked[1].uid.clone(),
    ];
    assert_eq!(listed, expected, "newest first across pages");
    let failed = client
        .operations()
        .list_operations(ListOperationsRequest {
            kind: "db".into(),
            name: "db-1".into(),
            state: OperationState::Failed.into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(failed.operations.is_empty());
    let slow = client
        .operations()
        .list_operations(ListOperationsRequest {
            kind: "db".into(),
            name: "db-1".into(),
            verb: Some("slow".into()),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(slow.operations.is_empty());

    // Retention: finished operations older than the window are swept.
    let pool = server.database().pool().clone();
    sqlx::query("UPDATE operations SET completed_at = now() - interval '8 days' WHERE resource_id = (SELECT id FROM resources WHERE name = 'db-2')")
        .execute(&pool)
        .await?;
    let swept = converge_service::engine::retention::sweep(&pool, &Default::default(), false).await?;
    assert_eq!(swept.operations, 1);
    expect_error(
        client
            .operations()
            .get_operation(GetOperationRequest {
                uid: invoked[2].uid.clone(),
            })
            .await,
        Code::NotFound,
        "OPERATION_NOT_FOUND",
    );

    // History goes with the resource.
    client
        .resources()
        .delete_resource(DeleteResourceRequest {
            kind: "db".into(),
            name: "db-3".into(),
            ..Default::default()
        })
        .await?;
    eventually(Duration::from_secs(30), || async {
        let gone = client
            .operations()
            .get_operation(GetOperationRequest {
                uid: invoked[3].uid.clone(),
            })
            .await
            .is_err_and(|s| s.code() == Code::NotFound);
        Ok(gone.then_some(()))
    })
    .await?;
    process.kill().await?;
    server.shutdown().await
}

#[tokio::test]
async fn invocations_are_checked_and_idempotent() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, db_manifest("db", KindPolicy::default())).await?;
    apply_ok(&client, apply("db", "a", json!({}))).await?;
    let ops = || client.operations();

    let unknown = expect_error(
        ops().invoke_operation(invoke("db", "a", "resize", None)).await,
        Code::InvalidArgument,
        "UNKNOWN_VERB",
    );
    assert_eq!(fields(&unknown), ["/verb"]);
    assert!(unknown[0].1.contains("declared verbs: rotate, slow"), "{unknown:?}");
    expect_error(
        ops().invoke_operation(invoke("db", "nope", "rotate", None)).await,
        Code::NotFound,
        "RESOURCE_NOT_FOUND",
    );
    expect_error(
        ops().invoke_operation(invoke("db", "a", "bad verb", None)).await,
        Code::InvalidArgument,
        "INVALID_FIELD",
    );
    let rejected = expect_error(
        ops()
            .invoke_operation(invoke(
                "db",
                "a",
                "rotate",
                Some(json!({"reason": "x".repeat(30), "extra": 1})),
            ))
            .await,
        Code::InvalidArgument,
        "INVALID_OPERATION_INPUT",
    );
    let mut rejected_fields = fields(&rejected);
    rejected_fields.sort_unstable();
    assert_eq!(rejected_fields, ["/input", "/input/reason"], "{rejected:?}");
    let too_large = expect_error(
        ops()
            .invoke_operation(invoke("db", "a", "slow", Some(json!({"blob": "x".repeat(300_000)}))))
            .await,
        Code::InvalidArgument,
        "INVALID_OPERATION_INPUT",
    );
    assert_eq!(fields(&too_large), ["/input"]);
    let bad_uid = expect_error(
        ops().get_operation(GetOperationRequest { uid: "nope".into() }).await,
        Code::InvalidArgument,
        "INVALID_FIELD",
    );
    assert_eq!(fields(&bad_uid), ["/uid"]);
    expect_error(
        ops()
            .get_operation(GetOperationRequest {
                uid: uuid::Uuid::new_v4().to_string(),
            })
            .await,
        Code::NotFound,
        "OPERATION_NOT_FOUND",
    );

    // validate_only checks and records nothing.
    let dry = invoke_ok(
        &client,
        InvokeOperationRequest {
            validate_only: true,
            ..invoke("db", "a", "rotate", None)
        },
    )
    .await?;
    assert!(dry.uid.is_empty());
    let listed = ops()
        .list_operations(ListOperationsRequest {
            kind: "db".into(),
            name: "a".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(listed.operations.is_empty(), "{listed:?}");

    // request_id: a retry answers the same operation; another request under it is refused.
    let keyed = || InvokeOperationRequest {
        request_id: "op-1".into(),
        ..invoke("db", "a", "rotate", Some(json!({"reason": "first"})))
    };
    let first = invoke_ok(&client, keyed()).await?;
    let again = invoke_ok(&client, keyed()).await?;
    assert_eq!(first.uid, again.uid);
    expect_error(
        ops()
            .invoke_operation(InvokeOperationRequest {
                request_id: "op-1".into(),
                ..invoke("db", "a", "slow", None)
            })
            .await,
        Code::InvalidArgument,
        "REQUEST_ID_REUSED",
    );
    let listed = ops()
        .list_operations(ListOperationsRequest {
            kind: "db".into(),
            name: "a".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert_eq!(listed.operations.len(), 1);
    assert_eq!(listed.operations[0].pending_reason, "WaitingForWorker");

    // Deletion: the pending operation fails, and no new one may start.
    client
        .resources()
        .delete_resource(DeleteResourceRequest {
            kind: "db".into(),
            name: "a".into(),
            ..Default::default()
        })
        .await?;
    let failed = get_op(&client, &first.uid).await?;
    assert_eq!(failed.state, OperationState::Failed as i32);
    let error = failed.error.ok_or_else(|| anyhow::anyhow!("no error"))?;
    assert_eq!(error.code, Code::FailedPrecondition as i32);
    assert!(error.message.contains("being deleted"), "{error:?}");
    expect_error(
        ops().invoke_operation(invoke("db", "a", "rotate", None)).await,
        Code::FailedPrecondition,
        "DELETION_PENDING",
    );
    let events = operation_events(&client, "db", "a").await?;
    assert!(events.contains(&("OperationFailed".to_owned(), 1)), "{events:?}");
    server.shutdown().await
}

/// A server with the `db` kind under `policy`, one resource `a` and a
/// worker process whose `slow` verb sleeps `slow_secs`.
struct Rig {
    server: TestServer,
    client: Client,
    scratch: tempfile::TempDir,
    worker: Child,
}

impl Rig {
    async fn start(policy: KindPolicy, slow_secs: &str) -> anyhow::Result<Self> {
        let server = TestServer::start().await?;
        let client = server.client().await?;
        apply_manifest(&client, db_manifest("db", policy)).await?;
        apply_ok(&client, apply("db", "a", json!({}))).await?;
        let scratch = tempfile::tempdir()?;
        let worker = worker(&server.address(), scratch.path(), &["db"], slow_secs)?;
        Ok(Self {
            server,
            client,
            scratch,
            worker,
        })
    }

    async fn stop(mut self) -> anyhow::Result<()> {
        self.worker.kill().await?;
        self.server.shutdown().await
    }
}

#[tokio::test]
async fn a_verb_whose_worker_is_killed_runs_again_and_completes() -> anyhow::Result<()> {
    let mut rig = Rig::start(KindPolicy::default(), "60").await?;
    let (client, scratch) = (rig.client.clone(), rig.scratch.path().to_owned());
    let op = invoke_ok(&client, invoke("db", "a", "slow", None)).await?;
    eventually(Duration::from_secs(30), || async {
        Ok((!runs(&scratch).is_empty()).then_some(()))
    })
    .await?;
    assert_eq!(get_op(&client, &op.uid).await?.state, OperationState::Running as i32);
    rig.worker.kill().await?;

    rig.worker = worker(&rig.server.address(), &scratch, &["db"], "0")?;
    let done = finished(&client, &op.uid, Duration::from_secs(60)).await?;
    assert_eq!(done.state, OperationState::Succeeded as i32, "{done:?}");
    assert_eq!(done.attempts, 2);
    let ran = runs(&scratch);
    assert_eq!(ran.len(), 2, "{ran:?}");
    assert!(ran.iter().all(|r| r.0 == op.uid));
    assert_eq!(ran[1].2, 2, "the second run is attempt 2");
    rig.stop().await
}

#[tokio::test]
async fn operations_share_the_kinds_max_inflight_with_its_tasks() -> anyhow::Result<()> {
    let policy = KindPolicy {
        max_inflight: 1,
        ..Default::default()
    };
    let rig = Rig::start(policy, "1").await?;
    let client = rig.client.clone();
    let mut invoked = Vec::new();
    for _ in 0..4 {
        invoked.push(invoke_ok(&client, invoke("db", "a", "slow", None)).await?);
    }
    let pool = rig.server.database().pool().clone();
    let mut most = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (running, open): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM operations WHERE state = 'running')
                  + (SELECT count(*) FROM work_queue WHERE broker_id IS NOT NULL),
                    (SELECT count(*) FROM operations WHERE state IN ('pending', 'running'))",
        )
        .fetch_one(&pool)
        .await?;
        most = most.max(running);
        if open == 0 {
            break;
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "the operations did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(most, 1, "at most one task or operation of the kind runs at once");
    for op in &invoked {
        assert_eq!(get_op(&client, &op.uid).await?.state, OperationState::Succeeded as i32);
    }
    rig.stop().await
}

#[tokio::test]
async fn a_verb_that_outlives_its_deadline_fails_with_deadline_exceeded() -> anyhow::Result<()> {
    let policy = KindPolicy {
        // Long enough for the program to start and record its run under
        // the load of the other tests, short enough to keep the test quick.
        task_deadline_secs: 3,
        max_transient_attempts: 2,
        ..Default::default()
    };
    let rig = Rig::start(policy, "30").await?;
    let client = rig.client.clone();
    let op = invoke_ok(&client, invoke("db", "a", "slow", None)).await?;
    let done = finished(&client, &op.uid, Duration::from_secs(60)).await?;
    assert_eq!(done.state, OperationState::Failed as i32, "{done:?}");
    assert_eq!(done.attempts, 2);
    let error = done.error.ok_or_else(|| anyhow::anyhow!("no error"))?;
    assert_eq!(error.code, Code::DeadlineExceeded as i32, "{error:?}");
    assert_eq!(runs(rig.scratch.path()).len(), 2);
    rig.stop().await
}

#[tokio::test]
async fn operations_pending_at_a_server_crash_complete_after_restart() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let pool = database.pool().clone();
    let site = ProcessSite::new(&database)?;
    let address = site.address();
    let (mut server, client) = site.start("first.log").await?;
    apply_manifest(&client, db_manifest("db", KindPolicy::default())).await?;
    let mut invoked = Vec::new();
    for i in 0..20 {
        apply_ok(&client, apply("db", &format!("r{i}"), json!({}))).await?;
        invoked.push(invoke_ok(&client, invoke("db", &format!("r{i}"), "rotate", None)).await?);
    }
    signal(&server, Signal::SIGKILL)?;
    server.wait().await?;
    crash_postgres_state(&pool).await?;

    let (mut restarted, client) = site.start("second.log").await?;
    let mut process = worker(&address, site.scratch(), &["db"], "0")?;
    for op in &invoked {
        let done = finished(&client, &op.uid, Duration::from_secs(60)).await?;
        assert_eq!(done.state, OperationState::Succeeded as i32, "{done:?}");
    }
    let ran: BTreeSet<String> = runs(site.scratch()).into_iter().map(|r| r.0).collect();
    assert_eq!(ran.len(), 20);
    process.kill().await?;
    stop_cleanly(&mut restarted).await
}
