//! `reactor_bindings` and `reactor_deliveries`: the bindings from
//! lifecycle transitions to reactor kinds, and the durable deliveries the
//! transition triggers record (migrations/functions/reactors.sql).

use super::measured::measured;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool, Postgres, QueryBuilder};
use uuid::Uuid;

use super::StoreResult;
use crate::domain::reactor::{Binding, BindingContent, BindingStats, Delivery, RedriveTarget, Transition};
use crate::domain::shard::ShardRange;

use super::small_version as small;

const SELECT: &str = "SELECT b.name, b.watch_kind, b.watch_kind_version::int4 AS watch_kind_version, b.transition, \
     b.label_match, b.reactor, b.reactor_version::int4 AS reactor_version, b.enabled, b.revision, b.created_at, \
     b.updated_at FROM reactor_bindings b";

#[derive(Debug, sqlx::FromRow)]
struct BindingRow {
    name: String,
    watch_kind: String,
    watch_kind_version: Option<i32>,
    transition: String,
    label_match: Json<BTreeMap<String, String>>,
    reactor: String,
    reactor_version: Option<i32>,
    enabled: bool,
    revision: i64,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl BindingRow {
    fn into_binding(self) -> Binding {
        Binding {
            content: BindingContent {
                name: self.name,
                watch_kind: self.watch_kind,
                watch_kind_version: self.watch_kind_version,
                transition: Transition::from_db(&self.transition).unwrap_or(Transition::Synced),
                label_match: self.label_match.0,
                reactor: self.reactor,
                reactor_version: self.reactor_version,
                enabled: self.enabled,
            },
            revision: self.revision,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

/// Reads one binding.
pub async fn get(conn: &mut PgConnection, name: &str) -> StoreResult<Option<Binding>> {
    measured("reactors.get", async move {
        let sql = format!("{SELECT} WHERE b.name = $1");
        let row: Option<BindingRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(name)
            .fetch_optional(conn)
            .await?;
        Ok(row.map(BindingRow::into_binding))
    })
    .await
}

/// Reads one binding and locks it until the transaction ends.
pub async fn lock(conn: &mut PgConnection, name: &str) -> StoreResult<Option<Binding>> {
    measured("reactors.lock", async move {
        let sql = format!("{SELECT} WHERE b.name = $1 FOR UPDATE");
        let row: Option<BindingRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(name)
            .fetch_optional(conn)
            .await?;
        Ok(row.map(BindingRow::into_binding))
    })
    .await
}

/// Stores a new binding or replaces the content of an existing one (its
/// revision moves); returns it as stored.
pub async fn upsert(conn: &mut PgConnection, content: &BindingContent) -> StoreResult<Binding> {
    measured("reactors.upsert", async move {
        sqlx::query(
            "INSERT INTO reactor_bindings AS b (name, watch_kind, watch_kind_version, transition, label_match, reactor,
                                                reactor_version, enabled)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (name) DO UPDATE
                 SET watch_kind = EXCLUDED.watch_kind, watch_kind_version = EXCLUDED.watch_kind_version,
                     transition = EXCLUDED.transition, label_match = EXCLUDED.label_match,
                     reactor = EXCLUDED.reactor, reactor_version = EXCLUDED.reactor_version,
                     enabled = EXCLUDED.enabled, revision = b.revision + 1, updated_at = now()",
        )
        .bind(&content.name)
        .bind(&content.watch_kind)
        .bind(content.watch_kind_version.map(small))
        .bind(content.transition.as_db())
        .bind(Json(&content.label_match))
        .bind(&content.reactor)
        .bind(content.reactor_version.map(small))
        .bind(content.enabled)
        .execute(&mut *conn)
        .await?;
        match get(conn, &content.name).await? {
            Some(binding) => Ok(binding),
            None => Err(sqlx::Error::RowNotFound.into()),
        }
    })
    .await
}

/// Deletes a binding; false if it did not exist. Its recorded deliveries stay.
pub async fn delete(conn: &mut PgConnection, name: &str) -> StoreResult<bool> {
    measured("reactors.delete", async move {
        let done = sqlx::query("DELETE FROM reactor_bindings WHERE name = $1")
            .bind(name)
            .execute(conn)
            .await?;
        Ok(done.rows_affected() > 0)
    })
    .await
}

/// Whether any binding watches or runs (kind, version): one naming that
/// version, or naming none.
pub async fn any_binding_names(conn: &mut PgConnection, kind: &str, version: i32) -> StoreResult<bool> {
    measured("reactors.any_binding_names", async move {
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM reactor_bindings
                            WHERE (watch_kind = $1 AND (watch_kind_version IS NULL OR watch_kind_version = $2))
                               OR (reactor = $1 AND (reactor_version IS NULL OR reactor_version = $2)))",
        )
        .bind(kind)
        .bind(small(version))
        .fetch_one(conn)
        .await
        .map_err(Into::into)
    })
    .await
}

/// Filters of [`list`], combined with AND.
#[derive(Debug, Clone, Default)]
pub struct BindingFilter {
    /// Only bindings watching this kind.
    pub watch_kind: Option<String>,
    /// Only bindings running this reactor kind.
    pub reactor: Option<String>,
}

/// Up to `limit` bindings after `after` (by name).
pub async fn list(pool: &PgPool, filter: &BindingFilter, after: Option<&str>, limit: i64) -> StoreResult<Vec<Binding>> {
    measured("reactors.list", async move {
        let sql = format!(
            "{SELECT}
             WHERE ($1::text IS NULL OR b.watch_kind = $1) AND ($2::text IS NULL OR b.reactor = $2)
               AND ($3::text IS NULL OR b.name > $3)
             ORDER BY b.name LIMIT $4"
        );
        let rows: Vec<BindingRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(filter.watch_kind.as_deref())
            .bind(filter.reactor.as_deref())
            .bind(after)
            .bind(limit)
            .fetch_all(pool)
            .await?;
        Ok(rows.into_iter().map(BindingRow::into_binding).collect())
    })
    .await
}

/// The delivery counts of the given bindings, by name.
pub async fn stats(conn: &mut PgConnection, names: &[String]) -> StoreResult<BTreeMap<String, BindingStats>> {
    measured("reactors.stats", async move {
        if names.is_empty() {
            return Ok(BTreeMap::new());
        }
        let rows: Vec<(String, i64, i64, Option<String>)> = sqlx::query_as(
            "SELECT d.binding, count(*) FILTER (WHERE d.failed_at IS NULL), count(*) FILTER (WHERE d.failed_at IS NOT NULL),
                    (array_agg(d.last_error ORDER BY d.failed_at DESC) FILTER (WHERE d.failed_at IS NOT NULL))[1]
             FROM reactor_deliveries d WHERE d.binding = ANY ($1)
             GROUP BY d.binding",
        )
        .bind(names)
        .fetch_all(conn)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(name, pending, failed, last_failure)| {
                (
                    name,
                    BindingStats {
                        pending,
                        failed,
                        last_failure,
                    },
                )
            })
            .collect())
    })
    .await
}

