//! `converge-demo-worker`: serves the BOM demo kinds (`bom`, `account`,
//! `vpc`, `tgw`, `route`) for a converge broker. `converge dev` runs the same
//! providers in-process; this binary serves them from a separate process.

// The flags, logging, signal handling and exit codes every worker binary
// shares live next to the SDK's own workers.
#[path = "../../../sdk-rust/src/bin/common.rs"]
mod common;

use std::process::ExitCode;

use clap::Parser;
use converge_examples::{Latency, register};

/// Serves the BOM demo kinds with simulated providers, and the `bom-publisher`
/// reactor of examples/publisher.
#[derive(Debug, Parser)]
#[command(name = "converge-demo-worker", version, about)]
struct Args {
    #[command(flatten)]
    common: common::CommonArgs,
    /// Base simulated provider latency in milliseconds: each leaf task sleeps
    /// between half and one and a half times this; 0 = none.
    #[arg(long, env = "DEMO_DELAY_MS", default_value_t = Latency::DEFAULT.base_millis())]
    delay_ms: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(error) = args.common.init_logging() {
        eprintln!("converge-demo-worker: {error}");
        return ExitCode::from(2);
    }
    let builder = match args.common.builder() {
        Ok(builder) => builder.agent(format!("converge-demo-worker ({})", common::worker_identity())),
        Err(error) => {
            eprintln!("converge-demo-worker: {error}");
            return ExitCode::from(2);
        }
    };
    // The reactor of the publishing chain stays unready until its sink is configured.
    let builder = converge_examples::publisher::register(register(builder, Latency::from_millis(args.delay_ms)));
    common::run_worker(builder).await
}
