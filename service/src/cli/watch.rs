//! `converge watch [KIND] [-l SEL]` and `converge watch events KIND NAME`:
//! one line per change, resuming after a lost connection (a server
//! restart, another member) from the last position received, so no change
//! is missed and none is printed twice.

use std::time::Duration;

use clap::Args;
use converge_sdk::Client;
use converge_sdk::proto::v1 as pb;
use tokio_stream::StreamExt as _;

use super::error::CliError;
use super::get::{check_kind, phase};
use super::output::print;

/// Examples in `--help`.
pub const EXAMPLES: &str = "\
Examples:
  converge watch noop                    # a snapshot, then every change
  converge watch -l team=payments        # every kind
  converge watch noop --no-snapshot      # changes from now on
  converge watch noop hello              # one resource (also before it exists)
  converge watch events bom demo         # a resource's event runs as they happen

Each line: TYPE KIND/NAME PHASE observed/generation (events: TYPE REASON COUNT MESSAGE).
The watch reconnects by itself (backoff up to 5s) and resumes where it was.";

/// The longest pause between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// The first pause.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);

/// Arguments of `converge watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// A kind (all kinds when omitted), a kind and a name, or `events KIND NAME`.
    #[arg(value_name = "KIND [NAME] | events KIND NAME")]
    pub target: Vec<String>,

    /// Label selector (resources only).
    #[arg(short = 'l', long = "selector")]
    pub selector: Option<String>,

    /// Start with the changes from now on, without the current objects.
    #[arg(long)]
    pub no_snapshot: bool,
}

/// Runs `converge watch` until interrupted.
pub async fn run(client: &Client, args: &WatchArgs) -> Result<(), CliError> {
    match args.target.as_slice() {
        [events, kind, name] if events == "events" => watch_events(client, args, kind, name).await,
        [] => watch_resources(client, args, None, None).await,
        [kind] => {
            check_kind(client, kind).await?;
            watch_resources(client, args, Some(kind), None).await
        }
        [kind, name] => {
            check_kind(client, kind).await?;
            watch_resources(client, args, Some(kind), Some(name)).await
        }
        _ => Err(CliError::Invalid(
            "expected `watch [KIND [NAME]]` or `watch events KIND NAME`".to_owned(),
        )),
    }
}

/// Whether a failed watch is worth resuming: the server went away or ended
/// the stream for a reason that passes.
fn retryable(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled | tonic::Code::ResourceExhausted
    )
}

/// What a failed attempt leads to: the command fails when the watch was
/// never established (nothing to resume: the server is unreachable or
/// refused it) or the failure does not pass; else the watch resumes, and
/// the first failure of an outage is said on stderr.
fn resume_or_fail(failure: tonic::Status, established: bool, announced: &mut bool) -> Result<(), CliError> {
    if !established || !retryable(&failure) {
        return Err(failure.into());
    }
    if !*announced {
        *announced = true;
        eprintln!(
            "converge: the watch was interrupted ({}); resuming",
            failure.code().description()
        );
    }
    Ok(())
}

/// Whether the resume position is no longer (or not yet) usable: start
/// over with a snapshot.
fn position_lost(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::OutOfRange
}

/// Sleeps the current backoff and doubles it (up to [`MAX_BACKOFF`]).
async fn back_off(delay: &mut Duration) {
    tokio::time::sleep(*delay).await;
    *delay = (*delay * 2).min(MAX_BACKOFF);
}

fn change_type(t: i32) -> &'static str {
    match pb::WatchEventType::try_from(t) {
        Ok(pb::WatchEventType::Added) => "ADDED",
        Ok(pb::WatchEventType::Modified) => "MODIFIED",
        Ok(pb::WatchEventType::Deleted) => "DELETED",
        _ => "UNKNOWN",
    }
}

