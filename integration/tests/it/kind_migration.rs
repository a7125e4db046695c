//! Kind schema evolution (ADR 48): a v2 manifest declares how v1 specs
//! convert (CEL), and a KindMigration moves a fleet from v1 to v2 while v1
//! and v2 workers run and new v1 applies keep coming. A spec that cannot
//! convert stays on v1 with a condition; a dry run writes nothing; a rollback
//! through the spec history returns a resource to its v1 spec on v1; v1's
//! manifest can be deleted once nothing is left on it; a SIGKILLed server
//! resumes its migration, a PostgreSQL restart under it too, and nothing is
//! converted twice.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use converge_integration::api::{apply_manifest, count, expect_error, fields, json, object};
use converge_integration::eventually;
use converge_integration::kinds::work_manifest;
use converge_integration::postgres::PrivateServer;
use converge_integration::processes::{
    connect_when_up, converge_process_with, free_local_addr, noop_worker_of, signal,
};
use converge_proto::v1::{
    ApplyResourceRequest, BatchApplyResourcesRequest, CancelKindMigrationRequest, DeleteKindManifestRequest,
    DeleteResourceRequest, FieldConversion, GetKindMigrationRequest, GetResourceRequest, KindManifest, KindMigration,
    KindMigrationState, ListKindMigrationsRequest, ListSpecRevisionsRequest, RollbackResourceRequest, SpecConversion,
    SpecRevisionSource, StartKindMigrationRequest, WatchKindMigrationRequest,
};
use converge_sdk::Client;
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use sqlx::PgPool;
use tonic::Code;

const KIND: &str = "svc";

fn v1() -> KindManifest {
    KindManifest {
        kind_version: 1,
        spec_schema: Some(object(json!({
            "type": "object",
            "required": ["replicas"],
            "properties": {"replicas": {"type": "integer"}, "zone": {"type": "string"}}
        }))),
        ..work_manifest(KIND)
    }
}

/// v2 renames `replicas` to `size` (doubled, at most 100) and makes the zone
/// a required `region`.
fn v2() -> KindManifest {
    let set = |path: &str, value: &str| FieldConversion {
        path: path.into(),
        value: value.into(),
        remove: false,
    };
    KindManifest {
        kind_version: 2,
        spec_schema: Some(object(json!({
            "type": "object",
            "required": ["size", "region"],
            "additionalProperties": false,
            "properties": {"size": {"type": "integer", "maximum": 100}, "region": {"type": "string"}}
        }))),
        conversions: vec![SpecConversion {
            from_version: 1,
            spec: String::new(),
            fields: vec![
                set("size", "self.replicas * 2"),
                set("region", "has(self.zone) ? self.zone : 'eu-1'"),
                FieldConversion {
                    path: "replicas".into(),
                    remove: true,
                    ..Default::default()
                },
                FieldConversion {
                    path: "zone".into(),
                    remove: true,
                    ..Default::default()
                },
            ],
        }],
        ..work_manifest(KIND)
    }
}

fn at_v1(name: &str, spec: Value) -> ApplyResourceRequest {
    ApplyResourceRequest {
        kind: KIND.into(),
        kind_version: 1,
        name: name.into(),
        spec: Some(object(spec)),
        ..Default::default()
    }
}

async fn apply_batch(client: &Client, items: Vec<ApplyResourceRequest>) -> anyhow::Result<()> {
    for chunk in items.chunks(1000) {
        client
            .resources()
            .batch_apply_resources(BatchApplyResourcesRequest {
                requests: chunk.to_vec(),
                ..Default::default()
            })
            .await?;
    }
    Ok(())
}

async fn start(client: &Client, validate_only: bool) -> anyhow::Result<KindMigration> {
    let answer = client
        .migrations()
        .start_kind_migration(StartKindMigrationRequest {
            kind: KIND.into(),
            from_version: 1,
            to_version: 2,
            validate_only,
            ..Default::default()
        })
        .await?
        .into_inner();
    answer
        .migration
        .ok_or_else(|| anyhow::anyhow!("no migration in the answer"))
}

/// Follows the migration's watch to its end; returns the last message.
async fn watch_to_end(client: &Client, uid: &str) -> anyhow::Result<KindMigration> {
    let mut stream = client
        .migrations()
        .watch_kind_migration(WatchKindMigrationRequest { uid: uid.into() })
        .await?
        .into_inner();
    let mut last = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    while let Some(message) = tokio::time::timeout_at(deadline, stream.message()).await?? {
        last = message.migration;
    }
    let last = last.ok_or_else(|| anyhow::anyhow!("the watch sent nothing"))?;
    anyhow::ensure!(last.done, "the watch ended before the migration did: {last:?}");
    Ok(last)
}

