//! `resources` and `resource_conditions`: reads, writes and keyset pages.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool, Postgres, QueryBuilder};
use uuid::Uuid;

use super::StoreResult;
use crate::domain::labels::{LabelSelector, Requirement};
use crate::domain::position::Position;
use crate::domain::resource::{Condition, ConditionInput, ConditionStatus, Phase, Resource, ResourceRef};

/// Columns of a resource as the API reads it, with its owner and root refs.
const COLUMNS: &str = "r.id, r.kind, r.kind_version::int4 AS kind_version, r.name, r.labels, r.spec, r.status, \
     o.kind AS owner_kind, o.name AS owner_name, t.kind AS root_kind, t.name AS root_name, \
     r.provider_config, r.generation, r.synced_gen, r.health_ok, r.failure_gen, r.failure_attempts, \
     r.finalizers, r.deletion_requested_at, \
     CASE WHEN r.frozen_until = 'infinity' THEN NULL ELSE r.frozen_until END AS orphan_until, \
     COALESCE(r.frozen_until = 'infinity', false) AS quarantined, \
     r.phase, r.created_at, r.updated_at, r.rv_txid, r.rv_seq";

/// The joins [`COLUMNS`] needs beside a resources row `r`.
macro_rules! reference_joins {
    () => {
        "LEFT JOIN resources o ON o.id = r.owner_id LEFT JOIN resources t ON t.id = r.root_id"
    };
}

/// `resources r` with the joins [`COLUMNS`] needs.
const FROM: &str = concat!("resources r ", reference_joins!());

#[derive(Debug, sqlx::FromRow)]
struct ResourceRow {
    id: Uuid,
    kind: String,
    kind_version: i32,
    name: String,
    labels: Json<BTreeMap<String, String>>,
    spec: Json<Value>,
    status: Option<Json<Value>>,
    owner_kind: Option<String>,
    owner_name: Option<String>,
    root_kind: Option<String>,
    root_name: Option<String>,
    provider_config: Option<String>,
    generation: i64,
    synced_gen: i64,
    health_ok: bool,
    failure_gen: i64,
    failure_attempts: i32,
    finalizers: Vec<String>,
    deletion_requested_at: Option<DateTime<Utc>>,
    orphan_until: Option<DateTime<Utc>>,
    quarantined: bool,
    phase: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    rv_txid: i64,
    rv_seq: i64,
}

fn reference(kind: Option<String>, name: Option<String>) -> Option<ResourceRef> {
    Some(ResourceRef {
        kind: kind?,
        name: name?,
    })
}

impl ResourceRow {
    fn into_resource(self) -> Resource {
        Resource {
            id: self.id,
            kind: self.kind,
            kind_version: self.kind_version,
            name: self.name,
            labels: self.labels.0,
            spec: self.spec.0,
            status: self.status.map(|s| s.0),
            owner: reference(self.owner_kind, self.owner_name),
            root: reference(self.root_kind, self.root_name),
            provider_config: self.provider_config,
            generation: self.generation,
            synced_gen: self.synced_gen,
            health_ok: self.health_ok,
            failure_gen: self.failure_gen,
            failure_attempts: self.failure_attempts,
            finalizers: self.finalizers,
            deletion_requested_at: self.deletion_requested_at,
            orphan_until: self.orphan_until,
            quarantined: self.quarantined,
            // The column is generated from a closed CASE; anything else is a schema bug.
            phase: Phase::from_db(&self.phase).unwrap_or(Phase::Reconciling),
            created_at: self.created_at,
            updated_at: self.updated_at,
            position: Position {
                txid: self.rv_txid,
                seq: self.rv_seq,
            },
            conditions: Vec::new(),
        }
    }
}

/// The user-owned part of a resource, as written by apply and create.
#[derive(Debug, Clone)]
pub struct DesiredResource<'a> {
    /// Kind.
    pub kind: &'a str,
    /// Kind version.
    pub kind_version: i32,
    /// Name.
    pub name: &'a str,
    /// Labels (the complete set).
    pub labels: &'a BTreeMap<String, String>,
    /// Spec (the complete document).
    pub spec: &'a Value,
    /// Provider config override: `None` keeps the stored value on update.
    pub provider_config: Option<Option<&'a str>>,
}

/// Holds the kind version's advisory lock shared until the transaction ends,
/// so a concurrent manifest change waits for this write (and this write never
/// validates against a manifest being replaced).
pub async fn lock_kind_shared(conn: &mut PgConnection, kind: &str, kind_version: i32) -> StoreResult<()> {
    sqlx::query("SELECT pg_advisory_xact_lock_shared(kind_lock_key($1, $2))")
        .bind(kind)
        .bind(kind_version)
        .execute(conn)
        .await?;
    Ok(())
}

