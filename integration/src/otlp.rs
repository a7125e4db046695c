//! A real OTLP/gRPC trace receiver (the opentelemetry-proto trace service)
//! that keeps every span it is sent, for tests that check traces across
//! processes: the server's and a worker's spans in one trace.

use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value;

/// One received span, as much of it as the assertions need.
#[derive(Debug, Clone)]
pub struct Received {
    /// The `service.name` of the resource that sent it.
    pub service: String,
    /// The span's name.
    pub name: String,
    /// Its trace id.
    pub trace_id: Vec<u8>,
    /// Its span id.
    pub span_id: Vec<u8>,
    /// Its parent's span id (empty for a root).
    pub parent: Vec<u8>,
}

/// The OTLP trace service: keeps every span it is sent.
#[derive(Clone, Default)]
pub struct Receiver(Arc<Mutex<Vec<Received>>>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut kept = self.0.lock().map_err(|_| tonic::Status::internal("poisoned"))?;
        for resource_spans in request.into_inner().resource_spans {
            let service = resource_spans
                .resource
                .iter()
                .flat_map(|r| r.attributes.iter())
                .find(|a| a.key == "service.name")
                .and_then(|a| a.value.as_ref())
                .and_then(|v| match &v.value {
                    Some(Value::StringValue(s)) => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    kept.push(Received {
                        service: service.clone(),
                        name: span.name,
                        trace_id: span.trace_id,
                        span_id: span.span_id,
                        parent: span.parent_span_id,
                    });
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Receiver {
    /// Every span received so far.
    pub fn spans(&self) -> Vec<Received> {
        self.0.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Serves the receiver on a free loopback port for as long as the
    /// runtime runs; returns its endpoint (`http://127.0.0.1:port`).
    pub async fn serve(&self) -> anyhow::Result<String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(self.clone()))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        Ok(format!("http://{addr}"))
    }
}
