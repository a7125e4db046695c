//! Compositions declared as data (ADR 49): a kind's children written as
//! templates whose values are CEL expressions, evaluated by the server in
//! place of a composer worker, and a rollup that derives the parent's
//! status and readiness from its children.
//!
//! A template names a kind and version and gives the child's name, labels,
//! spec and provider config as `${…}` templates over `spec` and `metadata`
//! (the parent's name and labels). `for_each` makes it a collection (one
//! child per item of a list or entry of a map, seen as `each` and `index`);
//! `include_when` drops a child. A spec field whose whole value is
//! `${other.status.field}` is a value flow: the field is filled from the
//! status of the child of template `other` once it has one, and the child
//! waits for it (the dependency edge). That is the only place a child's
//! status may be read while composing, so a composition is a function of
//! the parent alone and recomposes exactly when the parent's spec changes.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use cel::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::cel::{self as expr, Budget, Expression, Template};
use super::composition::{ChildSpec, Edge, ValueFlow};
use super::names::{validate_kind_name, validate_kind_version};
use super::resource::ResourceRef;
use super::violation::{Violation, pointer_token};

/// Where a manifest's composition sits, for violations.
pub const AT: &str = "/manifest/composition";
/// Most templates one composition may declare.
pub const MAX_TEMPLATES: usize = 64;
/// Most children one evaluation may compose.
pub const MAX_CHILDREN: usize = 2_000;
/// Most labels one template may declare.
const MAX_LABELS: usize = 32;
/// Names an id may not take: the variables of the expressions and CEL's
/// reserved words.
const RESERVED: [&str; 14] = [
    "spec", "metadata", "each", "index", "self", "in", "as", "true", "false", "null", "let", "var", "function",
    "package",
];

/// A composition, as a manifest declares and stores it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Composition {
    /// The child templates, in order.
    pub resources: Vec<ComposedResource>,
    /// How the parent's status and readiness derive from its children.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollup: Option<CompositionRollup>,
}

/// One child template (or, with `for_each`, a collection of children).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ComposedResource {
    /// Identifier, unique in the composition: other templates and the
    /// rollup refer to the template by it.
    pub id: String,
    /// Kind of the child.
    pub kind: String,
    /// Kind version of the child.
    pub kind_version: i32,
    /// Name of the child (a template string).
    pub name: String,
    /// Labels of the child (values are template strings).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Spec of the child (a template object).
    #[serde(default)]
    pub spec: Value,
    /// CEL over `spec` and `metadata` yielding a list or map: one child per
    /// item. Empty = a single child.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub for_each: String,
    /// CEL yielding a bool: the child exists only when true. Empty = always.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub include_when: String,
    /// Name of the child's provider-config override (a template string).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub provider_config: String,
}

/// The rollup of a composition.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompositionRollup {
    /// The parent's status (a template object); null = keep what it has.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub status: Value,
    /// CEL yielding whether the parent is healthy; empty = not judged.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ready: String,
    /// Why it is not, when `ready` is false (a template string).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// A child kind a composition names, for the caller to check exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedKind {
    /// Pointer of the template's `kind`.
    pub at: String,
    /// Kind.
    pub kind: String,
    /// Kind version.
    pub kind_version: i32,
}

/// A status field a composition reads, for the caller to check against the
/// kind's status schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusRead {
    /// Pointer of the expression.
    pub at: String,
    /// Kind read.
    pub kind: String,
    /// Its version.
    pub kind_version: i32,
    /// Keys under `status`.
    pub path: Vec<String>,
}

/// A template compiled.
#[derive(Debug)]
struct Compiled {
    id: String,
    kind: String,
    kind_version: i32,
    name: Template,
    labels: Vec<(String, Template)>,
    spec: Template,
    for_each: Option<Expression>,
    include_when: Option<Expression>,
    provider_config: Option<Template>,
    /// Value flows out of other templates: (pointer in the child's spec,
    /// template id, pointer in that child's status).
    flows: Vec<(String, String, String)>,
}

/// A compiled composition, ready to evaluate.
#[derive(Debug)]
pub struct CompiledComposition {
    templates: Vec<Compiled>,
    rollup: Option<CompiledRollup>,
    /// Child kinds named, for the caller's existence check.
    pub kinds: Vec<NamedKind>,
    /// Status fields read, for the caller's schema check.
    pub status_reads: Vec<StatusRead>,
}

