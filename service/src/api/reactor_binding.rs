//! The `converge.v1.ReactorBindingService` API: lifecycle reactor subscriptions.
use converge_proto::v1::reactor_binding_service_server::ReactorBindingService;
use converge_proto::v1::{
    ApplyReactorBindingRequest, ApplyReactorBindingResponse, DeleteReactorBindingRequest, DeleteReactorBindingResponse,
    GetReactorBindingRequest, GetReactorBindingResponse, ListReactorBindingsRequest, ListReactorBindingsResponse,
};
use tonic::{Request, Response, Status};

use crate::contract::status::not_implemented;

/// Serves `converge.v1.ReactorBindingService`.
#[derive(Debug, Clone, Default)]
pub struct ReactorBindingApi;

#[tonic::async_trait]
impl ReactorBindingService for ReactorBindingApi {
    async fn apply_reactor_binding(
        &self,
        _request: Request<ApplyReactorBindingRequest>,
    ) -> Result<Response<ApplyReactorBindingResponse>, Status> {
        Err(not_implemented(
            "converge.v1.ReactorBindingService/ApplyReactorBinding",
            "reactor bindings",
        ))
    }

    async fn get_reactor_binding(
        &self,
        _request: Request<GetReactorBindingRequest>,
    ) -> Result<Response<GetReactorBindingResponse>, Status> {
        Err(not_implemented(
            "converge.v1.ReactorBindingService/GetReactorBinding",
            "reactor bindings",
        ))
    }

    async fn list_reactor_bindings(
        &self,
        _request: Request<ListReactorBindingsRequest>,
    ) -> Result<Response<ListReactorBindingsResponse>, Status> {
        Err(not_implemented(
            "converge.v1.ReactorBindingService/ListReactorBindings",
            "reactor bindings",
        ))
    }

    async fn delete_reactor_binding(
        &self,
        _request: Request<DeleteReactorBindingRequest>,
    ) -> Result<Response<DeleteReactorBindingResponse>, Status> {
        Err(not_implemented(
            "converge.v1.ReactorBindingService/DeleteReactorBinding",
            "reactor bindings",
        ))
    }
}
