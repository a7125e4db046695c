//! `provider_configs`: worker configuration documents per (kind,
//! kind_version), and the re-reconcile of the resources that reference one.

use super::measured::measured;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::StoreResult;
use crate::domain::provider_config::{ConfigContent, ProviderConfig};
use crate::domain::resource::ResourceRef;

/// The columns of a config row with its owner's identity (`pc` is the
/// config, `o` its owner).
const SELECT: &str = "SELECT pc.name, pc.kind, pc.kind_version::int4 AS kind_version, pc.is_default, pc.spec, \
     pc.data, o.kind AS owner_kind, o.name AS owner_name, pc.revision, pc.created_at, pc.updated_at \
     FROM provider_configs pc LEFT JOIN resources o ON o.id = pc.owner_id";

#[derive(Debug, sqlx::FromRow)]
struct ConfigRow {
    name: String,
    kind: String,
    kind_version: i32,
    is_default: bool,
    spec: Json<Value>,
    data: Vec<u8>,
    owner_kind: Option<String>,
    owner_name: Option<String>,
    revision: i64,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl ConfigRow {
    fn into_config(self) -> ProviderConfig {
        let owner = match (self.owner_kind, self.owner_name) {
            (Some(kind), Some(name)) => Some(ResourceRef { kind, name }),
            _ => None,
        };
        ProviderConfig {
            name: self.name,
            kind: self.kind,
            kind_version: self.kind_version,
            is_default: self.is_default,
            spec: self.spec.0,
            data: self.data,
            owner,
            revision: self.revision,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

use super::small_version as small;

/// Reads one config by name.
pub async fn get(conn: &mut PgConnection, name: &str) -> StoreResult<Option<ProviderConfig>> {
    measured("provider_configs.get", async move {
        let sql = format!("{SELECT} WHERE pc.name = $1");
        let row: Option<ConfigRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(name)
            .fetch_optional(conn)
            .await?;
        Ok(row.map(ConfigRow::into_config))
    })
    .await
}

/// How [`lock`] locks a config row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigLock {
    /// For an update of its content: resource writes that attach it (which
    /// key-share lock it) go on, so an edit that re-pends its users and a
    /// write that holds one of them never wait on each other crosswise.
    Update,
    /// For its deletion: resource writes that attach it wait (and then find
    /// it gone), so no reference slips in after the check.
    Delete,
}

/// Reads one config by name and locks it until the transaction ends.
pub async fn lock(conn: &mut PgConnection, name: &str, mode: ConfigLock) -> StoreResult<Option<ProviderConfig>> {
    measured("provider_configs.lock", async move {
        let strength = match mode {
            ConfigLock::Update => "NO KEY UPDATE",
            ConfigLock::Delete => "UPDATE",
        };
        let sql = format!("{SELECT} WHERE pc.name = $1 FOR {strength} OF pc");
        let row: Option<ConfigRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(name)
            .fetch_optional(conn)
            .await?;
        Ok(row.map(ConfigRow::into_config))
    })
    .await
}

/// Serialises the default changes of one pair until the transaction ends,
/// so two configs cannot both become its default.
pub async fn lock_pair(conn: &mut PgConnection, kind: &str, kind_version: i32) -> StoreResult<()> {
    measured("provider_configs.lock_pair", async move {
        sqlx::query("SELECT lock_config_pair($1, $2)")
            .bind(kind)
            .bind(small(kind_version))
            .execute(conn)
            .await?;
        Ok(())
    })
    .await
}

/// The pair of a referenced config, as a resource write checks it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Referenced {
    /// Name.
    pub name: String,
    /// Kind.
    pub kind: String,
    /// Kind version.
    pub kind_version: i32,
    /// Whether a composer owns it.
    pub owned: bool,
}

/// The configs of `names` that exist, key-share locked until the
/// transaction ends: a referenced config cannot be deleted under a write
/// that is attaching it.
pub async fn lock_referenced(conn: &mut PgConnection, names: &[String]) -> StoreResult<Vec<Referenced>> {
    measured("provider_configs.lock_referenced", async move {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        sqlx::query_as(
            "SELECT name, kind, kind_version::int4 AS kind_version, owner_id IS NOT NULL AS owned
             FROM provider_configs WHERE name = ANY ($1) ORDER BY name FOR KEY SHARE",
        )
        .bind(names)
        .fetch_all(conn)
        .await
        .map_err(Into::into)
    })
    .await
}

/// The default config of a pair, if it has one.
pub async fn default_of(conn: &mut PgConnection, kind: &str, kind_version: i32) -> StoreResult<Option<ProviderConfig>> {
    measured("provider_configs.default_of", async move {
        let sql = format!("{SELECT} WHERE pc.kind = $1 AND pc.kind_version = $2 AND pc.is_default");
        let row: Option<ConfigRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(kind)
            .bind(small(kind_version))
            .fetch_optional(conn)
            .await?;
        Ok(row.map(ConfigRow::into_config))
    })
    .await
}

/// The default configs of the given pairs (pairs without one are left out).
pub async fn defaults(pool: &PgPool, pairs: &[(String, i32)]) -> StoreResult<Vec<ProviderConfig>> {
    measured("provider_configs.defaults", async move {
        if pairs.is_empty() {
            return Ok(Vec::new());
        }
        let kinds: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
        let versions: Vec<i16> = pairs.iter().map(|(_, v)| small(*v)).collect();
        let sql = format!(
            "{SELECT} JOIN unnest($1::text[], $2::int2[]) AS p(kind, kind_version)
               ON pc.kind = p.kind AND pc.kind_version = p.kind_version
             WHERE pc.is_default ORDER BY pc.kind, pc.kind_version"
        );
        let rows: Vec<ConfigRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(kinds)
            .bind(versions)
            .fetch_all(pool)
            .await?;
        Ok(rows.into_iter().map(ConfigRow::into_config).collect())
    })
    .await
}

/// Every default config (one per pair at most; the table is small).
pub async fn all_defaults(pool: &PgPool) -> StoreResult<Vec<ProviderConfig>> {
    measured("provider_configs.all_defaults", async move {
        let sql = format!("{SELECT} WHERE pc.is_default ORDER BY pc.kind, pc.kind_version");
        let rows: Vec<ConfigRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql)).fetch_all(pool).await?;
        Ok(rows.into_iter().map(ConfigRow::into_config).collect())
    })
    .await
}

