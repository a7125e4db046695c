//! The real `converge` binary as an operator runs it: embedded default,
//! signals, restarts, `DATABASE_URL`, concurrent `converge migrate`, and
//! configuration errors.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use converge_service::db::migrate::MIGRATOR;
use converge_service::testing::{TestDatabase, empty_database_url};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};
use tokio::process::{Child, Command};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

const BIN: &str = env!("CARGO_BIN_EXE_converge");

/// A scratch directory the `postgres` user can traverse (tempdirs are 0700).
fn scratch_dir() -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new().prefix("converge-bin-").tempdir()?;
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))?;
    Ok(dir)
}

fn free_addr() -> anyhow::Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.to_string())
}

/// A `converge` process with its stderr captured to a file.
struct Converge {
    child: Child,
    addr: String,
    log: PathBuf,
    args: Vec<String>,
    envs: Vec<(String, String)>,
}

impl Converge {
    fn spawn(args: &[&str], envs: &[(&str, &str)], log: PathBuf) -> anyhow::Result<Self> {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let envs: Vec<(String, String)> = envs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let (child, addr) = Self::launch(&args, &envs, &log)?;
        Ok(Self {
            child,
            addr,
            log,
            args,
            envs,
        })
    }

    /// Starts the process on a fresh free address.
    fn launch(args: &[String], envs: &[(String, String)], log: &Path) -> anyhow::Result<(Child, String)> {
        let addr = free_addr()?;
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env_remove("DATABASE_URL")
            .env("LISTEN_ADDR", &addr)
            .env("HEALTH_ADDR", "127.0.0.1:0")
            .env("LOG_FORMAT", "json")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(fs::File::create(log)?))
            .kill_on_drop(true);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        Ok((cmd.spawn()?, addr))
    }

    fn embedded(data_dir: &Path, log: PathBuf) -> anyhow::Result<Self> {
        let dir = data_dir.to_string_lossy().into_owned();
        Self::spawn(&["serve", "--data-dir", &dir], &[], log)
    }

    fn pid(&self) -> anyhow::Result<Pid> {
        let id = self
            .child
            .id()
            .ok_or_else(|| anyhow::anyhow!("process already reaped"))?;
        Ok(Pid::from_raw(i32::try_from(id)?))
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the health check answers SERVING. The listen address is
    /// picked free before the process binds it, so another process (a
    /// parallel test's PostgreSQL, say) can take it meanwhile: then the
    /// process is started again on another address, a few times at most.
    async fn wait_serving(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut relaunches = 0;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                let log = self.log();
                if relaunches < 3 && log.contains("Address already in use") {
                    relaunches += 1;
                    (self.child, self.addr) = Self::launch(&self.args, &self.envs, &self.log)?;
                    continue;
                }
                anyhow::bail!("converge exited early ({status}):\n{log}");
            }
            let url = format!("http://{}", self.addr);
            if let Ok(channel) = tonic::transport::Endpoint::from_shared(url)?.connect().await {
                let answer = HealthClient::new(channel)
                    .check(HealthCheckRequest::default())
                    .await
                    .map(|r| r.into_inner().status());
                if answer.ok() == Some(ServingStatus::Serving) {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::bail!("converge never became SERVING:\n{}", self.log())
    }

    async fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<std::process::ExitStatus> {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => Ok(status?),
            Err(_) => anyhow::bail!("converge did not exit within {timeout:?}:\n{}", self.log()),
        }
    }
}

/// The postmaster pid and its children (the server's whole process tree).
fn server_processes(data_dir: &Path) -> anyhow::Result<Vec<i32>> {
    let pidfile = fs::read_to_string(data_dir.join("pgdata/postmaster.pid"))?;
    let postmaster: i32 = pidfile.lines().next().unwrap_or("").trim().parse()?;
    let mut pids = vec![postmaster];
    for entry in fs::read_dir("/proc")?.filter_map(Result::ok) {
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may contain spaces, so split after ')'.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let ppid: Option<i32> = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok());
        if ppid == Some(postmaster)
            && let Ok(pid) = entry.file_name().to_string_lossy().parse()
        {
            pids.push(pid);
        }
    }
    Ok(pids)
}