/// Reads a resource by kind and name, row-locked for the rest of the transaction.
pub async fn find_for_update(conn: &mut PgConnection, kind: &str, name: &str) -> StoreResult<Option<Resource>> {
    let key = (kind.to_owned(), name.to_owned());
    Ok(find_many_for_update(conn, std::slice::from_ref(&key))
        .await?
        .remove(&key))
}

/// Reads the resources of several (kind, name) keys, row-locked for the rest
/// of the transaction, keyed by (kind, name). Rows are locked in id order,
/// the order every multi-row writer uses, so concurrent batches cannot
/// deadlock on each other.
pub async fn find_many_for_update(
    conn: &mut PgConnection,
    keys: &[(String, String)],
) -> StoreResult<HashMap<(String, String), Resource>> {
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let (kinds, names): (Vec<&str>, Vec<&str>) = keys.iter().map(|(k, n)| (k.as_str(), n.as_str())).unzip();
    let sql = format!(
        "SELECT {COLUMNS} FROM {FROM}
         WHERE (r.kind, r.name) IN (SELECT k, n FROM unnest($1::text[], $2::text[]) AS x(k, n))
         ORDER BY r.id FOR NO KEY UPDATE OF r"
    );
    let rows: Vec<ResourceRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(kinds)
        .bind(names)
        .fetch_all(&mut *conn)
        .await?;
    let found = with_conditions(conn, rows.into_iter().map(ResourceRow::into_resource).collect()).await?;
    Ok(found
        .into_iter()
        .map(|r| ((r.kind.clone(), r.name.clone()), r))
        .collect())
}

/// Inserts new root resources; returns those inserted, as stored, keyed by
/// (kind, name) (so the caller needs no read-back). A name taken meanwhile
/// is left out (the caller treats it as an update). Rows go in (kind, name)
/// order, so two batches racing for the same names wait on each other
/// instead of deadlocking.
pub async fn insert_many(
    conn: &mut PgConnection,
    desired: &[DesiredResource<'_>],
) -> StoreResult<HashMap<(String, String), Resource>> {
    if desired.is_empty() {
        return Ok(HashMap::new());
    }
    let mut sorted: Vec<&DesiredResource<'_>> = desired.iter().collect();
    sorted.sort_by(|a, b| (a.kind, a.name).cmp(&(b.kind, b.name)));
    let kinds: Vec<&str> = sorted.iter().map(|d| d.kind).collect();
    let versions: Vec<i16> = sorted
        .iter()
        .map(|d| i16::try_from(d.kind_version).unwrap_or(i16::MAX))
        .collect();
    let names: Vec<&str> = sorted.iter().map(|d| d.name).collect();
    let labels: Vec<Json<&BTreeMap<String, String>>> = sorted.iter().map(|d| Json(d.labels)).collect();
    let specs: Vec<Json<&Value>> = sorted.iter().map(|d| Json(d.spec)).collect();
    let providers: Vec<Option<&str>> = sorted.iter().map(|d| d.provider_config.flatten()).collect();
    let sql = format!(
        "WITH created AS (
             INSERT INTO resources (kind, kind_version, name, labels, spec, provider_config)
             SELECT kind, kind_version, name, labels, spec, provider_config
             FROM unnest($1::text[], $2::int2[], $3::text[], $4::jsonb[], $5::jsonb[], $6::text[])
                 WITH ORDINALITY AS x(kind, kind_version, name, labels, spec, provider_config, n)
             ORDER BY n
             ON CONFLICT (kind, name) DO NOTHING
             RETURNING *
         )
         SELECT {COLUMNS} FROM created r {joins}",
        joins = reference_joins!()
    );
    let rows: Vec<ResourceRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(kinds)
        .bind(versions)
        .bind(names)
        .bind(labels)
        .bind(specs)
        .bind(providers)
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let resource = row.into_resource();
            ((resource.kind.clone(), resource.name.clone()), resource)
        })
        .collect())
}

