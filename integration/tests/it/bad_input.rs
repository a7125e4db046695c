//! Bad input over real gRPC: every caller mistake is a clear, small error
//! with one ErrorInfo, never INTERNAL, and never changes what is stored.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use converge_integration::TestServer;
use converge_integration::api::{
    apply, apply_manifest, apply_ok, expect_error, fields, object, resource_of, work_kind,
};
use converge_proto::v1::{
    ApplyKindManifestRequest, ApplyProviderConfigRequest, ApplyReactorBindingRequest, ApplyResourceRequest,
    BatchApplyResourcesRequest, CreateResourceRequest, DeleteKindManifestRequest, DeleteResourceRequest,
    DeliveryResourceSelector, ExplainResourceRequest, GetKindConfigRequest, GetKindManifestRequest,
    GetOperationRequest, GetResourceGraphRequest, GetResourceRequest, GetVersionRequest, InvokeOperationRequest,
    KindConfig, ListClusterMembersRequest, ListKindManifestsRequest, ListOperationsRequest, ListProviderConfigsRequest,
    ListReactorBindingsRequest, ListReactorDeliveriesRequest, ListResourceEventsRequest, ListResourcesRequest,
    ListSpecRevisionsRequest, ProviderConfig, QuarantineResourceRequest, ReactorBinding, ReconcileResourceRequest,
    RedriveReactorDeliveriesRequest, ResourceRef, RollbackResourceRequest, UnquarantineResourceRequest,
    UpdateKindConfigRequest, WatchResourceEventsRequest, WatchResourcesRequest,
};
use converge_proto::worker_v1::{self as wpb, WorkStreamRequest};
use converge_sdk::Client;
use serde_json::{Value, json};
use tonic::{Code, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::{ErrorDetail, StatusExt};

/// The most a status may take: message plus encoded details.
const MAX_STATUS_BYTES: usize = 8 * 1024;

/// A JSON value nested `depth` levels (objects and arrays alternating).
fn nested(depth: usize) -> Value {
    let mut value = json!("leaf");
    for i in 0..depth {
        value = if i % 2 == 0 {
            json!({ "k": value })
        } else {
            json!([value])
        };
    }
    value
}

/// A spec whose deepest container is at `depth` (the spec object is level 1).
fn spec_of_depth(depth: usize) -> Value {
    json!({ "a": nested(depth - 1) })
}

/// Asserts the contract's error shape: not INTERNAL/UNKNOWN, exactly one
/// ErrorInfo in converge's domain, and small.
fn check_status(what: &str, status: &Status) {
    assert!(
        !matches!(status.code(), Code::Internal | Code::Unknown),
        "{what}: {:?} {}",
        status.code(),
        status.message()
    );
    let infos: Vec<_> = status
        .get_error_details_vec()
        .into_iter()
        .filter_map(|d| match d {
            ErrorDetail::ErrorInfo(info) => Some(info),
            _ => None,
        })
        .collect();
    assert_eq!(infos.len(), 1, "{what}: one ErrorInfo in {status:?}");
    assert_eq!(infos[0].domain, "converge.dev", "{what}");
    let size = status.message().len() + status.details().len();
    assert!(size <= MAX_STATUS_BYTES, "{what}: a {size}-byte status");
}

async fn server_with_kind() -> anyhow::Result<(TestServer, Client)> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    let schema = json!({"type": "object", "properties": {"size": {"type": "integer"}}});
    apply_manifest(&client, work_kind("box", 1, Some(schema))).await?;
    Ok((server, client))
}

