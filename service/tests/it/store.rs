//! Store-level properties against real PostgreSQL: change-log commit order,
//! condition timestamps, event-run aggregation, retention and the phase.

use std::collections::BTreeMap;
use std::time::Duration;

use converge_service::config::RetentionArgs;
use converge_service::domain::event::{EventType, NewEvent};
use converge_service::domain::position::Position;
use converge_service::domain::resource::{Condition, ConditionInput, ConditionStatus, Phase, Resource};
use converge_service::domain::shard::ShardRange;
use converge_service::engine::retention;
use converge_service::store::events::{self, EventFilter};
use converge_service::store::resources::{self, DesiredResource};
use converge_service::store::work::{self, ClaimedTask, TaskResult};
use converge_service::store::{changes, statistics};
use converge_service::testing::TestDatabase;
use serde_json::json;
use sqlx::{Connection, PgPool};
use uuid::Uuid;

async fn seed_kind(pool: &PgPool, kind: &str) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO kind_manifest (kind, kind_version, reactions, manifest_version)
         VALUES ($1, 1, '[{\"name\":\"work\",\"trigger\":\"specChange\",\"emits\":[\"status\"]}]', 1)",
    )
    .bind(kind)
    .execute(pool)
    .await?;
    Ok(())
}

async fn create(pool: &PgPool, kind: &str, name: &str) -> anyhow::Result<Uuid> {
    let labels = BTreeMap::new();
    let spec = json!({"n": 1});
    let desired = DesiredResource {
        kind,
        kind_version: 1,
        name,
        labels: &labels,
        spec: &spec,
        provider_config: None,
    };
    let mut conn = pool.acquire().await?;
    let first = NewEvent::lifecycle("Created", "created");
    let created = resources::insert_many(&mut conn, std::slice::from_ref(&desired), &first, "test").await?;
    created
        .get(&(kind.to_owned(), name.to_owned()))
        .map(|resource| resource.id)
        .ok_or_else(|| anyhow::anyhow!("not created"))
}

