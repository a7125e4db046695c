//! Plans on a worker stream (issue 46): the composes that PlanResource posts
//! for a kind this worker composes, sent as COMPOSE tasks in plan mode
//! (`StageTask.plan`), and the worker's answer written back for the waiting
//! caller, never applied. A session looks for plans only after a
//! `plan_requested` notification, so nobody planning costs nothing.

use std::sync::Arc;

use converge_proto::worker_v1 as wpb;
use prost::Message;
use uuid::Uuid;

use super::{Session, refused};
use crate::broker::wire::{self, PlanInput};
use crate::domain::composition::StagePlan;
use crate::store::plans::{self, ClaimedPlan, PlanFailure};
use crate::store::{StoreError, pipeline, provider_configs};

/// Most plans one stream holds at once, beside its tasks (a plan does not
/// take a task's slot: a worker busy with real work still answers plans,
/// its SDK bounding how many handlers run).
const MAX_PLANS_HELD: usize = 4;

/// A plan this stream holds, by its request id (the task's lease token).
pub(super) struct HeldPlan {
    pub(super) id: Uuid,
}

impl Session {
    /// Claims and sends the pending plans of (kind, version), whose compose
    /// `plan` says a worker runs; returns whether the claim was full (more
    /// may wait), or `None` if the stream is gone.
    pub(super) async fn dispatch_plans(
        &mut self,
        kind: &str,
        version: i32,
        plan: &Arc<StagePlan>,
    ) -> Result<Option<bool>, StoreError> {
        let Some(reaction) = plan.compose.clone() else {
            return Ok(Some(false));
        };
        let room = MAX_PLANS_HELD.saturating_sub(self.plans.len());
        if room == 0 {
            return Ok(Some(true));
        }
        let limit = i64::try_from(room).unwrap_or(i64::MAX);
        let claimed = plans::claim(&self.broker.pool, &self.broker.member_id, kind, version, limit).await?;
        let full = claimed.len() >= room;
        for request in claimed {
            let message = match self.plan_task(&request, &reaction).await {
                Ok(message) => message,
                Err(e) => {
                    // Answered so the caller does not wait for its timeout.
                    let failure = PlanFailure {
                        message: format!("the plan's input could not be read: {e}"),
                        reason: Some("PlanInputUnavailable".to_owned()),
                    };
                    plans::answer(&self.broker.pool, &self.broker.member_id, request.id, Err(&failure)).await?;
                    continue;
                }
            };
            // Tracked before sending: if the stream is gone, it is released with the others.
            self.plans.insert(request.id, HeldPlan { id: request.id });
            if self.out.send(Ok(message)).await.is_err() {
                return Ok(None);
            }
        }
        Ok(Some(full))
    }

    /// The task of a claimed plan: the compose input as a real compose of
    /// the stored resource would get it.
    async fn plan_task(&self, request: &ClaimedPlan, reaction: &str) -> Result<wpb::WorkStreamResponse, StoreError> {
        let pool = &self.broker.pool;
        let (observed, edges, configs) = match request.resource_id {
            Some(id) => (
                pipeline::children(pool, id, super::MAX_OBSERVED_CHILDREN).await?,
                pipeline::edges(pool, id).await?,
                provider_configs::owned_by(pool, id).await?,
            ),
            None => (Vec::new(), Vec::new(), Vec::new()),
        };
        let config_override = match &request.provider_config {
            Some(name) => {
                let mut conn = pool.acquire().await?;
                provider_configs::get(&mut conn, name).await?
            }
            None => None,
        };
        let manifest_version = self
            .broker
            .catalog
            .current(pool, &request.kind, request.kind_version)
            .await
            .map_or(0, |compiled| compiled.manifest_version);
        Ok(wire::plan_task(
            request,
            PlanInput {
                reaction: reaction.to_owned(),
                manifest_version,
                observed,
                edges,
                configs,
                config_override,
            },
        ))
    }

    /// Writes a worker's answer to a plan: its composition as the real
    /// compose path would check it, or why there is none.
    pub(super) async fn planned(&mut self, held: HeldPlan, complete: wpb::StageComplete) -> Result<(), StoreError> {
        let answer = match complete.error {
            Some(error) => Err(PlanFailure {
                message: if error.message.is_empty() {
                    "the composer reported a failure without a message".to_owned()
                } else {
                    wire::text(&error.message)
                },
                reason: Some(wire::text(&error.reason)).filter(|r| !r.is_empty()),
            }),
            None => {
                let result = complete.compose_result.unwrap_or_default();
                let encoded = result.encode_to_vec();
                match self.check_all(&wire::composition(result)).await {
                    Ok(()) => Ok(encoded),
                    Err(problems) => Err(PlanFailure {
                        message: refused("the composition", &problems),
                        reason: Some("CompositionInvalid".to_owned()),
                    }),
                }
            }
        };
        let pool = &self.broker.pool;
        let answered = plans::answer(
            pool,
            &self.broker.member_id,
            held.id,
            answer.as_ref().map(Vec::as_slice),
        )
        .await?;
        if !answered {
            tracing::debug!(plan = %held.id, "a plan was answered after its caller stopped waiting");
        }
        Ok(())
    }

    /// Puts the plans this stream holds back for another stream.
    pub(super) async fn release_plans(&mut self) {
        let ids: Vec<Uuid> = self.plans.drain().map(|(id, _)| id).collect();
        if let Err(e) = plans::release(&self.broker.pool, &self.broker.member_id, &ids).await {
            tracing::debug!(error = %e, "could not release the plans of a closed stream; their callers time out");
        }
    }
}