#[tokio::test]
async fn deep_values_are_invalid_argument_at_any_depth() -> anyhow::Result<()> {
    let (server, client) = server_with_kind().await?;
    let limit = converge_proto::json::MAX_DEPTH;

    // At the limit: accepted.
    apply_ok(&client, apply("box", "at-limit", spec_of_depth(limit))).await?;

    // Just past it: refused by converge, with a pointer into the spec.
    let mut request = apply("box", "past-limit", spec_of_depth(limit + 1));
    request.validate_only = true;
    let violations = expect_error(
        client.resources().apply_resource(request).await,
        Code::InvalidArgument,
        "NESTING_TOO_DEEP",
    );
    assert!(fields(&violations)[0].starts_with("/spec/a/"), "{violations:?}");

    // Far past it: refused while decoding, in the same terms.
    for depth in [40, 200] {
        let result = client
            .resources()
            .apply_resource(apply("box", "far-past", spec_of_depth(depth)))
            .await;
        if let Err(status) = &result {
            check_status("deep spec", status);
        }
        expect_error(result, Code::InvalidArgument, "NESTING_TOO_DEEP");
    }

    // Manifest schemas follow the same limit.
    let mut manifest = work_kind("deep", 1, Some(spec_of_depth(limit + 3)));
    manifest.description = "deep schema".into();
    let violations = expect_error(
        apply_manifest(&client, manifest).await,
        Code::InvalidArgument,
        "NESTING_TOO_DEEP",
    );
    assert!(
        fields(&violations)[0].starts_with("/manifest/spec_schema/"),
        "{violations:?}"
    );
    let manifest = work_kind("deeper", 1, Some(spec_of_depth(120)));
    expect_error(
        apply_manifest(&client, manifest).await,
        Code::InvalidArgument,
        "NESTING_TOO_DEEP",
    );
    server.shutdown().await
}

#[tokio::test]
async fn long_label_keys_are_clipped_in_every_error() -> anyhow::Result<()> {
    let (server, client) = server_with_kind().await?;
    for size in [5_000, 60_000] {
        let key = format!("{}/name", "k".repeat(size));
        let mut request = apply("box", "labelled", json!({}));
        request.labels = BTreeMap::from([(key.clone(), "v".into()), (format!("{key}2"), "w".repeat(size))]);
        let result = client.resources().apply_resource(request).await;
        if let Err(status) = &result {
            check_status("long label key", status);
            assert!(status.message().len() <= 512, "{}", status.message().len());
        }
        let violations = expect_error(result, Code::InvalidArgument, "INVALID_LABELS");
        for (field, description) in &violations {
            assert!(
                field.len() <= 256 && description.len() <= 512,
                "{field:.80} / {description:.80}"
            );
        }
    }
    // A request id that is reused with another request echoes neither.
    let reused = "r".repeat(128);
    let mut first = apply("box", "once", json!({"size": 1}));
    first.request_id = reused.clone();
    apply_ok(&client, first).await?;
    let mut second = apply("box", "twice", json!({"size": 2}));
    second.request_id = reused;
    let result = client.resources().apply_resource(second).await;
    if let Err(status) = &result {
        check_status("reused request id", status);
    }
    expect_error(result, Code::InvalidArgument, "REQUEST_ID_REUSED");
    server.shutdown().await
}

/// A call whose answer is only looked at for its error.
type Call = Pin<Box<dyn Future<Output = Result<(), Status>> + Send>>;

/// One request per method that takes a kind version, at `version`, with
/// the field its error must name.
fn requests_at_kind_version(client: &Client, version: i32) -> Vec<(&'static str, Call)> {
    let (resources, kinds) = (client.resources(), client.kinds());
    let (mut list, mut watch) = (resources.clone(), resources);
    let (mut get, mut config, mut delete, mut update) = (kinds.clone(), kinds.clone(), kinds.clone(), kinds);
    vec![
        (
            "/kind_version",
            Box::pin(async move {
                list.list_resources(ListResourcesRequest {
                    kind: Some("box".into()),
                    kind_version: Some(version),
                    ..Default::default()
                })
                .await
                .map(drop)
            }),
        ),
        (
            "/kind_version",
            Box::pin(async move {
                watch
                    .watch_resources(WatchResourcesRequest {
                        kind_version: Some(version),
                        ..Default::default()
                    })
                    .await
                    .map(drop)
            }),
        ),
        (
            "/kind_version",
            Box::pin(async move {
                get.get_kind_manifest(GetKindManifestRequest {
                    kind: "box".into(),
                    kind_version: version,
                })
                .await
                .map(drop)
            }),
        ),
        (
            "/kind_version",
            Box::pin(async move {
                config
                    .get_kind_config(GetKindConfigRequest {
                        kind: "box".into(),
                        kind_version: version,
                    })
                    .await
                    .map(drop)
            }),
        ),
        (
            "/kind_version",
            Box::pin(async move {
                delete
                    .delete_kind_manifest(DeleteKindManifestRequest {
                        kind: "box".into(),
                        kind_version: version,
                        ..Default::default()
                    })
                    .await
                    .map(drop)
            }),
        ),
        (
            "/config/kind_version",
            Box::pin(async move {
                update
                    .update_kind_config(UpdateKindConfigRequest {
                        config: Some(KindConfig {
                            kind: "box".into(),
                            kind_version: version,
                            max_inflight: 3,
                            ..Default::default()
                        }),
                        update_mask: Some(prost_types::FieldMask {
                            paths: vec!["max_inflight".into()],
                        }),
                        ..Default::default()
                    })
                    .await
                    .map(drop)
            }),
        ),
    ]
}

