//! ResourceService over real gRPC: apply semantics, validation, etags,
//! idempotency, deletion marks, lists and events.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use converge_integration::TestServer;
use converge_integration::api::{
    self, apply, apply_manifest, apply_ok, expect_error, fields, get, json, resource_of, work_kind,
};
use converge_proto::v1::{
    ApplyResourceRequest, BatchApplyResourcesRequest, ConditionStatus, CreateResourceRequest, DeleteResourceRequest,
    EventType, GetResourceRequest, ListResourceEventsRequest, ListResourcesRequest, Phase,
};
use converge_sdk::Client;
use serde_json::json;
use tonic::Code;

async fn server_with_kinds() -> anyhow::Result<(TestServer, Client)> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    let schema = json!({
        "type": "object",
        "properties": {
            "cidr": {"type": "string"},
            "ports": {"type": "array", "items": {
                "type": "object",
                "required": ["number"],
                "properties": {"number": {"type": "integer", "minimum": 1, "maximum": 65535}}
            }},
            "owner": {"type": "object", "properties": {"email": {"type": "string", "pattern": "@"}}}
        }
    });
    apply_manifest(&client, work_kind("vpc", 1, Some(schema))).await?;
    apply_manifest(&client, work_kind("vpc", 2, None)).await?;
    let mut finalized = work_kind("db", 1, None);
    finalized.finalizer_name = "converge.dev/db".into();
    finalized.reactions.push(converge_proto::v1::Reaction {
        name: "teardown".into(),
        trigger: converge_proto::v1::Trigger::DeleteRequested.into(),
        emits: vec![converge_proto::v1::Emit::Finalizer.into()],
        ..Default::default()
    });
    apply_manifest(&client, finalized).await?;
    Ok((server, client))
}

