//! The container image (`deploy/image/build`), built and run with podman.
//!
//! The server flavour runs against a PostgreSQL the test starts: its probes
//! and gRPC health say SERVING, a resource applied with the `converge`
//! command line from the host reaches Ready with a worker on the host, and
//! SIGTERM drains it to exit 0 within the shutdown bound. The all-in-one
//! flavour runs the demo on its embedded PostgreSQL, published on a port
//! as the docs show. Both run with a read-only root filesystem as the
//! image's non-root user.
//!
//! The images are built from the `converge` binary of this build (the test
//! profile's): what is tested is the packaging; `deploy/image/build` without
//! `--binary` packages the release build. The Debian root filesystems are
//! cached outside the checkout, so a build after the first takes seconds;
//! the images keep their tags (`localhost/converge-test:server`,
//! `:all-in-one`) until the next run replaces them.
//!
//! The compose file (`deploy/compose/compose.yaml`) runs on these images
//! with podman-compose: PostgreSQL, a control process, two brokers with a
//! demo worker each, and the demo applied through the control process; the
//! demo's BOM becomes Ready and the registry lists the three members.
//!
//! Podman runs as root with settings these sandboxed machines need (runc,
//! cgroupfs, no default ulimits): `deploy/image/containers.conf`, given as
//! `CONTAINERS_CONF` here.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use converge_integration::api::wait_phase;
use converge_integration::eventually;
use converge_integration::postgres::PrivateServer;
use converge_integration::processes::{
    binary, connect_when_up, free_local_addr, http_get, noop_worker, repository_root, signal,
};
use converge_proto::v1::Phase;
use nix::sys::signal::Signal;
use tokio::process::Command;

