//! A fault-injecting TCP proxy for chaos tests: it forwards every
//! connection to one upstream address and, on command, drops every open
//! connection (both sides see the socket close) or stalls them (bytes are
//! held, not lost, until the stall ends; new connections are accepted and
//! held too). It sits between converge and PostgreSQL, or between workers
//! and converge.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Bytes read per chunk.
const CHUNK: usize = 16 * 1024;

/// What the proxy's connections are told.
struct Control {
    /// True while stalled.
    stalled: watch::Sender<bool>,
    /// Bumped to drop every open connection.
    cut: watch::Sender<u64>,
    /// Connections accepted so far.
    accepted: AtomicU64,
}

/// A running proxy; stops (and drops its connections) when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    control: Arc<Control>,
    acceptor: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let control = Arc::new(Control {
            stalled: watch::channel(false).0,
            cut: watch::channel(0).0,
            accepted: AtomicU64::new(0),
        });
        let shared = control.clone();
        let acceptor = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                shared.accepted.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(forward(client, upstream, shared.clone()));
            }
        });
        Ok(Self {
            addr,
            control,
            acceptor,
        })
    }

    /// The address to connect to instead of the upstream.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes every open connection (new ones are accepted as before).
    pub fn drop_connections(&self) {
        self.control.cut.send_modify(|n| *n += 1);
    }

    /// Starts (`true`) or ends (`false`) a stall.
    pub fn stall(&self, on: bool) {
        self.control.stalled.send_replace(on);
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.control.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        self.drop_connections();
    }
}

/// Forwards one connection until either side closes or the proxy cuts it.
async fn forward(client: TcpStream, upstream: SocketAddr, control: Arc<Control>) {
    let mut cut = control.cut.subscribe();
    cut.mark_unchanged();
    let connected = tokio::select! {
        connected = TcpStream::connect(upstream) => connected,
        _ = cut.changed() => return,
    };
    let Ok(server) = connected else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(client_read, server_write, control.stalled.subscribe());
    let down = pump(server_read, client_write, control.stalled.subscribe());
    // Either direction ending (or a cut) ends both: the sockets drop here.
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = cut.changed() => {}
    }
}

/// Copies `from` to `to`, holding each chunk while the proxy is stalled.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut stalled: watch::Receiver<bool>,
) {
    let mut buffer = vec![0u8; CHUNK];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        if stalled.wait_for(|stalled| !stalled).await.is_err() {
            return;
        }
        let Some(chunk) = buffer.get(..read) else {
            return;
        };
        if to.write_all(chunk).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> anyhow::Result<SocketAddr> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buffer = [0u8; 64];
                    while let Ok(n) = socket.read(&mut buffer).await {
                        if n == 0 || socket.write_all(&buffer[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Ok(addr)
    }

    async fn round_trip(socket: &mut TcpStream, text: &[u8]) -> anyhow::Result<Vec<u8>> {
        socket.write_all(text).await?;
        let mut buffer = vec![0u8; text.len()];
        socket.read_exact(&mut buffer).await?;
        Ok(buffer)
    }

    #[tokio::test]
    async fn forwards_holds_while_stalled_and_cuts() -> anyhow::Result<()> {
        let proxy = FaultProxy::start(echo_server().await?).await?;
        let mut socket = TcpStream::connect(proxy.addr()).await?;
        assert_eq!(round_trip(&mut socket, b"hello").await?, b"hello");

        proxy.stall(true);
        socket.write_all(b"held").await?;
        let mut buffer = [0u8; 4];
        let early = tokio::time::timeout(std::time::Duration::from_millis(300), socket.read_exact(&mut buffer)).await;
        assert!(early.is_err(), "nothing passes while stalled");
        proxy.stall(false);
        socket.read_exact(&mut buffer).await?;
        assert_eq!(&buffer, b"held", "held bytes are delivered, not lost");

        proxy.drop_connections();
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(std::time::Duration::from_secs(5), socket.read_to_end(&mut rest)).await?;
        assert!(closed.is_err() || rest.is_empty(), "the connection is closed");
        let mut again = TcpStream::connect(proxy.addr()).await?;
        assert_eq!(round_trip(&mut again, b"again").await?, b"again");
        assert_eq!(proxy.accepted(), 2);
        Ok(())
    }
}