async fn position_of(pool: &PgPool, id: Uuid) -> anyhow::Result<Position> {
    let (txid, seq): (i64, i64) = sqlx::query_as("SELECT rv_txid, rv_seq FROM resources WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await?;
    Ok(Position { txid, seq })
}

#[tokio::test]
async fn the_change_log_never_lets_a_reader_pass_an_unfinished_transaction() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let pool = db.pool();
    seed_kind(pool, "thing").await?;
    let a = create(pool, "thing", "a").await?;
    let b = create(pool, "thing", "b").await?;
    // Read after b's creation: only the two updates below can follow.
    let start = position_of(pool, b).await?;

    // T1 takes a transaction id first and writes, but commits last.
    let mut t1 = sqlx::PgConnection::connect_with(&db.connect_options()?).await?;
    let mut t2 = sqlx::PgConnection::connect_with(&db.connect_options()?).await?;
    sqlx::query("BEGIN").execute(&mut t1).await?;
    sqlx::query("UPDATE resources SET spec = '{\"n\": 2}', generation = generation + 1 WHERE id = $1")
        .bind(a)
        .execute(&mut t1)
        .await?;
    sqlx::query("BEGIN").execute(&mut t2).await?;
    sqlx::query("UPDATE resources SET spec = '{\"n\": 2}', generation = generation + 1 WHERE id = $1")
        .bind(b)
        .execute(&mut t2)
        .await?;
    sqlx::query("COMMIT").execute(&mut t2).await?;

    // T2 is committed, but T1 (lower id) is not: however long a reader polls,
    // it must not move past T1 (transaction ids are cluster-wide, so other
    // tests' transactions may hold the frontier back further; never less).
    for _ in 0..20 {
        let visible = changes::read_after(pool, start, 1000).await?.rows;
        assert!(visible.is_empty(), "read above an unfinished transaction: {visible:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    sqlx::query("COMMIT").execute(&mut t1).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let visible = loop {
        let visible = changes::read_after(pool, start, 1000).await?.rows;
        if visible.len() >= 2 || tokio::time::Instant::now() > deadline {
            break visible;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let ids: Vec<Uuid> = visible.iter().map(|c| c.resource_id).collect();
    assert_eq!(ids, vec![a, b], "both changes, in (txid, seq) order");
    assert!(visible.windows(2).all(|w| w[0].position() < w[1].position()));
    assert_eq!(visible[0].position(), position_of(pool, a).await?);
    assert_eq!(visible[1].position(), position_of(pool, b).await?);
    Ok(())
}

/// One resource through the set-based update.
async fn update_one(
    conn: &mut sqlx::PgConnection,
    id: Uuid,
    desired: &DesiredResource<'_>,
) -> anyhow::Result<Option<Resource>> {
    Ok(resources::update_many(conn, &[(id, desired.clone())])
        .await?
        .remove(&id))
}

#[tokio::test]
async fn a_batch_update_writes_only_the_rows_that_changed() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let pool = db.pool();
    seed_kind(pool, "thing").await?;
    let same = create(pool, "thing", "same").await?;
    let respecced = create(pool, "thing", "respecced").await?;
    let relabelled = create(pool, "thing", "relabelled").await?;
    let before = position_of(pool, same).await?;

    let no_labels = BTreeMap::new();
    let labels = BTreeMap::from([("env".to_owned(), "prod".to_owned())]);
    let (old_spec, new_spec) = (json!({"n": 1}), json!({"n": 2}));
    let unchanged = DesiredResource {
        kind: "thing",
        kind_version: 1,
        name: "same",
        labels: &no_labels,
        spec: &old_spec,
        provider_config: None,
    };
    let batch = [
        (same, unchanged.clone()),
        (
            respecced,
            DesiredResource {
                name: "respecced",
                spec: &new_spec,
                ..unchanged.clone()
            },
        ),
        (
            relabelled,
            DesiredResource {
                name: "relabelled",
                labels: &labels,
                ..unchanged
            },
        ),
    ];
    let mut conn = pool.acquire().await?;
    let mut written = resources::update_many(&mut conn, &batch).await?;
    assert_eq!(written.len(), 2, "the identical row is not written");
    assert!(!written.contains_key(&same));
    assert_eq!(position_of(pool, same).await?, before);
    let respecced = written
        .remove(&respecced)
        .ok_or_else(|| anyhow::anyhow!("spec changed"))?;
    assert_eq!((respecced.generation, respecced.phase), (2, Phase::Reconciling));
    assert_eq!(respecced.spec, new_spec);
    let relabelled = written
        .remove(&relabelled)
        .ok_or_else(|| anyhow::anyhow!("labels changed"))?;
    assert_eq!(relabelled.generation, 1, "labels do not bump the generation");
    assert_eq!(relabelled.labels, labels);
    Ok(())
}

#[tokio::test]
async fn identical_rewrites_do_not_move_the_resource_version() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let pool = db.pool();
    seed_kind(pool, "thing").await?;
    let id = create(pool, "thing", "a").await?;
    let before = position_of(pool, id).await?;

    let labels = BTreeMap::from([("env".to_owned(), "prod".to_owned())]);
    let same_spec = json!({"n": 1});
    let desired = DesiredResource {
        kind: "thing",
        kind_version: 1,
        name: "a",
        labels: &BTreeMap::new(),
        spec: &same_spec,
        provider_config: None,
    };
    let mut conn = pool.acquire().await?;
    assert!(update_one(&mut conn, id, &desired).await?.is_none());
    assert_eq!(position_of(pool, id).await?, before);

    let relabelled = DesiredResource {
        labels: &labels,
        ..desired.clone()
    };
    let updated = update_one(&mut conn, id, &relabelled)
        .await?
        .ok_or_else(|| anyhow::anyhow!("labels changed"))?;
    assert_eq!(updated.generation, 1, "labels do not bump the generation");
    assert!(updated.position > before);

    let new_spec = json!({"n": 2});
    let respecced = DesiredResource {
        labels: &labels,
        spec: &new_spec,
        ..desired
    };
    let updated = update_one(&mut conn, id, &respecced)
        .await?
        .ok_or_else(|| anyhow::anyhow!("spec changed"))?;
    assert_eq!(updated.generation, 2);
    assert_eq!(updated.phase, Phase::Reconciling);
    Ok(())
}

#[tokio::test]
async fn condition_times_follow_status_and_content_changes() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let pool = db.pool();
    seed_kind(pool, "thing").await?;
    let id = create(pool, "thing", "a").await?;
    let mut conn = pool.acquire().await?;
    let ready = |status: &'static str, message: &str| ConditionInput {
        type_: "Ready".into(),
        status,
        reason: "Checked".into(),
        message: message.into(),
        liveness_ms: None,
    };

    assert_eq!(
        resources::set_conditions(&mut conn, id, 1, &[ready("False", "warming")]).await?,
        1
    );
    let first = read_condition(pool, id).await?;
    let position = position_of(pool, id).await?;

    tokio::time::sleep(Duration::from_millis(20)).await;
    // Identical rewrite: nothing moves, not even the resource version.
    assert_eq!(
        resources::set_conditions(&mut conn, id, 1, &[ready("False", "warming")]).await?,
        0
    );
    assert_eq!(read_condition(pool, id).await?, first);
    assert_eq!(position_of(pool, id).await?, position);

    tokio::time::sleep(Duration::from_millis(20)).await;
    // Message change: update time moves, transition time does not.
    assert_eq!(
        resources::set_conditions(&mut conn, id, 1, &[ready("False", "still warming")]).await?,
        1
    );
    let second = read_condition(pool, id).await?;
    assert_eq!(second.0, first.0, "last_transition_at stays");
    assert!(second.1 > first.1, "updated_at moves");
    assert!(position_of(pool, id).await? > position);

    tokio::time::sleep(Duration::from_millis(20)).await;
    // Status flip: both move.
    resources::set_conditions(&mut conn, id, 1, &[ready("True", "up")]).await?;
    let third = read_condition(pool, id).await?;
    assert!(third.0 > second.0 && third.1 > second.1);

    // A resource read carries its conditions (read in the same statement),
    // ordered by type, with the stored times to the microsecond.
    let synced = ConditionInput {
        type_: "Synced".into(),
        status: "True",
        reason: "Applied".into(),
        message: "in sync".into(),
        liveness_ms: None,
    };
    let available = ConditionInput {
        type_: "Available".into(),
        ..synced.clone()
    };
    resources::set_conditions(&mut conn, id, 1, &[synced, ready("True", "up"), available]).await?;
    let read = resources::get_by_id(&mut conn, id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("gone"))?;
    let types: Vec<&str> = read.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, ["Available", "Ready", "Synced"]);
    let ready_read = &read.conditions[1];
    assert_eq!(ready_read.status, ConditionStatus::True);
    assert_eq!(ready_read.message, "up");
    assert_eq!(ready_read.observed_generation, 1);
    assert_eq!((ready_read.last_transition_at, ready_read.updated_at), third);
    let listed = resources::list(pool, &Default::default(), None, 10).await?;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].conditions, read.conditions);
    let fresh = create(pool, "thing", "b").await?;
    let fresh = resources::get_by_id(&mut conn, fresh)
        .await?
        .ok_or_else(|| anyhow::anyhow!("gone"))?;
    assert!(fresh.conditions.is_empty());
    Ok(())
}