fn alive(pid: i32) -> bool {
    let state = fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim().chars().next()))
        .flatten();
    kill(Pid::from_raw(pid), None).is_ok() && state.is_some_and(|s| s != 'Z')
}

async fn wait_gone(pids: &[i32], timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if pids.iter().all(|p| !alive(*p)) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let left: Vec<i32> = pids.iter().copied().filter(|p| alive(*p)).collect();
    anyhow::bail!("postgres processes survived: {left:?}")
}

/// Connects to the embedded cluster's application database over its socket.
async fn embedded_connection(data_dir: &Path) -> anyhow::Result<sqlx::PgConnection> {
    let pidfile = fs::read_to_string(data_dir.join("pgdata/postmaster.pid"))?;
    let port: u16 = pidfile.lines().nth(3).unwrap_or("").trim().parse()?;
    Ok(PgConnectOptions::new()
        .socket(data_dir.join("run"))
        .port(port)
        .username("postgres")
        .database("converge")
        .connect()
        .await?)
}

#[tokio::test]
async fn embedded_default_serves_stops_on_sigterm_and_keeps_its_data() -> anyhow::Result<()> {
    let scratch = scratch_dir()?;
    let data_dir = scratch.path().join("data");

    let mut first = Converge::embedded(&data_dir, scratch.path().join("first.log"))?;
    first.wait_serving().await?;
    let server = server_processes(&data_dir)?;
    assert!(server.len() > 1, "postmaster and its helpers: {server:?}");
    let mut conn = embedded_connection(&data_dir).await?;
    sqlx::raw_sql("CREATE TABLE marker (note text); INSERT INTO marker VALUES ('kept')")
        .execute(&mut conn)
        .await?;
    conn.close().await?;

    kill(first.pid()?, Signal::SIGTERM)?;
    let status = first.wait_exit(Duration::from_secs(15)).await?;
    assert!(status.success(), "exit status {status}:\n{}", first.log());
    wait_gone(&server, Duration::from_secs(5)).await?;

    // A second start reuses the cluster (no initdb) and its data.
    let mut second = Converge::embedded(&data_dir, scratch.path().join("second.log"))?;
    second.wait_serving().await?;
    let mut conn = embedded_connection(&data_dir).await?;
    let note: String = sqlx::query_scalar("SELECT note FROM marker")
        .fetch_one(&mut conn)
        .await?;
    assert_eq!(note, "kept");
    conn.close().await?;
    let server = server_processes(&data_dir)?;
    kill(second.pid()?, Signal::SIGINT)?;
    let status = second.wait_exit(Duration::from_secs(15)).await?;
    assert!(status.success(), "exit status {status}:\n{}", second.log());
    wait_gone(&server, Duration::from_secs(5)).await
}

/// Starts converge on the embedded cluster in `scratch/data` and SIGKILLs
/// it once it serves; returns when its PostgreSQL has gone too.
async fn killed_while_serving(scratch: &Path) -> anyhow::Result<PathBuf> {
    let data_dir = scratch.join("data");
    let mut first = Converge::embedded(&data_dir, scratch.join("first.log"))?;
    first.wait_serving().await?;
    let server = server_processes(&data_dir)?;
    kill(first.pid()?, Signal::SIGKILL)?;
    first.wait_exit(Duration::from_secs(5)).await?;
    wait_gone(&server, Duration::from_secs(15)).await?;
    Ok(data_dir)
}

#[tokio::test]
async fn a_killed_converge_takes_its_postgres_down_and_restarts_cleanly() -> anyhow::Result<()> {
    let scratch = scratch_dir()?;
    let data_dir = killed_while_serving(scratch.path()).await?;

    let mut second = Converge::embedded(&data_dir, scratch.path().join("second.log"))?;
    second.wait_serving().await?;
    kill(second.pid()?, Signal::SIGTERM)?;
    let status = second.wait_exit(Duration::from_secs(15)).await?;
    assert!(status.success(), "exit {status}:\n{}", second.log());
    Ok(())
}

