//! Layers that may answer a call before any service runs it: the one
//! tower mechanism behind the access allowlists and the database
//! availability gate. A passed call costs the keeper's check and nothing
//! else (no allocation).

use std::task::{Context, Poll};

use futures::future::{Either, Ready, ready};
use tonic::body::Body;
use tonic::codegen::http;
use tower::{Layer, Service};

use crate::contract::status::ApiError;

/// Decides, per call, whether it is refused here.
pub trait Gatekeeper {
    /// The refusal for `request`, or `None` to pass it on.
    fn refuse<B>(&self, request: &http::Request<B>) -> Option<ApiError>;
}

/// Wraps services with a [`Gate`] kept by `G`.
#[derive(Debug, Clone)]
pub struct GateLayer<G> {
    keeper: G,
}

impl<G> GateLayer<G> {
    /// A layer whose calls `keeper` may refuse.
    pub fn new(keeper: G) -> Self {
        Self { keeper }
    }
}

impl<S, G: Clone> Layer<S> for GateLayer<G> {
    type Service = Gate<S, G>;

    fn layer(&self, inner: S) -> Self::Service {
        Gate {
            inner,
            keeper: self.keeper.clone(),
        }
    }
}

/// A service behind a [`Gatekeeper`]: refused calls are answered with the
/// keeper's error in the contract's terms, the others go to `inner`.
#[derive(Debug, Clone)]
pub struct Gate<S, G> {
    inner: S,
    keeper: G,
}

impl<S, G, B> Service<http::Request<B>> for Gate<S, G>
where
    S: Service<http::Request<B>, Response = http::Response<Body>>,
    G: Gatekeeper,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Either<S::Future, Ready<Result<Self::Response, Self::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        match self.keeper.refuse(&request) {
            Some(error) => Either::Right(ready(Ok(tonic::Status::from(error).into_http()))),
            None => Either::Left(self.inner.call(request)),
        }
    }
}