#[tokio::test]
async fn apply_creates_then_updates_only_on_real_change() -> anyhow::Result<()> {
    let (server, client) = server_with_kinds().await?;
    let created = apply_ok(&client, apply("vpc", "main", json!({"cidr": "10.0.0.0/16"}))).await?;
    assert!(created.created);
    let first = resource_of(created)?;
    assert!(uuid::Uuid::parse_str(&first.uid).is_ok());
    assert_eq!(first.generation, 1);
    assert_eq!(first.observed_generation, 0);
    assert_eq!(first.phase(), Phase::Reconciling);
    assert!(first.create_time.is_some() && first.delete_time.is_none());
    let types: Vec<&str> = first.conditions.iter().map(|c| c.r#type.as_str()).collect();
    assert_eq!(types, ["Ready", "Synced"], "derived conditions are always present");
    assert!(first.conditions.iter().all(|c| c.status() == ConditionStatus::Unknown));
    assert!(first.manifest_version > 0);

    // Identical re-apply: nothing changes, not even the resource version.
    let again = apply_ok(&client, apply("vpc", "main", json!({"cidr": "10.0.0.0/16"}))).await?;
    assert!(!again.created);
    let same = resource_of(again)?;
    assert_eq!(same.resource_version, first.resource_version);
    assert_eq!(same.generation, 1);
    assert_eq!(same.etag, first.etag);

    // Labels only: a new resource version and etag, same generation.
    let mut relabel = apply("vpc", "main", json!({"cidr": "10.0.0.0/16"}));
    relabel.labels = BTreeMap::from([("env".into(), "prod".into())]);
    let relabelled = resource_of(apply_ok(&client, relabel).await?)?;
    assert_eq!(relabelled.generation, 1);
    assert_ne!(relabelled.resource_version, first.resource_version);
    assert_ne!(relabelled.etag, first.etag);

    // Spec change: generation 2. Numbers keep their integer form.
    let mut respec = apply(
        "vpc",
        "main",
        json!({"cidr": "10.1.0.0/16", "ports": [{"number": 443}]}),
    );
    respec.labels = relabelled.labels.clone();
    let respecced = resource_of(apply_ok(&client, respec).await?)?;
    assert_eq!(respecced.generation, 2);
    let spec = respecced.spec.as_ref().map(json).unwrap_or_default();
    assert_eq!(spec["ports"][0]["number"], json!(443));
    assert_eq!(get(&client, "vpc", "main").await?.generation, 2);

    // A kind-version flip is a new generation under the other manifest.
    let mut flip = apply(
        "vpc",
        "main",
        json!({"cidr": "10.1.0.0/16", "ports": [{"number": 443}]}),
    );
    flip.kind_version = 2;
    flip.labels = relabelled.labels;
    let flipped = resource_of(apply_ok(&client, flip).await?)?;
    assert_eq!((flipped.kind_version, flipped.generation), (2, 3));
    server.shutdown().await
}

fn batch(requests: Vec<ApplyResourceRequest>) -> BatchApplyResourcesRequest {
    BatchApplyResourcesRequest {
        requests,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_batch_apply_writes_every_item_or_none() -> anyhow::Result<()> {
    let (server, client) = server_with_kinds().await?;
    apply_ok(&client, apply("vpc", "old", json!({"cidr": "10.0.0.0/16"}))).await?;

    // Creates and an update in one call, answered in request order.
    let items = vec![
        apply("vpc", "b", json!({"cidr": "10.2.0.0/16"})),
        apply("vpc", "old", json!({"cidr": "10.9.0.0/16"})),
        apply("vpc", "a", json!({})),
        apply("db", "a", json!({})),
    ];
    let answers = client
        .resources()
        .batch_apply_resources(batch(items.clone()))
        .await?
        .into_inner()
        .responses;
    let seen: Vec<(String, String, bool, i64)> = answers
        .iter()
        .map(|a| {
            let r = a.resource.clone().unwrap_or_default();
            (r.kind, r.name, a.created, r.generation)
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("vpc".to_owned(), "b".to_owned(), true, 1),
            ("vpc".to_owned(), "old".to_owned(), false, 2),
            ("vpc".to_owned(), "a".to_owned(), true, 1),
            ("db".to_owned(), "a".to_owned(), true, 1),
        ]
    );
    let created = answers[0].resource.clone().unwrap_or_default();
    assert_eq!(created.phase(), Phase::Reconciling);
    assert_eq!(get(&client, "vpc", "b").await?.uid, created.uid);
    let events = client
        .resources()
        .list_resource_events(ListResourceEventsRequest {
            kind: "vpc".into(),
            name: "b".into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .events;
    assert_eq!(
        events.iter().map(|e| e.reason.as_str()).collect::<Vec<_>>(),
        ["Created"]
    );
    assert_eq!(events[0].message, "created at generation 1");

    // Re-applying the same batch changes nothing.
    let again = client
        .resources()
        .batch_apply_resources(batch(items))
        .await?
        .into_inner()
        .responses;
    assert!(again.iter().all(|a| !a.created));
    let versions = |answers: &[converge_proto::v1::ApplyResourceResponse]| -> Vec<String> {
        answers
            .iter()
            .map(|a| a.resource.clone().unwrap_or_default().resource_version)
            .collect()
    };
    assert_eq!(versions(&again), versions(&answers));

    // One bad item refuses the batch: the good items before and after it
    // are not written, and the violation names the item.
    let refused = client
        .resources()
        .batch_apply_resources(batch(vec![
            apply("vpc", "c", json!({})),
            apply("vpc", "d", json!({"ports": [{"number": 0}]})),
            apply("vpc", "e", json!({})),
        ]))
        .await;
    let violations = expect_error(refused, Code::InvalidArgument, "SPEC_SCHEMA_VIOLATION");
    assert_eq!(fields(&violations), ["/requests/1/spec/ports/0/number"]);
    for name in ["c", "e"] {
        let missing = client
            .resources()
            .get_resource(GetResourceRequest {
                kind: "vpc".into(),
                name: name.into(),
            })
            .await;
        assert_eq!(missing.map(|_| ()).unwrap_err().code(), Code::NotFound);
    }

    // Unknown kinds and refused writes name their item too.
    let unknown = client
        .resources()
        .batch_apply_resources(batch(vec![apply("vpc", "c", json!({})), apply("nope", "x", json!({}))]))
        .await;
    let violations = expect_error(unknown, Code::NotFound, "KIND_NOT_FOUND");
    assert_eq!(fields(&violations), ["/requests/1"]);
    let mut stale = apply("vpc", "old", json!({}));
    stale.etag = Some("W/\"nope\"".into());
    let mismatch = client.resources().batch_apply_resources(batch(vec![stale])).await;
    expect_error(mismatch, Code::Aborted, "ETAG_MISMATCH");

    // Input checks report every bad item at once.
    let mut with_id = apply("vpc", "f", json!({}));
    with_id.request_id = "item-id".into();
    let malformed = client
        .resources()
        .batch_apply_resources(batch(vec![
            apply("vpc", "Bad_Name", json!({})),
            with_id,
            apply("vpc", "g", json!({})),
        ]))
        .await;
    let violations = expect_error(malformed, Code::InvalidArgument, "INVALID_NAME");
    assert_eq!(fields(&violations), ["/requests/0/name", "/requests/1/request_id"]);
    let repeated = client
        .resources()
        .batch_apply_resources(batch(vec![apply("vpc", "h", json!({})), apply("vpc", "h", json!({}))]))
        .await;
    let violations = expect_error(repeated, Code::InvalidArgument, "INVALID_FIELD");
    assert_eq!(fields(&violations), ["/requests/1/name"]);
    let empty = client.resources().batch_apply_resources(batch(Vec::new())).await;
    let violations = expect_error(empty, Code::InvalidArgument, "INVALID_FIELD");
    assert_eq!(fields(&violations), ["/requests"]);
    let too_many = (0..1001).map(|i| apply("vpc", &format!("n{i}"), json!({}))).collect();
    let violations = expect_error(
        client.resources().batch_apply_resources(batch(too_many)).await,
        Code::InvalidArgument,
        "INVALID_FIELD",
    );
    assert_eq!(fields(&violations), ["/requests"]);

    // A batch under a request id answers its retry from the first call.
    let mut keyed = batch(vec![apply("vpc", "k1", json!({})), apply("vpc", "k2", json!({}))]);
    keyed.request_id = "batch-1".into();
    let first = client
        .resources()
        .batch_apply_resources(keyed.clone())
        .await?
        .into_inner();
    let retry = client.resources().batch_apply_resources(keyed).await?.into_inner();
    assert_eq!(first, retry);
    assert!(retry.responses.iter().all(|a| a.created));
    server.shutdown().await
}

/// The creation time in a UUIDv7's first 48 bits, in Unix milliseconds.
fn uuid_v7_millis(id: &uuid::Uuid) -> u64 {
    id.as_bytes()[..6]
        .iter()
        .fold(0, |ms, byte| (ms << 8) | u64::from(*byte))
}

#[tokio::test]
async fn ids_are_uuid_v7_in_creation_order() -> anyhow::Result<()> {
    let (server, client) = server_with_kinds().await?;
    let now_ms = || -> anyhow::Result<u64> {
        Ok(u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_millis(),
        )?)
    };
    let before = now_ms()?;
    let items: Vec<ApplyResourceRequest> = (0..50)
        .map(|i| apply("vpc", &format!("id-{i:02}"), json!({})))
        .collect();
    let first: Vec<uuid::Uuid> = client
        .resources()
        .batch_apply_resources(batch(items))
        .await?
        .into_inner()
        .responses
        .iter()
        .map(|a| uuid::Uuid::parse_str(&a.resource.clone().unwrap_or_default().uid))
        .collect::<Result<_, _>>()?;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let later =
        uuid::Uuid::parse_str(&resource_of(apply_ok(&client, apply("vpc", "id-later", json!({}))).await?)?.uid)?;
    let after = now_ms()?;

    assert_eq!(
        first.iter().collect::<BTreeSet<_>>().len(),
        first.len(),
        "no two ids alike"
    );
    for id in first.iter().chain([&later]) {
        assert_eq!(id.get_version_num(), 7, "{id}: the UUIDv7 layout");
        assert_eq!(id.get_variant(), uuid::Variant::RFC4122, "{id}");
        // The database's clock and this process's are the same machine's.
        let ms = uuid_v7_millis(id);
        assert!(
            (before.saturating_sub(1_000)..=after + 1_000).contains(&ms),
            "{id}: created at {ms}"
        );
    }
    assert!(first.iter().all(|id| *id < later), "a later resource has a greater id");

    // Many ids at once do not collide (the random part is 74 bits).
    let pool = server.database().pool();
    let (distinct, total): (i64, i64) = sqlx::query_as(
        "SELECT count(DISTINCT id), count(*) FROM (SELECT time_ordered_uuid() AS id FROM generate_series(1, 100000)) s",
    )
    .fetch_one(pool)
    .await?;
    assert_eq!(distinct, total);
    server.shutdown().await
}

#[tokio::test]
async fn invalid_specs_report_every_nested_pointer() -> anyhow::Result<()> {
    let (server, client) = server_with_kinds().await?;
    let bad = json!({
        "cidr": 10,
        "ports": [{"number": 80}, {"number": 70000}, {}],
        "owner": {"email": "nobody"}
    });
    let v = expect_error(
        client.resources().apply_resource(apply("vpc", "x", bad)).await,
        Code::InvalidArgument,
        "SPEC_SCHEMA_VIOLATION",
    );
    let got: BTreeSet<&str> = fields(&v).into_iter().collect();
    let want: BTreeSet<&str> = [
        "/spec/cidr",
        "/spec/ports/1/number",
        "/spec/ports/2",
        "/spec/owner/email",
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want, "{v:?}");
    expect_error(
        client
            .resources()
            .get_resource(GetResourceRequest {
                kind: "vpc".into(),
                name: "x".into(),
            })
            .await,
        Code::NotFound,
        "RESOURCE_NOT_FOUND",
    );
    server.shutdown().await
}

#[tokio::test]
async fn bad_names_unknown_kinds_and_oversize_specs_are_refused() -> anyhow::Result<()> {
    let (server, client) = server_with_kinds().await?;
    for name in ["", "Upper", "under_score", "-lead", "trail-", "a..b", &"x".repeat(254)] {
        let v = expect_error(
            client.resources().apply_resource(apply("vpc", name, json!({}))).await,
            Code::InvalidArgument,
            "INVALID_NAME",
        );
        assert_eq!(fields(&v), ["/name"], "name {name:?}");
    }
    let mut labelled = apply("vpc", "ok", json!({}));
    labelled.labels = BTreeMap::from([("bad key!".into(), "v".into())]);
    let v = expect_error(
        client.resources().apply_resource(labelled).await,
        Code::InvalidArgument,
        "INVALID_LABELS",
    );
    assert_eq!(fields(&v), ["/labels/bad key!"]);

    expect_error(
        client
            .resources()
            .apply_resource(apply("nosuchkind", "a", json!({})))
            .await,
        Code::NotFound,
        "KIND_NOT_FOUND",
    );
    let mut wrong_version = apply("vpc", "a", json!({}));
    wrong_version.kind_version = 9;
    expect_error(
        client.resources().apply_resource(wrong_version).await,
        Code::NotFound,
        "KIND_NOT_FOUND",
    );
    let mut zero = apply("vpc", "a", json!({}));
    zero.kind_version = 0;
    let v = expect_error(
        client.resources().apply_resource(zero).await,
        Code::InvalidArgument,
        "INVALID_FIELD",
    );
    assert_eq!(fields(&v), ["/kind_version"]);

    // Over the 1 MiB spec limit (but under the 16 MiB message limit).
    let big = json!({"cidr": "x".repeat(1_100_000)});
    let v = expect_error(
        client.resources().apply_resource(apply("vpc", "big", big)).await,
        Code::ResourceExhausted,
        "SPEC_TOO_LARGE",
    );
    assert_eq!(fields(&v), ["/spec"]);
    server.shutdown().await
}

#[tokio::test]
async fn etags_guard_writes() -> anyhow::Result<()> {
    let (server, client) = server_with_kinds().await?;
    let first = resource_of(apply_ok(&client, apply("vpc", "e", json!({"cidr": "a"}))).await?)?;
    let second = resource_of(apply_ok(&client, apply("vpc", "e", json!({"cidr": "b"}))).await?)?;

    let mut stale = apply("vpc", "e", json!({"cidr": "c"}));
    stale.etag = Some(first.etag.clone());
    expect_error(
        client.resources().apply_resource(stale).await,
        Code::Aborted,
        "ETAG_MISMATCH",
    );
    let mut fresh = apply("vpc", "e", json!({"cidr": "c"}));
    fresh.etag = Some(second.etag.clone());
    apply_ok(&client, fresh).await?;

    let mut missing = apply("vpc", "nope", json!({}));
    missing.etag = Some(second.etag);
    expect_error(
        client.resources().apply_resource(missing).await,
        Code::NotFound,
        "RESOURCE_NOT_FOUND",
    );
    expect_error(
        client
            .resources()
            .delete_resource(DeleteResourceRequest {
                kind: "vpc".into(),
                name: "e".into(),
                etag: Some(first.etag),
                ..Default::default()
            })
            .await,
        Code::Aborted,
        "ETAG_MISMATCH",
    );
    server.shutdown().await
}

#[tokio::test]
async fn request_ids_make_writes_idempotent() -> anyhow::Result<()> {
    let (server, client) = server_with_kinds().await?;
    let mut request = apply("vpc", "idem", json!({"cidr": "a"}));
    request.request_id = "req-1".into();
    let first = apply_ok(&client, request.clone()).await?;
    let replay = apply_ok(&client, request.clone()).await?;
    assert_eq!(first, replay, "a retry returns the first answer");
    assert!(replay.created);

    let mut different = request.clone();
    different.spec = Some(api::object(json!({"cidr": "b"})));
    expect_error(
        client.resources().apply_resource(different).await,
        Code::InvalidArgument,
        "REQUEST_ID_REUSED",
    );
    assert_eq!(get(&client, "vpc", "idem").await?.generation, 1, "no second effect");

    // A create retried after success returns the resource, not ALREADY_EXISTS.
    let create = CreateResourceRequest {
        kind: "vpc".into(),
        kind_version: 1,
        name: "made".into(),
        request_id: "req-2".into(),
        ..Default::default()
    };
    let made = client.resources().create_resource(create.clone()).await?.into_inner();
    let again = client.resources().create_resource(create.clone()).await?.into_inner();
    assert_eq!(made, again);
    let without_id = CreateResourceRequest {
        request_id: String::new(),
        ..create
    };
    expect_error(
        client.resources().create_resource(without_id).await,
        Code::AlreadyExists,
        "NAME_TAKEN",
    );

    // Concurrent retries of one request have one effect.
    let mut racing = apply("vpc", "race", json!({"cidr": "r"}));
    racing.request_id = "req-3".into();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let client = client.clone();
        let racing = racing.clone();
        tasks.push(tokio::spawn(
            async move { client.resources().apply_resource(racing).await },
        ));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await??.into_inner());
    }
    assert!(
        answers.windows(2).all(|w| w[0] == w[1]),
        "all retries see the first answer"
    );
    assert!(answers[0].created);

    let mut too_long = apply("vpc", "x", json!({}));
    too_long.request_id = "r".repeat(129);
    let v = expect_error(
        client.resources().apply_resource(too_long).await,
        Code::InvalidArgument,
        "INVALID_FIELD",
    );
    assert_eq!(fields(&v), ["/request_id"]);
    server.shutdown().await
}

#[tokio::test]
async fn validate_only_writes_nothing() -> anyhow::Result<()> {
    let (server, client) = server_with_kinds().await?;
    let mut dry = apply("vpc", "dry", json!({"cidr": "a"}));
    dry.validate_only = true;
    let answer = apply_ok(&client, dry.clone()).await?;
    assert!(answer.created);
    expect_error(
        client
            .resources()
            .get_resource(GetResourceRequest {
                kind: "vpc".into(),
                name: "dry".into(),
            })
            .await,
        Code::NotFound,
        "RESOURCE_NOT_FOUND",
    );
    dry.spec = Some(api::object(json!({"cidr": 1})));
    expect_error(
        client.resources().apply_resource(dry).await,
        Code::InvalidArgument,
        "SPEC_SCHEMA_VIOLATION",
    );
    server.shutdown().await
}

#[tokio::test]
async fn deletion_marks_the_resource_and_blocks_writes() -> anyhow::Result<()> {
    let (server, client) = server_with_kinds().await?;
    apply_ok(&client, apply("db", "orders", json!({}))).await?;
    let delete = DeleteResourceRequest {
        kind: "db".into(),
        name: "orders".into(),
        ..Default::default()
    };
    let deleted = client
        .resources()
        .delete_resource(delete.clone())
        .await?
        .into_inner()
        .resource
        .ok_or_else(|| anyhow::anyhow!("no resource"))?;
    assert_eq!(deleted.phase(), Phase::Deleting);
    assert!(deleted.delete_time.is_some());
    assert_eq!(deleted.finalizers, ["converge.dev/db"], "seeded from the manifest");

    // Idempotent: a second delete returns the same state.
    let again = client
        .resources()
        .delete_resource(delete)
        .await?
        .into_inner()
        .resource
        .ok_or_else(|| anyhow::anyhow!("no resource"))?;
    assert_eq!(again.resource_version, deleted.resource_version);

    expect_error(
        client
            .resources()
            .apply_resource(apply("db", "orders", json!({"x": 1})))
            .await,
        Code::FailedPrecondition,
        "DELETION_PENDING",
    );
    expect_error(
        client
            .resources()
            .create_resource(CreateResourceRequest {
                kind: "db".into(),
                kind_version: 1,
                name: "orders".into(),
                ..Default::default()
            })
            .await,
        Code::AlreadyExists,
        "NAME_TAKEN",
    );
    expect_error(
        client
            .resources()
            .delete_resource(DeleteResourceRequest {
                kind: "db".into(),
                name: "ghost".into(),
                ..Default::default()
            })
            .await,
        Code::NotFound,
        "RESOURCE_NOT_FOUND",
    );
    let missing = client
        .resources()
        .delete_resource(DeleteResourceRequest {
            kind: "db".into(),
            name: "ghost".into(),
            allow_missing: true,
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(missing.resource.is_none());
    server.shutdown().await
}

fn labelled(kind: &str, name: &str, labels: &[(&str, &str)]) -> ApplyResourceRequest {
    let mut request = apply(kind, name, json!({}));
    request.labels = labels.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
    request
}

async fn list_names(client: &Client, request: ListResourcesRequest) -> anyhow::Result<Vec<String>> {
    let mut names = Vec::new();
    let mut request = request;
    loop {
        let page = client.resources().list_resources(request.clone()).await?.into_inner();
        names.extend(page.resources.into_iter().map(|r| r.name));
        if page.next_page_token.is_empty() {
            return Ok(names);
        }
        request.page_token = page.next_page_token;
    }
}

#[tokio::test]
async fn lists_filter_by_kind_phase_and_labels() -> anyhow::Result<()> {
    let (server, client) = server_with_kinds().await?;
    apply_ok(&client, labelled("vpc", "a", &[("env", "prod"), ("tier", "web")])).await?;
    apply_ok(&client, labelled("vpc", "b", &[("env", "dev"), ("tier", "web")])).await?;
    apply_ok(&client, labelled("vpc", "c", &[("env", "prod")])).await?;
    apply_ok(&client, labelled("db", "d", &[("env", "prod"), ("legacy", "")])).await?;
    client
        .resources()
        .delete_resource(DeleteResourceRequest {
            kind: "db".into(),
            name: "d".into(),
            ..Default::default()
        })
        .await?;

    let by = |selector: &str| ListResourcesRequest {
        label_selector: selector.into(),
        ..Default::default()
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    assert_eq!(sorted(list_names(&client, by("")).await?), ["a", "b", "c", "d"]);
    assert_eq!(sorted(list_names(&client, by("env=prod")).await?), ["a", "c", "d"]);
    assert_eq!(sorted(list_names(&client, by("env!=prod")).await?), ["b"]);
    assert_eq!(
        sorted(list_names(&client, by("env in (dev, prod),tier")).await?),
        ["a", "b"]
    );
    assert_eq!(sorted(list_names(&client, by("tier notin (web)")).await?), ["c", "d"]);
    assert_eq!(sorted(list_names(&client, by("!tier,!legacy")).await?), ["c"]);
    let vpcs = ListResourcesRequest {
        kind: Some("vpc".into()),
        ..Default::default()
    };
    assert_eq!(
        list_names(&client, vpcs.clone()).await?,
        ["c", "b", "a"],
        "newest first"
    );
    let deleting = ListResourcesRequest {
        phases: vec![Phase::Deleting.into(), Phase::Failed.into()],
        ..Default::default()
    };
    assert_eq!(list_names(&client, deleting).await?, ["d"]);
    let reconciling = ListResourcesRequest {
        phases: vec![Phase::Reconciling.into()],
        roots_only: true,
        ..Default::default()
    };
    assert_eq!(sorted(list_names(&client, reconciling).await?), ["a", "b", "c"]);
    let v2 = ListResourcesRequest {
        kind_version: Some(2),
        ..Default::default()
    };
    assert!(list_names(&client, v2).await?.is_empty());

    let v = expect_error(
        client.resources().list_resources(by("env in (prod")).await,
        Code::InvalidArgument,
        "INVALID_LABEL_SELECTOR",
    );
    assert_eq!(fields(&v), ["/label_selector"]);
    let v = expect_error(
        client
            .resources()
            .list_resources(ListResourcesRequest {
                phases: vec![0],
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
        "INVALID_FIELD",
    );
    assert_eq!(fields(&v), ["/phases/0"]);

    // A token is bound to its filters.
    let page = client
        .resources()
        .list_resources(ListResourcesRequest { page_size: 1, ..vpcs })
        .await?
        .into_inner();
    expect_error(
        client
            .resources()
            .list_resources(ListResourcesRequest {
                page_token: page.next_page_token,
                ..by("env=prod")
            })
            .await,
        Code::InvalidArgument,
        "INVALID_PAGE_TOKEN",
    );
    expect_error(
        client
            .resources()
            .list_resources(ListResourcesRequest {
                page_token: "garbage!".into(),
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
        "INVALID_PAGE_TOKEN",
    );
    server.shutdown().await
}

#[tokio::test]
async fn pagination_is_stable_under_concurrent_inserts() -> anyhow::Result<()> {
    let (server, client) = server_with_kinds().await?;
    let mut existing = BTreeSet::new();
    for i in 0..120 {
        let name = format!("r{i:03}");
        apply_ok(&client, apply("vpc", &name, json!({}))).await?;
        existing.insert(name);
    }
    // Insert more while paging through.
    let writer = {
        let client = client.clone();
        tokio::spawn(async move {
            for i in 0..60 {
                let _ = client
                    .resources()
                    .apply_resource(apply("vpc", &format!("n{i:03}"), json!({})))
                    .await;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let mut seen = Vec::new();
    let mut request = ListResourcesRequest {
        kind: Some("vpc".into()),
        page_size: 7,
        ..Default::default()
    };
    loop {
        let page = client.resources().list_resources(request.clone()).await?.into_inner();
        assert!(page.resources.len() <= 7);
        seen.extend(page.resources.into_iter().map(|r| r.name));
        if page.next_page_token.is_empty() {
            break;
        }
        request.page_token = page.next_page_token;
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    writer.await?;
    let unique: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no duplicates");
    let missing: Vec<&String> = existing.iter().filter(|n| !unique.contains(n)).collect();
    assert!(missing.is_empty(), "every pre-existing resource appears: {missing:?}");
    server.shutdown().await
}

#[tokio::test]
async fn events_are_aggregated_runs_listed_newest_first() -> anyhow::Result<()> {
    let (server, client) = server_with_kinds().await?;
    // A kind with a finalizer: the deleted resource stays (Deleting) while
    // no worker runs its teardown, so its events can still be read.
    apply_ok(&client, apply("db", "ev", json!({"cidr": "0"}))).await?;
    for i in 1..=4 {
        apply_ok(&client, apply("db", "ev", json!({"cidr": i.to_string()}))).await?;
    }
    client
        .resources()
        .delete_resource(DeleteResourceRequest {
            kind: "db".into(),
            name: "ev".into(),
            ..Default::default()
        })
        .await?;
    let list = |request: ListResourceEventsRequest| {
        let client = client.clone();
        async move {
            client
                .resources()
                .list_resource_events(request)
                .await
                .map(|r| r.into_inner())
        }
    };
    let base = ListResourceEventsRequest {
        kind: "db".into(),
        name: "ev".into(),
        ..Default::default()
    };
    let all = list(base.clone()).await?;
    let runs: Vec<(String, i64)> = all.events.iter().map(|e| (e.reason.clone(), e.count)).collect();
    assert_eq!(
        runs,
        [
            ("DeletionRequested".into(), 1),
            ("SpecChanged".into(), 4),
            ("Created".into(), 1)
        ]
    );
    let spec_run = &all.events[1];
    assert_eq!(spec_run.message, "generation 5", "the latest message");
    assert_eq!(spec_run.generation, 5);
    assert_eq!(spec_run.r#type(), EventType::Normal);
    assert_eq!(spec_run.category, "lifecycle");
    let micros = |t: &Option<prost_types::Timestamp>| t.as_ref().map(|t| (t.seconds, t.nanos));
    assert!(micros(&spec_run.first_time) < micros(&spec_run.last_time));

    let by_reason = list(ListResourceEventsRequest {
        reason: Some("Created".into()),
        ..base.clone()
    })
    .await?;
    assert_eq!(by_reason.events.len(), 1);
    let warnings = list(ListResourceEventsRequest {
        r#type: EventType::Warning.into(),
        ..base.clone()
    })
    .await?;
    assert!(warnings.events.is_empty());
    let future = list(ListResourceEventsRequest {
        since: Some(prost_types::Timestamp {
            seconds: chrono::Utc::now().timestamp() + 3600,
            nanos: 0,
        }),
        ..base.clone()
    })
    .await?;
    assert!(future.events.is_empty());

    let mut paged = Vec::new();
    let mut request = ListResourceEventsRequest { page_size: 1, ..base };
    loop {
        let page = list(request.clone()).await?;
        paged.extend(page.events.into_iter().map(|e| e.reason));
        if page.next_page_token.is_empty() {
            break;
        }
        request.page_token = page.next_page_token;
    }
    assert_eq!(paged, ["DeletionRequested", "SpecChanged", "Created"]);

    expect_error(
        client
            .resources()
            .list_resource_events(ListResourceEventsRequest {
                kind: "vpc".into(),
                name: "nope".into(),
                ..Default::default()
            })
            .await,
        Code::NotFound,
        "RESOURCE_NOT_FOUND",
    );
    server.shutdown().await
}

#[tokio::test]
async fn a_request_over_the_message_limit_is_resource_exhausted_with_error_info() -> anyhow::Result<()> {
    let (server, client) = server_with_kinds().await?;
    // A raw client that is willing to send what the SDK would refuse locally.
    let mut raw = converge_proto::v1::resource_service_client::ResourceServiceClient::new(client.channel())
        .max_encoding_message_size(64 * 1024 * 1024);
    let huge = json!({"cidr": "x".repeat(17 * 1024 * 1024)});
    expect_error(
        raw.apply_resource(apply("vpc", "huge", huge)).await,
        Code::ResourceExhausted,
        "REQUEST_TOO_LARGE",
    );
    // The connection keeps working afterwards.
    apply_ok(&client, apply("vpc", "small", json!({}))).await?;
    server.shutdown().await
}

#[tokio::test]
async fn generate_name_appends_a_unique_suffix_and_a_retry_returns_the_same_resource() -> anyhow::Result<()> {
    let (server, client) = server_with_kinds().await?;
    let create = |generate_name: &str, name: &str, request_id: &str| CreateResourceRequest {
        kind: "vpc".into(),
        kind_version: 1,
        name: name.into(),
        generate_name: generate_name.into(),
        request_id: request_id.into(),
        spec: Some(api::object(json!({"cidr": "10.0.0.0/16"}))),
        ..Default::default()
    };
    let mut names = BTreeSet::new();
    for _ in 0..20 {
        let created = client
            .resources()
            .create_resource(create("web-", "", ""))
            .await?
            .into_inner()
            .resource
            .unwrap_or_default();
        let suffix = created.name.strip_prefix("web-").unwrap_or_default();
        assert_eq!(suffix.len(), 5, "{}", created.name);
        assert!(
            suffix.bytes().all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b)),
            "{}",
            created.name
        );
        names.insert(created.name);
    }
    assert_eq!(names.len(), 20);

    // The same request id: the same resource, the same generated name.
    let first = client
        .resources()
        .create_resource(create("db-", "", "gen-1"))
        .await?
        .into_inner()
        .resource
        .unwrap_or_default();
    let again = client
        .resources()
        .create_resource(create("db-", "", "gen-1"))
        .await?
        .into_inner()
        .resource
        .unwrap_or_default();
    assert_eq!(
        (again.name.as_str(), again.uid.as_str()),
        (first.name.as_str(), first.uid.as_str())
    );
    assert_eq!(get(&client, "vpc", &first.name).await?.uid, first.uid);

    // Refusals, and nothing created by them.
    let before = client
        .resources()
        .list_resources(ListResourcesRequest {
            kind: Some("vpc".into()),
            page_size: 1000,
            ..Default::default()
        })
        .await?
        .into_inner()
        .resources
        .len();
    let both = expect_error(
        client.resources().create_resource(create("web-", "named", "")).await,
        Code::InvalidArgument,
        "INVALID_FIELD",
    );
    assert_eq!(fields(&both), ["/generate_name"]);
    for bad in ["Web_", &"a".repeat(249)] {
        let refused = expect_error(
            client.resources().create_resource(create(bad, "", "")).await,
            Code::InvalidArgument,
            "INVALID_NAME",
        );
        assert_eq!(fields(&refused), ["/generate_name"]);
    }
    let after = client
        .resources()
        .list_resources(ListResourcesRequest {
            kind: Some("vpc".into()),
            page_size: 1000,
            ..Default::default()
        })
        .await?
        .into_inner()
        .resources
        .len();
    assert_eq!(before, after);
    server.shutdown().await
}