/// The registered members as `ListClusterMembers` shows them: pid and shard
/// range (lo, hi) of each, ordered by pid.
async fn members(addr: &str) -> anyhow::Result<Vec<(i32, Option<(i32, i32)>)>> {
    use converge_proto::v1::ListClusterMembersRequest;
    use converge_proto::v1::cluster_service_client::ClusterServiceClient;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let listed = ClusterServiceClient::new(channel)
        .list_cluster_members(ListClusterMembersRequest::default())
        .await?
        .into_inner();
    let mut members: Vec<_> = listed
        .members
        .into_iter()
        .map(|m| (m.pid, m.shard_range.map(|r| (r.lo, r.hi))))
        .collect();
    members.sort();
    Ok(members)
}

#[tokio::test]
async fn a_restarted_converge_takes_its_predecessors_shards_at_once() -> anyhow::Result<()> {
    let scratch = scratch_dir()?;
    let data_dir = killed_while_serving(scratch.path()).await?;

    // The predecessor's heartbeat is seconds old, well inside the liveness
    // window, but it owned this data directory: the successor knows it is
    // gone and holds every shard from the start.
    let mut second = Converge::embedded(&data_dir, scratch.path().join("second.log"))?;
    second.wait_serving().await?;
    let pid = i32::try_from(second.child.id().unwrap_or_default())?;
    assert_eq!(
        members(&second.addr).await?,
        [(pid, Some((0, 255)))],
        "{}",
        second.log()
    );
    kill(second.pid()?, Signal::SIGTERM)?;
    second.wait_exit(Duration::from_secs(15)).await?;
    Ok(())
}

#[tokio::test]
async fn only_a_member_with_the_same_identity_is_taken_over() -> anyhow::Result<()> {
    let scratch = scratch_dir()?;
    let url = empty_database_url().await?;
    let start = |identity: Option<&str>, log: &str| {
        let mut envs = vec![("DATABASE_URL", url.as_str())];
        if let Some(identity) = identity {
            envs.push(("MEMBER_IDENTITY", identity));
        }
        Converge::spawn(&["serve"], &envs, scratch.path().join(log))
    };
    let mut a = start(Some("pod-a"), "a.log")?;
    a.wait_serving().await?;
    let mut b = start(Some("pod-b"), "b.log")?;
    b.wait_serving().await?;
    let mut anonymous = start(None, "anonymous.log")?;
    anonymous.wait_serving().await?;
    let pid_of = |c: &Converge| i32::try_from(c.child.id().unwrap_or_default());
    let (pid_b, pid_anonymous) = (pid_of(&b)?, pid_of(&anonymous)?);
    kill(a.pid()?, Signal::SIGKILL)?;
    a.wait_exit(Duration::from_secs(5)).await?;

    let mut successor = start(Some("pod-a"), "a2.log")?;
    successor.wait_serving().await?;
    let pid_successor = pid_of(&successor)?;
    let listed: Vec<i32> = members(&successor.addr)
        .await?
        .into_iter()
        .map(|(pid, _)| pid)
        .collect();
    let mut expected = vec![pid_b, pid_anonymous, pid_successor];
    expected.sort();
    // pod-a's predecessor is gone at once; pod-b and the member without an
    // identity stay (they are alive, and nothing proves otherwise).
    assert_eq!(listed, expected);
    for mut process in [b, anonymous, successor] {
        kill(process.pid()?, Signal::SIGTERM)?;
        process.wait_exit(Duration::from_secs(15)).await?;
    }
    Ok(())
}