/// Stores a new config applied through the API.
pub async fn insert(conn: &mut PgConnection, content: &ConfigContent) -> StoreResult<ProviderConfig> {
    measured("provider_configs.insert", async move {
        let name: String = sqlx::query_scalar(
            "INSERT INTO provider_configs (name, kind, kind_version, is_default, spec, data)
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING name",
        )
        .bind(&content.name)
        .bind(&content.kind)
        .bind(small(content.kind_version))
        .bind(content.is_default)
        .bind(Json(&content.spec))
        .bind(&content.data)
        .fetch_one(&mut *conn)
        .await?;
        reread(conn, &name).await
    })
    .await
}

/// Replaces the editable content of a stored config and moves its revision.
pub async fn update(conn: &mut PgConnection, content: &ConfigContent) -> StoreResult<ProviderConfig> {
    measured("provider_configs.update", async move {
        sqlx::query(
            "UPDATE provider_configs
             SET is_default = $2, spec = $3, data = $4, revision = revision + 1, updated_at = now()
             WHERE name = $1",
        )
        .bind(&content.name)
        .bind(content.is_default)
        .bind(Json(&content.spec))
        .bind(&content.data)
        .execute(&mut *conn)
        .await?;
        reread(conn, &content.name).await
    })
    .await
}

async fn reread(conn: &mut PgConnection, name: &str) -> StoreResult<ProviderConfig> {
    match get(conn, name).await? {
        Some(config) => Ok(config),
        // The row was written by this transaction a moment ago.
        None => Err(sqlx::Error::RowNotFound.into()),
    }
}

/// Deletes a config; false if it did not exist.
pub async fn delete(conn: &mut PgConnection, name: &str) -> StoreResult<bool> {
    measured("provider_configs.delete", async move {
        let done = sqlx::query("DELETE FROM provider_configs WHERE name = $1")
            .bind(name)
            .execute(conn)
            .await?;
        Ok(done.rows_affected() > 0)
    })
    .await
}

/// Up to `limit` resources that reference `name`, as (kind, name).
pub async fn referencing(conn: &mut PgConnection, name: &str, limit: i64) -> StoreResult<Vec<(String, String)>> {
    measured("provider_configs.referencing", async move {
        sqlx::query_as("SELECT kind, name FROM resources WHERE provider_config = $1 ORDER BY id LIMIT $2")
            .bind(name)
            .bind(limit)
            .fetch_all(conn)
            .await
            .map_err(Into::into)
    })
    .await
}