/// Writes the user-owned fields of an existing resource. Nothing is written
/// (and `None` returned) when they are identical; the generation moves only
/// when the spec or the kind version changes.
pub async fn update_desired(
    conn: &mut PgConnection,
    id: Uuid,
    desired: &DesiredResource<'_>,
) -> StoreResult<Option<Resource>> {
    let updated: Option<Uuid> = sqlx::query_scalar(
        "UPDATE resources
         SET kind_version = $2, labels = $3, spec = $4,
             provider_config = CASE WHEN $5 THEN $6 ELSE provider_config END,
             generation = generation + CASE WHEN spec IS DISTINCT FROM $4 OR kind_version <> $2 THEN 1 ELSE 0 END
         WHERE id = $1
           AND (kind_version <> $2 OR labels IS DISTINCT FROM $3 OR spec IS DISTINCT FROM $4
                OR ($5 AND provider_config IS DISTINCT FROM $6))
         RETURNING id",
    )
    .bind(id)
    .bind(i16::try_from(desired.kind_version).unwrap_or(i16::MAX))
    .bind(Json(desired.labels))
    .bind(Json(desired.spec))
    .bind(desired.provider_config.is_some())
    .bind(desired.provider_config.flatten())
    .fetch_optional(&mut *conn)
    .await?;
    reread(conn, updated).await
}

/// The resource a write touched, as the API reads it (`None`: nothing written).
async fn reread(conn: &mut PgConnection, written: Option<Uuid>) -> StoreResult<Option<Resource>> {
    match written {
        Some(id) => get_by_id(conn, id).await,
        None => Ok(None),
    }
}

/// Reads one resource (with conditions) by id.
pub async fn get_by_id(conn: &mut PgConnection, id: Uuid) -> StoreResult<Option<Resource>> {
    let sql = format!("SELECT {COLUMNS} FROM {FROM} WHERE r.id = $1");
    let row: Option<ResourceRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?;
    attach_conditions(conn, row.map(ResourceRow::into_resource)).await
}

/// Reads one resource (with conditions) by kind and name.
pub async fn get(pool: &PgPool, kind: &str, name: &str) -> StoreResult<Option<Resource>> {
    let sql = format!("SELECT {COLUMNS} FROM {FROM} WHERE r.kind = $1 AND r.name = $2");
    let row: Option<ResourceRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(kind)
        .bind(name)
        .fetch_optional(pool)
        .await?;
    let mut conn = pool.acquire().await?;
    attach_conditions(&mut conn, row.map(ResourceRow::into_resource)).await
}

/// The id of a resource by kind and name.
pub async fn id_of(pool: &PgPool, kind: &str, name: &str) -> StoreResult<Option<Uuid>> {
    sqlx::query_scalar("SELECT id FROM resources WHERE kind = $1 AND name = $2")
        .bind(kind)
        .bind(name)
        .fetch_optional(pool)
        .await
}

async fn attach_conditions(conn: &mut PgConnection, resource: Option<Resource>) -> StoreResult<Option<Resource>> {
    let Some(resource) = resource else { return Ok(None) };
    Ok(with_conditions(conn, vec![resource]).await?.pop())
}

#[derive(Debug, sqlx::FromRow)]
struct ConditionRow {
    resource_id: Uuid,
    #[sqlx(rename = "type")]
    type_: String,
    status: String,
    reason: String,
    message: String,
    observed_generation: i64,
    last_transition_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

/// The stored conditions of several resources, ordered by type.
pub async fn conditions_for(conn: &mut PgConnection, ids: &[Uuid]) -> StoreResult<HashMap<Uuid, Vec<Condition>>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<ConditionRow> = sqlx::query_as(
        "SELECT resource_id, type, status, reason, message, observed_generation, last_transition_at, updated_at
         FROM resource_conditions WHERE resource_id = ANY($1) ORDER BY resource_id, type",
    )
    .bind(ids)
    .fetch_all(conn)
    .await?;
    let mut by_resource: HashMap<Uuid, Vec<Condition>> = HashMap::new();
    for row in rows {
        by_resource.entry(row.resource_id).or_default().push(Condition {
            type_: row.type_,
            // The column has a CHECK constraint on the three spellings.
            status: ConditionStatus::from_db(&row.status).unwrap_or(ConditionStatus::Unknown),
            reason: row.reason,
            message: row.message,
            observed_generation: row.observed_generation,
            last_transition_at: row.last_transition_at,
            updated_at: row.updated_at,
        });
    }
    Ok(by_resource)
}

/// Writes conditions of one resource; returns how many changed.
pub async fn set_conditions(
    conn: &mut PgConnection,
    id: Uuid,
    generation: i64,
    conditions: &[ConditionInput],
) -> StoreResult<i32> {
    sqlx::query_scalar("SELECT set_resource_conditions($1, $2, $3)")
        .bind(id)
        .bind(generation)
        .bind(Json(conditions))
        .fetch_one(conn)
        .await
}

