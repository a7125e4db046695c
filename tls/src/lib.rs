//! TLS for converge: server and client configurations built from PEM files
//! that are re-read on an interval and swapped in when their content changes
//! and parses, plus the SPIFFE identity of a peer certificate.
//!
//! Reloading never disturbs established connections: a TLS session keeps
//! the material it was handshaken with, and only new handshakes see new
//! files. A half-written or mismatched file (a new certificate before its
//! key) keeps the last good material until the set parses again.
//!
//! Cryptography is rustls with the `ring` provider, the one the database
//! driver already uses.

mod client;
mod material;
mod reload;
mod server;
mod spiffe;

use std::path::PathBuf;
use std::sync::Arc;

pub use client::{ClientTls, ClientTlsFiles};
pub use server::{ServerTls, ServerTlsFiles};
pub use spiffe::{MAX_SPIFFE_ID_BYTES, spiffe_id};
pub use tokio_rustls;

/// How often files are re-read when no interval is given.
pub const DEFAULT_RELOAD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// Why TLS material could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A file holds no usable PEM object of the expected type.
    #[error("{path} holds no {what}")]
    Empty {
        /// The file.
        path: PathBuf,
        /// What was looked for ("PEM certificate", "PEM private key").
        what: &'static str,
    },
    /// A file's PEM does not decode.
    #[error("{path} is not valid PEM: {reason}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// The decoder's reason.
        reason: String,
    },
    /// The material parsed but rustls refused it (a key that does not match
    /// its certificate, an unsupported key type, an unusable CA).
    #[error("{what}: {reason}")]
    Refused {
        /// Which material.
        what: String,
        /// rustls' reason.
        reason: String,
    },
    /// No tokio runtime to run the reloader on.
    #[error("TLS reloading needs a tokio runtime; create the configuration inside one")]
    NoRuntime,
}

/// The crypto provider every configuration here uses.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The ALPN protocol of gRPC.
const ALPN_H2: &[u8] = b"h2";