#[tokio::test]
async fn database_url_replaces_the_embedded_cluster() -> anyhow::Result<()> {
    let scratch = scratch_dir()?;
    let url = empty_database_url().await?;
    let data_dir = scratch.path().join("unused");
    let dir = data_dir.to_string_lossy().into_owned();
    let mut converge = Converge::spawn(
        &["--data-dir", &dir],
        &[("DATABASE_URL", &url)],
        scratch.path().join("url.log"),
    )?;
    converge.wait_serving().await?;
    assert!(!data_dir.exists(), "no embedded cluster may be created");

    let mut conn = sqlx::PgConnection::connect(&url).await?;
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations")
        .fetch_one(&mut conn)
        .await?;
    assert_eq!(applied, i64::try_from(MIGRATOR.iter().count())?);
    let members: i64 = sqlx::query_scalar("SELECT count(*) FROM cluster_members")
        .fetch_one(&mut conn)
        .await?;
    assert_eq!(members, 1);

    kill(converge.pid()?, Signal::SIGTERM)?;
    assert!(converge.wait_exit(Duration::from_secs(15)).await?.success());
    let members: i64 = sqlx::query_scalar("SELECT count(*) FROM cluster_members")
        .fetch_one(&mut conn)
        .await?;
    assert_eq!(members, 0, "a graceful stop leaves the registry");
    Ok(())
}

/// The `applied` figure a `converge migrate` run logged.
fn applied_from_log(log: &str) -> Option<u64> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|event| event["message"] == "migrations are up to date")
        .and_then(|event| event["applied"].as_u64())
}

#[tokio::test]
async fn concurrent_migrate_runs_both_succeed_and_apply_once() -> anyhow::Result<()> {
    let scratch = scratch_dir()?;
    let url = empty_database_url().await?;
    let env = [("DATABASE_URL", url.as_str())];
    let mut one = Converge::spawn(&["migrate"], &env, scratch.path().join("one.log"))?;
    let mut two = Converge::spawn(&["migrate"], &env, scratch.path().join("two.log"))?;
    let (a, b) = (
        one.wait_exit(Duration::from_secs(60)).await?,
        two.wait_exit(Duration::from_secs(60)).await?,
    );
    assert!(a.success(), "{}", one.log());
    assert!(b.success(), "{}", two.log());

    let total = u64::try_from(MIGRATOR.iter().count())?;
    let mut applied = [applied_from_log(&one.log()), applied_from_log(&two.log())];
    applied.sort();
    assert_eq!(
        applied,
        [Some(0), Some(total)],
        "one run applies, the other finds nothing to do"
    );

    let mut conn = sqlx::PgConnection::connect(&url).await?;
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations")
        .fetch_one(&mut conn)
        .await?;
    assert_eq!(u64::try_from(rows)?, total);

    // Migrating a migrated database is a no-op.
    let mut again = Converge::spawn(&["migrate"], &env, scratch.path().join("again.log"))?;
    assert!(again.wait_exit(Duration::from_secs(60)).await?.success());
    assert_eq!(applied_from_log(&again.log()), Some(0));
    Ok(())
}

/// Arguments, environment, and the text the error must contain.
type ConfigCase<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

#[tokio::test]
async fn invalid_configuration_fails_fast_with_a_clear_message() -> anyhow::Result<()> {
    let scratch = scratch_dir()?;
    let bad_pem = scratch.path().join("bad.pem");
    std::fs::write(&bad_pem, "not a certificate")?;
    let bad_pem = bad_pem.to_string_lossy().into_owned();
    let missing = scratch.path().join("missing.pem").to_string_lossy().into_owned();
    let cases: [ConfigCase<'_>; 11] = [
        (&["--role", "boss"], &[], "invalid value 'boss'"),
        (
            &[],
            &[("LISTEN_ADDR", "https://127.0.0.1:0")],
            "LISTEN_ADDR is https:// but TLS_CERT_FILE and TLS_KEY_FILE are not set",
        ),
        (&[], &[("TLS_CERT_FILE", "c.pem")], "TLS needs both"),
        (
            &[],
            &[("TLS_CLIENT_CA_FILE", "ca.pem")],
            "TLS_CLIENT_CA_FILE is set without TLS",
        ),
        (
            &[],
            &[("TLS_CERT_FILE", &missing), ("TLS_KEY_FILE", &missing)],
            "TLS: cannot read",
        ),
        (
            &[],
            &[("TLS_CERT_FILE", &bad_pem), ("TLS_KEY_FILE", &bad_pem)],
            "holds no PEM certificate",
        ),
        (&[], &[("LISTEN_ADDR", "nowhere")], "--listen-addr"),
        (&[], &[("LOG_FORMAT", "yaml")], "invalid value 'yaml'"),
        (&[], &[("METRICS_ADDR", "everywhere")], "--metrics-addr"),
        (
            &[],
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url")],
            "cannot set up the OTLP exporter",
        ),
        (
            &["migrate"],
            &[("DATABASE_URL", "mysql://x")],
            "DATABASE_URL is not a valid PostgreSQL URL",
        ),
    ];
    for (i, (args, envs, expected)) in cases.into_iter().enumerate() {
        let mut converge = Converge::spawn(args, envs, scratch.path().join(format!("case{i}.log")))?;
        let status = converge.wait_exit(Duration::from_secs(10)).await?;
        assert!(!status.success(), "case {i} must fail");
        let log = converge.log();
        assert!(log.contains(expected), "case {i}: {log}");
        // Errors of the server's own checks are one line.
        if log.contains("converge: ") {
            assert_eq!(
                log.lines().filter(|l| l.starts_with("converge: ")).count(),
                1,
                "case {i}: {log}"
            );
        }
    }
    Ok(())
}

