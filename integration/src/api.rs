//! Helpers for tests that call the API: manifests, specs, applies and
//! reads, waiting for a phase, and error inspection.

use std::time::Duration;

use converge_proto::v1::{
    ApplyKindManifestRequest, ApplyResourceRequest, ApplyResourceResponse, Emit, GetResourceRequest, KindManifest,
    KindPolicy, Phase, Reaction, Resource, Trigger,
};
use converge_sdk::Client;
use converge_sdk::worker::WorkerBuilder;
use serde_json::Value;
use sqlx::PgPool;
use tokio::sync::oneshot;
use tonic::{Code, Status};
use tonic_types::StatusExt;

/// A JSON object as a protobuf Struct (anything else as an empty one).
pub fn object(value: Value) -> prost_types::Struct {
    converge_proto::json::json_to_struct(&value).unwrap_or_default()
}

/// A protobuf Struct as JSON, with integral numbers as integers.
pub fn json(value: &prost_types::Struct) -> Value {
    converge_proto::json::struct_to_json(value.clone())
}

/// The work kind of the API tests: [`work_manifest`](crate::kinds::work_manifest)
/// at `version`, with a spec schema, and at most 5 tasks in flight.
pub fn work_kind(kind: &str, version: i32, spec_schema: Option<Value>) -> KindManifest {
    KindManifest {
        kind_version: version,
        description: format!("test kind {kind}"),
        spec_schema: spec_schema.map(object),
        policy: Some(KindPolicy {
            max_inflight: 5,
            ..Default::default()
        }),
        ..crate::kinds::work_manifest(kind)
    }
}

/// Applies a manifest.
pub async fn apply_manifest(client: &Client, manifest: KindManifest) -> Result<(), Status> {
    client
        .kinds()
        .apply_kind_manifest(ApplyKindManifestRequest {
            manifest: Some(manifest),
            ..Default::default()
        })
        .await
        .map(|_| ())
}

/// An apply request for `kind` version 1.
pub fn apply(kind: &str, name: &str, spec: Value) -> ApplyResourceRequest {
    ApplyResourceRequest {
        kind: kind.into(),
        kind_version: 1,
        name: name.into(),
        spec: Some(object(spec)),
        ..Default::default()
    }
}

/// Applies and returns the response.
pub async fn apply_ok(client: &Client, request: ApplyResourceRequest) -> anyhow::Result<ApplyResourceResponse> {
    Ok(client.resources().apply_resource(request).await?.into_inner())
}

/// The first page of a resource's event runs, newest first.
pub async fn events(client: &Client, kind: &str, name: &str) -> anyhow::Result<Vec<converge_proto::v1::ResourceEvent>> {
    Ok(client
        .resources()
        .list_resource_events(converge_proto::v1::ListResourceEventsRequest {
            kind: kind.into(),
            name: name.into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .events)
}

/// The resource `kind`/`name`, or `None` if it does not exist.
pub async fn find(client: &Client, kind: &str, name: &str) -> anyhow::Result<Option<Resource>> {
    match client
        .resources()
        .get_resource(GetResourceRequest {
            kind: kind.into(),
            name: name.into(),
        })
        .await
    {
        Ok(answer) => Ok(answer.into_inner().resource),
        Err(status) if status.code() == Code::NotFound => Ok(None),
        Err(status) => Err(status.into()),
    }
}

/// The resource `kind`/`name`, which must exist.
pub async fn get(client: &Client, kind: &str, name: &str) -> anyhow::Result<Resource> {
    find(client, kind, name)
        .await?
        .ok_or_else(|| anyhow::anyhow!("{kind}/{name} does not exist"))
}

/// Waits up to 30 s for `kind`/`name` to reach `phase`.
pub async fn wait_phase(client: &Client, kind: &str, name: &str, phase: Phase) -> anyhow::Result<Resource> {
    crate::eventually(Duration::from_secs(30), || async {
        Ok(find(client, kind, name).await?.filter(|r| r.phase == phase as i32))
    })
    .await
}

/// The resource of an apply response.
pub fn resource_of(response: ApplyResourceResponse) -> anyhow::Result<Resource> {
    response
        .resource
        .ok_or_else(|| anyhow::anyhow!("no resource in the response"))
}

/// Asserts a status's code and ErrorInfo reason; returns its field violations.
pub fn expect_error<T: std::fmt::Debug>(result: Result<T, Status>, code: Code, reason: &str) -> Vec<(String, String)> {
    let status = match result {
        Ok(value) => panic!("expected {code:?}/{reason}, got success: {value:?}"),
        Err(status) => status,
    };
    assert_eq!(status.code(), code, "{status:?}");
    let details = status.get_error_details();
    let info = details
        .error_info()
        .unwrap_or_else(|| panic!("no ErrorInfo in {status:?}"));
    assert_eq!(info.reason, reason, "{status:?}");
    assert_eq!(info.domain, "converge.dev");
    let mut violations: Vec<(String, String)> = details
        .bad_request()
        .map(|b| {
            b.field_violations
                .iter()
                .map(|v| (v.field.clone(), v.description.clone()))
                .collect()
        })
        .unwrap_or_default();
    if let Some(p) = details.precondition_failure() {
        violations.extend(p.violations.iter().map(|v| (v.subject.clone(), v.description.clone())));
    }
    violations
}

/// Just the fields of [`expect_error`]'s violations.
pub fn fields(violations: &[(String, String)]) -> Vec<&str> {
    violations.iter().map(|(f, _)| f.as_str()).collect()
}

/// Runs the worker `builder` describes (in this process, over the real
/// worker stream) until the returned sender fires or is dropped.
pub fn spawn_worker(builder: WorkerBuilder) -> oneshot::Sender<()> {
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        match builder.build() {
            Ok(worker) => {
                let _ = worker
                    .run(async {
                        let _ = stopped.await;
                    })
                    .await;
            }
            Err(e) => panic!("worker: {e}"),
        }
    });
    stop
}

/// The single number a counting query returns (tests inspect the database
/// directly where the API shows no such figure).
pub async fn count(pool: &PgPool, sql: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(pool)
        .await?)
}

/// A reaction named `name`, fired by `trigger`, emitting `emits`.
pub fn reaction(name: &str, trigger: Trigger, emits: &[Emit]) -> Reaction {
    Reaction {
        name: name.into(),
        trigger: trigger.into(),
        emits: emits.iter().map(|e| (*e).into()).collect(),
        ..Default::default()
    }
}

/// Whether `actor` is what events record for a worker without a SPIFFE ID:
/// `worker:<peer address>`, here a loopback socket address.
pub fn is_plaintext_worker_actor(actor: &str) -> bool {
    actor
        .strip_prefix("worker:")
        .and_then(|addr| addr.parse::<std::net::SocketAddr>().ok())
        .is_some_and(|addr| addr.ip().is_loopback())
}