#[tokio::test]
async fn a_liveness_condition_lapses_to_unknown_and_a_renewal_brings_it_back() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let pool = db.pool();
    seed_kind(pool, "thing").await?;
    let id = create(pool, "thing", "a").await?;
    let mut conn = pool.acquire().await?;
    let reachable = |liveness_ms: Option<i64>| ConditionInput {
        type_: "Reachable".into(),
        status: "True",
        reason: "Probed".into(),
        message: "answered".into(),
        liveness_ms,
    };
    assert_eq!(
        resources::set_conditions(&mut conn, id, 1, &[reachable(Some(1_000))]).await?,
        1
    );
    let live = reachable_read(&mut conn, id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no condition"))?;
    assert_eq!((live.status, live.reason.as_str()), (ConditionStatus::True, "Probed"));
    let first_expiry = live.expires_at.ok_or_else(|| anyhow::anyhow!("no expiry"))?;
    assert_eq!(reachable_expiry(&mut conn, id).await?, Some(first_expiry));

    // Renewed at once: more than half the window is left, so nothing is
    // written and nothing visible changed.
    assert_eq!(
        resources::set_conditions(&mut conn, id, 1, &[reachable(Some(1_000))]).await?,
        0
    );
    assert_eq!(reachable_expiry(&mut conn, id).await?, Some(first_expiry));

    // Past half the window the same report extends it, invisibly.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let position = position_of(pool, id).await?;
    assert_eq!(
        resources::set_conditions(&mut conn, id, 1, &[reachable(Some(1_000))]).await?,
        0
    );
    let renewed = reachable_expiry(&mut conn, id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no expiry"))?;
    assert!(renewed > first_expiry, "the window moved");
    assert_eq!(position_of(pool, id).await?, position, "a renewal is not a change");

    // Unrenewed past its window: reads say Unknown, and why.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let lapsed = reachable_read(&mut conn, id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no condition"))?;
    assert_eq!(lapsed.status, ConditionStatus::Unknown);
    assert_eq!(lapsed.reason, "ReportExpired");
    assert!(lapsed.message.contains("True (Probed)"), "{}", lapsed.message);
    assert_eq!(lapsed.last_transition_at, renewed);

    // A new report is visible again (a transition back from Unknown).
    assert_eq!(
        resources::set_conditions(&mut conn, id, 1, &[reachable(Some(1_000))]).await?,
        1
    );
    let back = reachable_read(&mut conn, id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no condition"))?;
    assert_eq!((back.status, back.reason.as_str()), (ConditionStatus::True, "Probed"));
    assert!(back.last_transition_at > renewed);

    // Reported without a window it becomes an ordinary condition.
    assert_eq!(
        resources::set_conditions(&mut conn, id, 1, &[reachable(None)]).await?,
        1
    );
    assert_eq!(reachable_expiry(&mut conn, id).await?, None);
    assert_eq!(reachable_read(&mut conn, id).await?.and_then(|c| c.expires_at), None);
    Ok(())
}

/// The `Reachable` condition of `id` as a resource read shows it.
async fn reachable_read(conn: &mut sqlx::PgConnection, id: Uuid) -> anyhow::Result<Option<Condition>> {
    let resource = resources::get_by_id(conn, id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("gone"))?;
    Ok(resource.conditions.into_iter().find(|c| c.type_ == "Reachable"))
}

/// The stored expiry of the `Reachable` condition of `id`.
async fn reachable_expiry(
    conn: &mut sqlx::PgConnection,
    id: Uuid,
) -> anyhow::Result<Option<chrono::DateTime<chrono::Utc>>> {
    let at =
        sqlx::query_scalar("SELECT expires_at FROM resource_conditions WHERE resource_id = $1 AND type = 'Reachable'")
            .bind(id)
            .fetch_one(conn)
            .await?;
    Ok(at)
}

async fn read_condition(
    pool: &PgPool,
    id: Uuid,
) -> anyhow::Result<(chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>)> {
    Ok(sqlx::query_as(
        "SELECT last_transition_at, updated_at FROM resource_conditions WHERE resource_id = $1 AND type = 'Ready'",
    )
    .bind(id)
    .fetch_one(pool)
    .await?)
}

#[tokio::test]
async fn consecutive_events_extend_one_run_and_timelines_are_bounded() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let pool = db.pool();
    seed_kind(pool, "thing").await?;
    let id = create(pool, "thing", "a").await?;
    let mut conn = pool.acquire().await?;
    let warn = |reason: &'static str| NewEvent {
        category: "reconcile",
        type_: EventType::Warning,
        reason,
        message: format!("{reason} happened"),
        detail: Some(json!({"reason": reason})),
    };
    for _ in 0..3 {
        events::record(&mut conn, id, 1, &warn("Retrying"), "test", 0).await?;
    }
    events::record(&mut conn, id, 1, &warn("Failed"), "test", 0).await?;
    events::record(&mut conn, id, 1, &warn("Retrying"), "test", 0).await?;
    // Another category never merges with this one.
    events::record(&mut conn, id, 1, &NewEvent::lifecycle("Created", "hello"), "test", 0).await?;

    let runs = events::list(pool, id, &EventFilter::default(), None, 100).await?;
    let reconcile: Vec<(String, i64)> = runs
        .iter()
        .filter(|r| r.category == "reconcile")
        .map(|r| (r.reason.clone(), r.count))
        .collect();
    // Newest first: the flap yields alternating runs, not two counters.
    assert_eq!(
        reconcile,
        vec![("Retrying".into(), 1), ("Failed".into(), 1), ("Retrying".into(), 3)]
    );

    // Appending with a per-timeline limit trims the oldest runs of that timeline only.
    events::record(&mut conn, id, 1, &warn("Failed"), "test", 2).await?;
    let runs = events::list(pool, id, &EventFilter::default(), None, 100).await?;
    assert_eq!(runs.iter().filter(|r| r.category == "reconcile").count(), 2);
    assert_eq!(runs.iter().filter(|r| r.category == "lifecycle").count(), 1);
    Ok(())
}

