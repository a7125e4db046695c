//! Kind manifests: the domain types, their legality rules and their content hash.
//!
//! The reaction rules here have a twin in the database, `kind_reactions_rules()` (in
//! `migrations/functions/kinds.sql`, behind the `kind_reactions_violation()` wrapper that a CHECK
//! constraint on `kind_manifest` evaluates): both must accept and refuse exactly the same reaction
//! sets. Change them together.
//!
//! Empty strings are treated as absent throughout (proto3 cannot tell `""` from unset): a verb or
//! finalizer of `Some("")` means the same as `None`, and so does a `finalizer_name` of `Some("")`.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::violation::Violation;

/// What makes a reaction fire. The set is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Trigger {
    /// The resource's generation moved (first apply or a spec change).
    SpecChange,
    /// Every descendant of a composite root has settled.
    ChildrenSettled,
    /// A resource carrying the reaction's finalizer is being torn down.
    DeleteRequested,
    /// An operation for the reaction's verb was invoked.
    Operation,
    /// A reactor binding matched a lifecycle transition of another kind's resource.
    Reactor,
    /// The kind's periodic resync re-pended the resource without a spec change.
    Resync,
}

impl Trigger {
    /// The wire (JSON) name of the trigger.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SpecChange => "specChange",
            Self::ChildrenSettled => "childrenSettled",
            Self::DeleteRequested => "deleteRequested",
            Self::Operation => "operation",
            Self::Reactor => "reactor",
            Self::Resync => "resync",
        }
    }
}

/// A part of a worker's outcome that the core applies for a reaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Emit {
    /// Desired composed children.
    Children,
    /// Dependency edges between children.
    Edges,
    /// Provider configs owned by the resource.
    Configs,
    /// The resource's status document.
    Status,
    /// The resource's conditions.
    Conditions,
    /// Completion of a teardown (strips the finalizer).
    Finalizer,
    /// The output document of an operation.
    OperationOutput,
    /// An external side effect with nothing written back.
    SideEffect,
}

impl Emit {
    /// The wire (JSON) name of the emitted part.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Children => "children",
            Self::Edges => "edges",
            Self::Configs => "configs",
            Self::Status => "status",
            Self::Conditions => "conditions",
            Self::Finalizer => "finalizer",
            Self::OperationOutput => "operationOutput",
            Self::SideEffect => "sideEffect",
        }
    }
}

/// One (trigger, emits) pair of a kind. Its serde JSON is what `kind_manifest.reactions` stores.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Reaction {
    /// Stable handle, unique within the manifest, that workers key their handler by.
    pub name: String,
    /// What fires the reaction.
    pub trigger: Trigger,
    /// The outcome parts the core applies.
    pub emits: Vec<Emit>,
    /// The verb handled; only for [`Trigger::Operation`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verb: Option<String>,
    /// The finalizer cleared; only for [`Trigger::DeleteRequested`] (absent = the manifest's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalizer: Option<String>,
    /// JSON Schema of an operation's input; only for [`Trigger::Operation`] (absent = any).
    #[serde(default, rename = "inputSchema", skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
}

/// Operational policy seeds of a manifest (see `KindPolicy` in `kind.proto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KindPolicy {
    /// Cluster-wide cap on concurrently running tasks; 0 = uncapped.
    pub max_inflight: i32,
    /// Per-task time budget in seconds; 0 = no deadline.
    pub task_deadline_secs: i32,
    /// Interval between periodic resyncs in seconds; 0 = no resync.
    pub resync_interval_secs: i32,
    /// Whether a resync also re-runs the composer.
    pub resync_recomposes: bool,
    /// Grace period before a dropped child is torn down, in seconds; 0 = at once.
    pub orphan_grace_secs: i32,
    /// Consecutive transient failures before a failure turns terminal; 0 = unbounded.
    pub max_transient_attempts: i32,
    /// Seconds a task may wait with no worker serving its pair before its
    /// resource is marked WorkerAvailable=False; 0 = off.
    pub unserved_condition_after_secs: i32,
    /// How transient failures back off.
    pub retry: RetryPolicy,
}

/// How a kind's transient failures back off: the delay doubles from the
/// base per consecutive failure up to the cap, then the jitter spreads it.
/// Zeros mean today's defaults (1 s, 60 s, no jitter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetryPolicy {
    /// First delay in milliseconds; 0 = [`DEFAULT_RETRY_BASE_MS`].
    pub base_ms: i32,
    /// Longest delay in milliseconds; 0 = [`DEFAULT_RETRY_CAP_MS`].
    pub cap_ms: i32,
    /// How the delay is randomised.
    pub jitter: RetryJitter,
}

/// How a retry delay d is randomised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetryJitter {
    /// Exactly d.
    #[default]
    None,
    /// Uniform in [0, d].
    Full,
    /// d/2 plus uniform in [0, d/2].
    Equal,
}

impl RetryJitter {
    /// The stored name.
    pub fn as_db(self) -> &'static str {
        match self {
            RetryJitter::None => "none",
            RetryJitter::Full => "full",
            RetryJitter::Equal => "equal",
        }
    }

    /// The jitter of a stored name (an unknown one is none).
    pub fn from_db(name: &str) -> Self {
        match name {
            "full" => RetryJitter::Full,
            "equal" => RetryJitter::Equal,
            _ => RetryJitter::None,
        }
    }
}

