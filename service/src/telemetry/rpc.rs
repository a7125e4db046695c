//! The server span and the call metric of every gRPC call: a tower layer
//! outside every other, so refusals by the gates are seen too.
//!
//! The span continues the caller's W3C trace context (`traceparent`
//! metadata) and stays open until the response body ends, so a stream's
//! span covers the stream; its code is read from the trailers (or from the
//! headers of a trailers-only answer), its reason from the ErrorInfo.

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use futures::future::{BoxFuture, Either};
use http_body::{Body as _, Frame, SizeHint};
use opentelemetry::KeyValue;
use prost::Message as _;
use tonic::body::Body;
use tonic::codegen::http;
use tower::{Layer, Service};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::{metrics, propagation, tracing_enabled};

/// The canonical name of a status code, as the gRPC specification (and
/// `docs/errors.md`) writes it: the value of metric labels and span fields.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// Method label of a path that is not a method this server knows: labels
/// stay a bounded set whatever paths callers send.
const UNKNOWN_METHOD: &str = "other";

/// Wraps services with [`RpcTelemetry`].
#[derive(Debug, Clone, Default)]
pub struct RpcTelemetryLayer;

impl<S> Layer<S> for RpcTelemetryLayer {
    type Service = RpcTelemetry<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RpcTelemetry { inner }
    }
}

/// A service whose calls are traced and measured when telemetry is on, and
/// passed straight through when it is off.
#[derive(Debug, Clone)]
pub struct RpcTelemetry<S> {
    inner: S,
}

impl<S, B> Service<http::Request<B>> for RpcTelemetry<S>
where
    S: Service<http::Request<B>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Either<S::Future, BoxFuture<'static, Result<Self::Response, Self::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // Health checks and reflection are measured but not traced: probes
        // every few seconds would bury the traces worth reading.
        let traced = tracing_enabled() && request.uri().path().starts_with("/converge.");
        if !traced && metrics().is_none() {
            return Either::Left(self.inner.call(request));
        }
        let method = method_label(request.uri().path());
        let span = if traced {
            let span = tracing::info_span!(
                "rpc",
                otel.name = method,
                otel.kind = "server",
                otel.status_code = tracing::field::Empty,
                rpc.system = "grpc",
                rpc.method = method,
                rpc.grpc.status_code = tracing::field::Empty,
                converge.reason = tracing::field::Empty,
            );
            let _ = span.set_parent(propagation::from_headers(request.headers()));
            span
        } else {
            tracing::Span::none()
        };
        let started = Instant::now();
        let answer = self.inner.call(request).instrument(span.clone());
        Either::Right(Box::pin(async move {
            let response = answer.await?;
            let (parts, body) = response.into_parts();
            let mut call = Call {
                method,
                started,
                span,
                code: None,
                reason: None,
            };
            // A trailers-only answer (every error) carries its status here.
            call.read_status(&parts.headers);
            let body = Observed {
                inner: body,
                call: Some(call),
            };
            Ok(http::Response::from_parts(parts, Body::new(body)))
        }))
    }
}

/// One call being answered.
struct Call {
    method: &'static str,
    started: Instant,
    span: tracing::Span,
    code: Option<tonic::Code>,
    reason: Option<String>,
}

impl Call {
    fn read_status(&mut self, headers: &http::HeaderMap) {
        let Some(status) = tonic::Status::from_header_map(headers) else {
            return;
        };
        self.code = Some(status.code());
        if status.code() != tonic::Code::Ok && !status.details().is_empty() {
            self.reason = tonic_types::pb::Status::decode(status.details())
                .ok()
                .and_then(|details| {
                    details
                        .details
                        .iter()
                        .find(|any| any.type_url.ends_with("google.rpc.ErrorInfo"))
                        .and_then(|any| tonic_types::pb::ErrorInfo::decode(any.value.as_slice()).ok())
                })
                .map(|info| info.reason);
        }
    }

    /// Ends the span and records the call. A body dropped before its end
    /// (the client went away) counts as CANCELLED.
    fn finish(self, ended: bool) {
        let code = match (self.code, ended) {
            (Some(code), _) => code,
            (None, true) => tonic::Code::Ok,
            (None, false) => tonic::Code::Cancelled,
        };
        let name = code_name(code);
        if let Some(m) = metrics() {
            m.rpc_duration.record(
                self.started.elapsed().as_secs_f64(),
                &[
                    KeyValue::new("rpc.system", "grpc"),
                    KeyValue::new("rpc.method", self.method),
                    KeyValue::new("rpc.response.status_code", name),
                ],
            );
        }
        if !self.span.is_disabled() {
            self.span.record("rpc.grpc.status_code", code as i32);
            if code != tonic::Code::Ok {
                self.span.record("otel.status_code", "ERROR");
            }
            if let Some(reason) = &self.reason {
                self.span.record("converge.reason", reason.as_str());
            }
        }
    }
}

/// A response body that reports its call when it ends.
struct Observed {
    inner: Body,
    call: Option<Call>,
}

impl http_body::Body for Observed {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(trailers), Some(call)) = (frame.trailers_ref(), self.call.as_mut()) {
                    call.read_status(trailers);
                }
            }
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => {
                if let Some(call) = self.call.take() {
                    call.finish(true);
                }
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Observed {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            let ended = self.inner.is_end_stream();
            call.finish(ended);
        }
    }
}

/// The methods this server knows, as `/package.Service/Method` paths.
fn known_methods() -> &'static HashSet<String> {
    static KNOWN: OnceLock<HashSet<String>> = OnceLock::new();
    KNOWN.get_or_init(|| {
        let mut known = HashSet::new();
        for set in [
            converge_proto::FILE_DESCRIPTOR_SET,
            tonic_health::pb::FILE_DESCRIPTOR_SET,
            tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET,
            tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
        ] {
            let Ok(files) = prost_types::FileDescriptorSet::decode(set) else {
                continue;
            };
            for file in files.file {
                let package = file.package();
                for service in &file.service {
                    for method in &service.method {
                        known.insert(format!("/{package}.{}/{}", service.name(), method.name()));
                    }
                }
            }
        }
        known
    })
}

/// The label of a request path: the path itself for a known method, else
/// [`UNKNOWN_METHOD`].
fn method_label(path: &str) -> &'static str {
    known_methods()
        .get(path)
        .map(|known| known.as_str())
        .unwrap_or(UNKNOWN_METHOD)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_known_methods_become_labels() {
        assert_eq!(
            method_label("/converge.v1.ResourceService/ApplyResource"),
            "/converge.v1.ResourceService/ApplyResource"
        );
        assert_eq!(
            method_label("/grpc.health.v1.Health/Check"),
            "/grpc.health.v1.Health/Check"
        );
        assert_eq!(
            method_label("/converge.v1.ResourceService/NoSuchMethod"),
            UNKNOWN_METHOD
        );
        assert_eq!(method_label("/x"), UNKNOWN_METHOD);
    }
}