/// The drain's bound in this test: `SHUTDOWN_TIMEOUT_SECS`.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// A podman command with the sandbox's settings.
fn podman() -> Command {
    let mut command = Command::new("podman");
    command
        .env(
            "CONTAINERS_CONF",
            repository_root().join("deploy/image/containers.conf"),
        )
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Runs a command to its end; its stdout, or an error with its output.
async fn output(command: &mut Command, what: &str) -> anyhow::Result<String> {
    let out = command.output().await?;
    anyhow::ensure!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The images of this test run, built once and shared by the tests.
static SERVER: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
static ALL_IN_ONE: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();

/// The image of `flavour`, built (once per test run) from this build's
/// binary under a fixed tag that replaces the previous run's image.
async fn image(flavour: &str) -> anyhow::Result<String> {
    let cell = if flavour == "server" { &SERVER } else { &ALL_IN_ONE };
    cell.get_or_try_init(|| build(flavour)).await.cloned()
}

async fn build(flavour: &str) -> anyhow::Result<String> {
    let tag = format!("localhost/converge-test:{flavour}");
    // The previous run's image goes (its layers with it, unless shared).
    let _ = podman().args(["rmi", "--force", &tag]).output().await;
    let converge = binary("converge")?;
    let mut command = Command::new(repository_root().join("deploy/image/build"));
    command
        .args(["--flavour", flavour, "--tag", &tag, "--binary"])
        .arg(&converge)
        .env(
            "CONTAINERS_CONF",
            repository_root().join("deploy/image/containers.conf"),
        )
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let began = Instant::now();
    let printed = output(&mut command, "deploy/image/build").await?;
    eprintln!("built {} in {:?}", printed.trim(), began.elapsed());
    anyhow::ensure!(printed.trim() == tag, "the build printed {printed:?}");
    check_config(&tag, flavour).await?;
    Ok(tag)
}

/// The image's configuration: user, entrypoint and labels are as documented.
async fn check_config(tag: &str, flavour: &str) -> anyhow::Result<()> {
    let text = output(podman().args(["image", "inspect", tag]), "podman image inspect").await?;
    let inspected: serde_json::Value = serde_json::from_str(&text)?;
    let config = &inspected[0]["Config"];
    assert_eq!(config["User"], "10001:10001", "{config}");
    assert_eq!(config["Entrypoint"][0], "/usr/local/bin/converge", "{config}");
    let labels = &config["Labels"];
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION"),
        "{labels}"
    );
    let revision = labels["org.opencontainers.image.revision"].as_str().unwrap_or_default();
    assert!(revision.len() >= 40, "revision label: {revision}");
    assert_eq!(labels["dev.converge.flavour"], flavour, "{labels}");
    let size = inspected[0]["Size"].as_u64().unwrap_or(0);
    eprintln!("{tag}: {} MB", size / 1_000_000);
    Ok(())
}

#[tokio::test]
async fn the_server_image_serves_reconciles_and_drains() -> anyhow::Result<()> {
    let image = image("server").await?;

    let database = PrivateServer::primary().await?;
    converge_service::db::ensure_database(&database.connect_options("postgres")?, "converge").await?;
    let url = database.url("converge")?;
    let addr = free_local_addr()?;
    let health = free_local_addr()?;
    let scratch = tempfile::tempdir()?;
    let log = scratch.path().join("container.log");
    // The host's network: the container reaches the test's PostgreSQL on
    // loopback, and the host reaches the container's listeners there.
    let timeout = SHUTDOWN_TIMEOUT.as_secs().to_string();
    let mut container = podman()
        .args(["run", "--rm", "--read-only", "--network", "host"])
        .args(["-e", &format!("DATABASE_URL={url}")])
        .args(["-e", &format!("LISTEN_ADDR={addr}")])
        .args(["-e", &format!("HEALTH_ADDR={health}")])
        .args(["-e", &format!("SHUTDOWN_TIMEOUT_SECS={timeout}")])
        .arg(&image)
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log)?))
        .spawn()?;
    let in_log = |e: anyhow::Error| with_log(e, &log);

    let client = connect_when_up(&format!("http://{addr}")).await.map_err(in_log)?;
    eventually(Duration::from_secs(10), || async {
        Ok(http_get(&health, "/readyz").await.ok().filter(|(code, _)| *code == 200))
    })
    .await
    .map_err(in_log)?;
    let status = tonic_health::pb::health_client::HealthClient::new(client.channel())
        .check(tonic_health::pb::HealthCheckRequest { service: String::new() })
        .await?
        .into_inner()
        .status;
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    // The command line on the host applies a kind and a resource; a worker on
    // the host makes it Ready.
    let converge = binary("converge")?;
    let server = format!("http://{addr}");
    output(
        Command::new(&converge)
            .args(["apply", "-f", "examples/noop/manifest.json", "--server", &server])
            .current_dir(repository_root())
            .stdin(Stdio::null()),
        "converge apply (kind)",
    )
    .await?;
    let mut apply = Command::new(&converge)
        .args(["apply", "-f", "-", "--server", &server])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    if let Some(mut stdin) = apply.stdin.take() {
        use tokio::io::AsyncWriteExt as _;
        stdin
            .write_all(br#"{"apiVersion": "converge.dev/v1", "type": "Resource", "kind": "noop", "kindVersion": 1, "name": "hello"}"#)
            .await?;
    }
    let applied = apply.wait_with_output().await?;
    anyhow::ensure!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    let mut worker = noop_worker(&server, 4, 0, &scratch.path().join("worked"))?;
    tokio::time::timeout(
        Duration::from_secs(30),
        wait_phase(&client, "noop", "hello", Phase::Ready),
    )
    .await
    .map_err(|_| in_log(anyhow::anyhow!("hello did not become Ready")))??;
    worker.kill().await?;

    // SIGTERM (podman passes it on): exit 0 within the drain's bound.
    let began = Instant::now();
    signal(&container, Signal::SIGTERM)?;
    let bound = SHUTDOWN_TIMEOUT + converge_service::server::SHUTDOWN_CLEANUP + Duration::from_secs(3);
    let exit = tokio::time::timeout(bound, container.wait())
        .await
        .map_err(|_| in_log(anyhow::anyhow!("the container ran on {bound:?} after SIGTERM")))??;
    assert!(exit.success(), "exited with {exit}");
    eprintln!("the container exited 0 {:?} after SIGTERM", began.elapsed());
    Ok(())
}

#[tokio::test]
async fn the_all_in_one_image_runs_the_demo() -> anyhow::Result<()> {
    let image = image("all-in-one").await?;
    // As the docs run it (`podman run -p 50051:50051 IMAGE dev`), on a free
    // host port, with a read-only root filesystem, until the demo's BOM is
    // Ready; the data directory is an anonymous volume.
    let port = free_local_addr()?.rsplit(':').next().unwrap_or_default().to_owned();
    let scratch = tempfile::tempdir()?;
    let log = scratch.path().join("container.log");
    let mut container = podman()
        .args(["run", "--rm", "--read-only", "-p", &format!("127.0.0.1:{port}:50051")])
        .arg(&image)
        .args(["dev", "--delay-ms", "20"])
        .stdout(Stdio::from(std::fs::File::create(
            scratch.path().join("container.out"),
        )?))
        .stderr(Stdio::from(std::fs::File::create(&log)?))
        .spawn()?;
    let server = format!("http://127.0.0.1:{port}");
    let client = connect_when_up(&server).await.map_err(|e| with_log(e, &log))?;
    tokio::time::timeout(
        Duration::from_secs(120),
        wait_phase(&client, "bom", "demo", Phase::Ready),
    )
    .await
    .map_err(|_| with_log(anyhow::anyhow!("the demo did not become Ready"), &log))??;
    // The host's command line sees the demo's tree.
    let tree = output(
        Command::new(binary("converge")?).args(["get", "resources", "-o", "name", "--server", &server]),
        "converge get resources",
    )
    .await?;
    assert!(tree.lines().count() >= 12, "{tree}");
    signal(&container, Signal::SIGTERM)?;
    let exit = tokio::time::timeout(Duration::from_secs(20), container.wait()).await??;
    assert!(exit.success(), "exited with {exit}");
    Ok(())
}