#[derive(Debug)]
struct CompiledRollup {
    status: Option<Template>,
    ready: Option<Expression>,
    message: Option<Template>,
}

/// The children and edges of one evaluation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Composed {
    /// Children, in template order.
    pub children: Vec<ChildSpec>,
    /// Edges with their value flows.
    pub edges: Vec<Edge>,
    /// For each child, its template id and whether the template is a
    /// collection.
    pub templates: Vec<(String, bool)>,
}

/// A child as the rollup sees it.
#[derive(Debug, Clone)]
pub struct Member {
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Ready (synced, healthy, not deleting).
    pub ready: bool,
    /// Synced at its generation.
    pub synced: bool,
    /// Its health.
    pub healthy: bool,
    /// Its status.
    pub status: Value,
}

/// What a rollup derived.
#[derive(Debug, Clone, PartialEq)]
pub struct RolledUp {
    /// The parent's new status, if the rollup declares one.
    pub status: Option<Value>,
    /// Whether the parent is healthy, if the rollup judges it.
    pub healthy: Option<bool>,
    /// Why it is not.
    pub message: String,
}

/// Checks and compiles a composition; `spec_schema` is the parent's (its
/// field reads are checked against it). Child kinds and status reads are
/// returned for the caller to check against the catalog.
pub fn compile(composition: &Composition, spec_schema: Option<&Value>) -> Result<CompiledComposition, Vec<Violation>> {
    let mut out = Vec::new();
    if composition.resources.is_empty() {
        out.push(Violation::new(
            format!("{AT}/resources"),
            "must declare at least one resource",
        ));
    }
    if composition.resources.len() > MAX_TEMPLATES {
        out.push(Violation::new(
            format!("{AT}/resources"),
            format!("at most {MAX_TEMPLATES} resources"),
        ));
        return Err(out);
    }
    let mut ids: HashMap<&str, (usize, bool)> = HashMap::new();
    for (i, resource) in composition.resources.iter().enumerate() {
        let at = format!("{AT}/resources/{i}/id");
        if let Err(why) = check_id(&resource.id) {
            out.push(Violation::new(at, why));
        } else if let Some((first, _)) = ids.insert(&resource.id, (i, !resource.for_each.is_empty())) {
            out.push(Violation::new(at, format!("is also the id of resources/{first}")));
        }
    }
    let id_names: Vec<&str> = composition.resources.iter().map(|r| r.id.as_str()).collect();
    let mut templates = Vec::new();
    let mut kinds = Vec::new();
    let mut status_reads = Vec::new();
    for (i, resource) in composition.resources.iter().enumerate() {
        let at = format!("{AT}/resources/{i}");
        out.extend(validate_kind_name(&format!("{at}/kind"), &resource.kind).err());
        out.extend(validate_kind_version(&format!("{at}/kind_version"), resource.kind_version).err());
        kinds.push(NamedKind {
            at: format!("{at}/kind"),
            kind: resource.kind.clone(),
            kind_version: resource.kind_version,
        });
        let collection = !resource.for_each.is_empty();
        let scope: &[&str] = if collection {
            &["spec", "metadata", "each", "index"]
        } else {
            &["spec", "metadata"]
        };
        let for_each = if collection {
            Expression::compile(
                &format!("{at}/for_each"),
                &resource.for_each,
                &["spec", "metadata"],
                &mut out,
            )
        } else {
            None
        };
        let include_when = (!resource.include_when.is_empty())
            .then(|| Expression::compile(&format!("{at}/include_when"), &resource.include_when, scope, &mut out))
            .flatten();
        let name = Template::compile_text(&format!("{at}/name"), &resource.name, scope, &mut out);
        if resource.name.is_empty() {
            out.push(Violation::new(format!("{at}/name"), "is required"));
        }
        if resource.labels.len() > MAX_LABELS {
            out.push(Violation::new(
                format!("{at}/labels"),
                format!("at most {MAX_LABELS} labels"),
            ));
        }
        let labels: Vec<(String, Template)> = resource
            .labels
            .iter()
            .map(|(k, v)| {
                let here = format!("{at}/labels/{}", pointer_token(k));
                (k.clone(), Template::compile_text(&here, v, scope, &mut out))
            })
            .collect();
        let provider_config = (!resource.provider_config.is_empty()).then(|| {
            Template::compile_text(
                &format!("{at}/provider_config"),
                &resource.provider_config,
                scope,
                &mut out,
            )
        });
        // The spec may also read other templates' status, as value flows.
        let mut spec_scope: Vec<&str> = scope.to_vec();
        spec_scope.extend(id_names.iter().copied().filter(|id| *id != resource.id));
        if !resource.spec.is_object() && !resource.spec.is_null() {
            out.push(Violation::new(format!("{at}/spec"), "must be a map"));
        }
        let spec_value = if resource.spec.is_null() {
            Value::Object(serde_json::Map::new())
        } else {
            resource.spec.clone()
        };
        let spec = Template::compile(&format!("{at}/spec"), &spec_value, &spec_scope, &mut out);
        let mut flows = Vec::new();
        let mut found = Vec::new();
        spec.expressions(&format!("{at}/spec"), &mut found);
        for (pointer, expression, whole) in &found {
            let reads_other = expression
                .paths()
                .iter()
                .any(|p| id_names.contains(&p[0].as_str()) && !scope.contains(&p[0].as_str()));
            if !reads_other {
                continue;
            }
            let path = expression.as_path().filter(|_| *whole);
            let Some(path) = path.filter(|p| p.len() > 2 && p[1] == "status") else {
                out.push(Violation::new(
                    pointer.clone(),
                    "may read another resource only as one whole field, ${id.status.field}: that is a value flow \
                     (the field is copied from that child's status once it has it)",
                ));
                continue;
            };
            let relative = &pointer[at.len() + "/spec".len()..];
            if relative_in_list(&spec_value, relative) {
                out.push(Violation::new(
                    pointer.clone(),
                    "a value flow must fill a map field, not a list item",
                ));
                continue;
            }
            let Some((source, source_collection)) = ids.get(path[0].as_str()).copied() else {
                continue;
            };
            if source_collection && !collection {
                out.push(Violation::new(
                    pointer.clone(),
                    format!("reads the collection {:?} from a single resource; only a collection over the same for_each can", path[0]),
                ));
                continue;
            }
            if source_collection && composition.resources[source].for_each.trim() != resource.for_each.trim() {
                out.push(Violation::new(
                    pointer.clone(),
                    format!(
                        "reads the collection {:?}, whose for_each differs from this one's: children pair up by position only over the same for_each",
                        path[0]
                    ),
                ));
                continue;
            }
            let source_pointer: String = path[2..].iter().map(|k| format!("/{}", pointer_token(k))).collect();
            status_reads.push(StatusRead {
                at: pointer.clone(),
                kind: composition.resources[source].kind.clone(),
                kind_version: composition.resources[source].kind_version,
                path: path[2..].to_vec(),
            });
            flows.push((relative.to_owned(), path[0].clone(), source_pointer));
        }
        let mut reads: Vec<(String, &Expression)> = found.iter().map(|(p, e, _)| (p.clone(), *e)).collect();
        for (field, e) in [("for_each", &for_each), ("include_when", &include_when)] {
            if let Some(e) = e {
                reads.push((format!("{at}/{field}"), e));
            }
        }
        let mut more = Vec::new();
        name.expressions(&format!("{at}/name"), &mut more);
        if let Some(t) = &provider_config {
            t.expressions(&format!("{at}/provider_config"), &mut more);
        }
        for (key, template) in &labels {
            template.expressions(&format!("{at}/labels/{}", pointer_token(key)), &mut more);
        }
        reads.extend(more.iter().map(|(p, e, _)| (p.clone(), *e)));
        check_spec_reads(&reads, spec_schema, &mut out);
        templates.push(Compiled {
            id: resource.id.clone(),
            kind: resource.kind.clone(),
            kind_version: resource.kind_version,
            name,
            labels,
            spec,
            for_each,
            include_when,
            provider_config,
            flows,
        });
    }
    if let Some(cycle) = cycle(&templates) {
        out.push(Violation::new(
            format!("{AT}/resources"),
            format!("the value flows form a cycle: {}", cycle.join(" -> ")),
        ));
    }
    let rollup = composition
        .rollup
        .as_ref()
        .map(|rollup| compile_rollup(rollup, &id_names, spec_schema, &mut out));
    if out.is_empty() {
        Ok(CompiledComposition {
            templates,
            rollup,
            kinds,
            status_reads,
        })
    } else {
        Err(out)
    }
}

