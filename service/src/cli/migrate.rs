//! `converge migrate-kind` (also `converge migrate KIND ...`): moves the
//! resources of a kind to another version with a kind migration (ADR 48),
//! and shows per-version counts.

use std::time::Duration;

use clap::Args;
use converge_sdk::Client;
use converge_sdk::proto::v1 as pb;
use tokio::time::Instant;

use super::error::CliError;
use super::output::parse_duration;
use super::output::print;

/// Examples shown by `--help`.
pub const EXAMPLES: &str = "\
Examples:
  converge migrate widget --from 1 --to 2 --dry-run --wait
  converge migrate widget --from 1 --to 2 -l team=payments --wait
  converge migrate-kind widget --status
  converge migrate-kind --cancel 01a246a7-fc33-785e-9ddc-6c133bc1a5b2";

/// Arguments of `converge migrate-kind`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The kind whose resources move (omit with --cancel or --watch).
    kind: Option<String>,
    /// The version resources move from.
    #[arg(long, requires = "to")]
    from: Option<i32>,
    /// The version resources move to (its manifest declares the conversion).
    #[arg(long, requires = "from")]
    to: Option<i32>,
    /// Only resources matching this label selector.
    #[arg(short = 'l', long = "selector", default_value = "")]
    selector: String,
    /// Convert and check every resource, write nothing, report what would fail.
    #[arg(long)]
    dry_run: bool,
    /// Follow the migration to its end with a progress line.
    #[arg(long)]
    wait: bool,
    /// How long --wait waits (e.g. 30s, 10m); exit code 5 when it runs out.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    timeout: Duration,
    /// Show the kind's resources per version and its recent migrations.
    #[arg(long, conflicts_with_all = ["from", "cancel", "watch"])]
    status: bool,
    /// Cancel the running migration with this uid.
    #[arg(long, conflicts_with_all = ["from", "watch"])]
    cancel: Option<String>,
    /// Follow the migration with this uid (as --wait does).
    #[arg(long, conflicts_with = "from")]
    watch: Option<String>,
}

/// Runs `converge migrate-kind`.
pub async fn migrate(client: &Client, args: &MigrateArgs) -> Result<(), CliError> {
    if let Some(uid) = &args.cancel {
        let migration = client
            .migrations()
            .cancel_kind_migration(pb::CancelKindMigrationRequest { uid: uid.clone() })
            .await?
            .into_inner()
            .migration
            .ok_or_else(|| CliError::Failed("the server returned no migration".to_owned()))?;
        return print(&format!("{}\n", line(&migration)));
    }
    if let Some(uid) = &args.watch {
        return follow(client, uid, args.timeout).await;
    }
    let kind = args
        .kind
        .clone()
        .ok_or_else(|| CliError::Invalid("name the kind (converge migrate KIND --from N --to M)".to_owned()))?;
    if args.status {
        return status(client, &kind).await;
    }
    let (Some(from), Some(to)) = (args.from, args.to) else {
        return Err(CliError::Invalid(
            "--from and --to are required (or --status)".to_owned(),
        ));
    };
    let migration = client
        .migrations()
        .start_kind_migration(pb::StartKindMigrationRequest {
            kind,
            from_version: from,
            to_version: to,
            label_selector: args.selector.clone(),
            validate_only: args.dry_run,
            request_id: String::new(),
        })
        .await?
        .into_inner()
        .migration
        .ok_or_else(|| CliError::Failed("the server returned no migration".to_owned()))?;
    if !args.wait {
        return print(&format!("{}\n", line(&migration)));
    }
    follow(client, &migration.uid, args.timeout).await
}

