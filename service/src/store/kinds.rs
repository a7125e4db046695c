//! `kind_manifest` and `kind_config`.

use super::measured::measured;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};

use super::StoreResult;
use crate::domain::cel_composition::Composition;
use crate::domain::conversion::SpecConversion;
use crate::domain::manifest::{KindManifest, KindPolicy, Reaction, RetryJitter, RetryPolicy};

/// Columns of a manifest row.
const MANIFEST_COLUMNS: &str = "kind, kind_version::int4 AS kind_version, description, spec_schema, status_schema, \
     config_schema, reactions, finalizer_name, max_inflight, task_deadline_secs, resync_interval_secs, \
     resync_recomposes, orphan_grace_secs, max_transient_attempts, unserved_condition_after_secs, retry_base_ms, \
     retry_cap_ms, retry_jitter, conversions, composition, manifest_version, created_at, updated_at";

/// A stored manifest with its bookkeeping.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredManifest {
    /// The manifest.
    pub manifest: KindManifest,
    /// Its content hash.
    pub manifest_version: i64,
    /// First applied.
    pub created_at: DateTime<Utc>,
    /// Last changed.
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, sqlx::FromRow)]
struct ManifestRow {
    kind: String,
    kind_version: i32,
    description: String,
    spec_schema: Option<Json<Value>>,
    status_schema: Option<Json<Value>>,
    config_schema: Option<Json<Value>>,
    reactions: Json<Vec<Reaction>>,
    finalizer_name: Option<String>,
    max_inflight: i32,
    task_deadline_secs: i32,
    resync_interval_secs: i32,
    resync_recomposes: bool,
    orphan_grace_secs: i32,
    max_transient_attempts: i32,
    unserved_condition_after_secs: i32,
    retry_base_ms: i32,
    retry_cap_ms: i32,
    retry_jitter: String,
    conversions: Json<Vec<SpecConversion>>,
    composition: Option<Json<Composition>>,
    manifest_version: i64,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl ManifestRow {
    fn into_stored(self) -> StoredManifest {
        StoredManifest {
            manifest: KindManifest {
                kind: self.kind,
                kind_version: self.kind_version,
                description: self.description,
                spec_schema: self.spec_schema.map(|s| s.0),
                status_schema: self.status_schema.map(|s| s.0),
                config_schema: self.config_schema.map(|s| s.0),
                reactions: self.reactions.0,
                finalizer_name: self.finalizer_name,
                policy: KindPolicy {
                    max_inflight: self.max_inflight,
                    task_deadline_secs: self.task_deadline_secs,
                    resync_interval_secs: self.resync_interval_secs,
                    resync_recomposes: self.resync_recomposes,
                    orphan_grace_secs: self.orphan_grace_secs,
                    max_transient_attempts: self.max_transient_attempts,
                    unserved_condition_after_secs: self.unserved_condition_after_secs,
                    retry: RetryPolicy {
                        base_ms: self.retry_base_ms,
                        cap_ms: self.retry_cap_ms,
                        jitter: RetryJitter::from_db(&self.retry_jitter),
                    },
                },
                conversions: self.conversions.0,
                composition: self.composition.map(|c| c.0),
            },
            manifest_version: self.manifest_version,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

use super::small_version as small;

/// Takes the kind version's advisory lock exclusively until the transaction
/// ends: resource writes of that version wait, and this transaction sees
/// every write that came before.
pub async fn lock_kind_exclusive(conn: &mut PgConnection, kind: &str, kind_version: i32) -> StoreResult<()> {
    measured("kinds.lock_kind_exclusive", async move {
        sqlx::query("SELECT pg_advisory_xact_lock(kind_lock_key($1, $2))")
            .bind(kind)
            .bind(kind_version)
            .execute(conn)
            .await?;
        Ok(())
    })
    .await
}

/// Reads one manifest.
pub async fn get_manifest(
    conn: &mut PgConnection,
    kind: &str,
    kind_version: i32,
) -> StoreResult<Option<StoredManifest>> {
    measured("kinds.get_manifest", async move {
        let sql = format!("SELECT {MANIFEST_COLUMNS} FROM kind_manifest WHERE kind = $1 AND kind_version = $2");
        let row: Option<ManifestRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(kind)
            .bind(small(kind_version))
            .fetch_optional(conn)
            .await?;
        Ok(row.map(ManifestRow::into_stored))
    })
    .await
}

/// Inserts or replaces a manifest (policy seeds included; kind_config is
/// seeded only on first insert, by trigger).
pub async fn upsert_manifest(
    conn: &mut PgConnection,
    manifest: &KindManifest,
    manifest_version: i64,
) -> StoreResult<StoredManifest> {
    measured("kinds.upsert_manifest", async move {
        let sql = format!(
            "INSERT INTO kind_manifest (kind, kind_version, description, spec_schema, status_schema, config_schema,
                 reactions, finalizer_name, max_inflight, task_deadline_secs, resync_interval_secs, resync_recomposes,
                 orphan_grace_secs, max_transient_attempts, manifest_version, unserved_condition_after_secs,
                 retry_base_ms, retry_cap_ms, retry_jitter, conversions, composition)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)
             ON CONFLICT (kind, kind_version) DO UPDATE SET
                 description = EXCLUDED.description, spec_schema = EXCLUDED.spec_schema,
                 status_schema = EXCLUDED.status_schema, config_schema = EXCLUDED.config_schema,
                 reactions = EXCLUDED.reactions, finalizer_name = EXCLUDED.finalizer_name,
                 max_inflight = EXCLUDED.max_inflight, task_deadline_secs = EXCLUDED.task_deadline_secs,
                 resync_interval_secs = EXCLUDED.resync_interval_secs, resync_recomposes = EXCLUDED.resync_recomposes,
                 orphan_grace_secs = EXCLUDED.orphan_grace_secs, max_transient_attempts = EXCLUDED.max_transient_attempts,
                 manifest_version = EXCLUDED.manifest_version,
                 unserved_condition_after_secs = EXCLUDED.unserved_condition_after_secs,
                 retry_base_ms = EXCLUDED.retry_base_ms, retry_cap_ms = EXCLUDED.retry_cap_ms,
                 retry_jitter = EXCLUDED.retry_jitter, conversions = EXCLUDED.conversions,
                 composition = EXCLUDED.composition, updated_at = now()
             RETURNING {MANIFEST_COLUMNS}"
        );
        let policy = &manifest.policy;
        let row: ManifestRow = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(&manifest.kind)
            .bind(small(manifest.kind_version))
            .bind(&manifest.description)
            .bind(manifest.spec_schema.as_ref().map(Json))
            .bind(manifest.status_schema.as_ref().map(Json))
            .bind(manifest.config_schema.as_ref().map(Json))
            .bind(Json(&manifest.reactions))
            .bind(manifest.finalizer_name.as_deref())
            .bind(policy.max_inflight)
            .bind(policy.task_deadline_secs)
            .bind(policy.resync_interval_secs)
            .bind(policy.resync_recomposes)
            .bind(policy.orphan_grace_secs)
            .bind(policy.max_transient_attempts)
            .bind(manifest_version)
            .bind(policy.unserved_condition_after_secs)
            .bind(policy.retry.base_ms)
            .bind(policy.retry.cap_ms)
            .bind(policy.retry.jitter.as_db())
            .bind(Json(&manifest.conversions))
            .bind(manifest.composition.as_ref().map(Json))
            .fetch_one(conn)
            .await?;
        Ok(row.into_stored())
    })
    .await
}

/// Deletes a manifest (and, by cascade, its kind_config). Returns whether it existed.
pub async fn delete_manifest(conn: &mut PgConnection, kind: &str, kind_version: i32) -> StoreResult<bool> {
    measured("kinds.delete_manifest", async move {
        let done = sqlx::query("DELETE FROM kind_manifest WHERE kind = $1 AND kind_version = $2")
            .bind(kind)
            .bind(small(kind_version))
            .execute(conn)
            .await?;
        Ok(done.rows_affected() > 0)
    })
    .await
}

/// A page of manifests ordered by (kind, kind_version), after the given key.
pub async fn list_manifests(
    pool: &PgPool,
    kind: Option<&str>,
    after: Option<(&str, i32)>,
    limit: i64,
) -> StoreResult<Vec<StoredManifest>> {
    measured("kinds.list_manifests", async move {
        let sql = format!(
            "SELECT {MANIFEST_COLUMNS} FROM kind_manifest
             WHERE ($1::text IS NULL OR kind = $1)
               AND ($2::text IS NULL OR (kind, kind_version) > ($2, $3::smallint))
             ORDER BY kind, kind_version LIMIT $4"
        );
        let rows: Vec<ManifestRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(kind)
            .bind(after.map(|(k, _)| k))
            .bind(after.map(|(_, v)| small(v)).unwrap_or(0))
            .bind(limit)
            .fetch_all(pool)
            .await?;
        Ok(rows.into_iter().map(ManifestRow::into_stored).collect())
    })
    .await
}

/// The kind versions whose manifest declares a composition (ADR 49), with
/// their manifest versions.
pub async fn composed_kinds(pool: &PgPool) -> StoreResult<Vec<(String, i32, i64)>> {
    measured("kinds.composed_kinds", async move {
        sqlx::query_as(
            "SELECT kind, kind_version::int4, manifest_version FROM kind_manifest WHERE composition IS NOT NULL",
        )
        .fetch_all(pool)
        .await
        .map_err(Into::into)
    })
    .await
}

/// Every manifest of `kind` (all its versions), read through `conn`.
pub async fn manifests_of(conn: &mut PgConnection, kind: &str) -> StoreResult<Vec<StoredManifest>> {
    measured("kinds.manifests_of", async move {
        let sql = format!("SELECT {MANIFEST_COLUMNS} FROM kind_manifest WHERE kind = $1 ORDER BY kind_version");
        let rows: Vec<ManifestRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(kind)
            .fetch_all(conn)
            .await?;
        Ok(rows.into_iter().map(ManifestRow::into_stored).collect())
    })
    .await
}

/// What a resource write needs to know about its kind version, read after
/// taking the shared kind lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct KindState {
    /// Content hash of the manifest in force.
    pub manifest_version: i64,
    /// Whether the version accepts no new resources.
    pub retired: bool,
}

/// The manifest version and retirement of (kind, kind_version), if it exists.
pub async fn kind_state(conn: &mut PgConnection, kind: &str, kind_version: i32) -> StoreResult<Option<KindState>> {
    measured("kinds.kind_state", async move {
        sqlx::query_as(
            "SELECT m.manifest_version, COALESCE(c.retired, false) AS retired
             FROM kind_manifest m LEFT JOIN kind_config c USING (kind, kind_version)
             WHERE m.kind = $1 AND m.kind_version = $2",
        )
        .bind(kind)
        .bind(small(kind_version))
        .fetch_optional(conn)
        .await
        .map_err(Into::into)
    })
    .await
}

/// Takes the kind version's advisory lock shared until the transaction ends,
/// then reads its state (one round trip). A concurrent manifest change holds
/// the lock exclusively, so it waits for this write, and this write never
/// validates against a manifest being replaced.
pub async fn lock_kind_state(conn: &mut PgConnection, kind: &str, kind_version: i32) -> StoreResult<Option<KindState>> {
    measured("kinds.lock_kind_state", async move {
        sqlx::query_as("SELECT manifest_version, retired FROM lock_kind_state($1, $2)")
            .bind(kind)
            .bind(small(kind_version))
            .fetch_optional(conn)
            .await
            .map_err(Into::into)
    })
    .await
}

/// The live operational settings of one kind version.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct KindConfigRow {
    /// Kind.
    pub kind: String,
    /// Kind version.
    pub kind_version: i32,
    /// Cluster-wide cap on concurrently running tasks (0 = uncapped).
    pub max_inflight: i32,
    /// Task time budget (0 = none).
    pub task_deadline_secs: i32,
    /// Resync interval (0 = off).
    pub resync_interval_secs: i32,
    /// Whether a resync re-runs the composer.
    pub resync_recomposes: bool,
    /// Orphan grace period.
    pub orphan_grace_secs: i32,
    /// Transient failures before a failure becomes terminal (0 = unbounded).
    pub max_transient_attempts: i32,
    /// Whether the version accepts no new resources.
    pub retired: bool,
    /// Spec revisions kept per root resource.
    pub revision_limit: i32,
    /// Wait before a task no worker serves marks its resource (0 = off).
    pub unserved_condition_after_secs: i32,
    /// First retry delay in milliseconds (0 = the default).
    pub retry_base_ms: i32,
    /// Longest retry delay in milliseconds (0 = the default).
    pub retry_cap_ms: i32,
    /// Jitter of retry delays (`none`, `full`, `equal`).
    pub retry_jitter: String,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

const CONFIG_COLUMNS: &str = "kind, kind_version::int4 AS kind_version, max_inflight, task_deadline_secs, \
     resync_interval_secs, resync_recomposes, orphan_grace_secs, max_transient_attempts, retired, revision_limit, \
     unserved_condition_after_secs, retry_base_ms, retry_cap_ms, retry_jitter, updated_at";

/// Reads one kind config, optionally row-locked for an update.
pub async fn get_config(
    conn: &mut PgConnection,
    kind: &str,
    kind_version: i32,
    for_update: bool,
) -> StoreResult<Option<KindConfigRow>> {
    measured("kinds.get_config", async move {
        let lock = if for_update { " FOR UPDATE" } else { "" };
        let sql = format!("SELECT {CONFIG_COLUMNS} FROM kind_config WHERE kind = $1 AND kind_version = $2{lock}");
        sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(kind)
            .bind(small(kind_version))
            .fetch_optional(conn)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Writes the editable settings of a kind config; unchanged values write nothing.
pub async fn update_config(conn: &mut PgConnection, config: &KindConfigRow) -> StoreResult<KindConfigRow> {
    measured("kinds.update_config", async move {
        let sql = format!(
            "WITH updated AS (
                 UPDATE kind_config SET max_inflight = $3, task_deadline_secs = $4, resync_interval_secs = $5,
                     resync_recomposes = $6, orphan_grace_secs = $7, max_transient_attempts = $8, retired = $9,
                     revision_limit = $10, unserved_condition_after_secs = $11, retry_base_ms = $12,
                     retry_cap_ms = $13, retry_jitter = $14, updated_at = now()
                 WHERE kind = $1 AND kind_version = $2
                   AND (max_inflight, task_deadline_secs, resync_interval_secs, resync_recomposes, orphan_grace_secs,
                        max_transient_attempts, retired, revision_limit, unserved_condition_after_secs,
                        retry_base_ms, retry_cap_ms, retry_jitter)
                       IS DISTINCT FROM ($3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
                 RETURNING {CONFIG_COLUMNS})
             SELECT * FROM updated
             UNION ALL
             SELECT {CONFIG_COLUMNS} FROM kind_config
             WHERE kind = $1 AND kind_version = $2 AND NOT EXISTS (SELECT 1 FROM updated)"
        );
        sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(&config.kind)
            .bind(small(config.kind_version))
            .bind(config.max_inflight)
            .bind(config.task_deadline_secs)
            .bind(config.resync_interval_secs)
            .bind(config.resync_recomposes)
            .bind(config.orphan_grace_secs)
            .bind(config.max_transient_attempts)
            .bind(config.retired)
            .bind(config.revision_limit)
            .bind(config.unserved_condition_after_secs)
            .bind(config.retry_base_ms)
            .bind(config.retry_cap_ms)
            .bind(&config.retry_jitter)
            .fetch_one(conn)
            .await
            .map_err(Into::into)
    })
    .await
}
