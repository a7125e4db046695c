//! The `converge.v1.KindService` API: kind manifests and live kind configuration.
use converge_proto::v1::kind_service_server::KindService;
use converge_proto::v1::{
    ApplyKindManifestRequest, ApplyKindManifestResponse, DeleteKindManifestRequest, DeleteKindManifestResponse,
    GetKindConfigRequest, GetKindConfigResponse, GetKindManifestRequest, GetKindManifestResponse,
    ListKindManifestsRequest, ListKindManifestsResponse, UpdateKindConfigRequest, UpdateKindConfigResponse,
};
use tonic::{Request, Response, Status};

use super::status::not_implemented;

/// Serves `converge.v1.KindService`.
#[derive(Debug, Clone, Default)]
pub struct KindApi;

#[tonic::async_trait]
impl KindService for KindApi {
    async fn apply_kind_manifest(
        &self,
        _request: Request<ApplyKindManifestRequest>,
    ) -> Result<Response<ApplyKindManifestResponse>, Status> {
        Err(not_implemented(
            "converge.v1.KindService/ApplyKindManifest",
            "kind manifests",
        ))
    }

    async fn get_kind_manifest(
        &self,
        _request: Request<GetKindManifestRequest>,
    ) -> Result<Response<GetKindManifestResponse>, Status> {
        Err(not_implemented(
            "converge.v1.KindService/GetKindManifest",
            "kind manifests",
        ))
    }

    async fn list_kind_manifests(
        &self,
        _request: Request<ListKindManifestsRequest>,
    ) -> Result<Response<ListKindManifestsResponse>, Status> {
        Err(not_implemented(
            "converge.v1.KindService/ListKindManifests",
            "kind manifests",
        ))
    }

    async fn delete_kind_manifest(
        &self,
        _request: Request<DeleteKindManifestRequest>,
    ) -> Result<Response<DeleteKindManifestResponse>, Status> {
        Err(not_implemented(
            "converge.v1.KindService/DeleteKindManifest",
            "kind manifests",
        ))
    }

    async fn get_kind_config(
        &self,
        _request: Request<GetKindConfigRequest>,
    ) -> Result<Response<GetKindConfigResponse>, Status> {
        Err(not_implemented(
            "converge.v1.KindService/GetKindConfig",
            "kind manifests",
        ))
    }

    async fn update_kind_config(
        &self,
        _request: Request<UpdateKindConfigRequest>,
    ) -> Result<Response<UpdateKindConfigResponse>, Status> {
        Err(not_implemented(
            "converge.v1.KindService/UpdateKindConfig",
            "kind manifests",
        ))
    }
}
