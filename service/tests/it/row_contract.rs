//! The row contract between Rust and SQL: each shape the two exchange is
//! declared once on each side, as a composite type
//! (migrations/0010_row_contracts.sql) and as a Rust struct. These tests read
//! the types from the catalog of a migrated database and fail when a side
//! gains, loses or renames a field, or changes one's type incompatibly.

use std::collections::{BTreeMap, BTreeSet};

use converge_service::domain::composition::{ChildSpec, ConfigSpec, Edge, ValueFlow};
use converge_service::domain::event::ReportedEvent;
use converge_service::domain::resource::ConditionInput;
use converge_service::domain::resource::ResourceRef;
use converge_service::store::operations::ClaimedOperation;
use converge_service::store::reactors::ClaimedDelivery;
use converge_service::store::work::{self, ClaimedTask, TaskResult};
use converge_service::testing::TestDatabase;
use serde_json::{Value, json};
use sqlx::{PgPool, Row};
use uuid::Uuid;

/// The attributes of the composite type `name`: (name, type), in order.
async fn attributes(pool: &PgPool, name: &str) -> anyhow::Result<Vec<(String, String)>> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod)
         FROM pg_type t JOIN pg_attribute a ON a.attrelid = t.typrelid
         WHERE t.typname = $1 AND t.typnamespace = 'public'::regnamespace AND t.typtype = 'c'
           AND a.attnum > 0 AND NOT a.attisdropped
         ORDER BY a.attnum",
    )
    .bind(name)
    .fetch_all(pool)
    .await?;
    anyhow::ensure!(!rows.is_empty(), "no composite type {name}");
    Ok(rows)
}

/// The public functions returning `SETOF name`.
async fn functions_returning(pool: &PgPool, name: &str) -> anyhow::Result<BTreeSet<String>> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT p.proname::text FROM pg_proc p JOIN pg_type t ON t.oid = p.prorettype
         WHERE p.pronamespace = 'public'::regnamespace AND p.proretset AND t.typname = $1",
    )
    .bind(name)
    .fetch_all(pool)
    .await?;
    Ok(names.into_iter().collect())
}

/// The definition of the public function `name`.
async fn definition(pool: &PgPool, name: &str) -> anyhow::Result<String> {
    Ok(sqlx::query_scalar(
        "SELECT pg_get_functiondef(p.oid) FROM pg_proc p
         WHERE p.pronamespace = 'public'::regnamespace AND p.proname = $1",
    )
    .bind(name)
    .fetch_one(pool)
    .await?)
}

/// The keys a function definition reads by name (`x->>'key'`, `x->'key'`).
fn keys_read(definition: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for start in ["->>'", "->'"] {
        for (at, _) in definition.match_indices(start) {
            let rest = &definition[at + start.len()..];
            if let Some(end) = rest.find('\'') {
                keys.insert(rest[..end].to_owned());
            }
        }
    }
    keys
}

/// Checks that `value` read as the composite type `name` (as a function
/// reads its JSON argument) gives every attribute its key's value: the
/// keys and the attributes are the same set, and each value fits its
/// attribute's type.
async fn check_shape(pool: &PgPool, name: &str, rust: &str, value: &Value) -> anyhow::Result<()> {
    let attributes: BTreeSet<String> = attributes(pool, name).await?.into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        keys(value),
        attributes,
        "the keys of a serialized {rust} and the attributes of {name} (0010) differ"
    );
    let sql = format!("SELECT to_jsonb(x) FROM jsonb_populate_recordset(NULL::{name}, $1) AS x");
    let read: Value = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(json!([value]))
        .fetch_one(pool)
        .await?;
    assert_eq!(&read, value, "a {rust} read as {name}");
    Ok(())
}