async fn watch_resources(
    client: &Client,
    args: &WatchArgs,
    kind: Option<&str>,
    name: Option<&str>,
) -> Result<(), CliError> {
    let mut position = String::new();
    let mut snapshot = !args.no_snapshot;
    let mut delay = FIRST_BACKOFF;
    let (mut established, mut announced) = (false, false);
    loop {
        let request = pb::WatchResourcesRequest {
            kind: kind.map(str::to_owned),
            name: name.map(str::to_owned),
            label_selector: args.selector.clone().unwrap_or_default(),
            send_initial_events: position.is_empty().then_some(snapshot),
            resource_version: position.clone(),
            allow_bookmarks: true,
            ..Default::default()
        };
        let failure = match client.resources().watch_resources(request).await {
            Ok(stream) => {
                let mut stream = stream.into_inner();
                established = true;
                loop {
                    match stream.next().await {
                        Some(Ok(message)) => {
                            delay = FIRST_BACKOFF;
                            announced = false;
                            if let Some(r) = &message.resource
                                && message.r#type != pb::WatchEventType::Bookmark as i32
                            {
                                print(&format!(
                                    "{} {}/{} {} {}/{}\n",
                                    change_type(message.r#type),
                                    r.kind,
                                    r.name,
                                    phase(r.phase),
                                    r.observed_generation,
                                    r.generation
                                ))?;
                            }
                            if !message.resource_version.is_empty() {
                                position = message.resource_version;
                            }
                        }
                        Some(Err(status)) => break status,
                        None => break tonic::Status::unavailable("the server ended the watch"),
                    }
                }
            }
            Err(status) => status,
        };
        if position_lost(&failure) {
            eprintln!("converge: the watch position expired; starting over with a snapshot");
            position.clear();
            snapshot = true;
        } else {
            resume_or_fail(failure, established, &mut announced)?;
        }
        back_off(&mut delay).await;
    }
}

async fn watch_events(client: &Client, args: &WatchArgs, kind: &str, name: &str) -> Result<(), CliError> {
    let mut position = String::new();
    let mut delay = FIRST_BACKOFF;
    let (mut established, mut announced) = (false, false);
    loop {
        let request = pb::WatchResourceEventsRequest {
            kind: kind.to_owned(),
            name: name.to_owned(),
            event_version: position.clone(),
            allow_bookmarks: true,
            snapshot_limit: if args.no_snapshot { 1 } else { 0 },
            ..Default::default()
        };
        let failure = match client.resources().watch_resource_events(request).await {
            Ok(stream) => {
                let mut stream = stream.into_inner();
                established = true;
                let mut skip_snapshot = args.no_snapshot && position.is_empty();
                loop {
                    match stream.next().await {
                        Some(Ok(message)) => {
                            delay = FIRST_BACKOFF;
                            announced = false;
                            let t = pb::EventWatchType::try_from(message.r#type);
                            if t == Ok(pb::EventWatchType::Bookmark) && message.initial_events_end {
                                skip_snapshot = false;
                            }
                            if let Some(e) = &message.event
                                && t != Ok(pb::EventWatchType::Bookmark)
                                && !(skip_snapshot && t == Ok(pb::EventWatchType::Snapshot))
                            {
                                let severity = if e.r#type == pb::EventType::Warning as i32 {
                                    "Warning"
                                } else {
                                    "Normal"
                                };
                                print(&format!("{severity} {} x{} {}\n", e.reason, e.count, e.message))?;
                            }
                            if !message.event_version.is_empty() {
                                position = message.event_version;
                            }
                        }
                        Some(Err(status)) => break status,
                        None => break tonic::Status::unavailable("the server ended the watch"),
                    }
                }
            }
            Err(status) => status,
        };
        if position_lost(&failure) {
            eprintln!("converge: the watch position expired; starting over");
            position.clear();
        } else if failure.code() == tonic::Code::NotFound && !position.is_empty() {
            // The resource was removed while watched: the watch is over.
            return print(&format!("{kind}/{name} is gone\n"));
        } else {
            resume_or_fail(failure, established, &mut announced)?;
        }
        back_off(&mut delay).await;
    }
}
