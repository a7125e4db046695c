//! `converge-soak`: the chaos soak (integration/src/soak). A mixed workload
//! against several converge processes and conformance workers in several
//! languages on a private PostgreSQL, with faults injected at random (kills
//! and drains of converge and workers, PostgreSQL restarts and crashes,
//! dropped and stalled connections) and invariants checked; exits 1 when
//! one is violated. Build the binaries first (the workers' toolchains as
//! for the conformance suite: `sdk-gen/generate --install-only`):
//!
//! ```sh
//! cargo build --workspace --bins
//! target/debug/converge-soak --secs 1800 --json soak.json
//! ```

use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use converge_integration::languages::Language;
use converge_integration::soak::{self, SoakOptions};

/// Run the chaos soak.
#[derive(Debug, Parser)]
#[command(name = "converge-soak", about)]
struct Args {
    /// Seconds of faults.
    #[arg(long, default_value_t = 180)]
    secs: u64,
    /// converge processes.
    #[arg(long, default_value_t = 2)]
    processes: usize,
    /// Conformance workers' languages, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "rust,go,python,typescript")]
    languages: Vec<Language>,
    /// Mean milliseconds between faults.
    #[arg(long, default_value_t = 6000)]
    fault_every_ms: u64,
    /// Leaf writers.
    #[arg(long, default_value_t = 4)]
    writers: usize,
    /// Seed of the workload's and the faults' draws.
    #[arg(long, default_value_t = 48)]
    seed: u64,
    /// Seconds everything may take to converge after the faults stop.
    #[arg(long, default_value_t = 180)]
    settle_secs: u64,
    /// Write the report as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<std::process::ExitCode> {
    let args = Args::parse();
    let options = SoakOptions {
        duration: Duration::from_secs(args.secs),
        processes: args.processes,
        languages: args.languages,
        fault_every: Duration::from_millis(args.fault_every_ms),
        writers: args.writers,
        seed: args.seed,
        settle_within: Duration::from_secs(args.settle_secs),
    };
    let report = soak::run(&options).await?;
    let text = serde_json::to_string_pretty(&report)?;
    println!("{text}");
    if let Some(path) = &args.json {
        std::fs::write(path, &text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(if report.violations.is_empty() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}
