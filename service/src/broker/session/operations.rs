//! Operations on a worker stream: claiming the invoked verbs of a served
//! kind, sending them as STAGE_OPERATE tasks, and applying their outcomes
//! through their fence. The session claims operations only when some may be
//! pending (after a wake-up, a completion or a full claim, else once per idle
//! poll), so a kind with verbs costs nothing while none are invoked.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use converge_proto::json;
use converge_proto::worker_v1 as wpb;
use serde_json::Value;

use super::{Held, Session, refused};
use crate::broker::wire;
use crate::domain::composition::StagePlan;
use crate::domain::operation::{FailureCode, MAX_OUTPUT_BYTES, VerbReaction};
use crate::store::StoreError;
use crate::store::operations::{self, ClaimedOperation, OperationOutcome};

/// An operation this stream holds.
pub(super) struct HeldOperation {
    pub(super) operation: ClaimedOperation,
    /// The verb's reaction as the manifest declared it at dispatch (what
    /// of the outcome is applied).
    pub(super) verb: VerbReaction,
}

/// Why an outcome cannot be applied as reported.
struct Refusal {
    message: String,
    reason: &'static str,
}

impl Session {
    /// Claims and sends up to `free` operations on resources of (kind,
    /// version); returns how many and whether the claim was full (more may
    /// wait), or `None` if the stream is gone.
    pub(super) async fn dispatch_operations(
        &mut self,
        kind: &str,
        version: i32,
        plan: &Arc<StagePlan>,
        free: usize,
    ) -> Result<Option<(usize, bool)>, StoreError> {
        let limit = i64::try_from(free).unwrap_or(i64::MAX);
        let claimed = operations::claim(&self.broker.pool, &self.broker.member_id, kind, version, limit).await?;
        let full = claimed.len() as i64 >= limit;
        let mut sent = 0;
        for operation in claimed {
            let Some(verb) = plan.verb(&operation.verb).cloned() else {
                let message = format!(
                    "the manifest of kind {:?} version {} no longer declares the verb {:?}",
                    operation.kind, operation.kind_version, operation.verb
                );
                let refusal = Refusal {
                    message,
                    reason: "VerbNotDeclared",
                };
                self.end_operation(&operation, refusal).await?;
                continue;
            };
            if let Some(missing) = missing_config(&operation) {
                let message =
                    format!("provider config {missing:?} does not exist; apply it or detach it from the resource");
                let outcome = OperationOutcome {
                    lease: operation.lease_token,
                    epoch: operation.claim_epoch,
                    error: Some(&message),
                    reason: Some("ProviderConfigMissing"),
                    code: FailureCode::FailedPrecondition.code(),
                    ..OperationOutcome::default()
                };
                self.record(&outcome, true).await?;
                continue;
            }
            let message = wire::operate_task(&operation, &verb.reaction);
            let lease = operation.lease_token;
            // Tracked before sending: if the stream is gone, it is released with the others.
            self.held
                .insert(lease, Held::Operation(HeldOperation { operation, verb }));
            if self.out.send(Ok(message)).await.is_err() {
                return Ok(None);
            }
            self.broker.stats.dispatched.fetch_add(1, Ordering::Relaxed);
            sent += 1;
        }
        Ok(Some((sent, full)))
    }

