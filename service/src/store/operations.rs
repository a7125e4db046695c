//! `operations`: invoked verbs, their leases while a worker runs them, and
//! their outcomes.

use super::measured::measured;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::{StoreResult, small_version};
use crate::domain::event::ReportedEvent;
use crate::domain::operation::{Operation, OperationError, OperationState};
use crate::domain::resource::ConditionInput;

/// The columns of an operation as [`OperationRow`] reads them (`o` is the
/// operation, `r` its resource).
const COLUMNS: &str = "o.id, o.resource_id, o.kind, r.name, o.verb, o.input, o.output, o.state, o.attempts, \
                       o.error_code, o.error_message, o.error_reason, o.requested_by, o.created_at, \
                       o.completed_at, o.not_before, r.frozen_until = 'infinity' AS quarantined, now() AS read_at";

#[derive(Debug, sqlx::FromRow)]
struct OperationRow {
    id: Uuid,
    resource_id: Uuid,
    kind: String,
    name: String,
    verb: String,
    input: Option<Json<Value>>,
    output: Option<Json<Value>>,
    state: String,
    attempts: i32,
    error_code: Option<i32>,
    error_message: Option<String>,
    error_reason: Option<String>,
    requested_by: String,
    created_at: DateTime<Utc>,
    completed_at: Option<DateTime<Utc>>,
    not_before: DateTime<Utc>,
    quarantined: Option<bool>,
    read_at: DateTime<Utc>,
}

impl OperationRow {
    fn into_operation(self) -> Operation {
        let state = OperationState::from_db(&self.state).unwrap_or(OperationState::Pending);
        let error = self.error_code.map(|code| OperationError {
            code,
            message: self.error_message.clone().unwrap_or_default(),
            reason: self.error_reason.clone(),
        });
        Operation {
            id: self.id,
            resource_id: self.resource_id,
            kind: self.kind,
            name: self.name,
            verb: self.verb,
            input: self.input.map(|j| j.0),
            output: self.output.map(|j| j.0),
            state,
            attempts: self.attempts,
            error,
            requested_by: self.requested_by,
            created_at: self.created_at,
            completed_at: self.completed_at,
            not_before: self.not_before,
            quarantined: self.quarantined.unwrap_or(false),
            read_at: self.read_at,
        }
    }
}

/// An invocation to record.
#[derive(Debug, Clone)]
pub struct NewOperation<'a> {
    /// The resource (checked by the caller, row-locked in its transaction).
    pub resource_id: Uuid,
    /// Its kind.
    pub kind: &'a str,
    /// The verb.
    pub verb: &'a str,
    /// The input document, if any.
    pub input: Option<&'a Value>,
    /// Who invoked it.
    pub requested_by: &'a str,
}

/// Records an invocation and its event, and wakes the brokers; returns the
/// stored operation.
pub async fn invoke(conn: &mut PgConnection, new: &NewOperation<'_>, keep_runs: i32) -> StoreResult<Operation> {
    measured("operations.invoke", async move {
        let id: Uuid = sqlx::query_scalar("SELECT id FROM invoke_operation($1, $2, $3, $4, $5, $6)")
            .bind(new.resource_id)
            .bind(new.kind)
            .bind(new.verb)
            .bind(new.input.map(Json))
            .bind(new.requested_by)
            .bind(keep_runs)
            .fetch_one(&mut *conn)
            .await?;
        let sql =
            format!("SELECT {COLUMNS} FROM operations o JOIN resources r ON r.id = o.resource_id WHERE o.id = $1");
        let row: OperationRow = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_one(conn)
            .await?;
        Ok(row.into_operation())
    })
    .await
}

/// Reads one operation by uid.
pub async fn get(pool: &PgPool, id: Uuid) -> StoreResult<Option<Operation>> {
    measured("operations.get", async move {
        let sql =
            format!("SELECT {COLUMNS} FROM operations o JOIN resources r ON r.id = o.resource_id WHERE o.id = $1");
        let row: Option<OperationRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(pool)
            .await?;
        Ok(row.map(OperationRow::into_operation))
    })
    .await
}

/// What [`list`] returns.
#[derive(Debug, Clone, Default)]
pub struct OperationFilter {
    /// Only this verb.
    pub verb: Option<String>,
    /// Only this state.
    pub state: Option<OperationState>,
}

/// Up to `limit` operations of a resource matching `filter`, newest first,
/// after the position `before` (an operation uid) when given.
pub async fn list(
    pool: &PgPool,
    resource_id: Uuid,
    filter: &OperationFilter,
    before: Option<Uuid>,
    limit: i64,
) -> StoreResult<Vec<Operation>> {
    measured("operations.list", async move {
        let sql = format!(
            "SELECT {COLUMNS} FROM operations o JOIN resources r ON r.id = o.resource_id
             WHERE o.resource_id = $1 AND ($2::text IS NULL OR o.verb = $2) AND ($3::text IS NULL OR o.state = $3)
               AND ($4::uuid IS NULL OR o.id < $4)
             ORDER BY o.id DESC LIMIT $5"
        );
        let rows: Vec<OperationRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(resource_id)
            .bind(filter.verb.as_deref())
            .bind(filter.state.map(OperationState::as_db))
            .bind(before)
            .bind(limit)
            .fetch_all(pool)
            .await?;
        Ok(rows.into_iter().map(OperationRow::into_operation).collect())
    })
    .await
}

