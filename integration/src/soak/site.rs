//! What the soak runs and breaks: a private PostgreSQL behind a fault proxy,
//! several converge processes on it, each behind a fault proxy for its
//! workers, and the workers (the conformance workers of several languages
//! and a noop worker), plus the faults applied to them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::process::{Child, Command};

use crate::faultproxy::FaultProxy;
use crate::languages::{Language, command_like};
use crate::postgres::PrivateServer;
use crate::processes::{binary, connect_when_up, converge_process_with, free_local_addr, signal};

/// One converge process and the proxy its workers connect through.
struct Converge {
    addr: String,
    log: PathBuf,
    child: Option<Child>,
    worker_proxy: FaultProxy,
}

/// One worker process: how to start it again, and the running one.
struct Worker {
    name: String,
    base: Command,
    child: Option<Child>,
}

/// A fault the soak injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// SIGKILL of a converge process, restarted after a moment.
    KillConverge,
    /// SIGTERM of a converge process (a drain), restarted once it exited.
    TermConverge,
    /// SIGKILL of a worker process, restarted after a moment.
    KillWorker,
    /// SIGTERM of a worker process (its drain), restarted once it exited.
    TermWorker,
    /// `pg_ctl stop -m fast`, started again after a moment.
    PostgresFastRestart,
    /// SIGKILL of the postmaster (a crash: unlogged tables are reset).
    PostgresCrash,
    /// Every connection between converge and PostgreSQL dropped.
    DatabaseDrop,
    /// The connections between converge and PostgreSQL stalled for 1-4 s.
    DatabaseStall,
    /// Every connection between the workers and one converge process dropped.
    WorkerLinkDrop,
    /// The connections between the workers and one converge process stalled for 1-4 s.
    WorkerLinkStall,
}

/// Every fault, in the order of their declaration.
pub const FAULTS: [Fault; 10] = [
    Fault::KillConverge,
    Fault::TermConverge,
    Fault::KillWorker,
    Fault::TermWorker,
    Fault::PostgresFastRestart,
    Fault::PostgresCrash,
    Fault::DatabaseDrop,
    Fault::DatabaseStall,
    Fault::WorkerLinkDrop,
    Fault::WorkerLinkStall,
];

/// Deals faults in rounds: each round is every fault once, shuffled, so a
/// short run still injects every kind.
#[derive(Debug, Default)]
pub struct Deck(Vec<Fault>);

impl Deck {
    /// The next fault.
    pub fn deal(&mut self, rng: &mut impl rand::Rng) -> Fault {
        if self.0.is_empty() {
            self.0 = FAULTS.to_vec();
            // Fisher-Yates.
            for i in (1..self.0.len()).rev() {
                self.0.swap(i, rng.random_range(0..=i));
            }
        }
        self.0.pop().unwrap_or(Fault::KillWorker)
    }
}

/// The running system.
pub struct Site {
    scratch: tempfile::TempDir,
    database: PrivateServer,
    database_proxy: FaultProxy,
    /// Straight to PostgreSQL (not through the proxy): the checks' view.
    pool: PgPool,
    converge: Vec<Converge>,
    workers: Vec<Worker>,
}

impl Site {
    /// Starts PostgreSQL, `processes` converge processes and their proxies.
    pub async fn start(processes: usize) -> anyhow::Result<Self> {
        let scratch = tempfile::tempdir()?;
        let database = PrivateServer::primary().await?;
        converge_service::db::ensure_database(&database.connect_options("postgres")?, "converge").await?;
        let database_proxy = FaultProxy::start(format!("127.0.0.1:{}", database.port()).parse()?).await?;
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(database.connect_options("converge")?)
            .await?;
        let mut site = Self {
            scratch,
            database,
            database_proxy,
            pool,
            converge: Vec::new(),
            workers: Vec::new(),
        };
        for i in 0..processes.max(1) {
            let addr = free_local_addr()?;
            let worker_proxy = FaultProxy::start(addr.parse()?).await?;
            site.converge.push(Converge {
                log: site.scratch.path().join(format!("converge-{i}.log")),
                addr,
                child: None,
                worker_proxy,
            });
            site.start_converge(i).await?;
        }
        Ok(site)
    }

