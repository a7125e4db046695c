//! The `converge.worker.v1.WorkerService` contract served to workers (broker duty).
use converge_proto::worker_v1::worker_service_server::WorkerService;
use converge_proto::worker_v1::{
    GetProviderConfigRequest, GetProviderConfigResponse, WorkStreamRequest, WorkStreamResponse,
};
use tonic::Streaming;
use tonic::{Request, Response, Status};

use super::ResponseStream;
use super::status::not_implemented;

/// Serves `converge.worker.v1.WorkerService`.
#[derive(Debug, Clone, Default)]
pub struct WorkerApi;

#[tonic::async_trait]
impl WorkerService for WorkerApi {
    type WorkStreamStream = ResponseStream<WorkStreamResponse>;

    async fn work_stream(
        &self,
        _request: Request<Streaming<WorkStreamRequest>>,
    ) -> Result<Response<Self::WorkStreamStream>, Status> {
        Err(not_implemented(
            "converge.worker.v1.WorkerService/WorkStream",
            "the worker broker",
        ))
    }

    async fn get_provider_config(
        &self,
        _request: Request<GetProviderConfigRequest>,
    ) -> Result<Response<GetProviderConfigResponse>, Status> {
        Err(not_implemented(
            "converge.worker.v1.WorkerService/GetProviderConfig",
            "the worker broker",
        ))
    }
}