#[tokio::test]
async fn numeric_fields_outside_their_range_are_invalid_field() -> anyhow::Result<()> {
    let (server, client) = server_with_kind().await?;
    for version in [0, -1, i32::MIN, 40_000] {
        for (field, call) in requests_at_kind_version(&client, version) {
            assert_eq!(
                fields(&expect_error(call.await, Code::InvalidArgument, "INVALID_FIELD")),
                [field]
            );
        }
    }
    // The kind filter's name is checked too.
    let list = client
        .resources()
        .list_resources(ListResourcesRequest {
            kind: Some("Not A Kind".into()),
            ..Default::default()
        })
        .await;
    assert_eq!(
        fields(&expect_error(list, Code::InvalidArgument, "INVALID_NAME")),
        ["/kind"]
    );
    server.shutdown().await
}

#[tokio::test]
async fn nul_characters_are_refused_with_a_pointer() -> anyhow::Result<()> {
    let (server, client) = server_with_kind().await?;
    for validate_only in [true, false] {
        let mut request = apply("box", "nul", json!({"size": 1, "note": ["ok", "a\u{0}b"]}));
        request.validate_only = validate_only;
        let violations = expect_error(
            client.resources().apply_resource(request).await,
            Code::InvalidArgument,
            "INVALID_FIELD",
        );
        assert_eq!(fields(&violations), ["/spec/note/1"]);
    }
    let batch = client
        .resources()
        .batch_apply_resources(BatchApplyResourcesRequest {
            requests: vec![
                apply("box", "fine", json!({})),
                apply("box", "nul-key", json!({"k\u{0}": 1})),
            ],
            ..Default::default()
        })
        .await;
    let violations = expect_error(batch, Code::InvalidArgument, "INVALID_FIELD");
    assert_eq!(fields(&violations), ["/requests/1/spec/k\u{0}"]);

    let schema = json!({"type": "object", "properties": {"a\u{0}": {"type": "string"}}});
    let violations = expect_error(
        apply_manifest(&client, work_kind("nul", 1, Some(schema))).await,
        Code::InvalidArgument,
        "INVALID_FIELD",
    );
    assert_eq!(fields(&violations), ["/manifest/spec_schema/properties/a\u{0}"]);

    // Plain text fields that reach the database are checked as well.
    let mut request = apply("box", "nul-id", json!({}));
    request.request_id = "id\u{0}".into();
    let violations = expect_error(
        client.resources().apply_resource(request).await,
        Code::InvalidArgument,
        "INVALID_FIELD",
    );
    assert_eq!(fields(&violations), ["/request_id"]);
    apply_ok(&client, apply("box", "quiet", json!({}))).await?;
    let note = client
        .resources()
        .quarantine_resource(QuarantineResourceRequest {
            kind: "box".into(),
            name: "quiet".into(),
            message: "why\u{0}".into(),
            ..Default::default()
        })
        .await;
    assert_eq!(
        fields(&expect_error(note, Code::InvalidArgument, "INVALID_FIELD")),
        ["/message"]
    );
    let stored = client
        .resources()
        .get_resource(GetResourceRequest {
            kind: "box".into(),
            name: "nul".into(),
        })
        .await;
    expect_error(stored, Code::NotFound, "RESOURCE_NOT_FOUND");
    server.shutdown().await
}

