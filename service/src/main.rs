//! The `converge` binary: parses configuration, then serves (alone or with
//! the demo, `dev`), migrates or prints its version; or runs a client
//! command (`apply`, `get`, ...) against a running server.

mod cli;
mod dev;

use std::process::ExitCode;

use anyhow::Context;
use clap::FromArgMatches;
use clap::parser::ValueSource;
use converge_service::config::{Cli, Command};
use converge_service::db::{Database, DatabaseTarget, migrate};
use converge_service::server::{self, RunningServer, ServerConfig};
use converge_service::{telemetry, version};

/// The log filter of `converge dev` unless one is given: its progress line
/// shares the terminal with the logs.
const DEV_DEFAULT_LOG_LEVEL: &str = "warn";

/// Longest the runtime waits for blocking tasks at exit.
const RUNTIME_STOP_LIMIT: std::time::Duration = std::time::Duration::from_millis(500);

fn main() -> ExitCode {
    let args = cli::with_aliases(std::env::args_os().collect());
    // Client commands have a command line of their own, without the
    // server's global options.
    if cli::is_client_command(&args) {
        return cli::main(args);
    }
    let matches = cli::full_command().get_matches_from(args);
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let log_level = match cli.command {
        Some(Command::Dev(_)) if matches.value_source("log_level") == Some(ValueSource::DefaultValue) => {
            DEV_DEFAULT_LOG_LEVEL
        }
        _ => cli.common.log_level.as_str(),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("converge: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let serves = matches!(cli.command, None | Some(Command::Serve) | Some(Command::Dev(_)));
    let telemetry = if serves {
        // Inside the runtime: the OTLP exporter runs on it.
        let _entered = runtime.enter();
        match telemetry::install(cli.common.log_format, log_level, &cli.serve.telemetry) {
            Ok(telemetry) => Some(telemetry),
            Err(e) => {
                telemetry::init(cli.common.log_format, log_level);
                eprintln!("converge: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        telemetry::init(cli.common.log_format, log_level);
        None
    };
    let outcome = runtime.block_on(run(cli));
    if let Some(telemetry) = telemetry {
        let _entered = runtime.enter();
        telemetry.shutdown();
    }
    // The drain has bounded everything that matters; a blocking task still
    // running (a connect or a name lookup the database never answered) must
    // not hold the exit, as dropping the runtime would.
    runtime.shutdown_timeout(RUNTIME_STOP_LIMIT);
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        // One line, not a log line besides: an operator reading a refused
        // boot (or a pod's last words) sees the cause once.
        Err(e) => {
            eprintln!("converge: {}", report(&e));
            ExitCode::FAILURE
        }
    }
}

/// One line for the whole error chain, skipping causes whose text the
/// message already contains (many errors repeat their source).
fn report(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

async fn run(mut cli: Cli) -> anyhow::Result<()> {
    let target = server::database_target(&cli.common);
    match cli.command.take().unwrap_or(Command::Serve) {
        Command::Version => {
            println!("converge {}", version::VERSION);
            Ok(())
        }
        Command::Migrate => {
            let auth = cli.common.database_auth().map_err(anyhow::Error::msg)?;
            let db = Database::open_with(&target, None, 2, &auth)
                .await
                .context("opening the database")?;
            let report = migrate::run(db.pool()).await;
            db.close().await;
            let report = report.context("applying migrations")?;
            tracing::info!(
                applied = report.applied,
                total = report.total,
                functions_applied = report.functions_applied,
                "migrations are up to date"
            );
            Ok(())
        }
        Command::Serve => {
            let mut signals = server::ShutdownSignal::install().context("installing signal handlers")?;
            let running = start_server(target, &cli).await?;
            signals.recv().await;
            tracing::info!("shutdown requested; draining");
            running.shutdown().await.context("shutting down")
        }
        Command::Dev(args) => {
            dev::check(&args)?;
            let signals = server::ShutdownSignal::install().context("installing signal handlers")?;
            let running = start_server(target, &cli).await?;
            dev::run(&args, running, signals).await
        }
    }
}

/// Starts the server as `serve` runs it, from the parsed command line.
async fn start_server(target: DatabaseTarget, cli: &Cli) -> anyhow::Result<RunningServer> {
    let mut config = ServerConfig::new(target, cli.common.database_max_connections, cli.serve.clone());
    config.database_auth = cli.common.database_auth().map_err(anyhow::Error::msg)?;
    config.retention = cli.retention;
    config.read_database = cli
        .common
        .database_read_url
        .clone()
        .filter(|url| !url.trim().is_empty());
    let running = server::start(config).await.context("starting the server")?;
    match (running.local_addr(), running.health_addr()) {
        (Some(addr), Some(probes)) => tracing::info!(%addr, %probes, "converge is serving"),
        (Some(addr), None) => tracing::info!(%addr, "converge is serving"),
        (None, _) => {}
    }
    Ok(running)
}
