//! The Rust SDK reads a real server's error reasons as the proto enum
//! `converge.v1.ErrorReason`, as the Go, Python and TypeScript SDKs do.

use converge_integration::TestServer;
use converge_proto::v1::{GetOperationRequest, GetResourceRequest};
use converge_sdk::error::{ERROR_DOMAIN, reason_name};
use converge_sdk::{ErrorReason, StatusExt};
use tonic::Code;

#[tokio::test]
async fn the_sdk_reads_reasons_as_the_proto_enum() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;

    let missing = client
        .resources()
        .get_resource(GetResourceRequest {
            kind: "x".into(),
            name: "y".into(),
        })
        .await
        .expect_err("no such resource");
    assert_eq!(missing.code(), Code::NotFound);
    assert_eq!(missing.error_reason(), ErrorReason::ResourceNotFound, "{missing:?}");
    assert!(missing.has_reason(ErrorReason::ResourceNotFound));
    let info = missing.error_info().expect("ErrorInfo");
    assert_eq!(info.domain, ERROR_DOMAIN);
    assert_eq!(info.reason, reason_name(ErrorReason::ResourceNotFound));

    let malformed = client
        .operations()
        .get_operation(GetOperationRequest { uid: "y".into() })
        .await
        .expect_err("not a UUID");
    assert_eq!(malformed.code(), Code::InvalidArgument);
    assert!(malformed.has_reason(ErrorReason::InvalidField), "{malformed:?}");
    assert!(!malformed.has_reason(ErrorReason::ResourceNotFound));
    server.shutdown().await
}