fn compile_rollup(
    rollup: &CompositionRollup,
    ids: &[&str],
    spec_schema: Option<&Value>,
    out: &mut Vec<Violation>,
) -> CompiledRollup {
    let at = format!("{AT}/rollup");
    let mut scope = vec!["spec", "metadata"];
    scope.extend(ids.iter().copied());
    let status = match &rollup.status {
        Value::Null => None,
        Value::Object(_) => Some(Template::compile(&format!("{at}/status"), &rollup.status, &scope, out)),
        _ => {
            out.push(Violation::new(format!("{at}/status"), "must be a map"));
            None
        }
    };
    let ready = (!rollup.ready.is_empty())
        .then(|| Expression::compile(&format!("{at}/ready"), &rollup.ready, &scope, out))
        .flatten();
    let message = (!rollup.message.is_empty())
        .then(|| Template::compile_text(&format!("{at}/message"), &rollup.message, &scope, out));
    let mut found = Vec::new();
    if let Some(t) = &status {
        t.expressions(&format!("{at}/status"), &mut found);
    }
    if let Some(t) = &message {
        t.expressions(&format!("{at}/message"), &mut found);
    }
    let mut reads: Vec<(String, &Expression)> = found.iter().map(|(p, e, _)| (p.clone(), *e)).collect();
    if let Some(e) = &ready {
        reads.push((format!("{at}/ready"), e));
    }
    check_spec_reads(&reads, spec_schema, out);
    CompiledRollup { status, ready, message }
}

