//! `plan_requests`: a plan's compose waiting for a composer worker's answer
//! (issue 46). The API posts one and waits; a broker holding a stream of a
//! worker of the kind claims it and writes the answer back. Nothing here
//! runs unless someone plans a worker-composed resource.

use super::measured::measured;
use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;
use sqlx::types::Json;
use uuid::Uuid;

use super::{StoreResult, small_version};
use crate::db::notify::Channel;

/// A compose to plan, as the API posts it.
#[derive(Debug, Clone)]
pub struct PlanRequest {
    /// The resource's kind.
    pub kind: String,
    /// Its kind version.
    pub kind_version: i32,
    /// The stored resource's id; `None` when it would be created.
    pub resource_id: Option<Uuid>,
    /// Its name.
    pub name: String,
    /// Its labels as proposed.
    pub labels: BTreeMap<String, String>,
    /// Its spec as proposed.
    pub spec: Value,
    /// Its provider config override as proposed.
    pub provider_config: Option<String>,
    /// The generation an apply would give it.
    pub generation: i64,
}

/// A claimed request: what the broker sends the worker.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClaimedPlan {
    /// The request, also the task's lease token.
    pub id: Uuid,
    /// The resource's kind.
    pub kind: String,
    /// Its kind version.
    #[sqlx(try_from = "i16")]
    pub kind_version: i32,
    /// The stored resource's id, if any.
    pub resource_id: Option<Uuid>,
    /// Its name.
    pub name: String,
    /// Its labels as proposed.
    pub labels: Json<BTreeMap<String, String>>,
    /// Its spec as proposed.
    pub spec: Json<Value>,
    /// Its provider config override as proposed.
    pub provider_config: Option<String>,
    /// The generation an apply would give it.
    pub generation: i64,
    /// The stored resource's status, if any.
    pub status: Option<Json<Value>>,
    /// Seconds until the request expires (the task's deadline).
    pub remaining_secs: f64,
}

/// Where a request stands, as the waiting caller reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanState {
    /// Posted, not yet taken by a broker.
    Pending,
    /// A broker sent it to a worker.
    Running,
    /// The worker answered: its encoded `ComposeResult`, or why it failed.
    Answered(Result<Vec<u8>, PlanFailure>),
    /// The row is gone (a database crash truncated the unlogged table).
    Lost,
}

/// Why a worker gave no composition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanFailure {
    /// What it said.
    pub message: String,
    /// Its reason, if any.
    pub reason: Option<String>,
}

/// Posts a request that expires after `ttl` and tells the brokers; returns
/// its id.
pub async fn post(pool: &PgPool, request: &PlanRequest, ttl: Duration) -> StoreResult<Uuid> {
    measured("plans.post", async move {
        let id: Uuid = sqlx::query_scalar(
            "WITH posted AS (
                 INSERT INTO plan_requests (kind, kind_version, resource_id, name, labels, spec,
                                            provider_config, generation, expires_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now() + make_interval(secs => $9))
                 RETURNING id)
             SELECT id FROM posted, pg_notify($10, $1 || ':' || $2::text)",
        )
        .bind(&request.kind)
        .bind(small_version(request.kind_version))
        .bind(request.resource_id)
        .bind(&request.name)
        .bind(Json(&request.labels))
        .bind(Json(&request.spec))
        .bind(&request.provider_config)
        .bind(request.generation)
        .bind(ttl.as_secs_f64())
        .bind(Channel::PlanRequested.name())
        .fetch_one(pool)
        .await?;
        Ok(id)
    })
    .await
}

/// Tells the brokers again that a request of (kind, version) waits (a
/// notification can be missed while a listener reconnects).
pub async fn renotify(pool: &PgPool, kind: &str, kind_version: i32) -> StoreResult<()> {
    measured("plans.renotify", async move {
        sqlx::query("SELECT pg_notify($1, $2 || ':' || $3::text)")
            .bind(Channel::PlanRequested.name())
            .bind(kind)
            .bind(kind_version)
            .execute(pool)
            .await?;
        Ok(())
    })
    .await
}

