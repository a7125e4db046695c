//! The facts `ExplainResource` derives its waits from: one resource row and
//! one statement of index probes around it, read in one snapshot.

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{Acquire, PgConnection, PgPool};
use uuid::Uuid;

use super::measured::measured;
use super::{StoreResult, resources};
use crate::domain::explain::{Facts, MAX_NAMED, Named, TaskCause, TaskFacts, TaskType, WorkerFacts};
use crate::domain::resource::{Phase, Resource, ResourceRef};

/// The facts around the resource `$1`: `$2` is the cluster liveness window
/// in seconds, `$3` the most names a list carries. Public so the load tool
/// can show its plan at scale (`converge-load --explain-plans`).
///
/// Every subquery is an index probe keyed by the resource (its task rows by
/// `work_queue_resource_id_task_type_shard_id_key`, its upstream edges by
/// `resource_deps_pkey`, its dependents by `resource_deps_dependency_idx`,
/// its children by `resources_owner_idx`, each row met by `resources_pkey`)
/// or by its kind version (the cap's `work_queue_leased_idx` and
/// `operations_running_idx`, which hold about the cap's worth of rows); the
/// registry reads `cluster_members`, one row per pod. The costlier ones sit
/// behind a CASE, which runs a subplan only in the branch taken: dependents
/// only while the resource is deleted, the workers and the cap only while an
/// unclaimed task waits.
pub const FACTS: &str = include_str!("sql/explain_facts.sql");

/// One `tasks` element of [`FACTS`].
#[derive(Debug, serde::Deserialize)]
struct TaskRecord {
    task_type: String,
    kind_version: i32,
    broker_id: Option<String>,
    heartbeat_at: Option<DateTime<Utc>>,
    deadline_at: Option<DateTime<Utc>>,
    not_before: Option<DateTime<Utc>>,
    attempts: i32,
    outcome_pending: bool,
    cause: Option<String>,
}

/// `[kind, name, phase]`.
type NamedRecord = (String, String, String);

#[derive(Debug, sqlx::FromRow)]
struct FactsRow {
    read_at: DateTime<Utc>,
    composed_gen: i64,
    updated_at: DateTime<Utc>,
    kind_known: bool,
    rolls_up: bool,
    max_inflight: i32,
    max_transient_attempts: i32,
    resync_due: Option<DateTime<Utc>>,
    tasks: Option<Json<Vec<TaskRecord>>>,
    upstream_total: i64,
    upstream_first: Option<Json<Vec<NamedRecord>>>,
    children_by_phase: Option<Json<Vec<(String, i64)>>>,
    children_progressing: i64,
    children_first: Option<Json<Vec<NamedRecord>>>,
    dependents_total: i64,
    dependents_first: Option<Json<Vec<NamedRecord>>>,
    workers: Option<Json<(i64, i64, Option<bool>)>>,
    in_flight: Option<i64>,
    provider_config_missing: bool,
}

fn named(records: Option<Json<Vec<NamedRecord>>>) -> Vec<Named> {
    records
        .map(|Json(list)| list)
        .unwrap_or_default()
        .into_iter()
        .map(|(kind, name, phase)| Named {
            reference: ResourceRef { kind, name },
            phase: Phase::from_db(&phase).unwrap_or(Phase::Reconciling),
        })
        .collect()
}

impl FactsRow {
    fn into_facts(self) -> Facts {
        let mut children_by_phase: Vec<(Phase, i64)> = self
            .children_by_phase
            .map(|Json(list)| list)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(phase, n)| Phase::from_db(&phase).map(|p| (p, n)))
            .collect();
        children_by_phase.sort_by_key(|(p, _)| Phase::ALL.iter().position(|q| q == p));
        Facts {
            read_at: self.read_at,
            composed_gen: self.composed_gen,
            updated_at: self.updated_at,
            kind_known: self.kind_known,
            rolls_up: self.rolls_up,
            max_inflight: self.max_inflight,
            max_transient_attempts: self.max_transient_attempts,
            resync_due: self.resync_due,
            tasks: self
                .tasks
                .map(|Json(list)| list)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|t| {
                    Some(TaskFacts {
                        task: TaskType::from_db(&t.task_type)?,
                        kind_version: t.kind_version,
                        member: t.broker_id,
                        heartbeat_at: t.heartbeat_at,
                        deadline_at: t.deadline_at,
                        not_before: t.not_before,
                        claims: t.attempts,
                        outcome_pending: t.outcome_pending,
                        cause: TaskCause::from_db(t.cause.as_deref()),
                    })
                })
                .collect(),
            upstream_total: self.upstream_total,
            upstream_first: named(self.upstream_first),
            children_by_phase,
            children_progressing: self.children_progressing,
            children_first: named(self.children_first),
            dependents_total: self.dependents_total,
            dependents_first: named(self.dependents_first),
            workers: self.workers.map(|Json((ready, unready, incomplete))| WorkerFacts {
                ready,
                unready,
                incomplete: incomplete.unwrap_or(false),
            }),
            in_flight: self.in_flight,
            provider_config_missing: self.provider_config_missing,
        }
    }
}

/// Reads a resource (with conditions) by kind and name and the facts around
/// it, in one read-only snapshot. `None` when it does not exist.
pub async fn resource_and_facts(
    pool: &PgPool,
    kind: &str,
    name: &str,
    liveness_secs: i32,
) -> StoreResult<Option<(Resource, Facts)>> {
    measured("explain.resource_and_facts", async move {
        let mut conn = pool.acquire().await?;
        let mut tx = conn.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        let Some(resource) = resources::get(&mut *tx, kind, name).await? else {
            tx.rollback().await?;
            return Ok(None);
        };
        let facts = facts_in(&mut tx, resource.id, liveness_secs).await?;
        tx.rollback().await?;
        Ok(facts.map(|facts| (resource, facts)))
    })
    .await
}

/// The facts around resource `id`, on the caller's connection.
async fn facts_in(conn: &mut PgConnection, id: Uuid, liveness_secs: i32) -> StoreResult<Option<Facts>> {
    let row: Option<FactsRow> = sqlx::query_as(FACTS)
        .bind(id)
        .bind(liveness_secs)
        .bind(MAX_NAMED as i64)
        .fetch_optional(conn)
        .await?;
    Ok(row.map(FactsRow::into_facts))
}
