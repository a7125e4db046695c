//! `converge-noop-worker`: serves the `noop` kind (or any kinds given) with
//! a handler that optionally sleeps and reports the generation it saw. Used
//! by tests, demos and benchmarks.

#[path = "common.rs"]
mod common;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use converge_sdk::worker::{HandlerError, KindVersion, Outcome, Provider, ReactionRequest, async_trait};
use serde_json::json;

/// Serves kinds with a handler that does nothing but report.
#[derive(Debug, Parser)]
#[command(name = "converge-noop-worker", version, about)]
struct Args {
    #[command(flatten)]
    common: common::CommonArgs,
    /// Pairs to serve, comma-separated KIND:VERSION.
    #[arg(long, env = "WORKER_KINDS", value_delimiter = ',', default_value = "noop:1")]
    kinds: Vec<KindVersion>,
    /// Milliseconds each reaction sleeps before answering.
    #[arg(long, env = "NOOP_DELAY_MS", default_value_t = 0)]
    delay_ms: u64,
    /// Append one line "<kind>/<name> <generation>" per finished reaction to
    /// this file (lets tests count how often each generation was worked).
    #[arg(long, env = "NOOP_RECORD")]
    record: Option<std::path::PathBuf>,
}

/// The shared record file, written one whole line at a time.
type Record = Arc<std::sync::Mutex<std::fs::File>>;

struct NoopProvider {
    kind: KindVersion,
    delay: Duration,
    identity: Arc<str>,
    record: Option<Record>,
}

#[async_trait]
impl Provider for NoopProvider {
    fn kind(&self) -> KindVersion {
        self.kind.clone()
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        if let Some(record) = &self.record {
            use std::io::Write as _;
            let line = format!(
                "{}/{} {}\n",
                request.resource.kind, request.resource.name, request.generation
            );
            let mut file = record
                .lock()
                .map_err(|_| HandlerError::transient("record file lock poisoned"))?;
            file.write_all(line.as_bytes())?;
        }
        Ok(Outcome::new().with_status(json!({
            "observed_generation": request.generation,
            "worker": &*self.identity,
        })))
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(error) = args.common.init_logging() {
        eprintln!("converge-noop-worker: {error}");
        return ExitCode::from(2);
    }
    let identity: Arc<str> = common::worker_identity().into();
    let delay = Duration::from_millis(args.delay_ms);
    let record = match &args.record {
        None => None,
        Some(path) => match std::fs::OpenOptions::new().create(true).append(true).open(path) {
            Ok(file) => Some(Arc::new(std::sync::Mutex::new(file))),
            Err(error) => {
                eprintln!("converge-noop-worker: cannot open {}: {error}", path.display());
                return ExitCode::from(2);
            }
        },
    };
    let mut builder = match args.common.builder() {
        Ok(builder) => builder,
        Err(error) => {
            eprintln!("converge-noop-worker: {error}");
            return ExitCode::from(2);
        }
    };
    for kind in args.kinds {
        builder = builder.provider(NoopProvider {
            kind,
            delay,
            identity: Arc::clone(&identity),
            record: record.clone(),
        });
    }
    common::run_worker(builder).await
}
