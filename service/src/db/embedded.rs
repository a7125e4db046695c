//! A private PostgreSQL cluster run as a supervised child process.
//!
//! Used as the default database when no `DATABASE_URL` is configured, and by the
//! test harness (one cluster per test process). The cluster lives in one
//! directory:
//!
//! ```text
//! <dir>/pgdata      the PostgreSQL data directory (owned by `postgres` when run as root)
//! <dir>/run         the private Unix socket directory (mode 0700)
//! <dir>/password    the superuser password for TCP connections on loopback (mode 0600)
//! <dir>/postgres.log the server's log
//! ```
//!
//! The server is not started directly: a tiny `sh` supervisor starts it and
//! holds a pipe from this process. When the pipe closes — an orderly stop, or
//! this process dying in any way, SIGKILL included — the supervisor asks
//! PostgreSQL for a fast shutdown. So no server outlives its owner, and the
//! supervisor exits exactly when the server does, which is how a crash of the
//! server is noticed.
//!
//! Everything here is synchronous on purpose: the launcher is used both from the
//! server's runtime and from test processes whose async runtimes come and go.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::{Gid, Pid, Uid, User};
use rand::distr::{Alphanumeric, SampleString};
use sqlx::postgres::PgConnectOptions;

/// The superuser name of every embedded cluster.
pub const SUPERUSER: &str = "postgres";

/// Oldest PostgreSQL major version converge supports.
const MIN_MAJOR_VERSION: u32 = 15;

/// Longest Unix socket path the kernel accepts, minus a margin.
const MAX_SOCKET_PATH: usize = 100;

/// Supervisor script: `$@` is the postgres command line. Fd 0 is the pipe from
/// the owner; the server gets /dev/null instead. A background reader waits for
/// the pipe to close (EOF), then asks for a fast shutdown (SIGINT). The script's
/// own exit status is the server's.
const SUPERVISOR: &str = r#"exec 3<&0
"$@" </dev/null 3<&- &
pg=$!
( read -r _ <&3; kill -INT "$pg" 2>/dev/null ) &
exec 3<&-
wait "$pg"
"#;

/// Why an embedded cluster could not be prepared, started or stopped.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    /// No PostgreSQL server binaries were found.
    #[error(
        "no PostgreSQL server binaries found (looked at `pg_config --bindir`, PATH and /usr/lib/postgresql/*/bin): \
         install PostgreSQL {MIN_MAJOR_VERSION}+ (Debian/Ubuntu: `apt-get install postgresql`) or set DATABASE_URL"
    )]
    BinariesNotFound,
    /// `CONVERGE_PG_BINDIR` names a directory without the server binaries.
    #[error(
        "CONVERGE_PG_BINDIR={0} has no `postgres` and `initdb`: point it at the server binaries of \
         PostgreSQL {MIN_MAJOR_VERSION}+ (Debian/Ubuntu: `apt-get install postgresql`), unset it, or set DATABASE_URL"
    )]
    BinDirInvalid(String),
    /// The server binaries are too old.
    #[error("PostgreSQL {found} at {bindir} is too old: converge needs {MIN_MAJOR_VERSION} or newer")]
    TooOld {
        /// Major version found.
        found: u32,
        /// Where it was found.
        bindir: PathBuf,
    },
    /// Running as root needs the `postgres` system user.
    #[error(
        "running as root, but there is no `postgres` system user to run the server as \
         (install the `postgresql` package, run converge as a normal user, or set DATABASE_URL)"
    )]
    NoPostgresUser,
    /// A server from an earlier run still holds the data directory.
    #[error("another PostgreSQL server (pid {pid}) is still running on {data_dir}; stop it or use another --data-dir")]
    DataDirBusy {
        /// The running server's pid.
        pid: i32,
        /// The contested data directory.
        data_dir: PathBuf,
    },
    /// A helper program failed.
    #[error("{program} failed ({status}): {output}")]
    Program {
        /// The program that failed.
        program: String,
        /// Its exit status.
        status: ExitStatus,
        /// The tail of what it printed.
        output: String,
    },
    /// The server exited or never became ready.
    #[error("PostgreSQL did not start ({reason}); last lines of {log}:\n{tail}")]
    StartFailed {
        /// What went wrong.
        reason: String,
        /// The server log file.
        log: PathBuf,
        /// The end of the server log.
        tail: String,
    },
    /// A file-system or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> EmbeddedError {
    let context = context.into();
    move |source| EmbeddedError::Io { context, source }
}

