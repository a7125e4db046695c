//! Operator actions on resources: the page a bulk action handles, the count
//! it would handle, and the action itself (`act_on_resource`,
//! migrations/functions/admin.sql, which also decides what each applies to).

use sqlx::{PgConnection, Postgres, QueryBuilder};
use uuid::Uuid;

use super::StoreResult;
use super::measured::measured;
use super::resources::{push_phases, push_selector};
use crate::domain::admin::AdminAction;
use crate::domain::labels::LabelSelector;
use crate::domain::resource::Phase;

/// The resources a bulk action is aimed at.
#[derive(Debug, Clone)]
pub struct ActionTarget {
    /// The action (only resources it applies to are matched).
    pub action: AdminAction,
    /// Kind.
    pub kind: String,
    /// Label requirements.
    pub selector: LabelSelector,
    /// Only these phases (empty = all).
    pub phases: Vec<Phase>,
}

impl ActionTarget {
    fn query(&self, select: &str) -> QueryBuilder<Postgres> {
        let mut query = QueryBuilder::new(select);
        query
            .push(" FROM resources r WHERE r.kind = ")
            .push_bind(self.kind.clone());
        push_selector(&mut query, &self.selector);
        push_phases(&mut query, &self.phases);
        query
            .push(" AND action_applies(r, ")
            .push_bind(self.action.as_db())
            .push(")");
        query
    }
}

/// How many resources `target` matches now.
pub async fn count(conn: &mut PgConnection, target: &ActionTarget) -> StoreResult<i64> {
    measured("admin.count", async move {
        let count: i64 = target
            .query("SELECT count(*)")
            .build_query_scalar()
            .fetch_one(conn)
            .await?;
        Ok(count)
    })
    .await
}

/// Up to `limit` resources `target` matches with ids after `after`, in id
/// order, locked for the action (every queue writer takes rows in id order,
/// so this waits rather than deadlocks).
pub async fn page(
    conn: &mut PgConnection,
    target: &ActionTarget,
    after: Option<Uuid>,
    limit: usize,
    lock: bool,
) -> StoreResult<Vec<(Uuid, String)>> {
    measured("admin.page", async move {
        let mut query = target.query("SELECT r.id, r.name");
        if let Some(after) = after {
            query.push(" AND r.id > ").push_bind(after);
        }
        query
            .push(" ORDER BY r.id LIMIT ")
            .push_bind(i64::try_from(limit).unwrap_or(i64::MAX));
        if lock {
            query.push(" FOR NO KEY UPDATE OF r");
        }
        let rows: Vec<(Uuid, String)> = query.build_query_as().fetch_all(conn).await?;
        Ok(rows)
    })
    .await
}

/// Runs `action` on resource `id` for `actor`, recording `reason` on an
/// event; false (nothing changed) when it is gone or the action does not
/// apply to it.
pub async fn act(
    conn: &mut PgConnection,
    id: Uuid,
    action: AdminAction,
    actor: &str,
    reason: &str,
) -> StoreResult<bool> {
    measured("admin.act", async move {
        let done: bool = sqlx::query_scalar("SELECT act_on_resource($1, $2, $3, $4)")
            .bind(id)
            .bind(action.as_db())
            .bind(actor)
            .bind(reason)
            .fetch_one(conn)
            .await?;
        Ok(done)
    })
    .await
}

/// Whether `action` applies to resource `id` as it is now (false when it is
/// gone).
pub async fn applies(conn: &mut PgConnection, id: Uuid, action: AdminAction) -> StoreResult<bool> {
    measured("admin.applies", async move {
        let applies: Option<bool> = sqlx::query_scalar("SELECT action_applies(r, $2) FROM resources r WHERE r.id = $1")
            .bind(id)
            .bind(action.as_db())
            .fetch_optional(conn)
            .await?;
        Ok(applies.unwrap_or(false))
    })
    .await
}
