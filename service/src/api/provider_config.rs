//! The `converge.v1.ProviderConfigService` API: runtime-editable provider configs.
use converge_proto::v1::provider_config_service_server::ProviderConfigService;
use converge_proto::v1::{
    ApplyProviderConfigRequest, ApplyProviderConfigResponse, DeleteProviderConfigRequest, DeleteProviderConfigResponse,
    GetProviderConfigRequest, GetProviderConfigResponse, ListProviderConfigsRequest, ListProviderConfigsResponse,
};
use tonic::{Request, Response, Status};

use crate::contract::status::not_implemented;

/// Serves `converge.v1.ProviderConfigService`.
#[derive(Debug, Clone, Default)]
pub struct ProviderConfigApi;

#[tonic::async_trait]
impl ProviderConfigService for ProviderConfigApi {
    async fn apply_provider_config(
        &self,
        _request: Request<ApplyProviderConfigRequest>,
    ) -> Result<Response<ApplyProviderConfigResponse>, Status> {
        Err(not_implemented(
            "converge.v1.ProviderConfigService/ApplyProviderConfig",
            "provider configs",
        ))
    }

    async fn get_provider_config(
        &self,
        _request: Request<GetProviderConfigRequest>,
    ) -> Result<Response<GetProviderConfigResponse>, Status> {
        Err(not_implemented(
            "converge.v1.ProviderConfigService/GetProviderConfig",
            "provider configs",
        ))
    }

    async fn list_provider_configs(
        &self,
        _request: Request<ListProviderConfigsRequest>,
    ) -> Result<Response<ListProviderConfigsResponse>, Status> {
        Err(not_implemented(
            "converge.v1.ProviderConfigService/ListProviderConfigs",
            "provider configs",
        ))
    }

    async fn delete_provider_config(
        &self,
        _request: Request<DeleteProviderConfigRequest>,
    ) -> Result<Response<DeleteProviderConfigResponse>, Status> {
        Err(not_implemented(
            "converge.v1.ProviderConfigService/DeleteProviderConfig",
            "provider configs",
        ))
    }
}