#[tokio::test]
async fn the_sweeper_enforces_age_and_timeline_limits() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let pool = db.pool();
    seed_kind(pool, "thing").await?;
    let id = create(pool, "thing", "a").await?;
    let mut conn = pool.acquire().await?;
    for i in 0..5 {
        let reason = if i % 2 == 0 { "Even" } else { "Odd" };
        events::record(&mut conn, id, 1, &NewEvent::lifecycle(reason, "x"), "test", 0).await?;
    }
    sqlx::query("UPDATE resource_events SET last_at = now() - interval '10 days' WHERE reason = 'Odd'")
        .execute(pool)
        .await?;
    sqlx::query("UPDATE resource_changes SET recorded_at = now() - interval '2 days'")
        .execute(pool)
        .await?;
    let retention_args = RetentionArgs {
        event_runs_per_timeline: 2,
        event_max_age_secs: 7 * 24 * 3600,
        change_log_max_age_secs: 24 * 3600,
        request_id_max_age_secs: 24 * 3600,
        operation_max_age_secs: 7 * 24 * 3600,
    };
    // Without the once-per-process timeline backstop only age counts.
    let report = retention::sweep(pool, &retention_args, false).await?;
    assert_eq!(report.old_events, 2, "the two Odd runs are too old");
    assert_eq!(report.excess_events, 0, "the timeline backstop was not asked for");
    assert!(report.changes >= 1);
    let report = retention::sweep(pool, &retention_args, true).await?;
    assert_eq!(report.excess_events, 2, "the Created run and three Even runs, two kept");
    let left = events::list(pool, id, &EventFilter::default(), None, 100).await?;
    assert_eq!(left.len(), 2);
    assert_eq!(
        retention::sweep(pool, &retention_args, true).await?,
        Default::default(),
        "idempotent"
    );
    Ok(())
}

#[tokio::test]
async fn change_log_retention_trims_old_entries_from_the_oldest_position() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let pool = db.pool();
    seed_kind(pool, "thing").await?;
    let mut ids = Vec::new();
    for name in ["a", "b", "c", "d"] {
        ids.push(create(pool, "thing", name).await?);
    }
    let entries = |pool: PgPool| async move {
        let rows: Vec<(Uuid, i64, i64)> =
            sqlx::query_as("SELECT resource_id, txid, seq FROM resource_changes ORDER BY txid, seq")
                .fetch_all(&pool)
                .await?;
        let entries: Vec<(Uuid, Position)> = rows
            .into_iter()
            .map(|(id, txid, seq)| (id, Position { txid, seq }))
            .collect();
        anyhow::Ok(entries)
    };
    let before = entries(pool.clone()).await?;
    assert_eq!(before.len(), 4);
    // a, b and d are old; c was recorded late (young) under a lower position than d.
    sqlx::query("UPDATE resource_changes SET recorded_at = now() - interval '2 days' WHERE resource_id <> $1")
        .bind(ids[2])
        .execute(pool)
        .await?;

    // Each call trims within the window of its oldest `batch` positions,
    // and the horizon follows the newest entry trimmed.
    for (batch, trimmed, horizon, why) in [
        (1, 1, before[0].1, "one entry per call: the oldest position goes first"),
        (
            2,
            1,
            before[1].1,
            "the next window holds b and the young c: only b goes",
        ),
        (10, 1, before[3].1, "a wider window reaches past c to d"),
    ] {
        assert_eq!(changes::trim_by_age(pool, 24 * 3600, batch).await?, trimmed, "{why}");
        assert_eq!(changes::horizon(pool).await?, horizon, "{why}");
    }
    // c stays until it is old itself.
    let left: Vec<Uuid> = entries(pool.clone()).await?.into_iter().map(|(id, _)| id).collect();
    assert_eq!(left, [ids[2]]);
    assert_eq!(changes::trim_by_age(pool, 24 * 3600, 10).await?, 0, "idempotent");
    Ok(())
}

