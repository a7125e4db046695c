//! Accepting and executing one task: provider lookup, readiness, bounded
//! concurrency, deadline, panic isolation.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use converge_proto::worker_v1::StageTask;
use futures::FutureExt as _;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument as _;

use super::convert::{Fence, duration_from_proto, request_from_task};
use super::outcome::{HandlerError, Outcome};
use super::provider::Provider;
use super::request::ReactionRequest;
use super::state::Shared;
use super::types::KindVersion;

/// Message of the transient failure a task gets when its deadline passes.
pub(crate) const DEADLINE_EXCEEDED: &str = "deadline exceeded";

/// Takes a task off the stream. Tasks that cannot run (draining, unknown
/// pair, provider not ready, undecodable) fail transiently at once, so the
/// broker retries them elsewhere or later; never terminally, since another
/// worker or a later moment may succeed. The rest run on `tasks`, which
/// belong to the process rather than to the stream.
pub(crate) fn accept(shared: &Arc<Shared>, tasks: &mut JoinSet<()>, mut task: StageTask, draining: bool) {
    // Reap finished tasks so the set does not grow with the task count.
    while tasks.try_join_next().is_some() {}

    let fence = Fence::of(&task);
    let kind = KindVersion::new(task.kind.clone(), task.kind_version);
    let reject = |message: String| {
        tracing::debug!(lease = %fence.lease_token, %kind, %message, "task rejected");
        shared.finish(fence.complete(Err(HandlerError::transient(message))));
    };
    if draining {
        return reject("worker is shutting down".to_owned());
    }
    let Some(provider) = shared.providers.get(&kind).cloned() else {
        return reject(format!("this worker has no provider for kind {kind}"));
    };
    if !shared.is_ready(&kind, provider.as_ref()) {
        return reject(format!("provider for kind {kind} is not ready"));
    }
    // The budget counts from arrival, including any wait for a free slot.
    let deadline = task
        .task_deadline
        .as_ref()
        .map(|d| Instant::now() + duration_from_proto(d));
    if !shared.begin(&fence.lease_token, fence.claim_epoch) {
        tracing::warn!(lease = %fence.lease_token, "duplicate task delivery ignored");
        return;
    }
    let trace_context = std::mem::take(&mut task.trace_context);
    let request = match request_from_task(task, shared.default_config(&kind), deadline.map(Instant::into_std)) {
        Ok(request) => request,
        Err(error) => {
            shared.finish(fence.complete(Err(HandlerError::transient(format!("cannot decode task: {error}")))));
            return;
        }
    };
    let span = if trace_context.is_empty() {
        tracing::debug_span!("task", lease = %fence.lease_token, %kind, reaction = %request.reaction)
    } else {
        handler_span(&trace_context, &kind.to_string(), &request.reaction, &fence.lease_token)
    };
    let shared = Arc::clone(shared);
    tasks.spawn(
        async move {
            let result = execute(&shared, provider, request, deadline).await;
            if let Err(error) = &result {
                tracing::debug!(terminal = error.is_terminal(), message = error.message(), "task failed");
            }
            shared.finish(fence.complete(result));
        }
        .instrument(span),
    );
}

/// Runs the handler in a slot, bounded by the deadline, turning a panic into
/// a transient failure.
async fn execute(
    shared: &Shared,
    provider: Arc<dyn Provider>,
    request: ReactionRequest,
    deadline: Option<Instant>,
) -> Result<Outcome, HandlerError> {
    let run = async {
        // The permit lives inside this future, so it is released only when
        // the handler has really stopped (finished, panicked or cancelled).
        let _slot = shared
            .slots
            .acquire()
            .await
            .map_err(|_| HandlerError::transient("worker is shutting down"))?;
        match AssertUnwindSafe(provider.handle(request)).catch_unwind().await {
            Ok(result) => result,
            Err(panic) => Err(HandlerError::transient(format!(
                "handler panicked: {}",
                panic_message(panic.as_ref())
            ))),
        }
    };
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, run).await.unwrap_or_else(|_| {
            Err(HandlerError::transient(DEADLINE_EXCEEDED).with_reason(super::DEADLINE_EXCEEDED_REASON))
        }),
        None => run.await,
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> &str {
    if let Some(s) = panic.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s
    } else {
        "non-string panic payload"
    }
}

/// The handler's span when the server traced the reconcile: a child of the
/// context the task carries (W3C `traceparent`), extracted with the
/// application's global propagator, so an application that exports spans
/// (a `tracing-opentelemetry` layer and a propagator installed) sees its
/// handler inside the server's trace. Without them it is an ordinary span.
fn handler_span(
    carrier: &std::collections::BTreeMap<String, String>,
    kind: &str,
    reaction: &str,
    lease: &str,
) -> tracing::Span {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    struct Carrier<'a>(&'a std::collections::BTreeMap<String, String>);
    impl opentelemetry::propagation::Extractor for Carrier<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key).map(String::as_str)
        }
        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(String::as_str).collect()
        }
    }
    let span = tracing::info_span!(
        "handle",
        otel.name = format!("handle {kind} {reaction}"),
        otel.kind = "consumer",
        converge.kind = %kind,
        converge.reaction = %reaction,
        converge.lease = %lease,
    );
    let parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(&Carrier(carrier)));
    let _ = span.set_parent(parent);
    span
}
