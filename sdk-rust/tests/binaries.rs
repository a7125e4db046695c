//! The command-line workers (`converge-stdworker`, `converge-noop-worker`)
//! end to end against the scripted broker.

// Test helpers outside #[test] fns; a panic is the intended failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use common::{Broker, task};
use converge_proto::worker_v1::work_stream_request::Payload as Up;
use converge_sdk::worker::convert::struct_to_json;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

const STDWORKER: &str = env!("CARGO_BIN_EXE_converge-stdworker");
const NOOP_WORKER: &str = env!("CARGO_BIN_EXE_converge-noop-worker");

fn write_script(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Starts a binary with a minimal environment plus `extra_env`; its logs go
/// to `log` for post-mortems.
fn spawn(binary: &str, args: &[String], extra_env: &[(&str, &str)], log: &Path) -> Child {
    let log = std::fs::File::create(log).unwrap();
    let mut command = Command::new(binary);
    command
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("LOG_LEVEL", "debug")
        .envs(extra_env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true);
    command.spawn().unwrap()
}

async fn terminate(mut child: Child) -> ExitStatus {
    let pid = Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap());
    kill(pid, Signal::SIGTERM).unwrap();
    tokio::time::timeout(common::WAIT, child.wait())
        .await
        .expect("worker did not exit after SIGTERM")
        .unwrap()
}

/// Whether the process is gone (or a zombie nobody reaped: it runs no more).
fn process_is_dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

#[tokio::test]
async fn stdworker_runs_a_shell_script_per_task() {
    let broker = Broker::start().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let script = write_script(
        dir.path(),
        "handler.sh",
        &format!(
            r#"#!/bin/sh
input=$(cat)
case "$input" in
  *'"name":"res-OK"'*)
    printf '%s' "$input" > {d}/ok-input.json
    printf '{{"status":{{"ok":true,"reaction":"%s","secret":"%s","given":"%s"}},"healthy":true,"conditions":[{{"type":"Ready","status":"True"}}],"requeue_after_secs":3}}' \
      "$CONVERGE_REACTION" "${{SECRET_TOKEN:-}}" "${{GIVEN:-}}"
    ;;
  *'"name":"res-FAIL"'*)
    echo "first line" >&2
    echo "something went wrong" >&2
    exit 3
    ;;
  *'"name":"res-BAD"'*)
    echo "this is not json"
    ;;
  *'"name":"res-TERM"'*)
    echo '{{"error":{{"message":"bad spec","terminal":true,"reason":"BadSpec"}}}}'
    ;;
  *'"name":"res-SLOW"'*)
    sleep 30 &
    echo $! > {d}/slow-child.pid
    wait
    ;;