/// Claims up to `limit` pending, unexpired requests of (kind, version) for
/// `broker`, oldest first.
pub async fn claim(
    pool: &PgPool,
    broker: &str,
    kind: &str,
    kind_version: i32,
    limit: i64,
) -> StoreResult<Vec<ClaimedPlan>> {
    measured("plans.claim", async move {
        sqlx::query_as(
            "WITH picked AS (
                 SELECT id FROM plan_requests
                 WHERE kind = $2 AND kind_version = $3 AND state = 'pending' AND expires_at > now()
                 ORDER BY created_at
                 LIMIT $4
                 FOR UPDATE SKIP LOCKED)
             UPDATE plan_requests p SET state = 'running', broker_id = $1
             FROM picked
             WHERE p.id = picked.id
             RETURNING p.id, p.kind, p.kind_version, p.resource_id, p.name, p.labels, p.spec,
                       p.provider_config, p.generation,
                       (SELECT r.status FROM resources r WHERE r.id = p.resource_id) AS status,
                       GREATEST(extract(epoch FROM p.expires_at - now()), 0)::float8 AS remaining_secs",
        )
        .bind(broker)
        .bind(kind)
        .bind(small_version(kind_version))
        .bind(limit)
        .fetch_all(pool)
        .await
        .map_err(Into::into)
    })
    .await
}

/// Records the answer to a request `broker` holds and tells the waiting
/// caller; false when it no longer holds it (expired and swept).
pub async fn answer(pool: &PgPool, broker: &str, id: Uuid, answer: Result<&[u8], &PlanFailure>) -> StoreResult<bool> {
    let (result, message, reason) = match answer {
        Ok(bytes) => (Some(bytes), None, None),
        Err(failure) => (None, Some(failure.message.as_str()), failure.reason.as_deref()),
    };
    measured("plans.answer", async move {
        let answered = sqlx::query_scalar::<_, Uuid>(
            "WITH answered AS (
                 UPDATE plan_requests
                 SET state = 'answered', result = $3, error_message = $4, error_reason = $5
                 WHERE id = $2 AND broker_id = $1 AND state = 'running'
                 RETURNING id)
             SELECT id FROM answered, pg_notify($6, answered.id::text)",
        )
        .bind(broker)
        .bind(id)
        .bind(result)
        .bind(message)
        .bind(reason)
        .bind(Channel::PlanAnswered.name())
        .fetch_optional(pool)
        .await?;
        Ok(answered.is_some())
    })
    .await
}

/// Puts the requests `broker` holds back for another stream (this one
/// closed before the worker answered).
pub async fn release(pool: &PgPool, broker: &str, ids: &[Uuid]) -> StoreResult<()> {
    if ids.is_empty() {
        return Ok(());
    }
    measured("plans.release", async move {
        sqlx::query(
            "UPDATE plan_requests SET state = 'pending', broker_id = NULL
             WHERE id = ANY($2) AND broker_id = $1 AND state = 'running'",
        )
        .bind(broker)
        .bind(ids)
        .execute(pool)
        .await?;
        Ok(())
    })
    .await
}

/// A request's row as its caller reads it.
#[derive(sqlx::FromRow)]
struct StateRow {
    state: String,
    result: Option<Vec<u8>>,
    error_message: Option<String>,
    error_reason: Option<String>,
}

/// Where request `id` stands.
pub async fn state(pool: &PgPool, id: Uuid) -> StoreResult<PlanState> {
    measured("plans.state", async move {
        let row: Option<StateRow> =
            sqlx::query_as("SELECT state, result, error_message, error_reason FROM plan_requests WHERE id = $1")
                .bind(id)
                .fetch_optional(pool)
                .await?;
        let Some(row) = row else {
            return Ok(PlanState::Lost);
        };
        Ok(match row.state.as_str() {
            "pending" => PlanState::Pending,
            "running" => PlanState::Running,
            _ => PlanState::Answered(match row.result {
                Some(result) => Ok(result),
                None => Err(PlanFailure {
                    message: row.error_message.unwrap_or_default(),
                    reason: row.error_reason,
                }),
            }),
        })
    })
    .await
}

/// Removes request `id` (its caller has its answer, or stopped waiting).
pub async fn remove(pool: &PgPool, id: Uuid) -> StoreResult<()> {
    measured("plans.remove", async move {
        sqlx::query("DELETE FROM plan_requests WHERE id = $1")
            .bind(id)
            .execute(pool)
            .await?;
        Ok(())
    })
    .await
}

/// Removes up to `limit` requests expired a minute ago or more (their
/// callers vanished before removing them); returns how many.
pub async fn trim_expired(pool: &PgPool, limit: i64) -> StoreResult<u64> {
    measured("plans.trim_expired", async move {
        let done = sqlx::query(
            "DELETE FROM plan_requests WHERE id IN (
                 SELECT id FROM plan_requests WHERE expires_at < now() - interval '1 minute' LIMIT $1)",
        )
        .bind(limit)
        .execute(pool)
        .await?;
        Ok(done.rows_affected())
    })
    .await
}