/// Filters of a resource list.
#[derive(Debug, Clone, Default)]
pub struct ResourceFilter {
    /// Only this kind.
    pub kind: Option<String>,
    /// Only this kind version.
    pub kind_version: Option<i32>,
    /// Only these phases (empty = all).
    pub phases: Vec<Phase>,
    /// Label requirements.
    pub selector: LabelSelector,
    /// Only direct children of this resource id.
    pub owner_id: Option<Uuid>,
    /// Only descendants of this root id.
    pub root_id: Option<Uuid>,
    /// Only roots.
    pub roots_only: bool,
}

/// The keyset position of a list page: (creation time, id), newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListCursor {
    /// Creation time (microsecond precision, as stored).
    pub created_at: DateTime<Utc>,
    /// Resource id.
    pub id: Uuid,
}

/// One page of resources matching `filter`, strictly after `after`, newest
/// first. Keys are immutable, so pages never repeat or skip an item that
/// existed when listing began.
pub async fn list(
    pool: &PgPool,
    filter: &ResourceFilter,
    after: Option<ListCursor>,
    limit: usize,
) -> StoreResult<Vec<Resource>> {
    let mut conn = pool.acquire().await?;
    list_in(&mut conn, filter, after, limit).await
}

/// [`list`] on a given connection (e.g. inside a snapshot transaction).
pub async fn list_in(
    conn: &mut PgConnection,
    filter: &ResourceFilter,
    after: Option<ListCursor>,
    limit: usize,
) -> StoreResult<Vec<Resource>> {
    let mut query: QueryBuilder<Postgres> = QueryBuilder::new(format!("SELECT {COLUMNS} FROM {FROM} WHERE true"));
    if let Some(kind) = &filter.kind {
        query.push(" AND r.kind = ").push_bind(kind.clone());
    }
    if let Some(version) = filter.kind_version {
        query
            .push(" AND r.kind_version = ")
            .push_bind(i16::try_from(version).unwrap_or(i16::MAX));
    }
    if !filter.phases.is_empty() {
        let phases: Vec<String> = filter.phases.iter().map(|p| p.as_db().to_owned()).collect();
        query.push(" AND r.phase = ANY(").push_bind(phases).push(")");
    }
    if let Some(owner) = filter.owner_id {
        query.push(" AND r.owner_id = ").push_bind(owner);
    }
    if let Some(root) = filter.root_id {
        query.push(" AND r.root_id = ").push_bind(root);
    }
    if filter.roots_only {
        query.push(" AND r.owner_id IS NULL");
    }
    push_selector(&mut query, &filter.selector);
    if let Some(cursor) = after {
        query
            .push(" AND (r.created_at, r.id) < (")
            .push_bind(cursor.created_at)
            .push(", ")
            .push_bind(cursor.id)
            .push(")");
    }
    query
        .push(" ORDER BY r.created_at DESC, r.id DESC LIMIT ")
        .push_bind(i64::try_from(limit).unwrap_or(i64::MAX));
    let rows: Vec<ResourceRow> = query.build_query_as().fetch_all(&mut *conn).await?;
    with_conditions(conn, rows.into_iter().map(ResourceRow::into_resource).collect()).await
}

async fn with_conditions(conn: &mut PgConnection, mut resources: Vec<Resource>) -> StoreResult<Vec<Resource>> {
    let ids: Vec<Uuid> = resources.iter().map(|r| r.id).collect();
    let mut conditions = conditions_for(conn, &ids).await?;
    for resource in &mut resources {
        resource.conditions = conditions.remove(&resource.id).unwrap_or_default();
    }
    Ok(resources)
}

/// The current state of several resources (missing ones are left out).
pub async fn get_many(conn: &mut PgConnection, ids: &[Uuid]) -> StoreResult<Vec<Resource>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let resources = by_ids(conn, ids).await?;
    with_conditions(conn, resources).await
}

/// The rows of `ids`, without their conditions.
async fn by_ids(conn: &mut PgConnection, ids: &[Uuid]) -> StoreResult<Vec<Resource>> {
    let sql = format!("SELECT {COLUMNS} FROM {FROM} WHERE r.id = ANY($1)");
    let rows: Vec<ResourceRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(ids)
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows.into_iter().map(ResourceRow::into_resource).collect())
}

/// The `resources` row as `to_jsonb` renders it (the change log keeps this
/// image of physically deleted resources).
#[derive(Debug, serde::Deserialize)]
struct ImageRow {
    id: Uuid,
    kind: String,
    kind_version: i32,
    name: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    spec: Value,
    status: Option<Value>,
    provider_config: Option<String>,
    generation: i64,
    synced_gen: i64,
    health_ok: bool,
    failure_gen: i64,
    failure_attempts: i32,
    #[serde(default)]
    finalizers: Vec<String>,
    deletion_requested_at: Option<String>,
    frozen_until: Option<String>,
    phase: String,
    created_at: String,
    updated_at: String,
    rv_txid: i64,
    rv_seq: i64,
}