/// Generations each worker reconciled, per resource name, from a noop
/// worker's record ("svc/<name> <generation>" lines).
fn worked(record: &Path) -> HashMap<String, Vec<i64>> {
    let mut out: HashMap<String, Vec<i64>> = HashMap::new();
    for line in std::fs::read_to_string(record).unwrap_or_default().lines() {
        let Some((name, generation)) = line.split_once(' ') else {
            continue;
        };
        let name = name.trim_start_matches("svc/").to_owned();
        if let Ok(generation) = generation.parse() {
            out.entry(name).or_default().push(generation);
        }
    }
    out
}

async fn on_version(pool: &PgPool, version: i32) -> anyhow::Result<i64> {
    count(
        pool,
        &format!("SELECT count(*) FROM resources WHERE kind = 'svc' AND kind_version = {version}"),
    )
    .await
}

#[tokio::test]
async fn a_fleet_moves_to_v2_while_workers_run_and_applies_continue() -> anyhow::Result<()> {
    let server = converge_integration::TestServer::start().await?;
    let client = server.client().await?;
    let pool = server.database().pool().clone();
    apply_manifest(&client, v1()).await?;
    apply_manifest(&client, v2()).await?;
    let scratch = tempfile::tempdir()?;
    let (record_1, record_2) = (scratch.path().join("v1"), scratch.path().join("v2"));
    let _w1 = noop_worker_of(&server.address(), "svc:1", 32, &record_1)?;
    let _w2 = noop_worker_of(&server.address(), "svc:2", 32, &record_2)?;

    // 1,000 resources on v1; one of them cannot convert (size 1000 > 100).
    let mut items: Vec<ApplyResourceRequest> = (0..999)
        .map(|i| {
            let spec = if i % 2 == 0 {
                json!({"replicas": i % 50})
            } else {
                json!({"replicas": 1, "zone": "us-2"})
            };
            at_v1(&format!("s-{i:04}"), spec)
        })
        .collect();
    items.push(at_v1("too-big", json!({"replicas": 500})));
    apply_batch(&client, items).await?;
    eventually(Duration::from_secs(120), || async {
        let ready = count(&pool, "SELECT count(*) FROM resources WHERE kind = 'svc' AND is_ready").await?;
        Ok((ready == 1000).then_some(()))
    })
    .await?;

    // A dry run reports the one failure and writes nothing.
    let before = count(
        &pool,
        "SELECT sum(generation)::bigint FROM resources WHERE kind = 'svc'",
    )
    .await?;
    let dry = start(&client, true).await?;
    assert_eq!(dry.total, 1000);
    let dry = watch_to_end(&client, &dry.uid).await?;
    assert_eq!(dry.state(), KindMigrationState::Failed, "{dry:?}");
    assert_eq!((dry.converted, dry.failed), (999, 1), "{dry:?}");
    assert_eq!(dry.first_failures[0].name, "too-big");
    assert!(
        dry.first_failures[0].message.contains("/spec/size"),
        "{:?}",
        dry.first_failures
    );
    assert_eq!(on_version(&pool, 1).await?, 1000);
    let after = count(
        &pool,
        "SELECT sum(generation)::bigint FROM resources WHERE kind = 'svc'",
    )
    .await?;
    assert_eq!(before, after, "a dry run wrote generations");
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM resource_conditions WHERE type = 'Converted'"
        )
        .await?,
        0
    );

    // The real one, with new v1 resources applied while it runs: those
    // committed before its end move with it, later ones wait for the next.
    let migration = start(&client, false).await?;
    let applier = {
        let client = client.clone();
        tokio::spawn(async move {
            for i in 0..100 {
                let request = at_v1(&format!("late-{i:03}"), json!({"replicas": 3}));
                client.resources().apply_resource(request).await?;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            anyhow::Ok(())
        })
    };
    let done = watch_to_end(&client, &migration.uid).await?;
    applier.await??;
    assert_eq!(done.state(), KindMigrationState::Failed, "{done:?}");
    assert_eq!(done.failed, 1, "{done:?}");
    let late_moved = done.converted - 999;
    assert!(late_moved > 0, "no late apply overlapped the migration: {done:?}");
    assert_eq!(on_version(&pool, 2).await?, done.converted);
    let again = start(&client, false).await?;
    assert_eq!(again.total, 1 + 100 - late_moved);
    let again = watch_to_end(&client, &again.uid).await?;
    assert_eq!((again.converted, again.failed), (100 - late_moved, 1), "{again:?}");
    assert_eq!(on_version(&pool, 2).await?, 1099);
    assert_eq!(on_version(&pool, 1).await?, 1);

    // The one that could not convert stays on v1, untouched, and says why.
    let too_big = client
        .resources()
        .get_resource(GetResourceRequest {
            kind: KIND.into(),
            name: "too-big".into(),
        })
        .await?
        .into_inner()
        .resource
        .ok_or_else(|| anyhow::anyhow!("no resource"))?;
    assert_eq!((too_big.kind_version, too_big.generation), (1, 1));
    let condition = too_big
        .conditions
        .iter()
        .find(|c| c.r#type == "Converted")
        .ok_or_else(|| anyhow::anyhow!("no Converted condition: {:?}", too_big.conditions))?;
    assert_eq!(condition.reason, "ConversionFailed");
    assert!(condition.message.contains("maximum"), "{}", condition.message);

    // Every converted resource becomes Ready on v2, reconciled by the v2
    // worker only at its v2 generation.
    eventually(Duration::from_secs(120), || async {
        let ready = count(
            &pool,
            "SELECT count(*) FROM resources WHERE kind = 'svc' AND kind_version = 2 AND is_ready",
        )
        .await?;
        Ok((ready == 1099).then_some(()))
    })
    .await?;
    let generations: Vec<(String, i64)> =
        sqlx::query_as("SELECT name, generation FROM resources WHERE kind = 'svc' AND kind_version = 2")
            .fetch_all(&pool)
            .await?;
    let (by_v1, by_v2) = (worked(&record_1), worked(&record_2));
    for (name, generation) in &generations {
        assert!(
            by_v2.get(name).is_some_and(|g| g.contains(generation)),
            "{name} at generation {generation} was not reconciled by the v2 worker"
        );
        assert!(
            by_v1.get(name).is_none_or(|g| g.iter().all(|g| g < generation)),
            "the v1 worker reconciled {name} at its v2 generation"
        );
    }
    let spec = json(
        &client
            .resources()
            .get_resource(GetResourceRequest {
                kind: KIND.into(),
                name: "s-0001".into(),
            })
            .await?
            .into_inner()
            .resource
            .and_then(|r| r.spec)
            .ok_or_else(|| anyhow::anyhow!("no spec"))?,
    );
    assert_eq!(spec, json!({"size": 2, "region": "us-2"}));

    // Each converted resource has exactly one conversion revision.
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM spec_revisions WHERE source = 'conversion' AND kind_version = 2"
        )
        .await?,
        1099
    );

    // A rollback through the history returns the v1 spec on v1.
    let revisions = client
        .resources()
        .list_spec_revisions(ListSpecRevisionsRequest {
            kind: KIND.into(),
            name: "s-0001".into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .revisions;
    assert_eq!(revisions[0].source(), SpecRevisionSource::Conversion);
    assert_eq!((revisions[0].kind_version, revisions[1].kind_version), (2, 1));
    let rolled = client
        .resources()
        .rollback_resource(RollbackResourceRequest {
            kind: KIND.into(),
            name: "s-0001".into(),
            target_generation: revisions[1].generation,
            ..Default::default()
        })
        .await?
        .into_inner()
        .resource
        .ok_or_else(|| anyhow::anyhow!("no resource"))?;
    assert_eq!(rolled.kind_version, 1);
    assert_eq!(
        json(rolled.spec.as_ref().ok_or_else(|| anyhow::anyhow!("no spec"))?),
        json!({"replicas": 1, "zone": "us-2"})
    );

    // v1 is retired once nothing is left on it.
    let delete_v1 = || async {
        client
            .kinds()
            .delete_kind_manifest(DeleteKindManifestRequest {
                kind: KIND.into(),
                kind_version: 1,
                ..Default::default()
            })
            .await
    };
    expect_error(delete_v1().await, Code::FailedPrecondition, "KIND_IN_USE");
    for name in ["s-0001", "too-big"] {
        client
            .resources()
            .delete_resource(DeleteResourceRequest {
                kind: KIND.into(),
                name: name.into(),
                ..Default::default()
            })
            .await?;
    }
    eventually(Duration::from_secs(60), || async {
        let left = on_version(&pool, 1).await?;
        Ok((left == 0).then_some(()))
    })
    .await?;
    delete_v1().await?;
    Ok(())
}

#[tokio::test]
async fn bad_migrations_are_refused_and_write_nothing() -> anyhow::Result<()> {
    let server = converge_integration::TestServer::start().await?;
    let client = server.client().await?;
    let pool = server.database().pool().clone();
    apply_manifest(&client, v1()).await?;
    let request = |from: i32, to: i32| StartKindMigrationRequest {
        kind: KIND.into(),
        from_version: from,
        to_version: to,
        ..Default::default()
    };
    let refused = client.migrations().start_kind_migration(request(1, 2)).await;
    expect_error(refused, Code::NotFound, "KIND_NOT_FOUND");
    let refused = client.migrations().start_kind_migration(request(1, 1)).await;
    assert_eq!(
        fields(&expect_error(refused, Code::InvalidArgument, "INVALID_FIELD")),
        ["/to_version"]
    );
    // A target that declares no conversion from the source.
    apply_manifest(
        &client,
        KindManifest {
            kind_version: 3,
            ..work_manifest(KIND)
        },
    )
    .await?;
    let refused = client.migrations().start_kind_migration(request(1, 3)).await;
    expect_error(refused, Code::FailedPrecondition, "CONVERSION_NOT_DECLARED");
    // A conversion that does not compile, or names an unknown variable.
    let mut bad = v2();
    bad.conversions[0].fields[0].value = "self.replicas *".into();
    bad.conversions[0].fields[1].value = "spec.zone".into();
    let refused = apply_manifest(&client, bad).await;
    assert_eq!(
        fields(&expect_error(refused, Code::InvalidArgument, "INVALID_KIND_MANIFEST")),
        [
            "/manifest/conversions/0/fields/0/value",
            "/manifest/conversions/0/fields/1/value"
        ]
    );
    let refused = client
        .migrations()
        .get_kind_migration(GetKindMigrationRequest {
            uid: uuid::Uuid::now_v7().to_string(),
        })
        .await;
    expect_error(refused, Code::NotFound, "MIGRATION_NOT_FOUND");
    assert_eq!(count(&pool, "SELECT count(*) FROM kind_migrations").await?, 0);

    // One running migration per kind; a cancel stops it after its batch
    // and what it converted stays converted.
    apply_manifest(&client, v2()).await?;
    let items = (0..5000)
        .map(|i| at_v1(&format!("c-{i:04}"), json!({"replicas": 1})))
        .collect();
    apply_batch(&client, items).await?;
    let running = start(&client, false).await?;
    let second = client.migrations().start_kind_migration(request(1, 2)).await;
    expect_error(second, Code::Aborted, "MIGRATION_IN_PROGRESS");
    let refused = client
        .kinds()
        .delete_kind_manifest(DeleteKindManifestRequest {
            kind: KIND.into(),
            kind_version: 2,
            ..Default::default()
        })
        .await;
    expect_error(refused, Code::FailedPrecondition, "KIND_IN_USE");
    let cancelled = client
        .migrations()
        .cancel_kind_migration(CancelKindMigrationRequest {
            uid: running.uid.clone(),
        })
        .await?
        .into_inner()
        .migration
        .ok_or_else(|| anyhow::anyhow!("no migration"))?;
    assert_eq!(cancelled.state(), KindMigrationState::Cancelled);
    assert!(cancelled.done && cancelled.end_time.is_some());
    let moved = on_version(&pool, 2).await?;
    assert_eq!(moved, cancelled.converted, "{cancelled:?}");
    assert!(moved < 5000, "the migration ended before the cancel");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(on_version(&pool, 2).await?, moved, "a cancelled migration went on");
    let listed = client
        .migrations()
        .list_kind_migrations(ListKindMigrationsRequest {
            kind: KIND.into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .migrations;
    assert_eq!(
        listed.iter().map(|m| m.uid.as_str()).collect::<Vec<_>>(),
        [running.uid.as_str()]
    );
    Ok(())
}

/// The migration's row, read with a fresh connection (the database may have
/// just restarted); `None` while it cannot be read.
async fn moved(url: &str) -> Option<i64> {
    let pool = PgPool::connect(url).await.ok()?;
    let moved = on_version(&pool, 2).await.ok();
    pool.close().await;
    moved
}

#[tokio::test]
async fn a_killed_server_and_a_restarted_database_resume_the_migration_and_nothing_converts_twice() -> anyhow::Result<()>
{
    const N: i64 = 8000;
    let mut database = PrivateServer::primary().await?;
    converge_service::db::ensure_database(&database.connect_options("postgres")?, "converge").await?;
    let url = database.url("converge")?;
    let scratch = tempfile::tempdir()?;
    let addr = free_local_addr()?;
    let address = format!("http://{addr}");
    let mut first = converge_process_with(&url, &addr, &scratch.path().join("first.log"), &[])?;
    let client = connect_when_up(&address).await?;
    apply_manifest(&client, v1()).await?;
    apply_manifest(&client, v2()).await?;
    let items = (0..N)
        .map(|i| at_v1(&format!("k-{i:05}"), json!({"replicas": i % 40})))
        .collect();
    apply_batch(&client, items).await?;
    let migration = start(&client, false).await?;

    // SIGKILL converge once a batch or more is in.
    eventually(Duration::from_secs(120), || async {
        Ok(moved(&url).await.filter(|m| *m >= 500))
    })
    .await?;
    signal(&first, Signal::SIGKILL)?;
    first.wait().await?;
    let at_kill = moved(&url).await.unwrap_or_default();
    assert!(
        at_kill < N,
        "the migration ended before the kill; raise N ({at_kill} moved)"
    );

    // A successor resumes; then PostgreSQL restarts (fast shutdown) under it.
    let _second = converge_process_with(&url, &addr, &scratch.path().join("second.log"), &[])?;
    let client = connect_when_up(&address).await?;
    eventually(Duration::from_secs(120), || async {
        Ok(moved(&url).await.filter(|m| *m >= at_kill + 500))
    })
    .await?;
    database.stop().await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    database.start().await?;
    let at_restart = moved(&url).await.unwrap_or_default();
    assert!(
        at_restart < N,
        "the migration ended before the restart; raise N ({at_restart} moved)"
    );

    let done = eventually(Duration::from_secs(180), || async {
        let read = client
            .migrations()
            .get_kind_migration(GetKindMigrationRequest {
                uid: migration.uid.clone(),
            })
            .await;
        // UNAVAILABLE while converge notices the database is back.
        Ok(read.ok().and_then(|r| r.into_inner().migration).filter(|m| m.done))
    })
    .await?;
    assert_eq!(done.state(), KindMigrationState::Succeeded, "{done:?}");
    assert_eq!((done.converted, done.failed), (N, 0), "{done:?}");
    let pool = PgPool::connect(&url).await?;
    assert_eq!(on_version(&pool, 2).await?, N);
    // One conversion each: generation 2 and one conversion revision.
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM resources WHERE kind = 'svc' AND generation <> 2"
        )
        .await?,
        0
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM spec_revisions WHERE source = 'conversion'").await?,
        N
    );
    pool.close().await;
    Ok(())
}

/// Runs the `converge` client against `address` from the repository root;
/// returns (exit code, stdout, stderr).
async fn cli(address: &str, args: &[&str]) -> anyhow::Result<(Option<i32>, String, String)> {
    let out = tokio::process::Command::new(converge_integration::processes::binary("converge")?)
        .args(args)
        .env("CONVERGE_SERVER", address)
        .current_dir(converge_integration::processes::repository_root())
        .stdin(std::process::Stdio::null())
        .output()
        .await?;
    Ok((
        out.status.code(),
        String::from_utf8(out.stdout)?,
        String::from_utf8(out.stderr)?,
    ))
}

#[tokio::test]
async fn the_documented_example_migrates_from_the_command_line() -> anyhow::Result<()> {
    let server = converge_integration::TestServer::start().await?;
    let address = server.address();
    let (code, _, stderr) = cli(&address, &["apply", "-f", "examples/migration/"]).await?;
    assert_eq!(code, Some(0), "{stderr}");
    // The dry run reports `huge` and writes nothing (exit 1: it would fail).
    let (code, stdout, _) = cli(
        &address,
        &["migrate", "widget", "--from", "1", "--to", "2", "--dry-run", "--wait"],
    )
    .await?;
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("(dry run) FAILED 2/3 converted, 1 failed"), "{stdout}");
    assert!(
        stdout.contains("huge: the converted spec breaks version 2's schema: /spec/size"),
        "{stdout}"
    );
    let (code, stdout, stderr) = cli(&address, &["migrate", "widget", "--from", "1", "--to", "2", "--wait"]).await?;
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains("1 resource(s) could not be converted and stay on version 1"),
        "{stderr}"
    );
    let (code, stdout, _) = cli(&address, &["migrate-kind", "widget", "--status"]).await?;
    assert_eq!(code, Some(0));
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .skip(1)
        .take(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows, [vec!["1", "1", "-"], vec!["2", "2", "1"]], "{stdout}");
    let (_, stdout, _) = cli(&address, &["history", "widget", "small"]).await?;
    let newest: Vec<&str> = stdout.lines().nth(1).unwrap_or_default().split_whitespace().collect();
    assert_eq!(&newest[..3], ["2", "2", "conversion"], "{stdout}");
    // `converge migrate` without a kind is still the database command.
    let (code, _, stderr) = cli(&address, &["migrate", "--help"]).await?;
    assert_eq!(code, Some(0), "{stderr}");
    Ok(())
}