/// The first retry delay when a kind sets none.
pub const DEFAULT_RETRY_BASE_MS: i32 = 1_000;
/// The longest retry delay when a kind sets none.
pub const DEFAULT_RETRY_CAP_MS: i32 = 60_000;
/// Upper bound of `retry_base_ms` (one hour).
pub const MAX_RETRY_BASE_MS: i32 = 3_600_000;
/// Upper bound of `retry_cap_ms` (one day).
pub const MAX_RETRY_CAP_MS: i32 = 86_400_000;

/// The definition of one version of a kind.
#[derive(Debug, Clone, PartialEq)]
pub struct KindManifest {
    /// Kind name.
    pub kind: String,
    /// Version of this definition (>= 1).
    pub kind_version: i32,
    /// Human-readable description.
    pub description: String,
    /// JSON Schema of resource specs; `None` = untyped.
    pub spec_schema: Option<Value>,
    /// JSON Schema of status documents (advisory); `None` = untyped.
    pub status_schema: Option<Value>,
    /// JSON Schema of provider-config specs; `None` = untyped.
    pub config_schema: Option<Value>,
    /// The reactions of the kind.
    pub reactions: Vec<Reaction>,
    /// Finalizer added to resources when their deletion starts; `None`/empty = hard delete.
    pub finalizer_name: Option<String>,
    /// Policy seeds for the kind's config.
    pub policy: KindPolicy,
    /// How specs of other versions become specs of this one (ADR 48); not
    /// part of the content hash: workers never see them.
    pub conversions: Vec<super::conversion::SpecConversion>,
    /// The composition declared as data, if any (ADR 49); part of the
    /// content hash.
    pub composition: Option<super::cel_composition::Composition>,
}

/// Longest accepted description, in bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 4096;
/// Longest reaction name or verb, in characters.
pub const MAX_NAME_CHARS: usize = 63;
/// Longest finalizer name, in characters.
pub const MAX_FINALIZER_CHARS: usize = 253;
/// Upper bound of `max_inflight`.
pub const MAX_MAX_INFLIGHT: i32 = 1_000_000;
/// Upper bound of `task_deadline_secs` (7 days).
pub const MAX_TASK_DEADLINE_SECS: i32 = 604_800;
/// Lower bound of a non-zero `resync_interval_secs`.
pub const MIN_RESYNC_INTERVAL_SECS: i32 = 5;
/// Upper bound of `resync_interval_secs` (30 days).
pub const MAX_RESYNC_INTERVAL_SECS: i32 = 2_592_000;
/// Upper bound of `orphan_grace_secs` (30 days).
pub const MAX_ORPHAN_GRACE_SECS: i32 = 2_592_000;
/// Upper bound of `max_transient_attempts`.
pub const MAX_TRANSIENT_ATTEMPTS: i32 = 10_000;
/// Upper bound of `unserved_condition_after_secs` (30 days).
pub const MAX_UNSERVED_CONDITION_AFTER_SECS: i32 = 2_592_000;

pub(super) const REACTIONS: &str = "/manifest/reactions";
const FINALIZER_NAME: &str = "/manifest/finalizer_name";

/// `Some(s)` for a non-empty string, `None` for absent or empty.
pub(super) fn non_empty(value: Option<&str>) -> Option<&str> {
    value.filter(|s| !s.is_empty())
}

/// Reaction names and verbs: 1-63 ASCII letters, digits, '_', '-', ':' and '.'.
pub fn is_handle(s: &str) -> bool {
    (1..=MAX_NAME_CHARS).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b':' | b'.'))
}

/// Finalizer names: 1-253 of lower-case letters, digits, '-', '.', '/', starting and ending with a
/// letter or digit.
fn is_finalizer_name(s: &str) -> bool {
    let edge_ok = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = s.as_bytes();
    (1..=MAX_FINALIZER_CHARS).contains(&bytes.len())
        && bytes.iter().all(|&b| edge_ok(b) || matches!(b, b'-' | b'.' | b'/'))
        && bytes.first().copied().is_some_and(edge_ok)
        && bytes.last().copied().is_some_and(edge_ok)
}

const HANDLE_SYNTAX: &str = "1-63 characters of ASCII letters, digits, '_', '-', ':' and '.'";
const FINALIZER_SYNTAX: &str =
    "1-253 characters of lower-case letters, digits, '-', '.' and '/', starting and ending with a letter or digit";

