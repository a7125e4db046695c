//! `ListClusterMembers` as an operator reads it: each broker lists the
//! workers connected to it (identity, agent, pairs with their readiness,
//! concurrency, tasks held, connect time) and the settings it booted with.

use std::time::Duration;

use converge_integration::api::{self, apply, apply_manifest, work_kind};
use converge_integration::{TestServer, eventually};
use converge_proto::v1::{ClusterMember, ConnectedWorker, ListClusterMembersRequest};
use converge_proto::worker_v1::work_stream_request::Payload as Up;
use converge_proto::worker_v1::work_stream_response::Payload as Down;
use converge_proto::worker_v1::{Interest, KindVersion, Subscribe, WorkStreamRequest};
use converge_sdk::Client;
use converge_sdk::worker::{HandlerError, Outcome, Provider, ReactionRequest, Worker, async_trait};
use serde_json::json;

/// Answers every `alpha` reconcile at once.
struct Alpha;

#[async_trait]
impl Provider for Alpha {
    fn kind(&self) -> converge_sdk::worker::KindVersion {
        converge_sdk::worker::KindVersion::new("alpha", 1)
    }

    async fn handle(&self, _request: ReactionRequest) -> Result<Outcome, HandlerError> {
        Ok(Outcome::new().with_status(json!({"done": true})))
    }
}

async fn members(client: &Client) -> anyhow::Result<Vec<ClusterMember>> {
    Ok(client
        .cluster()
        .list_cluster_members(ListClusterMembersRequest::default())
        .await?
        .into_inner()
        .members)
}

fn by_agent<'a>(workers: &'a [ConnectedWorker], agent: &str) -> anyhow::Result<&'a ConnectedWorker> {
    workers
        .iter()
        .find(|w| w.agent == agent)
        .ok_or_else(|| anyhow::anyhow!("no worker with agent {agent} in {workers:?}"))
}

fn pairs(worker: &ConnectedWorker) -> Vec<(&str, i32, bool)> {
    worker
        .kinds
        .iter()
        .map(|k| (k.kind.as_str(), k.kind_version, k.ready))
        .collect()
}

#[tokio::test]
async fn a_broker_lists_its_connected_workers_with_their_kinds_and_load() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    for kind in ["alpha", "beta", "gamma"] {
        apply_manifest(&client, work_kind(kind, 1, None)).await?;
    }

    // An SDK worker serving alpha...
    let sdk = api::spawn_worker(
        Worker::builder()
            .endpoint(server.address())
            .provider(Alpha)
            .max_parallel(3)
            .agent("cluster-test/alpha"),
    );
    // ... and a raw stream serving beta (ready) and gamma (not ready), which
    // takes one beta task and keeps it.
    let (up, up_rx) = tokio::sync::mpsc::channel(8);
    up.send(WorkStreamRequest {
        payload: Some(Up::Subscribe(Subscribe {
            kinds: vec![
                KindVersion {
                    kind: "beta".into(),
                    kind_version: 1,
                },
                KindVersion {
                    kind: "gamma".into(),
                    kind_version: 1,
                },
            ],
            max_inflight: 2,
            agent: "cluster-test/raw".into(),
            ..Default::default()
        })),
    })
    .await?;
    up.send(WorkStreamRequest {
        payload: Some(Up::Interest(Interest {
            kind: "gamma".into(),
            kind_version: 1,
            ready: false,
        })),
    })
    .await?;
    let mut down = client
        .workers()
        .work_stream(tokio_stream::wrappers::ReceiverStream::new(up_rx))
        .await?
        .into_inner();
    client
        .resources()
        .apply_resource(apply("beta", "held", json!({})))
        .await?;
    loop {
        match down.message().await? {
            Some(message) if matches!(message.payload, Some(Down::Task(_))) => break,
            Some(_) => {}
            None => anyhow::bail!("the raw stream ended before its task"),
        }
    }

    let member = eventually(Duration::from_secs(10), || async {
        let listed = members(&client).await?;
        Ok(listed.into_iter().find(|m| {
            m.connected_workers == 2
                && m.workers.len() == 2
                && m.workers
                    .iter()
                    .any(|w| w.agent == "cluster-test/raw" && w.in_flight == 1)
        }))
    })
    .await?;
    assert_eq!(member.member_id, server.member_id());

    let alpha = by_agent(&member.workers, "cluster-test/alpha")?;
    assert_eq!(pairs(alpha), [("alpha", 1, true)]);
    assert_eq!(alpha.max_inflight, 3);
    assert_eq!(alpha.in_flight, 0);
    let raw = by_agent(&member.workers, "cluster-test/raw")?;
    assert_eq!(pairs(raw), [("beta", 1, true), ("gamma", 1, false)]);
    assert_eq!(raw.max_inflight, 2);
    for worker in [alpha, raw] {
        // Plaintext loopback: the transport knows the worker by its address.
        let addr: std::net::SocketAddr = worker.identity.parse()?;
        assert!(addr.ip().is_loopback(), "{}", worker.identity);
        let connected = worker
            .connect_time
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("no connect_time"))?;
        let started = member
            .start_time
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("no start_time"))?;
        assert!(connected.seconds >= started.seconds, "{connected:?} before {started:?}");
    }
    assert_ne!(alpha.identity, raw.identity, "two connections, two peer addresses");

    // The member's boot settings, without the database URL.
    let config = member.config.clone().ok_or_else(|| anyhow::anyhow!("no config"))?;
    let config = api::json(&config);
    assert_eq!(config["role"], "all");
    assert_eq!(
        config["listenAddr"],
        server.address().trim_start_matches("http://"),
        "{config}"
    );
    assert_eq!(config["databaseMaxConnections"], 8);
    let url = server.database().url()?;
    assert!(!config.to_string().contains(&url), "{config}");

    // A closed stream leaves the listing with the next heartbeat.
    drop(up);
    drop(down);
    eventually(Duration::from_secs(10), || async {
        let listed = members(&client).await?;
        Ok(listed
            .iter()
            .any(|m| m.connected_workers == 1 && m.workers.len() == 1 && m.workers[0].agent == "cluster-test/alpha")
            .then_some(()))
    })
    .await?;
    let _ = sdk.send(());
    server.shutdown().await
}
