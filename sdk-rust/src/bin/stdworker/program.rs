//! Running one program per task: a fresh process in its own process group
//! and scratch directory, JSON in on stdin, JSON out on stdout, bounded
//! output, killed at the deadline.

use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use converge_sdk::worker::{
    DEADLINE_EXCEEDED_REASON, HandlerError, KindVersion, Outcome, Provider, ReactionRequest, async_trait,
};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::Command;
use tokio::time::Instant;

use crate::protocol::{ProgramInput, parse_output};

/// How much of stderr is kept (its tail) for logs and failure messages.
const STDERR_TAIL_BYTES: usize = 64 * 1024;
/// How much of that tail goes into a failure message.
const MESSAGE_TAIL_CHARS: usize = 2000;

/// Bounds applied to every program run.
#[derive(Debug, Clone)]
pub struct ProgramLimits {
    /// Time limit when the task has no deadline.
    pub default_timeout: Duration,
    /// Largest stdout accepted.
    pub max_stdout_bytes: usize,
}

/// Serves one pair by running `program` per task.
pub struct ProgramProvider {
    kind: KindVersion,
    program: PathBuf,
    env: Vec<(String, String)>,
    limits: ProgramLimits,
    /// Whether the pair is unready until its default config exists.
    requires_config: bool,
}

/// Why a program cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    /// The path cannot be read.
    #[error("program {path} for {kind}: {source}")]
    Unreadable {
        /// The pair.
        kind: KindVersion,
        /// The program path.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The path is not an executable file.
    #[error("program {path} for {kind} is not an executable file")]
    NotExecutable {
        /// The pair.
        kind: KindVersion,
        /// The program path.
        path: String,
    },
}

impl ProgramProvider {
    /// Checks up front that the program is an executable file, so a typo
    /// fails at start rather than on every task.
    pub fn new(
        kind: KindVersion,
        program: PathBuf,
        env: Vec<(String, String)>,
        limits: ProgramLimits,
        requires_config: bool,
    ) -> Result<Self, ProgramError> {
        let path = program.display().to_string();
        let meta = std::fs::metadata(&program).map_err(|source| ProgramError::Unreadable {
            kind: kind.clone(),
            path: path.clone(),
            source,
        })?;
        if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
            return Err(ProgramError::NotExecutable { kind, path });
        }
        Ok(Self {
            kind,
            program,
            env,
            limits,
            requires_config,
        })
    }
}

#[async_trait]
impl Provider for ProgramProvider {
    fn kind(&self) -> KindVersion {
        self.kind.clone()
    }

    fn requires_default_config(&self) -> bool {
        self.requires_config
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        let input = serde_json::to_vec(&ProgramInput::new(&request))
            .map_err(|e| HandlerError::transient(format!("cannot encode the program input: {e}")))?;
        let deadline = request
            .deadline
            .map(Instant::from_std)
            .unwrap_or_else(|| Instant::now() + self.limits.default_timeout);
        let run = self.run(&request, input, deadline).await?;
        if !run.status.success() {
            let tail = message_tail(&run.stderr);
            let mut message = format!("program {} {}", self.program.display(), describe(run.status));
            if !tail.is_empty() {
                message.push_str(": ");
                message.push_str(&tail);
            }
            return Err(HandlerError::transient(message));
        }
        if run.stdout_truncated {
            return Err(HandlerError::transient(format!(
                "program stdout exceeds {} bytes",
                self.limits.max_stdout_bytes
            )));
        }
        parse_output(&run.stdout)
    }
}

/// What a finished program left behind.
struct Finished {
    status: ExitStatus,
    stdout: Vec<u8>,
    stdout_truncated: bool,
    stderr: Vec<u8>,
}

