//! `otlp-sink`: an OTLP/gRPC receiver that accepts traces and metrics and
//! counts them, for measuring converge with telemetry on
//! (docs/benchmarks.md, "Telemetry"). Prints the counts every 10 s and on
//! SIGINT/SIGTERM.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clap::Parser;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};

#[derive(Parser)]
#[command(about = "Counts the spans and metric points sent to it over OTLP/gRPC.")]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:4317")]
    listen: std::net::SocketAddr,
}

#[derive(Default)]
struct Counts {
    spans: AtomicU64,
    span_requests: AtomicU64,
    points: AtomicU64,
    metric_requests: AtomicU64,
}

#[derive(Clone, Default)]
struct Sink(Arc<Counts>);

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans: usize = request
            .get_ref()
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.0.spans.fetch_add(spans as u64, Ordering::Relaxed);
        self.0.span_requests.fetch_add(1, Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        use opentelemetry_proto::tonic::metrics::v1::metric::Data;
        let points: usize = request
            .get_ref()
            .resource_metrics
            .iter()
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
            .map(|m| match &m.data {
                Some(Data::Gauge(g)) => g.data_points.len(),
                Some(Data::Sum(s)) => s.data_points.len(),
                Some(Data::Histogram(h)) => h.data_points.len(),
                Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
                Some(Data::Summary(s)) => s.data_points.len(),
                None => 0,
            })
            .sum();
        self.0.points.fetch_add(points as u64, Ordering::Relaxed);
        self.0.metric_requests.fetch_add(1, Ordering::Relaxed);
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

fn report(counts: &Counts) {
    println!(
        "spans {} in {} requests; metric points {} in {} requests",
        counts.spans.load(Ordering::Relaxed),
        counts.span_requests.load(Ordering::Relaxed),
        counts.points.load(Ordering::Relaxed),
        counts.metric_requests.load(Ordering::Relaxed),
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let sink = Sink::default();
    let counts = sink.0.clone();
    let ticker = counts.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(10));
        tick.tick().await;
        loop {
            tick.tick().await;
            report(&ticker);
        }
    });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let stop = async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(sink.clone()))
        .add_service(MetricsServiceServer::new(sink))
        .serve_with_shutdown(args.listen, stop)
        .await?;
    report(&counts);
    Ok(())
}
