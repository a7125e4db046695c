//! `converge render`: what a composition declared as data (ADR 49) would
//! create, evaluated here without a server, for CI pipelines and tests of
//! compositions. The kind manifests and resources come from the same
//! documents `apply` reads; the children print as Resource envelopes, each
//! with its owner and the children it waits for (`dependsOn`, with the
//! value flows). Child specs are checked against their kinds' schemas when
//! those manifests are among the files. `--status` gives a child a status:
//! its value flows then fill the dependents' specs, and the rollup counts
//! it as ready.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use converge_sdk::proto::v1 as pb;
use converge_service::api::kind::manifest_from_proto;
use converge_service::domain::cel_composition::Member;
use converge_service::domain::compiled::{CompiledKind, Refusal, compile_manifest};
use converge_service::domain::conversion::set_at;
use converge_service::domain::violation::Violation;
use serde_json::{Map, Value, json};

use super::apply;
use super::envelope::{API_VERSION, Object};
use super::error::CliError;
use super::output::{Format, print_documents};

/// Examples of `converge render`.
pub const EXAMPLES: &str = "Examples:
  # The children a bom-cel would create (the leaves' manifests check their specs)
  converge render -f examples/bom -f bom.yaml
  # ... once the account of team pay has its id: the flow fills the VPC's spec
  converge render -f examples/bom -f bom.yaml --status 'account/demo-pay={\"accountId\": \"acct-1\"}'
  converge render -f kind.yaml -f resource.yaml -o json";

/// Arguments of `converge render`.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// Files with the kind manifests (the composed kind's, and optionally its
    /// children's kinds, to check their specs) and the resources to render:
    /// a YAML or JSON file, a directory or `-`. Repeatable.
    #[arg(short = 'f', long = "filename", required = true, value_name = "FILE|DIR|-")]
    pub files: Vec<PathBuf>,

    /// A child's status, as KIND/NAME=JSON: it fills the value flows out of
    /// that child, and the rollup counts the child as ready. Repeatable.
    #[arg(long = "status", value_name = "KIND/NAME=JSON")]
    pub status: Vec<String>,

    /// How to print the result.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = RenderFormat::Yaml)]
    pub output: RenderFormat,
}

/// `-o` of `converge render`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RenderFormat {
    /// YAML documents (a List).
    Yaml,
    /// JSON (a List).
    Json,
}

/// Renders every resource among the files whose kind has a composition.
pub fn run(args: &RenderArgs) -> Result<(), CliError> {
    let documents = apply::read_files(&args.files)?;
    let statuses = statuses(&args.status)?;
    let mut kinds: HashMap<(String, i32), CompiledKind> = HashMap::new();
    let mut resources = Vec::new();
    for document in documents {
        match document.object {
            Object::KindManifest(manifest) => {
                let domain = manifest_from_proto(Some(manifest))
                    .map_err(|e| CliError::Invalid(format!("{}: {e}", document.source)))?;
                let compiled = compile_manifest(domain)
                    .map_err(|v| CliError::Invalid(format!("{}: {}", document.source, listed(&v))))?;
                kinds.insert(
                    (compiled.manifest.kind.clone(), compiled.manifest.kind_version),
                    compiled,
                );
            }
            Object::Resource(resource) => resources.push((document.source, resource)),
            other => {
                return Err(CliError::Invalid(format!(
                    "{}: render reads kind manifests and resources, not a {}",
                    document.source,
                    other.object_type().name()
                )));
            }
        }
    }
    if resources.is_empty() {
        return Err(CliError::Invalid(
            "no Resource documents to render among the files".to_owned(),
        ));
    }
    let mut items = Vec::new();
    for (source, resource) in resources {
        items.extend(render(&source, &resource, &kinds, &statuses)?);
    }
    let format = match args.output {
        RenderFormat::Yaml => Format::Yaml,
        RenderFormat::Json => Format::Json,
    };
    print_documents(format, items, false)
}

/// The `--status` values by `kind/name`.
fn statuses(given: &[String]) -> Result<HashMap<String, Value>, CliError> {
    let mut out = HashMap::new();
    for entry in given {
        let Some((key, text)) = entry.split_once('=') else {
            return Err(CliError::Invalid(format!(
                "--status {entry:?}: expected KIND/NAME=JSON"
            )));
        };
        if !key.contains('/') {
            return Err(CliError::Invalid(format!("--status {key:?}: expected KIND/NAME")));
        }
        let value: Value =
            serde_json::from_str(text).map_err(|e| CliError::Invalid(format!("--status {key}: not JSON: {e}")))?;
        if !value.is_object() {
            return Err(CliError::Invalid(format!("--status {key}: a status is a JSON object")));
        }
        out.insert(key.to_owned(), value);
    }
    Ok(out)
}

