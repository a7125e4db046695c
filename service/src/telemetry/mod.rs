//! Logs, traces and metrics.
//!
//! Logs are `tracing` events, text or JSON; in JSON, a line written inside a
//! traced operation carries its `trace_id` and `span_id`. Traces are
//! OpenTelemetry spans exported over OTLP/gRPC when an endpoint is
//! configured; metrics are OpenTelemetry instruments read by a Prometheus
//! registry (served by the metrics listener) and pushed over OTLP when an
//! endpoint is configured.
//!
//! Everything is off unless configured, and off means free: call sites ask
//! [`tracing_enabled`] or [`metrics`] (one atomic load each) before they
//! build a span, an attribute or a measurement.

mod logs;
pub mod metrics;
pub mod propagation;
pub mod rpc;

use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::config::{LogFormat, TelemetryArgs};

pub use metrics::{Instruments, metrics};

/// The instrumentation scope of every span and instrument of the server.
pub const SCOPE: &str = "converge";

static TRACING: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported: the one check a traced call site makes
/// before it creates a span.
#[inline]
pub fn tracing_enabled() -> bool {
    TRACING.load(Ordering::Relaxed)
}

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP exporter could not be built (a malformed endpoint, say).
    #[error("cannot set up the OTLP exporter: {0}")]
    Otlp(#[from] opentelemetry_otlp::ExporterBuildError),
    /// The Prometheus registry refused the exporter.
    #[error("cannot set up the Prometheus exporter: {0}")]
    Prometheus(String),
}

/// The installed telemetry pipelines; [`Telemetry::shutdown`] flushes them.
#[derive(Debug, Default)]
pub struct Telemetry {
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
}

/// What the environment switches on or off, per the OpenTelemetry
/// environment specification.
struct Switches {
    traces: bool,
    metrics_push: bool,
}

fn env_is(name: &str, value: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v.trim().eq_ignore_ascii_case(value))
}

fn env_set(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.trim().is_empty())
}

impl Switches {
    fn read(args: &TelemetryArgs) -> Self {
        if env_is("OTEL_SDK_DISABLED", "true") {
            return Self {
                traces: false,
                metrics_push: false,
            };
        }
        let endpoint = args.otlp_endpoint().is_some();
        Self {
            traces: !env_is("OTEL_TRACES_EXPORTER", "none")
                && (endpoint || env_set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")),
            metrics_push: !env_is("OTEL_METRICS_EXPORTER", "none")
                && (endpoint || env_set("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")),
        }
    }
}

/// The resource every span and metric describes: `service.name` is
/// `converge` unless `OTEL_SERVICE_NAME` (or `OTEL_RESOURCE_ATTRIBUTES`)
/// says otherwise.
fn resource() -> Resource {
    let builder = Resource::builder();
    let builder = if env_set("OTEL_SERVICE_NAME") {
        builder
    } else {
        builder.with_service_name(SCOPE)
    };
    builder
        .with_attribute(opentelemetry::KeyValue::new("service.version", crate::version::VERSION))
        .build()
}

/// Installs logging only (commands that do not serve).
///
/// `filter` has been validated by the config parser; an invalid one falls back to `info`.
pub fn init(format: LogFormat, filter: &str) {
    let _ = install_subscriber(format, filter, None);
}

/// Installs logging, and traces and metrics as `args` and the `OTEL_*`
/// environment configure them. Call once, at the binary edge, inside the
/// Tokio runtime (the OTLP exporter runs on it).
pub fn install(format: LogFormat, filter: &str, args: &TelemetryArgs) -> Result<Telemetry, TelemetryError> {
    let switches = Switches::read(args);
    let metrics_wanted = args.metrics_addr().is_some() || switches.metrics_push;
    let mut telemetry = Telemetry::default();

    let tracer = if switches.traces {
        let mut exporter = opentelemetry_otlp::SpanExporter::builder().with_tonic();
        if let Some(endpoint) = args.otlp_endpoint() {
            exporter = exporter.with_endpoint(endpoint);
        }
        // The sampler comes from OTEL_TRACES_SAMPLER(_ARG): the SDK's
        // default configuration reads them (parent-based always-on unset).
        let provider = SdkTracerProvider::builder()
            .with_resource(resource())
            .with_batch_exporter(exporter.build()?)
            .build();
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        let tracer = provider.tracer(SCOPE);
        opentelemetry::global::set_tracer_provider(provider.clone());
        telemetry.tracer = Some(provider);
        Some(tracer)
    } else {
        None
    };

    if metrics_wanted {
        let mut builder = SdkMeterProvider::builder().with_resource(resource());
        if args.metrics_addr().is_some() {
            let registry = prometheus::Registry::new();
            let exporter = opentelemetry_prometheus::exporter()
                .with_registry(registry.clone())
                .scope_info_enabled(false)
                .build()
                .map_err(|e| TelemetryError::Prometheus(e.to_string()))?;
            builder = builder.with_reader(exporter);
            metrics::set_registry(registry);
        }
        if switches.metrics_push {
            let mut exporter = opentelemetry_otlp::MetricExporter::builder().with_tonic();
            if let Some(endpoint) = args.otlp_endpoint() {
                exporter = exporter.with_endpoint(endpoint);
            }
            builder = builder.with_periodic_exporter(exporter.build()?);
        }
        let provider = builder.build();
        opentelemetry::global::set_meter_provider(provider.clone());
        metrics::install(&provider);
        telemetry.meter = Some(provider);
    }

    install_subscriber(format, filter, tracer);
    if telemetry.tracer.is_some() {
        TRACING.store(true, Ordering::Relaxed);
    }
    Ok(telemetry)
}

/// The global subscriber: the log output filtered by `filter`, and the span
/// export (when `tracer` is given) filtered on its own, so that a quiet log
/// level does not silence the spans.
fn install_subscriber(format: LogFormat, filter: &str, tracer: Option<opentelemetry_sdk::trace::Tracer>) -> bool {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let output = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(colour(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR")))
            .with_target(false)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .json()
            .flatten_event(true)
            .event_format(logs::WithTraceIds::new(
                tracing_subscriber::fmt::format().json().flatten_event(true),
            ))
            .with_filter(filter)
            .boxed(),
    };
    let spans = tracer.map(|tracer| {
        tracing_opentelemetry::layer().with_tracer(tracer).with_filter(
            Targets::new()
                .with_target("converge_service", LevelFilter::INFO)
                .with_target("converge_sdk", LevelFilter::INFO),
        )
    });
    // A second init (tests, embedding) is harmless: keep the first subscriber.
    let installed = tracing_subscriber::registry()
        .with(output)
        .with(spans)
        .try_init()
        .is_ok();
    if installed {
        logs::remember_dispatch();
    }
    installed
}

/// Whether log lines are coloured: only on a terminal (a file or a pipe
/// would keep the escape codes), and never when `NO_COLOR` is set to
/// anything but the empty string (<https://no-color.org>).
fn colour(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|value| value.is_empty())
}

impl Telemetry {
    /// Flushes and stops the exporters (spans still buffered are sent).
    pub fn shutdown(self) {
        TRACING.store(false, Ordering::Relaxed);
        if let Some(tracer) = self.tracer
            && let Err(e) = tracer.shutdown()
        {
            tracing::warn!(error = %e, "flushing traces failed");
        }
        if let Some(meter) = self.meter
            && let Err(e) = meter.shutdown()
        {
            tracing::warn!(error = %e, "flushing metrics failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::colour;

    #[test]
    fn logs_are_coloured_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some("".into())));
        assert!(!colour(true, Some("1".into())));
        assert!(!colour(false, None));
    }
}