    /// Applies the outcome of an operation's dispatch: the parts its
    /// reaction emits, through the fence.
    pub(super) async fn operated(
        &mut self,
        held: HeldOperation,
        complete: &wpb::StageComplete,
    ) -> Result<(), StoreError> {
        let events = match wire::events(&complete.events, &self.actor) {
            Ok(events) => events,
            Err(problems) => {
                let refusal = Refusal {
                    message: refused("the events", &problems),
                    reason: "EventInvalid",
                };
                return self.end_operation(&held.operation, refusal).await;
            }
        };
        if let Some(error) = &complete.error {
            let message = if error.message.is_empty() {
                "the worker reported a failure without a message".to_owned()
            } else {
                wire::text(&error.message)
            };
            let reason = Some(wire::text(&error.reason)).filter(|r| !r.is_empty());
            let outcome = OperationOutcome {
                lease: held.operation.lease_token,
                epoch: held.operation.claim_epoch,
                error: Some(&message),
                reason: reason.as_deref(),
                terminal: error.terminal,
                code: FailureCode::of_reason(reason.as_deref()).code(),
                events: &events,
                ..OperationOutcome::default()
            };
            return self.record(&outcome, true).await;
        }
        let verb = &held.verb;
        let parsed = stored_parts(verb, complete);
        match parsed {
            Err(refusal) => self.end_operation(&held.operation, refusal).await,
            Ok((output, status)) => {
                let conditions = if verb.emits_conditions {
                    match wire::conditions(&complete.conditions) {
                        Ok(conditions) => conditions,
                        Err(problems) => {
                            let refusal = Refusal {
                                message: refused("the conditions", &problems),
                                reason: "ConditionInvalid",
                            };
                            return self.end_operation(&held.operation, refusal).await;
                        }
                    }
                } else {
                    Vec::new()
                };
                let outcome = OperationOutcome {
                    lease: held.operation.lease_token,
                    epoch: held.operation.claim_epoch,
                    output: output.as_ref(),
                    status: status.as_ref(),
                    conditions: &conditions,
                    healthy: wire::health(complete).filter(|_| verb.emits_conditions || verb.emits_status),
                    requeue_after_ms: wire::requeue_after_ms(complete),
                    events: &events,
                    ..OperationOutcome::default()
                };
                self.record(&outcome, false).await
            }
        }
    }

    /// Ends an operation the broker decided about itself (terminally).
    async fn end_operation(&mut self, operation: &ClaimedOperation, refusal: Refusal) -> Result<(), StoreError> {
        let outcome = OperationOutcome {
            lease: operation.lease_token,
            epoch: operation.claim_epoch,
            error: Some(&refusal.message),
            reason: Some(refusal.reason),
            terminal: true,
            code: FailureCode::FailedPrecondition.code(),
            ..OperationOutcome::default()
        };
        self.record(&outcome, true).await
    }

    /// Writes an outcome and counts it (applied, failed or stale).
    async fn record(&mut self, outcome: &OperationOutcome<'_>, failed: bool) -> Result<(), StoreError> {
        let stats = &self.broker.stats;
        if operations::complete(&self.broker.pool, outcome).await? {
            if failed {
                stats.failed.fetch_add(1, Ordering::Relaxed);
            } else {
                stats.applied.fetch_add(1, Ordering::Relaxed);
            }
            // A retry, a requeue or the next operation may be due soon.
            self.operations_due = tokio::time::Instant::now();
        } else {
            stats.stale.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// The output and status of a success that the verb's reaction emits, as
/// storable JSON (None when not emitted or not sent), or why they cannot be
/// stored.
fn stored_parts(verb: &VerbReaction, complete: &wpb::StageComplete) -> Result<(Option<Value>, Option<Value>), Refusal> {
    let output = match complete.operation_output.clone().filter(|_| verb.emits_output) {
        Some(output) => Some(storable("/operation_output", output)?),
        None => None,
    };
    if let Some(output) = &output {
        let bytes = output.to_string().len();
        if bytes > MAX_OUTPUT_BYTES {
            return Err(Refusal {
                message: format!("the operation output was refused: {bytes} bytes as JSON, at most {MAX_OUTPUT_BYTES}"),
                reason: "OutputTooLarge",
            });
        }
    }
    let status = match complete.status.clone().filter(|_| verb.emits_status) {
        Some(status) => Some(storable("/status", status)?),
        None => None,
    };
    Ok((output, status))
}

/// A worker's document as storable JSON, or the refusal naming its field.
fn storable(field: &str, value: prost_types::Struct) -> Result<Value, Refusal> {
    json::storable_struct_to_json(value).map_err(|e| Refusal {
        message: format!(
            "the operation outcome was refused: {field}{}: {}",
            e.pointer(),
            e.description()
        ),
        reason: "OutcomeInvalid",
    })
}

/// The name of the provider config the operation's resource references
/// when it does not exist.
fn missing_config(operation: &ClaimedOperation) -> Option<&str> {
    let name = operation.resource.0.get("provider_config")?.as_str()?;
    operation.config_spec.is_none().then_some(name)
}