/// Memory and checkpoint settings of a durable cluster. Postgres's stock
/// 128 MB of shared buffers and 1 GB between checkpoints are sized for a
/// small shared machine: at a million resources (about 1.5 GB of tables and
/// indexes) backends evicted dirty pages themselves and every write after
/// one of the frequent checkpoints logged a full page. A quarter of the
/// machine's memory (between 128 MB and 2 GB) for buffers and checkpoints at
/// most every 15 minutes or 4 GB of WAL keep the working set cached and the
/// WAL lean. Explicit `settings` still override these.
fn durable_sizing(memory_bytes: Option<u64>) -> Vec<(String, String)> {
    const MIB: u64 = 1024 * 1024;
    let buffers_mib = memory_bytes.map_or(128, |bytes| (bytes / 4 / MIB).clamp(128, 2048));
    vec![
        ("shared_buffers".into(), format!("{buffers_mib}MB")),
        ("max_wal_size".into(), "4GB".into()),
        ("checkpoint_timeout".into(), "15min".into()),
    ]
}

/// The machine's memory, from `/proc/meminfo` (`None` where that is unavailable).
fn total_memory_bytes() -> Option<u64> {
    let meminfo = fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// How to run an embedded cluster.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// The cluster directory (created if missing).
    pub dir: PathBuf,
    /// Trade durability for speed (`fsync=off` and friends). Tests only: never
    /// for data that must survive a machine crash.
    pub ephemeral: bool,
    /// TCP port on 127.0.0.1; a free one is picked when `None`.
    pub port: Option<u16>,
    /// Extra `-c name=value` server settings.
    pub settings: Vec<(String, String)>,
}

impl EmbeddedOptions {
    /// Durable defaults for a cluster in `dir`.
    pub fn durable(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            ephemeral: false,
            port: None,
            settings: Vec::new(),
        }
    }
}

/// A running embedded cluster. Dropping it stops the server (the supervisor
/// sees its pipe close); [`EmbeddedPostgres::stop`] does so and waits.
#[derive(Debug)]
pub struct EmbeddedPostgres {
    supervisor: Child,
    pipe: Option<ChildStdin>,
    socket_dir: PathBuf,
    data_dir: PathBuf,
    log_path: PathBuf,
    port: u16,
    password: String,
}

impl EmbeddedPostgres {
    /// Initialises the cluster on first use, then starts the server and waits
    /// until it accepts connections.
    pub fn start(options: &EmbeddedOptions) -> Result<Self, EmbeddedError> {
        let bindir = find_bindir()?;
        let owner = ServerOwner::current()?;
        let dir = absolute(&options.dir)?;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&dir)
            .map_err(io_err(format!("creating {}", dir.display())))?;
        let data_dir = dir.join("pgdata");
        let log_path = dir.join("postgres.log");
        let password = ensure_password(&dir)?;
        if !data_dir.join("PG_VERSION").exists() {
            init_cluster(&bindir, &owner, &dir, &data_dir, &password, options.ephemeral)?;
        }
        let socket_dir = prepare_socket_dir(&dir, &owner)?;
        wait_for_previous_server(&data_dir)?;
        let port = match options.port {
            Some(port) => port,
            None => free_port()?,
        };

