//! The gRPC surface: one file per service, mapping proto messages to domain
//! calls and domain errors to statuses (in [`crate::contract::status`]).

pub mod access;
pub mod admin;
pub mod authorize;
pub mod availability;
pub mod cluster;
pub mod gate;
pub mod keys;
pub mod kind;
pub mod limits;
pub mod migration;
pub mod operation;
pub mod pages;
pub mod provider_config;
pub mod reactor_binding;
pub mod resource;
pub mod watch;
pub mod write;

use std::sync::Arc;
use std::time::Duration;

use converge_proto::v1::admin_service_server::AdminServiceServer;
use converge_proto::v1::cluster_service_server::ClusterServiceServer;
use converge_proto::v1::kind_migration_service_server::KindMigrationServiceServer;
use converge_proto::v1::kind_service_server::KindServiceServer;
use converge_proto::v1::operation_service_server::OperationServiceServer;
use converge_proto::v1::provider_config_service_server::ProviderConfigServiceServer;
use converge_proto::v1::reactor_binding_service_server::ReactorBindingServiceServer;
use converge_proto::v1::resource_service_server::ResourceServiceServer;
use converge_proto::worker_v1::worker_service_server::WorkerServiceServer;
use sqlx::PgPool;
use tonic::server::NamedService;
use tonic::transport::Server;
use tonic::transport::server::Router;

use crate::catalog::KindCatalog;
use crate::config::{RetentionArgs, Role};
use crate::db::probe::DatabaseStatus;
use crate::db::replica::ReadPool;
use crate::store::kinds;

/// Largest request or response message accepted, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// What every service handler shares.
#[derive(Debug, Clone)]
pub struct ApiState {
    /// The database pool (the primary): every write, every read inside a
    /// write, watches and every read that must see the latest commit.
    pub pool: PgPool,
    /// Where the stale-tolerant reads run (ADR 0032): GetResource,
    /// ListResources, ListResourceEvents, GetResourceGraph and
    /// ListSpecRevisions. The replica while it answers, else the primary.
    pub read_pool: ReadPool,
    /// This process's cluster member id.
    pub member_id: String,
    /// Cluster liveness window.
    pub liveness: Duration,
    /// Compiled kind manifests.
    pub catalog: Arc<KindCatalog>,
    /// Retention settings (events are trimmed as they are written).
    pub retention: RetentionArgs,
    /// The change-log reader of this process (on API roles).
    pub watch: Option<Arc<crate::watch::WatchHub>>,
    /// The broker of this process (on broker roles).
    pub broker: Option<Arc<crate::broker::Broker>>,
    /// Whether the health probe counts the database as reachable; while it
    /// does not, calls are refused at once ([`availability`]).
    pub database: DatabaseStatus,
    /// The authorization policy in force (off unless configured).
    pub authz: crate::contract::authz::Authorizer,
    /// This process's notification feed: calls that wait for another
    /// process (a plan's composer) wake on it; without it they poll.
    pub notifications: Option<crate::db::notify::Notifications>,
}