fn check_id(id: &str) -> Result<(), String> {
    let mut chars = id.chars();
    let valid = id.len() <= 63
        && chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err("must be 1-63 letters, digits or '_', starting with a lower-case letter".into());
    }
    if RESERVED.contains(&id) {
        return Err(format!("{id:?} is reserved"));
    }
    Ok(())
}

/// Whether `relative` (a pointer into the spec) passes through a list.
fn relative_in_list(spec: &Value, relative: &str) -> bool {
    let mut here = spec;
    for token in relative.split('/').skip(1) {
        match here {
            Value::Array(_) => return true,
            Value::Object(object) => {
                let key = token.replace("~1", "/").replace("~0", "~");
                match object.get(&key) {
                    Some(next) => here = next,
                    None => return false,
                }
            }
            _ => return false,
        }
    }
    false
}

/// Refuses `spec.x.y` reads of fields the parent's schema does not have.
fn check_spec_reads(reads: &[(String, &Expression)], schema: Option<&Value>, out: &mut Vec<Violation>) {
    let Some(schema) = schema else { return };
    for (at, expression) in reads {
        for path in expression.paths() {
            if path[0] != "spec" || path.len() < 2 {
                continue;
            }
            if let Err(missing) = schema_has(schema, schema, &path[1..]) {
                out.push(Violation::new(
                    at.clone(),
                    format!(
                        "reads spec.{}, which the spec schema does not declare",
                        path[1..=missing].join(".")
                    ),
                ));
            }
        }
    }
}

/// Whether `schema` declares the field `path`; on failure, the index of the
/// first key it does not. A schema that allows any field (no `properties`,
/// or additional properties allowed by a schema) accepts the rest.
pub fn schema_has(root: &Value, schema: &Value, path: &[String]) -> Result<(), usize> {
    let mut here = resolve(root, schema);
    for (i, key) in path.iter().enumerate() {
        let Some(properties) = here.get("properties").and_then(Value::as_object) else {
            return Ok(());
        };
        match properties.get(key) {
            Some(next) => here = resolve(root, next),
            None => {
                let open = here
                    .get("additionalProperties")
                    .is_some_and(|a| a.is_object() && a.as_object().is_some_and(|o| !o.is_empty()));
                let patterned = here.get("patternProperties").is_some();
                return if open || patterned { Ok(()) } else { Err(i) };
            }
        }
    }
    Ok(())
}

