//! The serving foundation over real gRPC on loopback: reflection, health,
//! UNIMPLEMENTED for services a role does not serve, version, cluster membership and roles.

use std::collections::BTreeSet;
use std::time::Duration;

use converge_integration::{TestDatabase, TestServer, eventually};
use converge_proto::v1::{GetResourceRequest, GetVersionRequest, ListClusterMembersRequest, MemberRole};
use converge_proto::worker_v1::GetProviderConfigRequest;
use converge_service::config::Role;
use converge_service::db::migrate::MIGRATOR;
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};
use tonic_reflection::pb::v1alpha;

const API_SERVICES: [&str; 8] = [
    "converge.v1.AdminService",
    "converge.v1.ClusterService",
    "converge.v1.KindMigrationService",
    "converge.v1.KindService",
    "converge.v1.OperationService",
    "converge.v1.ProviderConfigService",
    "converge.v1.ReactorBindingService",
    "converge.v1.ResourceService",
];
const PLUMBING: [&str; 3] = [
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
];

async fn channel(address: &str) -> anyhow::Result<tonic::transport::Channel> {
    Ok(converge_sdk::Client::connect(address).await?.channel())
}

async fn list_services_v1(address: &str) -> anyhow::Result<BTreeSet<String>> {
    let mut client = ServerReflectionClient::new(channel(address).await?);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = client
        .server_reflection_info(tokio_stream::iter([request]))
        .await?
        .into_inner();
    let Some(ServerReflectionResponse {
        message_response: Some(MessageResponse::ListServicesResponse(list)),
        ..
    }) = responses.message().await?
    else {
        anyhow::bail!("no list-services answer");
    };
    Ok(list.service.into_iter().map(|s| s.name).collect())
}

async fn list_services_v1alpha(address: &str) -> anyhow::Result<BTreeSet<String>> {
    use v1alpha::server_reflection_request::MessageRequest as Req;
    use v1alpha::server_reflection_response::MessageResponse as Resp;
    let mut client = v1alpha::server_reflection_client::ServerReflectionClient::new(channel(address).await?);
    let request = v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(Req::ListServices(String::new())),
    };
    let mut responses = client
        .server_reflection_info(tokio_stream::iter([request]))
        .await?
        .into_inner();
    let Some(v1alpha::ServerReflectionResponse {
        message_response: Some(Resp::ListServicesResponse(list)),
        ..
    }) = responses.message().await?
    else {
        anyhow::bail!("no list-services answer");
    };
    Ok(list.service.into_iter().map(|s| s.name).collect())
}

/// Sends one reflection request through either version's client and returns
/// the file descriptors of the answer (an error names what was refused).
macro_rules! reflect {
    ($module:path, $address:expr, $symbol:expr, $file:expr) => {{
        use reflection::server_reflection_request::MessageRequest as Req;
        use reflection::server_reflection_response::MessageResponse as Resp;
        use $module as reflection;
        let mut client = reflection::server_reflection_client::ServerReflectionClient::new(channel($address).await?);
        let message_request = Some(match $file {
            None => Req::FileContainingSymbol($symbol.to_owned()),
            Some(name) => Req::FileByFilename(name.clone()),
        });
        let request = reflection::ServerReflectionRequest {
            host: String::new(),
            message_request,
        };
        let mut responses = client
            .server_reflection_info(tokio_stream::iter([request]))
            .await?
            .into_inner();
        match responses.message().await?.and_then(|r| r.message_response) {
            Some(Resp::FileDescriptorResponse(f)) => f.file_descriptor_proto,
            other => anyhow::bail!(
                "{} cannot describe {} ({:?}): {other:?}",
                stringify!($module),
                $symbol,
                $file
            ),
        }
    }};
}

/// What a reflection client needs to describe `symbol`: the file holding it
/// and every file that file imports, transitively (as grpcurl and grpcui
/// fetch them).
async fn describe(address: &str, symbol: &str, alpha: bool) -> anyhow::Result<usize> {
    use prost::Message as _;
    let mut queue = vec![None::<String>];
    let mut seen = BTreeSet::new();
    while let Some(file) = queue.pop() {
        let files = if alpha {
            reflect!(tonic_reflection::pb::v1alpha, address, symbol, &file)
        } else {
            reflect!(tonic_reflection::pb::v1, address, symbol, &file)
        };
        for bytes in files {
            let descriptor = prost_types::FileDescriptorProto::decode(bytes.as_slice())?;
            if seen.insert(descriptor.name().to_owned()) {
                queue.extend(
                    descriptor
                        .dependency
                        .iter()
                        .filter(|d| !seen.contains(*d))
                        .cloned()
                        .map(Some),
                );
            }
        }
    }
    Ok(seen.len())
}

#[tokio::test]
async fn every_listed_service_can_be_described_through_both_reflection_versions() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let address = server.address();
    for (alpha, listed) in [
        (false, list_services_v1(&address).await?),
        (true, list_services_v1alpha(&address).await?),
    ] {
        for service in &listed {
            let files = describe(&address, service, alpha).await?;
            assert!(files >= 1, "{service}");
        }
    }
    server.shutdown().await
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn reflection_lists_all_nine_services_plus_health_and_reflection() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let mut expected = names(&API_SERVICES);
    expected.extend(names(&PLUMBING));
    expected.insert("converge.worker.v1.WorkerService".into());
    assert_eq!(list_services_v1(&server.address()).await?, expected);
    assert_eq!(list_services_v1alpha(&server.address()).await?, expected);
    server.shutdown().await
}

