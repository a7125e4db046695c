//! One `WorkStream` session: the Subscribe burst, redelivery, then the loop
//! of tasks, results, heartbeats, readiness and config pushes.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use converge_proto::worker_v1::work_stream_request::Payload as Up;
use converge_proto::worker_v1::work_stream_response::Payload as Down;
use converge_proto::worker_v1::{
    Interest, ProviderConfigUpdate, StageComplete, Subscribe, WorkHeartbeat, WorkStreamRequest, WorkStreamResponse,
};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio::time::{Instant, MissedTickBehavior, interval_at};
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::convert::{kind_to_proto, provider_config};
use super::runtime::{Run, sleep_until_opt};
use super::state::Shared;
use super::task::accept;
use super::types::KindVersion;

/// How long a closing worker waits for the broker to end the stream after
/// the worker half-closed it, so the last completions are flushed rather
/// than reset with the stream.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionEnd {
    /// The stream could not be opened.
    NotOpened,
    /// An open stream broke or was ended by the broker. `healthy` sessions
    /// (long enough, or that received a task) reset the reconnect backoff.
    Lost {
        /// Whether the session counts as healthy.
        healthy: bool,
    },
    /// The worker closed the stream at the end of a drain.
    Closed,
}

/// The stream was gone when a message was sent.
struct StreamGone;

/// The sending half of the stream.
struct Outbox {
    tx: UnboundedSender<WorkStreamRequest>,
}

impl Outbox {
    fn send(&self, payload: Up) -> Result<(), StreamGone> {
        self.tx
            .send(WorkStreamRequest { payload: Some(payload) })
            .map_err(|_| StreamGone)
    }

    fn interest(&self, kind: &KindVersion, ready: bool) -> Result<(), StreamGone> {
        tracing::debug!(%kind, ready, "sending interest");
        self.send(Up::Interest(Interest {
            kind: kind.kind.clone(),
            kind_version: kind.version,
            ready,
        }))
    }

    /// Hands every buffered result to the stream, oldest first. A result
    /// that cannot be sent goes back to the buffer for the next stream.
    /// A sent result is kept until the broker acknowledges it.
    fn flush(&self, shared: &Shared) -> Result<(), StreamGone> {
        while let Some(complete) = shared.pop_result() {
            let copy = complete.clone();
            if let Err(error) = self.tx.send(complete_request(complete)) {
                if let Some(Up::Complete(complete)) = error.0.payload {
                    shared.unpop_result(complete);
                }
                return Err(StreamGone);
            }
            shared.sent(copy);
        }
        Ok(())
    }
}

fn complete_request(complete: StageComplete) -> WorkStreamRequest {
    WorkStreamRequest {
        payload: Some(Up::Complete(complete)),
    }
}