/// The envelopes of one resource: itself (with the rollup's status when
/// the composition has a rollup), then its children.
fn render(
    source: &str,
    resource: &pb::ApplyResourceRequest,
    kinds: &HashMap<(String, i32), CompiledKind>,
    statuses: &HashMap<String, Value>,
) -> Result<Vec<Value>, CliError> {
    let invalid =
        |message: String| CliError::Invalid(format!("{source}: {}/{}: {message}", resource.kind, resource.name));
    let Some(kind) = kinds.get(&(resource.kind.clone(), resource.kind_version)) else {
        return Err(invalid(format!(
            "no KindManifest of {} version {} among the files",
            resource.kind, resource.kind_version
        )));
    };
    let Some(composition) = &kind.composition else {
        return Err(invalid("its kind declares no composition to render".to_owned()));
    };
    let spec = resource
        .spec
        .clone()
        .map_or_else(|| json!({}), converge_proto::json::struct_to_json);
    admit(kind, "/spec", &spec).map_err(invalid)?;
    let labels: BTreeMap<String, String> = resource.labels.clone().into_iter().collect();
    let composed = composition.compose(&resource.name, &labels, &spec).map_err(invalid)?;

    let mut children = composed.children.clone();
    let index: HashMap<(String, String), usize> = children
        .iter()
        .enumerate()
        .map(|(i, c)| ((c.kind.clone(), c.name.clone()), i))
        .collect();
    let mut depends: Vec<Vec<Value>> = vec![Vec::new(); children.len()];
    for edge in &composed.edges {
        let Some(&dependent) = index.get(&(edge.dependent.kind.clone(), edge.dependent.name.clone())) else {
            continue;
        };
        let upstream = statuses.get(&format!("{}/{}", edge.dependency.kind, edge.dependency.name));
        for flow in &edge.flows {
            if let Some(value) = upstream.and_then(|s| s.pointer(&flow.source)) {
                set_pointer(&mut children[dependent].spec, &flow.dependent, value.clone());
            }
        }
        let flows: Vec<Value> = edge
            .flows
            .iter()
            .map(|f| json!({"dependent": f.dependent, "source": f.source}))
            .collect();
        depends[dependent]
            .push(json!({"kind": edge.dependency.kind, "name": edge.dependency.name, "valueFlows": flows}));
    }
    let mut problems = Vec::new();
    for (i, child) in children.iter().enumerate() {
        if let Some(child_kind) = kinds.get(&(child.kind.clone(), child.kind_version))
            && let Err(message) = admit(child_kind, &format!("/children/{i}/spec"), &child.spec)
        {
            problems.push(format!("{}/{}: {message}", child.kind, child.name));
        }
    }
    if !problems.is_empty() {
        return Err(invalid(format!("the composition is refused: {}", problems.join("; "))));
    }

    let mut items = Vec::new();
    if composition.rolls_up() {
        let members: Vec<Member> = children
            .iter()
            .map(|c| {
                let status = statuses.get(&format!("{}/{}", c.kind, c.name));
                Member {
                    kind: c.kind.clone(),
                    name: c.name.clone(),
                    ready: status.is_some(),
                    synced: status.is_some(),
                    healthy: status.is_some(),
                    status: status.cloned().unwrap_or_else(|| json!({})),
                }
            })
            .collect();
        let rolled = composition
            .rollup(&resource.name, &labels, &spec, &members)
            .map_err(invalid)?;
        let mut parent = envelope(&resource.kind, resource.kind_version, &resource.name, &labels, &spec);
        if let Some(status) = rolled.status {
            parent.insert("status".into(), status);
        }
        if let Some(healthy) = rolled.healthy {
            parent.insert(
                "phase".into(),
                json!(if healthy { "PHASE_READY" } else { "PHASE_DEGRADED" }),
            );
        }
        items.push(Value::Object(parent));
    }
    for (child, depends) in children.iter().zip(depends) {
        let mut item = envelope(&child.kind, child.kind_version, &child.name, &child.labels, &child.spec);
        if let Some(config) = &child.provider_config {
            item.insert("providerConfig".into(), json!(config));
        }
        item.insert("owner".into(), json!({"kind": resource.kind, "name": resource.name}));
        if !depends.is_empty() {
            item.insert("dependsOn".into(), Value::Array(depends));
        }
        items.push(Value::Object(item));
    }
    Ok(items)
}

fn envelope(
    kind: &str,
    version: i32,
    name: &str,
    labels: &BTreeMap<String, String>,
    spec: &Value,
) -> Map<String, Value> {
    let mut item = Map::new();
    item.insert("apiVersion".into(), json!(API_VERSION));
    item.insert("type".into(), json!("Resource"));
    item.insert("kind".into(), json!(kind));
    item.insert("kindVersion".into(), json!(version));
    item.insert("name".into(), json!(name));
    if !labels.is_empty() {
        item.insert("labels".into(), json!(labels));
    }
    item.insert("spec".into(), spec.clone());
    item
}

/// The kind's admission of `spec`, as one message.
fn admit(kind: &CompiledKind, at: &str, spec: &Value) -> Result<(), String> {
    match kind.admit(at, spec) {
        Ok(()) => Ok(()),
        Err(Refusal::ReactorKind) => Err(format!("kind {} is a reactor kind", kind.manifest.kind)),
        Err(Refusal::Schema(violations)) => Err(listed(&violations)),
    }
}

fn listed(violations: &[Violation]) -> String {
    converge_service::contract::status::summarize(violations)
}

/// Writes `value` at the JSON pointer `pointer` of `document` (a value
/// flow's target), as a conversion's field edit writes its path.
fn set_pointer(document: &mut Value, pointer: &str, value: Value) {
    let keys: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    // A target inside a non-object is left alone, as the flow would be.
    let _ = set_at(document, &keys, value);
}
