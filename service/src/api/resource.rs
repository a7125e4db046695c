//! The `converge.v1.ResourceService` API.
use converge_proto::v1::resource_service_server::ResourceService;
use converge_proto::v1::{
    ApplyResourceRequest, ApplyResourceResponse, CreateResourceRequest, CreateResourceResponse, DeleteResourceRequest,
    DeleteResourceResponse, GetResourceGraphRequest, GetResourceGraphResponse, GetResourceRequest, GetResourceResponse,
    ListResourceEventsRequest, ListResourceEventsResponse, ListResourcesRequest, ListResourcesResponse,
    ListSpecRevisionsRequest, ListSpecRevisionsResponse, QuarantineResourceRequest, QuarantineResourceResponse,
    ReconcileResourceRequest, ReconcileResourceResponse, RollbackResourceRequest, RollbackResourceResponse,
    UnquarantineResourceRequest, UnquarantineResourceResponse, WatchResourceEventsRequest, WatchResourceEventsResponse,
    WatchResourcesRequest, WatchResourcesResponse,
};
use tonic::{Request, Response, Status};

use super::ResponseStream;
use super::status::not_implemented;

/// Serves `converge.v1.ResourceService`.
#[derive(Debug, Clone, Default)]
pub struct ResourceApi;

#[tonic::async_trait]
impl ResourceService for ResourceApi {
    async fn apply_resource(
        &self,
        _request: Request<ApplyResourceRequest>,
    ) -> Result<Response<ApplyResourceResponse>, Status> {
        Err(not_implemented(
            "converge.v1.ResourceService/ApplyResource",
            "kinds and resources",
        ))
    }

    async fn create_resource(
        &self,
        _request: Request<CreateResourceRequest>,
    ) -> Result<Response<CreateResourceResponse>, Status> {
        Err(not_implemented(
            "converge.v1.ResourceService/CreateResource",
            "kinds and resources",
        ))
    }

    async fn get_resource(
        &self,
        _request: Request<GetResourceRequest>,
    ) -> Result<Response<GetResourceResponse>, Status> {
        Err(not_implemented(
            "converge.v1.ResourceService/GetResource",
            "kinds and resources",
        ))
    }

    async fn list_resources(
        &self,
        _request: Request<ListResourcesRequest>,
    ) -> Result<Response<ListResourcesResponse>, Status> {
        Err(not_implemented(
            "converge.v1.ResourceService/ListResources",
            "kinds and resources",
        ))
    }

    async fn delete_resource(
        &self,
        _request: Request<DeleteResourceRequest>,
    ) -> Result<Response<DeleteResourceResponse>, Status> {
        Err(not_implemented(
            "converge.v1.ResourceService/DeleteResource",
            "kinds and resources",
        ))
    }

    type WatchResourcesStream = ResponseStream<WatchResourcesResponse>;

    async fn watch_resources(
        &self,
        _request: Request<WatchResourcesRequest>,
    ) -> Result<Response<Self::WatchResourcesStream>, Status> {
        Err(not_implemented("converge.v1.ResourceService/WatchResources", "watches"))
    }

    async fn reconcile_resource(
        &self,
        _request: Request<ReconcileResourceRequest>,
    ) -> Result<Response<ReconcileResourceResponse>, Status> {
        Err(not_implemented(
            "converge.v1.ResourceService/ReconcileResource",
            "the reconcile engine",
        ))
    }

    async fn quarantine_resource(
        &self,
        _request: Request<QuarantineResourceRequest>,
    ) -> Result<Response<QuarantineResourceResponse>, Status> {
        Err(not_implemented(
            "converge.v1.ResourceService/QuarantineResource",
            "quarantine",
        ))
    }

    async fn unquarantine_resource(
        &self,
        _request: Request<UnquarantineResourceRequest>,
    ) -> Result<Response<UnquarantineResourceResponse>, Status> {
        Err(not_implemented(
            "converge.v1.ResourceService/UnquarantineResource",
            "quarantine",
        ))
    }

    async fn list_resource_events(
        &self,
        _request: Request<ListResourceEventsRequest>,
    ) -> Result<Response<ListResourceEventsResponse>, Status> {
        Err(not_implemented(
            "converge.v1.ResourceService/ListResourceEvents",
            "resource events",
        ))
    }

    type WatchResourceEventsStream = ResponseStream<WatchResourceEventsResponse>;

    async fn watch_resource_events(
        &self,
        _request: Request<WatchResourceEventsRequest>,
    ) -> Result<Response<Self::WatchResourceEventsStream>, Status> {
        Err(not_implemented(
            "converge.v1.ResourceService/WatchResourceEvents",
            "watches",
        ))
    }

    async fn get_resource_graph(
        &self,
        _request: Request<GetResourceGraphRequest>,
    ) -> Result<Response<GetResourceGraphResponse>, Status> {
        Err(not_implemented(
            "converge.v1.ResourceService/GetResourceGraph",
            "composition graphs",
        ))
    }

    async fn list_spec_revisions(
        &self,
        _request: Request<ListSpecRevisionsRequest>,
    ) -> Result<Response<ListSpecRevisionsResponse>, Status> {
        Err(not_implemented(
            "converge.v1.ResourceService/ListSpecRevisions",
            "spec history and rollback",
        ))
    }

    async fn rollback_resource(
        &self,
        _request: Request<RollbackResourceRequest>,
    ) -> Result<Response<RollbackResourceResponse>, Status> {
        Err(not_implemented(
            "converge.v1.ResourceService/RollbackResource",
            "spec history and rollback",
        ))
    }
}