/// Runs `converge serve` with `envs` and its stderr on a pipe, in the
/// default text log format; returns the exit status and what it wrote.
async fn refused_boot(envs: &[(&str, &str)]) -> anyhow::Result<(std::process::ExitStatus, String)> {
    let mut cmd = Command::new(BIN);
    cmd.arg("serve")
        .env_remove("DATABASE_URL")
        .env_remove("LOG_FORMAT")
        .env_remove("NO_COLOR")
        .env("LISTEN_ADDR", free_addr()?)
        .env("HEALTH_ADDR", "127.0.0.1:0")
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(60), cmd.output()).await??;
    Ok((output.status, String::from_utf8_lossy(&output.stderr).into_owned()))
}

#[tokio::test]
async fn a_refused_boot_is_one_line_without_colour_codes_on_a_pipe() -> anyhow::Result<()> {
    let scratch = scratch_dir()?;
    let missing = scratch.path().join("missing.pem").to_string_lossy().into_owned();
    let data_dir = scratch.path().join("data").to_string_lossy().into_owned();
    // Nothing listens on a port that was free a moment ago: connecting is refused.
    let unreachable = format!("postgres://converge@{}/converge", free_addr()?);
    let cases: [(&[(&str, &str)], &str); 5] = [
        (&[("TLS_CERT_FILE", "c.pem")], "TLS needs both"),
        (
            &[("TLS_CERT_FILE", &missing), ("TLS_KEY_FILE", &missing)],
            "TLS: cannot read",
        ),
        (
            &[("DATABASE_URL", "mysql://x")],
            "DATABASE_URL is not a valid PostgreSQL URL",
        ),
        (&[("DATABASE_URL", &unreachable)], "cannot reach PostgreSQL"),
        (
            &[
                ("CONVERGE_DATA_DIR", &data_dir),
                ("CONVERGE_PG_BINDIR", "/nonexistent/bin"),
            ],
            "apt-get install postgresql",
        ),
    ];
    for (envs, expected) in cases {
        let (status, stderr) = refused_boot(envs).await?;
        assert_eq!(status.code(), Some(1), "{envs:?}: {stderr}");
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{envs:?}: one line, not {stderr:?}");
        assert!(lines[0].starts_with("converge: "), "{envs:?}: {stderr:?}");
        assert!(lines[0].contains(expected), "{envs:?}: {stderr:?}");
        assert!(
            !stderr.contains("\x1b["),
            "{envs:?}: colour codes on a pipe: {stderr:?}"
        );
    }

    // The log lines of a running server in a file are plain text too.
    let url = empty_database_url().await?;
    let mut converge = Converge::spawn(
        &[],
        &[("DATABASE_URL", &url), ("LOG_FORMAT", "text"), ("LOG_LEVEL", "info")],
        scratch.path().join("text.log"),
    )?;
    converge.wait_serving().await?;
    kill(converge.pid()?, Signal::SIGTERM)?;
    assert!(converge.wait_exit(Duration::from_secs(15)).await?.success());
    let log = converge.log();
    assert!(log.contains("converge is serving"), "{log}");
    assert!(!log.contains("\x1b["), "colour codes in a file: {log:?}");
    Ok(())
}

