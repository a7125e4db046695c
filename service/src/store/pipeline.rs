//! The stages of a reconcile between claim and outbox: moving a lease on to
//! the next stage, applying a composition under the task's fence, and the
//! reads that feed compose and rollup inputs.

use super::measured::measured;
use std::collections::BTreeMap;

use serde_json::Value;
use sqlx::types::Json;
use sqlx::{Connection, PgPool};
use uuid::Uuid;

use super::error::{ConvergeCode, StoreError};
use super::{RetryPolicy, StoreResult};
use crate::domain::composition::{ChildSpec, ConfigSpec, Edge};

/// The fence of one dispatch of a task.
#[derive(Debug, Clone, Copy, PartialEq, sqlx::FromRow)]
pub struct Fence {
    /// The unguessable lease handle.
    pub lease_token: Uuid,
    /// The claim epoch.
    pub claim_epoch: i64,
    /// Seconds left before the deadline (`None` = no deadline).
    pub deadline_secs: Option<f64>,
}

/// The statement that hands a task on to its next stage: a fresh lease token
/// and epoch (a result of the previous stage can no longer land) and a fresh
/// deadline.
const ROTATE: &str = "UPDATE work_queue w
     SET lease_token = gen_random_uuid(), claim_epoch = w.claim_epoch + 1, heartbeat_at = now(),
         deadline_at = CASE WHEN c.task_deadline_secs > 0
                            THEN now() + make_interval(secs => c.task_deadline_secs) END
     FROM kind_config c
     WHERE w.lease_token = $1 AND w.claim_epoch = $2 AND w.generation = $3 AND NOT w.outcome_pending
       AND c.kind = w.kind AND c.kind_version = w.kind_version
     RETURNING w.lease_token, w.claim_epoch, extract(epoch FROM w.deadline_at - now())::float8 AS deadline_secs";