/// The keys of a JSON object.
fn keys(value: &Value) -> BTreeSet<String> {
    value
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_task_row_is_the_claimed_task_type() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let pool = db.pool();

    let attributes = attributes(pool, "claimed_task").await?;
    let names: Vec<&str> = attributes.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ClaimedTask::COLUMNS,
        "the attributes of claimed_task (0010) and the fields of ClaimedTask differ"
    );

    // A row of the type as the database describes it: every field must
    // accept its column's type (a null value is not checked when decoded, so
    // a row of nulls checks them all).
    let row = sqlx::query("SELECT (NULL::claimed_task).*").fetch_one(pool).await?;
    assert_eq!(row.len(), ClaimedTask::COLUMNS.len());
    let problems = ClaimedTask::mismatched_columns(&row);
    assert!(problems.is_empty(), "claimed_task against ClaimedTask: {problems:?}");

    // And a real one, claimed and then looked up by its lease, through the
    // store.
    sqlx::query(
        "INSERT INTO kind_manifest (kind, kind_version, reactions, manifest_version, task_deadline_secs)
         VALUES ('Thing', 1, '[{\"name\":\"work\",\"trigger\":\"specChange\",\"emits\":[\"status\"]}]', 1, 60)",
    )
    .execute(pool)
    .await?;
    let id: Uuid = sqlx::query_scalar(
        "INSERT INTO resources (kind, kind_version, name, labels, spec, status, finalizers)
         VALUES ('Thing', 1, 'one', '{\"tier\":\"gold\"}', '{\"n\":1}', '{\"up\":true}', '{example.com/keep}')
         RETURNING id",
    )
    .fetch_one(pool)
    .await?;
    let mut conn = pool.acquire().await?;
    assert_eq!(work::schedule(&mut conn, &[id]).await?, 1);
    drop(conn);
    let claimed = work::claim(pool, "broker", "Thing", 1, 10, None).await?;
    assert_eq!(claimed.len(), 1);
    let task = &claimed[0];
    assert_eq!((task.resource_id, task.name.as_str(), task.attempts), (id, "one", 1));
    assert_eq!(task.labels.0.get("tier").map(String::as_str), Some("gold"));
    assert_eq!(task.status.as_ref().map(|s| s.0.clone()), Some(json!({"up": true})));
    assert_eq!(task.finalizers, ["example.com/keep"]);
    assert!(task.deadline_secs.is_some_and(|secs| secs > 0.0 && secs <= 60.0));
    let leased = work::leased(pool, &[task.lease_token]).await?;
    assert_eq!(leased.len(), 1);
    assert_eq!(
        (
            leased[0].work_id,
            leased[0].lease_token,
            leased[0].claim_epoch,
            leased[0].resource_id
        ),
        (task.work_id, task.lease_token, task.claim_epoch, task.resource_id)
    );

    // The store reads task rows from these functions only, and each returns
    // the type (so none can declare the row again).
    let returning = functions_returning(pool, "claimed_task").await?;
    for function in ["claim_range", "claim_work", "leased_tasks"] {
        assert!(
            returning.contains(function),
            "{function} does not return SETOF claimed_task"
        );
    }
    Ok(())
}

#[tokio::test]
async fn the_delivery_row_is_the_claimed_delivery_type() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let pool = db.pool();
    let attributes = attributes(pool, "claimed_delivery").await?;
    let names: Vec<&str> = attributes.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ClaimedDelivery::COLUMNS,
        "the attributes of claimed_delivery (0012) and the fields of ClaimedDelivery differ"
    );
    let row = sqlx::query("SELECT (NULL::claimed_delivery).*").fetch_one(pool).await?;
    let problems = ClaimedDelivery::mismatched_columns(&row);
    assert!(
        problems.is_empty(),
        "claimed_delivery against ClaimedDelivery: {problems:?}"
    );
    let returning = functions_returning(pool, "claimed_delivery").await?;
    for function in ["claim_deliveries", "adopt_deliveries"] {
        assert!(
            returning.contains(function),
            "{function} does not return SETOF claimed_delivery"
        );
    }
    Ok(())
}

#[tokio::test]
async fn the_operation_row_is_the_claimed_operation_type() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let pool = db.pool();
    let attributes = attributes(pool, "claimed_operation").await?;
    let names: Vec<&str> = attributes.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ClaimedOperation::COLUMNS,
        "the attributes of claimed_operation (0014) and the fields of ClaimedOperation differ"
    );
    let row = sqlx::query("SELECT (NULL::claimed_operation).*")
        .fetch_one(pool)
        .await?;
    let problems = ClaimedOperation::mismatched_columns(&row);
    assert!(
        problems.is_empty(),
        "claimed_operation against ClaimedOperation: {problems:?}"
    );
    let returning = functions_returning(pool, "claimed_operation").await?;
    for function in ["claim_operations", "adopt_operations"] {
        assert!(
            returning.contains(function),
            "{function} does not return SETOF claimed_operation"
        );
    }
    Ok(())
}