#[tokio::test]
async fn roles_serve_only_their_duties() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let broker = TestServer::start_on(database.clone(), Role::Broker).await?;
    let control = TestServer::start_on(database, Role::Control).await?;

    let mut broker_expected = names(&PLUMBING);
    broker_expected.insert("converge.worker.v1.WorkerService".into());
    broker_expected.insert("converge.v1.ClusterService".into());
    assert_eq!(list_services_v1(&broker.address()).await?, broker_expected);
    let mut control_expected = names(&API_SERVICES);
    control_expected.extend(names(&PLUMBING));
    assert_eq!(list_services_v1(&control.address()).await?, control_expected);

    // A broker has no resource API; a control pod has no worker endpoint.
    let err = broker
        .client()
        .await?
        .resources()
        .get_resource(GetResourceRequest::default())
        .await
        .err();
    assert_eq!(err.map(|e| e.code()), Some(Code::Unimplemented));
    let err = control
        .client()
        .await?
        .workers()
        .get_provider_config(GetProviderConfigRequest::default())
        .await
        .err();
    assert_eq!(err.map(|e| e.code()), Some(Code::Unimplemented));

    broker.shutdown().await?;
    control.shutdown().await
}

#[tokio::test]
async fn health_is_serving_and_flips_to_not_serving_on_shutdown() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let mut health = HealthClient::new(channel(&server.address()).await?);
    for service in ["", "converge.v1.ResourceService", "converge.worker.v1.WorkerService"] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await?
            .into_inner()
            .status();
        assert_eq!(status, ServingStatus::Serving, "service {service:?}");
    }

    let mut watch = health
        .watch(HealthCheckRequest { service: String::new() })
        .await?
        .into_inner();
    let first = watch.message().await?.map(|m| m.status());
    assert_eq!(first, Some(ServingStatus::Serving));

    let stopping = tokio::spawn(server.shutdown());
    // The drain announces itself before the connection goes away.
    let next = tokio::time::timeout(Duration::from_secs(5), watch.message()).await?;
    assert_eq!(next.ok().flatten().map(|m| m.status()), Some(ServingStatus::NotServing));
    stopping.await??;
    Ok(())
}

#[tokio::test]
async fn get_version_reports_build_and_database() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let version = server
        .client()
        .await?
        .cluster()
        .get_version(GetVersionRequest {})
        .await?
        .into_inner();
    assert_eq!(version.version, converge_service::version::VERSION);
    assert_eq!(version.api_versions, ["converge.v1", "converge.worker.v1"]);
    assert!(version.rust_version.starts_with("rustc "), "{}", version.rust_version);
    assert!(
        version.database_version.starts_with("1"),
        "{}",
        version.database_version
    );
    let newest = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    assert_eq!(version.schema_version, newest);
    server.shutdown().await
}

/// Reads the members and returns their shard ranges when every live member has one.
async fn shard_ranges(server: &TestServer) -> anyhow::Result<Vec<(String, i32, i32)>> {
    let members = server
        .client()
        .await?
        .cluster()
        .list_cluster_members(ListClusterMembersRequest { ready_only: true })
        .await?
        .into_inner()
        .members;
    Ok(members
        .into_iter()
        .filter_map(|m| m.shard_range.map(|r| (m.member_id, r.lo, r.hi)))
        .collect())
}

fn tiles_all_shards(ranges: &[(String, i32, i32)]) -> bool {
    let mut sorted: Vec<(i32, i32)> = ranges.iter().map(|(_, lo, hi)| (*lo, *hi)).collect();
    sorted.sort();
    let mut next = 0;
    for (lo, hi) in sorted {
        if lo != next || hi < lo {
            return false;
        }
        next = hi + 1;
    }
    next == 256
}

#[tokio::test]
async fn members_share_the_shards_without_a_leader() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let first = TestServer::start_on(database.clone(), Role::All).await?;
    let only = shard_ranges(&first).await?;
    assert_eq!(only, vec![(first.member_id().to_owned(), 0, 255)]);

    let second = TestServer::start_on(database.clone(), Role::All).await?;
    let third = TestServer::start_on(database, Role::All).await?;
    // Every member re-tiles on the join notification: three disjoint ranges covering 0..=255.
    let tiled = eventually(Duration::from_secs(10), || async {
        let ranges = shard_ranges(&first).await?;
        Ok((ranges.len() == 3 && tiles_all_shards(&ranges)).then_some(ranges))
    })
    .await?;
    let ids: BTreeSet<&str> = tiled.iter().map(|(id, _, _)| id.as_str()).collect();
    assert_eq!(
        ids,
        [first.member_id(), second.member_id(), third.member_id()]
            .into_iter()
            .collect()
    );
    let members = first
        .client()
        .await?
        .cluster()
        .list_cluster_members(ListClusterMembersRequest::default())
        .await?
        .into_inner()
        .members;
    assert!(members.iter().all(|m| m.role() == MemberRole::All && m.pid > 0));

    // A graceful leave hands its shards back to the survivors.
    second.shutdown().await?;
    third.shutdown().await?;
    eventually(Duration::from_secs(10), || async {
        let ranges = shard_ranges(&first).await?;
        Ok((ranges == vec![(first.member_id().to_owned(), 0, 255)]).then_some(()))
    })
    .await?;
    first.shutdown().await
}
