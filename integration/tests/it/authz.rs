//! Authorization over mTLS with several identities (ADR 47): an admin, a
//! label-scoped team writer, a read-only auditor and two workers with
//! different serve grants; each allowed call works, each forbidden one is
//! refused with NOT_AUTHORIZED (or answered as missing when the resource is
//! hidden), and a policy edit takes effect without a restart or a dropped
//! stream other than the one whose grant went.

use std::path::Path;
use std::time::Duration;

use converge_integration::api::{apply, apply_manifest, expect_error, work_kind};
use converge_integration::pki::replace;
use converge_integration::{TestDatabase, TestServer, eventually};
use converge_proto::v1::{
    ApplyResourceRequest, DeleteResourceRequest, GetResourceRequest, ListKindManifestsRequest, ListResourcesRequest,
    Resource,
};
use converge_proto::worker_v1::work_stream_request::Payload as Up;
use converge_proto::worker_v1::work_stream_response::Payload as Down;
use converge_proto::worker_v1::{StageComplete, WorkStreamRequest};
use converge_sdk::Client;
use converge_service::config::Role;
use serde_json::json;
use tonic::Code;

use crate::tls::{Pki, https, subscribe_to};

const ADMIN: &str = "spiffe://converge.test/ops/admin";
const PAYMENTS: &str = "spiffe://converge.test/teams/payments/deployer";
const AUDITOR: &str = "spiffe://converge.test/ops/auditor";
const WORKER_A: &str = "spiffe://converge.test/workers/a";
const WORKER_B: &str = "spiffe://converge.test/workers/b";

fn policy(worker_a_serves: &str, payments_scope: &str) -> String {
    format!(
        r#"
roles:
  - name: admin
    rules:
      - {{verbs: ["*"], kinds: ["*"]}}
      - {{verbs: ["*"], objects: ["*"]}}
  - name: team-writer
    rules:
      - {{verbs: [read, write, reconcile], kinds: [app]}}
  - name: auditor
    rules:
      - {{verbs: [read], kinds: ["*"]}}
      - {{verbs: [read], objects: ["*"]}}
  - name: serve-a
    rules:
      - {{verbs: [serve], kinds: [{worker_a_serves}]}}
  - name: serve-b
    rules:
      - {{verbs: [serve], kinds: [other@1]}}
bindings:
  - {{role: admin, subjects: ["{ADMIN}"]}}
  - {{role: team-writer, subjects: ["spiffe://converge.test/teams/payments/*"], selector: "{payments_scope}"}}
  - {{role: auditor, subjects: ["{AUDITOR}"]}}
  - {{role: serve-a, subjects: ["{WORKER_A}"]}}
  - {{role: serve-b, subjects: ["{WORKER_B}"]}}
"#
    )
}

fn labelled(name: &str, team: &str) -> ApplyResourceRequest {
    ApplyResourceRequest {
        labels: std::collections::BTreeMap::from([("team".to_owned(), team.to_owned())]),
        ..apply("app", name, json!({}))
    }
}

async fn names(client: &Client, kind: Option<&str>) -> Result<Vec<String>, tonic::Status> {
    let mut names: Vec<String> = client
        .resources()
        .list_resources(ListResourcesRequest {
            kind: kind.map(str::to_owned),
            ..Default::default()
        })
        .await?
        .into_inner()
        .resources
        .into_iter()
        .map(|r| r.name)
        .collect();
    names.sort();
    Ok(names)
}

async fn get(client: &Client, name: &str) -> Result<Resource, tonic::Status> {
    client
        .resources()
        .get_resource(GetResourceRequest {
            kind: "app".into(),
            name: name.into(),
        })
        .await
        .map(|r| r.into_inner().resource.unwrap_or_default())
}

async fn connect(server: &TestServer, pki: &Pki, name: &str, id: &str) -> anyhow::Result<Client> {
    pki.client(name, Some(id))?;
    Ok(Client::connect_tls(https(server), pki.client_tls(&pki.path("ca.pem"), Some(name))?).await?)
}

/// Opens a raw work stream subscribed to `kind`.
async fn stream(
    client: &Client,
    kind: &str,
) -> Result<
    (
        tokio::sync::mpsc::Sender<WorkStreamRequest>,
        tonic::Streaming<converge_proto::worker_v1::WorkStreamResponse>,
    ),
    tonic::Status,
> {
    let (up, rx) = tokio::sync::mpsc::channel(16);
    up.send(subscribe_to(kind)).await.ok();
    let down = client
        .workers()
        .work_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    Ok((up, down))
}

fn complete(task: &converge_proto::worker_v1::StageTask, by: &str) -> WorkStreamRequest {
    WorkStreamRequest {
        payload: Some(Up::Complete(StageComplete {
            lease_token: task.lease_token.clone(),
            claim_epoch: task.claim_epoch,
            stage: task.stage,
            generation: task.generation,
            manifest_version: task.manifest_version,
            status: Some(converge_integration::api::object(json!({"by": by}))),
            ..Default::default()
        })),
    }
}