/// A small deterministic generator (xorshift64*), so a failure repeats.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n as u64).unwrap_or(0)
    }

    fn text(&mut self) -> String {
        match self.below(12) {
            0 => String::new(),
            1 => "box".into(),
            2 => "keep".into(),
            3 => "UPPER case".into(),
            4 => "a".repeat(300),
            5 => "k".repeat(20_000),
            6 => "x\u{0}y".into(),
            7 => "é€😀".into(),
            8 => "a/b~c".into(),
            9 => "-lead.".into(),
            10 => format!("n{}", self.next() % 1000),
            _ => "\u{7f}\u{1b}[31m".into(),
        }
    }

    /// A name that is never "keep", so the stored resource is only ever the
    /// target of requests refused for another reason.
    fn name(&mut self) -> String {
        let name = self.text();
        if name == "keep" { "other".into() } else { name }
    }

    fn number(&mut self) -> i32 {
        [i32::MIN, -1, 0, 1, 2, 1000, 1001, 32_767, 32_768, i32::MAX][self.below(10)]
    }

    fn labels(&mut self) -> BTreeMap<String, String> {
        let n = [0, 1, 3, 70][self.below(4)];
        (0..n).map(|i| (format!("{}{i}", self.text()), self.text())).collect()
    }

    fn value(&mut self) -> Value {
        match self.below(8) {
            0 => spec_of_depth(converge_proto::json::MAX_DEPTH + 1),
            1 => spec_of_depth(60),
            2 => json!({"a": "x\u{0}"}),
            3 => json!({"k\u{0}": 1}),
            4 => json!({"size": "not a number"}),
            5 => json!({"size": 1.5, "big": 1e300}),
            6 if self.below(10) == 0 => json!({"blob": "b".repeat(1_100_000)}),
            _ => json!({"size": self.number()}),
        }
    }

    fn token(&mut self) -> String {
        match self.below(4) {
            0 => String::new(),
            1 => "garbage!".into(),
            2 => "QUJDREVGR0g".into(),
            _ => "A".repeat(5000),
        }
    }

    fn reference(&mut self) -> Option<ResourceRef> {
        (self.below(2) == 0).then(|| ResourceRef {
            kind: self.text(),
            name: self.name(),
        })
    }
}

