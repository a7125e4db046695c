//! `converge delete KIND NAME [--wait [--timeout D]]`.

use std::time::{Duration, Instant};

use clap::Args;
use converge_sdk::Client;
use converge_sdk::proto::v1 as pb;

use super::error::CliError;
use super::output::{parse_duration, print};

/// Examples in `--help`.
pub const EXAMPLES: &str = "\
Examples:
  converge delete noop hello
  converge delete bom demo --wait --timeout 5m   # returns once the tree is gone
  converge delete noop maybe --ignore-not-found";

/// How often `--wait` looks.
const POLL: Duration = Duration::from_millis(250);

/// Arguments of `converge delete`.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// Kind of the resource.
    pub kind: String,
    /// Name of the resource.
    pub name: String,
    /// Return only once the resource and every resource of its composed
    /// tree are gone.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits (e.g. 90s, 5m); exit code 5 when it runs out.
    #[arg(long, default_value = "5m", value_parser = parse_duration, requires = "wait")]
    pub timeout: Duration,
    /// Succeed when the resource does not exist.
    #[arg(long)]
    pub ignore_not_found: bool,
    /// Have the server check the request without deleting.
    #[arg(long)]
    pub dry_run: bool,
}

/// Runs `converge delete`.
pub async fn run(client: &Client, args: &DeleteArgs) -> Result<(), CliError> {
    let answer = client
        .resources()
        .delete_resource(pb::DeleteResourceRequest {
            kind: args.kind.clone(),
            name: args.name.clone(),
            allow_missing: args.ignore_not_found,
            validate_only: args.dry_run,
            ..Default::default()
        })
        .await?
        .into_inner();
    let name = format!("Resource/{}/{}", args.kind, args.name);
    if answer.resource.is_none() {
        return print(&format!("{name} not found\n"));
    }
    if args.dry_run {
        return print(&format!("{name} deleted (dry run)\n"));
    }
    if !args.wait {
        return print(&format!("{name} deleting\n"));
    }
    let deadline = Instant::now() + args.timeout;
    let root = pb::ResourceRef {
        kind: args.kind.clone(),
        name: args.name.clone(),
    };
    loop {
        let left = remaining(client, &root).await?;
        if left == 0 {
            return print(&format!("{name} deleted\n"));
        }
        if Instant::now() >= deadline {
            return Err(CliError::Timeout(format!(
                "{name} still has {left} resource(s) left after {}s",
                args.timeout.as_secs()
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// How many of the resource and its tree still exist (the tree counted up
/// to one page: any is enough to go on waiting).
async fn remaining(client: &Client, root: &pb::ResourceRef) -> Result<usize, CliError> {
    let exists = match client
        .resources()
        .get_resource(pb::GetResourceRequest {
            kind: root.kind.clone(),
            name: root.name.clone(),
        })
        .await
    {
        Ok(_) => 1,
        Err(status) if status.code() == tonic::Code::NotFound => 0,
        Err(status) => return Err(status.into()),
    };
    let tree = match client
        .resources()
        .list_resources(pb::ListResourcesRequest {
            root: Some(root.clone()),
            page_size: 100,
            ..Default::default()
        })
        .await
    {
        Ok(page) => page.into_inner().resources.len(),
        Err(status) if status.code() == tonic::Code::NotFound => 0,
        Err(status) => return Err(status.into()),
    };
    Ok(exists + tree)
}
