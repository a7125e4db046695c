//! `converge-stdworker`: serves kinds by running an external program per
//! task, speaking the JSON protocol described in `sdk-rust/STDWORKER.md`.

#[path = "common.rs"]
mod common;
#[path = "stdworker/program.rs"]
mod program;
#[path = "stdworker/protocol.rs"]
mod protocol;

use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use clap::Parser;
use converge_sdk::worker::KindVersion;

use program::{ProgramLimits, ProgramProvider};

/// Serves kinds by running a program per task (JSON on stdin, JSON on stdout).
#[derive(Debug, Parser)]
#[command(name = "converge-stdworker", version, about)]
struct Args {
    #[command(flatten)]
    common: common::CommonArgs,
    /// A served pair and its program: KIND:VERSION=PATH. Repeatable; the env
    /// form is comma-separated.
    #[arg(long = "kind", env = "STDWORKER_KINDS", value_delimiter = ',', required = true)]
    kinds: Vec<KindProgram>,
    /// Time limit of a task whose broker sent no deadline.
    #[arg(long, env = "STDWORKER_DEFAULT_TIMEOUT_SECS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..))]
    default_timeout_secs: u64,
    /// Largest stdout a program may print (bytes).
    #[arg(long, env = "STDWORKER_MAX_OUTPUT_BYTES", default_value_t = 4 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(1..=(256 * 1024 * 1024)))]
    max_output_bytes: u64,
    /// An environment variable for the programs, NAME=VALUE. Repeatable.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    env: Vec<EnvVar>,
    /// A variable of the worker's own environment to pass on to the
    /// programs. Repeatable. Nothing else is inherited except PATH.
    #[arg(long = "pass-env", value_name = "NAME")]
    pass_env: Vec<String>,
    /// A served pair whose program cannot run without its kind's default
    /// provider config: the pair stays unready (no tasks) until a default
    /// exists. KIND:VERSION, repeatable; the env form is comma-separated.
    #[arg(
        long = "require-config",
        env = "STDWORKER_REQUIRE_CONFIG",
        value_delimiter = ',',
        value_name = "KIND:VERSION"
    )]
    require_config: Vec<KindVersion>,
}

/// `KIND:VERSION=PATH`.
#[derive(Debug, Clone)]
struct KindProgram {
    kind: KindVersion,
    program: PathBuf,
}

impl FromStr for KindProgram {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, program) = s
            .split_once('=')
            .ok_or_else(|| format!("expected KIND:VERSION=PROGRAM, got {s:?}"))?;
        let kind = kind.parse::<KindVersion>().map_err(|e| e.to_string())?;
        if program.is_empty() {
            return Err(format!("no program given for {kind}"));
        }
        Ok(Self {
            kind,
            program: PathBuf::from(program),
        })
    }
}

/// `NAME=VALUE`.
#[derive(Debug, Clone)]
struct EnvVar {
    name: String,
    value: String,
}

impl FromStr for EnvVar {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('=') {
            Some((name, value)) if !name.is_empty() => Ok(Self {
                name: name.to_owned(),
                value: value.to_owned(),
            }),
            _ => Err(format!("expected NAME=VALUE, got {s:?}")),
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(error) = args.common.init_logging() {
        eprintln!("converge-stdworker: {error}");
        return ExitCode::from(2);
    }
    let mut env: Vec<(String, String)> = vec![(
        "PATH".to_owned(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".to_owned()),
    )];
    for name in &args.pass_env {
        match std::env::var(name) {
            Ok(value) => env.push((name.clone(), value)),
            Err(_) => tracing::warn!(%name, "--pass-env variable is not set; skipped"),
        }
    }
    env.extend(args.env.iter().map(|v| (v.name.clone(), v.value.clone())));
    env.push(("CONVERGE_WORKER_ID".to_owned(), common::worker_identity()));
    let limits = ProgramLimits {
        default_timeout: Duration::from_secs(args.default_timeout_secs),
        max_stdout_bytes: usize::try_from(args.max_output_bytes).unwrap_or(usize::MAX),
    };
    let mut builder = match args.common.builder() {
        Ok(builder) => builder,
        Err(error) => {
            tracing::error!(%error, "invalid TLS settings");
            return ExitCode::from(2);
        }
    };
    if let Some(unknown) = args
        .require_config
        .iter()
        .find(|kind| !args.kinds.iter().any(|entry| entry.kind == **kind))
    {
        tracing::error!(%unknown, "--require-config names a pair no --kind serves");
        return ExitCode::from(2);
    }
    for entry in args.kinds {
        let requires_config = args.require_config.contains(&entry.kind);
        match ProgramProvider::new(entry.kind, entry.program, env.clone(), limits.clone(), requires_config) {
            Ok(provider) => builder = builder.provider(provider),
            Err(error) => {
                tracing::error!(%error, "invalid --kind");
                return ExitCode::from(2);
            }
        }
    }
    common::run_worker(builder).await
}
