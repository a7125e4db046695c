//! The reconcile pipeline of a kind and the rules a composition must obey.
//!
//! A reconcile runs up to three stages in order: compose (the kind's
//! composer, when the spec moved past the last composition), work (its
//! worker reaction) and rollup (its rollup, once every child has settled).
//! A composition is the complete desired set of children and dependency
//! edges; it is checked here before anything is written.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;
use serde_json::Value;

use super::labels::validate_labels;
use super::manifest::{Emit, Reaction, Trigger};
use super::names::{validate_kind_name, validate_kind_version, validate_resource_name};
use super::operation::{VerbReaction, verbs_of};
use super::provider_config::{ConfigContent, MAX_COMPOSED_CONFIGS};
use super::resource::ResourceRef;
use super::violation::Violation;

/// Most children one composition may declare.
pub const MAX_CHILDREN: usize = 10_000;
/// Most edges one composition may declare.
pub const MAX_EDGES: usize = 50_000;
/// Most value flows on one edge.
pub const MAX_FLOWS_PER_EDGE: usize = 64;

/// The reaction name the server's own compose stage goes by.
pub const SERVER_COMPOSE: &str = "composition";
/// The reaction name the server's own rollup stage goes by.
pub const SERVER_ROLLUP: &str = "composition.rollup";

/// A stage of the reconcile pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Produce the desired children and edges.
    Compose,
    /// Reconcile the resource against the outside world.
    Work,
    /// Fold the settled children into the resource's status.
    Rollup,
    /// Tear a finalizer-bearing resource down (a `delete` task, outside the
    /// reconcile pipeline).
    Delete,
}

impl Stage {
    /// The stage's lower-case name, as metrics and traces label it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Compose => "compose",
            Self::Work => "work",
            Self::Rollup => "rollup",
            Self::Delete => "delete",
        }
    }
}

/// A teardown reaction of a kind and the finalizer it clears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Teardown {
    /// The finalizer the reaction clears.
    pub finalizer: String,
    /// The reaction name.
    pub reaction: String,
}

/// The reaction names of each stage a kind runs; `None` = the kind skips it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StagePlan {
    /// The composer (spec change emitting children).
    pub compose: Option<String>,
    /// The worker (spec change emitting status, without children).
    pub work: Option<String>,
    /// The rollup (children settled emitting status).
    pub rollup: Option<String>,
    /// The teardowns (delete requested), each with the finalizer it clears.
    pub teardowns: Vec<Teardown>,
    /// The reactor reaction, on a reactor kind (which has no other stage).
    pub react: Option<String>,
    /// The operation reactions, one per verb.
    pub verbs: Vec<VerbReaction>,
    /// The stages of a composition declared as data, which the server
    /// runs itself (ADR 49); the compiled composition is the kind's
    /// (`CompiledKind::composition`).
    pub server: ServerStages,
}

/// Which stages of a kind the server runs itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStages {
    /// The kind has a composition declared as data.
    pub compose: bool,
    /// That composition has a rollup.
    pub rollup: bool,
}

impl StagePlan {
    /// The plan of a manifest's reactions; a teardown reaction without its
    /// own finalizer clears the manifest's `finalizer_name`.
    pub fn of(reactions: &[Reaction], finalizer_name: Option<&str>) -> Self {
        let find = |pick: &dyn Fn(&Reaction) -> bool| reactions.iter().find(|r| pick(r)).map(|r| r.name.clone());
        let manifest_finalizer = finalizer_name.filter(|f| !f.is_empty());
        let teardowns = reactions
            .iter()
            .filter(|r| r.trigger == Trigger::DeleteRequested)
            .filter_map(|r| {
                let finalizer = r
                    .finalizer
                    .as_deref()
                    .filter(|f| !f.is_empty())
                    .or(manifest_finalizer)?;
                Some(Teardown {
                    finalizer: finalizer.to_owned(),
                    reaction: r.name.clone(),
                })
            })
            .collect();
        Self {
            teardowns,
            compose: find(&|r| r.trigger == Trigger::SpecChange && r.emits.contains(&Emit::Children)),
            work: find(&|r| r.trigger == Trigger::SpecChange && !r.emits.contains(&Emit::Children) && emits_state(r))
                .or_else(|| find(&|r| r.trigger == Trigger::SpecChange && !r.emits.contains(&Emit::Children))),
            rollup: find(&|r| r.trigger == Trigger::ChildrenSettled && r.emits.contains(&Emit::Status)),
            react: find(&|r| r.trigger == Trigger::Reactor),
            verbs: verbs_of(reactions),
            server: ServerStages::default(),
        }
    }