/// Follows a local `$ref` (one level at a time, at most 8).
fn resolve<'a>(root: &'a Value, mut schema: &'a Value) -> &'a Value {
    for _ in 0..8 {
        let Some(reference) = schema.get("$ref").and_then(Value::as_str) else {
            break;
        };
        match reference.strip_prefix('#').and_then(|p| root.pointer(p)) {
            Some(target) => schema = target,
            None => break,
        }
    }
    schema
}

/// A cycle among the templates' value flows, as ids, if any.
fn cycle(templates: &[Compiled]) -> Option<Vec<String>> {
    let index: HashMap<&str, usize> = templates.iter().enumerate().map(|(i, t)| (t.id.as_str(), i)).collect();
    let edges: Vec<BTreeSet<usize>> = templates
        .iter()
        .map(|t| {
            t.flows
                .iter()
                .filter_map(|(_, id, _)| index.get(id.as_str()).copied())
                .collect()
        })
        .collect();
    // 0 = unvisited, 1 = on the stack, 2 = done.
    let mut state = vec![0u8; templates.len()];
    let mut stack = Vec::new();
    fn visit(n: usize, edges: &[BTreeSet<usize>], state: &mut [u8], stack: &mut Vec<usize>) -> Option<Vec<usize>> {
        state[n] = 1;
        stack.push(n);
        for &m in &edges[n] {
            if state[m] == 1 {
                let from = stack.iter().position(|&s| s == m).unwrap_or(0);
                let mut found = stack[from..].to_vec();
                found.push(m);
                return Some(found);
            }
            if state[m] == 0
                && let Some(found) = visit(m, edges, state, stack)
            {
                return Some(found);
            }
        }
        stack.pop();
        state[n] = 2;
        None
    }
    for n in 0..templates.len() {
        if state[n] == 0
            && let Some(found) = visit(n, &edges, &mut state, &mut stack)
        {
            return Some(found.into_iter().map(|i| templates[i].id.clone()).collect());
        }
    }
    None
}

/// The variables every expression of one parent sees.
fn parent_context<'a>(name: &str, labels: &BTreeMap<String, String>, spec: &Value) -> Context<'a, 'a> {
    let mut context = expr::context();
    context.add_variable_from_value("spec", expr::to_cel(spec));
    let metadata = serde_json::json!({"name": name, "labels": labels});
    context.add_variable_from_value("metadata", expr::to_cel(&metadata));
    context
}