/// Checks the reaction legality rules (R1-R10) and reports every violation found.
///
/// Fields are `/manifest/reactions[/<i>/<member>]` and `/manifest/finalizer_name`. A rule that
/// limits a role to one reaction (one composer, one rollup, one reactor, unique names and verbs)
/// is reported on every reaction after the first.
pub fn validate_reactions(reactions: &[Reaction], finalizer_name: Option<&str>) -> Result<(), Vec<Violation>> {
    let mut out = Vec::new();
    let finalizer_name = non_empty(finalizer_name);

    // R10 (manifest side).
    if let Some(name) = finalizer_name
        && !is_finalizer_name(name)
    {
        out.push(Violation::new(
            FINALIZER_NAME,
            format!("finalizer_name must be {FINALIZER_SYNTAX}"),
        ));
    }

    // R1: a kind without reactions is data only (its resources are synced
    // as written; see enqueue_tasks), and has no teardown to clear a
    // finalizer.
    if reactions.is_empty() && finalizer_name.is_some() {
        out.push(Violation::new(
            FINALIZER_NAME,
            "a kind without reactions (data only) cannot have a finalizer_name",
        ));
    }

    let mut names: HashMap<&str, usize> = HashMap::new();
    let mut verbs: HashMap<&str, usize> = HashMap::new();
    let mut composer: Option<usize> = None;
    let mut rollup: Option<usize> = None;
    let mut reactor: Option<usize> = None;

    for (i, reaction) in reactions.iter().enumerate() {
        let at = |member: &str| format!("{REACTIONS}/{i}/{member}");
        let has = |emit: Emit| reaction.emits.contains(&emit);
        let verb = non_empty(reaction.verb.as_deref());
        let finalizer = non_empty(reaction.finalizer.as_deref());

        // R2: syntax and uniqueness of the name.
        if !is_handle(&reaction.name) {
            out.push(Violation::new(at("name"), format!("name must be {HANDLE_SYNTAX}")));
        } else {
            match names.entry(reaction.name.as_str()) {
                Entry::Occupied(first) => out.push(Violation::new(
                    at("name"),
                    format!("name {:?} is already used by reactions/{}", reaction.name, first.get()),
                )),
                Entry::Vacant(slot) => {
                    slot.insert(i);
                }
            }
        }

        // R3: at least one emit, no duplicates.
        if reaction.emits.is_empty() {
            out.push(Violation::new(
                at("emits"),
                "a reaction must emit at least one outcome part",
            ));
        }
        for (j, emit) in reaction.emits.iter().enumerate() {
            if reaction.emits[..j].contains(emit) {
                out.push(Violation::new(
                    at(&format!("emits/{j}")),
                    format!("{} is listed twice", emit.as_str()),
                ));
            }
        }

        // R4: verb required (well-formed, unique) for operation, absent otherwise.
        if reaction.trigger == Trigger::Operation {
            match verb {
                None => out.push(Violation::new(at("verb"), "an operation reaction needs a verb")),
                Some(verb) if !is_handle(verb) => {
                    out.push(Violation::new(at("verb"), format!("verb must be {HANDLE_SYNTAX}")));
                }
                Some(verb) => match verbs.entry(verb) {
                    Entry::Occupied(first) => out.push(Violation::new(
                        at("verb"),
                        format!("verb {verb:?} is already handled by reactions/{}", first.get()),
                    )),
                    Entry::Vacant(slot) => {
                        slot.insert(i);
                    }
                },
            }
        } else if verb.is_some() {
            out.push(Violation::new(
                at("verb"),
                format!(
                    "a verb is only allowed on operation reactions, not on {}",
                    reaction.trigger.as_str()
                ),
            ));
        }

        // R11: what an operation may emit, and an input schema only there.
        if reaction.trigger == Trigger::Operation {
            for (j, emit) in reaction.emits.iter().enumerate() {
                if !matches!(
                    emit,
                    Emit::OperationOutput | Emit::Status | Emit::Conditions | Emit::SideEffect
                ) {
                    out.push(Violation::new(
                        at(&format!("emits/{j}")),
                        format!(
                            "an operation reaction emits only operationOutput, status, conditions or sideEffect, not {}",
                            emit.as_str()
                        ),
                    ));
                }
            }
        } else if reaction.input_schema.is_some() {
            out.push(Violation::new(
                at("input_schema"),
                format!(
                    "an input schema is only allowed on operation reactions, not on {}",
                    reaction.trigger.as_str()
                ),
            ));
        }

        // R5: a reaction finalizer only on deleteRequested.
        if finalizer.is_some() && reaction.trigger != Trigger::DeleteRequested {
            out.push(Violation::new(
                at("finalizer"),
                format!(
                    "a finalizer is only allowed on deleteRequested reactions, not on {}",
                    reaction.trigger.as_str()
                ),
            ));
        }
        // R10 (reaction side).
        if finalizer.is_some_and(|f| !is_finalizer_name(f)) {
            out.push(Violation::new(
                at("finalizer"),
                format!("finalizer must be {FINALIZER_SYNTAX}"),
            ));
        }

        match reaction.trigger {
            // R6: the composer.
            Trigger::SpecChange if has(Emit::Children) => {
                if !has(Emit::Status) && !has(Emit::Conditions) {
                    out.push(Violation::new(
                        at("emits"),
                        "a specChange reaction emitting children must also emit status or conditions",
                    ));
                }
                if has(Emit::SideEffect) {
                    out.push(Violation::new(
                        at("emits"),
                        "a specChange reaction emitting children must not emit sideEffect",
                    ));
                }
                match composer {
                    Some(first) => out.push(Violation::new(
                        at("emits"),
                        format!("only one specChange reaction may emit children (reactions/{first} already does)"),
                    )),
                    None => composer = Some(i),
                }
            }
            // R7: the rollup.
            Trigger::ChildrenSettled if has(Emit::Status) => match rollup {
                Some(first) => out.push(Violation::new(
                    at("emits"),
                    format!("only one childrenSettled reaction may emit status (reactions/{first} already does)"),
                )),
                None => rollup = Some(i),
            },
            // R8: the reactor (its exclusivity is checked after the loop).
            Trigger::Reactor => {
                if reaction.emits != [Emit::SideEffect] {
                    out.push(Violation::new(
                        at("emits"),
                        "a reactor reaction must emit exactly [sideEffect]",
                    ));
                }
                match reactor {
                    Some(first) => out.push(Violation::new(
                        at("trigger"),
                        format!("a kind has at most one reactor reaction (reactions/{first} is one)"),
                    )),
                    None => reactor = Some(i),
                }
            }
            // R9: teardown needs a finalizer to clear.
            Trigger::DeleteRequested if finalizer.is_none() && finalizer_name.is_none() => {
                out.push(Violation::new(
                    at("finalizer"),
                    "a deleteRequested reaction needs a finalizer (on the reaction or the manifest's finalizer_name)",
                ));
            }
            _ => {}
        }
    }

    // R8: a reactor kind declares only reactor reactions.
    if let Some(first) = reactor {
        for (i, reaction) in reactions.iter().enumerate() {
            if reaction.trigger != Trigger::Reactor {
                out.push(Violation::new(
                    format!("{REACTIONS}/{i}/trigger"),
                    format!(
                        "a kind with a reactor reaction (reactions/{first}) declares only reactor reactions, not {}",
                        reaction.trigger.as_str()
                    ),
                ));
            }
        }
    }

    if out.is_empty() { Ok(()) } else { Err(out) }
}

