//! Tasks no worker serves: counted per (kind, kind_version) with their age,
//! and, under a kind's `unserved_condition_after_secs` policy, marked on
//! their resources with `WorkerAvailable=False` until a real worker
//! connects and takes them.

use std::time::Duration;

use converge_integration::api::{apply, apply_ok, expect_error, fields, get, spawn_worker, wait_phase};
use converge_integration::kinds::{Cells, apply_kind, cell_manifest};
use converge_integration::{TestDatabase, TestServer, eventually};
use converge_proto::v1::{
    Condition, ConditionStatus, GetFleetSummaryRequest, GetKindConfigRequest, KindConfig, Phase,
    UpdateKindConfigRequest,
};
use converge_sdk::Client;
use converge_sdk::worker::Worker;
use converge_service::config::Role;
use converge_service::store::unserved;
use serde_json::json;
use tonic::Code;

async fn worker_condition(client: &Client, name: &str) -> anyhow::Result<Option<Condition>> {
    Ok(get(client, "cell", name)
        .await?
        .conditions
        .into_iter()
        .find(|c| c.r#type == "WorkerAvailable"))
}

async fn set_policy(client: &Client, secs: i32) -> Result<KindConfig, tonic::Status> {
    client
        .kinds()
        .update_kind_config(UpdateKindConfigRequest {
            config: Some(KindConfig {
                kind: "cell".into(),
                kind_version: 1,
                unserved_condition_after_secs: secs,
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["unserved_condition_after_secs".into()],
            }),
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().config.unwrap_or_default())
}

/// The unserved backlogs GetFleetSummary reports, as (kind, version, tasks).
async fn fleet_unserved(client: &Client, kind: Option<&str>) -> anyhow::Result<Vec<(String, i32, i64)>> {
    let summary = client
        .admin()
        .get_fleet_summary(GetFleetSummaryRequest {
            kind: kind.map(str::to_owned),
            ..Default::default()
        })
        .await?
        .into_inner();
    Ok(summary
        .unserved
        .into_iter()
        .map(|u| (u.kind, u.kind_version, u.tasks))
        .collect())
}

#[tokio::test]
async fn waiting_tasks_are_counted_marked_and_released_when_a_worker_connects() -> anyhow::Result<()> {
    let server = TestServer::start_with(TestDatabase::new().await?, Role::All, |config| {
        config.unserved_interval = Duration::from_millis(200);
    })
    .await?;
    let client = server.client().await?;
    let pool = server.database().pool().clone();
    let liveness = 15;
    apply_kind(&client, cell_manifest()).await?;
    for i in 0..3 {
        apply_ok(&client, apply("cell", &format!("c{i}"), json!({"salt": "one"}))).await?;
    }

    // Counted: no worker is connected.
    let figures = unserved::unserved(&pool, liveness).await?;
    assert_eq!(figures.len(), 1, "{figures:?}");
    assert_eq!(
        (figures[0].kind.as_str(), figures[0].kind_version, figures[0].tasks),
        ("cell", 1, 3)
    );
    assert!(figures[0].oldest_waiting_since <= chrono::Utc::now());
    // The fleet summary reports the same backlog, of all kinds or of one.
    let summary = fleet_unserved(&client, None).await?;
    assert_eq!(summary, [("cell".to_owned(), 1, 3)]);
    assert_eq!(fleet_unserved(&client, Some("cell")).await?, summary);
    assert!(fleet_unserved(&client, Some("other")).await?.is_empty());

    // The policy is off by default: nothing is marked.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(worker_condition(&client, "c0").await?, None);

    // A bad value is refused and changes nothing; a good one is live.
    let violations = expect_error(
        set_policy(&client, -1).await,
        Code::InvalidArgument,
        "INVALID_KIND_CONFIG",
    );
    assert_eq!(fields(&violations), ["/config/unserved_condition_after_secs"]);
    let config = set_policy(&client, 1).await?;
    assert_eq!(config.unserved_condition_after_secs, 1);
    let read = client
        .kinds()
        .get_kind_config(GetKindConfigRequest {
            kind: "cell".into(),
            kind_version: 1,
        })
        .await?
        .into_inner();
    assert_eq!(read.config.map(|c| c.unserved_condition_after_secs), Some(1));
    for i in 0..3 {
        let condition = eventually(Duration::from_secs(30), || async {
            worker_condition(&client, &format!("c{i}")).await
        })
        .await?;
        assert_eq!(condition.status, ConditionStatus::False as i32, "{condition:?}");
        assert_eq!(condition.reason, "NoWorker");
        assert!(condition.message.contains("cell version 1"), "{condition:?}");
    }

    // A real worker connects: it takes the tasks, the marks go, all Ready.
    let cells = Cells::default();
    let _worker = spawn_worker(
        Worker::builder()
            .endpoint(server.address())
            .provider(cells.clone())
            .heartbeat_interval(Duration::from_millis(500)),
    );
    for i in 0..3 {
        let name = format!("c{i}");
        wait_phase(&client, "cell", &name, Phase::Ready).await?;
        eventually(Duration::from_secs(30), || async {
            Ok(worker_condition(&client, &name).await?.is_none().then_some(()))
        })
        .await?;
    }
    assert!(unserved::unserved(&pool, liveness).await?.is_empty());
    assert!(fleet_unserved(&client, None).await?.is_empty());
    assert_eq!(cells.runs_of("c0").len(), 1);
    server.shutdown().await
}