#[tokio::test]
async fn missing_postgres_binaries_are_a_one_line_error() -> anyhow::Result<()> {
    let scratch = scratch_dir()?;
    let dir = scratch.path().join("data").to_string_lossy().into_owned();
    let mut converge = Converge::spawn(
        &["--data-dir", &dir],
        &[("CONVERGE_PG_BINDIR", "/nonexistent/bin")],
        scratch.path().join("missing.log"),
    )?;
    let status = converge.wait_exit(Duration::from_secs(10)).await?;
    assert_eq!(status.code(), Some(1));
    let log = converge.log();
    let line = log
        .lines()
        .find(|l| l.starts_with("converge: "))
        .ok_or_else(|| anyhow::anyhow!("no error line in:\n{log}"))?;
    assert!(line.contains("apt-get install postgresql"), "{line}");
    assert!(line.contains("DATABASE_URL"), "{line}");
    Ok(())
}

#[tokio::test]
async fn the_harness_hands_out_isolated_migrated_databases() -> anyhow::Result<()> {
    let (a, b) = (TestDatabase::new().await?, TestDatabase::new().await?);
    assert_ne!(a.name(), b.name());
    sqlx::query("INSERT INTO cluster_members (member_id, role, version, hostname, pid, listen_addr) VALUES ('m', 'all', 'v', 'h', 1, 'a')")
        .execute(a.pool())
        .await?;
    let in_b: i64 = sqlx::query_scalar("SELECT count(*) FROM cluster_members")
        .fetch_one(b.pool())
        .await?;
    assert_eq!(in_b, 0);
    Ok(())
}

/// The README's first command: `converge dev` on the embedded default brings
/// the composition demo to Ready and (with --exit-when-ready) exits 0 after
/// printing the tree; its embedded PostgreSQL goes down with it.
#[tokio::test]
async fn dev_brings_the_demo_tree_to_ready_on_the_embedded_default() -> anyhow::Result<()> {
    let scratch = scratch_dir()?;
    let data_dir = scratch.path().join("data");
    let dir = data_dir.to_string_lossy().into_owned();
    let out = scratch.path().join("dev.out");
    let addr = free_addr()?;
    let mut child = Command::new(BIN)
        .args([
            "dev",
            "--data-dir",
            &dir,
            "--exit-when-ready",
            "--delay-ms",
            "20",
            "--timeout",
            "120",
        ])
        .env_remove("DATABASE_URL")
        .env("LISTEN_ADDR", &addr)
        .env("HEALTH_ADDR", "127.0.0.1:0")
        .stdin(Stdio::null())
        .stdout(Stdio::from(fs::File::create(&out)?))
        .stderr(Stdio::from(fs::File::create(scratch.path().join("dev.log"))?))
        .kill_on_drop(true)
        .spawn()?;
    let status = match tokio::time::timeout(Duration::from_secs(180), child.wait()).await {
        Ok(status) => status?,
        Err(_) => anyhow::bail!("converge dev did not finish:\n{}", fs::read_to_string(&out)?),
    };
    let printed = fs::read_to_string(&out)?;
    assert!(status.success(), "converge dev failed ({status}):\n{printed}");
    assert!(printed.contains("bom/demo is Ready"), "{printed}");
    assert!(printed.contains("11 of 11 children ready"), "{printed}");
    for kind in ["account", "tgw", "vpc", "route"] {
        assert!(printed.contains(kind), "{kind} missing from the summary:\n{printed}");
    }
    assert!(
        !data_dir.join("pgdata/postmaster.pid").exists(),
        "the embedded server stopped with converge"
    );
    Ok(())
}