impl ProgramProvider {
    async fn run(
        &self,
        request: &ReactionRequest,
        input: Vec<u8>,
        deadline: Instant,
    ) -> Result<Finished, HandlerError> {
        // A private scratch directory doubles as HOME and TMPDIR, so runs do
        // not see each other's files; it is removed when dropped.
        let scratch = tempfile::Builder::new()
            .prefix("converge-stdworker-")
            .tempdir()
            .map_err(|e| HandlerError::transient(format!("cannot create a scratch directory: {e}")))?;
        let mut command = Command::new(&self.program);
        command
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("HOME", scratch.path())
            .env("TMPDIR", scratch.path())
            .env("CONVERGE_KIND", &self.kind.kind)
            .env("CONVERGE_KIND_VERSION", self.kind.version.to_string())
            .env("CONVERGE_REACTION", &request.reaction)
            .current_dir(scratch.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so a timeout kills what it spawned too.
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|e| HandlerError::transient(format!("cannot start {}: {e}", self.program.display())))?;
        // Armed until the end: kills the whole group if this future is
        // dropped (runtime deadline) or times out, and reaps stragglers.
        let _group = child.id().map(GroupKiller);
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let limit = self.limits.max_stdout_bytes;
        let io = async {
            let write = async {
                if let Some(mut stdin) = stdin {
                    // A program that ignores its input may exit before
                    // reading it all; a broken pipe here is not an error.
                    let _ = stdin.write_all(&input).await;
                    let _ = stdin.shutdown().await;
                }
            };
            let (_, (stdout, stdout_truncated), stderr, status) = tokio::join!(
                write,
                read_head(stdout, limit),
                read_tail(stderr, STDERR_TAIL_BYTES),
                child.wait()
            );
            status.map(|status| Finished {
                status,
                stdout,
                stdout_truncated,
                stderr,
            })
        };
        match tokio::time::timeout_at(deadline, io).await {
            Ok(Ok(finished)) => Ok(finished),
            Ok(Err(e)) => Err(HandlerError::transient(format!("waiting for the program failed: {e}"))),
            Err(_) => Err(HandlerError::transient(format!(
                "program {} timed out (task deadline); killed",
                self.program.display()
            ))
            .with_reason(DEADLINE_EXCEEDED_REASON)),
        }
    }
}

/// Kills a process group on drop (ignoring "no such group").
struct GroupKiller(u32);

impl Drop for GroupKiller {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Reads up to `limit` bytes, then keeps draining (so the writer never
/// blocks on a full pipe) and reports truncation.
async fn read_head(reader: Option<impl AsyncRead + Unpin>, limit: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut truncated = false;
    let Some(mut reader) = reader else {
        return (kept, truncated);
    };
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = limit.saturating_sub(kept.len());
                if n > room {
                    truncated = true;
                }
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
    (kept, truncated)
}

/// Reads everything, keeping only the last `limit` bytes.
async fn read_tail(reader: Option<impl AsyncRead + Unpin>, limit: usize) -> Vec<u8> {
    let mut kept = Vec::new();
    let Some(mut reader) = reader else {
        return kept;
    };
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                kept.extend_from_slice(&chunk[..n]);
                if kept.len() > limit {
                    kept.drain(..kept.len() - limit);
                }
            }
        }
    }
    kept
}

/// The last characters of stderr, trimmed, for a failure message.
fn message_tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    let count = text.chars().count();
    if count <= MESSAGE_TAIL_CHARS {
        return text.to_owned();
    }
    let tail: String = text.chars().skip(count - MESSAGE_TAIL_CHARS).collect();
    format!("...{tail}")
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => "failed".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn head_and_tail_are_bounded() {
        let data = vec![b'x'; 10_000];
        let (head, truncated) = read_head(Some(&data[..]), 100).await;
        assert_eq!(head.len(), 100);
        assert!(truncated);
        let (head, truncated) = read_head(Some(&data[..]), 20_000).await;
        assert_eq!(head.len(), 10_000);
        assert!(!truncated);
        let mut data = vec![b'a'; 5000];
        data.extend_from_slice(b"END");
        let tail = read_tail(Some(&data[..]), 10).await;
        assert_eq!(tail, b"aaaaaaaEND");
    }

    #[test]
    fn message_tail_keeps_the_end() {
        let long = format!("{}last words", "x".repeat(5000));
        let tail = message_tail(long.as_bytes());
        assert!(tail.ends_with("last words"));
        assert!(tail.chars().count() <= MESSAGE_TAIL_CHARS + 3);
    }
}