/// Runs one session until the stream ends or the drain completes.
pub(crate) async fn run_session<F: Future<Output = ()>>(run: &mut Run, mut shutdown: Pin<&mut F>) -> SessionEnd {
    let shared = std::sync::Arc::clone(&run.shared);
    let settings = &shared.settings;
    let (tx, rx) = unbounded_channel();
    let outbox = Outbox { tx };

    // What the last stream did not acknowledge is sent again on this one.
    shared.requeue_unacknowledged();
    // The opening burst is queued before the call starts, so Subscribe is
    // the first message and the Interest frames ride right behind it.
    let resumed = shared.resumed();
    let subscribe = Subscribe {
        kinds: shared.providers.keys().map(kind_to_proto).collect(),
        max_inflight: i32::try_from(settings.max_parallel).unwrap_or(i32::MAX),
        resumed,
        agent: settings.agent.clone(),
    };
    tracing::debug!(resumed = subscribe.resumed.len(), "opening work stream");
    let mut readiness: BTreeMap<KindVersion, bool> = BTreeMap::new();
    if outbox.send(Up::Subscribe(subscribe)).is_err() {
        return SessionEnd::NotOpened;
    }
    for (kind, provider) in &shared.providers {
        // While draining every pair is announced unready: no new tasks.
        let ready = !run.draining() && shared.is_ready(kind, provider.as_ref());
        readiness.insert(kind.clone(), ready);
        if !ready && outbox.interest(kind, false).is_err() {
            return SessionEnd::NotOpened;
        }
    }

    let mut client = run.client.clone();
    let open = tokio::time::timeout(
        settings.rpc_timeout,
        client.work_stream(UnboundedReceiverStream::new(rx)),
    );
    let mut inbound = tokio::select! {
        result = open => match result {
            Ok(Ok(response)) => response.into_inner(),
            Ok(Err(status)) => {
                tracing::warn!(%status, "cannot open work stream");
                return SessionEnd::NotOpened;
            }
            Err(_) => {
                tracing::warn!("opening the work stream timed out");
                return SessionEnd::NotOpened;
            }
        },
        () = &mut shutdown, if !run.draining() => {
            run.start_drain();
            return SessionEnd::NotOpened;
        }
    };
    shared
        .counters
        .sessions
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tracing::info!(kinds = shared.providers.len(), "work stream open");
    let opened = Instant::now();
    let mut got_task = false;
    let healthy = |got_task: bool| got_task || opened.elapsed() >= settings.healthy_session;
    shared.config_repull.notify_one();

    // Redeliver what was computed while disconnected before anything else.
    if outbox.flush(&shared).is_err() {
        return SessionEnd::Lost { healthy: false };
    }

    let start = Instant::now();
    let mut heartbeat = interval_at(start + settings.heartbeat_interval, settings.heartbeat_interval);
    heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut poll = interval_at(
        start + settings.readiness_poll_interval,
        settings.readiness_poll_interval,
    );
    poll.set_missed_tick_behavior(MissedTickBehavior::Delay);

    loop {
        if run.draining() && shared.outstanding() == (0, 0) {
            close(outbox, &mut inbound).await;
            return SessionEnd::Closed;
        }
        let drain_deadline = run.drain_deadline;
        let sent = tokio::select! {
            message = inbound.next() => match message {
                Some(Ok(WorkStreamResponse { payload: Some(Down::Task(task)) })) => {
                    got_task = true;
                    let draining = run.draining();
                    accept(&shared, &mut run.tasks, task, draining);
                    Ok(())
                }
                Some(Ok(WorkStreamResponse { payload: Some(Down::ProviderConfigUpdate(update)) })) => {
                    apply_update(&shared, update);
                    Ok(())
                }
                Some(Ok(WorkStreamResponse { payload: Some(Down::ResultAck(ack)) })) => {
                    shared.acknowledge(&ack.leases);
                    Ok(())
                }
                Some(Ok(WorkStreamResponse { payload: None })) => Ok(()),
                Some(Err(status)) => {
                    tracing::warn!(%status, "work stream failed");
                    return SessionEnd::Lost { healthy: healthy(got_task) };
                }
                None => {
                    tracing::warn!("broker ended the work stream");
                    return SessionEnd::Lost { healthy: healthy(got_task) };
                }
            },
            () = shared.results_ready.notified() => outbox.flush(&shared),
            _ = heartbeat.tick() => {
                let leases = shared.attested_leases();
                outbox.send(Up::Heartbeat(WorkHeartbeat { leases }))
            }
            _ = poll.tick(), if !run.draining() => poll_readiness(&shared, &outbox, &mut readiness),
            () = shared.configs_changed.notified(), if !run.draining() => {
                poll_readiness(&shared, &outbox, &mut readiness)
            }
            () = &mut shutdown, if !run.draining() => {
                run.start_drain();
                announce_unready(&outbox, &mut readiness)
            }
            () = sleep_until_opt(drain_deadline), if drain_deadline.is_some() => {
                let (running, undelivered) = shared.outstanding();
                tracing::warn!(running, undelivered, "drain timeout reached; closing the stream");
                close(outbox, &mut inbound).await;
                return SessionEnd::Closed;
            }
        };
        if sent.is_err() {
            // The call ended underneath us; the inbound side reports why on
            // the next stream, so there is nothing more to read here.
            return SessionEnd::Lost {
                healthy: healthy(got_task),
            };
        }
    }
}

/// Sends an Interest for every pair whose readiness changed since the last
/// one sent on this stream.
fn poll_readiness(
    shared: &Shared,
    outbox: &Outbox,
    readiness: &mut BTreeMap<KindVersion, bool>,
) -> Result<(), StreamGone> {
    for (kind, provider) in &shared.providers {
        let ready = shared.is_ready(kind, provider.as_ref());
        let last = readiness.insert(kind.clone(), ready);
        if last != Some(ready) {
            tracing::info!(%kind, ready, "provider readiness changed");
            outbox.interest(kind, ready)?;
        }
    }
    Ok(())
}

/// Tells the broker to stop sending tasks for every pair (drain).
fn announce_unready(outbox: &Outbox, readiness: &mut BTreeMap<KindVersion, bool>) -> Result<(), StreamGone> {
    for (kind, ready) in readiness.iter_mut() {
        if *ready {
            *ready = false;
            outbox.interest(kind, false)?;
        }
    }
    Ok(())
}

fn apply_update(shared: &Shared, update: ProviderConfigUpdate) {
    let kind = KindVersion::new(update.kind, update.kind_version);
    let config = if update.deleted {
        None
    } else {
        provider_config(update.spec, update.data)
    };
    shared.apply_pushed_config(&kind, config);
}

/// Half-closes the stream and waits (bounded) for the broker to end it, so
/// queued completions are transmitted instead of being reset.
async fn close(outbox: Outbox, inbound: &mut tonic::Streaming<WorkStreamResponse>) {
    drop(outbox);
    let grace = tokio::time::sleep(CLOSE_GRACE);
    tokio::pin!(grace);
    loop {
        tokio::select! {
            message = inbound.next() => match message {
                // A task sent after the half-close cannot be answered; the
                // broker releases its lease when the stream ends.
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => break,
            },
            () = &mut grace => {
                tracing::debug!("broker did not end the stream after the half-close");
                break;
            }
        }
    }
    tracing::info!("work stream closed");
}
