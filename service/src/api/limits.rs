//! Makes the transport's refusals of a request follow the error contract.
//!
//! tonic refuses a request before any handler runs when it is larger than
//! the decoding limit (OUT_OF_RANGE with a bare message) or does not decode
//! (INTERNAL, including values nested past prost's recursion limit). Both
//! are the caller's mistake: this layer recognises those answers and
//! replaces them with RESOURCE_EXHAUSTED (`REQUEST_TOO_LARGE`) or
//! INVALID_ARGUMENT (`NESTING_TOO_DEEP`, `MALFORMED_REQUEST`) carrying an
//! ErrorInfo, like every other error converge returns.

use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tonic::body::Body;
use tonic::codegen::http;
use tower::{Layer, Service};

use super::MAX_MESSAGE_BYTES;
use crate::contract::status::{ApiError, Reason, TONIC_UNDECODABLE, undecodable};

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
            let headers = response.headers();
            let (Some(code), Some(message)) = (headers.get("grpc-status"), headers.get("grpc-message")) else {
                return Ok(response);
            };
            let message = message.to_str().unwrap_or_default().replace("%20", " ");
            match transport_refusal(code.as_bytes(), &message) {
                Some(error) => Ok(tonic::Status::from(error).into_http()),
                None => Ok(response),
            }
        })
    }
}

/// The contract's error for a trailers-only answer (status in the headers)
/// that tonic gave before any handler ran, if it is one.
pub fn transport_refusal(code: &[u8], message: &str) -> Option<ApiError> {
    match code {
        b"11" if message.starts_with(TONIC_TOO_LARGE) => Some(ApiError::refused(
            Reason::RequestTooLarge,
            format!("the request is larger than the {MAX_MESSAGE_BYTES}-byte message limit"),
        )),
        b"13" if message.starts_with(TONIC_UNDECODABLE) => Some(undecodable(message)),
        _ => None,
    }
}