    /// The scratch directory (logs, the workers' log).
    pub fn scratch(&self) -> &Path {
        self.scratch.path()
    }

    /// The checks' connection pool (straight to PostgreSQL).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The `http://` addresses of the converge processes (for the API).
    pub fn api_addresses(&self) -> Vec<String> {
        self.converge.iter().map(|c| format!("http://{}", c.addr)).collect()
    }

    /// The `http://` address workers use to reach process `i` (its proxy).
    pub fn worker_address(&self, i: usize) -> String {
        let proxy = &self.converge[i % self.converge.len()].worker_proxy;
        format!("http://{}", proxy.addr())
    }

    fn database_url(&self) -> anyhow::Result<String> {
        // The same URL with the proxy's port.
        let direct = self.database.url("converge")?;
        let port = format!(":{}/", self.database.port());
        anyhow::ensure!(direct.contains(&port), "unexpected database URL shape");
        Ok(direct.replacen(&port, &format!(":{}/", self.database_proxy.addr().port()), 1))
    }

    async fn start_converge(&mut self, i: usize) -> anyhow::Result<()> {
        let url = self.database_url()?;
        let slot = &mut self.converge[i];
        let child = converge_process_with(
            &url,
            &slot.addr,
            &slot.log,
            &[("SHUTDOWN_TIMEOUT_SECS", "5"), ("LOG_LEVEL", "warn")],
        )?;
        slot.child = Some(child);
        connect_when_up(&format!("http://{}", slot.addr)).await?;
        Ok(())
    }

    /// Adds a worker started by `base` (kept to start it again) and starts it.
    pub fn add_worker(&mut self, name: String, base: Command) -> anyhow::Result<()> {
        let mut worker = Worker {
            name,
            base,
            child: None,
        };
        worker.child = Some(spawn(
            &mut command_like(&worker.base),
            self.scratch.path(),
            &worker.name,
        )?);
        self.workers.push(worker);
        Ok(())
    }

    /// The base command of `language`'s conformance worker on process `i`,
    /// logging its handlers to `log`.
    pub async fn conformance_worker(&self, language: Language, i: usize, log: &Path) -> anyhow::Result<Command> {
        let mut command = language.command(self.scratch.path()).await?;
        command
            .env("CONVERGE_BROKER_ADDR", self.worker_address(i))
            .env("CONFORMANCE_MAX_PARALLEL", "8")
            .env("CONFORMANCE_DRAIN_TIMEOUT_MS", "5000")
            .env("CONFORMANCE_LOG", log)
            .env("LOG_LEVEL", "warn");
        Ok(command)
    }

    /// The base command of a noop worker on process `i` serving `kinds`.
    pub fn noop_worker(&self, i: usize, kinds: &str) -> anyhow::Result<Command> {
        let mut command = Command::new(binary("converge-noop-worker")?);
        command
            .env("BROKER_ADDR", self.worker_address(i))
            .env("WORKER_KINDS", kinds)
            .env("WORKER_MAX_PARALLEL", "16")
            .env("WORKER_DRAIN_TIMEOUT_SECS", "5")
            .env("LOG_LEVEL", "error");
        Ok(command)
    }