/// Moves a task on to its next stage if its fence still holds.
pub async fn advance_stage(pool: &PgPool, lease: Uuid, epoch: i64, generation: i64) -> StoreResult<Option<Fence>> {
    measured("pipeline.advance_stage", async move {
        sqlx::query_as(ROTATE)
            .bind(lease)
            .bind(epoch)
            .bind(generation)
            .fetch_optional(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// What became of a composition.
#[derive(Debug, Clone, PartialEq)]
pub enum Composed {
    /// Applied; the task continues under the new fence.
    Applied {
        /// The fence of the next stage.
        fence: Fence,
        /// Children created.
        created: i64,
        /// Children whose desired state changed.
        updated: i64,
        /// Children pruned.
        pruned: i64,
    },
    /// The fence no longer holds or the owner moved on: nothing written.
    Stale,
    /// The composition cannot be applied as given: nothing written.
    Refused(String),
}

/// The complete desired composition of a composer.
#[derive(Debug, Clone, Copy)]
pub struct Desired<'a> {
    /// Every child that should exist.
    pub children: &'a [ChildSpec],
    /// Every edge among them.
    pub edges: &'a [Edge],
    /// Every provider config the composer should own.
    pub configs: &'a [ConfigSpec],
}

/// The fence of the task whose stage produced a composition.
#[derive(Debug, Clone, Copy)]
pub struct TaskFence {
    /// Lease token.
    pub lease: Uuid,
    /// Claim epoch.
    pub epoch: i64,
    /// Generation.
    pub generation: i64,
}

/// Applies `desired` as the complete composition of `owner` at the fence's
/// generation, in one transaction that first checks the task's fence and
/// ends by moving the task on to its next stage.
pub async fn apply_composition(
    pool: &PgPool,
    fence: TaskFence,
    owner: Uuid,
    desired: Desired<'_>,
) -> StoreResult<Composed> {
    measured("pipeline.apply_composition", async move {
        let stored_edges: Vec<_> = desired.edges.iter().map(Edge::stored).collect();
        let outcome = RetryPolicy::CONFLICTS
            .run("composition", || {
                compose_once(pool, fence, owner, desired, &stored_edges)
            })
            .await;
        match outcome {
            Err(StoreError::Refused {
                code: ConvergeCode::CompositionRefused,
                message,
            }) => Ok(Composed::Refused(message)),
            other => other,
        }
    })
    .await
}

async fn compose_once<E: serde::Serialize + Sync>(
    pool: &PgPool,
    task: TaskFence,
    owner: Uuid,
    desired: Desired<'_>,
    edges: &[E],
) -> StoreResult<Composed> {
    let TaskFence {
        lease,
        epoch,
        generation,
    } = task;
    let mut conn = pool.acquire().await?;
    let mut tx = conn.begin().await?;
    let fenced: Option<Uuid> = sqlx::query_scalar(
        "SELECT resource_id FROM work_queue
         WHERE lease_token = $1 AND claim_epoch = $2 AND generation = $3 AND NOT outcome_pending
         FOR UPDATE",
    )
    .bind(lease)
    .bind(epoch)
    .bind(generation)
    .fetch_optional(&mut *tx)
    .await?;
    if fenced != Some(owner) {
        return Ok(Composed::Stale);
    }
    let Json(report): Json<Value> = sqlx::query_scalar("SELECT apply_composition($1, $2, $3, $4, $5)")
        .bind(owner)
        .bind(generation)
        .bind(Json(desired.children))
        .bind(Json(edges))
        .bind(Json(desired.configs))
        .fetch_one(&mut *tx)
        .await?;
    if report.get("stale").is_some() {
        return Ok(Composed::Stale);
    }
    let Some(fence) = sqlx::query_as::<_, Fence>(ROTATE)
        .bind(lease)
        .bind(epoch)
        .bind(generation)
        .fetch_optional(&mut *tx)
        .await?
    else {
        return Ok(Composed::Stale);
    };
    tx.commit().await?;
    let count = |key: &str| report.get(key).and_then(Value::as_i64).unwrap_or(0);
    Ok(Composed::Applied {
        fence,
        created: count("created"),
        updated: count("updated"),
        pruned: count("pruned"),
    })
}

/// Whether every child of `id` has settled (synced, failed or set aside).
pub async fn children_settled(pool: &PgPool, id: Uuid) -> StoreResult<bool> {
    measured("pipeline.children_settled", async move {
        sqlx::query_scalar("SELECT children_settled($1)")
            .bind(id)
            .fetch_one(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// A resource of a composition as a stage input shows it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MemberRow {
    /// Id.
    pub id: Uuid,
    /// Kind.
    pub kind: String,
    /// Kind version.
    pub kind_version: i32,
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: Json<BTreeMap<String, String>>,
    /// Spec.
    pub spec: Json<Value>,
    /// Status.
    pub status: Option<Json<Value>>,
    /// Generation.
    pub generation: i64,
    /// Synced generation.
    pub synced_gen: i64,
    /// Health.
    pub health_ok: bool,
    /// Ready (synced, healthy, not deleting).
    pub is_ready: bool,
    /// Finalizers.
    pub finalizers: Vec<String>,
    /// When deletion was requested.
    pub deletion_requested_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Frozen until (infinity = quarantined).
    pub frozen_until: Option<chrono::DateTime<chrono::Utc>>,
    /// Whether quarantined.
    pub quarantined: bool,
    /// Name of its provider config override, if any.
    pub provider_config: Option<String>,
    /// Owner kind.
    pub owner_kind: Option<String>,
    /// Owner name.
    pub owner_name: Option<String>,
    /// Root kind.
    pub root_kind: Option<String>,
    /// Root name.
    pub root_name: Option<String>,
}

const MEMBER_COLUMNS: &str = "r.id, r.kind, r.kind_version::int4 AS kind_version, r.name, r.labels, r.spec, r.status, \
     r.generation, r.synced_gen, r.health_ok, r.is_ready, r.finalizers, r.deletion_requested_at, \
     CASE WHEN r.frozen_until = 'infinity' THEN NULL ELSE r.frozen_until END AS frozen_until, \
     COALESCE(r.frozen_until = 'infinity', false) AS quarantined, r.provider_config, \
     o.kind AS owner_kind, o.name AS owner_name, t.kind AS root_kind, t.name AS root_name";

/// The children `owner` currently has, oldest first.
pub async fn children(pool: &PgPool, owner: Uuid, limit: i64) -> StoreResult<Vec<MemberRow>> {
    measured("pipeline.children", async move {
        let sql = format!(
            "SELECT {MEMBER_COLUMNS} FROM resources r
             LEFT JOIN resources o ON o.id = r.owner_id LEFT JOIN resources t ON t.id = r.root_id
             WHERE r.owner_id = $1 ORDER BY r.created_at, r.id LIMIT $2"
        );
        sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(owner)
            .bind(limit)
            .fetch_all(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// The live subtree under `owner` (children, their children, ...; members
/// set aside or being torn down excluded, as the rollup gate ignores them),
/// owners before what they composed.
pub async fn descendants(pool: &PgPool, owner: Uuid, limit: i64) -> StoreResult<Vec<MemberRow>> {
    measured("pipeline.descendants", async move {
        let sql = format!(
            "WITH RECURSIVE tree(id, depth) AS (
                 SELECT c.id, 1 FROM resources c
                 WHERE c.owner_id = $1 AND c.frozen_until IS NULL AND c.deletion_requested_at IS NULL
                 UNION
                 SELECT c.id, t.depth + 1 FROM resources c JOIN tree t ON c.owner_id = t.id
                 WHERE c.frozen_until IS NULL AND c.deletion_requested_at IS NULL AND t.depth < 64
             )
             SELECT {MEMBER_COLUMNS} FROM tree x JOIN resources r ON r.id = x.id
             LEFT JOIN resources o ON o.id = r.owner_id LEFT JOIN resources t ON t.id = r.root_id
             ORDER BY x.depth, r.created_at, r.id LIMIT $2"
        );
        sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(owner)
            .bind(limit)
            .fetch_all(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// An edge a composer declared, by kind and name.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EdgeRow {
    /// Dependent kind.
    pub dependent_kind: String,
    /// Dependent name.
    pub dependent_name: String,
    /// Dependency kind.
    pub dependency_kind: String,
    /// Dependency name.
    pub dependency_name: String,
    /// [{dependent, source}].
    pub value_flows: Json<Vec<FlowRow>>,
}

/// One stored value flow.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct FlowRow {
    /// Pointer into the dependent's spec.
    pub dependent: String,
    /// Pointer into the dependency's status.
    pub source: String,
}

/// The edges `owner` declared.
pub async fn edges(pool: &PgPool, owner: Uuid) -> StoreResult<Vec<EdgeRow>> {
    measured("pipeline.edges", async move {
        sqlx::query_as(
            "SELECT a.kind AS dependent_kind, a.name AS dependent_name,
                    b.kind AS dependency_kind, b.name AS dependency_name, d.value_flows
             FROM resource_deps d
             JOIN resources a ON a.id = d.dependent_id
             JOIN resources b ON b.id = d.dependency_id
             WHERE d.owner_id = $1
             ORDER BY a.kind, a.name, b.kind, b.name",
        )
        .bind(owner)
        .fetch_all(pool)
        .await
        .map_err(Into::into)
    })
    .await
}
