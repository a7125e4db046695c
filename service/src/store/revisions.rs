//! `spec_revisions`: the spec history of root resources.

use super::measured::measured;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::StoreResult;

/// What wrote a revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// ApplyResource, CreateResource or a batch.
    Apply,
    /// RollbackResource.
    Rollback,
    /// A kind migration's conversion to another version.
    Conversion,
}

impl Source {
    fn as_db(self) -> &'static str {
        match self {
            Source::Apply => "apply",
            Source::Rollback => "rollback",
            Source::Conversion => "conversion",
        }
    }
}

/// A revision to record.
#[derive(Debug, Clone)]
pub struct NewRevision<'a> {
    /// The resource.
    pub resource_id: Uuid,
    /// The generation the spec was written as.
    pub generation: i64,
    /// The kind version the spec was written for.
    pub kind_version: i32,
    /// The spec.
    pub spec: &'a Value,
    /// What wrote it.
    pub source: Source,
    /// For a rollback, the generation restored.
    pub restored_generation: Option<i64>,
}

/// A stored revision.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Revision {
    /// The generation.
    pub generation: i64,
    /// The spec of that generation.
    pub spec: Json<Value>,
    /// `apply`, `rollback` or `conversion`.
    pub source: String,
    /// The kind version the spec was written for (`None` for revisions
    /// stored before versions were recorded).
    pub kind_version: Option<i32>,
    /// For a rollback, the generation restored.
    pub restored_generation: Option<i64>,
    /// Who wrote it.
    pub actor: String,
    /// When.
    pub created_at: DateTime<Utc>,
}

/// Records `revisions` (one statement) and trims each resource's history to
/// its kind version's `revision_limit` (only where a generation past the
/// limit was written).
pub async fn record(conn: &mut PgConnection, revisions: &[NewRevision<'_>], actor: &str) -> StoreResult<()> {
    measured("revisions.record", async move {
        if revisions.is_empty() {
            return Ok(());
        }
        let ids: Vec<Uuid> = revisions.iter().map(|r| r.resource_id).collect();
        let generations: Vec<i64> = revisions.iter().map(|r| r.generation).collect();
        let versions: Vec<i32> = revisions.iter().map(|r| r.kind_version).collect();
        let specs: Vec<Json<&Value>> = revisions.iter().map(|r| Json(r.spec)).collect();
        let sources: Vec<&str> = revisions.iter().map(|r| r.source.as_db()).collect();
        let restored: Vec<Option<i64>> = revisions.iter().map(|r| r.restored_generation).collect();
        sqlx::query(
            "INSERT INTO spec_revisions (resource_id, generation, spec, source, restored_generation, actor,
                 kind_version)
             SELECT x.id, x.generation, x.spec, x.source, x.restored, $6, x.version
             FROM unnest($1::uuid[], $2::bigint[], $3::jsonb[], $4::text[], $5::bigint[], $7::int4[])
                  AS x(id, generation, spec, source, restored, version)
             ORDER BY x.id, x.generation
             ON CONFLICT (resource_id, generation) DO NOTHING",
        )
        .bind(&ids)
        .bind(&generations)
        .bind(&specs)
        .bind(&sources)
        .bind(&restored)
        .bind(actor)
        .bind(&versions)
        .execute(&mut *conn)
        .await?;
        // A first generation never exceeds a limit (>= 1): creates skip the trim.
        let (trim_ids, trim_generations): (Vec<Uuid>, Vec<i64>) = revisions
            .iter()
            .filter(|r| r.generation > 1)
            .map(|r| (r.resource_id, r.generation))
            .unzip();
        if trim_ids.is_empty() {
            return Ok(());
        }
        sqlx::query(
            "DELETE FROM spec_revisions s
             USING unnest($1::uuid[], $2::bigint[]) AS x(id, generation), resources r, kind_config c
             WHERE r.id = x.id AND c.kind = r.kind AND c.kind_version = r.kind_version
               AND s.resource_id = x.id AND s.generation <= x.generation - c.revision_limit",
        )
        .bind(&trim_ids)
        .bind(&trim_generations)
        .execute(conn)
        .await?;
        Ok(())
    })
    .await
}

/// Up to `limit` revisions of a resource older than `before` (a generation),
/// newest first.
pub async fn list(pool: &PgPool, resource_id: Uuid, before: Option<i64>, limit: i64) -> StoreResult<Vec<Revision>> {
    measured("revisions.list", async move {
        sqlx::query_as(
            "SELECT generation, spec, source, kind_version::int4 AS kind_version, restored_generation, actor, created_at
             FROM spec_revisions
             WHERE resource_id = $1 AND ($2::bigint IS NULL OR generation < $2)
             ORDER BY generation DESC LIMIT $3",
        )
        .bind(resource_id)
        .bind(before)
        .bind(limit)
        .fetch_all(pool)
        .await
        .map_err(Into::into)
    })
    .await
}

/// One revision of a resource, if retained.
pub async fn get(conn: &mut PgConnection, resource_id: Uuid, generation: i64) -> StoreResult<Option<Revision>> {
    measured("revisions.get", async move {
        sqlx::query_as(
            "SELECT generation, spec, source, kind_version::int4 AS kind_version, restored_generation, actor, created_at
             FROM spec_revisions
             WHERE resource_id = $1 AND generation = $2",
        )
        .bind(resource_id)
        .bind(generation)
        .fetch_optional(conn)
        .await
        .map_err(Into::into)
    })
    .await
}