    /// The plan with a composition declared as data: the server composes,
    /// and rolls up when the composition declares a rollup.
    pub fn with_composition(mut self, rolls_up: bool) -> Self {
        self.server = ServerStages {
            compose: true,
            rollup: rolls_up,
        };
        self
    }

    /// Whether the server runs `stage` itself (a data-declared compose or
    /// rollup) rather than a worker.
    pub fn served_by_server(&self, stage: Stage) -> bool {
        match stage {
            Stage::Compose => self.server.compose && self.compose.is_none(),
            Stage::Rollup => self.server.rollup && self.rollup.is_none(),
            Stage::Work | Stage::Delete => false,
        }
    }

    /// Whether no worker takes part in the kind's tasks: every reconcile
    /// stage is the server's and nothing else needs a worker (no teardown,
    /// verb or reactor reaction). Converge's own session claims these.
    pub fn server_only(&self) -> bool {
        self.server.compose
            && self.compose.is_none()
            && self.work.is_none()
            && self.rollup.is_none()
            && self.teardowns.is_empty()
            && self.verbs.is_empty()
            && self.react.is_none()
    }

    fn composes(&self) -> bool {
        self.compose.is_some() || self.server.compose
    }

    fn rolls_up(&self) -> bool {
        self.rollup.is_some() || self.server.rollup
    }

    /// The operation reaction of `verb`, if the kind declares one.
    pub fn verb(&self, verb: &str) -> Option<&VerbReaction> {
        self.verbs.iter().find(|v| v.verb == verb)
    }

    /// The first stage of a reconcile: compose when the spec moved past the
    /// last composition, else the first stage after it.
    pub fn first(&self, needs_compose: bool) -> Option<Stage> {
        if needs_compose && self.composes() {
            Some(Stage::Compose)
        } else {
            self.after(Stage::Compose)
        }
    }

    /// The stage after `stage`, if the kind has one.
    pub fn after(&self, stage: Stage) -> Option<Stage> {
        match stage {
            Stage::Compose if self.work.is_some() => Some(Stage::Work),
            Stage::Compose | Stage::Work if self.rolls_up() => Some(Stage::Rollup),
            _ => None,
        }
    }

    /// The reaction a stage runs (for [`Stage::Delete`], the first teardown).
    pub fn reaction(&self, stage: Stage) -> Option<&str> {
        match stage {
            Stage::Compose if self.served_by_server(stage) => Some(SERVER_COMPOSE),
            Stage::Rollup if self.served_by_server(stage) => Some(SERVER_ROLLUP),
            Stage::Compose => self.compose.as_deref(),
            Stage::Work => self.work.as_deref(),
            Stage::Rollup => self.rollup.as_deref(),
            Stage::Delete => self.teardowns.first().map(|t| t.reaction.as_str()),
        }
    }

    /// Whether the kind is a reactor kind: it runs only through reactor
    /// bindings and owns no resources.
    pub fn is_reactor(&self) -> bool {
        self.react.is_some()
    }

    /// The teardown reaction that clears `finalizer`, if the kind has one.
    pub fn teardown(&self, finalizer: &str) -> Option<&str> {
        self.teardowns
            .iter()
            .find(|t| t.finalizer == finalizer)
            .map(|t| t.reaction.as_str())
    }
}

fn emits_state(r: &Reaction) -> bool {
    r.emits.contains(&Emit::Status) || r.emits.contains(&Emit::Conditions)
}

/// A child a composer wants to exist.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildSpec {
    /// Kind.
    pub kind: String,
    /// Kind version (>= 1).
    pub kind_version: i32,
    /// Name, unique within the kind.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Desired spec (a JSON object).
    pub spec: Value,
    /// Name of the provider config to attach as its override, if any.
    pub provider_config: Option<String>,
}

