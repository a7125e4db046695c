//! Real processes for crash tests: workspace binaries built next to the test
//! executable, a converge server on a given database, stdworker processes
//! running a test's program, and signals.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use converge_sdk::Client;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sqlx::PgPool;
use tokio::process::{Child, Command};

use crate::eventually;

/// The repository's root directory (the SDKs, examples and kinds live there).
pub fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Runs a build step; its output is shown only when it fails.
pub async fn run_checked(command: &mut Command) -> anyhow::Result<()> {
    let output = command.stdin(Stdio::null()).output().await?;
    anyhow::ensure!(
        output.status.success(),
        "{command:?} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// A binary built next to the running test (by `cargo test --workspace`)
/// or next to the running tool (`target/<profile>/converge-soak`).
pub fn binary(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let here = exe.parent().ok_or_else(|| anyhow::anyhow!("no target directory"))?;
    // A test runs from target/<profile>/deps, a tool from target/<profile>.
    let dir = if here.ends_with("deps") {
        here.parent().ok_or_else(|| anyhow::anyhow!("no target directory"))?
    } else {
        here
    };
    let path = dir.join(name);
    anyhow::ensure!(
        path.exists(),
        "{} is missing: build it with `cargo build --workspace --bins`",
        path.display()
    );
    Ok(path)
}

/// A loopback address (`127.0.0.1:port`) that was free a moment ago, for a
/// server process to listen on.
pub fn free_local_addr() -> anyhow::Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.to_string())
}

/// A converge server process on an existing database, logging to `log`.
pub fn converge_process(database_url: &str, addr: &str, log: &Path) -> anyhow::Result<Child> {
    converge_process_with(database_url, addr, log, &[])
}

/// Like [`converge_process`], with further settings in the environment
/// (`ROLE`, `MEMBER_IDENTITY`, ...; they may override `LOG_LEVEL`).
pub fn converge_process_with(
    database_url: &str,
    addr: &str,
    log: &Path,
    env: &[(&str, &str)],
) -> anyhow::Result<Child> {
    Ok(Command::new(binary("converge")?)
        .env("DATABASE_URL", database_url)
        .env("LISTEN_ADDR", addr)
        // Any free port: processes run side by side (a test may set one).
        .env("HEALTH_ADDR", "127.0.0.1:0")
        .env("LOG_LEVEL", "warn")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(log)?))
        .kill_on_drop(true)
        .spawn()?)
}

/// A `converge-noop-worker` process on `address` serving `noop` version 1:
/// at most `parallel` reactions at once, each sleeping `delay_ms`, each
/// finished one recorded as a line "<kind>/<name> <generation>" in `record`.
pub fn noop_worker(address: &str, parallel: usize, delay_ms: u64, record: &Path) -> anyhow::Result<Child> {
    noop_worker_with(address, "noop:1", parallel, delay_ms, record)
}

/// A `converge-noop-worker` process on `address` serving `kinds`
/// (`kind:version`, comma-separated), recording into `record` like
/// [`noop_worker`].
pub fn noop_worker_of(address: &str, kinds: &str, parallel: usize, record: &Path) -> anyhow::Result<Child> {
    noop_worker_with(address, kinds, parallel, 0, record)
}

fn noop_worker_with(
    address: &str,
    kinds: &str,
    parallel: usize,
    delay_ms: u64,
    record: &Path,
) -> anyhow::Result<Child> {
    Ok(Command::new(binary("converge-noop-worker")?)
        .env("BROKER_ADDR", address)
        .env("WORKER_KINDS", kinds)
        .env("WORKER_MAX_PARALLEL", parallel.to_string())
        .env("NOOP_DELAY_MS", delay_ms.to_string())
        .env("NOOP_RECORD", record)
        .env("WORKER_DRAIN_TIMEOUT_SECS", "2")
        .env("LOG_LEVEL", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?)
}

/// How often each "<kind>/<name> <generation>" was worked, from a noop
/// worker's record file (empty when the file does not exist yet).
pub fn worked(record: &Path) -> anyhow::Result<std::collections::HashMap<String, usize>> {
    let mut counts = std::collections::HashMap::new();
    let text = match std::fs::read_to_string(record) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e.into()),
    };
    for line in text.lines() {
        *counts.entry(line.to_owned()).or_default() += 1;
    }
    Ok(counts)
}

