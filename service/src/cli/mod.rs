//! The client commands of `converge` (`apply`, `get`, `describe`, `watch`,
//! `delete`, ...): a gRPC client of a running server with kubectl habits.
//!
//! They have a command line of their own ([`ClientCli`]): the server's
//! flags (database, listener, TLS of the listener, ...) are `global` on the
//! server's parser, and a client command must neither need nor show them.
//! `main` hands the arguments here when the first one names a client
//! command; `converge --help` lists both sets (see [`full_command`]).
//!
//! One module per concern: [`connect`] (address and TLS), [`envelope`] (the
//! documents `apply` reads and `get -o json|yaml` prints), [`output`]
//! (tables and formats), [`error`] (messages and exit codes), then one
//! module per command group.

mod admin;
mod apply;
mod connect;
mod delete;
mod describe;
mod envelope;
mod error;
mod get;
mod graph;
mod migrate;
mod output;
mod plan;
mod policy;
mod render;
pub(crate) mod tree;
mod verbs;
mod watch;
mod yaml;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use converge_sdk::proto::v1 as pb;
use converge_service::config::Cli;

pub use self::error::CliError;

/// Exit codes, shown by every client command's `--help`.
const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  any other failure (a refused write, a conflict, an internal error)
  2  invalid input: bad flags, a file that does not parse, INVALID_ARGUMENT
  3  not found: the object (or its kind) does not exist
  4  unavailable: cannot connect, or the server is unavailable
  5  timed out waiting (delete --wait, invoke --wait)
  6  plan, diff: something would change";

/// Examples shown by `converge <client command> --help` at the top level.
const EXAMPLES: &str = "\
Examples:
  converge apply -f examples/cli/
  converge get noop -l team=payments -o wide
  converge describe noop hello
  converge watch noop
  converge delete bom demo --wait --timeout 2m";

/// The command line of the client commands.
#[derive(Debug, Parser)]
#[command(
    name = "converge",
    version = converge_service::version::VERSION,
    about = "Client commands of converge: talk to a running server over gRPC.",
    after_help = format!("{EXAMPLES}\n\n{EXIT_CODES}"),
)]
pub struct ClientCli {
    /// Which server, and how to reach it.
    #[command(flatten)]
    pub connection: connect::ConnectionArgs,

    /// The command.
    #[command(subcommand)]
    pub command: ClientCommand,
}