/// A provider config a composer wants to exist, in the shape
/// `apply_composition` reads (`composition_config`, data as base64).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigSpec {
    /// Cluster-wide unique name.
    pub name: String,
    /// Kind the config is for.
    pub kind: String,
    /// Kind version the config is for.
    pub kind_version: i32,
    /// Whether it is the default of its pair.
    pub is_default: bool,
    /// Configuration document (a JSON object).
    pub spec: Value,
    /// Opaque bundle.
    #[serde(serialize_with = "base64_text")]
    pub data: Vec<u8>,
}

fn base64_text<S: serde::Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
    use base64::Engine as _;
    serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// Copies a value of the dependency's status into the dependent's spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ValueFlow {
    /// JSON pointer into the dependent's spec.
    pub dependent: String,
    /// JSON pointer into the dependency's status.
    pub source: String,
}

/// A dependency edge of a composition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    /// The resource that waits.
    pub dependent: ResourceRef,
    /// The resource waited for.
    pub dependency: ResourceRef,
    /// Values copied along the edge.
    pub flows: Vec<ValueFlow>,
}

/// The edge as `apply_composition` reads it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredEdge<'a> {
    dependent_kind: &'a str,
    dependent_name: &'a str,
    dependency_kind: &'a str,
    dependency_name: &'a str,
    flows: &'a [ValueFlow],
}

impl Edge {
    /// The edge in the database function's input shape.
    pub fn stored(&self) -> StoredEdge<'_> {
        StoredEdge {
            dependent_kind: &self.dependent.kind,
            dependent_name: &self.dependent.name,
            dependency_kind: &self.dependency.kind,
            dependency_name: &self.dependency.name,
            flows: &self.flows,
        }
    }
}

/// Checks the shape of a composition: sizes, names, labels, unique children,
/// edges whose dependent is one of the children, well-formed pointers, no
/// self edges and no cycles among the children. Kinds and spec schemas are
/// checked by the caller against the catalog.
pub fn validate_composition(
    children: &[ChildSpec],
    edges: &[Edge],
    configs: &[ConfigSpec],
) -> Result<(), Vec<Violation>> {
    let mut problems = validate_configs(configs);
    if children.len() > MAX_CHILDREN {
        problems.push(Violation::new(
            "/compose_result/desired",
            format!("at most {MAX_CHILDREN} children per composition"),
        ));
    }
    if edges.len() > MAX_EDGES {
        problems.push(Violation::new(
            "/compose_result/edges",
            format!("at most {MAX_EDGES} edges per composition"),
        ));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut names = BTreeSet::new();
    for (i, child) in children.iter().enumerate() {
        let at = format!("/compose_result/desired/{i}");
        let checks = [
            validate_kind_name(&format!("{at}/kind"), &child.kind),
            validate_kind_version(&format!("{at}/kind_version"), child.kind_version),
            validate_resource_name(&format!("{at}/name"), &child.name),
        ];
        problems.extend(checks.into_iter().filter_map(Result::err));
        if let Err(mut label_problems) = validate_labels(&child.labels) {
            for p in &mut label_problems {
                p.field = format!("{at}{}", p.field);
            }
            problems.extend(label_problems);
        }
        if !child.spec.is_object() {
            problems.push(Violation::new(format!("{at}/spec"), "spec must be a JSON object"));
        }
        if let Some(config) = &child.provider_config
            && let Err(mut bad) = validate_resource_name(&format!("{at}/provider_config"), config)
        {
            bad.description = format!("provider config {}", bad.description);
            problems.push(bad);
        }
        if !names.insert((child.kind.as_str(), child.name.as_str())) {
            problems.push(Violation::new(
                format!("{at}/name"),
                format!("child {}/{} is listed twice", child.kind, child.name),
            ));
        }
    }
    let mut seen = BTreeSet::new();
    for (i, edge) in edges.iter().enumerate() {
        let at = format!("/compose_result/edges/{i}");
        let dependent = (edge.dependent.kind.as_str(), edge.dependent.name.as_str());
        if !names.contains(&dependent) {
            problems.push(Violation::new(
                format!("{at}/dependent"),
                format!(
                    "dependent {}/{} is not one of the desired children",
                    edge.dependent.kind, edge.dependent.name
                ),
            ));
        }
        if edge.dependent == edge.dependency {
            problems.push(Violation::new(
                format!("{at}/dependency"),
                "a resource cannot depend on itself",
            ));
        }
        if !seen.insert((&edge.dependent, &edge.dependency)) {
            problems.push(Violation::new(at.clone(), "edge is listed twice"));
        }
        if edge.flows.len() > MAX_FLOWS_PER_EDGE {
            problems.push(Violation::new(
                format!("{at}/value_flows"),
                format!("at most {MAX_FLOWS_PER_EDGE} value flows per edge"),
            ));
        }
        for (j, flow) in edge.flows.iter().enumerate() {
            for (field, pointer) in [("dependent_field", &flow.dependent), ("source_field", &flow.source)] {
                if !is_pointer(pointer) {
                    problems.push(Violation::new(
                        format!("{at}/value_flows/{j}/{field}"),
                        format!("{pointer:?} is not a JSON pointer into a document (e.g. \"/vpc_id\")"),
                    ));
                }
            }
        }
    }
    if problems.is_empty()
        && let Some(cycle) = find_cycle(edges)
    {
        problems.push(Violation::new(
            "/compose_result/edges",
            format!("the edges form a cycle: {cycle}"),
        ));
    }
    if problems.is_empty() { Ok(()) } else { Err(problems) }
}

/// Checks the configs of a composition: how many, their content (names,
/// sizes) and unique names. Kinds and config schemas are checked by the
/// caller against the catalog.
fn validate_configs(configs: &[ConfigSpec]) -> Vec<Violation> {
    if configs.len() > MAX_COMPOSED_CONFIGS {
        return vec![Violation::new(
            "/compose_result/configs",
            format!("at most {MAX_COMPOSED_CONFIGS} provider configs per composition"),
        )];
    }
    let mut problems = Vec::new();
    let mut names = BTreeSet::new();
    for (i, config) in configs.iter().enumerate() {
        let at = format!("/compose_result/configs/{i}");
        let content = ConfigContent {
            name: config.name.clone(),
            kind: config.kind.clone(),
            kind_version: config.kind_version,
            is_default: config.is_default,
            spec: config.spec.clone(),
            data: config.data.clone(),
        };
        if let Err(found) = content.validate(&at) {
            problems.extend(found);
        }
        if !names.insert(config.name.as_str()) {
            problems.push(Violation::new(
                format!("{at}/name"),
                format!("provider config {} is listed twice", config.name),
            ));
        }
    }
    problems
}

/// A non-empty RFC 6901 pointer with valid escapes.
fn is_pointer(pointer: &str) -> bool {
    let Some(rest) = pointer.strip_prefix('/') else {
        return false;
    };
    pointer.len() <= 1024
        && rest.split('/').all(|token| {
            let mut chars = token.chars();
            while let Some(c) = chars.next() {
                if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
                    return false;
                }
            }
            true
        })
}