#[tokio::test]
async fn the_phase_follows_the_precedence_of_the_lifecycle_scalars() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let pool = db.pool();
    seed_kind(pool, "thing").await?;
    let id = create(pool, "thing", "a").await?;
    let cases = [
        ("synced_gen = 0, health_ok = true", "Reconciling"),
        ("synced_gen = 1", "Ready"),
        ("health_ok = false", "Degraded"),
        ("frozen_until = now() + interval '1 hour'", "Orphaned"),
        ("failure_gen = 1", "Failed"),
        ("frozen_until = 'infinity'", "Quarantined"),
        ("deletion_requested_at = now()", "Deleting"),
    ];
    for (assignment, expected) in cases {
        let sql = format!("UPDATE resources SET {assignment} WHERE id = $1 RETURNING phase");
        let phase: String = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_one(pool)
            .await?;
        assert_eq!(phase, expected, "after {assignment}");
    }
    Ok(())
}

#[tokio::test]
async fn tables_that_outgrow_their_statistics_are_analysed_once() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let pool = db.pool();
    seed_kind(pool, "thing").await?;
    let mut conn = pool.acquire().await?;
    sqlx::query(
        "INSERT INTO resources (kind, kind_version, name)
         SELECT 'thing', 1, 'r' || g FROM generate_series(1, 3000) g",
    )
    .execute(&mut *conn)
    .await?;
    // Publish this session's row counts now rather than within a second.
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(&mut *conn)
        .await?;
    sqlx::query("SELECT 1").execute(&mut *conn).await?;
    let estimate = || sqlx::query_scalar::<_, f32>("SELECT reltuples FROM pg_class WHERE oid = 'resources'::regclass");
    assert!(estimate().fetch_one(pool).await? < 1000.0, "not analysed yet");
    assert!(
        statistics::refresh(pool).await? >= 1,
        "resources grew past its statistics"
    );
    assert!(
        estimate().fetch_one(pool).await? >= 3000.0,
        "the statistics now count the rows"
    );
    assert_eq!(statistics::refresh(pool).await?, 0, "nothing grew since");
    Ok(())
}

/// A successful result of a claimed task, as the broker writes it.
fn success(task: &ClaimedTask, epoch: i64) -> TaskResult {
    TaskResult {
        work_id: task.work_id,
        shard_id: task.shard_id,
        resource_id: task.resource_id,
        lease: task.lease_token,
        epoch,
        generation: task.generation,
        manifest_version: task.manifest_version,
        status: Some(json!({"done": task.name})),
        advance: true,
        ..TaskResult::default()
    }
}

async fn queued_and_outbox(pool: &PgPool, id: Uuid) -> anyhow::Result<(i64, i64)> {
    Ok(sqlx::query_as(
        "SELECT (SELECT count(*) FROM work_queue WHERE resource_id = $1),
                (SELECT count(*) FROM work_outbox WHERE resource_id = $1)",
    )
    .bind(id)
    .fetch_one(pool)
    .await?)
}