        let mut settings: Vec<(String, String)> = vec![
            ("listen_addresses".into(), "127.0.0.1".into()),
            ("port".into(), port.to_string()),
            ("unix_socket_directories".into(), socket_dir.display().to_string()),
            ("unix_socket_permissions".into(), "0700".into()),
            ("max_connections".into(), "200".into()),
            ("logging_collector".into(), "off".into()),
        ];
        if options.ephemeral {
            for (name, value) in [
                ("fsync", "off"),
                ("synchronous_commit", "off"),
                ("full_page_writes", "off"),
            ] {
                settings.push((name.into(), value.into()));
            }
        } else {
            settings.extend(durable_sizing(total_memory_bytes()));
        }
        settings.extend(options.settings.iter().cloned());

        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log_path)
            .map_err(io_err(format!("opening {}", log_path.display())))?;
        let log_offset = log.metadata().map(|m| m.len()).unwrap_or(0);
        let log_err = log.try_clone().map_err(io_err("duplicating the log handle"))?;

        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(SUPERVISOR)
            .arg("converge-postgres-supervisor")
            .arg(bindir.join("postgres"))
            .arg("-D")
            .arg(&data_dir);
        for (name, value) in &settings {
            cmd.arg("-c").arg(format!("{name}={value}"));
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            // Own process group: a terminal's Ctrl-C reaches converge, which then
            // drains and stops the server in order, not the server directly.
            .process_group(0)
            .env_remove("PGDATA");
        owner.apply(&mut cmd);
        let mut supervisor = cmd.spawn().map_err(io_err("spawning the PostgreSQL supervisor"))?;
        let pipe = supervisor.stdin.take();
        let mut server = Self {
            supervisor,
            pipe,
            socket_dir,
            data_dir,
            log_path,
            port,
            password,
        };
        if let Err(reason) = server.wait_ready(Duration::from_secs(60)) {
            let tail = log_tail(&server.log_path, log_offset);
            let log = server.log_path.clone();
            let _ = server.shutdown(Duration::from_secs(10));
            return Err(EmbeddedError::StartFailed { reason, log, tail });
        }
        tracing::info!(port, data_dir = %server.data_dir.display(), "embedded PostgreSQL is ready");
        Ok(server)
    }

    /// Connection options for `database` over the private Unix socket.
    pub fn connect_options(&self, database: &str) -> PgConnectOptions {
        PgConnectOptions::new()
            .socket(&self.socket_dir)
            .port(self.port)
            .username(SUPERUSER)
            .database(database)
    }

    /// A `postgres://` URL for `database` over TCP on loopback (with password).
    pub fn tcp_url(&self, database: &str) -> String {
        format!(
            "postgres://{SUPERUSER}:{}@127.0.0.1:{}/{database}",
            self.password, self.port
        )
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The PostgreSQL data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Whether the server has exited (crashed or stopped).
    pub fn has_exited(&mut self) -> bool {
        !matches!(self.supervisor.try_wait(), Ok(None))
    }

    /// Asks for a fast shutdown and waits up to `timeout` for the server to exit.
    pub fn stop(mut self, timeout: Duration) -> Result<(), EmbeddedError> {
        self.shutdown(timeout)
    }

    fn shutdown(&mut self, timeout: Duration) -> Result<(), EmbeddedError> {
        // Closing the pipe is the stop signal.
        drop(self.pipe.take());
        let deadline = Instant::now() + timeout;
        loop {
            match self.supervisor.try_wait() {
                Ok(Some(_)) => return Ok(()),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                Ok(None) => break,
                Err(e) => return Err(io_err("waiting for PostgreSQL to stop")(e)),
            }
        }
        // Fast shutdown overran: an immediate shutdown is still crash-safe.
        tracing::warn!("embedded PostgreSQL did not stop in {timeout:?}; sending SIGQUIT");
        if let Some(pid) = postmaster_pid(&self.data_dir) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGQUIT);
        }
        self.supervisor
            .wait()
            .map(|_| ())
            .map_err(io_err("waiting for PostgreSQL to stop"))
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.supervisor.try_wait() {
                return Err(format!("the server exited: {status}"));
            }
            // The postmaster writes "ready" as the last line of its pid file
            // once it accepts connections.
            let ready = fs::read_to_string(self.data_dir.join("postmaster.pid"))
                .map(|pidfile| pidfile.lines().nth(7).map(str::trim) == Some("ready"))
                .unwrap_or(false);
            if ready {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("not ready after {timeout:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for EmbeddedPostgres {
    fn drop(&mut self) {
        if !self.has_exited() {
            let _ = self.shutdown(Duration::from_secs(30));
        }
    }
}

/// Which OS user runs the server: ourselves, or `postgres` when we are root.
#[derive(Debug, Clone, Copy)]
struct ServerOwner {
    ids: Option<(Uid, Gid)>,
}

impl ServerOwner {
    fn current() -> Result<Self, EmbeddedError> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(Self { ids: None });
        }
        match User::from_name(SUPERUSER) {
            Ok(Some(user)) => Ok(Self {
                ids: Some((user.uid, user.gid)),
            }),
            _ => Err(EmbeddedError::NoPostgresUser),
        }
    }

    fn apply(&self, cmd: &mut Command) {
        if let Some((uid, gid)) = self.ids {
            cmd.uid(uid.as_raw()).gid(gid.as_raw());
        }
    }

    /// Hands `path` to the server's user (no-op unless we are root).
    fn chown(&self, path: &Path) -> Result<(), EmbeddedError> {
        if let Some((uid, gid)) = self.ids {
            std::os::unix::fs::chown(path, Some(uid.as_raw()), Some(gid.as_raw()))
                .map_err(io_err(format!("handing {} to the postgres user", path.display())))?;
        }
        Ok(())
    }
}