fn with_log(error: anyhow::Error, log: &Path) -> anyhow::Error {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(30).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    anyhow::anyhow!("{error}\ncontainer log:\n{}", tail.join("\n"))
}

/// Takes a compose project down (containers, its volume, its network) when dropped.
struct ComposeProject {
    name: String,
    file: std::path::PathBuf,
}

impl Drop for ComposeProject {
    fn drop(&mut self) {
        let conf = repository_root().join("deploy/image/containers.conf");
        let _ = std::process::Command::new("podman-compose")
            .env("CONTAINERS_CONF", &conf)
            .arg("-f")
            .arg(&self.file)
            .args(["-p", &self.name, "down", "-v"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::process::Command::new("podman")
            .env("CONTAINERS_CONF", &conf)
            .args(["network", "rm", "--force", &format!("{}_default", self.name)])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

#[tokio::test]
async fn compose_runs_a_control_two_brokers_and_the_demo() -> anyhow::Result<()> {
    let server_image = image("server").await?;
    let aio_image = image("all-in-one").await?;
    let file = repository_root().join("deploy/compose/compose.yaml");
    let project = ComposeProject {
        name: format!("converge-test-{}", std::process::id()),
        file: file.clone(),
    };
    let port_of = |addr: String| addr.rsplit(':').next().unwrap_or_default().to_owned();
    let api_port = port_of(free_local_addr()?);
    let health_port = port_of(free_local_addr()?);
    let bin_dir = binary("converge-demo-worker")?
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| anyhow::anyhow!("no binary directory"))?;
    output(
        Command::new("podman-compose")
            .env(
                "CONTAINERS_CONF",
                repository_root().join("deploy/image/containers.conf"),
            )
            .env("CONVERGE_IMAGE", &server_image)
            .env("CONVERGE_AIO_IMAGE", &aio_image)
            .env("CONVERGE_BIN_DIR", &bin_dir)
            .env("CONVERGE_API_PORT", &api_port)
            .env("CONVERGE_HEALTH_PORT", &health_port)
            .arg("-f")
            .arg(&file)
            .args(["-p", &project.name, "up", "-d"])
            .stdin(Stdio::null())
            .kill_on_drop(true),
        "podman-compose up",
    )
    .await?;
    let control = format!("{}_control_1", project.name);
    let logs = || async {
        podman()
            .args(["logs", "--tail", "20", &control])
            .output()
            .await
            .map(|o| {
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                )
            })
            .unwrap_or_default()
    };
    let server = format!("http://127.0.0.1:{api_port}");
    let client = match connect_when_up(&server).await {
        Ok(client) => client,
        Err(e) => anyhow::bail!("{e}; control's log:\n{}", logs().await),
    };
    if tokio::time::timeout(
        Duration::from_secs(120),
        wait_phase(&client, "bom", "demo", Phase::Ready),
    )
    .await
    .is_err()
    {
        anyhow::bail!("the demo's BOM was not Ready; control's log:\n{}", logs().await);
    }
    let health = format!("127.0.0.1:{health_port}");
    assert_eq!(http_get(&health, "/readyz").await?.0, 200);
    // The registry: the control process and both brokers, each broker with
    // its worker (workers are reported with each member's heartbeat, so a
    // worker that connected after the BOM got Ready shows up a beat later).
    use converge_proto::v1::MemberRole;
    let (control, broker) = (MemberRole::Control as i32, MemberRole::Broker as i32);
    let mut expected = vec![(control, 0), (broker, 1), (broker, 1)];
    expected.sort();
    eventually(Duration::from_secs(30), || async {
        let members = client
            .cluster()
            .list_cluster_members(converge_proto::v1::ListClusterMembersRequest::default())
            .await?
            .into_inner()
            .members;
        let mut roles: Vec<(i32, usize)> = members.iter().map(|m| (m.role, m.workers.len())).collect();
        roles.sort();
        Ok((roles == expected).then_some(roles))
    })
    .await
    .map_err(|e| anyhow::anyhow!("the registry did not list a control and two brokers with a worker each: {e}"))?;
    Ok(())
}