#[tokio::test]
async fn results_applied_directly_or_through_the_outbox_end_alike_and_stale_ones_do_nothing() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let pool = db.pool();
    seed_kind(pool, "thing").await?;
    let direct = create(pool, "thing", "direct").await?;
    let drained = create(pool, "thing", "drained").await?;
    for id in [direct, drained] {
        assert_eq!(queued_and_outbox(pool, id).await?, (1, 0), "queued by its insert");
    }
    let tasks = work::claim(pool, "broker-a", "thing", 1, 10, None).await?;
    let task = |id: Uuid| {
        tasks
            .iter()
            .find(|t| t.resource_id == id)
            .ok_or_else(|| anyhow::anyhow!("{id} was not claimed"))
    };
    let (on_direct, on_drained) = (task(direct)?, task(drained)?);

    let stale_epoch = success(on_direct, on_direct.claim_epoch - 1);
    assert!(
        work::complete(pool, &[stale_epoch]).await?.is_empty(),
        "an old epoch is fenced off"
    );
    assert_eq!(queued_and_outbox(pool, direct).await?, (1, 0), "the task stays leased");

    let result = success(on_direct, on_direct.claim_epoch);
    assert_eq!(
        work::complete(pool, std::slice::from_ref(&result)).await?,
        vec![on_direct.lease_token]
    );
    assert_eq!(
        queued_and_outbox(pool, direct).await?,
        (0, 0),
        "done, with no outbox row"
    );
    assert!(
        work::complete(pool, &[result]).await?.is_empty(),
        "a repeated result is stale"
    );

    let result = success(on_drained, on_drained.claim_epoch);
    assert_eq!(
        work::append_outbox(pool, &[result]).await?,
        vec![on_drained.lease_token]
    );
    assert_eq!(queued_and_outbox(pool, drained).await?, (1, 1));
    assert_eq!(work::drain_outbox(pool, 500, ShardRange { lo: 0, hi: 255 }).await?, 1);
    assert_eq!(queued_and_outbox(pool, drained).await?, (0, 0));

    for name in ["direct", "drained"] {
        let resource = resources::get(pool, "thing", name)
            .await?
            .ok_or_else(|| anyhow::anyhow!("{name} is gone"))?;
        assert_eq!(resource.phase, Phase::Ready, "{name}");
        assert_eq!(resource.synced_gen, resource.generation, "{name}");
        assert_eq!(resource.status, Some(json!({"done": name})), "{name}");
    }
    Ok(())
}

/// Calls `enqueue_tasks` for the resource `id` at `generation`.
async fn enqueue(
    conn: &mut sqlx::PgConnection,
    id: Uuid,
    generation: i64,
    cause: Option<&str>,
    rule: &str,
) -> Result<i32, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT enqueue_tasks(array_agg(ROW(r.id, r.kind, r.kind_version, $2, 1, r.shard_id)::task_candidate),
                              'reconcile', $3, $4)
         FROM resources r WHERE r.id = $1",
    )
    .bind(id)
    .bind(generation)
    .bind(cause)
    .bind(rule)
    .fetch_one(conn)
    .await
}

/// The reconcile task of `id`: (generation, claim epoch, cause, trace
/// context, whether it may run now).
async fn task_of(pool: &PgPool, id: Uuid) -> anyhow::Result<(i64, i64, Option<String>, Option<String>, bool)> {
    Ok(sqlx::query_as(
        "SELECT generation, claim_epoch, cause, trace_context, not_before <= now()
         FROM work_queue WHERE resource_id = $1 AND task_type = 'reconcile'",
    )
    .bind(id)
    .fetch_one(pool)
    .await?)
}

#[tokio::test]
async fn the_one_queue_writer_keeps_advances_or_hurries_an_existing_task() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let pool = db.pool();
    seed_kind(pool, "thing").await?;
    let id = create(pool, "thing", "a").await?;
    assert_eq!(
        task_of(pool, id).await?,
        (1, 1, None, None, true),
        "the create queued it"
    );

    let mut conn = pool.acquire().await?;
    let mut tx = conn.begin().await?;
    let traced = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    sqlx::query("SELECT set_config('converge.trace_context', $1, true)")
        .bind(traced)
        .execute(&mut *tx)
        .await?;
    assert_eq!(enqueue(&mut tx, id, 2, None, "keep").await?, 0, "keep leaves it");
    assert_eq!(
        enqueue(&mut tx, id, 1, None, "advance").await?,
        0,
        "not a newer generation"
    );
    assert_eq!(enqueue(&mut tx, id, 2, None, "advance").await?, 1);
    tx.commit().await?;
    assert_eq!(
        task_of(pool, id).await?,
        (2, 2, None, Some(traced.to_owned()), true),
        "re-pointed, fenced and stamped with the calling transaction's trace"
    );

    sqlx::query("UPDATE work_queue SET not_before = now() + interval '1 hour' WHERE resource_id = $1")
        .bind(id)
        .execute(pool)
        .await?;
    assert_eq!(enqueue(&mut conn, id, 2, Some("configChange"), "hurry").await?, 1);
    let (_, epoch, cause, _, runnable) = task_of(pool, id).await?;
    assert_eq!((epoch, cause.as_deref(), runnable), (2, Some("configChange"), true));

    sqlx::query("UPDATE work_queue SET broker_id = 'b', not_before = now() + interval '1 hour' WHERE resource_id = $1")
        .bind(id)
        .execute(pool)
        .await?;
    assert_eq!(
        enqueue(&mut conn, id, 2, None, "hurry").await?,
        0,
        "a leased task is left to its holder"
    );

    let duplicate = enqueue(&mut conn, id, 3, None, "new").await;
    assert!(
        duplicate.is_err_and(|e| e.to_string().contains("duplicate key")),
        "'new' is for resources created in the same statement: a task that exists is a bug"
    );
    let unknown = enqueue(&mut conn, id, 3, None, "sometimes").await;
    assert!(unknown.is_err_and(|e| e.to_string().contains("unknown conflict rule")));
    Ok(())
}

