//! Composition graphs: descendants over `resources.owner_id` and the
//! `resource_deps` edges among them, read as keyset pages.

use super::measured::measured;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{Acquire, PgConnection, PgPool, Postgres, QueryBuilder};
use uuid::Uuid;

use super::StoreResult;
use crate::domain::graph::{DependencyEdge, GraphNode, GraphPage, MAX_GRAPH_DEPTH, ValueFlow};
use crate::domain::resource::{Phase, ResourceRef};

/// The keyset position of a graph page: (creation time, id), oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraphCursor {
    /// Creation time (microsecond precision, as stored).
    pub created_at: DateTime<Utc>,
    /// Resource id.
    pub id: Uuid,
}

/// Columns of a graph node, with its owner's ref.
const NODE_COLUMNS: &str = "r.id, r.kind, r.kind_version::int4 AS kind_version, r.name, r.phase, \
     o.kind AS owner_kind, o.name AS owner_name, r.generation, r.synced_gen, r.created_at";

/// `resources r` with the owner join [`NODE_COLUMNS`] needs.
const NODE_FROM: &str = "resources r LEFT JOIN resources o ON o.id = r.owner_id";

#[derive(Debug, sqlx::FromRow)]
struct NodeRow {
    id: Uuid,
    kind: String,
    kind_version: i32,
    name: String,
    phase: String,
    owner_kind: Option<String>,
    owner_name: Option<String>,
    generation: i64,
    synced_gen: i64,
    created_at: DateTime<Utc>,
}

impl NodeRow {
    fn into_node(self) -> GraphNode {
        let owner = match (self.owner_kind, self.owner_name) {
            (Some(kind), Some(name)) => Some(ResourceRef { kind, name }),
            _ => None,
        };
        GraphNode {
            id: self.id,
            kind: self.kind,
            kind_version: self.kind_version,
            name: self.name,
            // The column is generated from a closed CASE; anything else is a schema bug.
            phase: Phase::from_db(&self.phase).unwrap_or(Phase::Reconciling),
            owner,
            generation: self.generation,
            synced_gen: self.synced_gen,
            created_at: self.created_at,
        }
    }
}

#[derive(Debug, sqlx::FromRow)]
struct EdgeRow {
    dependent_kind: String,
    dependent_name: String,
    dependency_kind: String,
    dependency_name: String,
    value_flows: Json<Value>,
}

impl EdgeRow {
    fn into_edge(self) -> DependencyEdge {
        DependencyEdge {
            dependent: ResourceRef {
                kind: self.dependent_kind,
                name: self.dependent_name,
            },
            dependency: ResourceRef {
                kind: self.dependency_kind,
                name: self.dependency_name,
            },
            value_flows: value_flows(&self.value_flows.0),
        }
    }
}

/// The flows of a `resource_deps.value_flows` array
/// (`[{"dependent": "/ptr", "source": "/ptr"}]`); entries without both
/// pointers as strings are skipped.
fn value_flows(stored: &Value) -> Vec<ValueFlow> {
    let Some(entries) = stored.as_array() else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|entry| {
            Some(ValueFlow {
                dependent_field: entry.get("dependent")?.as_str()?.to_owned(),
                source_field: entry.get("source")?.as_str()?.to_owned(),
            })
        })
        .collect()
}

/// One page of the composition graph of the resource (`kind`, `name`):
/// the resource itself, up to `limit` of its descendants strictly after
/// `after` by (creation time, id) ascending, and the dependency edges whose
/// dependent is the resource or one of those descendants. `None` when the
/// resource does not exist.
///
/// The three reads share one snapshot, so a page is consistent in itself.
/// Descendants deeper than [`MAX_GRAPH_DEPTH`] levels are left out.
pub async fn page(
    pool: &PgPool,
    kind: &str,
    name: &str,
    after: Option<GraphCursor>,
    limit: usize,
) -> StoreResult<Option<GraphPage>> {
    measured("graph.page", async move {
        let mut conn = pool.acquire().await?;
        let mut tx = conn.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        let page = page_in(&mut tx, kind, name, after, limit).await?;
        tx.rollback().await?;
        Ok(page)
    })
    .await
}

/// [`page`] on a given connection (inside the caller's transaction).
async fn page_in(
    conn: &mut PgConnection,
    kind: &str,
    name: &str,
    after: Option<GraphCursor>,
    limit: usize,
) -> StoreResult<Option<GraphPage>> {
    let Some(root) = node(conn, kind, name).await? else {
        return Ok(None);
    };
    let nodes = descendants(conn, root.id, after, limit).await?;
    let mut dependents = Vec::with_capacity(nodes.len() + 1);
    dependents.push(root.id);
    dependents.extend(nodes.iter().map(|n| n.id));
    let edges = edges_of(conn, &dependents).await?;
    Ok(Some(GraphPage { root, nodes, edges }))
}