/// A result with every field set, so that every key is serialized. Written
/// out in full (no `..Default::default()`): a new field fails to compile here
/// until it is given a value.
fn full_result() -> TaskResult {
    TaskResult {
        work_id: Uuid::new_v4(),
        shard_id: 7,
        resource_id: Uuid::new_v4(),
        lease: Uuid::new_v4(),
        epoch: 3,
        generation: 4,
        manifest_version: 5,
        status: Some(json!({"ready": true})),
        conditions: vec![ConditionInput {
            type_: "Ready".into(),
            status: "True",
            reason: "Done".into(),
            message: String::new(),
            liveness_ms: Some(30_000),
        }],
        healthy: Some(true),
        advance: true,
        requeue_after_ms: Some(1500),
        error: Some("boom".into()),
        reason: Some("Exploded".into()),
        terminal: true,
        finalizer: Some("example.com/cleanup".into()),
        events: vec![ReportedEvent {
            category: "worker".into(),
            type_: "Normal",
            reason: "BucketCreated".into(),
            message: "created".into(),
            detail: Some(json!({"bucket": "b"})),
            actor: "worker:anonymous".into(),
        }],
    }
}

#[tokio::test]
async fn a_task_result_is_the_task_result_type() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let pool = db.pool();

    let sent = serde_json::to_value(full_result())?;
    check_shape(pool, "task_result", "TaskResult", &sent).await?;

    // The functions reading results read them through the type, never by a
    // key of their own.
    for function in ["fence_results", "complete_work"] {
        let body = definition(pool, function).await?;
        assert!(
            body.contains("jsonb_populate_recordset(NULL::task_result, p_results)"),
            "{function} does not read its results as task_result"
        );
        assert_eq!(keys_read(&body), BTreeSet::new(), "{function} reads JSON keys by name");
    }
    Ok(())
}

#[tokio::test]
async fn a_composition_is_the_composition_types() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let pool = db.pool();

    // Written out in full, as full_result.
    let child = ChildSpec {
        kind: "Disk".into(),
        kind_version: 2,
        name: "data".into(),
        labels: BTreeMap::from([("tier".to_owned(), "gold".to_owned())]),
        spec: json!({"size": 10}),
        provider_config: Some("disk-fast".into()),
    };
    check_shape(pool, "composition_child", "ChildSpec", &serde_json::to_value(&child)?).await?;

    let config = ConfigSpec {
        name: "disk-fast".into(),
        kind: "Disk".into(),
        kind_version: 2,
        is_default: false,
        spec: json!({"iops": 3000}),
        data: vec![1, 2, 3],
    };
    check_shape(
        pool,
        "composition_config",
        "ConfigSpec",
        &serde_json::to_value(&config)?,
    )
    .await?;

    let flow = ValueFlow {
        dependent: "/disk".into(),
        source: "/id".into(),
    };
    let edge = Edge {
        dependent: ResourceRef {
            kind: "Server".into(),
            name: "web".into(),
        },
        dependency: ResourceRef {
            kind: "Disk".into(),
            name: "data".into(),
        },
        flows: vec![flow.clone()],
    };
    check_shape(
        pool,
        "composition_edge",
        "StoredEdge",
        &serde_json::to_value(edge.stored())?,
    )
    .await?;

    let body = definition(pool, "apply_composition").await?;
    for (name, argument) in [
        ("composition_child", "p_children"),
        ("composition_edge", "p_edges"),
        ("composition_config", "p_configs"),
    ] {
        assert!(
            body.contains(&format!("jsonb_populate_recordset(NULL::{name}, {argument})")),
            "apply_composition does not read {argument} as {name}"
        );
    }
    // The flows are stored as they come and read by key, where they are
    // applied: exactly the keys of a serialized ValueFlow.
    let flow_keys = keys(&serde_json::to_value(&flow)?);
    for function in ["apply_composition", "apply_value_flows"] {
        let body = definition(pool, function).await?;
        assert_eq!(
            keys_read(&body),
            flow_keys,
            "the keys {function} reads and those of a serialized ValueFlow differ"
        );
    }
    Ok(())
}
