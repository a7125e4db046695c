//! The in-process transport: gRPC over in-memory byte pipes, for an
//! application that embeds converge. Its own clients and workers reach the
//! server through a [`Channel`] made here, with no socket, no port and no
//! TLS; every call still goes through the same router, codecs, limits and
//! access layer as a call over TCP.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};
use tokio::sync::mpsc;
use tonic::transport::server::Connected;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::contract::caller::PeerIdentity;

/// Bytes buffered in each direction of one in-memory connection: large
/// enough that a batch apply is not written in many small hops.
const PIPE_BYTES: usize = 1024 * 1024;

/// Connections waiting for the server to accept them.
const PENDING_CONNECTIONS: usize = 64;

/// The authority in-process channels name; nothing resolves it.
const AUTHORITY: &str = "http://in-process.converge.invalid";

/// One in-memory connection, as the server sees it.
#[derive(Debug)]
pub struct InProcessConnection(DuplexStream);

impl Connected for InProcessConnection {
    type ConnectInfo = PeerIdentity;

    fn connect_info(&self) -> PeerIdentity {
        PeerIdentity::in_process()
    }
}

impl AsyncRead for InProcessConnection {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for InProcessConnection {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// The server's end: the stream of connections its channels open.
pub(super) struct InProcessIncoming(mpsc::Receiver<DuplexStream>);

impl futures::Stream for InProcessIncoming {
    type Item = io::Result<InProcessConnection>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0
            .poll_recv(cx)
            .map(|next| next.map(|pipe| Ok(InProcessConnection(pipe))))
    }
}

/// Opens in-process connections to one server. Cheap to clone.
#[derive(Debug, Clone)]
pub struct InProcessConnector {
    accept: mpsc::Sender<DuplexStream>,
}

impl InProcessConnector {
    /// A connector and the incoming stream its connections arrive on.
    pub(super) fn new() -> (Self, InProcessIncoming) {
        let (accept, incoming) = mpsc::channel(PENDING_CONNECTIONS);
        (Self { accept }, InProcessIncoming(incoming))
    }

    /// A channel to the server. It connects on first use and reconnects as
    /// a TCP channel would; once the server has stopped, calls fail
    /// UNAVAILABLE.
    pub fn channel(&self) -> Channel {
        let accept = self.accept.clone();
        Endpoint::from_static(AUTHORITY).connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
            let accept = accept.clone();
            async move {
                let (client, server) = tokio::io::duplex(PIPE_BYTES);
                accept
                    .send(server)
                    .await
                    .map_err(|_| io::Error::new(io::ErrorKind::ConnectionRefused, "the converge server has stopped"))?;
                Ok::<_, io::Error>(TokioIo::new(client))
            }
        }))
    }
}

/// What a server without a TCP listener registers as its listen address.
pub const LISTEN_ADDR: &str = "in-process";
