//! The plain-HTTP listeners: probes for orchestrators, and Prometheus text.
//!
//! Every listener answers the same paths:
//! - `/livez` and `/healthz`: 200 while the process runs. They never touch
//!   the database, so a database outage does not get every pod restarted.
//! - `/readyz`: 200 while the process reports SERVING on gRPC health (the
//!   database answers and it is not draining), else 503. Before the server
//!   has started serving (the database is still being opened and migrated)
//!   it is 503 too.
//! - `/metrics`: Prometheus text when metrics are on (`METRICS_ADDR`), else 404.
//!
//! The listeners are bound before the database is opened and stay up until
//! the drain has finished, so liveness answers through a slow boot and
//! through the whole drain.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::telemetry::metrics::prometheus_text;

/// The Prometheus text format's content type.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A request that has not finished its headers by then is dropped.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The listeners of one process; their accept loops end when this is dropped.
#[derive(Debug)]
pub struct HttpListeners {
    bound: Vec<SocketAddr>,
    tasks: Vec<JoinHandle<()>>,
}

impl HttpListeners {
    /// Binds each of `addrs` (a bind failure names the address and the
    /// setting it came from) and serves `ready` as the readiness answer.
    pub async fn bind(
        addrs: &[(SocketAddr, &'static str)],
        ready: watch::Receiver<bool>,
    ) -> Result<Self, (SocketAddr, &'static str, std::io::Error)> {
        let mut listeners = Self {
            bound: Vec::new(),
            tasks: Vec::new(),
        };
        for &(addr, setting) in addrs {
            let listener = TcpListener::bind(addr).await.map_err(|e| (addr, setting, e))?;
            let local = listener.local_addr().map_err(|e| (addr, setting, e))?;
            // Logged with "converge is serving": a boot refused later stays one line.
            tracing::debug!(addr = %local, setting, "serving probes (and metrics when on) over HTTP");
            listeners.bound.push(local);
            listeners.tasks.push(tokio::spawn(accept_loop(listener, ready.clone())));
        }
        Ok(listeners)
    }

    /// The bound addresses, in the order they were given.
    pub fn bound(&self) -> &[SocketAddr] {
        &self.bound
    }
}

impl Drop for HttpListeners {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn accept_loop(listener: TcpListener, ready: watch::Receiver<bool>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::debug!(error = %e, "HTTP listener: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let ready = ready.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let serving = *ready.borrow();
                async move { answer(&request, serving) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                tracing::debug!(error = %e, "HTTP listener: connection ended");
            }
        });
    }
}

fn answer(request: &Request<Incoming>, serving: bool) -> Result<Response<Full<Bytes>>, Infallible> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return Ok(plain(StatusCode::METHOD_NOT_ALLOWED, "use GET\n"));
    }
    Ok(match request.uri().path() {
        "/metrics" => match prometheus_text() {
            Some(Ok(text)) => Response::builder()
                .header(hyper::header::CONTENT_TYPE, PROMETHEUS_TEXT)
                .body(Full::new(Bytes::from(text)))
                .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR, "encoding failed\n")),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "encoding metrics failed");
                plain(StatusCode::INTERNAL_SERVER_ERROR, "encoding failed\n")
            }
            None => plain(StatusCode::NOT_FOUND, "metrics are off\n"),
        },
        "/livez" | "/healthz" => plain(StatusCode::OK, "ok\n"),
        "/readyz" if serving => plain(StatusCode::OK, "ok\n"),
        "/readyz" => plain(StatusCode::SERVICE_UNAVAILABLE, "not serving\n"),
        _ => plain(StatusCode::NOT_FOUND, "not found\n"),
    })
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response
}
