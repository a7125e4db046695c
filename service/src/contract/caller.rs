//! Who is calling: the identity recorded where the contract has room for
//! one (an operation's `requested_by`, an event's actor, a connected
//! worker's identity, audit lines).

use std::net::SocketAddr;

use tonic::Request;

/// The identity of an unauthenticated caller.
pub const ANONYMOUS: &str = "anonymous";

/// The identity of a caller inside the process that embeds converge.
pub const IN_PROCESS: &str = "in-process";

/// What the listener learned about a connection's peer, attached to every
/// request that arrives on it. Plaintext connections carry none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerIdentity {
    /// The peer's socket address.
    pub remote_addr: Option<SocketAddr>,
    /// The SPIFFE ID (URI SAN) of the verified client certificate, when the
    /// server runs mTLS and the certificate has one.
    pub spiffe_id: Option<String>,
    /// The connection comes from the application that embeds this server
    /// (the in-process transport), not from the network.
    pub in_process: bool,
}

impl PeerIdentity {
    /// A connection of the in-process transport.
    pub fn in_process() -> Self {
        Self {
            remote_addr: None,
            spiffe_id: None,
            in_process: true,
        }
    }
}

/// The authenticated identity of the caller of `request`: the SPIFFE ID of
/// its verified client certificate, else [`ANONYMOUS`].
pub fn identity<T>(request: &Request<T>) -> String {
    spiffe_id(request).map_or_else(|| ANONYMOUS.to_owned(), str::to_owned)
}

/// The actor recorded on events and revisions an API call writes: `api`
/// for an anonymous caller, `api:<SPIFFE ID>` for an authenticated one.
pub fn api_actor<T>(request: &Request<T>) -> String {
    match spiffe_id(request) {
        Some(id) => format!("api:{id}"),
        None => "api".to_owned(),
    }
}

/// The caller's SPIFFE ID, when mTLS authenticated one.
pub fn spiffe_id<T>(request: &Request<T>) -> Option<&str> {
    request
        .extensions()
        .get::<PeerIdentity>()
        .and_then(|peer| peer.spiffe_id.as_deref())
}

/// How a connection is told apart when nothing authenticated it: the SPIFFE
/// ID when there is one, else [`IN_PROCESS`] for the embedding application,
/// else the peer address, else [`ANONYMOUS`]. This is what a connected
/// worker is listed as.
pub fn transport_identity<T>(request: &Request<T>) -> String {
    if let Some(id) = spiffe_id(request) {
        return id.to_owned();
    }
    let peer = request.extensions().get::<PeerIdentity>();
    if peer.is_some_and(|peer| peer.in_process) {
        return IN_PROCESS.to_owned();
    }
    peer.and_then(|peer| peer.remote_addr)
        .or_else(|| request.remote_addr())
        .map_or_else(|| ANONYMOUS.to_owned(), |addr| addr.to_string())
}
