//! The documented mixed-language run of the BOM demo (examples/bom/README.md,
//! "Mixed languages"): `converge dev --external-kinds account,vpc` serves the
//! other kinds in Rust while the Python port serves `account` (its reconcile,
//! provider config and `rotate_credentials` verb) and the Go port serves
//! `vpc`, each a real process on the same broker.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use converge_examples::sim;
use converge_integration::processes::{
    binary, connect_when_up, free_local_addr, repository_root, run_checked, stop_cleanly,
};
use converge_integration::{TestDatabase, eventually};
use converge_sdk::proto::v1::{GetOperationRequest, InvokeOperationRequest, OperationState, Phase};
use serde_json::json;
use tokio::process::{Child, Command};

use converge_integration::api::{self, get, json as to_json, object, wait_phase};

/// Simulated provider latency of every leaf, in milliseconds.
const DELAY_MS: &str = "20";

/// Starts `command` with its output in `<scratch>/<log>`.
fn start(command: &mut Command, scratch: &Path, log: &str) -> anyhow::Result<Child> {
    let log = std::fs::File::create(scratch.join(log))?;
    Ok(command
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()?)
}

#[tokio::test]
async fn the_bom_demo_reconciles_with_python_and_go_leaves() -> anyhow::Result<()> {
    let root = repository_root();
    let scratch = tempfile::tempdir()?;
    let python = root.join("sdk-gen/.venv/bin/python");
    anyhow::ensure!(
        python.exists(),
        "{} is missing: run sdk-gen/generate --install-only",
        python.display()
    );
    let go_worker = scratch.path().join("bom-vpc");
    run_checked(
        Command::new("go")
            .args(["build", "-o"])
            .arg(&go_worker)
            .arg("./examples/bom-vpc")
            .current_dir(root.join("sdk-gen/go")),
    )
    .await?;

    let database = TestDatabase::new().await?;
    let addr = free_local_addr()?;
    let broker = format!("http://{addr}");
    let mut dev = start(
        Command::new(binary("converge")?)
            .args(["dev", "--external-kinds", "account,vpc", "--delay-ms", DELAY_MS])
            .env("DATABASE_URL", database.url()?)
            .env("LISTEN_ADDR", &addr)
            .env("HEALTH_ADDR", "127.0.0.1:0"),
        scratch.path(),
        "dev.log",
    )?;
    let client = connect_when_up(&broker).await?;
    let mut account_worker = start(
        Command::new(&python)
            .arg(root.join("sdk-gen/python/examples/bom_account.py"))
            .env("PYTHONPATH", root.join("sdk-gen/python/src"))
            .env("CONVERGE_BROKER_ADDR", &broker)
            .env("DEMO_DELAY_MS", DELAY_MS),
        scratch.path(),
        "python.log",
    )?;
    let mut vpc_worker = start(
        Command::new(&go_worker)
            .env("CONVERGE_BROKER_ADDR", &broker)
            .env("DEMO_DELAY_MS", DELAY_MS),
        scratch.path(),
        "go.log",
    )?;

    // The demo applies its BOM once its kinds are in; the tree needs all three languages.
    let logs = scratch.path().display().to_string();
    let bom = eventually(Duration::from_secs(90), || async {
        Ok(api::find(&client, "bom", "demo")
            .await?
            .filter(|r| r.phase == Phase::Ready as i32))
    })
    .await
    .map_err(|e| anyhow::anyhow!("bom/demo did not become Ready (logs in {logs}): {e}"))?;
    assert!(bom.healthy, "{bom:?}");

    // Same ids as the Rust leaves, the account's settings from its provider configs.
    let payments = get(&client, "account", "demo-payments").await?;
    let status = to_json(payments.status.as_ref().unwrap_or(&Default::default()));
    assert_eq!(status["accountId"], sim::account_id("demo-payments"), "{status}");
    assert_eq!(
        status["org"], "o-demo",
        "the kind default reached the Python worker: {status}"
    );
    assert_eq!(
        status["tags"]["cost-center"], "cc-100",
        "the override merged in: {status}"
    );
    let search = get(&client, "vpc", "demo-search").await?;
    let status = to_json(search.status.as_ref().unwrap_or(&Default::default()));
    assert_eq!(status["vpcId"], sim::vpc_id("demo-search"), "{status}");
    assert_eq!(
        status["accountId"],
        sim::account_id("demo-search"),
        "the id flowed from the Python account to the Go VPC: {status}"
    );

    // The verb runs on the Python worker too.
    let operation = client
        .operations()
        .invoke_operation(InvokeOperationRequest {
            kind: "account".into(),
            name: "demo-payments".into(),
            verb: "rotate_credentials".into(),
            input: Some(object(json!({"reason": "quarterly"}))),
            ..Default::default()
        })
        .await?
        .into_inner()
        .operation
        .ok_or_else(|| anyhow::anyhow!("no operation in the answer"))?;
    let done = eventually(Duration::from_secs(30), || async {
        let op = client
            .operations()
            .get_operation(GetOperationRequest {
                uid: operation.uid.clone(),
            })
            .await?
            .into_inner()
            .operation;
        Ok(op.filter(|op| op.state == OperationState::Succeeded as i32))
    })
    .await?;
    let output = to_json(done.output.as_ref().unwrap_or(&Default::default()));
    assert_eq!(
        output["keyId"],
        sim::access_key_id("demo-payments", &operation.uid),
        "{output}"
    );
    assert_eq!(output["reason"], "quarterly", "{output}");
    let payments = wait_phase(&client, "account", "demo-payments", Phase::Ready).await?;
    let status = to_json(payments.status.as_ref().unwrap_or(&Default::default()));
    assert_eq!(status["credentials"]["keyId"], output["keyId"], "{status}");

    stop_cleanly(&mut account_worker).await.context("the Python worker")?;
    stop_cleanly(&mut vpc_worker).await.context("the Go worker")?;
    stop_cleanly(&mut dev).await.context("converge dev")?;
    Ok(())
}