/// A dependency cycle, as "a -> b -> a", if the edges have one.
fn find_cycle(edges: &[Edge]) -> Option<String> {
    let mut next: HashMap<&ResourceRef, Vec<&ResourceRef>> = HashMap::new();
    for edge in edges {
        next.entry(&edge.dependent).or_default().push(&edge.dependency);
    }
    // 0 = unvisited, 1 = on the current path, 2 = done.
    let mut state: HashMap<&ResourceRef, u8> = HashMap::new();
    let mut starts: Vec<&ResourceRef> = next.keys().copied().collect();
    starts.sort();
    for start in starts {
        if state.get(start).copied().unwrap_or(0) != 0 {
            continue;
        }
        // Iterative depth-first search: (node, index of the next successor).
        let mut path: Vec<(&ResourceRef, usize)> = vec![(start, 0)];
        state.insert(start, 1);
        while let Some((node, index)) = path.last().copied() {
            let successors = next.get(node).map(Vec::as_slice).unwrap_or_default();
            if let Some(succ) = successors.get(index).copied() {
                if let Some(top) = path.last_mut() {
                    top.1 += 1;
                }
                match state.get(succ).copied().unwrap_or(0) {
                    0 => {
                        state.insert(succ, 1);
                        path.push((succ, 0));
                    }
                    1 => {
                        let from = path.iter().position(|(n, _)| *n == succ).unwrap_or(0);
                        let mut names: Vec<String> = path[from..]
                            .iter()
                            .map(|(n, _)| format!("{}/{}", n.kind, n.name))
                            .collect();
                        names.push(format!("{}/{}", succ.kind, succ.name));
                        return Some(names.join(" -> "));
                    }
                    _ => {}
                }
            } else {
                state.insert(node, 2);
                path.pop();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn child(kind: &str, name: &str) -> ChildSpec {
        ChildSpec {
            kind: kind.into(),
            kind_version: 1,
            name: name.into(),
            labels: BTreeMap::new(),
            spec: json!({}),
            provider_config: None,
        }
    }

    fn edge(from: (&str, &str), to: (&str, &str)) -> Edge {
        Edge {
            dependent: ResourceRef {
                kind: from.0.into(),
                name: from.1.into(),
            },
            dependency: ResourceRef {
                kind: to.0.into(),
                name: to.1.into(),
            },
            flows: vec![ValueFlow {
                dependent: "/id".into(),
                source: "/id".into(),
            }],
        }
    }

    fn reaction(name: &str, trigger: Trigger, emits: &[Emit]) -> Reaction {
        Reaction {
            name: name.into(),
            trigger,
            emits: emits.to_vec(),
            verb: None,
            finalizer: None,
            input_schema: None,
        }
    }

    #[test]
    fn plans_follow_the_reactions() {
        let plan = StagePlan::of(
            &[
                reaction("compose", Trigger::SpecChange, &[Emit::Children, Emit::Status]),
                reaction("rollup", Trigger::ChildrenSettled, &[Emit::Status]),
            ],
            None,
        );
        assert_eq!(plan.first(true), Some(Stage::Compose));
        assert_eq!(plan.first(false), Some(Stage::Rollup));
        assert_eq!(plan.after(Stage::Compose), Some(Stage::Rollup));
        assert_eq!(plan.after(Stage::Rollup), None);
        let leaf = StagePlan::of(&[reaction("work", Trigger::SpecChange, &[Emit::Status])], None);
        assert_eq!(leaf.first(true), Some(Stage::Work));
        assert_eq!(leaf.after(Stage::Work), None);
        assert_eq!(leaf.reaction(Stage::Work), Some("work"));
        assert_eq!(leaf.teardown("x/y"), None);
    }

    #[test]
    fn teardowns_clear_their_own_finalizer_or_the_manifests() {
        let own = Reaction {
            finalizer: Some("own/fin".into()),
            ..reaction("own", Trigger::DeleteRequested, &[Emit::Finalizer])
        };
        let plain = reaction("plain", Trigger::DeleteRequested, &[Emit::Finalizer]);
        let plan = StagePlan::of(&[own, plain.clone()], Some("kind/fin"));
        assert_eq!(plan.teardown("own/fin"), Some("own"));
        assert_eq!(plan.teardown("kind/fin"), Some("plain"));
        assert_eq!(plan.teardown("other/fin"), None);
        assert_eq!(plan.reaction(Stage::Delete), Some("own"));
        assert_eq!(plan.after(Stage::Delete), None);
        // Without a finalizer to clear, a teardown reaction is not planned.
        assert!(StagePlan::of(&[plain], None).teardowns.is_empty());
    }

    #[test]
    fn a_valid_composition_passes() {
        let children = [child("vpc", "a"), child("route", "b")];
        assert!(validate_composition(&children, &[edge(("route", "b"), ("vpc", "a"))], &[]).is_ok());
    }

    #[test]
    fn cycles_duplicates_and_strangers_are_refused() {
        let children = [child("vpc", "a"), child("route", "b"), child("vpc", "a")];
        let problems = validate_composition(&children, &[edge(("route", "x"), ("vpc", "a"))], &[]).unwrap_err();
        let text = format!("{problems:?}");
        assert!(text.contains("listed twice"), "{text}");
        assert!(text.contains("not one of the desired children"), "{text}");

        let children = [child("vpc", "a"), child("route", "b"), child("tgw", "c")];
        let edges = [
            edge(("route", "b"), ("vpc", "a")),
            edge(("vpc", "a"), ("tgw", "c")),
            edge(("tgw", "c"), ("route", "b")),
        ];
        let problems = validate_composition(&children, &edges, &[]).unwrap_err();
        assert!(problems[0].description.contains("cycle"), "{problems:?}");
    }

    #[test]
    fn pointers_must_be_well_formed() {
        assert!(is_pointer("/a/b~1c/0"));
        assert!(!is_pointer("a"));
        assert!(!is_pointer(""));
        assert!(!is_pointer("/a~2"));
    }
}
