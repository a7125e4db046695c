//! Test kinds for composition tests and benchmarks: `stack`, a generic
//! composer whose spec lists the `cell` children and edges it emits and which
//! rolls its children up, and `cell`, a leaf that reports `{out}` and records
//! every run with a global order.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use converge_proto::v1::{
    ApplyReactorBindingRequest, CompositionRollup, Emit, KindManifest, Reaction, ReactorBinding, Transition, Trigger,
};
use converge_sdk::worker::{
    ChildSpec, Condition, ConditionStatus, DepEdge, HandlerError, KindVersion, Outcome, Provider, ProviderConfigSpec,
    ReactionRequest, ResourceRef, Stage, StageInput, ValueFlow, async_trait,
};
use serde_json::{Value, json};

/// One recorded run of a cell's work reaction.
#[derive(Debug, Clone)]
pub struct Run {
    /// The cell's name.
    pub name: String,
    /// Its spec as the run saw it.
    pub spec: Value,
    /// Global order of the run's start.
    pub started: u64,
    /// Global order of the run's end.
    pub finished: u64,
}

/// Serves `cell`: its status is `{out: "<name>:<salt>"}`; `fail: true`
/// fails terminally. Records every run with a global order.
#[derive(Clone, Default)]
pub struct Cells {
    clock: Arc<AtomicU64>,
    runs: Arc<Mutex<Vec<Run>>>,
    /// Simulated provider latency of every run.
    pub delay: Duration,
}

impl Cells {
    /// Cells whose every run takes `delay`.
    pub fn with_delay(delay: Duration) -> Self {
        Self {
            delay,
            ..Self::default()
        }
    }

    /// Every run so far.
    pub fn runs(&self) -> Vec<Run> {
        self.runs.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// The runs of one cell.
    pub fn runs_of(&self, name: &str) -> Vec<Run> {
        self.runs().into_iter().filter(|r| r.name == name).collect()
    }
}

#[async_trait]
impl Provider for Cells {
    fn kind(&self) -> KindVersion {
        KindVersion::new("cell", 1)
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        let started = self.clock.fetch_add(1, Ordering::SeqCst);
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let spec = request.resource.spec.clone();
        let finished = self.clock.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut runs) = self.runs.lock() {
            runs.push(Run {
                name: request.resource.name.clone(),
                spec: spec.clone(),
                started,
                finished,
            });
        }
        if spec.get("fail").and_then(Value::as_bool) == Some(true) {
            return Err(HandlerError::terminal("this cell is told to fail").with_reason("ToldToFail"));
        }
        let salt = spec.get("salt").cloned().unwrap_or(json!(0));
        Ok(Outcome::new().with_status(json!({"out": format!("{}:{}", request.resource.name, salt)})))
    }
}

/// What a [`Stacks`] runs for a stack's teardown (its `kind/name` given):
/// a test's script of successes and failures.
pub type TeardownHook =
    Arc<dyn Fn(String) -> Pin<Box<dyn Future<Output = Result<Outcome, HandlerError>> + Send>> + Send + Sync>;

/// Serves `stack`: composes the children and edges its spec lists and rolls
/// them up (Ready=False naming every child that is not ready); a teardown
/// (for kinds that declare one) runs the hook, or succeeds.
#[derive(Clone, Default)]
pub struct Stacks {
    /// Rollups run so far.
    pub rollups: Arc<AtomicU64>,
    teardown: Option<TeardownHook>,
}

impl Stacks {
    /// A composer whose teardowns run `hook`.
    pub fn with_teardown(hook: TeardownHook) -> Self {
        Self {
            rollups: Arc::default(),
            teardown: Some(hook),
        }
    }
}

#[async_trait]
impl Provider for Stacks {
    fn kind(&self) -> KindVersion {
        KindVersion::new("stack", 1)
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        match (request.stage, request.input) {
            (Stage::Delete, _) => match &self.teardown {
                Some(hook) => hook(format!("stack/{}", request.resource.name)).await,
                None => Ok(Outcome::new()),
            },
            (Stage::Compose, _) => {
                let spec = &request.resource.spec;
                let mut outcome = Outcome::new().with_status(json!({"composed": true}));
                if let Some(name) = spec.get("config").and_then(Value::as_str) {
                    outcome = outcome.with_config(ProviderConfigSpec {
                        name: name.into(),
                        kind: "cell".into(),
                        kind_version: 1,
                        is_default: false,
                        spec: Some(json!({})),
                        data: Vec::new(),
                    });
                }
                for cell in spec.get("cells").and_then(Value::as_array).into_iter().flatten() {
                    outcome = outcome.with_child(ChildSpec {
                        kind: "cell".into(),
                        kind_version: 1,
                        name: cell.get("name").and_then(Value::as_str).unwrap_or_default().into(),
                        labels: BTreeMap::new(),
                        spec: cell.get("spec").cloned().unwrap_or(json!({})),
                        provider_config: None,
                    });
                }
                for edge in spec.get("edges").and_then(Value::as_array).into_iter().flatten() {
                    let field = |key: &str| edge.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
                    let (from, to) = (field("from"), field("to"));
                    outcome = outcome.with_edge(DepEdge {
                        dependent: ResourceRef::new("cell", from),
                        value_flows: vec![ValueFlow {
                            dependent_field: format!("/inputs/{to}"),
                            source_field: "/out".into(),
                        }],
                        dependency: ResourceRef::new("cell", to),
                    });
                }
                Ok(outcome)
            }
            (Stage::Rollup, StageInput::Rollup(input)) => {
                self.rollups.fetch_add(1, Ordering::SeqCst);
                let not_ready: Vec<String> = input
                    .descendants
                    .iter()
                    .filter(|d| !d.ready)
                    .map(|d| format!("{}/{}", d.kind, d.name))
                    .collect();
                let ready = input.descendants.len() - not_ready.len();
                let condition = if not_ready.is_empty() {
                    Condition::new("Ready", ConditionStatus::True).with_reason("ChildrenReady")
                } else {
                    Condition::new("Ready", ConditionStatus::False)
                        .with_reason("ChildrenNotReady")
                        .with_message(format!("not ready: {}", not_ready.join(", ")))
                };
                Ok(Outcome::new()
                    .with_status(json!({"ready": ready, "total": input.descendants.len()}))
                    .with_condition(condition))
            }
            (stage, _) => Err(HandlerError::terminal(format!("unexpected stage {stage:?}"))),
        }
    }
}

