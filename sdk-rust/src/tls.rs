//! TLS for the SDK's connections: the server verified against a CA bundle
//! and, for mTLS, a client certificate presented — all three files re-read
//! on an interval, so a rotated keypair is used by the next connection
//! without restarting the process (open streams keep theirs).
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use converge_sdk::tls::{ClientTls, ClientTlsFiles};
//! let tls = ClientTls::load(
//!     &ClientTlsFiles {
//!         ca: "/etc/converge/ca.pem".into(),
//!         identity: Some(("/etc/converge/tls.crt".into(), "/etc/converge/tls.key".into())),
//!     },
//!     converge_sdk::tls::DEFAULT_RELOAD_INTERVAL,
//! )?;
//! let client = converge_sdk::Client::connect_tls("https://converge.internal:50051", tls).await?;
//! # drop(client); Ok(()) }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use converge_tls::tokio_rustls::client::TlsStream;
pub use converge_tls::{ClientTls, ClientTlsFiles, DEFAULT_RELOAD_INTERVAL, TlsError};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tonic::codegen::http::Uri;
use tonic::transport::{Channel, Endpoint};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Dials TCP and handshakes TLS with the material current at that moment.
#[derive(Debug, Clone)]
struct Connector {
    tls: ClientTls,
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let tls = self.tls.clone();
        Box::pin(async move {
            let host = uri.host().ok_or("the server address has no host")?.to_owned();
            let port = uri.port_u16().unwrap_or(443);
            let name = tls.server_name_for(&host)?;
            let tcp = TcpStream::connect((host.trim_start_matches('[').trim_end_matches(']'), port)).await?;
            tcp.set_nodelay(true)?;
            let stream = tls.connector().connect(name, tcp).await?;
            Ok(TokioIo::new(stream))
        })
    }
}

/// A channel over `endpoint` that connects (lazily, and again after every
/// disconnect) through `tls`.
pub(crate) fn lazy_channel(endpoint: &Endpoint, tls: ClientTls) -> Channel {
    endpoint.connect_with_connector_lazy(Connector { tls })
}

/// A channel over `endpoint` through `tls`, connected now.
pub(crate) async fn channel(endpoint: &Endpoint, tls: ClientTls) -> Result<Channel, tonic::transport::Error> {
    endpoint.connect_with_connector(Connector { tls }).await
}