/// Checks the policy bounds; fields are `field_prefix` + `/<member>` (e.g. `/manifest/policy`,
/// or `/config` for `UpdateKindConfig`).
pub fn validate_policy(policy: &KindPolicy, field_prefix: &str) -> Result<(), Vec<Violation>> {
    let mut out = Vec::new();
    let mut bounded = |member: &str, value: i32, max: i32| {
        if !(0..=max).contains(&value) {
            out.push(Violation::new(
                format!("{field_prefix}/{member}"),
                format!("{member} must be between 0 and {max}, got {value}"),
            ));
        }
    };
    bounded("max_inflight", policy.max_inflight, MAX_MAX_INFLIGHT);
    bounded("task_deadline_secs", policy.task_deadline_secs, MAX_TASK_DEADLINE_SECS);
    bounded("orphan_grace_secs", policy.orphan_grace_secs, MAX_ORPHAN_GRACE_SECS);
    bounded(
        "max_transient_attempts",
        policy.max_transient_attempts,
        MAX_TRANSIENT_ATTEMPTS,
    );
    bounded(
        "unserved_condition_after_secs",
        policy.unserved_condition_after_secs,
        MAX_UNSERVED_CONDITION_AFTER_SECS,
    );
    bounded("retry_base_ms", policy.retry.base_ms, MAX_RETRY_BASE_MS);
    bounded("retry_cap_ms", policy.retry.cap_ms, MAX_RETRY_CAP_MS);
    let effective = |value: i32, default: i32| if value == 0 { default } else { value };
    let (base, cap) = (
        effective(policy.retry.base_ms, DEFAULT_RETRY_BASE_MS),
        effective(policy.retry.cap_ms, DEFAULT_RETRY_CAP_MS),
    );
    if policy.retry.base_ms >= 0 && policy.retry.cap_ms >= 0 && cap < base {
        out.push(Violation::new(
            format!("{field_prefix}/retry_cap_ms"),
            format!("the retry cap ({cap} ms) must not be below the base ({base} ms); 0 means {DEFAULT_RETRY_CAP_MS}"),
        ));
    }
    let resync = policy.resync_interval_secs;
    if resync != 0 && !(MIN_RESYNC_INTERVAL_SECS..=MAX_RESYNC_INTERVAL_SECS).contains(&resync) {
        out.push(Violation::new(
            format!("{field_prefix}/resync_interval_secs"),
            format!(
                "resync_interval_secs must be 0 (off) or between {MIN_RESYNC_INTERVAL_SECS} and \
                 {MAX_RESYNC_INTERVAL_SECS}, got {resync}"
            ),
        ));
    }
    out.sort_by(|a, b| a.field.cmp(&b.field));
    if out.is_empty() { Ok(()) } else { Err(out) }
}

/// Checks the description length (at most [`MAX_DESCRIPTION_BYTES`] bytes of UTF-8).
pub fn validate_description(d: &str) -> Result<(), Violation> {
    if d.len() > MAX_DESCRIPTION_BYTES {
        return Err(Violation::new(
            "/manifest/description",
            format!(
                "description must be at most {MAX_DESCRIPTION_BYTES} bytes, got {}",
                d.len()
            ),
        ));
    }
    Ok(())
}

/// Content hash of what a worker must agree on: the three schemas, the reactions and the
/// finalizer name (not the description, kind identity or policy).
///
/// The hash is SHA-256 over a canonical JSON form — object keys sorted, integral numbers written as
/// integers (so `5` and `5.0`, as a protobuf `Struct` would carry it, hash alike), empty strings
/// treated as absent, `emits` sorted and reactions sorted by name (order carries no meaning) —
/// truncated to its first 8 bytes (big-endian), with the sign bit cleared; 0 becomes 1, since 0
/// means "unknown". The canonical form is written by hand, so it does not depend on serde_json's
/// map ordering feature.
pub fn manifest_version(m: &KindManifest) -> i64 {
    let mut reactions: Vec<&Reaction> = m.reactions.iter().collect();
    reactions.sort_by(|a, b| a.name.cmp(&b.name));
    let reactions: Vec<Value> = reactions
        .into_iter()
        .map(|r| {
            let mut emits = r.emits.clone();
            emits.sort_by_key(|e| *e as u8);
            let mut object = serde_json::Map::new();
            object.insert("name".into(), Value::String(r.name.clone()));
            object.insert("trigger".into(), Value::String(r.trigger.as_str().into()));
            object.insert(
                "emits".into(),
                emits.iter().map(|e| Value::String(e.as_str().into())).collect(),
            );
            object.insert("verb".into(), optional_string(r.verb.as_deref()));
            object.insert("finalizer".into(), optional_string(r.finalizer.as_deref()));
            // Only when present, so manifests without input schemas keep their versions.
            if let Some(schema) = &r.input_schema {
                object.insert("input_schema".into(), schema.clone());
            }
            Value::Object(object)
        })
        .collect();

    let mut content = serde_json::Map::new();
    content.insert("spec_schema".into(), m.spec_schema.clone().unwrap_or(Value::Null));
    content.insert("status_schema".into(), m.status_schema.clone().unwrap_or(Value::Null));
    content.insert("config_schema".into(), m.config_schema.clone().unwrap_or(Value::Null));
    content.insert("reactions".into(), Value::Array(reactions));
    content.insert("finalizer_name".into(), optional_string(m.finalizer_name.as_deref()));
    // Only when present, so manifests without one keep their versions.
    if let Some(composition) = &m.composition {
        content.insert(
            "composition".into(),
            serde_json::to_value(composition).unwrap_or(Value::Null),
        );
    }

    let mut canonical = b"converge.kind_manifest.v1\n".to_vec();
    write_canonical(&Value::Object(content), &mut canonical);
    let digest = Sha256::digest(&canonical);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    let version = i64::from_be_bytes(first) & i64::MAX;
    if version == 0 { 1 } else { version }
}