#[tokio::test]
async fn the_fleet_snapshot_is_taken_only_while_wanted_and_only_after_writes() -> anyhow::Result<()> {
    use converge_service::store::summary;
    let db = TestDatabase::new().await?;
    let pool = db.pool();
    seed_kind(pool, "thing").await?;
    let max_age = Duration::from_secs(300);
    let rows = || sqlx::query_scalar::<_, i64>("SELECT count(*) FROM fleet_summary");
    let write = |names: &'static str| async move {
        let mut conn = pool.acquire().await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO resources (kind, kind_version, name) SELECT 'thing', 1, {names} || g FROM generate_series(1, 10) g"
        )))
        .execute(&mut *conn)
        .await?;
        // Publish this session's counters now rather than within a second.
        sqlx::query("SELECT pg_stat_force_next_flush()")
            .execute(&mut *conn)
            .await?;
        sqlx::query("SELECT 1").execute(&mut *conn).await?;
        anyhow::Ok(())
    };
    write("'a'").await?;

    // Nobody asked and no exporter wants it: nothing is counted or stored.
    assert!(!summary::refresh(pool, false, max_age, 10).await?);
    assert_eq!(rows().fetch_one(pool).await?, 0);

    // A caller's first read counts and stores it.
    let (_, taken) = summary::take(pool, 10).await?;
    assert_eq!(taken.total(), 10);
    // Nothing written since: not retaken, and still current however old.
    assert!(!summary::refresh(pool, false, max_age, 10).await?);
    assert!(summary::current_snapshot(pool, Duration::ZERO).await?.is_some());

    // Written since, and asked for recently: retaken, and current again.
    write("'b'").await?;
    assert!(summary::current_snapshot(pool, Duration::ZERO).await?.is_none());
    assert!(summary::refresh(pool, false, max_age, 10).await?);
    let (_, current) = summary::current_snapshot(pool, Duration::ZERO)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no current snapshot"))?;
    assert_eq!(current.total(), 20);

    // No call for longer than the wanted window: writes no longer retake it,
    // unless an exporter wants it (always).
    sqlx::query("UPDATE fleet_summary SET requested_at = now() - interval '1 hour'")
        .execute(pool)
        .await?;
    write("'c'").await?;
    assert!(!summary::refresh(pool, false, max_age, 10).await?);
    assert!(summary::refresh(pool, true, max_age, 10).await?);
    Ok(())
}

/// The retry delay of a kind's policy: the defaults reproduce the fixed
/// schedule exactly (1 s doubling to 60 s); base and cap move it; full and
/// equal jitter stay within their ranges and spread.
#[tokio::test]
async fn retry_delays_follow_the_policy_and_default_to_the_fixed_schedule() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let pool = db.pool();
    let secs = |sql: &'static str| async move { anyhow::Ok(sqlx::query_scalar::<_, f64>(sql).fetch_one(pool).await?) };
    for attempts in 0..12 {
        let (fixed, policy): (f64, f64) = sqlx::query_as(
            "SELECT extract(epoch FROM retry_delay($1))::float8,
                    extract(epoch FROM retry_delay_for($1, 0, 0, 'none'))::float8",
        )
        .bind(attempts)
        .fetch_one(pool)
        .await?;
        assert_eq!(fixed, policy, "attempt {attempts}");
    }
    assert_eq!(
        secs("SELECT extract(epoch FROM retry_delay_for(1, 250, 0, 'none'))::float8").await?,
        0.25
    );
    assert_eq!(
        secs("SELECT extract(epoch FROM retry_delay_for(5, 250, 0, 'none'))::float8").await?,
        4.0
    );
    assert_eq!(
        secs("SELECT extract(epoch FROM retry_delay_for(9, 250, 3000, 'none'))::float8").await?,
        3.0
    );
    // Huge attempt counts stay finite at the cap.
    assert_eq!(
        secs("SELECT extract(epoch FROM retry_delay_for(100000, 0, 0, 'none'))::float8").await?,
        60.0
    );
    // The fixed schedule too (reactor deliveries and operations may count
    // past 1024, where 2^n would overflow).
    assert_eq!(
        secs("SELECT extract(epoch FROM retry_delay(100000))::float8").await?,
        60.0
    );
    let full: Vec<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM retry_delay_for(1, 10000, 0, 'full'))::float8 FROM generate_series(1, 500)",
    )
    .fetch_all(pool)
    .await?;
    assert!(full.iter().all(|d| (0.0..=10.0).contains(d)));
    assert!(
        full.iter().any(|d| *d < 2.5) && full.iter().any(|d| *d > 7.5),
        "full jitter does not spread"
    );
    let equal: Vec<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM retry_delay_for(1, 10000, 0, 'equal'))::float8 FROM generate_series(1, 500)",
    )
    .fetch_all(pool)
    .await?;
    assert!(equal.iter().all(|d| (5.0..=10.0).contains(d)));
    assert!(
        equal.iter().any(|d| *d < 6.25) && equal.iter().any(|d| *d > 8.75),
        "equal jitter does not spread"
    );
    // A kind without a config falls back to the fixed schedule.
    assert_eq!(
        secs("SELECT extract(epoch FROM kind_retry_delay('nokind', 1, 3))::float8").await?,
        4.0
    );
    Ok(())
}

