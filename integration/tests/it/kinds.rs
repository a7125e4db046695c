//! KindService over real gRPC: manifests, validation, schema evolution,
//! kind config, and enforcement of the latest manifest on every pod.

use converge_integration::api::{apply, apply_manifest, apply_ok, expect_error, fields, reaction, work_kind};
use converge_integration::{TestDatabase, TestServer};
use converge_proto::v1::{
    ApplyKindManifestRequest, DeleteKindManifestRequest, Emit, GetKindConfigRequest, GetKindManifestRequest,
    KindConfig, ListKindManifestsRequest, Trigger, UpdateKindConfigRequest,
};
use converge_service::config::Role;
use serde_json::json;
use tonic::Code;

#[tokio::test]
async fn manifests_are_stored_reapplied_listed_and_deleted() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    let schema = json!({"type": "object", "properties": {"cidr": {"type": "string"}}});
    let manifest = work_kind("vpc", 1, Some(schema));

    let first = client
        .kinds()
        .apply_kind_manifest(ApplyKindManifestRequest {
            manifest: Some(manifest.clone()),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(first.created && !first.unchanged);
    let stored = first.manifest.ok_or_else(|| anyhow::anyhow!("no manifest"))?;
    assert!(stored.manifest_version > 0);
    assert_eq!(stored.reactions.len(), 1);

    // Re-applying the same manifest writes nothing.
    let again = client
        .kinds()
        .apply_kind_manifest(ApplyKindManifestRequest {
            manifest: Some(manifest.clone()),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(!again.created && again.unchanged);
    let again_manifest = again.manifest.ok_or_else(|| anyhow::anyhow!("no manifest"))?;
    assert_eq!(again_manifest.update_time, stored.update_time);

    let got = client
        .kinds()
        .get_kind_manifest(GetKindManifestRequest {
            kind: "vpc".into(),
            kind_version: 1,
        })
        .await?
        .into_inner()
        .manifest
        .ok_or_else(|| anyhow::anyhow!("no manifest"))?;
    assert_eq!(got.manifest_version, stored.manifest_version);
    assert_eq!(got.spec_schema, manifest.spec_schema);

    // Paginate five manifests two at a time.
    for (kind, version) in [("vpc", 2), ("account", 1), ("route", 1), ("tgw", 1)] {
        apply_manifest(&client, work_kind(kind, version, None)).await?;
    }
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .kinds()
            .list_kind_manifests(ListKindManifestsRequest {
                kind: None,
                page_size: 2,
                page_token: token.clone(),
            })
            .await?
            .into_inner();
        seen.extend(page.manifests.iter().map(|m| format!("{}@{}", m.kind, m.kind_version)));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(seen, ["account@1", "route@1", "tgw@1", "vpc@1", "vpc@2"]);
    let only_vpc = client
        .kinds()
        .list_kind_manifests(ListKindManifestsRequest {
            kind: Some("vpc".into()),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert_eq!(only_vpc.manifests.len(), 2);

    // A version with resources cannot be deleted; an unused one can.
    apply_ok(&client, apply("vpc", "a", json!({"cidr": "10.0.0.0/16"}))).await?;
    expect_error(
        client
            .kinds()
            .delete_kind_manifest(DeleteKindManifestRequest {
                kind: "vpc".into(),
                kind_version: 1,
                ..Default::default()
            })
            .await,
        Code::FailedPrecondition,
        "KIND_IN_USE",
    );
    client
        .kinds()
        .delete_kind_manifest(DeleteKindManifestRequest {
            kind: "vpc".into(),
            kind_version: 2,
            ..Default::default()
        })
        .await?;
    expect_error(
        client
            .kinds()
            .get_kind_manifest(GetKindManifestRequest {
                kind: "vpc".into(),
                kind_version: 2,
            })
            .await,
        Code::NotFound,
        "KIND_NOT_FOUND",
    );
    expect_error(
        client
            .kinds()
            .delete_kind_manifest(DeleteKindManifestRequest {
                kind: "vpc".into(),
                kind_version: 2,
                ..Default::default()
            })
            .await,
        Code::NotFound,
        "KIND_NOT_FOUND",
    );
    client
        .kinds()
        .delete_kind_manifest(DeleteKindManifestRequest {
            kind: "vpc".into(),
            kind_version: 2,
            allow_missing: true,
            ..Default::default()
        })
        .await?;
    server.shutdown().await
}

#[tokio::test]
async fn malformed_manifests_are_refused_with_field_pointers() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    let attempt = |manifest| {
        let client = client.clone();
        async move {
            client
                .kinds()
                .apply_kind_manifest(ApplyKindManifestRequest {
                    manifest: Some(manifest),
                    ..Default::default()
                })
                .await
        }
    };

    let mut bad = work_kind("Bad_Kind", 0, None);
    bad.reactions[0].trigger = Trigger::Unspecified.into();
    let v = expect_error(attempt(bad).await, Code::InvalidArgument, "INVALID_KIND_MANIFEST");
    assert_eq!(
        fields(&v),
        [
            "/manifest/kind",
            "/manifest/kind_version",
            "/manifest/reactions/0/trigger"
        ]
    );

    // Two composers, and a composer that emits no status.
    let mut two_composers = work_kind("bom", 1, None);
    two_composers.reactions = vec![
        reaction("compose", Trigger::SpecChange, &[Emit::Children, Emit::Status]),
        reaction("compose2", Trigger::SpecChange, &[Emit::Children]),
    ];
    let v = expect_error(
        attempt(two_composers).await,
        Code::InvalidArgument,
        "INVALID_KIND_MANIFEST",
    );
    assert!(fields(&v).iter().all(|f| f.starts_with("/manifest/reactions")), "{v:?}");
    assert!(v.len() >= 2, "both problems are reported: {v:?}");

    // A reactor kind may declare only reactor reactions emitting only sideEffect.
    let mut mixed = work_kind("sink", 1, None);
    mixed
        .reactions
        .push(reaction("react", Trigger::Reactor, &[Emit::SideEffect, Emit::Status]));
    expect_error(attempt(mixed).await, Code::InvalidArgument, "INVALID_KIND_MANIFEST");

    // deleteRequested needs a finalizer; operation needs a verb.
    let mut teardown = work_kind("vpc", 1, None);
    teardown
        .reactions
        .push(reaction("teardown", Trigger::DeleteRequested, &[Emit::Finalizer]));
    expect_error(
        attempt(teardown.clone()).await,
        Code::InvalidArgument,
        "INVALID_KIND_MANIFEST",
    );
    teardown.finalizer_name = "converge.dev/vpc".into();
    attempt(teardown).await?;
    let mut verbless = work_kind("vpc", 2, None);
    verbless
        .reactions
        .push(reaction("operate", Trigger::Operation, &[Emit::OperationOutput]));
    let v = expect_error(attempt(verbless).await, Code::InvalidArgument, "INVALID_KIND_MANIFEST");
    assert_eq!(fields(&v), ["/manifest/reactions/1/verb"]);

    // Schemas must compile; the violation points into the schema.
    let not_a_schema = work_kind(
        "db",
        1,
        Some(json!({"type": "object", "properties": {"port": {"type": "nope"}}})),
    );
    let v = expect_error(
        attempt(not_a_schema).await,
        Code::InvalidArgument,
        "INVALID_KIND_MANIFEST",
    );
    assert!(
        fields(&v)
            .iter()
            .any(|f| f.starts_with("/manifest/spec_schema/properties/port/type")),
        "{v:?}"
    );
    let bad_pattern = work_kind("db", 1, Some(json!({"type": "string", "pattern": "(["})));
    let v = expect_error(
        attempt(bad_pattern).await,
        Code::InvalidArgument,
        "INVALID_KIND_MANIFEST",
    );
    assert!(
        fields(&v).iter().any(|f| f.starts_with("/manifest/spec_schema")),
        "{v:?}"
    );

    // Out-of-range policy.
    let mut greedy = work_kind("db", 1, None);
    if let Some(policy) = greedy.policy.as_mut() {
        policy.max_inflight = -1;
    }
    let v = expect_error(attempt(greedy).await, Code::InvalidArgument, "INVALID_KIND_MANIFEST");
    assert_eq!(fields(&v), ["/manifest/policy/max_inflight"]);

    expect_error(
        client
            .kinds()
            .apply_kind_manifest(ApplyKindManifestRequest::default())
            .await,
        Code::InvalidArgument,
        "INVALID_KIND_MANIFEST",
    );
    server.shutdown().await
}

#[tokio::test]
async fn a_schema_change_that_rejects_stored_specs_is_refused() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    let loose = json!({"type": "object", "properties": {"size": {"type": "integer"}}});
    apply_manifest(&client, work_kind("disk", 1, Some(loose))).await?;
    apply_ok(&client, apply("disk", "small", json!({"size": 5}))).await?;
    apply_ok(&client, apply("disk", "nosize", json!({}))).await?;

    let strict =
        json!({"type": "object", "required": ["size"], "properties": {"size": {"type": "integer", "maximum": 100}}});
    let v = expect_error(
        apply_manifest(&client, work_kind("disk", 1, Some(strict))).await,
        Code::FailedPrecondition,
        "SCHEMA_REJECTS_EXISTING_RESOURCES",
    );
    assert_eq!(fields(&v), ["disk/nosize"]);

    // A compatible tightening is accepted and enforced at once.
    let compatible = json!({"type": "object", "properties": {"size": {"type": "integer", "maximum": 100}}});
    apply_manifest(&client, work_kind("disk", 1, Some(compatible))).await?;
    let v = expect_error(
        client
            .resources()
            .apply_resource(apply("disk", "huge", json!({"size": 1000})))
            .await,
        Code::InvalidArgument,
        "SPEC_SCHEMA_VIOLATION",
    );
    assert_eq!(fields(&v), ["/spec/size"]);
    server.shutdown().await
}

#[tokio::test]
async fn every_pod_enforces_the_latest_manifest() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let a = TestServer::start_on(database.clone(), Role::Control).await?;
    let b = TestServer::start_on(database, Role::Control).await?;
    let (ca, cb) = (a.client().await?, b.client().await?);
    let v1 = json!({"type": "object"});
    apply_manifest(&ca, work_kind("app", 1, Some(v1))).await?;
    // B caches the loose manifest by using it.
    apply_ok(&cb, apply("app", "one", json!({"replicas": "three"}))).await?;

    let v2 = json!({"type": "object", "properties": {"replicas": {"type": "integer"}}});
    // "one" violates v2, so fix it first, then tighten through A.
    apply_ok(&cb, apply("app", "one", json!({"replicas": 3}))).await?;
    apply_manifest(&ca, work_kind("app", 1, Some(v2))).await?;
    // B enforces v2 immediately: its writes check the manifest version in force.
    expect_error(
        cb.resources()
            .apply_resource(apply("app", "two", json!({"replicas": "three"})))
            .await,
        Code::InvalidArgument,
        "SPEC_SCHEMA_VIOLATION",
    );
    a.shutdown().await?;
    b.shutdown().await
}

#[tokio::test]
async fn concurrent_writes_never_store_a_spec_the_new_manifest_rejects() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    let strict = json!({"type": "object", "properties": {"n": {"type": "integer", "maximum": 10}}});
    let mut tightened_rounds = 0;
    for round in 0..8 {
        let kind = format!("job{round}");
        apply_manifest(&client, work_kind(&kind, 1, Some(json!({"type": "object"})))).await?;
        // Writers race the tightening with specs the strict schema rejects.
        let mut writers = Vec::new();
        for w in 0..4 {
            let (client, kind) = (client.clone(), kind.clone());
            writers.push(tokio::spawn(async move {
                let mut refused = 0;
                for i in 0..10 {
                    let outcome = client
                        .resources()
                        .apply_resource(apply(&kind, &format!("w{w}-{i}"), json!({"n": 50})))
                        .await;
                    if let Err(status) = outcome {
                        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
                        refused += 1;
                    }
                }
                refused
            }));
        }
        let tightening = apply_manifest(&client, work_kind(&kind, 1, Some(strict.clone()))).await;
        let mut refused = 0;
        for writer in writers {
            refused += writer.await?;
        }
        let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM resources WHERE kind = $1")
            .bind(&kind)
            .fetch_one(server.database().pool())
            .await?;
        match tightening {
            Ok(()) => {
                tightened_rounds += 1;
                // Only writes that committed before the tightening are stored;
                // every later one was refused; none is stored unchecked.
                assert_eq!(stored, 0, "round {round}: specs the new manifest rejects are stored");
                assert_eq!(refused, 40, "round {round}");
            }
            Err(status) => {
                let v = expect_error(
                    Err::<(), _>(status),
                    Code::FailedPrecondition,
                    "SCHEMA_REJECTS_EXISTING_RESOURCES",
                );
                assert!(!v.is_empty());
                assert!(stored > 0, "round {round}: refused although nothing violated it");
            }
        }
    }
    assert!(
        tightened_rounds > 0,
        "the tightening never won the race; the test proved nothing"
    );
    server.shutdown().await
}

#[tokio::test]
async fn kind_config_is_seeded_once_and_edited_live() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, work_kind("queue", 1, None)).await?;
    let get = || {
        let client = client.clone();
        async move {
            client
                .kinds()
                .get_kind_config(GetKindConfigRequest {
                    kind: "queue".into(),
                    kind_version: 1,
                })
                .await
                .map(|r| r.into_inner().config.unwrap_or_default())
        }
    };
    let seeded = get().await?;
    assert_eq!(seeded.max_inflight, 5, "seeded from the manifest's policy");

    let update = |config: KindConfig, paths: &[&str]| {
        let client = client.clone();
        let paths: Vec<String> = paths.iter().map(|p| (*p).to_owned()).collect();
        async move {
            client
                .kinds()
                .update_kind_config(UpdateKindConfigRequest {
                    config: Some(config),
                    update_mask: Some(prost_types::FieldMask { paths }),
                    ..Default::default()
                })
                .await
                .map(|r| r.into_inner().config.unwrap_or_default())
        }
    };
    let edited = update(
        KindConfig {
            kind: "queue".into(),
            kind_version: 1,
            max_inflight: 42,
            task_deadline_secs: 999,
            ..Default::default()
        },
        &["max_inflight"],
    )
    .await?;
    assert_eq!(edited.max_inflight, 42);
    assert_eq!(edited.task_deadline_secs, 0, "fields outside the mask are kept");
    assert_ne!(edited.etag, seeded.etag);

    // Re-applying a changed manifest keeps the operator's edit.
    let mut manifest = work_kind("queue", 1, None);
    manifest.description = "changed".into();
    apply_manifest(&client, manifest).await?;
    assert_eq!(get().await?.max_inflight, 42);

    let stale = KindConfig {
        etag: seeded.etag.clone(),
        ..edited.clone()
    };
    expect_error(update(stale, &["max_inflight"]).await, Code::Aborted, "ETAG_MISMATCH");
    let v = expect_error(
        update(edited.clone(), &["colour"]).await,
        Code::InvalidArgument,
        "INVALID_KIND_CONFIG",
    );
    assert_eq!(fields(&v), ["/update_mask/paths/0"]);
    let negative = KindConfig {
        max_inflight: -3,
        etag: String::new(),
        ..edited
    };
    let v = expect_error(
        update(negative, &["max_inflight"]).await,
        Code::InvalidArgument,
        "INVALID_KIND_CONFIG",
    );
    assert_eq!(fields(&v), ["/config/max_inflight"]);

    // Retiring a version refuses new resources but not updates of existing ones.
    apply_ok(&client, apply("queue", "old", json!({}))).await?;
    update(
        KindConfig {
            kind: "queue".into(),
            kind_version: 1,
            retired: true,
            ..Default::default()
        },
        &["retired"],
    )
    .await?;
    expect_error(
        client
            .resources()
            .apply_resource(apply("queue", "new", json!({})))
            .await,
        Code::FailedPrecondition,
        "KIND_VERSION_RETIRED",
    );
    apply_ok(&client, apply("queue", "old", json!({"x": 1}))).await?;
    server.shutdown().await
}