fn optional_string(value: Option<&str>) -> Value {
    non_empty(value).map_or(Value::Null, |s| Value::String(s.to_owned()))
}

/// Writes `value` as compact JSON with object keys in byte order and integral floats as integers.
fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null | Value::Bool(_) | Value::String(_) => out.extend_from_slice(value.to_string().as_bytes()),
        Value::Number(number) => {
            let text = match (number.as_i64(), number.as_u64(), number.as_f64()) {
                (Some(i), _, _) => i.to_string(),
                (None, Some(u), _) => u.to_string(),
                // |f| < 2^63 (written out exactly) keeps the conversion to i64 exact.
                (None, None, Some(f)) if f.fract() == 0.0 && f.abs() < 9_223_372_036_854_775_808.0 => {
                    (f as i64).to_string()
                }
                _ => number.to_string(),
            };
            out.extend_from_slice(text.as_bytes());
        }
        Value::Array(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        Value::Object(members) => {
            let mut sorted: Vec<(&String, &Value)> = members.iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (index, (key, member)) in sorted.into_iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(Value::String(key.clone()).to_string().as_bytes());
                out.push(b':');
                write_canonical(member, out);
            }
            out.push(b'}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::compiled::compile_manifest;
    use serde_json::json;

    fn r(name: &str, trigger: Trigger, emits: &[Emit]) -> Reaction {
        Reaction {
            name: name.into(),
            trigger,
            emits: emits.to_vec(),
            verb: None,
            finalizer: None,
            input_schema: None,
        }
    }

    fn op(name: &str, verb: &str) -> Reaction {
        Reaction {
            verb: Some(verb.into()),
            ..r(name, Trigger::Operation, &[Emit::OperationOutput])
        }
    }

    fn fields(result: Result<(), Vec<Violation>>) -> Vec<String> {
        result.err().unwrap_or_default().into_iter().map(|v| v.field).collect()
    }

    fn manifest() -> KindManifest {
        KindManifest {
            kind: "vpc".into(),
            kind_version: 1,
            description: "A VPC.".into(),
            spec_schema: Some(json!({"type": "object", "properties": {"cidr": {"type": "string"}}})),
            status_schema: Some(json!({"type": "object", "properties": {"vpc_id": {"type": "string"}}})),
            config_schema: None,
            reactions: vec![r("work", Trigger::SpecChange, &[Emit::Status])],
            finalizer_name: None,
            policy: KindPolicy {
                max_inflight: 50,
                ..KindPolicy::default()
            },
            conversions: Vec::new(),
            composition: None,
        }
    }

    #[test]
    fn serde_shape_matches_the_database() {
        let reactions = vec![
            r("work", Trigger::SpecChange, &[Emit::Status]),
            Reaction {
                finalizer: Some("example.com/fin".into()),
                ..r("td", Trigger::DeleteRequested, &[Emit::Finalizer])
            },
            op("operate:x", "x"),
        ];
        let json = serde_json::to_value(&reactions).expect("serializes");
        assert_eq!(
            json,
            json!([
                {"name": "work", "trigger": "specChange", "emits": ["status"]},
                {"name": "td", "trigger": "deleteRequested", "emits": ["finalizer"], "finalizer": "example.com/fin"},
                {"name": "operate:x", "trigger": "operation", "emits": ["operationOutput"], "verb": "x"}
            ])
        );
        let back: Vec<Reaction> = serde_json::from_value(json).expect("deserializes");
        assert_eq!(back, reactions);
        let with_nulls: Vec<Reaction> =
            serde_json::from_value(json!([{"name": "a", "trigger": "resync", "emits": ["status"], "verb": null}]))
                .expect("null verb");
        assert_eq!(with_nulls[0].verb, None);
    }

    #[test]
    fn architecture_examples_are_legal() {
        assert_eq!(
            validate_reactions(&[r("work", Trigger::SpecChange, &[Emit::Status])], None),
            Ok(())
        );
        assert_eq!(
            validate_reactions(&[r("react", Trigger::Reactor, &[Emit::SideEffect])], None),
            Ok(())
        );
        let full = [
            r(
                "compose",
                Trigger::SpecChange,
                &[Emit::Children, Emit::Edges, Emit::Configs, Emit::Status],
            ),
            r("rollup", Trigger::ChildrenSettled, &[Emit::Status, Emit::Conditions]),
            r("teardown", Trigger::DeleteRequested, &[Emit::Finalizer]),
            op("operate:enable_flow_logs", "enable_flow_logs"),
            op("operate:rotate", "rotate"),
            r("drift", Trigger::Resync, &[Emit::Status]),
        ];
        assert_eq!(validate_reactions(&full, Some("converge.io/teardown")), Ok(()));
    }

    #[test]
    fn r1_a_kind_without_reactions_is_data_only_and_has_no_finalizer() {
        assert_eq!(validate_reactions(&[], None), Ok(()));
        assert_eq!(
            fields(validate_reactions(&[], Some("converge.dev/x"))),
            vec!["/manifest/finalizer_name"]
        );
    }

    #[test]
    fn r2_names() {
        let long = "a".repeat(64);
        for bad in ["", "has space", "slash/no", "é", long.as_str()] {
            let got = fields(validate_reactions(
                &[r(bad, Trigger::SpecChange, &[Emit::Status])],
                None,
            ));
            assert_eq!(got, vec!["/manifest/reactions/0/name"], "{bad:?}");
        }
        let ok = "A-z_0.9:x".to_string() + &"a".repeat(54);
        assert_eq!(
            validate_reactions(&[r(&ok, Trigger::SpecChange, &[Emit::Status])], None),
            Ok(())
        );
        let dup = [
            r("w", Trigger::SpecChange, &[Emit::Status]),
            r("w", Trigger::Resync, &[Emit::Status]),
        ];
        assert_eq!(
            fields(validate_reactions(&dup, None)),
            vec!["/manifest/reactions/1/name"]
        );
    }

    #[test]
    fn r3_emits() {
        assert_eq!(
            fields(validate_reactions(&[r("w", Trigger::SpecChange, &[])], None)),
            vec!["/manifest/reactions/0/emits"]
        );
        assert_eq!(
            fields(validate_reactions(
                &[r("w", Trigger::SpecChange, &[Emit::Status, Emit::Edges, Emit::Status])],
                None
            )),
            vec!["/manifest/reactions/0/emits/2"]
        );
    }

    #[test]
    fn r4_verbs() {
        let missing = Reaction {
            verb: None,
            ..op("o", "x")
        };
        assert_eq!(
            fields(validate_reactions(&[missing], None)),
            vec!["/manifest/reactions/0/verb"]
        );
        let empty = Reaction {
            verb: Some(String::new()),
            ..op("o", "x")
        };
        assert_eq!(
            fields(validate_reactions(&[empty], None)),
            vec!["/manifest/reactions/0/verb"]
        );
        assert_eq!(
            fields(validate_reactions(&[op("o", "bad verb")], None)),
            vec!["/manifest/reactions/0/verb"]
        );
        assert_eq!(
            fields(validate_reactions(&[op("a", "x"), op("b", "x")], None)),
            vec!["/manifest/reactions/1/verb"]
        );
        let stray = Reaction {
            verb: Some("x".into()),
            ..r("w", Trigger::SpecChange, &[Emit::Status])
        };
        assert_eq!(
            fields(validate_reactions(&[stray], None)),
            vec!["/manifest/reactions/0/verb"]
        );
        let empty_stray = Reaction {
            verb: Some(String::new()),
            ..r("w", Trigger::SpecChange, &[Emit::Status])
        };
        assert_eq!(validate_reactions(&[empty_stray], None), Ok(()));
    }

    #[test]
    fn r5_r9_r10_finalizers() {
        let stray = Reaction {
            finalizer: Some("f".into()),
            ..r("w", Trigger::SpecChange, &[Emit::Status])
        };
        assert_eq!(
            fields(validate_reactions(&[stray], None)),
            vec!["/manifest/reactions/0/finalizer"]
        );
        let teardown = r("t", Trigger::DeleteRequested, &[Emit::Finalizer]);
        assert_eq!(
            fields(validate_reactions(std::slice::from_ref(&teardown), None)),
            vec!["/manifest/reactions/0/finalizer"]
        );
        assert_eq!(
            fields(validate_reactions(std::slice::from_ref(&teardown), Some(""))),
            vec!["/manifest/reactions/0/finalizer"]
        );
        assert_eq!(
            validate_reactions(std::slice::from_ref(&teardown), Some("example.com/fin")),
            Ok(())
        );
        let own = Reaction {
            finalizer: Some("fin".into()),
            ..teardown.clone()
        };
        assert_eq!(validate_reactions(&[own], None), Ok(()));
        assert_eq!(
            fields(validate_reactions(std::slice::from_ref(&teardown), Some("Bad"))),
            vec!["/manifest/finalizer_name"]
        );
        let long = "a".repeat(254);
        for bad in ["-a", "a-", "a_b", "A", ".a", "a/", long.as_str()] {
            let own = Reaction {
                finalizer: Some(bad.into()),
                ..teardown.clone()
            };
            assert_eq!(
                fields(validate_reactions(&[own], None)),
                vec!["/manifest/reactions/0/finalizer"],
                "{bad}"
            );
        }
        let max = "a".repeat(253);
        assert_eq!(validate_reactions(&[teardown], Some(&max)), Ok(()));
    }

    #[test]
    fn r6_composer() {
        let lonely = r("c", Trigger::SpecChange, &[Emit::Children]);
        assert_eq!(
            fields(validate_reactions(&[lonely], None)),
            vec!["/manifest/reactions/0/emits"]
        );
        let noisy = r(
            "c",
            Trigger::SpecChange,
            &[Emit::Children, Emit::Conditions, Emit::SideEffect],
        );
        assert_eq!(
            fields(validate_reactions(&[noisy], None)),
            vec!["/manifest/reactions/0/emits"]
        );
        let two = [
            r("a", Trigger::SpecChange, &[Emit::Children, Emit::Status]),
            r("b", Trigger::SpecChange, &[Emit::Children, Emit::Conditions]),
        ];
        assert_eq!(
            fields(validate_reactions(&two, None)),
            vec!["/manifest/reactions/1/emits"]
        );
        // Children emitted from another trigger is not a composer.
        let resync = [
            r("a", Trigger::SpecChange, &[Emit::Children, Emit::Status]),
            r("b", Trigger::Resync, &[Emit::Children]),
        ];
        assert_eq!(validate_reactions(&resync, None), Ok(()));
    }

    #[test]
    fn r7_rollup() {
        let two = [
            r("a", Trigger::ChildrenSettled, &[Emit::Status]),
            r("b", Trigger::ChildrenSettled, &[Emit::Status, Emit::Conditions]),
        ];
        assert_eq!(
            fields(validate_reactions(&two, None)),
            vec!["/manifest/reactions/1/emits"]
        );
        let fine = [
            r("a", Trigger::ChildrenSettled, &[Emit::Status]),
            r("b", Trigger::ChildrenSettled, &[Emit::Conditions]),
        ];
        assert_eq!(validate_reactions(&fine, None), Ok(()));
    }

    #[test]
    fn r8_reactor() {
        let extra = r("x", Trigger::Reactor, &[Emit::SideEffect, Emit::Status]);
        assert_eq!(
            fields(validate_reactions(&[extra], None)),
            vec!["/manifest/reactions/0/emits"]
        );
        let two = [
            r("a", Trigger::Reactor, &[Emit::SideEffect]),
            r("b", Trigger::Reactor, &[Emit::SideEffect]),
        ];
        assert_eq!(
            fields(validate_reactions(&two, None)),
            vec!["/manifest/reactions/1/trigger"]
        );
        let mixed = [
            r("w", Trigger::SpecChange, &[Emit::Status]),
            r("a", Trigger::Reactor, &[Emit::SideEffect]),
        ];
        assert_eq!(
            fields(validate_reactions(&mixed, None)),
            vec!["/manifest/reactions/0/trigger"]
        );
    }

    #[test]
    fn every_violation_is_reported() {
        let reactions = [
            r("", Trigger::Operation, &[]),
            Reaction {
                finalizer: Some("X".into()),
                ..r("b", Trigger::Reactor, &[Emit::Status, Emit::Status])
            },
        ];
        let got = fields(validate_reactions(&reactions, Some("-")));
        assert_eq!(
            got,
            vec![
                "/manifest/finalizer_name",
                "/manifest/reactions/0/name",
                "/manifest/reactions/0/emits",
                "/manifest/reactions/0/verb",
                "/manifest/reactions/1/emits/1",
                "/manifest/reactions/1/finalizer",
                "/manifest/reactions/1/finalizer",
                "/manifest/reactions/1/emits",
                "/manifest/reactions/0/trigger",
            ]
        );
    }

    #[test]
    fn policy_bounds() {
        assert_eq!(validate_policy(&KindPolicy::default(), "/manifest/policy"), Ok(()));
        let max = KindPolicy {
            max_inflight: 1_000_000,
            task_deadline_secs: 604_800,
            resync_interval_secs: 2_592_000,
            resync_recomposes: true,
            orphan_grace_secs: 2_592_000,
            max_transient_attempts: 10_000,
            unserved_condition_after_secs: 2_592_000,
            retry: RetryPolicy {
                base_ms: 3_600_000,
                cap_ms: 86_400_000,
                jitter: RetryJitter::Full,
            },
        };
        assert_eq!(validate_policy(&max, "/config"), Ok(()));
        assert_eq!(
            validate_policy(
                &KindPolicy {
                    resync_interval_secs: 5,
                    ..max
                },
                "/config"
            ),
            Ok(())
        );
        let over = KindPolicy {
            max_inflight: 1_000_001,
            task_deadline_secs: 604_801,
            resync_interval_secs: 4,
            resync_recomposes: false,
            orphan_grace_secs: 2_592_001,
            max_transient_attempts: 10_001,
            unserved_condition_after_secs: 2_592_001,
            retry: RetryPolicy {
                base_ms: 3_600_001,
                cap_ms: 86_400_001,
                jitter: RetryJitter::Equal,
            },
        };
        assert_eq!(
            fields(validate_policy(&over, "/config")),
            vec![
                "/config/max_inflight",
                "/config/max_transient_attempts",
                "/config/orphan_grace_secs",
                "/config/resync_interval_secs",
                "/config/retry_base_ms",
                "/config/retry_cap_ms",
                "/config/task_deadline_secs",
                "/config/unserved_condition_after_secs",
            ]
        );
        let negative = KindPolicy {
            max_inflight: -1,
            task_deadline_secs: -1,
            resync_interval_secs: -1,
            resync_recomposes: false,
            orphan_grace_secs: -1,
            max_transient_attempts: i32::MIN,
            unserved_condition_after_secs: -1,
            retry: RetryPolicy {
                base_ms: -1,
                cap_ms: -1,
                jitter: RetryJitter::None,
            },
        };
        assert_eq!(fields(validate_policy(&negative, "/manifest/policy")).len(), 8);
        // The cap may not be below the base, counting 0 as the defaults.
        for (base_ms, cap_ms, refused) in [(2_000, 1_000, true), (61_000, 0, true), (500, 0, false), (0, 999, true)] {
            let policy = KindPolicy {
                retry: RetryPolicy {
                    base_ms,
                    cap_ms,
                    jitter: RetryJitter::None,
                },
                ..KindPolicy::default()
            };
            let outcome = fields(validate_policy(&policy, "/p"));
            assert_eq!(
                outcome == vec!["/p/retry_cap_ms"],
                refused,
                "{base_ms} {cap_ms}: {outcome:?}"
            );
        }
        let too_long_resync = KindPolicy {
            resync_interval_secs: 2_592_001,
            ..KindPolicy::default()
        };
        assert_eq!(
            fields(validate_policy(&too_long_resync, "/p")),
            vec!["/p/resync_interval_secs"]
        );
    }

    #[test]
    fn description_limit() {
        assert!(validate_description(&"x".repeat(4096)).is_ok());
        let err = validate_description(&"x".repeat(4097)).expect_err("too long");
        assert_eq!(err.field, "/manifest/description");
        // Bytes, not characters.
        assert!(validate_description(&"é".repeat(2049)).is_err());
    }

    #[test]
    fn version_ignores_description_policy_and_order() {
        let base = manifest();
        let v = manifest_version(&base);
        assert!(v > 0);
        assert_eq!(v, manifest_version(&base.clone()));
        let cosmetic = KindManifest {
            description: "Another text".into(),
            policy: KindPolicy {
                max_inflight: 1,
                resync_interval_secs: 60,
                ..KindPolicy::default()
            },
            ..base.clone()
        };
        assert_eq!(manifest_version(&cosmetic), v);

        // Key order, integral floats, empty-vs-absent strings, emits and reaction order do not matter.
        let mut a = serde_json::Map::new();
        a.insert("type".into(), json!("object"));
        a.insert("properties".into(), json!({"n": {"type": "integer", "maximum": 10}}));
        let mut b = serde_json::Map::new();
        b.insert("properties".into(), json!({"n": {"maximum": 10.0, "type": "integer"}}));
        b.insert("type".into(), json!("object"));
        let two = vec![
            r("compose", Trigger::SpecChange, &[Emit::Children, Emit::Status]),
            Reaction {
                verb: Some(String::new()),
                ..r("work", Trigger::Resync, &[Emit::Status, Emit::Conditions])
            },
        ];
        let left = KindManifest {
            spec_schema: Some(Value::Object(a)),
            reactions: two.clone(),
            ..base.clone()
        };
        let right = KindManifest {
            spec_schema: Some(Value::Object(b)),
            reactions: vec![
                r("work", Trigger::Resync, &[Emit::Conditions, Emit::Status]),
                r("compose", Trigger::SpecChange, &[Emit::Status, Emit::Children]),
            ],
            finalizer_name: Some(String::new()),
            ..base.clone()
        };
        assert_eq!(manifest_version(&left), manifest_version(&right));
    }

    #[test]
    fn version_tracks_content() {
        let base = manifest();
        let v = manifest_version(&base);
        let variants = [
            KindManifest {
                spec_schema: None,
                ..base.clone()
            },
            KindManifest {
                status_schema: Some(json!({"type": "object"})),
                ..base.clone()
            },
            KindManifest {
                config_schema: Some(json!({})),
                ..base.clone()
            },
            KindManifest {
                reactions: vec![r("work", Trigger::SpecChange, &[Emit::Conditions])],
                ..base.clone()
            },
            KindManifest {
                reactions: vec![r("work2", Trigger::SpecChange, &[Emit::Status])],
                ..base.clone()
            },
            KindManifest {
                finalizer_name: Some("fin".into()),
                ..base.clone()
            },
            KindManifest {
                spec_schema: Some(json!({"type": "object", "properties": {"cidr": {"type": "integer"}}})),
                ..base.clone()
            },
            KindManifest {
                spec_schema: Some(json!({"maximum": 1.5})),
                ..base.clone()
            },
            KindManifest {
                spec_schema: Some(json!({"maximum": 1})),
                ..base.clone()
            },
        ];
        let mut seen = vec![v];
        for variant in variants {
            let version = manifest_version(&variant);
            assert!(version > 0);
            assert!(!seen.contains(&version), "{variant:?}");
            seen.push(version);
        }
    }

    #[test]
    fn compile_manifest_accepts_a_legal_manifest() {
        let compiled = compile_manifest(manifest()).expect("legal");
        assert_eq!(compiled.manifest_version, manifest_version(&compiled.manifest));
        let spec = compiled.spec.expect("typed");
        assert_eq!(spec.validate("/spec", &json!({"cidr": "10.0.0.0/16"})), Ok(()));
        assert!(spec.validate("/spec", &json!({"cidr": 10})).is_err());
        let untyped = compile_manifest(KindManifest {
            spec_schema: None,
            ..manifest()
        })
        .expect("legal");
        assert!(untyped.spec.is_none());
    }

    #[test]
    fn compile_manifest_reports_everything() {
        let bad = KindManifest {
            kind: "Bad_Kind".into(),
            kind_version: 0,
            description: "x".repeat(5000),
            spec_schema: Some(json!({"type": "nope"})),
            status_schema: Some(json!([])),
            config_schema: Some(json!({"properties": {"a": {"$ref": "https://example.com/a.json"}}})),
            reactions: vec![],
            finalizer_name: Some("UPPER".into()),
            policy: KindPolicy {
                max_inflight: -1,
                ..KindPolicy::default()
            },
            conversions: Vec::new(),
            composition: None,
        };
        let got: Vec<String> = compile_manifest(bad)
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|v| v.field)
            .collect();
        assert_eq!(
            got,
            vec![
                "/manifest/description",
                "/manifest/spec_schema/type",
                "/manifest/status_schema",
                "/manifest/config_schema/properties/a/$ref",
                "/manifest/finalizer_name",
                "/manifest/finalizer_name",
                "/manifest/policy/max_inflight",
            ]
        );
    }
}