fn not_authorized<T: std::fmt::Debug>(result: Result<T, tonic::Status>, permission: &str, target: &str) {
    let status = match &result {
        Err(status) => status.clone(),
        Ok(_) => panic!("expected NOT_AUTHORIZED for {permission} on {target}, got {result:?}"),
    };
    expect_error(result, Code::PermissionDenied, "NOT_AUTHORIZED");
    let details = tonic_types::StatusExt::get_error_details(&status);
    let Some(info) = details.error_info() else {
        panic!("no ErrorInfo in {status:?}");
    };
    assert_eq!(info.metadata.get("permission").map(String::as_str), Some(permission));
    assert_eq!(info.metadata.get("target").map(String::as_str), Some(target));
}

fn write_policy(path: &Path, text: &str) -> anyhow::Result<()> {
    replace(path, text)?;
    Ok(())
}

#[tokio::test]
async fn each_identity_may_do_what_its_grants_say_and_policy_edits_apply_live() -> anyhow::Result<()> {
    let pki = Pki::new()?;
    let policy_file = pki.path("policy.yaml");
    write_policy(&policy_file, &policy("app@1, other@1", "team=payments"))?;
    let mut tls = pki.server_args(true);
    tls.tls_reload_interval_secs = 1;
    let file = policy_file.clone();
    let server = TestServer::start_with(TestDatabase::new().await?, Role::All, move |config| {
        config.serve.tls = tls;
        config.serve.authz.authz_policy_file = Some(file);
        config.serve.authz.authz_reload_interval_secs = 1;
    })
    .await?;
    let admin = connect(&server, &pki, "admin", ADMIN).await?;
    let payments = connect(&server, &pki, "payments", PAYMENTS).await?;
    let auditor = connect(&server, &pki, "auditor", AUDITOR).await?;
    let worker_a = connect(&server, &pki, "worker-a", WORKER_A).await?;
    let worker_b = connect(&server, &pki, "worker-b", WORKER_B).await?;

    // The admin sets up kinds and resources of two teams.
    apply_manifest(&admin, work_kind("app", 1, None)).await?;
    apply_manifest(&admin, work_kind("other", 1, None)).await?;
    admin.resources().apply_resource(labelled("pay-1", "payments")).await?;
    admin.resources().apply_resource(labelled("search-1", "search")).await?;

    // The team writer: its own labels only, and no objects.
    payments
        .resources()
        .apply_resource(labelled("pay-2", "payments"))
        .await?;
    not_authorized(
        payments.resources().apply_resource(labelled("x-1", "search")).await,
        "apply",
        "app/x-1",
    );
    // Moving its own resource out of its scope is refused, and changes nothing.
    not_authorized(
        payments.resources().apply_resource(labelled("pay-2", "search")).await,
        "apply",
        "app/pay-2",
    );
    assert_eq!(
        get(&admin, "pay-2").await?.labels.get("team").map(String::as_str),
        Some("payments")
    );
    // Another team's resource does not exist for it.
    expect_error(get(&payments, "search-1").await, Code::NotFound, "RESOURCE_NOT_FOUND");
    expect_error(
        payments
            .resources()
            .delete_resource(DeleteResourceRequest {
                kind: "app".into(),
                name: "search-1".into(),
                ..Default::default()
            })
            .await,
        Code::NotFound,
        "RESOURCE_NOT_FOUND",
    );
    assert_eq!(get(&payments, "pay-1").await?.name, "pay-1");
    assert_eq!(names(&payments, Some("app")).await?, ["pay-1", "pay-2"]);
    not_authorized(names(&payments, None).await, "list", "*");
    not_authorized(names(&payments, Some("other")).await, "list", "other");
    not_authorized(
        payments
            .kinds()
            .list_kind_manifests(ListKindManifestsRequest::default())
            .await,
        "read",
        "kinds",
    );
    not_authorized(
        apply_manifest(&payments, work_kind("sneaky", 1, None)).await,
        "write",
        "kinds",
    );

    // The auditor reads everything and changes nothing.
    assert_eq!(names(&auditor, None).await?, ["pay-1", "pay-2", "search-1"]);
    assert_eq!(get(&auditor, "search-1").await?.name, "search-1");
    auditor
        .kinds()
        .list_kind_manifests(ListKindManifestsRequest::default())
        .await?;
    not_authorized(
        auditor
            .resources()
            .apply_resource(labelled("audit-1", "payments"))
            .await,
        "apply",
        "app/audit-1",
    );

    // Workers: B may not serve app; A may.
    not_authorized(stream(&worker_b, "app").await.map(|_| ()), "serve", "app@1");
    let (up_a, mut down_a) = stream(&worker_a, "app").await?;
    let task = loop {
        let message = tokio::time::timeout(Duration::from_secs(30), down_a.message())
            .await??
            .ok_or_else(|| anyhow::anyhow!("stream A ended"))?;
        if let Some(Down::Task(task)) = message.payload {
            break task;
        }
    };
    // A rogue worker of another kind that learned A's lease cannot write
    // the status of A's task: only the stream holding a lease completes it.
    let (up_b, mut down_b) = stream(&worker_b, "other").await?;
    up_b.send(complete(&task, "rogue")).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let name = task.resource.as_ref().map(|r| r.name.clone()).unwrap_or_default();
    let status = get(&admin, &name).await?.status;
    assert!(
        status.as_ref().is_none_or(|s| !s.fields.contains_key("by")),
        "the rogue result was applied: {status:?}"
    );
    // B's stream ends here, so that below only A's two-kind stream serves
    // `other` (else B could take its task).
    drop(up_b);
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(_)) = down_b.message().await {}
    })
    .await?;
    up_a.send(complete(&task, "a")).await?;
    eventually(Duration::from_secs(30), || async {
        let status = get(&admin, &name).await?.status.unwrap_or_default();
        Ok(status.fields.get("by").and_then(|v| match &v.kind {
            Some(prost_types::value::Kind::StringValue(by)) if by == "a" => Some(()),
            _ => None,
        }))
    })
    .await?;

    // A second stream of A serves both kinds.
    let mut both = subscribe_to("app");
    if let Some(Up::Subscribe(subscribe)) = &mut both.payload {
        subscribe.kinds.push(converge_proto::worker_v1::KindVersion {
            kind: "other".into(),
            kind_version: 1,
        });
    }
    let (up_both, rx_both) = tokio::sync::mpsc::channel(16);
    up_both.send(both).await?;
    let mut down_both = worker_a
        .workers()
        .work_stream(tokio_stream::wrappers::ReceiverStream::new(rx_both))
        .await?
        .into_inner();

    // A file that does not check changes nothing.
    write_policy(&policy_file, "roles: [{name: broken")?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(names(&payments, Some("app")).await?, ["pay-1", "pay-2"]);

    // Edits apply live: A loses app (its only kind: its stream ends with
    // NOT_AUTHORIZED), the team's scope moves to search; nothing restarts.
    write_policy(&policy_file, &policy("other@1", "team=search"))?;
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match down_a.message().await {
                Ok(Some(_)) => continue,
                other => return other,
            }
        }
    })
    .await?;
    not_authorized(ended.map(|_| ()), "serve", "app@1");
    // The stream serving both kinds stays, and only other's tasks reach it.
    admin
        .resources()
        .apply_resource(apply("app", "after-revoke", json!({})))
        .await?;
    admin
        .resources()
        .apply_resource(apply("other", "o-1", json!({})))
        .await?;
    let task = loop {
        let message = tokio::time::timeout(Duration::from_secs(30), down_both.message())
            .await??
            .ok_or_else(|| anyhow::anyhow!("the two-kind stream ended"))?;
        if let Some(Down::Task(task)) = message.payload {
            break task;
        }
    };
    assert_eq!(task.kind, "other", "{task:?}");
    up_both.send(complete(&task, "a")).await?;
    eventually(Duration::from_secs(30), || async {
        Ok((names(&payments, Some("app")).await? == ["search-1"]).then_some(()))
    })
    .await?;
    expect_error(get(&payments, "pay-1").await, Code::NotFound, "RESOURCE_NOT_FOUND");
    // The admin's connection and the auditor's were never dropped.
    assert_eq!(names(&auditor, Some("app")).await?.len(), 4);
    let (_up_a2, _down_a2) = stream(&worker_a, "other").await?;
    server.shutdown().await
}