impl CompiledComposition {
    /// The children and edges for the parent `name` with `labels` and
    /// `spec`. An error is a message for people: the expression's pointer
    /// and what failed.
    pub fn compose(&self, name: &str, labels: &BTreeMap<String, String>, spec: &Value) -> Result<Composed, String> {
        let root = parent_context(name, labels, spec);
        let budget = Budget::over([spec]);
        let mut out = Composed::default();
        // (template, position) -> index of the child in `out.children`.
        let mut made: HashMap<(usize, Option<usize>), usize> = HashMap::new();
        let mut pending_flows = Vec::new();
        for (t, template) in self.templates.iter().enumerate() {
            let at = format!("{AT}/resources/{t}");
            // One entry per child: its position and item in a collection.
            let items: Vec<Option<(usize, Value)>> = match &template.for_each {
                None => vec![None],
                Some(for_each) => {
                    let items = for_each
                        .evaluate(&root, &budget)
                        .map_err(|m| format!("{at}/for_each: {m}"))?;
                    match items {
                        Value::Array(list) => list.into_iter().enumerate().map(Some).collect(),
                        Value::Object(map) => map
                            .into_iter()
                            .enumerate()
                            .map(|(i, (key, value))| Some((i, serde_json::json!({"key": key, "value": value}))))
                            .collect(),
                        other => {
                            return Err(format!(
                                "{at}/for_each: must yield a list or a map, not {}",
                                expr::kind_of(&other)
                            ));
                        }
                    }
                }
            };
            for item in items {
                let position = item.as_ref().map(|(i, _)| *i);
                let mut scope = root.new_inner_scope();
                if let Some((index, each)) = &item {
                    scope.add_variable_from_value("each", expr::to_cel(each));
                    scope.add_variable_from_value("index", i64::try_from(*index).unwrap_or(i64::MAX));
                }
                if let Some(include) = &template.include_when
                    && !include
                        .evaluate_bool(&scope, &budget)
                        .map_err(|m| format!("{at}/include_when: {m}"))?
                {
                    continue;
                }
                if out.children.len() >= MAX_CHILDREN {
                    return Err(format!("{AT}: would compose more than {MAX_CHILDREN} children"));
                }
                let child_name = match template
                    .name
                    .render(&format!("{at}/name"), &scope, &budget, &|_| false)?
                {
                    Value::String(s) => s,
                    other => return Err(format!("{at}/name: must yield a string, not {}", expr::kind_of(&other))),
                };
                let mut child_labels = BTreeMap::new();
                for (key, value) in &template.labels {
                    let here = format!("{at}/labels/{}", pointer_token(key));
                    match value.render(&here, &scope, &budget, &|_| false)? {
                        Value::String(s) => {
                            child_labels.insert(key.clone(), s);
                        }
                        other => return Err(format!("{here}: must yield a string, not {}", expr::kind_of(&other))),
                    }
                }
                let spec_at = format!("{at}/spec");
                let flowed: BTreeSet<String> = template
                    .flows
                    .iter()
                    .map(|(pointer, _, _)| format!("{spec_at}{pointer}"))
                    .collect();
                let child_spec = template
                    .spec
                    .render(&spec_at, &scope, &budget, &|p| flowed.contains(p))?;
                let provider_config = match &template.provider_config {
                    None => None,
                    Some(t) => match t.render(&format!("{at}/provider_config"), &scope, &budget, &|_| false)? {
                        Value::String(s) if s.is_empty() => None,
                        Value::String(s) => Some(s),
                        Value::Null => None,
                        other => {
                            return Err(format!(
                                "{at}/provider_config: must yield a string, not {}",
                                expr::kind_of(&other)
                            ));
                        }
                    },
                };
                made.insert((t, position), out.children.len());
                for (pointer, source, source_pointer) in &template.flows {
                    pending_flows.push((out.children.len(), t, position, pointer, source, source_pointer));
                }
                out.children.push(ChildSpec {
                    kind: template.kind.clone(),
                    kind_version: template.kind_version,
                    name: child_name,
                    labels: child_labels,
                    spec: child_spec,
                    provider_config,
                });
                out.templates.push((template.id.clone(), template.for_each.is_some()));
            }
        }
        // Edges: one per (dependent, dependency), carrying its flows.
        let index: HashMap<&str, usize> = self
            .templates
            .iter()
            .enumerate()
            .map(|(i, t)| (t.id.as_str(), i))
            .collect();
        let mut edges: BTreeMap<(usize, usize), Vec<ValueFlow>> = BTreeMap::new();
        for (child, t, position, pointer, source, source_pointer) in pending_flows {
            let Some(&s) = index.get(source.as_str()) else { continue };
            let key = if self.templates[s].for_each.is_some() {
                (s, position)
            } else {
                (s, None)
            };
            let Some(&dependency) = made.get(&key) else {
                let which = position.map_or_else(String::new, |p| format!("[{p}]"));
                return Err(format!(
                    "{AT}/resources/{t}/spec{pointer}: reads {source}{which}, which is not composed (its include_when is false)"
                ));
            };
            edges.entry((child, dependency)).or_default().push(ValueFlow {
                dependent: pointer.clone(),
                source: source_pointer.clone(),
            });
        }
        out.edges = edges
            .into_iter()
            .map(|((dependent, dependency), flows)| Edge {
                dependent: reference(&out.children[dependent]),
                dependency: reference(&out.children[dependency]),
                flows,
            })
            .collect();
        Ok(out)
    }

    /// Whether the composition declares a rollup.
    pub fn rolls_up(&self) -> bool {
        self.rollup.is_some()
    }

