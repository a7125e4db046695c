//! The one plain-HTTP listener (`--metrics-addr`): Prometheus text at
//! `/metrics`, and probes for orchestrators that cannot speak gRPC health:
//! `/livez` (the process runs) and `/readyz` (it reports SERVING: the
//! database answers and it is not draining).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
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

use super::health::Health;
use crate::telemetry::metrics::prometheus_text;

/// The Prometheus text format's content type.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A request that has not finished its headers by then is dropped.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Binds `addr` and serves until `stop` flips.
pub async fn spawn(
    addr: SocketAddr,
    health: Arc<Health>,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = stop.changed() => return,
                accepted = listener.accept() => accepted,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::debug!(error = %e, "metrics listener: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let health = health.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| answer(request, health.clone()));
                let served = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
                if let Err(e) = served {
                    tracing::debug!(error = %e, "metrics listener: connection ended");
                }
            });
        }
    });
    Ok((local, task))
}

async fn answer(request: Request<Incoming>, health: Arc<Health>) -> Result<Response<Full<Bytes>>, Infallible> {
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
        "/livez" => plain(StatusCode::OK, "ok\n"),
        "/readyz" if health.is_serving().await => plain(StatusCode::OK, "ok\n"),
        "/readyz" => plain(StatusCode::SERVICE_UNAVAILABLE, "not serving\n"),
        _ => plain(StatusCode::NOT_FOUND, "not found\n"),
    })
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response
}