row_struct! {
    /// A claimed operation: a row of the SQL type `claimed_operation`
    /// (migrations/0014_operations.sql), returned by `claim_operations` and
    /// `adopt_operations`.
    #[derive(Debug, Clone, sqlx::FromRow)]
    pub struct ClaimedOperation {
        /// The operation's uid.
        pub operation_id: Uuid,
        /// The lease.
        pub lease_token: Uuid,
        /// The fence.
        pub claim_epoch: i64,
        /// Dispatch number (1 = first).
        pub attempts: i32,
        /// The verb.
        pub verb: String,
        /// The input document, if any.
        pub input: Option<Json<Value>>,
        /// Who invoked it.
        pub requested_by: String,
        /// The resource's kind.
        pub kind: String,
        /// The resource's kind version at the claim.
        pub kind_version: i32,
        /// Manifest version of that kind version.
        pub manifest_version: i64,
        /// Seconds left before the deadline (None = none).
        pub deadline_secs: Option<f64>,
        /// The resource's generation at the claim.
        pub generation: i64,
        /// The resource's row at the claim (with its owner and root).
        pub resource: Json<Value>,
        /// The resource's provider config override spec, if any.
        pub config_spec: Option<Json<Value>>,
        /// The override's data bundle.
        pub config_data: Option<Vec<u8>>,
    }
}

/// Claims up to `limit` due operations on resources of (kind, version) for
/// `broker`.
pub async fn claim(
    pool: &PgPool,
    broker: &str,
    kind: &str,
    version: i32,
    limit: i64,
) -> StoreResult<Vec<ClaimedOperation>> {
    measured("operations.claim", async move {
        sqlx::query_as("SELECT * FROM claim_operations($1, $2, $3, $4)")
            .bind(broker)
            .bind(kind)
            .bind(small_version(version))
            .bind(i32::try_from(limit).unwrap_or(i32::MAX))
            .fetch_all(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// The outcome of one dispatch, as [`complete`] applies it.
#[derive(Debug, Clone, Default)]
pub struct OperationOutcome<'a> {
    /// The lease of the dispatch.
    pub lease: Uuid,
    /// Its claim epoch.
    pub epoch: i64,
    /// The output to store on success (None when the reaction emits none).
    pub output: Option<&'a Value>,
    /// The resource's new status (None = unchanged).
    pub status: Option<&'a Value>,
    /// Conditions to record on the resource.
    pub conditions: &'a [ConditionInput],
    /// The resource's explicit health, if reported.
    pub healthy: Option<bool>,
    /// "Not done yet": dispatch again after this many milliseconds.
    pub requeue_after_ms: Option<i64>,
    /// The failure, if the handler failed.
    pub error: Option<&'a str>,
    /// The failure's reason.
    pub reason: Option<&'a str>,
    /// Whether the failure is terminal.
    pub terminal: bool,
    /// The `google.rpc.Code` of the failure if it ends the operation.
    pub code: i32,
    /// Events the worker reported (recorded whatever the outcome).
    pub events: &'a [ReportedEvent],
}

/// Applies a dispatch's outcome through its fence; false when the fence
/// dropped it (the lease was reclaimed, or the resource is gone).
pub async fn complete(pool: &PgPool, outcome: &OperationOutcome<'_>) -> StoreResult<bool> {
    measured("operations.complete", async move {
        let conditions = (!outcome.conditions.is_empty()).then_some(Json(outcome.conditions));
        let events = (!outcome.events.is_empty()).then_some(Json(outcome.events));
        sqlx::query_scalar("SELECT complete_operation($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)")
            .bind(outcome.lease)
            .bind(outcome.epoch)
            .bind(outcome.output.map(Json))
            .bind(outcome.status.map(Json))
            .bind(conditions)
            .bind(outcome.healthy)
            .bind(outcome.requeue_after_ms)
            .bind(outcome.error)
            .bind(outcome.reason)
            .bind(outcome.terminal)
            .bind(outcome.code)
            .bind(events)
            .fetch_one(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Takes over the operation leases a reconnecting worker still holds and
/// returns them as claimed.
pub async fn adopt(pool: &PgPool, broker: &str, leases: &[(Uuid, i64)]) -> StoreResult<Vec<ClaimedOperation>> {
    measured("operations.adopt", async move {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let (tokens, epochs): (Vec<Uuid>, Vec<i64>) = leases.iter().copied().unzip();
        sqlx::query_as("SELECT * FROM adopt_operations($1, $2, $3)")
            .bind(broker)
            .bind(&tokens)
            .bind(&epochs)
            .fetch_all(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// The backstops: releases operation leases not attested for `stale_secs`
/// and fails attempts past their deadline; returns how many.
pub async fn reap(pool: &PgPool, stale_secs: f64, limit: i32) -> StoreResult<i32> {
    measured("operations.reap", async move {
        sqlx::query_scalar("SELECT reap_operations($1, $2)")
            .bind(stale_secs)
            .bind(limit)
            .fetch_one(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Deletes up to `limit` operations that finished more than `max_age_secs` ago.
pub async fn trim_finished(pool: &PgPool, max_age_secs: f64, limit: i64) -> StoreResult<u64> {
    measured("operations.trim_finished", async move {
        let done = sqlx::query(
            "DELETE FROM operations WHERE id = ANY (ARRAY(
                 SELECT id FROM operations
                 WHERE completed_at < now() - make_interval(secs => $1)
                 ORDER BY completed_at LIMIT $2))",
        )
        .bind(max_age_secs)
        .bind(limit)
        .execute(pool)
        .await?;
        Ok(done.rows_affected())
    })
    .await
}