row_struct! {
    /// A claimed delivery: a row of the SQL type `claimed_delivery`
    /// (migrations/0012_reactors.sql), returned by `claim_deliveries` and
    /// `leased_deliveries`.
    #[derive(Debug, Clone, sqlx::FromRow)]
    pub struct ClaimedDelivery {
        /// The delivery's id.
        pub delivery_id: Uuid,
        /// The lease.
        pub lease_token: Uuid,
        /// The fence.
        pub claim_epoch: i64,
        /// Attempt number of this dispatch (1 = first).
        pub attempts: i32,
        /// Name of the binding that recorded it.
        pub binding: String,
        /// The reactor kind.
        pub reactor: String,
        /// The reactor version it runs at.
        pub reactor_version: i32,
        /// Manifest version of that reactor version.
        pub manifest_version: i64,
        /// The reactor kind's task deadline in seconds (None = none).
        pub deadline_secs: Option<f64>,
        /// The transition, as stored (`synced`, ...).
        pub transition: String,
        /// The generation the transition happened at.
        pub generation: i64,
        /// The watched resource's row as it was at the transition.
        pub resource: Json<Value>,
        /// The dedup token.
        pub dedup_token: String,
    }
}

/// Claims up to `limit` due deliveries to (reactor, version) for `broker`,
/// its own shard range first.
pub async fn claim(
    pool: &PgPool,
    broker: &str,
    reactor: &str,
    version: i32,
    limit: i64,
    shards: Option<ShardRange>,
) -> StoreResult<Vec<ClaimedDelivery>> {
    measured("reactors.claim", async move {
        let range = shards.unwrap_or(ShardRange { lo: 0, hi: 255 });
        sqlx::query_as("SELECT * FROM claim_deliveries($1, $2, $3, $4, $5, $6)")
            .bind(broker)
            .bind(reactor)
            .bind(small(version))
            .bind(i32::try_from(limit).unwrap_or(i32::MAX))
            .bind(range.lo)
            .bind(range.hi)
            .fetch_all(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// The outcome of one delivery, as [`complete`] applies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryOutcome<'a> {
    /// The lease of the dispatch.
    pub lease: Uuid,
    /// Its claim epoch.
    pub epoch: i64,
    /// The failure, if the handler failed.
    pub error: Option<&'a str>,
    /// The failure's reason, if any.
    pub reason: Option<&'a str>,
    /// Whether the failure is terminal.
    pub terminal: bool,
}

/// Applies a delivery's outcome through its fence (a success is removed,
/// though successes normally go through [`acknowledge`] in batches); false
/// when the fence dropped it (the lease was reclaimed meanwhile).
pub async fn complete(pool: &PgPool, outcome: &DeliveryOutcome<'_>) -> StoreResult<bool> {
    measured("reactors.complete", async move {
        sqlx::query_scalar("SELECT complete_delivery($1, $2, $3, $4, $5)")
            .bind(outcome.lease)
            .bind(outcome.epoch)
            .bind(outcome.error)
            .bind(outcome.reason)
            .bind(outcome.terminal)
            .fetch_one(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Acknowledges successful deliveries through their fences (lease and
/// epoch): each is removed; returns how many were (the rest were stale).
pub async fn acknowledge(pool: &PgPool, leases: &[(Uuid, i64)]) -> StoreResult<u64> {
    measured("reactors.acknowledge", async move {
        if leases.is_empty() {
            return Ok(0);
        }
        let (tokens, epochs): (Vec<Uuid>, Vec<i64>) = leases.iter().copied().unzip();
        let done = sqlx::query(
            "DELETE FROM reactor_deliveries d
             USING unnest($1::uuid[], $2::bigint[]) AS l(token, epoch)
             WHERE d.lease_token = l.token AND d.claim_epoch = l.epoch AND d.failed_at IS NULL",
        )
        .bind(&tokens)
        .bind(&epochs)
        .execute(pool)
        .await?;
        Ok(done.rows_affected())
    })
    .await
}

/// Takes over the delivery leases a reconnecting worker still holds and
/// returns them as claimed.
pub async fn adopt(pool: &PgPool, broker: &str, leases: &[(Uuid, i64)]) -> StoreResult<Vec<ClaimedDelivery>> {
    measured("reactors.adopt", async move {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let (tokens, epochs): (Vec<Uuid>, Vec<i64>) = leases.iter().copied().unzip();
        sqlx::query_as("SELECT * FROM adopt_deliveries($1, $2, $3)")
            .bind(broker)
            .bind(&tokens)
            .bind(&epochs)
            .fetch_all(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Releases delivery leases not attested for `stale_secs`; returns how many.
pub async fn reap(pool: &PgPool, stale_secs: f64, limit: i32) -> StoreResult<i32> {
    measured("reactors.reap", async move {
        sqlx::query_scalar("SELECT reap_stale_deliveries($1, $2)")
            .bind(stale_secs)
            .bind(limit)
            .fetch_one(pool)
            .await
            .map_err(Into::into)
    })
    .await
}

/// Deletes up to `limit` deliveries that failed more than `max_age_secs` ago.
pub async fn trim_failed(pool: &PgPool, max_age_secs: f64, limit: i64) -> StoreResult<u64> {
    measured("reactors.trim_failed", async move {
        let done = sqlx::query(
            "DELETE FROM reactor_deliveries WHERE ctid = ANY (ARRAY(
                 SELECT ctid FROM reactor_deliveries
                 WHERE failed_at < now() - make_interval(secs => $1) LIMIT $2))",
        )
        .bind(max_age_secs)
        .bind(limit)
        .execute(pool)
        .await?;
        Ok(done.rows_affected())
    })
    .await
}

const DELIVERY_SELECT: &str = "SELECT d.id, d.binding, d.reactor, d.reactor_version::int4 AS reactor_version, \
     d.transition, d.resource_id, COALESCE(d.resource ->> 'kind', '') AS resource_kind, \
     COALESCE(d.resource ->> 'name', '') AS resource_name, d.generation, d.dedup_token, d.attempts, d.created_at, \
     d.not_before, d.failed_at, d.last_error, d.lease_token IS NOT NULL AS leased FROM reactor_deliveries d";

#[derive(Debug, sqlx::FromRow)]
struct DeliveryRow {
    id: Uuid,
    binding: String,
    reactor: String,
    reactor_version: Option<i32>,
    transition: String,
    resource_id: Uuid,
    resource_kind: String,
    resource_name: String,
    generation: i64,
    dedup_token: String,
    attempts: i32,
    created_at: DateTime<Utc>,
    not_before: DateTime<Utc>,
    failed_at: Option<DateTime<Utc>>,
    last_error: Option<String>,
    leased: bool,
}

impl DeliveryRow {
    fn into_delivery(self) -> Delivery {
        Delivery {
            id: self.id,
            binding: self.binding,
            reactor: self.reactor,
            reactor_version: self.reactor_version,
            transition: Transition::from_db(&self.transition),
            resource_id: self.resource_id,
            resource_kind: self.resource_kind,
            resource_name: self.resource_name,
            generation: self.generation,
            dedup_token: self.dedup_token,
            attempts: self.attempts,
            created_at: self.created_at,
            not_before: self.not_before,
            failed_at: self.failed_at,
            last_error: self.last_error,
            leased: self.leased,
        }
    }
}

/// Filters of [`list_deliveries`], combined with AND.
#[derive(Debug, Clone, Default)]
pub struct DeliveryFilter {
    /// Only deliveries of this binding.
    pub binding: Option<String>,
    /// Only deliveries of this watched resource.
    pub resource_id: Option<Uuid>,
    /// Only deliveries that gave up.
    pub only_given_up: bool,
}

/// Up to `limit` deliveries after `after` (by id, which is time-ordered:
/// oldest first).
pub async fn list_deliveries(
    pool: &PgPool,
    filter: &DeliveryFilter,
    after: Option<Uuid>,
    limit: i64,
) -> StoreResult<Vec<Delivery>> {
    measured("reactors.list_deliveries", async move {
        let mut query = QueryBuilder::<Postgres>::new(DELIVERY_SELECT);
        query.push(" WHERE true");
        if let Some(binding) = &filter.binding {
            query.push(" AND d.binding = ").push_bind(binding.clone());
        }
        if let Some(id) = filter.resource_id {
            query.push(" AND d.resource_id = ").push_bind(id);
        }
        if filter.only_given_up {
            // Served by the partial index of failed deliveries.
            query.push(" AND d.failed_at IS NOT NULL");
        }
        if let Some(after) = after {
            query.push(" AND d.id > ").push_bind(after);
        }
        query.push(" ORDER BY d.id LIMIT ").push_bind(limit);
        let rows: Vec<DeliveryRow> = query.build_query_as().fetch_all(pool).await?;
        Ok(rows.into_iter().map(DeliveryRow::into_delivery).collect())
    })
    .await
}

/// Reads one delivery and locks it until the transaction ends.
pub async fn lock_delivery(conn: &mut PgConnection, id: Uuid) -> StoreResult<Option<Delivery>> {
    measured("reactors.lock_delivery", async move {
        let sql = format!("{DELIVERY_SELECT} WHERE d.id = $1 FOR UPDATE OF d");
        let row: Option<DeliveryRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(conn)
            .await?;
        Ok(row.map(DeliveryRow::into_delivery))
    })
    .await
}

/// Up to `limit` given-up deliveries a redrive of a binding or of selected
/// resources covers, after `after` (by id, oldest first), locked until the
/// transaction ends. A target of one id reads that delivery whatever its
/// state (see [`lock_delivery`] to tell why it would be refused).
pub async fn lock_given_up(
    conn: &mut PgConnection,
    target: &RedriveTarget,
    after: Option<Uuid>,
    limit: i64,
) -> StoreResult<Vec<Delivery>> {
    measured("reactors.lock_given_up", async move {
        let mut query = QueryBuilder::<Postgres>::new(DELIVERY_SELECT);
        match target {
            RedriveTarget::Id(id) => {
                query.push(" WHERE d.failed_at IS NOT NULL AND d.id = ").push_bind(*id);
            }
            RedriveTarget::Binding(binding) => {
                query
                    .push(" WHERE d.failed_at IS NOT NULL AND d.binding = ")
                    .push_bind(binding.clone());
            }
            RedriveTarget::Resources { kind, selector } => {
                // Given-up deliveries are few (the partial index of failed
                // ones); each is checked against its resource's current row.
                query
                    .push(" JOIN resources r ON r.id = d.resource_id WHERE d.failed_at IS NOT NULL AND r.kind = ")
                    .push_bind(kind.clone());
                super::resources::push_selector(&mut query, selector);
            }
        }
        if let Some(after) = after {
            query.push(" AND d.id > ").push_bind(after);
        }
        query
            .push(" ORDER BY d.id LIMIT ")
            .push_bind(limit)
            .push(" FOR UPDATE OF d");
        let rows: Vec<DeliveryRow> = query.build_query_as().fetch_all(conn).await?;
        Ok(rows.into_iter().map(DeliveryRow::into_delivery).collect())
    })
    .await
}

/// Redrives the given-up deliveries among `ids` (migrations/functions/reactors.sql,
/// `redrive_deliveries`): attempts from 0, error cleared, due now, an event
/// on each watched resource naming `actor` and `reason`; returns how many.
pub async fn redrive(conn: &mut PgConnection, ids: &[Uuid], actor: &str, reason: &str) -> StoreResult<i64> {
    measured("reactors.redrive", async move {
        if ids.is_empty() {
            return Ok(0);
        }
        let count: i32 = sqlx::query_scalar("SELECT redrive_deliveries($1, $2, $3)")
            .bind(ids)
            .bind(actor)
            .bind(reason)
            .fetch_one(conn)
            .await?;
        Ok(i64::from(count))
    })
    .await
}
