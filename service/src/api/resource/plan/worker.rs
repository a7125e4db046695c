//! A composer worker's answer to a plan: the compose is posted to
//! `plan_requests`, a broker holding a stream of a worker of the kind sends
//! it in plan mode (`StageTask.plan`) and writes the answer back, and this
//! call waits for it, woken by `plan_answered` (and polling, in case a
//! notification is missed), then removes the request.

use std::time::Duration;

use tokio::time::Instant;

use crate::api::ApiState;
use crate::broker::{Composition, plan_answer};
use crate::contract::status::{ApiError, Reason};
use crate::store::plans::{self, PlanFailure, PlanRequest, PlanState};

/// How long a posted compose may wait for a broker to take it before the
/// plan says no composer is there (bounded by the plan's deadline).
const CLAIM_WAIT: Duration = Duration::from_secs(3);
/// How often the request is re-read without a notification.
const POLL: Duration = Duration::from_millis(100);
/// How often the brokers are told again while nobody took it.
const RENOTIFY: Duration = Duration::from_millis(500);
/// How much later than the caller's deadline the worker's task deadline
/// falls: a handler that hangs meets the caller's timeout first, so the
/// answer is COMPOSER_TIMED_OUT, not a race with the handler's cancellation.
const TASK_SLACK: Duration = Duration::from_secs(5);

/// What the composer worker answered.
pub(super) enum Answer {
    /// The composition it would emit, checked as a real compose's would be.
    Composed(Composition),
    /// Its handler failed, or its composition would be refused.
    Failed(PlanFailure),
}

/// Asks a composer worker what it would compose for `request`, waiting
/// until `deadline` at most.
pub(super) async fn compose(state: &ApiState, request: &PlanRequest, deadline: Instant) -> Result<Answer, ApiError> {
    let remaining = deadline.saturating_duration_since(Instant::now());
    if remaining.is_zero() {
        return Err(timed_out(request));
    }
    let mut answered = state
        .notifications
        .as_ref()
        .map(|n| n.subscribe(&[crate::db::notify::Channel::PlanAnswered]));
    let id = plans::post(&state.pool, request, remaining + TASK_SLACK).await?;
    let outcome = wait(state, request, id, deadline, &mut answered).await;
    if let Err(e) = plans::remove(&state.pool, id).await {
        // The retention sweep removes it once it has expired.
        tracing::debug!(error = %e, "could not remove a plan request");
    }
    outcome
}

async fn wait(
    state: &ApiState,
    request: &PlanRequest,
    id: uuid::Uuid,
    deadline: Instant,
    answered: &mut Option<crate::db::notify::Subscription>,
) -> Result<Answer, ApiError> {
    let started = Instant::now();
    let claim_by = (started + CLAIM_WAIT).min(deadline);
    let mut renotify_at = started + RENOTIFY;
    loop {
        let now = Instant::now();
        match plans::state(&state.pool, id).await? {
            PlanState::Answered(Ok(encoded)) => {
                let composition = plan_answer(&encoded)
                    .map_err(|e| ApiError::Internal(format!("a stored plan answer does not decode: {e}")))?;
                return Ok(Answer::Composed(composition));
            }
            PlanState::Answered(Err(failure)) => return Ok(Answer::Failed(failure)),
            PlanState::Lost => {
                return Err(ApiError::refused(
                    Reason::ComposerUnavailable,
                    "the plan's request to the composer was lost (the database restarted); retry",
                ));
            }
            PlanState::Pending if now >= claim_by => return Err(unavailable(request, claim_by - started)),
            PlanState::Pending if now >= renotify_at => {
                plans::renotify(&state.pool, &request.kind, request.kind_version).await?;
                renotify_at = now + RENOTIFY;
            }
            PlanState::Running if now >= deadline => return Err(timed_out(request)),
            PlanState::Pending | PlanState::Running => {}
        }
        // Past the deadline it returns at once, and the state read decides.
        let pause = tokio::time::sleep_until((now + POLL).min(deadline));
        match answered {
            Some(feed) => {
                tokio::select! {
                    _ = feed.recv() => {}
                    _ = pause => {}
                }
            }
            None => pause.await,
        }
    }
}

fn unavailable(request: &PlanRequest, waited: Duration) -> ApiError {
    ApiError::refused(
        Reason::ComposerUnavailable,
        format!(
            "no connected worker serving kind {:?} version {} took its compose within {:.1} s: none is connected, or none has room; a worker composes this kind, so a plan of it needs one",
            crate::domain::violation::clip(request.kind.clone(), 64),
            request.kind_version,
            waited.as_secs_f64()
        ),
    )
}

fn timed_out(request: &PlanRequest) -> ApiError {
    ApiError::refused(
        Reason::ComposerTimedOut,
        format!(
            "the composer worker of kind {:?} version {} did not answer the plan's compose within its compose_timeout",
            crate::domain::violation::clip(request.kind.clone(), 64),
            request.kind_version
        ),
    )
}
