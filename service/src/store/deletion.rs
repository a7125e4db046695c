//! The deletion lifecycle and quarantine: marking a teardown tree, the
//! sweep that tears it down in order, and setting resources aside.

use super::measured::measured;
use sqlx::PgConnection;
use uuid::Uuid;

use super::StoreResult;

/// Most nodes one inline sweep handles (the reaper finishes the rest).
const INLINE_SWEEP_MAX: i32 = 100_000;

/// Marks the teardown tree of `id` (itself, what it owns and what depends on
/// it, transitively) for deletion; returns the tree's ids (empty when `id`
/// does not exist). Queues nothing: run [`sweep`] afterwards, in a later
/// statement.
pub async fn mark(conn: &mut PgConnection, id: Uuid, actor: &str) -> StoreResult<Vec<Uuid>> {
    measured("deletion.mark", async move {
        sqlx::query_scalar("SELECT cascade_mark_for_deletion($1, $2)")
            .bind(id)
            .bind(actor)
            .fetch_one(conn)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Advances the teardown of the marked nodes among `ids` (and whatever
/// removing them unblocks): queues teardown tasks, removes finished nodes.
/// Returns the tasks queued plus the rows removed.
pub async fn sweep(conn: &mut PgConnection, ids: &[Uuid]) -> StoreResult<i32> {
    measured("deletion.sweep", async move {
        if ids.is_empty() {
            return Ok(0);
        }
        sqlx::query_scalar("SELECT sweep_deletable_ids($1, $2)")
            .bind(ids)
            .bind(INLINE_SWEEP_MAX)
            .fetch_one(conn)
            .await
            .map_err(Into::into)
    })
    .await
}

/// What a quarantine or release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetAside {
    /// The resource does not exist.
    NotFound,
    /// The resource is being deleted: quarantine refused.
    Deleting,
    /// Nothing to do (already quarantined, or not quarantined).
    Unchanged,
    /// Quarantined or released now.
    Changed,
}

impl SetAside {
    fn parse(answer: &str) -> Self {
        match answer {
            "not_found" => Self::NotFound,
            "deleting" => Self::Deleting,
            "quarantined" | "released" => Self::Changed,
            _ => Self::Unchanged,
        }
    }
}

/// Quarantines `id`; `message` is recorded on the event and condition.
pub async fn quarantine(conn: &mut PgConnection, id: Uuid, actor: &str, message: &str) -> StoreResult<SetAside> {
    measured("deletion.quarantine", async move {
        let answer: String = sqlx::query_scalar("SELECT quarantine_resource($1, $2, $3)")
            .bind(id)
            .bind(actor)
            .bind(message)
            .fetch_one(conn)
            .await?;
        Ok(SetAside::parse(&answer))
    })
    .await
}

/// Releases a quarantined `id` and schedules it for reconciliation.
///
/// A release is an operator's decision to try again, so it also lifts a
/// terminal failure and resets the retry backoff, as `ReconcileResource`
/// with `reset_backoff` does: a resource quarantined while FAILED would
/// otherwise stay FAILED with no task.
pub async fn unquarantine(conn: &mut PgConnection, id: Uuid, actor: &str, message: &str) -> StoreResult<SetAside> {
    measured("deletion.unquarantine", async move {
        let answer: String = sqlx::query_scalar("SELECT unquarantine_resource($1, $2, $3)")
            .bind(id)
            .bind(actor)
            .bind(message)
            .fetch_one(&mut *conn)
            .await?;
        let outcome = SetAside::parse(&answer);
        if outcome == SetAside::Changed {
            super::work::request_reconcile(conn, id, true).await?;
        }
        Ok(outcome)
    })
    .await
}