/// How many resources reference `name`.
pub async fn count_referencing(conn: &mut PgConnection, name: &str) -> StoreResult<i64> {
    measured("provider_configs.count_referencing", async move {
        sqlx::query_scalar("SELECT count(*) FROM resources WHERE provider_config = $1")
            .bind(name)
            .fetch_one(conn)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Whether any config exists for a kind version.
pub async fn any_of_kind(conn: &mut PgConnection, kind: &str, kind_version: i32) -> StoreResult<bool> {
    measured("provider_configs.any_of_kind", async move {
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM provider_configs WHERE kind = $1 AND kind_version = $2)")
            .bind(kind)
            .bind(small(kind_version))
            .fetch_one(conn)
            .await
            .map_err(Into::into)
    })
    .await
}

/// A page of (name, spec) of one pair's configs after `after` (by name),
/// for checking a new config schema against them.
pub async fn specs_of_pair(
    conn: &mut PgConnection,
    kind: &str,
    kind_version: i32,
    after: Option<&str>,
    limit: i64,
) -> StoreResult<Vec<(String, Json<Value>)>> {
    measured("provider_configs.specs_of_pair", async move {
        sqlx::query_as(
            "SELECT name, spec FROM provider_configs
             WHERE kind = $1 AND kind_version = $2 AND ($3::text IS NULL OR name > $3)
             ORDER BY name LIMIT $4",
        )
        .bind(kind)
        .bind(small(kind_version))
        .bind(after)
        .bind(limit)
        .fetch_all(conn)
        .await
        .map_err(Into::into)
    })
    .await
}

/// Filters of [`list`]; they combine with AND.
#[derive(Debug, Clone, Default)]
pub struct ConfigFilter {
    /// Only this kind.
    pub kind: Option<String>,
    /// Only this kind version.
    pub kind_version: Option<i32>,
    /// Only defaults (true) or non-defaults (false).
    pub is_default: Option<bool>,
    /// Only configs owned by this resource.
    pub owner: Option<ResourceRef>,
}

/// Up to `limit` configs matching `filter` with names after `after`,
/// ordered by name.
pub async fn list(
    pool: &PgPool,
    filter: &ConfigFilter,
    after: Option<&str>,
    limit: i64,
) -> StoreResult<Vec<ProviderConfig>> {
    measured("provider_configs.list", async move {
        let sql = format!(
            "{SELECT}
             WHERE ($1::text IS NULL OR pc.kind = $1)
               AND ($2::int2 IS NULL OR pc.kind_version = $2)
               AND ($3::bool IS NULL OR pc.is_default = $3)
               AND ($4::text IS NULL OR pc.owner_id = (SELECT r.id FROM resources r WHERE r.kind = $4 AND r.name = $5))
               AND ($6::text IS NULL OR pc.name > $6)
             ORDER BY pc.name LIMIT $7"
        );
        let rows: Vec<ConfigRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(filter.kind.as_deref())
            .bind(filter.kind_version.map(small))
            .bind(filter.is_default)
            .bind(filter.owner.as_ref().map(|o| o.kind.as_str()))
            .bind(filter.owner.as_ref().map(|o| o.name.as_str()))
            .bind(after)
            .bind(limit)
            .fetch_all(pool)
            .await?;
        Ok(rows.into_iter().map(ConfigRow::into_config).collect())
    })
    .await
}

/// The configs a composer owns, by name.
pub async fn owned_by(pool: &PgPool, owner: Uuid) -> StoreResult<Vec<ProviderConfig>> {
    measured("provider_configs.owned_by", async move {
        let sql = format!("{SELECT} WHERE pc.owner_id = $1 ORDER BY pc.name");
        let rows: Vec<ConfigRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(owner)
            .fetch_all(pool)
            .await?;
        Ok(rows.into_iter().map(ConfigRow::into_config).collect())
    })
    .await
}

/// Re-reconciles every resource that references one of `names`, at its
/// current generation, with an event on each (`pend_config_users`);
/// returns how many were re-pended.
pub async fn pend_users(conn: &mut PgConnection, names: &[String], actor: &str, keep_runs: i32) -> StoreResult<i32> {
    measured("provider_configs.pend_users", async move {
        sqlx::query_scalar("SELECT pend_config_users($1, $2, $3)")
            .bind(names)
            .bind(actor)
            .bind(keep_runs)
            .fetch_one(conn)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Re-reconciles the resources of `ids` because their override changed
/// (`pend_config_change`), recording `message` on each.
pub async fn pend_change(
    conn: &mut PgConnection,
    ids: &[Uuid],
    message: &str,
    actor: &str,
    keep_runs: i32,
) -> StoreResult<i32> {
    measured("provider_configs.pend_change", async move {
        sqlx::query_scalar("SELECT pend_config_change($1, $2, $3, $4)")
            .bind(ids)
            .bind(message)
            .bind(actor)
            .bind(keep_runs)
            .fetch_one(conn)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Tells every broker, at commit, that the default config of a pair changed.
pub async fn notify_default(conn: &mut PgConnection, kind: &str, kind_version: i32) -> StoreResult<()> {
    measured("provider_configs.notify_default", async move {
        sqlx::query("SELECT notify_default_config($1, $2)")
            .bind(kind)
            .bind(small(kind_version))
            .execute(conn)
            .await?;
        Ok(())
    })
    .await
}
