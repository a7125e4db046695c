//! The `converge.v1.KindService` API: kind manifests and live kind configuration.

use crate::domain::authz::{Access, Object};
use crate::domain::cel_composition::{self, ComposedResource, Composition, CompositionRollup};
use crate::domain::conversion::{FieldConversion, SpecConversion};
use std::sync::Arc;

use converge_proto::v1 as pb;
use converge_proto::v1::kind_service_server::KindService;
use converge_proto::v1::{
    ApplyKindManifestRequest, ApplyKindManifestResponse, DeleteKindManifestRequest, DeleteKindManifestResponse,
    GetKindConfigRequest, GetKindConfigResponse, GetKindManifestRequest, GetKindManifestResponse,
    ListKindManifestsRequest, ListKindManifestsResponse, UpdateKindConfigRequest, UpdateKindConfigResponse,
};
use sha2::{Digest, Sha256};
use sqlx::PgConnection;
use tonic::{Request, Response, Status};
use uuid::Uuid;

use super::ApiState;
use super::pages::{decode_token, finish_page, invalid_token};
use super::write::{self, WriteCall};
use crate::contract::convert::{json_to_struct, optional_struct_to_json, timestamp};
use crate::contract::status::{ApiError, Reason};
use crate::domain::compiled::{CompiledKind, compile_manifest};
use crate::domain::manifest::{
    Emit, KindManifest, KindPolicy, Reaction, RetryJitter, RetryPolicy, Trigger, validate_policy,
};
use crate::domain::names::{validate_kind_name, validate_kind_version};
use crate::domain::page_token::{PositionPart, filter_hash, page_size};
use crate::domain::violation::Violation;
use crate::store::kinds::{self, KindConfigRow, StoredManifest};
use crate::store::{provider_configs, reactors, resources};

/// Resources checked per batch when a new spec schema is checked against stored specs.
const REVALIDATE_BATCH: i64 = 500;
/// Most spec revisions a kind config may keep per resource.
const MAX_REVISION_LIMIT: i32 = 1000;
/// Spec revisions kept per resource unless the kind config says otherwise
/// (the column default of migration 0013).
const DEFAULT_REVISION_LIMIT: i32 = 10;
/// Offending resources reported when a new spec schema rejects stored specs.
const MAX_REPORTED_RESOURCES: usize = 10;
/// Resources named when a manifest cannot be deleted because of them.
const MAX_NAMED_USERS: i64 = 5;

/// Serves `converge.v1.KindService`.
#[derive(Debug, Clone)]
pub struct KindApi {
    state: ApiState,
}

impl KindApi {
    /// A service over `state`.
    pub fn new(state: ApiState) -> Self {
        Self { state }
    }
}

fn trigger_from_proto(raw: i32) -> Option<Trigger> {
    match pb::Trigger::try_from(raw).ok()? {
        pb::Trigger::SpecChange => Some(Trigger::SpecChange),
        pb::Trigger::ChildrenSettled => Some(Trigger::ChildrenSettled),
        pb::Trigger::DeleteRequested => Some(Trigger::DeleteRequested),
        pb::Trigger::Operation => Some(Trigger::Operation),
        pb::Trigger::Reactor => Some(Trigger::Reactor),
        pb::Trigger::Resync => Some(Trigger::Resync),
        pb::Trigger::Unspecified => None,
    }
}

fn trigger_to_proto(trigger: Trigger) -> pb::Trigger {
    match trigger {
        Trigger::SpecChange => pb::Trigger::SpecChange,
        Trigger::ChildrenSettled => pb::Trigger::ChildrenSettled,
        Trigger::DeleteRequested => pb::Trigger::DeleteRequested,
        Trigger::Operation => pb::Trigger::Operation,
        Trigger::Reactor => pb::Trigger::Reactor,
        Trigger::Resync => pb::Trigger::Resync,
    }
}

fn emit_from_proto(raw: i32) -> Option<Emit> {
    match pb::Emit::try_from(raw).ok()? {
        pb::Emit::Children => Some(Emit::Children),
        pb::Emit::Edges => Some(Emit::Edges),
        pb::Emit::Configs => Some(Emit::Configs),
        pb::Emit::Status => Some(Emit::Status),
        pb::Emit::Conditions => Some(Emit::Conditions),
        pb::Emit::Finalizer => Some(Emit::Finalizer),
        pb::Emit::OperationOutput => Some(Emit::OperationOutput),
        pb::Emit::SideEffect => Some(Emit::SideEffect),
        pb::Emit::Unspecified => None,
    }
}