esac
"#
        ),
    );
    let args = vec![
        "--broker".to_owned(),
        broker.url(),
        "--kind".to_owned(),
        format!("script:1={}", script.display()),
        "--env".to_owned(),
        "GIVEN=yes".to_owned(),
    ];
    let child = spawn(
        STDWORKER,
        &args,
        &[("SECRET_TOKEN", "hunter2")],
        &dir.path().join("worker.log"),
    );
    broker.stream_opened(0).await;

    let mut ok = task("OK", "script", 1, json!({"size": 3}));
    ok.generation = 4;
    broker.send_task(0, ok).await;
    broker.send_task(0, task("FAIL", "script", 1, json!({}))).await;
    broker.send_task(0, task("BAD", "script", 1, json!({}))).await;
    broker.send_task(0, task("TERM", "script", 1, json!({}))).await;
    let mut slow = task("SLOW", "script", 1, json!({}));
    slow.task_deadline = Some(prost_types::Duration {
        seconds: 0,
        nanos: 500_000_000,
    });
    broker.send_task(0, slow).await;

    // Success: the outcome is parsed, the environment is only what was given.
    let done = broker.completion("OK").await;
    assert!(done.error.is_none(), "{:?}", done.error);
    assert_eq!(done.generation, 4);
    assert_eq!(
        struct_to_json(done.status.unwrap()),
        json!({"ok": true, "reaction": "work", "secret": "", "given": "yes"})
    );
    assert_eq!(done.healthy, Some(true));
    assert_eq!(done.conditions[0].r#type, "Ready");
    assert_eq!(done.requeue_after.unwrap().seconds, 3);
    let input: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("ok-input.json")).unwrap()).unwrap();
    assert_eq!(input["reaction"], "work");
    assert_eq!(input["stage"], "work");
    assert_eq!(input["trigger"], "spec_change");
    assert_eq!(input["kind"], "script");
    assert_eq!(input["kind_version"], 1);
    assert_eq!(input["generation"], 4);
    assert_eq!(input["resource"]["name"], "res-OK");
    assert_eq!(input["resource"]["spec"], json!({"size": 3}));
    assert_eq!(input["provider_config"], Value::Null);

    // Non-zero exit: transient, with the tail of stderr.
    let error = broker.completion("FAIL").await.error.unwrap();
    assert!(!error.terminal);
    assert!(error.message.contains("exited with status 3"), "{}", error.message);
    assert!(error.message.contains("something went wrong"), "{}", error.message);

    // Not JSON: transient.
    let error = broker.completion("BAD").await.error.unwrap();
    assert!(!error.terminal);
    assert!(error.message.contains("invalid outcome"), "{}", error.message);

    // A reported terminal error stays terminal.
    let error = broker.completion("TERM").await.error.unwrap();
    assert!(error.terminal);
    assert_eq!(error.message, "bad spec");
    assert_eq!(error.reason, "BadSpec");

    // Past the deadline: transient, and the whole process group is killed.
    let error = broker.completion("SLOW").await.error.unwrap();
    assert!(!error.terminal);
    assert!(
        error.message.contains("timed out") || error.message.contains("deadline exceeded"),
        "{}",
        error.message
    );
    let pid: i32 = std::fs::read_to_string(dir.path().join("slow-child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    tokio::time::timeout(common::WAIT, async {
        while !process_is_dead(pid) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the program's child survived the timeout");

    let status = terminate(child).await;
    assert!(
        status.success(),
        "{status:?}: {}",
        std::fs::read_to_string(dir.path().join("worker.log")).unwrap()
    );
    assert!(common::History(broker.events()).has_closed(0));
}

#[tokio::test]
async fn stdworker_rejects_bad_arguments_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let not_executable = dir.path().join("plain.txt");
    std::fs::write(&not_executable, "x").unwrap();
    let not_executable = format!("k:1={}", not_executable.display());
    let cases = [
        vec!["--broker", "http://127.0.0.1:1", "--kind", "nokind"],
        vec!["--broker", "http://127.0.0.1:1", "--kind", "k:0=/bin/true"],
        vec!["--broker", "http://127.0.0.1:1", "--kind", "k:1=/does/not/exist"],
        vec!["--broker", "http://127.0.0.1:1", "--kind", &not_executable],
        vec![
            "--broker",
            "http://127.0.0.1:1",
            "--kind",
            "k:1=/bin/true",
            "--max-parallel",
            "0",
        ],
        vec!["--kind", "k:1=/bin/true"],
    ];
    for (i, case) in cases.iter().enumerate() {
        let args: Vec<String> = case.iter().map(|s| s.to_string()).collect();
        let child = spawn(STDWORKER, &args, &[], &dir.path().join(format!("bad-{i}.log")));
        let status = tokio::time::timeout(common::WAIT, child.wait_with_output())
            .await
            .expect("a bad configuration did not fail fast")
            .unwrap()
            .status;
        assert_eq!(status.code(), Some(2), "case {case:?}");
    }
    // A bad LOG_LEVEL fails fast too.
    let args: Vec<String> = ["--broker", "http://127.0.0.1:1", "--kind", "k:1=/bin/true"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let child = spawn(
        STDWORKER,
        &args,
        &[("LOG_LEVEL", "loud=[")],
        &dir.path().join("bad-log.log"),
    );
    let status = tokio::time::timeout(common::WAIT, child.wait_with_output())
        .await
        .unwrap()
        .unwrap()
        .status;
    assert_eq!(status.code(), Some(2));
}

#[tokio::test]
async fn noop_worker_serves_its_kinds() {
    let broker = Broker::start().await;
    let dir = tempfile::tempdir().unwrap();
    let args = vec![
        "--kinds".to_owned(),
        "noop:1,noop:2".to_owned(),
        "--delay-ms".to_owned(),
        "10".to_owned(),
    ];
    let child = spawn(
        NOOP_WORKER,
        &args,
        &[("BROKER_ADDR", &broker.url()), ("WORKER_MAX_PARALLEL", "3")],
        &dir.path().join("noop.log"),
    );
    broker.stream_opened(0).await;
    broker
        .wait_for("subscribe", |h| (!h.stream(0).is_empty()).then_some(()))
        .await;
    let Up::Subscribe(subscribe) = &common::History(broker.events()).stream(0)[0] else {
        panic!("first message is not Subscribe");
    };
    let kinds: Vec<_> = subscribe
        .kinds
        .iter()
        .map(|k| (k.kind.as_str(), k.kind_version))
        .collect();
    assert_eq!(kinds, [("noop", 1), ("noop", 2)]);
    assert_eq!(subscribe.max_inflight, 3);

    let mut t = task("N1", "noop", 2, json!({}));
    t.generation = 9;
    broker.send_task(0, t).await;
    let done = broker.completion("N1").await;
    assert!(done.error.is_none());
    let status = struct_to_json(done.status.unwrap());
    assert_eq!(status["observed_generation"], 9);
    let worker = status["worker"].as_str().unwrap();
    assert!(worker.ends_with(&format!("-{}", child.id().unwrap())), "{worker}");

    let exit = terminate(child).await;
    assert!(exit.success(), "{exit:?}");
}
