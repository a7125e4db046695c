//! Who may call what: per-audience allowlists of workload identities, and
//! an audit line for every call an authenticated identity makes.
//!
//! The control-plane API (`converge.v1`) and the worker contract
//! (`converge.worker.v1`) are separate audiences: a worker's certificate
//! need not open the API, nor an operator's the work queue. Health and
//! reflection stay open to every client the handshake admitted (probes
//! carry no identity of their own).

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::{Either, Ready, ready};
use tonic::body::Body;
use tonic::codegen::http;
use tower::{Layer, Service};

use super::caller::PeerIdentity;
use crate::config::AccessSettings;
use crate::contract::status::{ApiError, Reason};
use crate::domain::identity::admitted;

/// The path prefix of the worker contract's methods.
const WORKER_PREFIX: &str = "/converge.worker.v1.";
/// The path prefix of the control-plane API's methods.
const API_PREFIX: &str = "/converge.v1.";

/// Wraps services with [`Access`].
#[derive(Debug, Clone, Default)]
pub struct AccessLayer {
    policy: Option<Arc<AccessSettings>>,
}

impl AccessLayer {
    /// A layer enforcing `settings` (a no-op when they restrict nothing).
    pub fn new(settings: AccessSettings) -> Self {
        Self {
            policy: settings.restricts().then(|| Arc::new(settings)),
        }
    }
}

impl<S> Layer<S> for AccessLayer {
    type Service = Access<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Access {
            inner,
            policy: self.policy.clone(),
        }
    }
}

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct Access<S> {
    inner: S,
    policy: Option<Arc<AccessSettings>>,
}

impl<S, B> Service<http::Request<B>> for Access<S>
where
    S: Service<http::Request<B>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Either<S::Future, Ready<Result<Self::Response, Self::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // Plaintext connections carry no PeerIdentity: nothing to check or log.
        let Some(identity) = request
            .extensions()
            .get::<PeerIdentity>()
            .and_then(|peer| peer.spiffe_id.clone())
        else {
            return match self.policy {
                // An allowlist with a caller that has no SPIFFE ID: refuse
                // what the lists cover.
                Some(ref policy) if covered(policy, request.uri().path()) => {
                    Either::Right(ready(Ok(denied(request.uri().path(), None))))
                }
                _ => Either::Left(self.inner.call(request)),
            };
        };
        let path = request.uri().path();
        if let Some(policy) = &self.policy {
            let list = audience(policy, path);
            if !list.is_empty() && !admitted(list, &identity) {
                tracing::warn!(target: "converge::audit", identity, method = path, "refused: identity not allowed");
                return Either::Right(ready(Ok(denied(path, Some(&identity)))));
            }
        }
        if changes_state(path) {
            tracing::info!(target: "converge::audit", identity, method = path, "call");
        }
        Either::Left(self.inner.call(request))
    }
}

/// The allowlist that governs `path` (empty: open).
fn audience<'a>(policy: &'a AccessSettings, path: &str) -> &'a [crate::domain::identity::IdentityPattern] {
    if path.starts_with(WORKER_PREFIX) {
        &policy.workers
    } else if path.starts_with(API_PREFIX) {
        &policy.api
    } else {
        &[]
    }
}

/// Whether the method may change state (reads are not audited: they would
/// drown the changes).
fn changes_state(path: &str) -> bool {
    let method = path.rsplit('/').next().unwrap_or_default();
    !["Get", "List", "Watch", "Check"]
        .iter()
        .any(|read| method.starts_with(read))
}

fn covered(policy: &AccessSettings, path: &str) -> bool {
    !audience(policy, path).is_empty()
}

fn denied(path: &str, identity: Option<&str>) -> http::Response<Body> {
    let service = if path.starts_with(WORKER_PREFIX) {
        "the worker contract"
    } else {
        "the control-plane API"
    };
    let who = match identity {
        Some(id) => format!("identity {}", bounded(id)),
        None => "a client certificate without a SPIFFE ID".to_owned(),
    };
    let error = ApiError::refused(
        Reason::IdentityNotAllowed,
        format!("{who} is not allowed to call {service}"),
    );
    tonic::Status::from(error).into_http()
}

/// At most 256 bytes of a caller-supplied identity (it came from a verified
/// certificate, but bounded all the same).
fn bounded(identity: &str) -> &str {
    let mut end = identity.len().min(256);
    while !identity.is_char_boundary(end) {
        end -= 1;
    }
    &identity[..end]
}