/// The client commands.
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Create or update objects from YAML or JSON documents.
    #[command(after_help = format!("{}\n\n{EXIT_CODES}", apply::EXAMPLES))]
    Apply(apply::ApplyArgs),
    /// List or read resources, kinds, provider configs, reactor bindings,
    /// operations or cluster members.
    #[command(after_help = format!("{}\n\n{EXIT_CODES}", get::EXAMPLES))]
    Get(get::GetArgs),
    /// Show one resource in detail: spec, status, conditions, events,
    /// owner, children, dependencies and what it is waiting for.
    #[command(after_help = format!("{}\n\n{EXIT_CODES}", describe::EXAMPLES))]
    Describe(describe::DescribeArgs),
    /// Follow changes to resources, or to one resource's events; survives
    /// server restarts.
    #[command(after_help = format!("{}\n\n{EXIT_CODES}", watch::EXAMPLES))]
    Watch(watch::WatchArgs),
    /// Delete a resource (and with it its composed tree).
    #[command(after_help = format!("{}\n\n{EXIT_CODES}", delete::EXAMPLES))]
    Delete(delete::DeleteArgs),
    /// Ask for a reconcile now.
    #[command(after_help = format!("{}\n\n{EXIT_CODES}", verbs::RECONCILE_EXAMPLES))]
    Reconcile(verbs::ReconcileArgs),
    /// Stop reconciling a resource until it is released.
    #[command(after_help = format!("{}\n\n{EXIT_CODES}", verbs::QUARANTINE_EXAMPLES))]
    Quarantine(verbs::QuarantineArgs),
    /// Release a quarantined resource.
    #[command(after_help = format!("{}\n\n{EXIT_CODES}", verbs::UNQUARANTINE_EXAMPLES))]
    Unquarantine(verbs::QuarantineArgs),
    /// Clear a terminal failure (or a teardown that gave up) and retry.
    #[command(name = "clear-failure", after_help = format!("{}\n\n{EXIT_CODES}", admin::ACTION_EXAMPLES))]
    ClearFailure(admin::ActionArgs),
    /// Forget the failure count and run a task waiting out its retry delay now.
    #[command(name = "reset-backoff", after_help = format!("{}\n\n{EXIT_CODES}", admin::ACTION_EXAMPLES))]
    ResetBackoff(admin::ActionArgs),
    /// Take a task's lease back from the broker holding it; any worker may run it.
    #[command(name = "release-lease", after_help = format!("{}\n\n{EXIT_CODES}", admin::ACTION_EXAMPLES))]
    ReleaseLease(admin::ActionArgs),
    /// Complete a stuck teardown without the worker (nothing external is cleaned up).
    #[command(name = "force-finalize", after_help = format!("{}\n\n{EXIT_CODES}", admin::ACTION_EXAMPLES))]
    ForceFinalize(admin::ActionArgs),
    /// List a resource's event runs, newest first.
    #[command(after_help = format!("{}\n\n{EXIT_CODES}", verbs::EVENTS_EXAMPLES))]
    Events(verbs::EventsArgs),
    /// Invoke a verb (an operation) on a resource.
    #[command(after_help = format!("{}\n\n{EXIT_CODES}", verbs::INVOKE_EXAMPLES))]
    Invoke(verbs::InvokeArgs),
    /// List a root resource's retained spec revisions.
    #[command(after_help = format!("{}\n\n{EXIT_CODES}", verbs::HISTORY_EXAMPLES))]
    History(verbs::HistoryArgs),
    /// Restore the spec of an earlier generation.
    #[command(after_help = format!("{}\n\n{EXIT_CODES}", verbs::ROLLBACK_EXAMPLES))]
    Rollback(verbs::RollbackArgs),
    /// List reactor deliveries (pending and given up).
    #[command(after_help = format!("{}\n\n{EXIT_CODES}", verbs::DELIVERIES_EXAMPLES))]
    Deliveries(verbs::DeliveriesArgs),
    /// Deliver again reactor deliveries that gave up: one by id, all of a
    /// binding, or those of resources chosen by kind and label selector.
    #[command(after_help = format!("{}\n\n{EXIT_CODES}", verbs::REDRIVE_EXAMPLES))]
    Redrive(verbs::RedriveArgs),
    /// Move a kind's resources to another version, converting their specs
    /// (the target manifest's conversions); also `converge migrate KIND`.
    #[command(name = "migrate-kind", after_help = format!("{}\n\n{EXIT_CODES}", migrate::EXAMPLES))]
    MigrateKind(migrate::MigrateArgs),
    /// Print a resource's composition tree, as `converge dev` does.
    #[command(after_help = format!("{}\n\n{EXIT_CODES}", graph::EXAMPLES))]
    Graph(graph::GraphArgs),
    /// Preview what applying documents (or --delete) would do: the children
    /// a composition would add, change or prune, the edges, the teardown order.
    #[command(after_help = format!("{}\n\n{EXIT_CODES}", plan::EXAMPLES))]
    Plan(plan::PlanArgs),
    /// `plan` with every spec field that would change.
    #[command(after_help = format!("{}\n\n{EXIT_CODES}", plan::EXAMPLES))]
    Diff(plan::PlanArgs),
    /// Evaluate a composition declared as data offline: print the children
    /// a resource would compose, with their dependencies and value flows.
    #[command(after_help = format!("{}\n\n{EXIT_CODES}", render::EXAMPLES))]
    Render(render::RenderArgs),
    /// Check an authorization policy file offline; with --as, say whether
    /// an identity may do something.
    #[command(name = "check-policy", after_help = format!("{}\n\n{EXIT_CODES}", policy::EXAMPLES))]
    CheckPolicy(policy::CheckPolicyArgs),
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  source <(converge completion bash)\n  converge completion fish > ~/.config/fish/completions/converge.fish"
    )]
    Completion(CompletionArgs),
}

/// Arguments of `converge completion`.
#[derive(Debug, clap::Args)]
pub struct CompletionArgs {
    /// The shell.
    pub shell: clap_complete::Shell,
}

/// The command line with `converge migrate KIND ...` read as
/// `converge migrate-kind KIND ...`: `converge migrate` alone (or with
/// flags) stays the server command that applies the database schema.
pub fn with_aliases(mut args: Vec<OsString>) -> Vec<OsString> {
    let kind_named = args
        .get(2)
        .and_then(|a| a.to_str())
        .is_some_and(|a| !a.starts_with('-'));
    if args.get(1).is_some_and(|a| a == "migrate") && kind_named {
        args[1] = OsString::from("migrate-kind");
    }
    args
}

/// Whether `args` (the whole command line, program name first) run a client
/// command: its first argument names one (or `help` does).
pub fn is_client_command(args: &[OsString]) -> bool {
    let client = ClientCli::command();
    let names = |arg: Option<&OsString>| {
        arg.and_then(|a| a.to_str())
            .is_some_and(|name| name != "help" && client.find_subcommand(name).is_some())
    };
    names(args.get(1)) || (args.get(1).is_some_and(|a| a == "help") && names(args.get(2)))
}

