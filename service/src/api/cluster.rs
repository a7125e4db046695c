//! The `converge.v1.ClusterService` API: fleet membership and build identity.

use crate::domain::authz::{Access, Object};
use converge_proto::v1::cluster_service_server::ClusterService;
use converge_proto::v1::{
    BrokerCounters, ClusterMember, ConnectedWorker, GetVersionRequest, GetVersionResponse, ListClusterMembersRequest,
    ListClusterMembersResponse, MemberRole, ServedKind, ShardRange,
};
use tonic::{Request, Response, Status};

use super::ApiState;
use crate::contract::convert::{json_to_struct, timestamp};
use crate::contract::status::ApiError;
use crate::domain::shard;
use crate::store::cluster::{self as store, MemberRow};
use crate::version;

/// Serves `converge.v1.ClusterService`.
#[derive(Debug, Clone)]
pub struct ClusterApi {
    state: ApiState,
}

impl ClusterApi {
    /// A service over `state`.
    pub fn new(state: ApiState) -> Self {
        Self { state }
    }
}

#[tonic::async_trait]
impl ClusterService for ClusterApi {
    async fn list_cluster_members(
        &self,
        request: Request<ListClusterMembersRequest>,
    ) -> Result<Response<ListClusterMembersResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        self.state
            .authz
            .require_object(&principal, Object::Cluster, Access::Read)?;
        let ready_only = request.into_inner().ready_only;
        let rows = store::list(&self.state.pool, self.state.liveness_secs())
            .await
            .map_err(ApiError::from)?;
        let members = rows
            .into_iter()
            .map(member_to_proto)
            .filter(|m| !ready_only || m.ready)
            .collect();
        Ok(Response::new(ListClusterMembersResponse { members }))
    }

    async fn get_version(&self, _request: Request<GetVersionRequest>) -> Result<Response<GetVersionResponse>, Status> {
        let (database_version, schema_version) = store::database_identity(&self.state.pool)
            .await
            .map_err(ApiError::from)?;
        Ok(Response::new(GetVersionResponse {
            version: version::VERSION.to_owned(),
            commit: version::commit().unwrap_or_default().to_owned(),
            api_versions: version::API_VERSIONS.iter().map(|v| (*v).to_owned()).collect(),
            rust_version: version::RUSTC.to_owned(),
            build_time: None,
            database_version,
            schema_version,
        }))
    }
}

fn member_to_proto(row: MemberRow) -> ClusterMember {
    let role = match row.role.as_str() {
        "all" => MemberRole::All,
        "control" => MemberRole::Control,
        "broker" => MemberRole::Broker,
        _ => MemberRole::Unspecified,
    };
    ClusterMember {
        ready: row.live && row.state == "serving",
        member_id: row.member_id,
        role: role.into(),
        shard_range: row.shard_lo.zip(row.shard_hi).map(|(lo, hi)| ShardRange {
            lo: i32::from(lo),
            hi: i32::from(hi),
        }),
        version: row.version,
        hostname: row.hostname,
        pid: row.pid,
        start_time: Some(timestamp(row.started_at)),
        last_heartbeat_time: Some(timestamp(row.last_heartbeat)),
        in_flight: row.in_flight,
        connected_workers: row.connected_workers,
        workers: row.workers.0.into_iter().map(worker_to_proto).collect(),
        config: json_to_struct(&row.config.0).filter(|c| !c.fields.is_empty()),
        broker_counters: (row.role != "control").then(|| {
            let count = |name: &str| row.counters.0.get(name).copied().unwrap_or(0);
            BrokerCounters {
                dispatched: count("dispatched"),
                applied: count("applied"),
                failed: count("failed"),
                stale: count("stale"),
                composed: count("composed"),
            }
        }),
    }
}

fn worker_to_proto(worker: shard::ConnectedWorker) -> ConnectedWorker {
    ConnectedWorker {
        identity: worker.identity,
        agent: worker.agent,
        kinds: worker
            .kinds
            .into_iter()
            .map(|k| ServedKind {
                kind: k.kind,
                kind_version: k.kind_version,
                ready: k.ready,
            })
            .collect(),
        max_inflight: worker.max_inflight,
        in_flight: worker.in_flight,
        connect_time: Some(timestamp(worker.connected_at)),
    }
}