/// Finds the directory holding `postgres` and `initdb`, newest version first.
/// The directory of the PostgreSQL server binaries this host would run
/// (`CONVERGE_PG_BINDIR`, `pg_config --bindir`, `PATH`, then the newest
/// `/usr/lib/postgresql/*/bin`).
pub fn find_bindir() -> Result<PathBuf, EmbeddedError> {
    let has_binaries = |dir: &Path| dir.join("postgres").is_file() && dir.join("initdb").is_file();
    // An explicit choice is used as given, never silently replaced by a search.
    if let Some(dir) = std::env::var_os("CONVERGE_PG_BINDIR").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        if !has_binaries(&dir) {
            return Err(EmbeddedError::BinDirInvalid(dir.display().to_string()));
        }
        return check_version(dir);
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        candidates.push(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    }
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path));
    }
    if let Ok(entries) = fs::read_dir("/usr/lib/postgresql") {
        let mut versioned: Vec<(u32, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let major = e.file_name().to_str()?.parse::<u32>().ok()?;
                Some((major, e.path().join("bin")))
            })
            .collect();
        versioned.sort_by_key(|(major, _)| std::cmp::Reverse(*major));
        candidates.extend(versioned.into_iter().map(|(_, dir)| dir));
    }
    let bindir = candidates
        .into_iter()
        .find(|dir| has_binaries(dir))
        .ok_or(EmbeddedError::BinariesNotFound)?;
    check_version(bindir)
}

fn check_version(bindir: PathBuf) -> Result<PathBuf, EmbeddedError> {
    let major = server_major_version(&bindir)?;
    if major < MIN_MAJOR_VERSION {
        return Err(EmbeddedError::TooOld { found: major, bindir });
    }
    Ok(bindir)
}

fn server_major_version(bindir: &Path) -> Result<u32, EmbeddedError> {
    let out = Command::new(bindir.join("postgres"))
        .arg("--version")
        .output()
        .map_err(io_err("running postgres --version"))?;
    // "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .split_whitespace()
        .nth(2)
        .and_then(|v| v.split('.').next())
        .and_then(|major| major.parse().ok())
        .unwrap_or(0))
}

/// Runs `initdb` into a scratch directory and renames it into place, so an
/// interrupted first start never leaves a half-initialised cluster behind.
fn init_cluster(
    bindir: &Path,
    owner: &ServerOwner,
    dir: &Path,
    data_dir: &Path,
    password: &str,
    ephemeral: bool,
) -> Result<(), EmbeddedError> {
    let scratch = dir.join("pgdata.init");
    if scratch.exists() {
        fs::remove_dir_all(&scratch).map_err(io_err(format!("removing {}", scratch.display())))?;
    }
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&scratch)
        .map_err(io_err(format!("creating {}", scratch.display())))?;
    owner.chown(&scratch)?;
    // initdb reads the password from a file the server's user can read; it
    // must not be inside the (necessarily empty) target directory.
    let pwfile = dir.join("pgdata.init-pwfile");
    write_private(&pwfile, password)?;
    owner.chown(&pwfile)?;

    let mut cmd = Command::new(bindir.join("initdb"));
    cmd.arg("-D")
        .arg(&scratch)
        .args(["-U", SUPERUSER, "-E", "UTF8", "--locale=C"])
        .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
        .arg(format!("--pwfile={}", pwfile.display()))
        .env_remove("PGDATA");
    if ephemeral {
        cmd.arg("--no-sync");
    }
    owner.apply(&mut cmd);
    let out = cmd.output().map_err(io_err("running initdb"))?;
    let _ = fs::remove_file(&pwfile);
    if !out.status.success() {
        let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
        output.push_str(&String::from_utf8_lossy(&out.stderr));
        return Err(EmbeddedError::Program {
            program: "initdb".into(),
            status: out.status,
            output: tail_lines(&output, 20),
        });
    }
    fs::rename(&scratch, data_dir).map_err(io_err(format!("moving the new cluster to {}", data_dir.display())))
}