fn emit_to_proto(emit: Emit) -> pb::Emit {
    match emit {
        Emit::Children => pb::Emit::Children,
        Emit::Edges => pb::Emit::Edges,
        Emit::Configs => pb::Emit::Configs,
        Emit::Status => pb::Emit::Status,
        Emit::Conditions => pb::Emit::Conditions,
        Emit::Finalizer => pb::Emit::Finalizer,
        Emit::OperationOutput => pb::Emit::OperationOutput,
        Emit::SideEffect => pb::Emit::SideEffect,
    }
}

fn non_empty(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_owned())
}

/// Converts the wire manifest, reporting enum values that are unset or unknown.
/// A manifest of the contract as the domain reads it; a field that has no
/// domain form is refused as the API refuses it (also used by `converge render`).
pub fn manifest_from_proto(manifest: Option<pb::KindManifest>) -> Result<KindManifest, ApiError> {
    let Some(m) = manifest else {
        return Err(ApiError::violations(
            Reason::InvalidKindManifest,
            vec![Violation::new("/manifest", "is required")],
        ));
    };
    let mut violations = Vec::new();
    violations.extend(validate_kind_name("/manifest/kind", &m.kind).err());
    violations.extend(validate_kind_version("/manifest/kind_version", m.kind_version).err());
    let mut reactions = Vec::with_capacity(m.reactions.len());
    for (i, r) in m.reactions.into_iter().enumerate() {
        let trigger = trigger_from_proto(r.trigger);
        if trigger.is_none() {
            violations.push(Violation::new(
                format!("/manifest/reactions/{i}/trigger"),
                "must be set to a known trigger",
            ));
        }
        let mut emits = Vec::with_capacity(r.emits.len());
        for (j, raw) in r.emits.iter().enumerate() {
            match emit_from_proto(*raw) {
                Some(emit) => emits.push(emit),
                None => violations.push(Violation::new(
                    format!("/manifest/reactions/{i}/emits/{j}"),
                    "must be a known outcome part",
                )),
            }
        }
        let input_schema = optional_struct_to_json(&format!("/manifest/reactions/{i}/input_schema"), r.input_schema)?;
        if let Some(trigger) = trigger {
            reactions.push(Reaction {
                name: r.name,
                trigger,
                emits,
                verb: non_empty(&r.verb),
                finalizer: non_empty(&r.finalizer),
                input_schema,
            });
        }
    }
    if !violations.is_empty() {
        return Err(ApiError::violations(Reason::InvalidKindManifest, violations));
    }
    let policy = m.policy.unwrap_or_default();
    Ok(KindManifest {
        kind: m.kind,
        kind_version: m.kind_version,
        description: m.description,
        spec_schema: optional_struct_to_json("/manifest/spec_schema", m.spec_schema)?,
        status_schema: optional_struct_to_json("/manifest/status_schema", m.status_schema)?,
        config_schema: optional_struct_to_json("/manifest/config_schema", m.config_schema)?,
        reactions,
        finalizer_name: non_empty(&m.finalizer_name),
        policy: KindPolicy {
            max_inflight: policy.max_inflight,
            task_deadline_secs: policy.task_deadline_secs,
            resync_interval_secs: policy.resync_interval_secs,
            resync_recomposes: policy.resync_recomposes,
            orphan_grace_secs: policy.orphan_grace_secs,
            max_transient_attempts: policy.max_transient_attempts,
            unserved_condition_after_secs: policy.unserved_condition_after_secs,
            retry: RetryPolicy {
                base_ms: policy.retry_base_ms,
                cap_ms: policy.retry_cap_ms,
                jitter: jitter_from_proto("/manifest/policy/retry_jitter", policy.retry_jitter)?,
            },
        },
        conversions: m
            .conversions
            .into_iter()
            .map(|c| SpecConversion {
                from_version: c.from_version,
                spec: c.spec,
                fields: c
                    .fields
                    .into_iter()
                    .map(|f| FieldConversion {
                        path: f.path,
                        value: f.value,
                        remove: f.remove,
                    })
                    .collect(),
            })
            .collect(),
        composition: m.composition.map(composition_from_proto).transpose()?,
    })
}

