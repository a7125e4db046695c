//! PostgreSQL servers of a test's own, to stop, crash and restart under a
//! running converge: a primary, and streaming standbys cloned from it with
//! `pg_basebackup`. They run through the embedded launcher (as the
//! `postgres` user when the tests run as root) in a directory under the
//! system temp dir, removed when the [`PrivateServer`] that created it is
//! dropped.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context as _;
use converge_service::db::embedded::{EmbeddedOptions, EmbeddedPostgres, SUPERUSER, find_bindir};
use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, User};
use sqlx::postgres::PgConnectOptions;

/// Longest a fast shutdown may take.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// One PostgreSQL server in a directory of its own, on a fixed loopback port
/// that survives restarts.
pub struct PrivateServer {
    options: EmbeddedOptions,
    server: Option<EmbeddedPostgres>,
    /// Removed on drop (the root of the primary; a standby lives inside it).
    owned_root: Option<PathBuf>,
}

impl PrivateServer {
    /// Initialises and starts a primary that standbys can stream from.
    pub async fn primary() -> anyhow::Result<Self> {
        let root = std::env::temp_dir()
            .join("converge-private-pg")
            .join(uuid::Uuid::new_v4().simple().to_string());
        let options = EmbeddedOptions {
            dir: root.join("primary"),
            ephemeral: true,
            port: Some(free_port()?),
            settings: vec![
                // A crash must not lose a commit converge has answered for:
                // the ephemeral default turns synchronous commit off.
                ("synchronous_commit".into(), "on".into()),
                ("wal_level".into(), "replica".into()),
                ("max_wal_senders".into(), "4".into()),
                ("max_connections".into(), "100".into()),
            ],
        };
        let mut server = Self {
            options,
            server: None,
            owned_root: Some(root),
        };
        server.start().await?;
        Ok(server)
    }

    /// Clones this (running) primary with `pg_basebackup -R` and starts the
    /// copy as a hot standby streaming from it.
    pub async fn standby(&self) -> anyhow::Result<Self> {
        let dir = self
            .options
            .dir
            .parent()
            .map(|root| root.join(format!("standby-{}", uuid::Uuid::new_v4().simple())))
            .context("the primary has no parent directory")?;
        std::fs::create_dir_all(&dir)?;
        // The password of the superuser is the primary's: it is a copy.
        std::fs::copy(self.options.dir.join("password"), dir.join("password"))?;
        let owner = server_user()?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
        }
        let password = std::fs::read_to_string(self.options.dir.join("password"))?;
        let mut backup = Command::new(find_bindir()?.join("pg_basebackup"));
        backup
            .args(["-h", "127.0.0.1", "-p", &self.port().to_string(), "-U", SUPERUSER])
            .arg("-D")
            .arg(dir.join("pgdata"))
            .args(["-R", "-X", "stream", "-c", "fast", "--no-sync"])
            .env("PGPASSWORD", password.trim());
        if let Some((uid, gid)) = owner {
            backup.uid(uid).gid(gid);
        }
        let output = tokio::task::spawn_blocking(move || backup.output()).await??;
        anyhow::ensure!(
            output.status.success(),
            "pg_basebackup failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let options = EmbeddedOptions {
            dir,
            ephemeral: true,
            port: Some(free_port()?),
            settings: vec![("hot_standby".into(), "on".into())],
        };
        let mut standby = Self {
            options,
            server: None,
            owned_root: None,
        };
        standby.start().await?;
        Ok(standby)
    }

    /// Starts the server (again), on the same port as before.
    pub async fn start(&mut self) -> anyhow::Result<()> {
        anyhow::ensure!(self.server.is_none(), "the server is running");
        let options = self.options.clone();
        let mut last = None;
        // After a crash, the old server's backends may take a moment to go.
        for _ in 0..20 {
            let launch = options.clone();
            match tokio::task::spawn_blocking(move || EmbeddedPostgres::start(&launch)).await? {
                Ok(server) => {
                    self.server = Some(server);
                    return Ok(());
                }
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Err(last
            .map(anyhow::Error::from)
            .unwrap_or_else(|| anyhow::anyhow!("not started")))
    }

    /// Stops the server with a fast shutdown (`pg_ctl stop -m fast`) and waits.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        let server = self.server.take().context("the server is not running")?;
        tokio::task::spawn_blocking(move || server.stop(STOP_TIMEOUT)).await??;
        Ok(())
    }

    /// Kills the postmaster with SIGKILL (a crash) and waits until it is gone.
    pub async fn kill(&mut self) -> anyhow::Result<()> {
        let mut server = self.server.take().context("the server is not running")?;
        let pidfile = std::fs::read_to_string(self.options.dir.join("pgdata/postmaster.pid"))?;
        let pid: i32 = pidfile.lines().next().context("empty pid file")?.trim().parse()?;
        kill(Pid::from_raw(pid), Signal::SIGKILL)?;
        let deadline = tokio::time::Instant::now() + STOP_TIMEOUT;
        while !server.has_exited() {
            anyhow::ensure!(tokio::time::Instant::now() < deadline, "the killed server did not exit");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// The loopback TCP port.
    pub fn port(&self) -> u16 {
        self.options.port.unwrap_or_default()
    }

    /// A `postgres://` URL of `database` on this server (TCP on loopback).
    pub fn url(&self, database: &str) -> anyhow::Result<String> {
        Ok(self.running()?.tcp_url(database))
    }

    /// Connection options for `database` over the private socket.
    pub fn connect_options(&self, database: &str) -> anyhow::Result<PgConnectOptions> {
        Ok(self.running()?.connect_options(database))
    }

    fn running(&self) -> anyhow::Result<&EmbeddedPostgres> {
        self.server.as_ref().context("the server is not running")
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.options.dir.join("postgres.log")).unwrap_or_default()
    }

    /// The cluster directory.
    pub fn dir(&self) -> &Path {
        &self.options.dir
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            let _ = server.stop(STOP_TIMEOUT);
        }
        if let Some(root) = &self.owned_root {
            let _ = std::fs::remove_dir_all(root);
        }
    }
}

/// The uid and gid the server runs as when the tests run as root.
fn server_user() -> anyhow::Result<Option<(u32, u32)>> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let user = User::from_name(SUPERUSER)?.context("no postgres system user")?;
    Ok(Some((user.uid.as_raw(), user.gid.as_raw())))
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
