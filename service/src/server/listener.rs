//! The TLS listener: accepts TCP connections, runs each handshake in its
//! own task (a slow or hostile client cannot stall the accept loop), and
//! hands tonic connections that carry their peer's identity.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use converge_tls::ServerTls;
use converge_tls::tokio_rustls::server::TlsStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

use crate::contract::caller::PeerIdentity;

/// How long a client has to complete its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes in progress at once; the accept loop waits beyond that.
const MAX_PENDING_HANDSHAKES: usize = 256;

/// TCP keepalive idle time on accepted sockets (as on the plaintext listener).
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

/// A TLS connection and what its handshake established about the peer.
#[derive(Debug)]
pub struct TlsConnection {
    stream: TlsStream<TcpStream>,
    peer: PeerIdentity,
}

impl Connected for TlsConnection {
    type ConnectInfo = PeerIdentity;

    fn connect_info(&self) -> PeerIdentity {
        self.peer.clone()
    }
}

impl AsyncRead for TlsConnection {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConnection {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// The stream of handshaken connections on `listener`. Accepting stops
/// when `stop` turns true or the stream is dropped.
pub fn incoming(
    listener: TcpListener,
    tls: ServerTls,
    mut stop: watch::Receiver<bool>,
) -> ReceiverStream<Result<TlsConnection, io::Error>> {
    let (tx, rx) = mpsc::channel(64);
    let acceptor = tls.acceptor();
    let pending = Arc::new(Semaphore::new(MAX_PENDING_HANDSHAKES));
    tokio::spawn(async move {
        loop {
            let Ok(permit) = pending.clone().acquire_owned().await else {
                return;
            };
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = stop.wait_for(|stopped| *stopped) => return,
                () = tx.closed() => return,
            };
            let (stream, remote_addr) = match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors and the like: back off, do not spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            // Without TCP_NODELAY every small response waits for the
            // peer's delayed ACK; keepalive finds peers that vanished.
            let _ = stream.set_nodelay(true);
            let _ = socket2::SockRef::from(&stream)
                .set_tcp_keepalive(&socket2::TcpKeepalive::new().with_time(TCP_KEEPALIVE));
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let _permit = permit;
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => {
                        let spiffe_id = stream
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|chain| chain.first())
                            .and_then(converge_tls::spiffe_id);
                        let peer = PeerIdentity {
                            remote_addr: Some(remote_addr),
                            spiffe_id,
                            in_process: false,
                        };
                        let _ = tx.send(Ok(TlsConnection { stream, peer })).await;
                    }
                    Ok(Err(e)) => tracing::debug!(%remote_addr, error = %e, "TLS handshake refused"),
                    Err(_) => tracing::debug!(%remote_addr, "TLS handshake timed out"),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}