/// One resource as a graph node, by kind and name.
async fn node(conn: &mut PgConnection, kind: &str, name: &str) -> StoreResult<Option<GraphNode>> {
    let sql = format!("SELECT {NODE_COLUMNS} FROM {NODE_FROM} WHERE r.kind = $1 AND r.name = $2");
    let row: Option<NodeRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(kind)
        .bind(name)
        .fetch_optional(conn)
        .await?;
    Ok(row.map(NodeRow::into_node))
}

/// Up to `limit` descendants of `root_id` strictly after `after`, by
/// (creation time, id) ascending.
///
/// The walk follows `owner_id` downwards one level per iteration (served by
/// `resources_owner_idx`), at most [`MAX_GRAPH_DEPTH`] levels. Every row has
/// one owner, so the only cycle a downward walk can enter runs back through
/// the root; excluding the root from every level ends any such cycle, and
/// the UNION drops repeated rows.
async fn descendants(
    conn: &mut PgConnection,
    root_id: Uuid,
    after: Option<GraphCursor>,
    limit: usize,
) -> StoreResult<Vec<GraphNode>> {
    let mut query: QueryBuilder<Postgres> =
        QueryBuilder::new("WITH RECURSIVE tree (id, depth) AS (SELECT c.id, 1 FROM resources c WHERE c.owner_id = ");
    query
        .push_bind(root_id)
        .push(" AND c.id <> ")
        .push_bind(root_id)
        .push(" UNION SELECT c.id, t.depth + 1 FROM tree t JOIN resources c ON c.owner_id = t.id WHERE c.id <> ")
        .push_bind(root_id)
        .push(" AND t.depth < ")
        .push_bind(MAX_GRAPH_DEPTH)
        .push(format!(
            ") SELECT {NODE_COLUMNS} FROM {NODE_FROM} WHERE r.id IN (SELECT id FROM tree)"
        ));
    if let Some(cursor) = after {
        query
            .push(" AND (r.created_at, r.id) > (")
            .push_bind(cursor.created_at)
            .push(", ")
            .push_bind(cursor.id)
            .push(")");
    }
    query
        .push(" ORDER BY r.created_at, r.id LIMIT ")
        .push_bind(i64::try_from(limit).unwrap_or(i64::MAX));
    let rows: Vec<NodeRow> = query.build_query_as().fetch_all(conn).await?;
    Ok(rows.into_iter().map(NodeRow::into_node).collect())
}

/// The dependency edges whose dependent is one of `dependents`, ordered by
/// the dependent's place in `dependents`, then by the dependency's kind and
/// name. Edges to a resource that no longer exists are left out.
async fn edges_of(conn: &mut PgConnection, dependents: &[Uuid]) -> StoreResult<Vec<DependencyEdge>> {
    if dependents.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<EdgeRow> = sqlx::query_as(
        "SELECT a.kind AS dependent_kind, a.name AS dependent_name,
                b.kind AS dependency_kind, b.name AS dependency_name, d.value_flows
         FROM unnest($1::uuid[]) WITH ORDINALITY AS p (id, ord)
         JOIN resource_deps d ON d.dependent_id = p.id
         JOIN resources a ON a.id = d.dependent_id
         JOIN resources b ON b.id = d.dependency_id
         ORDER BY p.ord, b.kind, b.name",
    )
    .bind(dependents)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(EdgeRow::into_edge).collect())
}

/// The resources that depend on `id` (dependency edges pointing at it), by
/// kind and name, at most `limit`.
pub async fn dependents(pool: &PgPool, id: Uuid, limit: i64) -> StoreResult<Vec<ResourceRef>> {
    measured("graph.dependents", async move {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT a.kind, a.name FROM resource_deps d JOIN resources a ON a.id = d.dependent_id
             WHERE d.dependency_id = $1 ORDER BY a.kind, a.name LIMIT $2",
        )
        .bind(id)
        .bind(limit)
        .fetch_all(pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(kind, name)| ResourceRef { kind, name })
            .collect())
    })
    .await
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn value_flows_read_pointer_pairs_and_skip_malformed_entries() {
        let stored = json!([
            {"dependent": "/account_id", "source": "/id"},
            {"dependent": "/only"},
            {"dependent": 1, "source": "/x"},
            "not an object",
            {"dependent": "", "source": ""}
        ]);
        assert_eq!(
            value_flows(&stored),
            vec![
                ValueFlow {
                    dependent_field: "/account_id".into(),
                    source_field: "/id".into(),
                },
                ValueFlow {
                    dependent_field: String::new(),
                    source_field: String::new(),
                },
            ]
        );
        assert!(value_flows(&json!({})).is_empty());
        assert!(value_flows(&Value::Null).is_empty());
    }
}
