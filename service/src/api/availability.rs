//! Refuses calls at once while the database is down.
//!
//! Without this, a call made while PostgreSQL is away waits for a pool
//! connection until the pool's acquire timeout (10 s) before it fails. While
//! the health probe finds the database unreachable (see
//! [`crate::server::health`]), every converge service call (`/converge.*`)
//! is answered UNAVAILABLE (`DATABASE_UNAVAILABLE`, RetryInfo 1 s) without
//! running; health and reflection keep answering. Calls already running and
//! streams already open are not touched: they fail, or recover, on their own.

use tonic::codegen::http;

use super::gate::{Gate, GateLayer, Gatekeeper};
use crate::contract::status::ApiError;
use crate::db::probe::DatabaseStatus;

/// The path prefix of the services that need the database.
const GATED_PREFIX: &str = "/converge.";

/// Wraps services with [`Availability`].
pub type AvailabilityLayer = GateLayer<DatabaseStatus>;

/// See the module documentation.
pub type Availability<S> = Gate<S, DatabaseStatus>;

impl Gatekeeper for DatabaseStatus {
    fn refuse<B>(&self, request: &http::Request<B>) -> Option<ApiError> {
        (!self.is_up() && request.uri().path().starts_with(GATED_PREFIX)).then_some(ApiError::DatabaseDown)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::future::{Ready, ready};
    use std::task::{Context, Poll};

    use tonic::body::Body;
    use tower::{Layer, Service};

    use super::*;

    /// A service that answers every call with a bare 200 OK.
    #[derive(Clone)]
    struct Answers;

    impl Service<http::Request<()>> for Answers {
        type Response = http::Response<Body>;
        type Error = Infallible;
        type Future = Ready<Result<Self::Response, Infallible>>;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _request: http::Request<()>) -> Self::Future {
            ready(Ok(http::Response::new(Body::empty())))
        }
    }

    /// The grpc-status a call of `path` is answered with (`None`: passed through).
    async fn grpc_status(service: &mut Availability<Answers>, path: &str) -> Option<String> {
        let request = http::Request::builder().uri(path).body(()).ok()?;
        let response = service.call(request).await.ok()?;
        response
            .headers()
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    #[tokio::test]
    async fn converge_calls_are_refused_while_the_database_is_down() {
        let status = DatabaseStatus::reachable();
        let mut service = AvailabilityLayer::new(status.clone()).layer(Answers);
        let get = "/converge.v1.ResourceService/GetResource";
        assert_eq!(grpc_status(&mut service, get).await, None, "passed through");
        status.set(false);
        assert_eq!(
            grpc_status(&mut service, get).await.as_deref(),
            Some("14"),
            "UNAVAILABLE"
        );
        let stream = "/converge.worker.v1.WorkerService/WorkStream";
        assert_eq!(grpc_status(&mut service, stream).await.as_deref(), Some("14"));
        let health = "/grpc.health.v1.Health/Check";
        assert_eq!(grpc_status(&mut service, health).await, None, "health answers");
        status.set(true);
        assert_eq!(grpc_status(&mut service, get).await, None);
    }
}
