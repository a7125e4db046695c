//! The embedding example, run as a user would: as its own OS process, on an
//! embedded PostgreSQL and against a separately started converge service;
//! and the facade's API in this process.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use converge_embedded::Converge;
use converge_integration::processes::{ProcessSite, stop_cleanly};
use converge_integration::{TestDatabase, eventually};
use converge_sdk::proto::v1 as pb;
use converge_sdk::worker::convert::json_to_struct;
use converge_sdk::worker::{HandlerError, KindVersion, Outcome, Provider, ReactionRequest};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const APP: &str = env!("CARGO_BIN_EXE_converge-files");

/// The example with `args`, its stdout piped.
fn app(root: &Path, args: &[&str]) -> anyhow::Result<Child> {
    Ok(Command::new(APP)
        .arg("--root")
        .arg(root)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?)
}

/// Runs the example to its end; fails unless it exits 0. Returns its stdout.
async fn run_app(root: &Path, args: &[&str]) -> anyhow::Result<String> {
    let output = tokio::time::timeout(Duration::from_secs(180), app(root, args)?.wait_with_output()).await??;
    let stdout = String::from_utf8(output.stdout)?;
    anyhow::ensure!(
        output.status.success(),
        "the example exited with {}: {stdout}",
        output.status
    );
    Ok(stdout)
}

/// The TCP sockets in LISTEN state that process `pid` holds.
fn listening_sockets(pid: u32) -> anyhow::Result<Vec<String>> {
    let mut listening = std::collections::HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for row in text.lines().skip(1) {
            let fields: Vec<&str> = row.split_whitespace().collect();
            // Column 4 is the state (0A: LISTEN), column 10 the inode.
            if fields.get(3) == Some(&"0A")
                && let Some(inode) = fields.get(9)
            {
                listening.insert((*inode).to_owned());
            }
        }
    }
    let mut held = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        let target = std::fs::read_link(fd?.path())?;
        let target = target.to_string_lossy();
        if let Some(inode) = target.strip_prefix("socket:[").and_then(|s| s.strip_suffix(']'))
            && listening.contains(inode)
        {
            held.push(inode.to_owned());
        }
    }
    Ok(held)
}

#[tokio::test]
async fn an_embedding_application_opens_no_port_and_resumes_on_its_data_directory() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("files");
    let state = dir.path().join("state");
    let state = state.to_str().ok_or_else(|| anyhow::anyhow!("a non-UTF-8 temp path"))?;

    let mut first = app(&root, &["--data-dir", state, "--hold", "a=hello", "b=world"])?;
    let stdout = first.stdout.take().ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    tokio::time::timeout(Duration::from_secs(180), async {
        while let Some(line) = lines.next_line().await? {
            let done = line.starts_with("converge-files: all ready");
            seen.push(line);
            if done {
                return Ok(());
            }
        }
        anyhow::bail!("the example ended before everything was ready: {seen:?}")
    })
    .await??;
    assert_eq!(std::fs::read_to_string(root.join("a"))?, "hello");
    assert_eq!(std::fs::read_to_string(root.join("b"))?, "world");
    let pid = first.id().ok_or_else(|| anyhow::anyhow!("the example is gone"))?;
    assert_eq!(
        listening_sockets(pid)?,
        Vec::<String>::new(),
        "the embedded application listens on no TCP port"
    );
    stop_cleanly(&mut first).await?;

    // A second start on the same directory finds what the first stored: a
    // deletion of a runs its teardown, b moves to a second generation.
    let stdout = run_app(&root, &["--data-dir", state, "--delete", "a", "b=again"]).await?;
    assert!(stdout.contains("local-file/a deleted"), "{stdout}");
    assert!(stdout.contains("local-file/b PHASE_READY generation 2"), "{stdout}");
    assert!(!root.join("a").exists(), "the teardown removed the file");
    assert_eq!(std::fs::read_to_string(root.join("b"))?, "again");
    Ok(())
}

