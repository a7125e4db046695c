//! converge-conformance-worker: the Rust SDK's worker for the cross-language
//! conformance suite. It serves `conf-leaf` v1 and `conf-composite` v1 and
//! does what each resource's spec asks; the contract (environment, log lines,
//! behaviour) is conformance/README.md.

// Shares the logging, signal and exit-code helpers; the flag parsing there
// is the other binaries'.
#[allow(dead_code)]
#[path = "common.rs"]
mod common;

use std::fs::File;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use converge_sdk::tls::{ClientTls, ClientTlsFiles, DEFAULT_RELOAD_INTERVAL};
use converge_sdk::worker::{
    ChildSpec, Condition, ConditionStatus, DepEdge, Event, EventType, HandlerError, KindVersion, Outcome, Provider,
    ReactionRequest, ResourceRef, StageInput, ValueFlow, Worker, WorkerBuilder, async_trait,
};
use serde_json::{Map, Value, json};

const LANGUAGE: &str = "rust";

/// The settings of conformance/README.md, from the environment.
struct Settings {
    broker: String,
    max_parallel: usize,
    drain_timeout: Duration,
    heartbeat: Option<Duration>,
    log: Option<File>,
    tls: Option<ClientTlsFiles>,
    tls_reload: Duration,
}

impl Settings {
    fn from_env() -> Result<Self, String> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let number = |name: &str| -> Result<Option<u64>, String> {
            var(name)
                .map(|v| {
                    v.parse::<u64>()
                        .map_err(|_| format!("{name} must be a non-negative integer, not {v:?}"))
                })
                .transpose()
        };
        let broker = var("CONVERGE_BROKER_ADDR").ok_or("CONVERGE_BROKER_ADDR is required")?;
        let max_parallel = number("CONFORMANCE_MAX_PARALLEL")?.unwrap_or(4);
        if max_parallel == 0 {
            return Err("CONFORMANCE_MAX_PARALLEL must be at least 1".to_owned());
        }
        let log = match var("CONFORMANCE_LOG") {
            None => None,
            Some(path) => Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .map_err(|e| format!("cannot open CONFORMANCE_LOG {path:?}: {e}"))?,
            ),
        };
        // CONVERGE_TLS_CA_FILE enables TLS; the client certificate and key
        // (mTLS) come as a pair.
        let identity = match (var("CONVERGE_TLS_CERT_FILE"), var("CONVERGE_TLS_KEY_FILE")) {
            (Some(cert), Some(key)) => Some((cert.into(), key.into())),
            (None, None) => None,
            _ => return Err("CONVERGE_TLS_CERT_FILE and CONVERGE_TLS_KEY_FILE go together".to_owned()),
        };
        let tls = match var("CONVERGE_TLS_CA_FILE") {
            Some(ca) => Some(ClientTlsFiles {
                ca: ca.into(),
                identity,
            }),
            None if identity.is_some() => {
                return Err("CONVERGE_TLS_CERT_FILE needs CONVERGE_TLS_CA_FILE".to_owned());
            }
            None => None,
        };
        Ok(Self {
            broker,
            max_parallel: usize::try_from(max_parallel).unwrap_or(usize::MAX),
            drain_timeout: Duration::from_millis(number("CONFORMANCE_DRAIN_TIMEOUT_MS")?.unwrap_or(10_000)),
            heartbeat: number("CONFORMANCE_HEARTBEAT_MS")?.map(Duration::from_millis),
            log,
            tls,
            // The Rust SDK polls its TLS files (the others read them at
            // every connection); the suite shortens the poll so a rotation
            // is seen before the reconnect it forces.
            tls_reload: number("CONFORMANCE_TLS_RELOAD_MS")?
                .filter(|ms| *ms > 0)
                .map_or(DEFAULT_RELOAD_INTERVAL, Duration::from_millis),
        })
    }

    /// The worker builder, or why the TLS files cannot be used. Call inside
    /// the runtime (the TLS files are reloaded on it).
    fn builder(self) -> Result<WorkerBuilder, String> {
        let log = self.log.map(Arc::new);
        let mut builder = Worker::builder()
            .endpoint(self.broker)
            .max_parallel(self.max_parallel)
            .drain_timeout(self.drain_timeout)
            .agent(format!("converge-conformance-rust/{}", env!("CARGO_PKG_VERSION")));
        if let Some(interval) = self.heartbeat {
            builder = builder.heartbeat_interval(interval);
        }
        if let Some(files) = &self.tls {
            let tls = ClientTls::load(files, self.tls_reload).map_err(|e| format!("TLS: {e}"))?;
            builder = builder.tls(tls);
        }
        Ok(builder
            .provider(Conformance {
                kind: KindVersion::new("conf-leaf", 1),
                log: log.clone(),
            })
            .provider(Conformance {
                kind: KindVersion::new("conf-composite", 1),
                log,
            }))
    }
}