/// The name of the one task `claim` hands out next for `kind`.
async fn claim_next(pool: &PgPool, kind: &str) -> anyhow::Result<ClaimedTask> {
    let mut tasks = work::claim(pool, "broker-a", kind, 1, 1, None).await?;
    tasks.pop().ok_or_else(|| anyhow::anyhow!("nothing to claim"))
}

#[tokio::test]
async fn a_rollup_keeps_its_owners_place_in_the_claim_order() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let pool = db.pool();
    sqlx::query(
        "INSERT INTO kind_manifest (kind, kind_version, reactions, manifest_version)
         VALUES ('tree', 1, '[{\"name\":\"compose\",\"trigger\":\"specChange\",\"emits\":[\"children\",\"edges\",\"status\"]},
                             {\"name\":\"rollup\",\"trigger\":\"childrenSettled\",\"emits\":[\"status\"]}]', 1)",
    )
    .execute(pool)
    .await?;
    // A burst: three roots queued, the first composed first.
    let first = create(pool, "tree", "first").await?;
    create(pool, "tree", "second").await?;
    create(pool, "tree", "third").await?;
    let composing = claim_next(pool, "tree").await?;
    assert_eq!(composing.resource_id, first);

    // Its composition is a partial result; with no child left to wait for,
    // the rollup is queued at once, ahead of the later roots' compositions
    // (behind them before: a new task took the back of the queue).
    let partial = TaskResult {
        advance: false,
        ..success(&composing, composing.claim_epoch)
    };
    assert_eq!(work::complete(pool, &[partial]).await?.len(), 1);
    let rollup = claim_next(pool, "tree").await?;
    assert_eq!(rollup.name, "first", "the lagging root's rollup goes first");
    let done = success(&rollup, rollup.claim_epoch);
    assert_eq!(work::complete(pool, &[done]).await?.len(), 1);

    // A settled root whose children changed is queued again to fold them,
    // also in its place.
    let queued: i32 = sqlx::query_scalar("SELECT pend_owners(ARRAY[$1::uuid], false)")
        .bind(first)
        .fetch_one(pool)
        .await?;
    assert_eq!(queued, 1);
    assert_eq!(
        claim_next(pool, "tree").await?.name,
        "first",
        "the settled root's rollup goes first"
    );
    assert_eq!(
        claim_next(pool, "tree").await?.name,
        "second",
        "then the burst goes on in order"
    );

    Ok(())
}

/// Every page of `selector` over the kind `thing`, `size` at a time.
async fn label_pages(pool: &PgPool, selector: &str, size: usize) -> anyhow::Result<Vec<String>> {
    let filter = resources::ResourceFilter {
        kind: Some("thing".into()),
        selector: selector.parse()?,
        ..Default::default()
    };
    let mut names = Vec::new();
    let mut after = None;
    loop {
        let page = resources::list(pool, &filter, after, size).await?;
        names.extend(page.iter().map(|r| r.name.clone()));
        match page.last() {
            Some(last) if page.len() == size => {
                after = Some(resources::ListCursor {
                    created_at: last.created_at,
                    id: last.id,
                })
            }
            _ => return Ok(names),
        }
    }
}

#[tokio::test]
async fn label_pages_are_the_same_whether_the_walk_fills_them_or_the_label_index_does() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let pool = db.pool();
    seed_kind(pool, "thing").await?;
    // 3,000 resources, newest first by number; every third is `common`, and
    // three are `rare`: one near the newest end, two far past the first walk
    // (500 rows for small pages), which finds none of them, so the label
    // index serves the rest of their page; pages of 1,000 `common` walk on.
    sqlx::query(
        "INSERT INTO resources (kind, kind_version, name, labels, spec, created_at)
         SELECT 'thing', 1, 'n-' || i,
                jsonb_build_object('team', CASE WHEN i % 3 = 0 THEN 'common' ELSE 'other' END)
                || CASE WHEN i IN (2990, 600, 100) THEN '{\"rare\":\"yes\"}'::jsonb ELSE '{}' END,
                '{}', now() - interval '1 hour' + i * interval '1 ms'
         FROM generate_series(1, 3000) AS i",
    )
    .execute(pool)
    .await?;
    let expected = |selector: &'static str| async move {
        let sql = match selector {
            "rare=yes" => "SELECT name FROM resources WHERE labels ? 'rare' ORDER BY created_at DESC, id DESC",
            _ => "SELECT name FROM resources WHERE labels->>'team' = 'common' ORDER BY created_at DESC, id DESC",
        };
        sqlx::query_scalar::<_, String>(sql).fetch_all(pool).await
    };
    let rare = expected("rare=yes").await?;
    assert_eq!(rare, ["n-2990", "n-600", "n-100"]);
    for size in [1, 2, 3, 10] {
        assert_eq!(label_pages(pool, "rare=yes", size).await?, rare, "pages of {size}");
    }
    let common = expected("team=common").await?;
    assert_eq!(common.len(), 1000);
    for size in [7, 100, 1000] {
        assert_eq!(label_pages(pool, "team=common", size).await?, common, "pages of {size}");
    }
    // Another requirement along: the walk matches all of them.
    assert_eq!(label_pages(pool, "team=common,rare=yes", 2).await?, ["n-600"]);
    Ok(())
}