fn image_time(value: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(value).ok().map(|t| t.with_timezone(&Utc))
}

/// Rebuilds the last state of a deleted resource from its change-log image
/// (owner and root refs are not kept: their rows may be gone too).
pub fn resource_from_image(image: &Value) -> Option<Resource> {
    let row: ImageRow = serde_json::from_value(image.clone()).ok()?;
    let quarantined = row.frozen_until.as_deref() == Some("infinity");
    Some(Resource {
        id: row.id,
        kind: row.kind,
        kind_version: row.kind_version,
        name: row.name,
        labels: row.labels,
        spec: row.spec,
        status: row.status,
        owner: None,
        root: None,
        provider_config: row.provider_config,
        generation: row.generation,
        synced_gen: row.synced_gen,
        health_ok: row.health_ok,
        failure_gen: row.failure_gen,
        failure_attempts: row.failure_attempts,
        finalizers: row.finalizers,
        deletion_requested_at: row.deletion_requested_at.as_deref().and_then(image_time),
        orphan_until: if quarantined {
            None
        } else {
            row.frozen_until.as_deref().and_then(image_time)
        },
        quarantined,
        phase: Phase::from_db(&row.phase).unwrap_or(Phase::Deleting),
        created_at: image_time(&row.created_at)?,
        updated_at: image_time(&row.updated_at)?,
        position: Position {
            txid: row.rv_txid,
            seq: row.rv_seq,
        },
        conditions: Vec::new(),
    })
}

/// Translates label requirements to SQL. Equality uses containment (`@>`),
/// which the GIN index on labels serves; `!=` and `notin` also match
/// resources without the key, as in Kubernetes.
fn push_selector(query: &mut QueryBuilder<Postgres>, selector: &LabelSelector) {
    for requirement in &selector.requirements {
        match requirement {
            Requirement::Equals { key, value } => {
                let doc = serde_json::json!({ key.as_str(): value });
                query.push(" AND r.labels @> ").push_bind(Json(doc));
            }
            Requirement::NotEquals { key, value } => {
                let doc = serde_json::json!({ key.as_str(): value });
                query.push(" AND NOT (r.labels @> ").push_bind(Json(doc)).push(")");
            }
            Requirement::In { key, values } => {
                query
                    .push(" AND (r.labels ->> ")
                    .push_bind(key.clone())
                    .push(") = ANY(")
                    .push_bind(values.clone())
                    .push(")");
            }
            Requirement::NotIn { key, values } => {
                query
                    .push(" AND NOT COALESCE((r.labels ->> ")
                    .push_bind(key.clone())
                    .push(") = ANY(")
                    .push_bind(values.clone())
                    .push("), false)");
            }
            Requirement::Exists { key } => {
                query.push(" AND r.labels ? ").push_bind(key.clone());
            }
            Requirement::NotExists { key } => {
                query.push(" AND NOT (r.labels ? ").push_bind(key.clone()).push(")");
            }
        }
    }
}

/// Whether any resource of (kind, kind_version) exists.
pub async fn any_of_kind(conn: &mut PgConnection, kind: &str, kind_version: i32) -> StoreResult<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM resources WHERE kind = $1 AND kind_version = $2)")
        .bind(kind)
        .bind(i16::try_from(kind_version).unwrap_or(i16::MAX))
        .fetch_one(conn)
        .await
}

/// A page of (id, name, spec) of the resources of (kind, kind_version) after
/// `after_id`, in id order, for re-validating specs against a new schema.
pub async fn specs_of_kind(
    conn: &mut PgConnection,
    kind: &str,
    kind_version: i32,
    after_id: Option<Uuid>,
    limit: i64,
) -> StoreResult<Vec<(Uuid, String, Json<Value>)>> {
    sqlx::query_as(
        "SELECT id, name, spec FROM resources
         WHERE kind = $1 AND kind_version = $2 AND ($3::uuid IS NULL OR id > $3)
         ORDER BY id LIMIT $4",
    )
    .bind(kind)
    .bind(i16::try_from(kind_version).unwrap_or(i16::MAX))
    .bind(after_id)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// The newest committed position of the resource change log below the
/// frontier (for diagnostics and tests).
pub async fn change_frontier(pool: &PgPool) -> StoreResult<i64> {
    sqlx::query_scalar("SELECT change_frontier()").fetch_one(pool).await
}
