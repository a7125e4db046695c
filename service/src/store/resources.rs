//! `resources` and `resource_conditions`: reads, writes and keyset pages.

use super::measured::measured;
use super::small_version;
use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor, PgPool, Postgres, QueryBuilder};
use uuid::Uuid;

use super::StoreResult;
use crate::domain::event::NewEvent;
use crate::domain::labels::{LabelSelector, Requirement};
use crate::domain::position::Position;
use crate::domain::resource::{Condition, ConditionInput, ConditionStatus, Phase, Resource, ResourceRef};

/// Columns of a resources row `r` as the API reads it (its references and
/// conditions come from [`references!`] and [`conditions!`]).
macro_rules! columns {
    () => {
        "r.id, r.kind, r.kind_version::int4 AS kind_version, r.name, r.labels, r.spec, r.status, \
         r.provider_config, r.generation, r.synced_gen, r.health_ok, r.failure_gen, r.failure_attempts, \
         r.finalizers, r.deletion_requested_at, \
         CASE WHEN r.frozen_until = 'infinity' THEN NULL ELSE r.frozen_until END AS orphan_until, \
         COALESCE(r.frozen_until = 'infinity', false) AS quarantined, \
         r.phase, r.created_at, r.updated_at, r.rv_txid, r.rv_seq"
    };
}

/// The owner's and root's kind and name of the row `r` as one array
/// `[owner kind, owner name, root kind, root name]` (NULL for a root: the two
/// are set together). One scalar subquery instead of two outer joins: every
/// resource read is planned anew (its parameters are arrays), and the joins
/// made planning cost more than running the read.
macro_rules! references {
    () => {
        "(SELECT ARRAY[o.kind, o.name, t.kind, t.name] FROM resources o, resources t \
          WHERE o.id = r.owner_id AND t.id = r.root_id) AS refs"
    };
}

/// The conditions of the row `r`, as one JSON array ordered by type (NULL
/// when there are none): read in the same statement as the row, so a
/// resource read is one round trip.
macro_rules! conditions {
    () => {
        "(SELECT jsonb_agg(jsonb_build_object( \
             'type', c.type, 'status', c.status, 'reason', c.reason, 'message', c.message, \
             'observed_generation', c.observed_generation, 'last_transition_at', c.last_transition_at, \
             'updated_at', c.updated_at, 'expires_at', c.expires_at, \
             'lapsed', c.expires_at <= statement_timestamp()) ORDER BY c.type) \
          FROM resource_conditions c WHERE c.resource_id = r.id) AS conditions"
    };
}

/// A resource read, up to its `WHERE` clause: `resources r` with every
/// column [`ResourceRow`] decodes.
const SELECT: &str = concat!(
    "SELECT ",
    columns!(),
    ", ",
    references!(),
    ", ",
    conditions!(),
    " FROM resources r"
);

#[derive(Debug, sqlx::FromRow)]
struct ResourceRow {
    id: Uuid,
    kind: String,
    kind_version: i32,
    name: String,
    labels: Json<BTreeMap<String, String>>,
    spec: Json<Value>,
    status: Option<Json<Value>>,
    refs: Option<Vec<String>>,
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
    conditions: Option<Json<Vec<ConditionRecord>>>,
}

/// One element of [`conditions!`].
#[derive(Debug, serde::Deserialize)]
struct ConditionRecord {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    reason: String,
    message: String,
    observed_generation: i64,
    last_transition_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    expires_at: Option<DateTime<Utc>>,
    /// Whether a liveness condition's window has passed, by the database's
    /// clock (the one that stamped `expires_at`), not this process's.
    lapsed: Option<bool>,
}

impl ConditionRecord {
    fn into_condition(self) -> Condition {
        let lapsed = self.lapsed == Some(true);
        let condition = Condition {
            type_: self.type_,
            // The column has a CHECK constraint on the three spellings.
            status: ConditionStatus::from_db(&self.status).unwrap_or(ConditionStatus::Unknown),
            reason: self.reason,
            message: self.message,
            observed_generation: self.observed_generation,
            last_transition_at: self.last_transition_at,
            updated_at: self.updated_at,
            expires_at: self.expires_at,
        };
        if lapsed { condition.lapsed() } else { condition }
    }
}