    /// Injects `fault` (on a process, worker or link drawn with `rng`) and
    /// undoes it: when this returns, everything runs again. Returns what
    /// was hit.
    pub async fn inject(&mut self, fault: Fault, rng: &mut impl rand::Rng) -> anyhow::Result<String> {
        let converge = rng.random_range(0..self.converge.len());
        let worker = rng.random_range(0..self.workers.len().max(1));
        let pause = Duration::from_millis(rng.random_range(300..2500));
        let stall = Duration::from_millis(rng.random_range(1000..4000));
        match fault {
            Fault::KillConverge | Fault::TermConverge => {
                let slot = &mut self.converge[converge];
                if let Some(mut child) = slot.child.take() {
                    if fault == Fault::KillConverge {
                        child.kill().await?;
                    } else {
                        signal(&child, Signal::SIGTERM)?;
                        // The drain is bounded by SHUTDOWN_TIMEOUT_SECS (5 s).
                        match tokio::time::timeout(Duration::from_secs(30), child.wait()).await {
                            Ok(status) => {
                                let status = status?;
                                anyhow::ensure!(
                                    status.success(),
                                    "converge-{converge} exited with {status} after SIGTERM"
                                );
                            }
                            Err(_) => anyhow::bail!("converge-{converge} did not exit within 30 s of SIGTERM"),
                        }
                    }
                }
                tokio::time::sleep(pause).await;
                self.start_converge(converge).await?;
                Ok(format!("converge-{converge}"))
            }
            Fault::KillWorker | Fault::TermWorker => {
                let Some(slot) = self.workers.get_mut(worker) else {
                    return Ok("no worker".into());
                };
                if let Some(mut child) = slot.child.take() {
                    if fault == Fault::KillWorker {
                        child.kill().await?;
                    } else {
                        signal(&child, Signal::SIGTERM)?;
                        if tokio::time::timeout(Duration::from_secs(30), child.wait())
                            .await
                            .is_err()
                        {
                            child.kill().await?;
                            anyhow::bail!("worker {} did not exit within 30 s of SIGTERM", slot.name);
                        }
                    }
                }
                tokio::time::sleep(pause).await;
                slot.child = Some(spawn(&mut command_like(&slot.base), self.scratch.path(), &slot.name)?);
                Ok(slot.name.clone())
            }
            Fault::PostgresFastRestart => {
                self.database.stop().await?;
                tokio::time::sleep(pause).await;
                self.database.start().await?;
                Ok("postgres".into())
            }
            Fault::PostgresCrash => {
                self.database.kill().await?;
                tokio::time::sleep(pause).await;
                self.database.start().await?;
                Ok("postgres".into())
            }
            Fault::DatabaseDrop => {
                self.database_proxy.drop_connections();
                Ok("converge-postgres links".into())
            }
            Fault::DatabaseStall => {
                self.database_proxy.stall(true);
                tokio::time::sleep(stall).await;
                self.database_proxy.stall(false);
                Ok(format!("converge-postgres links for {} ms", stall.as_millis()))
            }
            Fault::WorkerLinkDrop => {
                self.converge[converge].worker_proxy.drop_connections();
                Ok(format!("worker links of converge-{converge}"))
            }
            Fault::WorkerLinkStall => {
                let proxy = &self.converge[converge].worker_proxy;
                proxy.stall(true);
                tokio::time::sleep(stall).await;
                proxy.stall(false);
                Ok(format!(
                    "worker links of converge-{converge} for {} ms",
                    stall.as_millis()
                ))
            }
        }
    }

    /// Whether every process is still running (none exited by itself).
    pub fn exited(&mut self) -> Vec<String> {
        let mut gone = Vec::new();
        for (i, slot) in self.converge.iter_mut().enumerate() {
            if let Some(child) = slot.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                gone.push(format!("converge-{i} exited by itself ({status})"));
            }
        }
        for slot in &mut self.workers {
            if let Some(child) = slot.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                gone.push(format!("worker {} exited by itself ({status})", slot.name));
            }
        }
        gone
    }

    /// The last lines of converge process `i`'s log (for a failure report).
    pub fn converge_log_tail(&self, i: usize, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.converge[i].log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Keeps the scratch directory (logs, the workers' log) after the run,
    /// for a report with violations; returns where it is.
    pub fn keep_scratch(self) -> PathBuf {
        self.scratch.keep()
    }

    /// The number of converge processes.
    pub fn processes(&self) -> usize {
        self.converge.len()
    }
}

fn spawn(command: &mut Command, scratch: &Path, name: &str) -> anyhow::Result<Child> {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(scratch.join(format!("{name}.stderr")))?;
    Ok(command.stderr(stderr).spawn()?)
}