    /// The rollup over the parent's direct children `members`.
    pub fn rollup(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
        spec: &Value,
        members: &[Member],
    ) -> Result<RolledUp, String> {
        let Some(rollup) = &self.rollup else {
            return Ok(RolledUp {
                status: None,
                healthy: None,
                message: String::new(),
            });
        };
        let composed = self.compose(name, labels, spec)?;
        let by_key: HashMap<(&str, &str), &Member> = members
            .iter()
            .map(|m| ((m.kind.as_str(), m.name.as_str()), m))
            .collect();
        let mut groups: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
        for template in &self.templates {
            groups.insert(template.id.as_str(), Vec::new());
        }
        for (child, (id, _)) in composed.children.iter().zip(&composed.templates) {
            let member = by_key.get(&(child.kind.as_str(), child.name.as_str()));
            let seen = serde_json::json!({
                "kind": child.kind,
                "name": child.name,
                "ready": member.is_some_and(|m| m.ready),
                "synced": member.is_some_and(|m| m.synced),
                "healthy": member.is_some_and(|m| m.healthy),
                "status": member.map_or(Value::Object(serde_json::Map::new()), |m| m.status.clone()),
            });
            if let Some(group) = groups.get_mut(id.as_str()) {
                group.push(seen);
            }
        }
        let mut context = parent_context(name, labels, spec);
        let mut seen = Vec::with_capacity(self.templates.len());
        for template in &self.templates {
            let group = groups.remove(template.id.as_str()).unwrap_or_default();
            let value = if template.for_each.is_some() {
                Value::Array(group)
            } else {
                group.into_iter().next().unwrap_or(Value::Null)
            };
            context.add_variable_from_value(template.id.clone(), expr::to_cel(&value));
            seen.push(value);
        }
        let budget = Budget::over(std::iter::once(spec).chain(&seen)).with_collection(members.len());
        let at = format!("{AT}/rollup");
        let status = match &rollup.status {
            None => None,
            Some(t) => Some(t.render(&format!("{at}/status"), &context, &budget, &|_| false)?),
        };
        let healthy = match &rollup.ready {
            None => None,
            Some(e) => Some(
                e.evaluate_bool(&context, &budget)
                    .map_err(|m| format!("{at}/ready: {m}"))?,
            ),
        };
        let message = match (&rollup.message, healthy) {
            (Some(t), Some(false)) => match t.render(&format!("{at}/message"), &context, &budget, &|_| false)? {
                Value::String(s) => s,
                other => other.to_string(),
            },
            _ => String::new(),
        };
        Ok(RolledUp {
            status,
            healthy,
            message,
        })
    }
}

