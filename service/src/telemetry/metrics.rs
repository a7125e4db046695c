//! The server's instruments, and the Prometheus registry that reads them.
//!
//! Synchronous instruments (recorded where the thing happens) live in
//! [`Instruments`]; gauges and counters the process already keeps (broker
//! counters, pool sizes, sampled queue figures) are observed by callbacks
//! registered with [`meter`] at assembly, so they cost nothing between
//! collections.

use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter, MeterProvider as _};
use opentelemetry_sdk::metrics::SdkMeterProvider;

static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();
static METER: OnceLock<Meter> = OnceLock::new();
static REGISTRY: OnceLock<prometheus::Registry> = OnceLock::new();

/// Bucket bounds, in seconds, of the latency histograms: 1 ms to 5 min.
const LATENCY_BOUNDS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// The synchronous instruments. Names and units follow the OpenTelemetry
/// semantic conventions where one exists (`rpc.*`, `db.client.*`); the rest
/// are `converge.*`. docs/operations.md describes each.
#[derive(Debug)]
pub struct Instruments {
    /// `rpc.server.call.duration` (s): every gRPC call, by method and code.
    pub rpc_duration: Histogram<f64>,
    /// `db.client.operation.duration` (s): every store operation, by name
    /// and error type.
    pub db_duration: Histogram<f64>,
    /// `converge.reconcile.duration` (s): from a generation being queued to
    /// the fence accepting its final result, by kind.
    pub reconcile_duration: Histogram<f64>,
    /// `converge.reconcile.stages`: stage results by kind, stage and outcome.
    pub stages: Counter<u64>,
    /// `converge.tasks.claimed`: tasks claimed from the queue, by kind.
    pub claims: Counter<u64>,
    /// `converge.reaper.recoveries`: tasks the reaper took back, by cause.
    pub recoveries: Counter<u64>,
}

/// The instruments, when metrics are on; `None` (one atomic load) when off.
#[inline]
pub fn metrics() -> Option<&'static Instruments> {
    INSTRUMENTS.get()
}

/// The meter, when metrics are on, for registering observed instruments.
pub fn meter() -> Option<&'static Meter> {
    METER.get()
}

pub(super) fn set_registry(registry: prometheus::Registry) {
    let _ = REGISTRY.set(registry);
}

pub(super) fn install(provider: &SdkMeterProvider) {
    let meter = provider.meter(super::SCOPE);
    let latency = |name: &'static str, description: &'static str| {
        meter
            .f64_histogram(name)
            .with_unit("s")
            .with_description(description)
            .with_boundaries(LATENCY_BOUNDS.to_vec())
            .build()
    };
    let _ = INSTRUMENTS.set(Instruments {
        rpc_duration: latency("rpc.server.call.duration", "Duration of gRPC calls served."),
        db_duration: latency("db.client.operation.duration", "Duration of database operations."),
        reconcile_duration: latency(
            "converge.reconcile.duration",
            "From a generation being queued to the fence accepting its final result.",
        ),
        stages: meter
            .u64_counter("converge.reconcile.stages")
            .with_description("Stage results received from workers, by kind, stage and outcome.")
            .build(),
        claims: meter
            .u64_counter("converge.tasks.claimed")
            .with_description("Tasks claimed from the work queue, by kind.")
            .build(),
        recoveries: meter
            .u64_counter("converge.reaper.recoveries")
            .with_description("Tasks the reaper took back from lost or overdue workers, by cause.")
            .build(),
    });
    let _ = METER.set(meter);
}

/// The Prometheus text exposition of every instrument, when the metrics
/// listener is configured.
pub fn prometheus_text() -> Option<Result<String, String>> {
    use prometheus::Encoder as _;
    let registry = REGISTRY.get()?;
    let mut out = Vec::new();
    Some(
        prometheus::TextEncoder::new()
            .encode(&registry.gather(), &mut out)
            .map_err(|e| e.to_string())
            .and_then(|()| String::from_utf8(out).map_err(|e| e.to_string())),
    )
}

/// Records one store operation.
pub fn record_db(name: &'static str, elapsed: Duration, error: Option<&'static str>) {
    if let Some(m) = metrics() {
        let mut attributes = vec![
            KeyValue::new("db.system.name", "postgresql"),
            KeyValue::new("db.operation.name", name),
        ];
        if let Some(error) = error {
            attributes.push(KeyValue::new("error.type", error));
        }
        m.db_duration.record(elapsed.as_secs_f64(), &attributes);
    }
}