/// The reference at `at` (0: owner, 2: root) of a [`references!`] array.
fn reference(refs: Option<&[String]>, at: usize) -> Option<ResourceRef> {
    let refs = refs?;
    Some(ResourceRef {
        kind: refs.get(at)?.clone(),
        name: refs.get(at + 1)?.clone(),
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
            owner: reference(self.refs.as_deref(), 0),
            root: reference(self.refs.as_deref(), 2),
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
            conditions: self
                .conditions
                .map(|c| c.0.into_iter().map(ConditionRecord::into_condition).collect())
                .unwrap_or_default(),
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

/// Reads a resource by kind and name, row-locked for the rest of the transaction.
pub async fn find_for_update(conn: &mut PgConnection, kind: &str, name: &str) -> StoreResult<Option<Resource>> {
    measured("resources.find_for_update", async move {
        let key = (kind.to_owned(), name.to_owned());
        Ok(find_many_for_update(conn, std::slice::from_ref(&key))
            .await?
            .remove(&key))
    })
    .await
}

/// Reads the resources of several (kind, name) keys, row-locked for the rest
/// of the transaction, keyed by (kind, name). Rows are locked in id order,
/// the order every multi-row writer uses, so concurrent batches cannot
/// deadlock on each other.
pub async fn find_many_for_update(
    conn: &mut PgConnection,
    keys: &[(String, String)],
) -> StoreResult<HashMap<(String, String), Resource>> {
    measured("resources.find_many_for_update", async move {
        match keys {
            [] => return Ok(HashMap::new()),
            // One key as scalars: a prepared statement then settles on a cached
            // plan, where array keys are planned anew on every call (0.6 ms,
            // more than the read itself, on the idle apply path).
            [(kind, name)] => {
                let sql = format!("{SELECT} WHERE r.kind = $1 AND r.name = $2 FOR NO KEY UPDATE OF r");
                let rows: Vec<ResourceRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                    .bind(kind)
                    .bind(name)
                    .fetch_all(&mut *conn)
                    .await?;
                return Ok(by_key(rows));
            }
            _ => {}
        }
        let (kinds, names): (Vec<&str>, Vec<&str>) = keys.iter().map(|(k, n)| (k.as_str(), n.as_str())).unzip();
        let sql = format!(
            "{SELECT} JOIN unnest($1::text[], $2::text[]) AS x(k, n) ON r.kind = x.k AND r.name = x.n
             ORDER BY r.id FOR NO KEY UPDATE OF r"
        );
        let rows: Vec<ResourceRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(kinds)
            .bind(names)
            .fetch_all(&mut *conn)
            .await?;
        Ok(by_key(rows))
    })
    .await
}

/// Inserts new root resources, starts each one's timeline with `first`
/// (recorded by `actor`) and queues its first reconcile, in one statement;
/// returns those inserted, as stored, keyed by (kind, name) (so the caller
/// needs no read-back). A name taken meanwhile is left out (the caller
/// treats it as an update). Rows go in (kind, name) order, so two batches
/// racing for the same names wait on each other instead of deadlocking.
pub async fn insert_many(
    conn: &mut PgConnection,
    desired: &[DesiredResource<'_>],
    first: &NewEvent,
    actor: &str,
) -> StoreResult<HashMap<(String, String), Resource>> {
    measured("resources.insert_many", async move {
        if desired.is_empty() {
            return Ok(HashMap::new());
        }
        let mut sorted: Vec<&DesiredResource<'_>> = desired.iter().collect();
        sorted.sort_by(|a, b| (a.kind, a.name).cmp(&(b.kind, b.name)));
        let kinds: Vec<&str> = sorted.iter().map(|d| d.kind).collect();
        let versions: Vec<i16> = sorted.iter().map(|d| small_version(d.kind_version)).collect();
        let names: Vec<&str> = sorted.iter().map(|d| d.name).collect();
        let labels: Vec<Json<&BTreeMap<String, String>>> = sorted.iter().map(|d| Json(d.labels)).collect();
        let specs: Vec<Json<&Value>> = sorted.iter().map(|d| Json(d.spec)).collect();
        let providers: Vec<Option<&str>> = sorted.iter().map(|d| d.provider_config.flatten()).collect();
        // New roots: no references, no conditions yet.
        const SQL: &str = concat!(
            include_str!("sql/insert_resources.sql"),
            "SELECT ",
            columns!(),
            ", NULL::text[] AS refs, NULL::jsonb AS conditions
             FROM created r LEFT JOIN woken ON true LEFT JOIN queued ON true"
        );
        let rows: Vec<ResourceRow> = sqlx::query_as(SQL)
            .bind(kinds)
            .bind(versions)
            .bind(names)
            .bind(labels)
            .bind(specs)
            .bind(providers)
            .bind(first.category)
            .bind(first.type_.as_db())
            .bind(first.reason)
            .bind(&first.message)
            .bind(first.detail.as_ref().map(Json))
            .bind(actor)
            .fetch_all(&mut *conn)
            .await?;
        Ok(by_key(rows))
    })
    .await
}

/// Rows as resources keyed by (kind, name).
fn by_key(rows: Vec<ResourceRow>) -> HashMap<(String, String), Resource> {
    rows.into_iter()
        .map(|row| {
            let resource = row.into_resource();
            ((resource.kind.clone(), resource.name.clone()), resource)
        })
        .collect()
}

/// The write of [`update_many`], over `x` (the rows to write: id, kind
/// version, labels, spec, whether to set the provider config, the config):
/// the user-owned fields, the generation moved only when the spec or the kind
/// version changes, and nothing written for a row that is identical.
macro_rules! update_desired {
    ($rows:literal) => {
        concat!(
            "UPDATE resources r
             SET kind_version = x.kind_version, labels = x.labels, spec = x.spec,
                 provider_config = CASE WHEN x.sets_config THEN x.provider_config ELSE r.provider_config END,
                 generation = r.generation
                     + CASE WHEN r.spec IS DISTINCT FROM x.spec OR r.kind_version <> x.kind_version THEN 1 ELSE 0 END
             FROM ",
            $rows,
            " AS x(id, kind_version, labels, spec, sets_config, provider_config)
             WHERE r.id = x.id
               AND (r.kind_version <> x.kind_version OR r.labels IS DISTINCT FROM x.labels
                    OR r.spec IS DISTINCT FROM x.spec
                    OR (x.sets_config AND r.provider_config IS DISTINCT FROM x.provider_config))
             RETURNING r.id"
        )
    };
}

/// Writes the user-owned fields of existing resources (row-locked by the
/// caller) in one statement, and returns those written, as they are now,
/// keyed by id. A resource whose fields are identical is not written and
/// left out; its generation moves only when the spec or the kind version
/// changes.
pub async fn update_many(
    conn: &mut PgConnection,
    updates: &[(Uuid, DesiredResource<'_>)],
) -> StoreResult<HashMap<Uuid, Resource>> {
    measured("resources.update_many", async move {
        let written: Vec<Uuid> = match updates {
            [] => return Ok(HashMap::new()),
            // One row as scalars: a prepared statement settles on a cached
            // plan, where arrays are planned anew on every call.
            [(id, desired)] => {
                sqlx::query_scalar(update_desired!(
                    "(VALUES ($1::uuid, $2::int2, $3::jsonb, $4::jsonb, $5::bool, $6::text))"
                ))
                .bind(id)
                .bind(small_version(desired.kind_version))
                .bind(Json(desired.labels))
                .bind(Json(desired.spec))
                .bind(desired.provider_config.is_some())
                .bind(desired.provider_config.flatten())
                .fetch_all(&mut *conn)
                .await?
            }
            _ => {
                let ids: Vec<Uuid> = updates.iter().map(|(id, _)| *id).collect();
                let versions: Vec<i16> = updates.iter().map(|(_, d)| small_version(d.kind_version)).collect();
                let labels: Vec<Json<&BTreeMap<String, String>>> =
                    updates.iter().map(|(_, d)| Json(d.labels)).collect();
                let specs: Vec<Json<&Value>> = updates.iter().map(|(_, d)| Json(d.spec)).collect();
                let sets: Vec<bool> = updates.iter().map(|(_, d)| d.provider_config.is_some()).collect();
                let configs: Vec<Option<&str>> = updates.iter().map(|(_, d)| d.provider_config.flatten()).collect();
                sqlx::query_scalar(update_desired!(
                    "unnest($1::uuid[], $2::int2[], $3::jsonb[], $4::jsonb[], $5::bool[], $6::text[])"
                ))
                .bind(ids)
                .bind(versions)
                .bind(labels)
                .bind(specs)
                .bind(sets)
                .bind(configs)
                .fetch_all(&mut *conn)
                .await?
            }
        };
        Ok(get_many(conn, &written)
            .await?
            .into_iter()
            .map(|resource| (resource.id, resource))
            .collect())
    })
    .await
}

/// Reads one resource (with conditions) by id.
pub async fn get_by_id(conn: &mut PgConnection, id: Uuid) -> StoreResult<Option<Resource>> {
    measured("resources.get_by_id", async move {
        let sql = format!("{SELECT} WHERE r.id = $1");
        let row: Option<ResourceRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(conn)
            .await?;
        Ok(row.map(ResourceRow::into_resource))
    })
    .await
}

/// Reads one resource (with conditions) by kind and name, on a pool or
/// inside the caller's transaction.
pub async fn get<'e>(executor: impl PgExecutor<'e>, kind: &str, name: &str) -> StoreResult<Option<Resource>> {
    measured("resources.get", async move {
        let sql = format!("{SELECT} WHERE r.kind = $1 AND r.name = $2");
        let row: Option<ResourceRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(kind)
            .bind(name)
            .fetch_optional(executor)
            .await?;
        Ok(row.map(ResourceRow::into_resource))
    })
    .await
}

/// Whether a resource with this id exists.
pub async fn exists(conn: &mut PgConnection, id: Uuid) -> StoreResult<bool> {
    measured("resources.exists", async move {
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM resources WHERE id = $1)")
            .bind(id)
            .fetch_one(conn)
            .await
            .map_err(Into::into)
    })
    .await
}

/// The id of a resource by kind and name.
pub async fn id_of(pool: &PgPool, kind: &str, name: &str) -> StoreResult<Option<Uuid>> {
    measured("resources.id_of", async move {
        sqlx::query_scalar("SELECT id FROM resources WHERE kind = $1 AND name = $2")
            .bind(kind)
            .bind(name)
            .fetch_optional(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Writes conditions of one resource; returns how many changed.
pub async fn set_conditions(
    conn: &mut PgConnection,
    id: Uuid,
    generation: i64,
    conditions: &[ConditionInput],
) -> StoreResult<i32> {
    measured("resources.set_conditions", async move {
        sqlx::query_scalar("SELECT set_resource_conditions($1, $2, $3)")
            .bind(id)
            .bind(generation)
            .bind(Json(conditions))
            .fetch_one(conn)
            .await
            .map_err(Into::into)
    })
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
    /// Only resources that reference this provider config.
    pub provider_config: Option<String>,
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
    measured("resources.list", async move {
        let mut conn = pool.acquire().await?;
        list_in(&mut conn, filter, after, limit).await
    })
    .await
}

/// [`list`] on a given connection (e.g. inside a snapshot transaction).
///
/// A page selected by label equality is first looked for by walking the
/// rows in page order and matching their labels, because PostgreSQL has no
/// statistics of single labels: it estimates `labels @> …` from a histogram
/// of whole label sets, so a label on 1% of 10M resources can be estimated
/// at 0.01%, and the planner then fetches and sorts every match through the
/// label index for one page (1.1 s instead of milliseconds). The walk starts
/// small and goes on only while the matches it sees say the page fills
/// within [`WALK_BUDGET`] rows; a rarer label is left to the planner's plan
/// (the label index), from where the walk stopped.
pub async fn list_in(
    conn: &mut PgConnection,
    filter: &ResourceFilter,
    after: Option<ListCursor>,
    limit: usize,
) -> StoreResult<Vec<Resource>> {
    measured("resources.list_in", async move {
        let by_equality = filter
            .selector
            .requirements
            .iter()
            .any(|r| matches!(r, Requirement::Equals { .. }));
        if !by_equality || limit == 0 {
            return planned_page(conn, filter, after, limit).await;
        }
        let mut found: Vec<Uuid> = Vec::new();
        let mut cursor = after;
        let mut walked = 0;
        let mut rows = first_walk(limit);
        loop {
            let walk = walk_page(conn, filter, cursor, limit - found.len(), rows).await?;
            found.extend(walk.hits);
            if found.len() >= limit || walk.walked < rows {
                return fetch_in_page_order(conn, &found).await;
            }
            walked += walk.walked;
            cursor = walk.last;
            match further_walk(found.len(), walked, limit) {
                Some(next) => rows = next,
                None => break,
            }
        }
        let mut page = fetch_in_page_order(conn, &found).await?;
        page.extend(planned_page(conn, filter, cursor, limit - found.len()).await?);
        Ok(page)
    })
    .await
}

/// The most rows one label-selected page walks before the label index
/// reads the rest: a label on 0.5% of the rows still fills a page of 100
/// by walking; what is rarer has at most `limit` / 0.5% matches for the
/// index to fetch (about 2,000 heap pages either way).
const WALK_BUDGET: i64 = 20_000;

/// The first walk of a label-selected page: 10 rows per row wanted, at
/// least 500 and at most 2,000, which is all a rare label costs extra.
fn first_walk(limit: usize) -> i64 {
    rows_wanted(limit.saturating_mul(10)).clamp(500, 2_000)
}

/// How many rows to walk next, having found `found` matches in `walked`
/// rows of a page of `limit`: enough for the rest at the rate seen, with a
/// margin, if that stays within [`WALK_BUDGET`]; `None` to leave the rest
/// to the label index (no match seen, or too rare to walk for).
fn further_walk(found: usize, walked: i64, limit: usize) -> Option<i64> {
    if found == 0 {
        return None;
    }
    let found = rows_wanted(found);
    let wanted = rows_wanted(limit).saturating_sub(found);
    let rows = wanted.saturating_mul(walked).saturating_mul(3) / found.saturating_mul(2);
    (walked.saturating_add(rows) <= WALK_BUDGET).then_some(rows.max(1))
}

/// What one walk found: the first matching ids in page order, how many
/// rows it walked and the position of the last one.
struct Walk {
    hits: Vec<Uuid>,
    walked: i64,
    last: Option<ListCursor>,
}

/// Walks at most `rows` rows of `filter` (labels aside) after `after` in
/// page order and returns the first `limit` that match its labels. The walk
/// stops at the `limit`-th match; only when it finds fewer does a second,
/// index-only statement count the rows and find the last.
async fn walk_page(
    conn: &mut PgConnection,
    filter: &ResourceFilter,
    after: Option<ListCursor>,
    limit: usize,
    rows: i64,
) -> StoreResult<Walk> {
    // The walk carries no label condition, so only an index in page order
    // serves its ORDER BY … LIMIT, and the outer ORDER BY is that order
    // (no sort): the outer LIMIT stops it at the last match wanted.
    let mut query: QueryBuilder<Postgres> =
        QueryBuilder::new("SELECT r.id FROM (SELECT r.id, r.created_at, r.labels FROM resources r WHERE true");
    push_filter(&mut query, filter, after);
    push_page_order(&mut query, rows);
    query.push(") r WHERE true");
    push_selector(&mut query, &filter.selector);
    push_page_order(&mut query, rows_wanted(limit));
    let hits: Vec<Uuid> = query.build_query_scalar().fetch_all(&mut *conn).await?;
    if hits.len() >= limit {
        return Ok(Walk {
            hits,
            walked: rows,
            last: None,
        });
    }
    let mut query: QueryBuilder<Postgres> =
        QueryBuilder::new("WITH walk AS MATERIALIZED (SELECT r.created_at, r.id FROM resources r WHERE true");
    push_filter(&mut query, filter, after);
    push_page_order(&mut query, rows);
    query.push(
        ") SELECT (SELECT count(*) FROM walk), w.created_at, w.id
               FROM (SELECT 1) one LEFT JOIN (SELECT * FROM walk ORDER BY created_at, id LIMIT 1) w ON true",
    );
    let (walked, created_at, id): (i64, Option<DateTime<Utc>>, Option<Uuid>) =
        query.build_query_as().fetch_one(&mut *conn).await?;
    let last = created_at.zip(id).map(|(created_at, id)| ListCursor { created_at, id });
    Ok(Walk { hits, walked, last })
}

/// The resources `ids` (a page, in page order) with their conditions.
async fn fetch_in_page_order(conn: &mut PgConnection, ids: &[Uuid]) -> StoreResult<Vec<Resource>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!("{SELECT} WHERE r.id = ANY($1) ORDER BY r.created_at DESC, r.id DESC");
    let rows: Vec<ResourceRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(ids)
        .fetch_all(conn)
        .await?;
    Ok(rows.into_iter().map(ResourceRow::into_resource).collect())
}

/// A page as the planner chooses to read it.
async fn planned_page(
    conn: &mut PgConnection,
    filter: &ResourceFilter,
    after: Option<ListCursor>,
    limit: usize,
) -> StoreResult<Vec<Resource>> {
    let mut query: QueryBuilder<Postgres> = QueryBuilder::new(format!("{SELECT} WHERE true"));
    push_filter(&mut query, filter, after);
    push_selector(&mut query, &filter.selector);
    push_page_order(&mut query, rows_wanted(limit));
    let rows: Vec<ResourceRow> = query.build_query_as().fetch_all(conn).await?;
    Ok(rows.into_iter().map(ResourceRow::into_resource).collect())
}

/// Orders `query` (over `r`) in page order, newest first, and keeps `limit` rows.
fn push_page_order(query: &mut QueryBuilder<Postgres>, limit: i64) {
    query
        .push(" ORDER BY r.created_at DESC, r.id DESC LIMIT ")
        .push_bind(limit);
}

/// A row count as SQL takes it.
fn rows_wanted(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// Restricts `query` (over `resources r`) to `filter` without its labels,
/// after the keyset position `after`.
fn push_filter(query: &mut QueryBuilder<Postgres>, filter: &ResourceFilter, after: Option<ListCursor>) {
    if let Some(kind) = &filter.kind {
        query.push(" AND r.kind = ").push_bind(kind.clone());
    }
    if let Some(version) = filter.kind_version {
        query.push(" AND r.kind_version = ").push_bind(small_version(version));
    }
    push_phases(query, &filter.phases);
    if let Some(owner) = filter.owner_id {
        query.push(" AND r.owner_id = ").push_bind(owner);
    }
    if let Some(config) = &filter.provider_config {
        query.push(" AND r.provider_config = ").push_bind(config.clone());
    }
    if let Some(root) = filter.root_id {
        query.push(" AND r.root_id = ").push_bind(root);
    }
    if filter.roots_only {
        query.push(" AND r.owner_id IS NULL");
    }
    if let Some(cursor) = after {
        query
            .push(" AND (r.created_at, r.id) < (")
            .push_bind(cursor.created_at)
            .push(", ")
            .push_bind(cursor.id)
            .push(")");
    }
}

/// Restricts `query` (over `resources r`) to `phases` (none = all).
pub(super) fn push_phases(query: &mut QueryBuilder<Postgres>, phases: &[Phase]) {
    if phases.is_empty() {
        return;
    }
    let names: Vec<String> = phases.iter().map(|p| p.as_db().to_owned()).collect();
    query.push(" AND r.phase = ANY(").push_bind(names).push(")");
    // The phase is not indexed (a sync would then never be a HOT update,
    // ADR 14); rare phases are reached through partial indexes on the
    // columns they imply.
    let implied: Option<Vec<&str>> = phases.iter().map(|p| implied_by_phase(*p)).collect();
    if let Some(implied) = implied {
        query.push(" AND (").push(implied.join(" OR ")).push(")");
    }
}

/// A predicate every resource in `phase` satisfies and that a partial index
/// of `resources` covers (migrations 0007, 0027); `None` for the common
/// phases, whose lists walk the creation order.
fn implied_by_phase(phase: Phase) -> Option<&'static str> {
    match phase {
        Phase::Deleting => Some("r.deletion_requested_at IS NOT NULL"),
        Phase::Orphaned | Phase::Quarantined => Some("r.frozen_until IS NOT NULL"),
        Phase::Failed => Some("r.failure_gen > 0"),
        Phase::Degraded => Some("NOT r.health_ok"),
        Phase::Ready | Phase::Reconciling => None,
    }
}

/// The current state of several resources (missing ones are left out).
pub async fn get_many(conn: &mut PgConnection, ids: &[Uuid]) -> StoreResult<Vec<Resource>> {
    measured("resources.get_many", async move {
        match ids {
            [] => return Ok(Vec::new()),
            // A scalar key gets a cached plan; an array is planned on every call.
            [id] => return Ok(get_by_id(conn, *id).await?.into_iter().collect()),
            _ => {}
        }
        let sql = format!("{SELECT} WHERE r.id = ANY($1)");
        let rows: Vec<ResourceRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(ids)
            .fetch_all(conn)
            .await?;
        Ok(rows.into_iter().map(ResourceRow::into_resource).collect())
    })
    .await
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
pub(super) fn push_selector(query: &mut QueryBuilder<Postgres>, selector: &LabelSelector) {
    for requirement in &selector.requirements {
        match requirement {
            Requirement::Equals { key, value } => {
                let doc = serde_json::json!({ key.as_str(): value });
                // The index leaves out empty label sets (migration 37), which
                // cannot contain a pair anyway; saying so lets the planner use it.
                query
                    .push(" AND r.labels <> '{}'::jsonb AND r.labels @> ")
                    .push_bind(Json(doc));
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

/// The names of up to `limit` resources of (kind, kind_version), in name
/// order (empty when it has none).
pub async fn names_of_kind(
    conn: &mut PgConnection,
    kind: &str,
    kind_version: i32,
    limit: i64,
) -> StoreResult<Vec<String>> {
    measured("resources.names_of_kind", async move {
        sqlx::query_scalar("SELECT name FROM resources WHERE kind = $1 AND kind_version = $2 ORDER BY name LIMIT $3")
            .bind(kind)
            .bind(small_version(kind_version))
            .bind(limit)
            .fetch_all(conn)
            .await
            .map_err(Into::into)
    })
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
    measured("resources.specs_of_kind", async move {
        sqlx::query_as(
            "SELECT id, name, spec FROM resources
             WHERE kind = $1 AND kind_version = $2 AND ($3::uuid IS NULL OR id > $3)
             ORDER BY id LIMIT $4",
        )
        .bind(kind)
        .bind(small_version(kind_version))
        .bind(after_id)
        .bind(limit)
        .fetch_all(conn)
        .await
        .map_err(Into::into)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestDatabase;

    #[test]
    fn a_walk_goes_on_only_while_the_page_fills_within_the_budget() {
        assert_eq!(first_walk(1), 500);
        assert_eq!(first_walk(100), 1_000);
        assert_eq!(first_walk(1_000), 2_000);
        assert_eq!(further_walk(0, 1_000, 100), None, "no match seen: the label index");
        // 1% seen: the other 90 take about 9,000 rows, walked with a margin.
        assert_eq!(further_walk(10, 1_000, 100), Some(13_500));
        // 0.1% seen: 99 more would take about 99,000 rows, past the budget.
        assert_eq!(further_walk(1, 1_000, 100), None);
        assert_eq!(further_walk(99, 19_999, 100), None, "the budget is spent");
    }

    /// An equality selector's SQL names the label index's predicate, so the
    /// planner can read the partial index (migration 37). With sequential
    /// and plain index scans off, that bitmap scan is the only way left to
    /// answer the query other than a sequential scan.
    #[tokio::test]
    async fn equality_selectors_can_use_the_partial_label_index() -> anyhow::Result<()> {
        let db = TestDatabase::new().await?;
        let mut conn = db.pool().acquire().await?;
        sqlx::query("SET enable_seqscan = off").execute(&mut *conn).await?;
        sqlx::query("SET enable_indexscan = off").execute(&mut *conn).await?;
        let selector: LabelSelector = "team=a".parse()?;
        let mut query: QueryBuilder<Postgres> = QueryBuilder::new("EXPLAIN SELECT r.id FROM resources r WHERE true");
        push_selector(&mut query, &selector);
        let plan: Vec<String> = query.build_query_scalar().fetch_all(&mut *conn).await?;
        let plan = plan.join("\n");
        assert!(plan.contains("resources_labeled_idx"), "{plan}");
        Ok(())
    }
}
