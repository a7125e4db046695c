//! Who is calling: the identity recorded where the contract has room for
//! one (an operation's `requested_by`).

use tonic::Request;

/// The identity of an unauthenticated caller.
pub const ANONYMOUS: &str = "anonymous";

/// The authenticated identity of the caller of `request`. The server does
/// not authenticate callers yet (TLS identities are issue #27's), so every
/// caller is [`ANONYMOUS`]; this is the one place that will read the peer's
/// certificate.
pub fn identity<T>(_request: &Request<T>) -> String {
    ANONYMOUS.to_owned()
}