/// Follows a migration to its end, one progress line per change; fails
/// (exit 1) when resources could not be converted.
async fn follow(client: &Client, uid: &str, timeout: Duration) -> Result<(), CliError> {
    let deadline = Instant::now() + timeout;
    let mut stream = client
        .migrations()
        .watch_kind_migration(pb::WatchKindMigrationRequest { uid: uid.to_owned() })
        .await?
        .into_inner();
    let mut last: Option<pb::KindMigration> = None;
    loop {
        let next = tokio::time::timeout_at(deadline, stream.message()).await;
        match next {
            Err(_) => {
                let shown = last.as_ref().map_or_else(|| uid.to_owned(), line);
                return Err(CliError::Timeout(format!("still running: {shown}")));
            }
            Ok(Err(status)) => return Err(status.into()),
            Ok(Ok(None)) => break,
            Ok(Ok(Some(message))) => {
                if let Some(migration) = message.migration {
                    print(&format!("{}\n", line(&migration)))?;
                    last = Some(migration);
                }
            }
        }
    }
    let last = last.ok_or_else(|| CliError::Failed("the watch sent nothing".to_owned()))?;
    for failure in &last.first_failures {
        let who = if failure.name.is_empty() {
            "migration"
        } else {
            &failure.name
        };
        print(&format!("  {who}: {}\n", failure.message))?;
    }
    match last.state() {
        pb::KindMigrationState::Succeeded => Ok(()),
        pb::KindMigrationState::Cancelled => Err(CliError::Failed(format!("KindMigration/{} was cancelled", last.uid))),
        _ if !last.done => Err(CliError::Failed(format!(
            "the watch of KindMigration/{} ended early",
            last.uid
        ))),
        _ => Err(CliError::Failed(format!(
            "KindMigration/{}: {} resource(s) could not be converted and stay on version {}",
            last.uid, last.failed, last.from_version
        ))),
    }
}

/// One progress line: `KindMigration/<uid> widget 1->2 RUNNING 1200/100000 converted, 3 failed`.
fn line(m: &pb::KindMigration) -> String {
    let state = match m.state() {
        pb::KindMigrationState::Running => "RUNNING",
        pb::KindMigrationState::Succeeded => "SUCCEEDED",
        pb::KindMigrationState::Failed => "FAILED",
        pb::KindMigrationState::Cancelled => "CANCELLED",
        pb::KindMigrationState::Unspecified => "UNKNOWN",
    };
    let dry = if m.validate_only { " (dry run)" } else { "" };
    format!(
        "KindMigration/{} {} {}->{}{dry} {state} {}/{} converted, {} failed",
        m.uid, m.kind, m.from_version, m.to_version, m.converted, m.total, m.failed
    )
}

/// Resources per version (from the fleet summary) and recent migrations.
async fn status(client: &Client, kind: &str) -> Result<(), CliError> {
    let manifests = client
        .kinds()
        .list_kind_manifests(pb::ListKindManifestsRequest {
            kind: Some(kind.to_owned()),
            page_size: 100,
            page_token: String::new(),
        })
        .await?
        .into_inner()
        .manifests;
    if manifests.is_empty() {
        return Err(CliError::NotFound(format!("kind {kind:?} has no manifest")));
    }
    // One exact count per (kind, version), read now.
    let summary = client
        .admin()
        .get_fleet_summary(pb::GetFleetSummaryRequest {
            kind: Some(kind.to_owned()),
            fresh: true,
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut out = String::from("VERSION  RESOURCES  CONVERTS FROM\n");
    for manifest in &manifests {
        let resources: i64 = summary
            .phase_counts
            .iter()
            .filter(|c| c.kind_version == manifest.kind_version)
            .map(|c| c.count)
            .sum();
        let from: Vec<String> = manifest
            .conversions
            .iter()
            .map(|c| c.from_version.to_string())
            .collect();
        let from = if from.is_empty() {
            "-".to_owned()
        } else {
            from.join(",")
        };
        out.push_str(&format!("{:<8} {:<10} {from}\n", manifest.kind_version, resources));
    }
    let migrations = client
        .migrations()
        .list_kind_migrations(pb::ListKindMigrationsRequest {
            kind: kind.to_owned(),
            page_size: 5,
            page_token: String::new(),
        })
        .await?
        .into_inner()
        .migrations;
    if !migrations.is_empty() {
        out.push_str("\nRECENT MIGRATIONS\n");
        for migration in &migrations {
            out.push_str(&line(migration));
            out.push('\n');
        }
    }
    print(&out)
}
