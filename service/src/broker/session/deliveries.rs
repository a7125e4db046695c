//! Reactor deliveries on a worker stream: claiming them for a reactor kind,
//! and applying their outcomes (successes acknowledged with the batch).

use std::sync::atomic::Ordering;

use converge_proto::worker_v1 as wpb;

use super::{Held, Session};
use crate::broker::wire;
use crate::domain::shard::ShardRange;
use crate::store::StoreError;
use crate::store::reactors::{self, ClaimedDelivery};

impl Session {
    /// Claims and sends up to `free` deliveries to the reactor kind
    /// (kind, version); returns how many, or `None` if the stream is gone.
    pub(super) async fn dispatch_deliveries(
        &mut self,
        kind: &str,
        version: i32,
        reaction: &str,
        free: usize,
        shards: Option<ShardRange>,
    ) -> Result<Option<usize>, StoreError> {
        let claimed = reactors::claim(
            &self.broker.pool,
            &self.broker.member_id,
            kind,
            version,
            i64::try_from(free).unwrap_or(i64::MAX),
            shards,
        )
        .await?;
        let mut sent = 0;
        for delivery in claimed {
            let message = wire::react_task(&delivery, reaction);
            // Tracked before sending: if the stream is gone, it is released with the others.
            self.held.insert(delivery.lease_token, Held::Delivery(delivery));
            if self.out.send(Ok(message)).await.is_err() {
                return Ok(None);
            }
            self.broker.stats.dispatched.fetch_add(1, Ordering::Relaxed);
            sent += 1;
        }
        Ok(Some(sent))
    }

    /// Acknowledges the deliveries that succeeded since the last flush, in
    /// one statement; if it fails their leases lapse and they are made again
    /// (at least once).
    pub(super) async fn flush_deliveries(&mut self) {
        if self.delivered.is_empty() {
            return;
        }
        let delivered = std::mem::take(&mut self.delivered);
        let stats = &self.broker.stats;
        match reactors::acknowledge(&self.broker.pool, &delivered).await {
            Ok(accepted) => {
                self.write_retry = None;
                stats.applied.fetch_add(accepted, Ordering::Relaxed);
                stats
                    .stale
                    .fetch_add((delivered.len() as u64).saturating_sub(accepted), Ordering::Relaxed);
                self.acks.extend(delivered.iter().map(|(token, epoch)| wpb::LeaseRef {
                    lease_token: token.to_string(),
                    claim_epoch: *epoch,
                }));
            }
            // Kept and written again shortly, like results.
            Err(e) => {
                tracing::warn!(error = %e, deliveries = delivered.len(), "could not acknowledge deliveries; keeping them to retry");
                self.back_off();
                let mut kept = delivered;
                kept.append(&mut self.delivered);
                self.delivered = kept;
            }
        }
    }

    /// Applies the outcome of a delivery through its fence: a success is
    /// acknowledged with the next flush, a failure at once.
    pub(super) async fn delivered(
        &mut self,
        delivery: ClaimedDelivery,
        complete: &wpb::StageComplete,
    ) -> Result<(), StoreError> {
        if complete.error.is_none() {
            self.delivered.push((delivery.lease_token, delivery.claim_epoch));
            return Ok(());
        }
        let error = complete.error.as_ref().map(|e| {
            if e.message.is_empty() {
                "the worker reported a failure without a message".to_owned()
            } else {
                wire::text(&e.message)
            }
        });
        let reason = complete
            .error
            .as_ref()
            .map(|e| wire::text(&e.reason))
            .filter(|r| !r.is_empty());
        let outcome = reactors::DeliveryOutcome {
            lease: delivery.lease_token,
            epoch: delivery.claim_epoch,
            error: error.as_deref(),
            reason: reason.as_deref(),
            terminal: complete.error.as_ref().is_some_and(|e| e.terminal),
        };
        let stats = &self.broker.stats;
        match reactors::complete(&self.broker.pool, &outcome).await? {
            true => stats.failed.fetch_add(1, Ordering::Relaxed),
            false => stats.stale.fetch_add(1, Ordering::Relaxed),
        };
        Ok(())
    }
}