fn resident_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// One random request to one random method; `Ok` means it succeeded.
async fn one_request(client: &Client, rng: &mut Rng) -> (&'static str, Result<(), Status>) {
    let r = client.resources();
    let k = client.kinds();
    let method = rng.below(31);
    macro_rules! call {
        ($name:literal, $future:expr) => {
            ($name, $future.await.map(|_| ()))
        };
    }
    match method {
        0 | 1 => {
            let keep = rng.below(4) == 0;
            let mut request = ApplyResourceRequest {
                kind: if keep { "box".into() } else { rng.text() },
                kind_version: if keep { 1 } else { rng.number() },
                name: if keep { "keep".into() } else { rng.name() },
                labels: rng.labels(),
                spec: Some(object(rng.value())),
                etag: (rng.below(3) == 0).then(|| rng.text()),
                request_id: rng.text().chars().take(200).collect(),
                validate_only: rng.below(2) == 0,
                ..Default::default()
            };
            if keep {
                // Always refused for one reason or another: the stored copy stays.
                request.spec = Some(object(spec_of_depth(60)));
            }
            call!("ApplyResource", r.clone().apply_resource(request))
        }
        2 => {
            let requests = (0..rng.below(4))
                .map(|_| ApplyResourceRequest {
                    kind: rng.text(),
                    kind_version: rng.number(),
                    name: rng.name(),
                    spec: Some(object(rng.value())),
                    ..Default::default()
                })
                .collect();
            let request = BatchApplyResourcesRequest {
                requests,
                request_id: rng.text().chars().take(200).collect(),
                validate_only: rng.below(2) == 0,
            };
            call!("BatchApplyResources", r.clone().batch_apply_resources(request))
        }
        3 => call!(
            "CreateResource",
            r.clone().create_resource(CreateResourceRequest {
                kind: rng.text(),
                kind_version: rng.number(),
                name: rng.name(),
                labels: rng.labels(),
                spec: Some(object(rng.value())),
                ..Default::default()
            })
        ),
        4 => call!(
            "GetResource",
            r.clone().get_resource(GetResourceRequest {
                kind: rng.text(),
                name: rng.text(),
            })
        ),
        5 => call!(
            "ListResources",
            r.clone().list_resources(ListResourcesRequest {
                kind: (rng.below(2) == 0).then(|| rng.text()),
                kind_version: (rng.below(2) == 0).then(|| rng.number()),
                phases: vec![rng.number()],
                label_selector: rng.text(),
                owner: rng.reference(),
                root: rng.reference(),
                page_size: rng.number(),
                page_token: rng.token(),
                ..Default::default()
            })
        ),
        6 => call!(
            "DeleteResource",
            r.clone().delete_resource(DeleteResourceRequest {
                kind: "box".into(),
                name: if rng.below(2) == 0 { "keep".into() } else { rng.name() },
                etag: Some(format!("bogus-{}", rng.text())),
                ..Default::default()
            })
        ),
        7 => call!(
            "ReconcileResource",
            r.clone().reconcile_resource(ReconcileResourceRequest {
                kind: rng.text(),
                name: rng.name(),
                ..Default::default()
            })
        ),
        8 => call!(
            "QuarantineResource",
            r.clone().quarantine_resource(QuarantineResourceRequest {
                kind: "box".into(),
                name: "keep".into(),
                message: "m".repeat(100_000),
                ..Default::default()
            })
        ),
        9 => call!(
            "UnquarantineResource",
            r.clone().unquarantine_resource(UnquarantineResourceRequest {
                kind: rng.text(),
                name: rng.name(),
                ..Default::default()
            })
        ),
        10 => call!(
            "ListResourceEvents",
            r.clone().list_resource_events(ListResourceEventsRequest {
                kind: rng.text(),
                name: rng.text(),
                page_size: rng.number(),
                page_token: rng.token(),
                ..Default::default()
            })
        ),
        11 => call!(
            "GetResourceGraph",
            r.clone().get_resource_graph(GetResourceGraphRequest {
                kind: rng.text(),
                name: rng.text(),
                page_size: rng.number(),
                page_token: rng.token(),
            })
        ),
        12 => call!(
            "ListSpecRevisions",
            r.clone().list_spec_revisions(ListSpecRevisionsRequest {
                kind: rng.text(),
                name: rng.text(),
                page_size: rng.number(),
                page_token: rng.token(),
            })
        ),
        13 => call!(
            "RollbackResource",
            r.clone().rollback_resource(RollbackResourceRequest {
                kind: rng.text(),
                name: rng.text(),
                target_generation: i64::from(rng.number()),
                ..Default::default()
            })
        ),
        14 => {
            let request = WatchResourcesRequest {
                kind: (rng.below(2) == 0).then(|| rng.text()),
                kind_version: (rng.below(2) == 0).then(|| rng.number()),
                label_selector: rng.text(),
                resource_version: rng.token(),
                ..Default::default()
            };
            let answer = r.clone().watch_resources(request).await;
            let first = match answer {
                Ok(stream) => first_message(stream.into_inner()).await,
                Err(status) => Err(status),
            };
            ("WatchResources", first)
        }
        15 => {
            let request = WatchResourceEventsRequest {
                kind: rng.text(),
                name: rng.text(),
                event_version: rng.token(),
                snapshot_limit: rng.number(),
                ..Default::default()
            };
            let answer = r.clone().watch_resource_events(request).await;
            let first = match answer {
                Ok(stream) => first_message(stream.into_inner()).await,
                Err(status) => Err(status),
            };
            ("WatchResourceEvents", first)
        }
        16 => {
            let mut manifest = work_kind("box", 1, Some(rng.value()));
            if rng.below(2) == 0 {
                manifest.kind = rng.text();
                manifest.kind_version = rng.number();
            }
            manifest.policy = Some(converge_proto::v1::KindPolicy {
                max_inflight: rng.number(),
                task_deadline_secs: rng.number(),
                orphan_grace_secs: rng.number(),
                max_transient_attempts: rng.number(),
                resync_interval_secs: rng.number(),
                ..Default::default()
            });
            call!(
                "ApplyKindManifest",
                k.clone().apply_kind_manifest(ApplyKindManifestRequest {
                    manifest: Some(manifest),
                    validate_only: rng.below(2) == 0,
                    request_id: rng.text().chars().take(200).collect(),
                })
            )
        }
        17 => call!(
            "GetKindManifest",
            k.clone().get_kind_manifest(GetKindManifestRequest {
                kind: rng.text(),
                kind_version: rng.number(),
            })
        ),
        18 => call!(
            "ListKindManifests",
            k.clone().list_kind_manifests(ListKindManifestsRequest {
                kind: (rng.below(2) == 0).then(|| rng.text()),
                page_size: rng.number(),
                page_token: rng.token(),
            })
        ),
        19 => call!(
            "DeleteKindManifest",
            k.clone().delete_kind_manifest(DeleteKindManifestRequest {
                kind: if rng.below(2) == 0 { "box".into() } else { rng.text() },
                kind_version: rng.number(),
                ..Default::default()
            })
        ),
        20 => call!(
            "GetKindConfig",
            k.clone().get_kind_config(GetKindConfigRequest {
                kind: rng.text(),
                kind_version: rng.number(),
            })
        ),
        21 => {
            let paths = ["max_inflight", "maxInflight", "task_deadline_secs", "nope", ""];
            call!(
                "UpdateKindConfig",
                k.clone().update_kind_config(UpdateKindConfigRequest {
                    config: Some(KindConfig {
                        kind: if rng.below(2) == 0 { "box".into() } else { rng.text() },
                        kind_version: rng.number(),
                        max_inflight: rng.number(),
                        task_deadline_secs: rng.number(),
                        ..Default::default()
                    }),
                    update_mask: Some(prost_types::FieldMask {
                        paths: vec![paths[rng.below(paths.len())].to_owned()],
                    }),
                    validate_only: true,
                    ..Default::default()
                })
            )
        }
        22 => call!("GetVersion", client.cluster().get_version(GetVersionRequest::default())),
        23 => call!(
            "ListClusterMembers",
            client
                .cluster()
                .list_cluster_members(ListClusterMembersRequest::default())
        ),
        24 => call!(
            "ApplyProviderConfig",
            client
                .provider_configs()
                .apply_provider_config(ApplyProviderConfigRequest {
                    provider_config: Some(ProviderConfig {
                        name: rng.text(),
                        kind: rng.text(),
                        kind_version: rng.number(),
                        spec: Some(object(rng.value())),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
        ),
        25 => call!(
            "ListProviderConfigs",
            client
                .provider_configs()
                .list_provider_configs(ListProviderConfigsRequest {
                    kind_version: Some(rng.number()),
                    page_size: rng.number(),
                    page_token: rng.token(),
                    ..Default::default()
                })
        ),
        26 => call!(
            "ApplyReactorBinding",
            client
                .reactor_bindings()
                .apply_reactor_binding(ApplyReactorBindingRequest {
                    reactor_binding: Some(ReactorBinding {
                        name: rng.text(),
                        watch_kind: rng.text(),
                        reactor: rng.text(),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
        ),
        27 => match rng.below(3) {
            0 => call!(
                "ListReactorBindings",
                client
                    .reactor_bindings()
                    .list_reactor_bindings(ListReactorBindingsRequest {
                        page_size: rng.number(),
                        page_token: rng.token(),
                        ..Default::default()
                    })
            ),
            1 => call!(
                "ListReactorDeliveries",
                client
                    .reactor_bindings()
                    .list_reactor_deliveries(ListReactorDeliveriesRequest {
                        binding: Some(rng.text()),
                        resource: rng.reference(),
                        resource_uid: Some(rng.text()),
                        page_size: rng.number(),
                        page_token: rng.token(),
                        ..Default::default()
                    })
            ),
            _ => {
                use converge_proto::v1::redrive_reactor_deliveries_request::Target;
                let target = match rng.below(4) {
                    0 => None,
                    1 => Some(Target::DeliveryId(rng.text())),
                    2 => Some(Target::Binding(rng.text())),
                    _ => Some(Target::Resources(DeliveryResourceSelector {
                        kind: rng.text(),
                        label_selector: rng.text(),
                    })),
                };
                call!(
                    "RedriveReactorDeliveries",
                    client
                        .reactor_bindings()
                        .redrive_reactor_deliveries(RedriveReactorDeliveriesRequest {
                            target,
                            reason: rng.text(),
                            limit: rng.number(),
                            page_token: rng.token(),
                            request_id: rng.text(),
                            ..Default::default()
                        })
                )
            }
        },
        28 => {
            let operations = client.operations();
            match rng.below(3) {
                0 => call!(
                    "InvokeOperation",
                    operations.clone().invoke_operation(InvokeOperationRequest {
                        kind: rng.text(),
                        name: rng.name(),
                        verb: rng.text(),
                        input: Some(object(rng.value())),
                        ..Default::default()
                    })
                ),
                1 => call!(
                    "GetOperation",
                    operations
                        .clone()
                        .get_operation(GetOperationRequest { uid: rng.text() })
                ),
                _ => call!(
                    "ListOperations",
                    operations.clone().list_operations(ListOperationsRequest {
                        page_size: rng.number(),
                        page_token: rng.token(),
                        ..Default::default()
                    })
                ),
            }
        }
        29 => call!(
            "ExplainResource",
            r.clone().explain_resource(ExplainResourceRequest {
                kind: if rng.below(2) == 0 { "box".into() } else { rng.text() },
                name: if rng.below(2) == 0 { "keep".into() } else { rng.text() },
            })
        ),
        _ => {
            // A worker stream that opens with something other than Subscribe,
            // or subscribes to nonsense.
            let first = if rng.below(2) == 0 {
                wpb::work_stream_request::Payload::Heartbeat(wpb::WorkHeartbeat::default())
            } else {
                wpb::work_stream_request::Payload::Subscribe(wpb::Subscribe {
                    agent: rng.text(),
                    kinds: vec![wpb::KindVersion {
                        kind: rng.text(),
                        kind_version: rng.number(),
                    }],
                    max_inflight: rng.number(),
                    ..Default::default()
                })
            };
            let messages = tokio_stream::iter([WorkStreamRequest { payload: Some(first) }]);
            let answer = client.workers().work_stream(messages).await;
            let first = match answer {
                Ok(stream) => first_message(stream.into_inner()).await,
                Err(status) => Err(status),
            };
            ("WorkStream", first)
        }
    }
}

/// The first message of a server stream, or its error; a stream that stays
/// open counts as success.
async fn first_message<T>(mut stream: tonic::Streaming<T>) -> Result<(), Status> {
    match tokio::time::timeout(Duration::from_millis(300), stream.message()).await {
        Ok(Err(status)) => Err(status),
        _ => Ok(()),
    }
}

#[tokio::test]
async fn a_barrage_of_bad_requests_gets_contract_errors_and_changes_nothing() -> anyhow::Result<()> {
    let (server, client) = server_with_kind().await?;
    let kept = resource_of(
        apply_ok(&client, {
            let mut request = apply("box", "keep", json!({"size": 7}));
            request.labels = BTreeMap::from([("team".into(), "a".into())]);
            request
        })
        .await?,
    )?;
    let rss_before = resident_kib();
    let mut rng = Rng(0x5eed_0000_c0ff_ee01);
    let mut refused = 0;
    for i in 0..400 {
        let (method, result) = match tokio::time::timeout(Duration::from_secs(20), one_request(&client, &mut rng)).await
        {
            Ok(answer) => answer,
            Err(_) => panic!("request {i} did not answer within 20 s"),
        };
        if let Err(status) = result {
            check_status(&format!("request {i} ({method})"), &status);
            refused += 1;
        }
    }
    assert!(refused > 200, "only {refused} of 400 requests were refused");

    let mut health = HealthClient::new(client.channel());
    let serving = health.check(HealthCheckRequest::default()).await?.into_inner();
    assert_eq!(
        serving.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    let rss_after = resident_kib();
    assert!(
        rss_after < rss_before + 512 * 1024,
        "the test process grew from {rss_before} to {rss_after} KiB"
    );

    let now = client
        .resources()
        .get_resource(GetResourceRequest {
            kind: "box".into(),
            name: "keep".into(),
        })
        .await?
        .into_inner()
        .resource
        .ok_or_else(|| anyhow::anyhow!("no resource"))?;
    assert_eq!(now.spec, kept.spec);
    assert_eq!(now.labels, kept.labels);
    assert_eq!(now.generation, kept.generation);
    assert_eq!(now.quarantined, kept.quarantined);
    assert_eq!(now.etag, kept.etag);
    server.shutdown().await
}