impl ApiState {
    /// Shared state for the services.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        pool: PgPool,
        read_pool: ReadPool,
        member_id: String,
        liveness: Duration,
        catalog: Arc<KindCatalog>,
        retention: RetentionArgs,
        watch: Option<Arc<crate::watch::WatchHub>>,
        broker: Option<Arc<crate::broker::Broker>>,
    ) -> Self {
        Self {
            pool,
            read_pool,
            member_id,
            liveness,
            catalog,
            retention,
            watch,
            broker,
            database: DatabaseStatus::reachable(),
            authz: crate::contract::authz::Authorizer::off(),
            notifications: None,
        }
    }

    /// The same state waking on `notifications`.
    pub fn with_notifications(mut self, notifications: crate::db::notify::Notifications) -> Self {
        self.notifications = Some(notifications);
        self
    }

    /// The same state deciding calls by `authz`.
    pub fn with_authz(mut self, authz: crate::contract::authz::Authorizer) -> Self {
        self.authz = authz;
        self
    }

    pub(crate) fn liveness_secs(&self) -> i32 {
        i32::try_from(self.liveness.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// The manifest version in force for a kind version (0 when it has no
    /// manifest), from the catalog when cached.
    pub async fn manifest_version(
        &self,
        kind: &str,
        kind_version: i32,
    ) -> Result<i64, crate::contract::status::ApiError> {
        if let Some(version) = self.catalog.cached_version(kind, kind_version) {
            return Ok(version);
        }
        let mut conn = self.pool.acquire().await?;
        Ok(kinds::kind_state(&mut conn, kind, kind_version)
            .await?
            .map(|s| s.manifest_version)
            .unwrap_or(0))
    }
}

/// The router type: every service behind the access layer (outermost), the
/// message-limit layer and the database availability gate.
pub type ApiRouter = Router<
    tower::layer::util::Stack<
        availability::AvailabilityLayer,
        tower::layer::util::Stack<
            limits::MessageLimitLayer,
            tower::layer::util::Stack<
                access::AccessLayer,
                tower::layer::util::Stack<crate::telemetry::rpc::RpcTelemetryLayer, tower::layer::util::Identity>,
            >,
        >,
    >,
>;

/// The assembled router and the names of the services it serves (for health).
pub struct Routes {
    /// The router, ready to serve.
    pub router: ApiRouter,
    /// Fully-qualified names of the application services served.
    pub names: Vec<&'static str>,
}

/// Builds the router for `role`: health and reflection always, the
/// control-plane API on API roles, the worker contract on broker roles.
pub fn routes<H>(
    state: ApiState,
    role: Role,
    access: crate::config::AccessSettings,
    health: H,
) -> Result<Routes, tonic_reflection::server::Error>
where
    H: tonic::codegen::Service<
            tonic::codegen::http::Request<tonic::body::Body>,
            Response = tonic::codegen::http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        > + NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    H::Future: Send + 'static,
{
    let mut names: Vec<&'static str> = Vec::new();
    let api = role.serves_api();
    let workers = role.serves_workers();

    macro_rules! service {
        ($enabled:expr, $server:ident, $inner:expr) => {{
            if $enabled {
                let inner = $inner;
                names.push(service_name(&inner, $server::new));
                Some(
                    $server::new(inner)
                        .max_decoding_message_size(MAX_MESSAGE_BYTES)
                        .max_encoding_message_size(MAX_MESSAGE_BYTES),
                )
            } else {
                None
            }
        }};
    }
    let resource = service!(api, ResourceServiceServer, resource::ResourceApi::new(state.clone()));
    let operation = service!(api, OperationServiceServer, operation::OperationApi::new(state.clone()));
    let kind = service!(api, KindServiceServer, kind::KindApi::new(state.clone()));
    let provider_config = service!(
        api,
        ProviderConfigServiceServer,
        provider_config::ProviderConfigApi::new(state.clone())
    );
    let reactor_binding = service!(
        api,
        ReactorBindingServiceServer,
        reactor_binding::ReactorBindingApi::new(state.clone())
    );
    let admin = service!(api, AdminServiceServer, admin::AdminApi::new(state.clone()));
    let migration = service!(
        api,
        KindMigrationServiceServer,
        migration::KindMigrationApi::new(state.clone())
    );
    let cluster = service!(true, ClusterServiceServer, cluster::ClusterApi::new(state.clone()));
    let worker = match state.broker.clone() {
        Some(broker) if workers => service!(true, WorkerServiceServer, crate::broker::WorkerApi::new(broker)),
        _ => None,
    };

    let reflection_v1 = reflection(&names).build_v1()?;
    let reflection_v1alpha = reflection(&names).build_v1alpha()?;
    let router = Server::builder()
        .layer(crate::telemetry::rpc::RpcTelemetryLayer)
        .layer(access::layer(access))
        .layer(limits::MessageLimitLayer)
        .layer(availability::AvailabilityLayer::new(state.database.clone()))
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .tcp_keepalive(Some(Duration::from_secs(60)))
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_optional_service(resource)
        .add_optional_service(operation)
        .add_optional_service(kind)
        .add_optional_service(provider_config)
        .add_optional_service(reactor_binding)
        .add_optional_service(admin)
        .add_optional_service(migration)
        .add_optional_service(cluster)
        .add_optional_service(worker);
    Ok(Routes { router, names })
}

/// The gRPC name of the server type `wrap` builds around `inner`.
fn service_name<T, S: NamedService>(_inner: &T, _wrap: fn(T) -> S) -> &'static str {
    S::NAME
}

/// A reflection builder (v1 for `buf curl`, v1alpha for grpcurl) advertising
/// exactly the services this process serves. Each version's builder adds
/// only its own descriptors, so both are registered here: a client of
/// either version can then describe every service either one lists.
fn reflection(names: &[&'static str]) -> tonic_reflection::server::Builder<'static> {
    let mut builder = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(converge_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET)
        .with_service_name("grpc.health.v1.Health")
        .with_service_name("grpc.reflection.v1.ServerReflection")
        .with_service_name("grpc.reflection.v1alpha.ServerReflection");
    for name in names {
        builder = builder.with_service_name(*name);
    }
    builder
}