/// Serves one of the two conformance kinds.
struct Conformance {
    kind: KindVersion,
    log: Option<Arc<File>>,
}

impl Conformance {
    /// Appends one log line (one `write` of the whole line, `O_APPEND`).
    fn log(&self, event: &str, request: &ReactionRequest) {
        let Some(file) = &self.log else { return };
        let mut line = json!({
            "event": event,
            "kind": request.kind.kind,
            "name": request.resource.name,
            "reaction": request.reaction,
            "generation": request.generation,
            "attempt": request.attempt,
            "plan": request.plan,
            "language": LANGUAGE,
        })
        .to_string();
        line.push('\n');
        if let Err(error) = (&**file).write_all(line.as_bytes()) {
            tracing::warn!(%error, "cannot write the conformance log");
        }
    }
}

/// Writes the `end` line when the handler stops: returned, failed or
/// dropped by its deadline, but not unwinding from a panic.
struct EndLine<'a> {
    provider: &'a Conformance,
    request: &'a ReactionRequest,
}

impl Drop for EndLine<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.provider.log("end", self.request);
        }
    }
}

#[async_trait]
impl Provider for Conformance {
    fn kind(&self) -> KindVersion {
        self.kind.clone()
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        match request.reaction.as_str() {
            "work" | "compose" | "rollup" => {
                self.log("start", &request);
                let _end = EndLine {
                    provider: self,
                    request: &request,
                };
                match request.reaction.as_str() {
                    "work" => work(&request).await,
                    "compose" => {
                        if spec_flag(&request, "hang") {
                            std::future::pending::<()>().await;
                        }
                        // What a real composer does to the world (say,
                        // reserving a name), skipped when only planning.
                        if !request.plan {
                            self.log("side-effect", &request);
                        }
                        Ok(compose(&request))
                    }
                    _ => Ok(rollup(&request)),
                }
            }
            "teardown" => {
                if let Some(ms) = spec_u64(&request, "teardownMs") {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                self.log("teardown", &request);
                Ok(Outcome::new())
            }
            other => Err(HandlerError::unknown_reaction(other, &self.kind)),
        }
    }
}

fn spec_u64(request: &ReactionRequest, field: &str) -> Option<u64> {
    request
        .resource
        .spec
        .get(field)
        .and_then(Value::as_u64)
        .filter(|n| *n > 0)
}

fn spec_flag(request: &ReactionRequest, field: &str) -> bool {
    request.resource.spec.get(field).and_then(Value::as_bool) == Some(true)
}

/// `conf-leaf` `work`, steps 2-8 of the contract. Cancellation (the
/// deadline) drops this future wherever it waits.
async fn work(request: &ReactionRequest) -> Result<Outcome, HandlerError> {
    if spec_flag(request, "panic") {
        panic!("conformance: panic requested by the spec");
    }
    if spec_flag(request, "hang") {
        std::future::pending::<()>().await;
    }
    if let Some(ms) = spec_u64(request, "sleepMs") {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let fail_transient = spec_u64(request, "failTransient").unwrap_or(0);
    if u64::try_from(request.attempt).unwrap_or(0) <= fail_transient {
        return Err(
            HandlerError::transient(format!("conformance: transient failure at attempt {}", request.attempt))
                .with_reason("ConformanceTransient"),
        );
    }
    if spec_flag(request, "failTerminal") {
        return Err(HandlerError::terminal("conformance: terminal failure").with_reason("ConformanceTerminal"));
    }
    let stored = request.resource.status.as_ref();
    let requeued = stored.and_then(|s| s.get("requeuedGeneration")).cloned();
    let mut status = Map::new();
    status.insert("observedGeneration".into(), json!(request.generation));
    status.insert("attempt".into(), json!(request.attempt));
    status.insert("language".into(), json!(LANGUAGE));
    status.insert(
        "value".into(),
        request.resource.spec.get("value").cloned().unwrap_or(Value::Null),
    );
    status.insert("config".into(), request.effective_config().unwrap_or(Value::Null));
    let bundle = request.effective_bundle();
    status.insert(
        "bundle".into(),
        if bundle.is_empty() {
            Value::Null
        } else {
            json!(base64::engine::general_purpose::STANDARD.encode(bundle))
        },
    );
    status.insert(
        "trigger".into(),
        serde_json::to_value(request.trigger).unwrap_or(Value::Null),
    );
    if let Some(requeued) = &requeued {
        status.insert("requeuedGeneration".into(), requeued.clone());
    }
    if let Some(ms) = spec_u64(request, "requeueMs")
        && requeued != Some(json!(request.generation))
    {
        status.insert("requeuedGeneration".into(), json!(request.generation));
        return Ok(Outcome::new()
            .with_status(Value::Object(status))
            .with_requeue_after(Duration::from_millis(ms)));
    }
    let mut outcome = Outcome::new()
        .with_status(Value::Object(status))
        .with_condition(Condition::new("Ready", ConditionStatus::True).with_reason("Conformed"));
    if let Some(ms) = spec_u64(request, "livenessMs") {
        outcome = outcome.with_condition(
            Condition::new("Reachable", ConditionStatus::True)
                .with_reason("Probed")
                .with_liveness(Duration::from_millis(ms)),
        );
    }
    let asked = request.resource.spec.get("events").and_then(Value::as_array);
    for event in asked.into_iter().flatten() {
        let text = |field: &str| event.get(field).and_then(Value::as_str).unwrap_or_default().to_owned();
        outcome = outcome.with_event(Event {
            category: text("category"),
            event_type: if text("type") == "Warning" {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: text("reason"),
            message: text("message"),
            detail: None,
        });
    }
    Ok(outcome)
}

/// `conf-composite` `compose`: the children and edges of the spec.
fn compose(request: &ReactionRequest) -> Outcome {
    let children = request
        .resource
        .spec
        .get("children")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut outcome = Outcome::new();
    for child in &children {
        let Some(name) = child.get("name").and_then(Value::as_str) else {
            continue;
        };
        outcome = outcome.with_child(ChildSpec {
            kind: "conf-leaf".into(),
            kind_version: 1,
            name: name.to_owned(),
            labels: Default::default(),
            spec: child.get("spec").cloned().unwrap_or_else(|| json!({})),
            provider_config: None,
        });
        let flows: Vec<&Value> = child
            .get("flows")
            .and_then(Value::as_array)
            .map(|f| f.iter().collect())
            .unwrap_or_default();
        let mut dependencies: Vec<&str> = child
            .get("dependsOn")
            .and_then(Value::as_array)
            .map(|d| d.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        dependencies.extend(flows.iter().filter_map(|f| f.get("from").and_then(Value::as_str)));
        let mut seen = std::collections::BTreeSet::new();
        dependencies.retain(|d| seen.insert(*d));
        for dependency in dependencies {
            let value_flows = flows
                .iter()
                .filter(|f| f.get("from").and_then(Value::as_str) == Some(dependency))
                .map(|f| ValueFlow {
                    dependent_field: f.get("field").and_then(Value::as_str).unwrap_or_default().to_owned(),
                    source_field: f.get("source").and_then(Value::as_str).unwrap_or_default().to_owned(),
                })
                .collect();
            outcome = outcome.with_edge(DepEdge {
                dependent: ResourceRef::new("conf-leaf", name),
                dependency: ResourceRef::new("conf-leaf", dependency),
                value_flows,
            });
        }
    }
    outcome.with_status(json!({"phase": "composed", "children": children.len(), "language": LANGUAGE}))
}

/// `conf-composite` `rollup`: readiness of the direct children.
fn rollup(request: &ReactionRequest) -> Outcome {
    let me = &request.resource;
    let descendants = match &request.input {
        StageInput::Rollup(input) => input.descendants.as_slice(),
        _ => &[],
    };
    let direct: Vec<_> = descendants
        .iter()
        .filter(|d| d.owner.as_ref().is_some_and(|o| o.kind == me.kind && o.name == me.name))
        .collect();
    let ready = direct.iter().filter(|d| d.ready).count();
    let all = ready == direct.len();
    Outcome::new()
        .with_status(json!({
            "phase": if all { "ready" } else { "degraded" },
            "children": direct.len(),
            "ready": ready,
            "language": LANGUAGE,
        }))
        .with_condition(
            Condition::new(
                "Ready",
                if all {
                    ConditionStatus::True
                } else {
                    ConditionStatus::False
                },
            )
            .with_reason(if all { "ChildrenReady" } else { "ChildrenNotReady" }),
        )
        .with_healthy(all)
}

#[tokio::main]
async fn main() -> ExitCode {
    let filter = std::env::var("LOG_LEVEL").unwrap_or_else(|_| "info".to_owned());
    let spans = match init_telemetry(&filter) {
        Ok(spans) => spans,
        Err(error) => {
            eprintln!("converge-conformance-worker: {error}");
            return ExitCode::from(2);
        }
    };
    let code = match Settings::from_env().and_then(Settings::builder) {
        Ok(builder) => common::run_worker(builder).await,
        Err(error) => {
            eprintln!("converge-conformance-worker: {error}");
            ExitCode::from(2)
        }
    };
    // The last handlers' spans are exported before exit.
    if let Some(provider) = spans
        && let Err(error) = provider.shutdown()
    {
        tracing::warn!(%error, "cannot flush spans");
    }
    code
}

/// Logs to stderr at `filter` and, when OTEL_EXPORTER_OTLP_ENDPOINT is set,
/// exports the SDK's handler spans there over OTLP/gRPC, with the W3C
/// propagator the SDK extracts the broker's trace context with: what an
/// application does to see its handlers inside the broker's traces. The
/// handler spans are INFO spans of `converge_sdk`, exported whatever the
/// log level. Returns the tracer provider to flush at exit.
fn init_telemetry(filter: &str) -> Result<Option<opentelemetry_sdk::trace::SdkTracerProvider>, String> {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_otlp::WithExportConfig as _;
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let Some(endpoint) = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
        .ok()
        .filter(|e| !e.is_empty())
    else {
        common::init_logging(filter)?;
        return Ok(None);
    };
    let logs =
        tracing_subscriber::EnvFilter::try_new(filter).map_err(|e| format!("invalid LOG_LEVEL {filter:?}: {e}"))?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| format!("cannot build the OTLP exporter: {e}"))?;
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("converge-conformance-rust")
                .build(),
        )
        .with_batch_exporter(exporter)
        .build();
    opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(logs),
        )
        .with(
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("converge-conformance-rust"))
                .with_filter(
                    tracing_subscriber::filter::Targets::new().with_target("converge_sdk", tracing::Level::INFO),
                ),
        )
        .try_init()
        .map_err(|e| format!("cannot install the logger: {e}"))?;
    Ok(Some(provider))
}