/// A `converge-stdworker` process on `address` that serves each of `kinds`
/// (`kind:version`) with the program `source`, written to `dir/program`
/// and made executable. The programs see `RECORD_DIR` (= `dir`) and the
/// `env` variables; `args` are further stdworker flags.
pub fn stdworker(
    address: &str,
    dir: &Path,
    source: &str,
    kinds: &[&str],
    env: &[(&str, &str)],
    args: &[&str],
) -> anyhow::Result<Child> {
    use std::os::unix::fs::PermissionsExt as _;
    let program = dir.join("program");
    std::fs::write(&program, source)?;
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755))?;
    let mut command = Command::new(binary("converge-stdworker")?);
    command.arg("--broker").arg(address);
    for kind in kinds {
        command.arg("--kind").arg(format!("{kind}={}", program.display()));
    }
    command.arg("--env").arg(format!("RECORD_DIR={}", dir.display()));
    for (name, value) in env {
        command.arg("--env").arg(format!("{name}={value}"));
    }
    Ok(command
        .args(args)
        .env("WORKER_DRAIN_TIMEOUT_SECS", "1")
        .env("LOG_LEVEL", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?)
}

/// Where a crash test runs converge processes one after another: one
/// database, one address, a scratch directory for their logs.
pub struct ProcessSite {
    scratch: tempfile::TempDir,
    url: String,
    addr: String,
}

impl ProcessSite {
    /// A site on `database` with a free loopback address.
    pub fn new(database: &crate::TestDatabase) -> anyhow::Result<Self> {
        Ok(Self {
            scratch: tempfile::tempdir()?,
            url: database.url()?,
            addr: free_local_addr()?,
        })
    }

    /// The `http://` address the processes listen on.
    pub fn address(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The scratch directory (logs and anything else a test writes).
    pub fn scratch(&self) -> &Path {
        self.scratch.path()
    }

    /// Starts a converge process logging to `<scratch>/<log>` and connects
    /// once it answers.
    pub async fn start(&self, log: &str) -> anyhow::Result<(Child, Client)> {
        let child = converge_process(&self.url, &self.addr, &self.scratch.path().join(log))?;
        let client = connect_when_up(&self.address()).await?;
        Ok((child, client))
    }
}

/// SIGTERMs a process (converge or a worker) and fails unless it drains and
/// exits 0 within 20 s.
pub async fn stop_cleanly(child: &mut Child) -> anyhow::Result<()> {
    signal(child, Signal::SIGTERM)?;
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait()).await??;
    anyhow::ensure!(status.success(), "the process exited with {status}");
    Ok(())
}

/// A client, once the server at `address` answers.
pub async fn connect_when_up(address: &str) -> anyhow::Result<Client> {
    eventually(Duration::from_secs(60), || async {
        match Client::connect(address.to_owned()).await {
            Ok(client) => {
                let up = client
                    .cluster()
                    .get_version(converge_proto::v1::GetVersionRequest {})
                    .await
                    .is_ok();
                Ok(up.then_some(client))
            }
            Err(_) => Ok(None),
        }
    })
    .await
}

/// One GET over plain HTTP/1.1 to `addr` (`HOST:PORT`): the status code
/// and the body.
pub async fn http_get(addr: &str, path: &str) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())
        .await?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw.as_str(), ""));
    let code = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((code, body.to_owned()))
}

/// Sends `sig` to a child process.
pub fn signal(child: &Child, sig: Signal) -> anyhow::Result<()> {
    let pid = child.id().ok_or_else(|| anyhow::anyhow!("process already gone"))?;
    kill(Pid::from_raw(i32::try_from(pid)?), sig)?;
    Ok(())
}

/// Leaves the database as a PostgreSQL crash would after a server was killed:
/// no backend of that server is left and every unlogged table is empty.
///
/// A killed client's backend runs on until it notices the closed socket, still
/// holding its locks; truncating under it can deadlock with its last
/// statement, so its backends are terminated (and waited for) first.
pub async fn crash_postgres_state(pool: &PgPool) -> anyhow::Result<()> {
    let server_backends = "FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'converge'";
    // A backend may exit by itself between the listing and the signal (then
    // pg_terminate_backend warns and returns false), so what counts is that
    // none is left afterwards.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT pg_terminate_backend(pid, 30000) {server_backends}"
    )))
    .execute(pool)
    .await?;
    eventually(Duration::from_secs(30), || async {
        let left: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) {server_backends}")))
            .fetch_one(pool)
            .await?;
        Ok((left == 0).then_some(()))
    })
    .await?;
    let unlogged: Option<String> = sqlx::query_scalar(
        "SELECT string_agg(c.oid::regclass::text, ', ')
           FROM pg_class c
          WHERE c.relpersistence = 'u' AND c.relkind IN ('r', 'p') AND NOT c.relispartition",
    )
    .fetch_one(pool)
    .await?;
    let unlogged = unlogged.ok_or_else(|| anyhow::anyhow!("no unlogged tables"))?;
    sqlx::query(sqlx::AssertSqlSafe(format!("TRUNCATE {unlogged}")))
        .execute(pool)
        .await?;
    Ok(())
}