fn reference(child: &ChildSpec) -> ResourceRef {
    ResourceRef {
        kind: child.kind.clone(),
        name: child.name.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn composition(value: Value) -> Composition {
        serde_json::from_value(value).unwrap()
    }

    fn network() -> Composition {
        composition(json!({
            "resources": [
                {"id": "hub", "kind": "account", "kind_version": 1, "name": "${metadata.name}-hub",
                 "spec": {"region": "${spec.region}"}},
                {"id": "accounts", "kind": "account", "kind_version": 1, "name": "${metadata.name}-${each}",
                 "for_each": "spec.teams", "labels": {"team": "${each}"},
                 "spec": {"team": "${each}", "region": "${spec.region}"}},
                {"id": "vpcs", "kind": "vpc", "kind_version": 1, "name": "${metadata.name}-${each}",
                 "for_each": "spec.teams", "include_when": "!(each in spec.skip)",
                 "spec": {"cidr": "10.${index + 1}.0.0/16", "accountId": "${accounts.status.accountId}",
                          "hub": {"id": "${hub.status.accountId}"}}}
            ],
            "rollup": {
                "status": {"ready": "${vpcs.filter(v, v.ready).size()}", "hub": "${hub.status.accountId}"},
                "ready": "vpcs.all(v, v.ready)",
                "message": "${vpcs.filter(v, !v.ready).map(v, v.name).join(', ')} not ready"
            }
        }))
    }

    #[test]
    fn a_collection_with_flows_composes_children_and_edges() {
        let compiled = compile(&network(), None).unwrap();
        let spec = json!({"region": "eu-1", "teams": ["a", "b", "c"], "skip": ["b"]});
        let out = compiled.compose("n", &BTreeMap::new(), &spec).unwrap();
        let names: Vec<String> = out.children.iter().map(|c| format!("{}/{}", c.kind, c.name)).collect();
        assert_eq!(
            names,
            [
                "account/n-hub",
                "account/n-a",
                "account/n-b",
                "account/n-c",
                "vpc/n-a",
                "vpc/n-c"
            ]
        );
        assert_eq!(out.children[4].spec, json!({"cidr": "10.1.0.0/16", "hub": {}}));
        assert_eq!(
            out.children[5].spec["cidr"], "10.3.0.0/16",
            "index counts skipped items"
        );
        assert_eq!(out.children[1].labels["team"], "a");
        let edges: Vec<String> = out
            .edges
            .iter()
            .map(|e| {
                let flows: Vec<String> = e
                    .flows
                    .iter()
                    .map(|f| format!("{}<-{}", f.dependent, f.source))
                    .collect();
                format!("{}->{} {}", e.dependent.name, e.dependency.name, flows.join(","))
            })
            .collect();
        assert_eq!(
            edges,
            [
                "n-a->n-hub /hub/id<-/accountId",
                "n-a->n-a /accountId<-/accountId",
                "n-c->n-hub /hub/id<-/accountId",
                "n-c->n-c /accountId<-/accountId",
            ]
        );
    }

    #[test]
    fn the_rollup_sees_children_by_template() {
        let compiled = compile(&network(), None).unwrap();
        let spec = json!({"region": "eu-1", "teams": ["a", "c"], "skip": []});
        let member = |kind: &str, name: &str, ready: bool| Member {
            kind: kind.into(),
            name: name.into(),
            ready,
            synced: true,
            healthy: ready,
            status: json!({"accountId": format!("id-{name}")}),
        };
        let members = [
            member("account", "n-hub", true),
            member("vpc", "n-a", true),
            member("vpc", "n-c", false),
        ];
        let rolled = compiled.rollup("n", &BTreeMap::new(), &spec, &members).unwrap();
        assert_eq!(rolled.status, Some(json!({"ready": 1, "hub": "id-n-hub"})));
        assert_eq!(rolled.healthy, Some(false));
        assert_eq!(rolled.message, "n-c not ready");
    }

    #[test]
    fn bad_compositions_are_refused_with_paths() {
        let bad = composition(json!({
            "resources": [
                {"id": "a", "kind": "x", "kind_version": 1, "name": "${metadata.name}-a",
                 "spec": {"v": "${b.status.v}"}},
                {"id": "b", "kind": "x", "kind_version": 1, "name": "${metadata.name}-b",
                 "spec": {"v": "${a.status.v}", "w": "${a.status.v + 'x'}", "n": "${spec.nope}"}},
                {"id": "c", "kind": "x", "kind_version": 1, "name": "${each}", "for_each": "spec.l",
                 "spec": {"v": "${d.status.v}"}},
                {"id": "d", "kind": "x", "kind_version": 1, "name": "${each}", "for_each": "spec.m"},
                {"id": "spec", "kind": "x", "kind_version": 1, "name": "x"},
                {"id": "e", "kind": "x", "kind_version": 1, "name": "${unknown}"}
            ]
        }));
        let schema = json!({"type": "object", "properties": {"l": {}, "m": {}}});
        let violations = compile(&bad, Some(&schema)).unwrap_err();
        let fields: Vec<&str> = violations.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "/manifest/composition/resources/4/id",
                "/manifest/composition/resources/1/spec/w",
                "/manifest/composition/resources/1/spec/n",
                "/manifest/composition/resources/2/spec/v",
                "/manifest/composition/resources/5/name",
                "/manifest/composition/resources",
            ],
            "{violations:?}"
        );
        assert!(
            violations[5].description.contains("cycle: a -> b -> a"),
            "{violations:?}"
        );
    }

    #[test]
    fn runtime_errors_and_the_children_cap_are_messages() {
        let one = composition(json!({
            "resources": [{"id": "a", "kind": "x", "kind_version": 1, "name": "${metadata.name}-${each}",
                           "for_each": "spec.l", "spec": {"q": "${10 / spec.d}"}}]
        }));
        let compiled = compile(&one, None).unwrap();
        let error = compiled
            .compose("n", &BTreeMap::new(), &json!({"l": [1], "d": 0}))
            .unwrap_err();
        assert!(
            error.starts_with("/manifest/composition/resources/0/spec/q:"),
            "{error}"
        );
        let error = compiled.compose("n", &BTreeMap::new(), &json!({"d": 1})).unwrap_err();
        assert!(error.contains("for_each"), "{error}");
        let many: Vec<i32> = (0..=MAX_CHILDREN as i32).collect();
        let error = compiled
            .compose("n", &BTreeMap::new(), &json!({"l": many, "d": 1}))
            .unwrap_err();
        assert!(error.contains("more than"), "{error}");
    }
}