#[tokio::test]
async fn check_policy_checks_a_file_offline_and_answers_may_i() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let good = dir.path().join("good.yaml");
    write_policy(&good, &policy("app@1", "team=payments"))?;
    let bad = dir.path().join("bad.yaml");
    write_policy(&bad, "roles: [{name: r, rules: [{verbs: [gett], kinds: [app]}]}]")?;
    let run = |args: Vec<String>| async move {
        let out = tokio::process::Command::new(converge_integration::processes::binary("converge")?)
            .args(&args)
            .output()
            .await?;
        anyhow::Ok((
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    };
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let ask = |verb: &str, kind: &str, labels: &str| {
        vec![
            "check-policy".to_owned(),
            path(&good),
            "--as".into(),
            PAYMENTS.into(),
            "--verb".into(),
            verb.into(),
            "--kind".into(),
            kind.into(),
            "-l".into(),
            labels.into(),
        ]
    };
    let (code, out, _) = run(vec!["check-policy".into(), path(&good)]).await?;
    assert_eq!((code, out.contains("valid, 5 bindings")), (0, true), "{out}");
    let (code, _, err) = run(vec!["check-policy".into(), path(&bad)]).await?;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/roles/0/rules/0/verbs/0"), "{err}");
    assert_eq!(run(ask("apply", "app", "team=payments")).await?.0, 0);
    assert_eq!(run(ask("apply", "app", "team=search")).await?.0, 1);
    assert_eq!(run(ask("delete", "other", "team=payments")).await?.0, 1);
    Ok(())
}