#[tokio::test]
async fn the_same_application_runs_against_a_separately_started_converge() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let site = ProcessSite::new(&database)?;
    let (mut server, client) = site.start("converge.log").await?;
    let root = site.scratch().join("files");

    let stdout = run_app(&root, &["--connect", &site.address(), "c=remote"]).await?;
    assert!(stdout.contains(&format!("connected to {}", site.address())), "{stdout}");
    assert_eq!(std::fs::read_to_string(root.join("c"))?, "remote");
    let stored = client
        .resources()
        .get_resource(pb::GetResourceRequest {
            kind: "local-file".into(),
            name: "c".into(),
        })
        .await?
        .into_inner()
        .resource
        .ok_or_else(|| anyhow::anyhow!("no resource"))?;
    assert_eq!(
        stored.phase,
        pb::Phase::Ready as i32,
        "the service holds the application's resource"
    );
    stop_cleanly(&mut server).await?;
    Ok(())
}

/// Echoes a resource's spec into its status.
struct Echo;

#[converge_sdk::worker::async_trait]
impl Provider for Echo {
    fn kind(&self) -> KindVersion {
        KindVersion::new("echo", 1)
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        Ok(Outcome::new().with_status(json!({"echo": request.resource.spec})))
    }
}

fn echo_manifest() -> pb::KindManifest {
    pb::KindManifest {
        kind: "echo".into(),
        kind_version: 1,
        reactions: vec![pb::Reaction {
            name: "echo".into(),
            trigger: pb::Trigger::SpecChange.into(),
            emits: vec![pb::Emit::Status.into()],
            ..Default::default()
        }],
        ..Default::default()
    }
}

async fn ready_echo(client: &converge_sdk::Client, name: &str) -> anyhow::Result<pb::Resource> {
    eventually(Duration::from_secs(30), || async {
        let resource = client
            .resources()
            .get_resource(pb::GetResourceRequest {
                kind: "echo".into(),
                name: name.into(),
            })
            .await?
            .into_inner()
            .resource;
        Ok(resource.filter(|r| r.phase == pb::Phase::Ready as i32))
    })
    .await
}

#[tokio::test]
async fn the_facade_applies_kinds_from_code_and_files_and_serves_in_process_and_over_grpc() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let addr: std::net::SocketAddr = converge_integration::processes::free_local_addr()?.parse()?;
    let noop = Path::new(env!("CARGO_MANIFEST_DIR")).join("../noop/manifest.json");
    let converge = Converge::with_database(database.url()?)
        .kind(echo_manifest())
        .kind_file(&noop)?
        .provider(Echo)
        .serve_grpc(addr)
        .start()
        .await?;
    assert!(converge.is_embedded());
    assert_eq!(converge.grpc_addr(), Some(addr));

    let client = converge.client();
    let noop = client
        .kinds()
        .get_kind_manifest(pb::GetKindManifestRequest {
            kind: "noop".into(),
            kind_version: 1,
        })
        .await?
        .into_inner();
    assert!(noop.manifest.is_some(), "the kind from the manifest file was applied");
    client
        .resources()
        .apply_resource(pb::ApplyResourceRequest {
            kind: "echo".into(),
            kind_version: 1,
            name: "x".into(),
            spec: Some(json_to_struct(json!({"n": 1}), "spec")?),
            ..Default::default()
        })
        .await?;
    let ready = ready_echo(&client, "x").await?;
    let status = ready.status.ok_or_else(|| anyhow::anyhow!("no status"))?;
    assert!(status.fields.contains_key("echo"), "the in-process provider answered");

    // The same control plane, from outside the process.
    let outside = converge_sdk::Client::connect(format!("http://{addr}")).await?;
    assert_eq!(ready_echo(&outside, "x").await?.uid, ready.uid);
    // Members report their workers with their heartbeat.
    let identities = eventually(Duration::from_secs(30), || async {
        let members = outside
            .cluster()
            .list_cluster_members(pb::ListClusterMembersRequest::default())
            .await?
            .into_inner()
            .members;
        let identities: Vec<String> = members
            .iter()
            .flat_map(|member| member.workers.iter().map(|worker| worker.identity.clone()))
            .collect();
        Ok((!identities.is_empty()).then_some(identities))
    })
    .await?;
    assert_eq!(
        identities,
        vec!["in-process".to_owned()],
        "the provider is listed as the application's own"
    );

    converge.shutdown().await?;
    assert!(
        outside.cluster().get_version(pb::GetVersionRequest {}).await.is_err(),
        "shutdown stopped the listener"
    );
    Ok(())
}