/// Every command of `converge`, server and client, for the top-level help
/// and for completion scripts. The client commands are taken with their
/// connection options; the server's global options are not theirs, which
/// the dispatch in `main` guarantees.
pub fn full_command() -> clap::Command {
    let client = ClientCli::command();
    let connection: Vec<clap::Arg> = client.get_arguments().filter(|a| a.is_global_set()).cloned().collect();
    let mut command = Cli::command();
    for sub in client.get_subcommands() {
        let mut sub = sub.clone();
        for arg in &connection {
            sub = sub.arg(arg.clone().global(false));
        }
        command = command.subcommand(sub);
    }
    command
}

/// Runs a client command line (program name first) to its exit code.
pub fn main(args: Vec<OsString>) -> ExitCode {
    let cli = match ClientCli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    if let ClientCommand::Completion(args) = &cli.command {
        // Written through `print`, so that `| head` ends it quietly (the
        // generator itself panics on a closed stdout).
        let mut script = Vec::new();
        clap_complete::generate(args.shell, &mut full_command(), "converge", &mut script);
        return finish(output::print_bytes(&script));
    }
    if let ClientCommand::CheckPolicy(args) = &cli.command {
        return finish(policy::run(args));
    }
    if let ClientCommand::Render(args) = &cli.command {
        return finish(render::run(args));
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("converge: cannot start the async runtime: {e}");
            return ExitCode::from(error::EXIT_FAILURE);
        }
    };
    finish(runtime.block_on(run(cli)))
}

/// The exit code of a command's result, its error (if any) on stderr.
fn finish(result: Result<(), CliError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            use std::io::Write as _;
            // A closed stderr has nobody to tell.
            let _ = std::io::stderr().write_all(e.render().as_bytes());
            ExitCode::from(e.exit_code())
        }
    }
}

