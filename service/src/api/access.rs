//! Who may call what: per-audience allowlists of workload identities, and
//! an audit line for every call an authenticated identity makes.
//!
//! The control-plane API (`converge.v1`) and the worker contract
//! (`converge.worker.v1`) are separate audiences: a worker's certificate
//! need not open the API, nor an operator's the work queue. Health and
//! reflection stay open to every client the handshake admitted (probes
//! carry no identity of their own).

use std::sync::Arc;

use tonic::codegen::http;

use super::gate::{GateLayer, Gatekeeper};
use crate::config::AccessSettings;
use crate::contract::caller::PeerIdentity;
use crate::contract::status::{ApiError, Reason};
use crate::domain::identity::admitted;

/// The path prefix of the worker contract's methods.
const WORKER_PREFIX: &str = "/converge.worker.v1.";
/// The path prefix of the control-plane API's methods.
const API_PREFIX: &str = "/converge.v1.";

/// The access layer: every call passes [`AccessPolicy`].
pub type AccessLayer = GateLayer<AccessPolicy>;

/// The layer enforcing `settings` (only audit lines when they restrict nothing).
pub fn layer(settings: AccessSettings) -> AccessLayer {
    GateLayer::new(AccessPolicy {
        lists: settings.restricts().then(|| Arc::new(settings)),
    })
}

/// See the module documentation.
#[derive(Debug, Clone, Default)]
pub struct AccessPolicy {
    lists: Option<Arc<AccessSettings>>,
}

impl Gatekeeper for AccessPolicy {
    fn refuse<B>(&self, request: &http::Request<B>) -> Option<ApiError> {
        let path = request.uri().path();
        let peer = request.extensions().get::<PeerIdentity>();
        // The embedding application's own calls never crossed a network:
        // the allowlists govern who may reach it from outside.
        if peer.is_some_and(|peer| peer.in_process) {
            return None;
        }
        // Plaintext connections carry no PeerIdentity: nothing to log, and
        // an allowlist (which needs mTLS) refuses what it covers.
        let Some(identity) = peer.and_then(|peer| peer.spiffe_id.as_deref()) else {
            return self
                .lists
                .as_deref()
                .filter(|lists| covered(lists, path))
                .map(|_| denied(path, None));
        };
        if let Some(lists) = &self.lists {
            let list = audience(lists, path);
            if !list.is_empty() && !admitted(list, identity) {
                tracing::warn!(target: "converge::audit", identity, method = path, "refused: identity not allowed");
                return Some(denied(path, Some(identity)));
            }
        }
        if changes_state(path) {
            tracing::info!(target: "converge::audit", identity, method = path, "call");
        }
        None
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

fn denied(path: &str, identity: Option<&str>) -> ApiError {
    let service = if path.starts_with(WORKER_PREFIX) {
        "the worker contract"
    } else {
        "the control-plane API"
    };
    let who = match identity {
        Some(id) => format!("identity {}", bounded(id)),
        None => "a client certificate without a SPIFFE ID".to_owned(),
    };
    ApiError::refused(
        Reason::IdentityNotAllowed,
        format!("{who} is not allowed to call {service}"),
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    fn request(peer: Option<PeerIdentity>, path: &str) -> http::Request<()> {
        let mut request = http::Request::builder().uri(path).body(()).unwrap_or_default();
        if let Some(peer) = peer {
            request.extensions_mut().insert(peer);
        }
        request
    }

    fn restricted() -> AccessPolicy {
        let only = |id: &str| id.parse().map(|pattern| vec![pattern]).unwrap_or_default();
        let settings = AccessSettings {
            api: only("spiffe://example.org/admin"),
            workers: only("spiffe://example.org/worker"),
        };
        assert!(settings.restricts());
        AccessPolicy {
            lists: Some(Arc::new(settings)),
        }
    }

    #[test]
    fn the_embedding_applications_calls_pass_the_allowlists_and_the_network_does_not() {
        let policy = restricted();
        for path in [
            "/converge.v1.ResourceService/ApplyResource",
            "/converge.worker.v1.WorkerService/WorkStream",
        ] {
            assert!(
                policy
                    .refuse(&request(Some(PeerIdentity::in_process()), path))
                    .is_none()
            );
            assert!(
                policy.refuse(&request(None, path)).is_some(),
                "plaintext from the network"
            );
            let stranger = PeerIdentity {
                remote_addr: None,
                spiffe_id: Some("spiffe://example.org/stranger".into()),
                in_process: false,
            };
            assert!(policy.refuse(&request(Some(stranger), path)).is_some());
        }
    }
}
