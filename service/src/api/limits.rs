//! Makes the transport's message-size refusal follow the error contract.
//!
//! tonic refuses a request larger than the decoding limit before any handler
//! runs, answering OUT_OF_RANGE with a bare message. This layer recognises
//! that answer and replaces it with RESOURCE_EXHAUSTED carrying an ErrorInfo
//! (`REQUEST_TOO_LARGE`), like every other error converge returns.

use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tonic::body::Body;
use tonic::codegen::http;
use tower::{Layer, Service};

use super::MAX_MESSAGE_BYTES;
use super::status::{ApiError, Reason};

/// The prefix of tonic's message for an oversized request.
const TONIC_TOO_LARGE: &str = "Error, decoded message length too large";

/// Wraps services with [`MessageLimit`].
#[derive(Debug, Clone, Copy, Default)]
pub struct MessageLimitLayer;

impl<S> Layer<S> for MessageLimitLayer {
    type Service = MessageLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        MessageLimit { inner }
    }
}

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct MessageLimit<S> {
    inner: S,
}

impl<S, B> Service<http::Request<B>> for MessageLimit<S>
where
    S: Service<http::Request<B>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            if !is_oversize_refusal(&response) {
                return Ok(response);
            }
            let status: tonic::Status = ApiError::refused(
                Reason::RequestTooLarge,
                format!("the request is larger than the {MAX_MESSAGE_BYTES}-byte message limit"),
            )
            .into();
            Ok(status.into_http())
        })
    }
}

/// A trailers-only answer (status in the headers) with tonic's oversize message.
fn is_oversize_refusal(response: &http::Response<Body>) -> bool {
    let headers = response.headers();
    headers.get("grpc-status").is_some_and(|s| s == "11")
        && headers
            .get("grpc-message")
            .and_then(|m| m.to_str().ok())
            .is_some_and(|m| m.replace("%20", " ").starts_with(TONIC_TOO_LARGE))
}
