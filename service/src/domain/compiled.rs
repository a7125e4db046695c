//! A kind manifest compiled for use: checked, hashed, its schemas compiled
//! and its stage plan derived, once per manifest version (the catalog
//! caches the result).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::cel_composition::{self, CompiledComposition};
use super::composition::StagePlan;
use super::conversion::{self, Conversions};
use super::manifest::{
    Emit, KindManifest, REACTIONS, Trigger, manifest_version, non_empty, validate_description, validate_policy,
    validate_reactions,
};
use super::schema::{self, CompiledSchema};
use super::violation::Violation;

/// A manifest that passed every check, with its content hash and compiled spec schema.
#[derive(Debug, Clone)]
pub struct CompiledKind {
    /// The manifest, unchanged.
    pub manifest: KindManifest,
    /// Content hash of the manifest (see [`manifest_version`]); always > 0.
    pub manifest_version: i64,
    /// The compiled spec schema; `None` when the kind is untyped.
    pub spec: Option<CompiledSchema>,
    /// The compiled provider-config schema; `None` when configs are untyped.
    pub config: Option<CompiledSchema>,
    /// The compiled input schemas of the verbs that declare one, by verb.
    pub inputs: HashMap<String, CompiledSchema>,
    /// The stages its reactions make, derived once here for the broker,
    /// the API's admission and the reactor bindings.
    pub plan: Arc<StagePlan>,
    /// Its conversions from other versions, compiled (ADR 48).
    pub conversions: Conversions,
    /// Its composition declared as data, compiled (ADR 49); the plan holds
    /// it too.
    pub composition: Option<Arc<CompiledComposition>>,
}

/// Runs every check on `m` and compiles its spec schema. Every violation found is returned:
/// the description, the three schemas (compiled at `/manifest/spec_schema`, `/manifest/status_schema`
/// and `/manifest/config_schema`; status and config only for validity), reactions and finalizer, and
/// policy (`/manifest/policy`). The kind name and version are identifiers and are checked by the
/// caller, not here.
pub fn compile_manifest(m: KindManifest) -> Result<CompiledKind, Vec<Violation>> {
    let mut out = Vec::new();
    if let Err(v) = validate_description(&m.description) {
        out.push(v);
    }
    let mut compile_axis = |field: &str, schema: Option<&Value>| -> Option<CompiledSchema> {
        match schema.map(|s| schema::compile(field, s)) {
            Some(Ok(compiled)) => Some(compiled),
            Some(Err(violations)) => {
                out.extend(violations);
                None
            }
            None => None,
        }
    };
    let spec = compile_axis("/manifest/spec_schema", m.spec_schema.as_ref());
    compile_axis("/manifest/status_schema", m.status_schema.as_ref());
    let config = compile_axis("/manifest/config_schema", m.config_schema.as_ref());
    let mut inputs = HashMap::new();
    for (i, reaction) in m.reactions.iter().enumerate() {
        if let (Some(schema), Some(verb)) = (&reaction.input_schema, non_empty(reaction.verb.as_deref()))
            && let Some(compiled) = compile_axis(&format!("{REACTIONS}/{i}/input_schema"), Some(schema))
        {
            inputs.insert(verb.to_owned(), compiled);
        }
    }
    if let Err(violations) = validate_reactions(&m.reactions, m.finalizer_name.as_deref()) {
        out.extend(violations);
    }
    if let Err(violations) = validate_policy(&m.policy, "/manifest/policy") {
        out.extend(violations);
    }
    let conversions = conversion::compile(m.kind_version, &m.conversions).unwrap_or_else(|violations| {
        out.extend(violations);
        Conversions::default()
    });
    let composition = m.composition.as_ref().and_then(|c| {
        check_composed_reactions(&m, c.rollup.is_some(), &mut out);
        match cel_composition::compile(c, m.spec_schema.as_ref()) {
            Ok(compiled) => Some(Arc::new(compiled)),
            Err(violations) => {
                out.extend(violations);
                None
            }
        }
    });
    if !out.is_empty() {
        return Err(out);
    }
    let manifest_version = manifest_version(&m);
    let mut plan = StagePlan::of(&m.reactions, m.finalizer_name.as_deref());
    if let Some(composition) = &composition {
        plan = plan.with_composition(composition.rolls_up());
    }
    let plan = Arc::new(plan);
    Ok(CompiledKind {
        manifest: m,
        manifest_version,
        spec,
        config,
        inputs,
        plan,
        conversions,
        composition,
    })
}

/// A composition replaces the composer reaction, and its rollup the rollup
/// reaction: a kind declares one or the other.
fn check_composed_reactions(m: &KindManifest, rolls_up: bool, out: &mut Vec<Violation>) {
    for (i, reaction) in m.reactions.iter().enumerate() {
        let composes = reaction.trigger == Trigger::SpecChange && reaction.emits.contains(&Emit::Children);
        let rollup = reaction.trigger == Trigger::ChildrenSettled;
        if composes {
            out.push(Violation::new(
                format!("{REACTIONS}/{i}"),
                "a kind with a composition declares no reaction emitting children: the composition composes",
            ));
        } else if rollup && rolls_up {
            out.push(Violation::new(
                format!("{REACTIONS}/{i}"),
                "a kind whose composition has a rollup declares no childrenSettled reaction",
            ));
        }
    }
}

/// Why a spec is not admitted for a kind.
#[derive(Debug)]
pub enum Refusal {
    /// The kind is a reactor kind: it owns no resources.
    ReactorKind,
    /// The spec violates the kind's spec schema.
    Schema(Vec<Violation>),
}

impl CompiledKind {
    /// Whether a resource of this kind may hold `spec` (at pointer `at`):
    /// the one admission rule of a resource's desired state, for an apply
    /// and for a composer's child alike. Fields that value flows fill
    /// arrive later, so a schema must not require them (documented in the
    /// worker contract).
    pub fn admit(&self, at: &str, spec: &Value) -> Result<(), Refusal> {
        if self.plan.is_reactor() {
            return Err(Refusal::ReactorKind);
        }
        match &self.spec {
            Some(schema) => schema.validate(at, spec).map_err(Refusal::Schema),
            None => Ok(()),
        }
    }
}
