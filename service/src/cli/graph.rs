//! `converge graph KIND NAME`: the composition tree, printed as
//! `converge dev` prints its demo's (the same view code).

use clap::Args;
use converge_sdk::Client;
use converge_sdk::proto::v1 as pb;

use super::error::CliError;
use super::get::get_resource;
use super::output::print;
use super::tree;

/// Examples in `--help`.
pub const EXAMPLES: &str = "\
Examples:
  converge graph bom demo
  watch -n1 converge graph bom demo               # follow a tree filling in";

/// Arguments of `converge graph`.
#[derive(Debug, Args)]
pub struct GraphArgs {
    /// Kind of the root.
    pub kind: String,
    /// Name of the root.
    pub name: String,
}

/// Runs `converge graph`.
pub async fn run(client: &Client, args: &GraphArgs) -> Result<(), CliError> {
    // The root is read first so that a missing one is reported like every
    // other command reports it (the server's status, code and reason).
    get_resource(client, &args.kind, &args.name).await?;
    let root = pb::ResourceRef {
        kind: args.kind.clone(),
        name: args.name.clone(),
    };
    let snapshot = tree::snapshot(client, &root)
        .await?
        .ok_or_else(|| CliError::NotFound(format!("{}/{}", args.kind, args.name)))?;
    print(&format!(
        "{} is {}\n{}",
        snapshot.root_name(),
        tree::phase_name(snapshot.root.phase),
        snapshot.tree()
    ))
}