/// Reads the cluster's superuser password, generating it on first use.
fn ensure_password(dir: &Path) -> Result<String, EmbeddedError> {
    let path = dir.join("password");
    match fs::read_to_string(&path) {
        Ok(existing) if !existing.trim().is_empty() => return Ok(existing.trim().to_owned()),
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(format!("reading {}", path.display()))(e)),
    }
    let password = Alphanumeric.sample_string(&mut rand::rng(), 32);
    write_private(&path, &password)?;
    Ok(password)
}

fn write_private(path: &Path, contents: &str) -> Result<(), EmbeddedError> {
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io_err(format!("writing {}", path.display())))?;
    file.write_all(contents.as_bytes())
        .map_err(io_err(format!("writing {}", path.display())))
}

/// The socket directory: `<dir>/run`, or a short per-cluster path under the
/// temp dir when `<dir>` is too deep for a Unix socket path.
fn prepare_socket_dir(dir: &Path, owner: &ServerOwner) -> Result<PathBuf, EmbeddedError> {
    let socket_dir = socket_dir_for(dir);
    if !socket_dir.exists() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&socket_dir)
            .map_err(io_err(format!("creating {}", socket_dir.display())))?;
    }
    fs::set_permissions(&socket_dir, fs::Permissions::from_mode(0o700))
        .map_err(io_err(format!("securing {}", socket_dir.display())))?;
    owner.chown(&socket_dir)?;
    Ok(socket_dir)
}

fn socket_dir_for(dir: &Path) -> PathBuf {
    let socket_dir = dir.join("run");
    if socket_dir.as_os_str().len() + ".s.PGSQL.65535".len() < MAX_SOCKET_PATH {
        return socket_dir;
    }
    let digest = fnv1a(dir.as_os_str().as_encoded_bytes());
    std::env::temp_dir().join(format!("converge-pg-{digest:016x}"))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A server of an earlier run may still be finishing its shutdown (its owner
/// was just killed): give it time rather than failing the start.
fn wait_for_previous_server(data_dir: &Path) -> Result<(), EmbeddedError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Some(pid) = postmaster_pid(data_dir) {
        if kill(Pid::from_raw(pid), None).is_err() {
            return Ok(()); // stale pid file: the server recovers from it
        }
        if Instant::now() >= deadline {
            return Err(EmbeddedError::DataDirBusy {
                pid,
                data_dir: data_dir.to_owned(),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn postmaster_pid(data_dir: &Path) -> Option<i32> {
    fs::read_to_string(data_dir.join("postmaster.pid"))
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

fn free_port() -> Result<u16, EmbeddedError> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(io_err("finding a free port"))?;
    listener
        .local_addr()
        .map(|addr| addr.port())
        .map_err(io_err("finding a free port"))
}

fn absolute(path: &Path) -> Result<PathBuf, EmbeddedError> {
    std::path::absolute(path).map_err(io_err(format!("resolving {}", path.display())))
}

fn log_tail(path: &Path, from: u64) -> String {
    let mut text = String::new();
    if let Ok(mut file) = File::open(path) {
        let _ = file.seek(SeekFrom::Start(from));
        let _ = file.read_to_string(&mut text);
    }
    tail_lines(&text, 20)
}

fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durable_buffers_take_a_quarter_of_memory_within_bounds() {
        let buffers = |memory: Option<u64>| durable_sizing(memory)[0].1.clone();
        let gib = 1024 * 1024 * 1024;
        assert_eq!(buffers(Some(4 * gib)), "1024MB");
        assert_eq!(buffers(Some(24 * gib)), "2048MB");
        assert_eq!(buffers(Some(gib / 4)), "128MB");
        assert_eq!(buffers(None), "128MB");
    }

    #[test]
    fn socket_dir_stays_inside_shallow_directories() {
        assert_eq!(
            socket_dir_for(Path::new("/var/lib/converge")),
            PathBuf::from("/var/lib/converge/run")
        );
    }

    #[test]
    fn socket_dir_falls_back_to_a_short_path_for_deep_directories() {
        let deep = PathBuf::from("/tmp").join("d".repeat(120));
        let chosen = socket_dir_for(&deep);
        assert!(chosen.as_os_str().len() < MAX_SOCKET_PATH, "{}", chosen.display());
        assert_eq!(chosen, socket_dir_for(&deep), "stable per directory");
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail_lines("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail_lines("", 3), "");
    }
}
