//! The `converge.v1.OperationService` API: verbs invoked on resources.
use converge_proto::v1::operation_service_server::OperationService;
use converge_proto::v1::{
    GetOperationRequest, GetOperationResponse, InvokeOperationRequest, InvokeOperationResponse, ListOperationsRequest,
    ListOperationsResponse,
};
use tonic::{Request, Response, Status};

use crate::contract::status::not_implemented;

/// Serves `converge.v1.OperationService`.
#[derive(Debug, Clone, Default)]
pub struct OperationApi;

#[tonic::async_trait]
impl OperationService for OperationApi {
    async fn invoke_operation(
        &self,
        _request: Request<InvokeOperationRequest>,
    ) -> Result<Response<InvokeOperationResponse>, Status> {
        Err(not_implemented(
            "converge.v1.OperationService/InvokeOperation",
            "operations (verbs on resources)",
        ))
    }

    async fn get_operation(
        &self,
        _request: Request<GetOperationRequest>,
    ) -> Result<Response<GetOperationResponse>, Status> {
        Err(not_implemented(
            "converge.v1.OperationService/GetOperation",
            "operations (verbs on resources)",
        ))
    }

    async fn list_operations(
        &self,
        _request: Request<ListOperationsRequest>,
    ) -> Result<Response<ListOperationsResponse>, Status> {
        Err(not_implemented(
            "converge.v1.OperationService/ListOperations",
            "operations (verbs on resources)",
        ))
    }
}