/// The manifest of `stack` (composer + rollup).
pub fn stack_manifest() -> KindManifest {
    KindManifest {
        kind: "stack".into(),
        kind_version: 1,
        description: "test composer".into(),
        reactions: vec![
            Reaction {
                name: "compose".into(),
                trigger: Trigger::SpecChange.into(),
                emits: vec![Emit::Children.into(), Emit::Edges.into(), Emit::Status.into()],
                ..Default::default()
            },
            Reaction {
                name: "rollup".into(),
                trigger: Trigger::ChildrenSettled.into(),
                emits: vec![Emit::Status.into(), Emit::Conditions.into()],
                ..Default::default()
            },
        ],
        ..Default::default()
    }
}

/// The manifest of a leaf kind with one worker reaction (`work`, emitting
/// status), as the benchmarks and `cell` use.
pub fn work_manifest(kind: &str) -> KindManifest {
    KindManifest {
        kind: kind.into(),
        kind_version: 1,
        description: format!("{kind}: one worker reaction (tests and benchmarks)"),
        reactions: vec![Reaction {
            name: "work".into(),
            trigger: Trigger::SpecChange.into(),
            emits: vec![Emit::Status.into()],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The manifest of `cell` (a worker reaction).
pub fn cell_manifest() -> KindManifest {
    work_manifest("cell")
}

/// Applies a kind manifest.
pub async fn apply_kind(client: &converge_sdk::Client, manifest: KindManifest) -> anyhow::Result<()> {
    client
        .kinds()
        .apply_kind_manifest(converge_proto::v1::ApplyKindManifestRequest {
            manifest: Some(manifest),
            ..Default::default()
        })
        .await?;
    Ok(())
}

/// A stack spec: cells by name (with their specs) and edges "from -> to"
/// (from depends on to and receives to's `out` at `/inputs/<to>`).
pub fn stack(cells: &[(&str, Value)], edges: &[(&str, &str)]) -> Value {
    json!({
        "cells": cells.iter().map(|(name, spec)| json!({"name": name, "spec": spec})).collect::<Vec<_>>(),
        "edges": edges.iter().map(|(from, to)| json!({"from": from, "to": to})).collect::<Vec<_>>(),
    })
}

/// A cell of a stack spec: its name and spec.
pub type Cell = (String, Value);
/// An edge of a stack spec: (dependent, dependency).
pub type EdgeNames = (String, String);

/// A layered graph of `layers` x `width` cells named `l<layer>-<i>`; each
/// cell past the first layer depends on two cells of the layer before.
pub fn layered(layers: usize, width: usize) -> (Vec<Cell>, Vec<EdgeNames>) {
    let name = |layer: usize, i: usize| format!("l{layer}-{i}");
    let mut cells = Vec::new();
    let mut edges = Vec::new();
    for layer in 0..layers {
        for i in 0..width {
            cells.push((name(layer, i), json!({})));
            if layer > 0 {
                edges.push((name(layer, i), name(layer - 1, i)));
                edges.push((name(layer, i), name(layer - 1, (i + 1) % width)));
            }
        }
    }
    (cells, edges)
}

/// The rollup of a composition declared as data whose children are the
/// `cells` template's: ready when every cell is, with their counts.
pub fn cells_rollup() -> CompositionRollup {
    CompositionRollup {
        status: Some(crate::api::object(json!({
            "ready": "${cells.filter(c, c.ready).size()}",
            "total": "${size(cells)}"
        }))),
        ready: "cells.all(c, c.ready)".into(),
        message: String::new(),
    }
}

/// A reactor kind: one reaction, `react`, with a side effect.
pub fn sink_manifest(kind: &str) -> KindManifest {
    KindManifest {
        kind: kind.into(),
        kind_version: 1,
        reactions: vec![Reaction {
            name: "react".into(),
            trigger: Trigger::Reactor.into(),
            emits: vec![Emit::SideEffect.into()],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Declares the reactor kind `sink` (a side-effect reaction) and binds it,
/// as `binding`, to the Synced transitions of `watch_kind`.
pub async fn bind_synced_sink(
    client: &converge_sdk::Client,
    sink: &str,
    binding: &str,
    watch_kind: &str,
) -> anyhow::Result<()> {
    apply_kind(client, sink_manifest(sink)).await?;
    client
        .reactor_bindings()
        .apply_reactor_binding(ApplyReactorBindingRequest {
            reactor_binding: Some(ReactorBinding {
                name: binding.into(),
                watch_kind: watch_kind.into(),
                transition: Transition::Synced.into(),
                reactor: sink.into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await?;
    Ok(())
}