async fn run(cli: ClientCli) -> Result<(), CliError> {
    // Files are read (and refused) before anything connects.
    if let ClientCommand::Apply(args) = &cli.command {
        let documents = apply::read(args)?;
        let client = cli.connection.connect().await?;
        return apply::run(&client, args, documents).await;
    }
    let client = cli.connection.connect().await?;
    match cli.command {
        ClientCommand::Apply(_)
        | ClientCommand::Completion(_)
        | ClientCommand::CheckPolicy(_)
        | ClientCommand::Render(_) => Ok(()),
        ClientCommand::Get(args) => get::run(&client, &args).await,
        ClientCommand::Describe(args) => describe::run(&client, &args).await,
        ClientCommand::Watch(args) => watch::run(&client, &args).await,
        ClientCommand::Delete(args) => delete::run(&client, &args).await,
        ClientCommand::Reconcile(args) => verbs::reconcile(&client, &args).await,
        ClientCommand::Quarantine(args) => verbs::quarantine(&client, &args).await,
        ClientCommand::Unquarantine(args) => verbs::unquarantine(&client, &args).await,
        ClientCommand::ClearFailure(args) => {
            admin::act(&client, pb::ResourceAction::ClearFailure, &args.selection).await
        }
        ClientCommand::ResetBackoff(args) => {
            admin::act(&client, pb::ResourceAction::ResetBackoff, &args.selection).await
        }
        ClientCommand::ReleaseLease(args) => {
            admin::act(&client, pb::ResourceAction::ReleaseLease, &args.selection).await
        }
        ClientCommand::ForceFinalize(args) => {
            admin::act(&client, pb::ResourceAction::ForceFinalize, &args.selection).await
        }
        ClientCommand::Events(args) => verbs::events(&client, &args).await,
        ClientCommand::Invoke(args) => verbs::invoke(&client, &args).await,
        ClientCommand::MigrateKind(args) => migrate::migrate(&client, &args).await,
        ClientCommand::History(args) => verbs::history(&client, &args).await,
        ClientCommand::Rollback(args) => verbs::rollback(&client, &args).await,
        ClientCommand::Graph(args) => graph::run(&client, &args).await,
        ClientCommand::Plan(args) => plan::run(&client, &args, false).await,
        ClientCommand::Diff(args) => plan::run(&client, &args, true).await,
        ClientCommand::Deliveries(args) => verbs::deliveries(&client, &args).await,
        ClientCommand::Redrive(args) => verbs::redrive(&client, &args).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &[&str]) -> Vec<OsString> {
        line.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_command_line_is_valid() {
        ClientCli::command().debug_assert();
        full_command().debug_assert();
    }

    /// `line`'s words as a shell would split them (single and double
    /// quotes), up to a `#` comment.
    fn shell_words(line: &str) -> Vec<String> {
        let mut words = Vec::new();
        let (mut word, mut quote, mut any) = (String::new(), None, false);
        for c in line.chars() {
            match (quote, c) {
                (None, '#') if word.is_empty() => break,
                (None, '\'' | '"') => (quote, any) = (Some(c), true),
                (Some(q), c) if c == q => quote = None,
                (None, c) if c.is_whitespace() => {
                    if any || !word.is_empty() {
                        words.push(std::mem::take(&mut word));
                    }
                    any = false;
                }
                (_, c) => word.push(c),
            }
        }
        if any || !word.is_empty() {
            words.push(word);
        }
        words
    }

    #[test]
    fn every_help_example_parses_and_names_files_that_exist() {
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut client = ClientCli::command();
        client.build();
        let mut checked = 0;
        let helps = std::iter::once(client.render_long_help().to_string()).chain(
            client
                .get_subcommands()
                .map(|s| s.clone().render_long_help().to_string()),
        );
        for help in helps {
            let examples = help.split_once("Examples:\n").map_or("", |(_, rest)| rest);
            for line in examples.lines().take_while(|l| !l.trim().is_empty()) {
                let Some(command) = line.trim_start().strip_prefix("converge ") else {
                    continue;
                };
                let mut words = vec!["converge".to_owned()];
                words.extend(shell_words(command));
                if let Some(source) = words.iter().position(|w| w == "source") {
                    words.truncate(source);
                }
                let stop = words
                    .iter()
                    .position(|w| matches!(w.as_str(), "|" | ">" | "<"))
                    .unwrap_or(words.len());
                words.truncate(stop);
                // As `main` reads it (`converge migrate KIND` is `migrate-kind`).
                let words: Vec<String> = with_aliases(words.iter().map(OsString::from).collect())
                    .into_iter()
                    .map(|w| w.to_string_lossy().into_owned())
                    .collect();
                let parsed = ClientCli::try_parse_from(&words);
                assert!(parsed.is_ok(), "`{line}` does not parse: {:?}", parsed.err());
                for pair in words.windows(2) {
                    if pair[0] == "-f" && pair[1].starts_with("examples/") {
                        assert!(
                            repo.join(&pair[1]).exists(),
                            "`{line}` names {}, which does not exist",
                            pair[1]
                        );
                    }
                }
                checked += 1;
            }
        }
        assert!(checked >= 30, "only {checked} examples found");
    }

    #[test]
    fn every_client_command_has_examples() {
        let mut client = ClientCli::command();
        client.build();
        for sub in client.get_subcommands().filter(|s| s.get_name() != "help") {
            let help = sub.clone().render_long_help().to_string();
            assert!(
                help.contains("Examples:\n  "),
                "{} --help has no examples",
                sub.get_name()
            );
        }
    }

    #[test]
    fn migrate_with_a_kind_is_the_kind_migration() {
        assert_eq!(
            with_aliases(args(&["converge", "migrate", "widget", "--from", "1"])),
            args(&["converge", "migrate-kind", "widget", "--from", "1"])
        );
        assert_eq!(
            with_aliases(args(&["converge", "migrate"])),
            args(&["converge", "migrate"])
        );
        assert_eq!(
            with_aliases(args(&["converge", "migrate", "--database-url", "x"])),
            args(&["converge", "migrate", "--database-url", "x"])
        );
    }

    #[test]
    fn client_commands_are_told_from_server_ones() {
        assert!(is_client_command(&args(&["converge", "get", "noop"])));
        assert!(is_client_command(&args(&["converge", "help", "apply"])));
        assert!(!is_client_command(&args(&["converge"])));
        assert!(!is_client_command(&args(&["converge", "serve"])));
        assert!(!is_client_command(&args(&["converge", "dev", "--teams", "a"])));
        assert!(!is_client_command(&args(&["converge", "help"])));
        assert!(!is_client_command(&args(&["converge", "--listen-addr", "get"])));
    }

    #[test]
    fn client_help_names_no_server_option() {
        let mut client = ClientCli::command();
        client.build();
        for sub in client.get_subcommands() {
            let help = sub.clone().render_long_help().to_string();
            for server_flag in [
                "--database-url",
                "--listen-addr",
                "--tls-cert-file",
                "--log-level",
                "--role",
            ] {
                assert!(!help.contains(server_flag), "{} shows {server_flag}", sub.get_name());
            }
        }
        let help = full_command().render_help().to_string();
        for name in [
            "serve",
            "dev",
            "migrate",
            "apply",
            "get",
            "describe",
            "watch",
            "completion",
        ] {
            assert!(help.contains(name), "{name} missing from:\n{help}");
        }
    }
}