fn composition_from_proto(c: pb::Composition) -> Result<Composition, ApiError> {
    const AT: &str = cel_composition::AT;
    let resources = c
        .resources
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            Ok(ComposedResource {
                id: r.id,
                kind: r.kind,
                kind_version: r.kind_version,
                name: r.name,
                labels: r.labels.into_iter().collect(),
                spec: optional_struct_to_json(&format!("{AT}/resources/{i}/spec"), r.spec)?
                    .unwrap_or(serde_json::Value::Null),
                for_each: r.for_each,
                include_when: r.include_when,
                provider_config: r.provider_config,
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let rollup = c
        .rollup
        .map(|r| {
            Ok::<_, ApiError>(CompositionRollup {
                status: optional_struct_to_json(&format!("{AT}/rollup/status"), r.status)?
                    .unwrap_or(serde_json::Value::Null),
                ready: r.ready,
                message: r.message,
            })
        })
        .transpose()?;
    Ok(Composition { resources, rollup })
}

fn composition_to_proto(c: Composition) -> pb::Composition {
    pb::Composition {
        resources: c
            .resources
            .into_iter()
            .map(|r| pb::ComposedResource {
                id: r.id,
                kind: r.kind,
                kind_version: r.kind_version,
                name: r.name,
                labels: r.labels.into_iter().collect(),
                spec: json_to_struct(&r.spec),
                for_each: r.for_each,
                include_when: r.include_when,
                provider_config: r.provider_config,
            })
            .collect(),
        rollup: c.rollup.map(|r| pb::CompositionRollup {
            status: json_to_struct(&r.status),
            ready: r.ready,
            message: r.message,
        }),
    }
}

/// Refuses a composition naming a child kind version that does not exist
/// (or is a reactor kind, or is this very kind version), or reading a status
/// field the child kind's status schema does not declare.
async fn check_composition_kinds(conn: &mut PgConnection, compiled: &CompiledKind) -> Result<(), ApiError> {
    let Some(composition) = &compiled.composition else {
        return Ok(());
    };
    let own = (&compiled.manifest.kind, compiled.manifest.kind_version);
    let mut problems = Vec::new();
    let mut status_schemas = std::collections::HashMap::new();
    for named in &composition.kinds {
        if (&named.kind, named.kind_version) == own {
            problems.push(Violation::new(
                named.at.clone(),
                "a composition cannot compose its own kind version",
            ));
            continue;
        }
        match kinds::get_manifest(conn, &named.kind, named.kind_version).await? {
            None => problems.push(Violation::new(
                named.at.clone(),
                format!(
                    "kind {} version {} does not exist; apply it first",
                    named.kind, named.kind_version
                ),
            )),
            Some(stored) if stored.manifest.reactions.iter().any(|r| r.trigger == Trigger::Reactor) => {
                problems.push(Violation::new(
                    named.at.clone(),
                    format!("kind {} is a reactor kind and owns no resources", named.kind),
                ));
            }
            Some(stored) => {
                status_schemas.insert((named.kind.clone(), named.kind_version), stored.manifest.status_schema);
            }
        }
    }
    for read in &composition.status_reads {
        let Some(Some(schema)) = status_schemas.get(&(read.kind.clone(), read.kind_version)) else {
            continue;
        };
        if let Err(missing) = cel_composition::schema_has(schema, schema, &read.path) {
            problems.push(Violation::new(
                read.at.clone(),
                format!(
                    "reads status.{}, which the status schema of {} version {} does not declare",
                    read.path[..=missing].join("."),
                    read.kind,
                    read.kind_version
                ),
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ApiError::violations(Reason::InvalidKindManifest, problems))
    }
}

/// The domain jitter of a proto value; an unknown number is refused.
fn jitter_from_proto(field: &str, raw: i32) -> Result<RetryJitter, ApiError> {
    match pb::RetryJitter::try_from(raw) {
        Ok(pb::RetryJitter::Unspecified | pb::RetryJitter::None) => Ok(RetryJitter::None),
        Ok(pb::RetryJitter::Full) => Ok(RetryJitter::Full),
        Ok(pb::RetryJitter::Equal) => Ok(RetryJitter::Equal),
        Err(_) => Err(ApiError::violations(
            Reason::InvalidField,
            vec![Violation::new(field, "must be one of the RetryJitter values")],
        )),
    }
}

/// The proto value of a jitter; none is reported as unset (the default).
fn jitter_to_proto(jitter: RetryJitter) -> i32 {
    match jitter {
        RetryJitter::None => pb::RetryJitter::Unspecified as i32,
        RetryJitter::Full => pb::RetryJitter::Full as i32,
        RetryJitter::Equal => pb::RetryJitter::Equal as i32,
    }
}

fn manifest_to_proto(stored: StoredManifest) -> pb::KindManifest {
    let m = stored.manifest;
    pb::KindManifest {
        kind: m.kind,
        kind_version: m.kind_version,
        description: m.description,
        spec_schema: m.spec_schema.as_ref().and_then(json_to_struct),
        status_schema: m.status_schema.as_ref().and_then(json_to_struct),
        config_schema: m.config_schema.as_ref().and_then(json_to_struct),
        reactions: m
            .reactions
            .into_iter()
            .map(|r| pb::Reaction {
                name: r.name,
                trigger: trigger_to_proto(r.trigger).into(),
                emits: r.emits.into_iter().map(|e| emit_to_proto(e).into()).collect(),
                verb: r.verb.unwrap_or_default(),
                finalizer: r.finalizer.unwrap_or_default(),
                input_schema: r.input_schema.as_ref().and_then(json_to_struct),
            })
            .collect(),
        finalizer_name: m.finalizer_name.unwrap_or_default(),
        policy: Some(pb::KindPolicy {
            max_inflight: m.policy.max_inflight,
            task_deadline_secs: m.policy.task_deadline_secs,
            resync_interval_secs: m.policy.resync_interval_secs,
            resync_recomposes: m.policy.resync_recomposes,
            orphan_grace_secs: m.policy.orphan_grace_secs,
            max_transient_attempts: m.policy.max_transient_attempts,
            unserved_condition_after_secs: m.policy.unserved_condition_after_secs,
            retry_base_ms: m.policy.retry.base_ms,
            retry_cap_ms: m.policy.retry.cap_ms,
            retry_jitter: jitter_to_proto(m.policy.retry.jitter),
        }),
        manifest_version: stored.manifest_version,
        create_time: Some(timestamp(stored.created_at)),
        update_time: Some(timestamp(stored.updated_at)),
        conversions: m
            .conversions
            .into_iter()
            .map(|c| pb::SpecConversion {
                from_version: c.from_version,
                spec: c.spec,
                fields: c
                    .fields
                    .into_iter()
                    .map(|f| pb::FieldConversion {
                        path: f.path,
                        value: f.value,
                        remove: f.remove,
                    })
                    .collect(),
            })
            .collect(),
        composition: m.composition.map(composition_to_proto),
    }
}

fn config_etag(config: &KindConfigRow) -> String {
    let text = format!(
        "{}:{}:{}:{}:{}:{}:{}:{}:{}:{}",
        config.kind,
        config.kind_version,
        config.max_inflight,
        config.task_deadline_secs,
        config.resync_interval_secs,
        config.resync_recomposes,
        config.orphan_grace_secs,
        config.max_transient_attempts,
        config.retired,
        config.revision_limit
    );
    // Appended only when set, so configs without it keep their etags.
    let text = match config.unserved_condition_after_secs {
        0 => text,
        secs => format!("{text}:{secs}"),
    };
    // Likewise the retry policy, only when it differs from the default.
    let text = match (config.retry_base_ms, config.retry_cap_ms, config.retry_jitter.as_str()) {
        (0, 0, "none") => text,
        (base, cap, jitter) => format!("{text}:retry:{base}:{cap}:{jitter}"),
    };
    Sha256::digest(text.as_bytes())[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn config_to_proto(config: KindConfigRow) -> pb::KindConfig {
    let etag = config_etag(&config);
    pb::KindConfig {
        etag,
        kind: config.kind,
        kind_version: config.kind_version,
        max_inflight: config.max_inflight,
        task_deadline_secs: config.task_deadline_secs,
        resync_interval_secs: config.resync_interval_secs,
        resync_recomposes: config.resync_recomposes,
        orphan_grace_secs: config.orphan_grace_secs,
        max_transient_attempts: config.max_transient_attempts,
        retired: config.retired,
        revision_limit: config.revision_limit,
        unserved_condition_after_secs: config.unserved_condition_after_secs,
        retry_base_ms: config.retry_base_ms,
        retry_cap_ms: config.retry_cap_ms,
        retry_jitter: jitter_to_proto(RetryJitter::from_db(&config.retry_jitter)),
        update_time: Some(timestamp(config.updated_at)),
    }
}

/// Refuses a malformed kind name or a kind version out of its range (≥ 1),
/// naming the fields under `prefix` (e.g. `""` or `"/config"`).
fn check_kind_key(prefix: &str, kind: &str, kind_version: i32) -> Result<(), ApiError> {
    if let Err(v) = validate_kind_name(&format!("{prefix}/kind"), kind) {
        return Err(ApiError::violations(Reason::InvalidName, vec![v]));
    }
    validate_kind_version(&format!("{prefix}/kind_version"), kind_version)?;
    Ok(())
}

fn kind_not_found(kind: &str, kind_version: i32) -> ApiError {
    ApiError::refused(
        Reason::KindNotFound,
        format!("kind {kind:?} version {kind_version} has no manifest"),
    )
}

/// The stored documents a new schema rejects, gathered batch by batch up
/// to [`MAX_REPORTED_RESOURCES`], each named by its subject with the first
/// problem found.
#[derive(Debug, Default)]
struct Offenders(Vec<Violation>);

impl Offenders {
    /// Checks one batch of `(subject, document)`; false once the report is full.
    fn check<'a>(
        &mut self,
        schema: &crate::domain::schema::CompiledSchema,
        batch: impl IntoIterator<Item = (String, &'a serde_json::Value)>,
    ) -> bool {
        for (subject, document) in batch {
            if let Err(violations) = schema.validate("/spec", document) {
                let first = violations
                    .first()
                    .map(|v| format!("{}: {}", v.field, v.description))
                    .unwrap_or_default();
                self.0.push(Violation::new(subject, first));
                if self.0.len() >= MAX_REPORTED_RESOURCES {
                    return false;
                }
            }
        }
        true
    }

    /// The refusal, if anything was rejected: `what` names the schema and
    /// the documents ("spec schema", "resource(s)").
    fn refusal(self, reason: Reason, what: (&str, &str), kind: &str, version: i32) -> Result<(), ApiError> {
        if self.0.is_empty() {
            return Ok(());
        }
        let (schema, documents) = what;
        let more = if self.0.len() >= MAX_REPORTED_RESOURCES {
            "+"
        } else {
            ""
        };
        Err(ApiError::Refused {
            reason,
            message: format!(
                "the new {schema} rejects {}{more} stored {documents} of {kind} version {version}; \
                 fix them first or publish the change as a new kind version",
                self.0.len(),
            ),
            violations: self.0,
        })
    }
}

/// Refuses a new spec schema that rejects specs already stored. Runs under
/// the kind's exclusive lock, so no write can slip in between.
async fn check_existing_specs(conn: &mut PgConnection, compiled: &CompiledKind) -> Result<(), ApiError> {
    let Some(schema) = &compiled.spec else { return Ok(()) };
    let (kind, version) = (&compiled.manifest.kind, compiled.manifest.kind_version);
    let mut offenders = Offenders::default();
    let mut after: Option<Uuid> = None;
    loop {
        let batch = resources::specs_of_kind(conn, kind, version, after, REVALIDATE_BATCH).await?;
        let Some((last, _, _)) = batch.last() else { break };
        after = Some(*last);
        let room = offenders.check(
            schema,
            batch.iter().map(|(_, name, spec)| (format!("{kind}/{name}"), &spec.0)),
        );
        if !room || batch.len() < REVALIDATE_BATCH as usize {
            break;
        }
    }
    offenders.refusal(
        Reason::SchemaRejectsExistingResources,
        ("spec schema", "resource(s)"),
        kind,
        version,
    )
}

/// Refuses a new config schema that rejects provider configs already
/// stored, as [`check_existing_specs`] does for specs (same lock).
async fn check_existing_configs(conn: &mut PgConnection, compiled: &CompiledKind) -> Result<(), ApiError> {
    let Some(schema) = &compiled.config else { return Ok(()) };
    let (kind, version) = (&compiled.manifest.kind, compiled.manifest.kind_version);
    let mut offenders = Offenders::default();
    let mut after: Option<String> = None;
    loop {
        let batch = provider_configs::specs_of_pair(conn, kind, version, after.as_deref(), REVALIDATE_BATCH).await?;
        let Some((last, _)) = batch.last() else { break };
        after = Some(last.clone());
        let room = offenders.check(
            schema,
            batch
                .iter()
                .map(|(name, spec)| (format!("provider_configs/{name}"), &spec.0)),
        );
        if !room || batch.len() < REVALIDATE_BATCH as usize {
            break;
        }
    }
    offenders.refusal(
        Reason::SchemaRejectsExistingConfigs,
        ("config schema", "provider config(s)"),
        kind,
        version,
    )
}

/// The fields `UpdateKindConfig` may change, by update-mask path.
const CONFIG_PATHS: [&str; 12] = [
    "max_inflight",
    "task_deadline_secs",
    "resync_interval_secs",
    "resync_recomposes",
    "orphan_grace_secs",
    "max_transient_attempts",
    "retired",
    "revision_limit",
    "unserved_condition_after_secs",
    "retry_base_ms",
    "retry_cap_ms",
    "retry_jitter",
];

fn apply_mask(current: &KindConfigRow, update: &pb::KindConfig, paths: &[String]) -> Result<KindConfigRow, ApiError> {
    let all: Vec<String> = CONFIG_PATHS.iter().map(|p| (*p).to_owned()).collect();
    let paths = if paths.is_empty() { &all[..] } else { paths };
    let mut next = current.clone();
    let mut violations = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        match path.as_str() {
            "max_inflight" => next.max_inflight = update.max_inflight,
            "task_deadline_secs" => next.task_deadline_secs = update.task_deadline_secs,
            "resync_interval_secs" => next.resync_interval_secs = update.resync_interval_secs,
            "resync_recomposes" => next.resync_recomposes = update.resync_recomposes,
            "orphan_grace_secs" => next.orphan_grace_secs = update.orphan_grace_secs,
            "max_transient_attempts" => next.max_transient_attempts = update.max_transient_attempts,
            "retired" => next.retired = update.retired,
            "unserved_condition_after_secs" => {
                next.unserved_condition_after_secs = update.unserved_condition_after_secs;
            }
            "retry_base_ms" => next.retry_base_ms = update.retry_base_ms,
            "retry_cap_ms" => next.retry_cap_ms = update.retry_cap_ms,
            "retry_jitter" => match jitter_from_proto("/config/retry_jitter", update.retry_jitter) {
                Ok(jitter) => next.retry_jitter = jitter.as_db().to_owned(),
                Err(_) => violations.push(Violation::new(
                    "/config/retry_jitter",
                    "must be one of the RetryJitter values",
                )),
            },
            // 0 (unset) is the default, so an update that replaces every
            // field without naming this one keeps a valid value.
            "revision_limit" => {
                next.revision_limit = if update.revision_limit == 0 {
                    DEFAULT_REVISION_LIMIT
                } else {
                    update.revision_limit
                }
            }
            other => violations.push(Violation::new(
                format!("/update_mask/paths/{i}"),
                format!(
                    "{other:?} is not an editable field; use one of {}",
                    CONFIG_PATHS.join(", ")
                ),
            )),
        }
    }
    let policy = KindPolicy {
        max_inflight: next.max_inflight,
        task_deadline_secs: next.task_deadline_secs,
        resync_interval_secs: next.resync_interval_secs,
        resync_recomposes: next.resync_recomposes,
        orphan_grace_secs: next.orphan_grace_secs,
        max_transient_attempts: next.max_transient_attempts,
        unserved_condition_after_secs: next.unserved_condition_after_secs,
        retry: RetryPolicy {
            base_ms: next.retry_base_ms,
            cap_ms: next.retry_cap_ms,
            jitter: RetryJitter::from_db(&next.retry_jitter),
        },
    };
    if let Err(policy_violations) = validate_policy(&policy, "/config") {
        violations.extend(policy_violations);
    }
    if !(1..=MAX_REVISION_LIMIT).contains(&next.revision_limit) {
        violations.push(Violation::new(
            "/config/revision_limit",
            format!("must be between 1 and {MAX_REVISION_LIMIT}"),
        ));
    }
    if violations.is_empty() {
        Ok(next)
    } else {
        Err(ApiError::violations(Reason::InvalidKindConfig, violations))
    }
}

/// Applies a compiled manifest inside the caller's transaction.
async fn apply_manifest_in(
    conn: &mut PgConnection,
    compiled: &CompiledKind,
) -> Result<ApplyKindManifestResponse, ApiError> {
    let (kind, version) = (&compiled.manifest.kind, compiled.manifest.kind_version);
    kinds::lock_kind_exclusive(conn, kind, version).await?;
    let existing = kinds::get_manifest(conn, kind, version).await?;
    if let Some(stored) = &existing
        && stored.manifest == compiled.manifest
    {
        return Ok(ApplyKindManifestResponse {
            manifest: Some(manifest_to_proto(stored.clone())),
            created: false,
            unchanged: true,
        });
    }
    check_composition_kinds(conn, compiled).await?;
    let schema_changed = existing
        .as_ref()
        .is_some_and(|stored| stored.manifest.spec_schema != compiled.manifest.spec_schema);
    if schema_changed {
        check_existing_specs(conn, compiled).await?;
    }
    let config_schema_changed = existing
        .as_ref()
        .is_some_and(|stored| stored.manifest.config_schema != compiled.manifest.config_schema);
    if config_schema_changed {
        check_existing_configs(conn, compiled).await?;
    }
    let stored = kinds::upsert_manifest(conn, &compiled.manifest, compiled.manifest_version).await?;
    Ok(ApplyKindManifestResponse {
        manifest: Some(manifest_to_proto(stored)),
        created: existing.is_none(),
        unchanged: false,
    })
}

/// Deletes an unused manifest inside the caller's transaction.
async fn delete_manifest_in(
    conn: &mut PgConnection,
    req: &DeleteKindManifestRequest,
) -> Result<DeleteKindManifestResponse, ApiError> {
    kinds::lock_kind_exclusive(conn, &req.kind, req.kind_version).await?;
    if kinds::get_manifest(conn, &req.kind, req.kind_version).await?.is_none() {
        if req.allow_missing {
            return Ok(DeleteKindManifestResponse {});
        }
        return Err(kind_not_found(&req.kind, req.kind_version));
    }
    let users = resources::names_of_kind(conn, &req.kind, req.kind_version, MAX_NAMED_USERS).await?;
    if !users.is_empty() {
        return Err(ApiError::Refused {
            reason: Reason::KindInUse,
            message: format!(
                "kind {:?} version {} still has resources (such as {}); delete them (or move them to another \
                 version) first",
                req.kind,
                req.kind_version,
                users.join(", ")
            ),
            violations: users
                .iter()
                .map(|name| {
                    Violation::new(
                        format!("{}/{name}", req.kind),
                        format!("is at version {}", req.kind_version),
                    )
                })
                .collect(),
        });
    }
    if reactors::any_binding_names(conn, &req.kind, req.kind_version).await? {
        return Err(ApiError::refused(
            Reason::KindInUse,
            format!(
                "kind {:?} version {} is watched or run by reactor bindings; delete them first",
                req.kind, req.kind_version
            ),
        ));
    }
    if crate::store::migrations::running_with_version(conn, &req.kind, req.kind_version).await? {
        return Err(ApiError::refused(
            Reason::KindInUse,
            format!(
                "a kind migration of {:?} from or to version {} is running; wait for it or cancel it first",
                req.kind, req.kind_version
            ),
        ));
    }
    if provider_configs::any_of_kind(conn, &req.kind, req.kind_version).await? {
        return Err(ApiError::refused(
            Reason::KindInUse,
            format!(
                "kind {:?} version {} still has provider configs; delete them first",
                req.kind, req.kind_version
            ),
        ));
    }
    kinds::delete_manifest(conn, &req.kind, req.kind_version).await?;
    Ok(DeleteKindManifestResponse {})
}

/// Applies a masked kind config update inside the caller's transaction.
async fn update_config_in(
    conn: &mut PgConnection,
    update: &pb::KindConfig,
    paths: &[String],
) -> Result<UpdateKindConfigResponse, ApiError> {
    let current = kinds::get_config(conn, &update.kind, update.kind_version, true)
        .await?
        .ok_or_else(|| kind_not_found(&update.kind, update.kind_version))?;
    if !update.etag.is_empty() && update.etag != config_etag(&current) {
        return Err(ApiError::refused(
            Reason::EtagMismatch,
            "the kind config changed since its etag was read; read it again",
        ));
    }
    let next = apply_mask(&current, update, paths)?;
    let stored = kinds::update_config(conn, &next).await?;
    Ok(UpdateKindConfigResponse {
        config: Some(config_to_proto(stored)),
    })
}

#[tonic::async_trait]
impl KindService for KindApi {
    async fn apply_kind_manifest(
        &self,
        request: Request<ApplyKindManifestRequest>,
    ) -> Result<Response<ApplyKindManifestResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        self.state
            .authz
            .require_object(&principal, Object::Kinds, Access::Write)?;
        let call = WriteCall::new("ApplyKindManifest", &req.request_id, req.validate_only, &req, |r| {
            r.request_id.clear()
        })?;
        let manifest = manifest_from_proto(req.manifest.clone())?;
        let compiled = Arc::new(
            compile_manifest(manifest)
                .map_err(|violations| ApiError::violations(Reason::InvalidKindManifest, violations))?,
        );
        let to_store = compiled.clone();
        let answer = write::run(&self.state.pool, &call, move |conn| {
            let compiled = to_store.clone();
            Box::pin(async move { apply_manifest_in(conn, &compiled).await })
        })
        .await?;
        if !req.validate_only {
            self.state.catalog.insert(compiled);
        }
        Ok(Response::new(answer))
    }

    async fn get_kind_manifest(
        &self,
        request: Request<GetKindManifestRequest>,
    ) -> Result<Response<GetKindManifestResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        self.state
            .authz
            .require_object(&principal, Object::Kinds, Access::Read)?;
        check_kind_key("", &req.kind, req.kind_version)?;
        let mut conn = self.state.pool.acquire().await.map_err(ApiError::from)?;
        let stored = kinds::get_manifest(&mut conn, &req.kind, req.kind_version)
            .await
            .map_err(ApiError::from)?
            .ok_or_else(|| kind_not_found(&req.kind, req.kind_version))?;
        Ok(Response::new(GetKindManifestResponse {
            manifest: Some(manifest_to_proto(stored)),
        }))
    }

    async fn list_kind_manifests(
        &self,
        request: Request<ListKindManifestsRequest>,
    ) -> Result<Response<ListKindManifestsResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        self.state
            .authz
            .require_object(&principal, Object::Kinds, Access::Read)?;
        let limit = page_size(req.page_size).map_err(ApiError::from)?;
        let filters = filter_hash(&[req.kind.as_deref().unwrap_or("")]);
        let after = match decode_token(&req.page_token, filters)? {
            None => None,
            Some(position) => match position.as_slice() {
                [PositionPart::Text(kind), PositionPart::Int(version)] => {
                    Some((kind.clone(), i32::try_from(*version).unwrap_or(i32::MAX)))
                }
                _ => return Err(invalid_token("is not a manifest list position").into()),
            },
        };
        let mut page = kinds::list_manifests(
            &self.state.pool,
            req.kind.as_deref(),
            after.as_ref().map(|(k, v)| (k.as_str(), *v)),
            i64::try_from(limit + 1).unwrap_or(i64::MAX),
        )
        .await
        .map_err(ApiError::from)?;
        let next_page_token = finish_page(&mut page, limit, filters, |last| {
            vec![
                PositionPart::Text(last.manifest.kind.clone()),
                PositionPart::Int(i64::from(last.manifest.kind_version)),
            ]
        });
        Ok(Response::new(ListKindManifestsResponse {
            manifests: page.into_iter().map(manifest_to_proto).collect(),
            next_page_token,
        }))
    }

    async fn delete_kind_manifest(
        &self,
        request: Request<DeleteKindManifestRequest>,
    ) -> Result<Response<DeleteKindManifestResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        self.state
            .authz
            .require_object(&principal, Object::Kinds, Access::Write)?;
        check_kind_key("", &req.kind, req.kind_version)?;
        let call = WriteCall::new("DeleteKindManifest", &req.request_id, false, &req, |r| {
            r.request_id.clear()
        })?;
        let target = req.clone();
        let answer = write::run(&self.state.pool, &call, move |conn| {
            let req = target.clone();
            Box::pin(async move { delete_manifest_in(conn, &req).await })
        })
        .await?;
        self.state.catalog.evict(&req.kind, req.kind_version);
        Ok(Response::new(answer))
    }

    async fn get_kind_config(
        &self,
        request: Request<GetKindConfigRequest>,
    ) -> Result<Response<GetKindConfigResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        self.state
            .authz
            .require_object(&principal, Object::Kinds, Access::Read)?;
        check_kind_key("", &req.kind, req.kind_version)?;
        let mut conn = self.state.pool.acquire().await.map_err(ApiError::from)?;
        let config = kinds::get_config(&mut conn, &req.kind, req.kind_version, false)
            .await
            .map_err(ApiError::from)?
            .ok_or_else(|| kind_not_found(&req.kind, req.kind_version))?;
        Ok(Response::new(GetKindConfigResponse {
            config: Some(config_to_proto(config)),
        }))
    }

    async fn update_kind_config(
        &self,
        request: Request<UpdateKindConfigRequest>,
    ) -> Result<Response<UpdateKindConfigResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        self.state
            .authz
            .require_object(&principal, Object::Kinds, Access::Write)?;
        let call = WriteCall::new("UpdateKindConfig", &req.request_id, req.validate_only, &req, |r| {
            r.request_id.clear()
        })?;
        let Some(update) = req.config.clone() else {
            return Err(ApiError::violations(
                Reason::InvalidKindConfig,
                vec![Violation::new("/config", "is required")],
            )
            .into());
        };
        check_kind_key("/config", &update.kind, update.kind_version)?;
        let paths = req.update_mask.clone().map(|m| m.paths).unwrap_or_default();
        let answer = write::run(&self.state.pool, &call, move |conn| {
            let (update, paths) = (update.clone(), paths.clone());
            Box::pin(async move { update_config_in(conn, &update, &paths).await })
        })
        .await?;
        Ok(Response::new(answer))
    }
}
