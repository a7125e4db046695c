//! Manifest files: the JSON body of `KindService.ApplyKindManifest` in the
//! proto3 JSON mapping (what `buf curl -d @file` sends), turned into the
//! generated request message so Rust callers can apply the same files.
//!
//! Only the fields a manifest file carries are read: the `manifest` (kind,
//! version, description, schemas, reactions, finalizer name, policy) and the
//! optional `validateOnly` / `requestId`. Output-only fields are refused, as
//! are unknown ones, so a typo in a file is an error rather than a silently
//! dropped field. Enum values are their proto names (`TRIGGER_SPEC_CHANGE`).

use crate::proto::v1 as pb;
use crate::worker::convert::json_to_struct;
use serde::Deserialize;
use serde_json::Value;

/// Why a manifest file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file is not the expected JSON shape.
    #[error("manifest file {file}: {source}")]
    Json {
        /// Name of the file.
        file: String,
        /// The parse error (it names the line and column).
        #[source]
        source: serde_json::Error,
    },
    /// An enum value is not one of the proto names.
    #[error("manifest file {file}: {value:?} is not a known {what} (use the proto name, e.g. {example})")]
    UnknownEnum {
        /// Name of the file.
        file: String,
        /// Which enum.
        what: &'static str,
        /// The value given.
        value: String,
        /// A valid value.
        example: &'static str,
    },
    /// A schema is not a JSON object.
    #[error("manifest file {file}: {field} must be a JSON object")]
    NotAnObject {
        /// Name of the file.
        file: String,
        /// The manifest field.
        field: &'static str,
    },
}

/// The request body of a manifest file.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RequestJson {
    manifest: ManifestJson,
    #[serde(default, alias = "validate_only")]
    validate_only: bool,
    #[serde(default, alias = "request_id")]
    request_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ManifestJson {
    kind: String,
    #[serde(alias = "kind_version")]
    kind_version: i32,
    #[serde(default)]
    description: String,
    #[serde(default, alias = "spec_schema")]
    spec_schema: Option<Value>,
    #[serde(default, alias = "status_schema")]
    status_schema: Option<Value>,
    #[serde(default, alias = "config_schema")]
    config_schema: Option<Value>,
    #[serde(default)]
    reactions: Vec<ReactionJson>,
    #[serde(default, alias = "finalizer_name")]
    finalizer_name: String,
    #[serde(default)]
    policy: Option<PolicyJson>,
    #[serde(default)]
    conversions: Vec<ConversionJson>,
    #[serde(default)]
    composition: Option<CompositionJson>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompositionJson {
    resources: Vec<ComposedResourceJson>,
    #[serde(default)]
    rollup: Option<RollupJson>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ComposedResourceJson {
    id: String,
    kind: String,
    #[serde(alias = "kind_version")]
    kind_version: i32,
    name: String,
    #[serde(default)]
    labels: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    spec: Option<Value>,
    #[serde(default, alias = "for_each")]
    for_each: String,
    #[serde(default, alias = "include_when")]
    include_when: String,
    #[serde(default, alias = "provider_config")]
    provider_config: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RollupJson {
    #[serde(default)]
    status: Option<Value>,
    #[serde(default)]
    ready: String,
    #[serde(default)]
    message: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ConversionJson {
    #[serde(alias = "from_version")]
    from_version: i32,
    #[serde(default)]
    spec: String,
    #[serde(default)]
    fields: Vec<FieldConversionJson>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FieldConversionJson {
    path: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    remove: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReactionJson {
    name: String,
    trigger: String,
    #[serde(default)]
    emits: Vec<String>,
    #[serde(default)]
    verb: String,
    #[serde(default)]
    finalizer: String,
    #[serde(default, rename = "inputSchema", alias = "input_schema")]
    input_schema: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PolicyJson {
    #[serde(default, alias = "max_inflight")]
    max_inflight: i32,
    #[serde(default, alias = "task_deadline_secs")]
    task_deadline_secs: i32,
    #[serde(default, alias = "resync_interval_secs")]
    resync_interval_secs: i32,
    #[serde(default, alias = "resync_recomposes")]
    resync_recomposes: bool,
    #[serde(default, alias = "orphan_grace_secs")]
    orphan_grace_secs: i32,
    #[serde(default, alias = "max_transient_attempts")]
    max_transient_attempts: i32,
    #[serde(default, alias = "unserved_condition_after_secs")]
    unserved_condition_after_secs: i32,
    #[serde(default, alias = "retry_base_ms")]
    retry_base_ms: i32,
    #[serde(default, alias = "retry_cap_ms")]
    retry_cap_ms: i32,
    #[serde(default, alias = "retry_jitter")]
    retry_jitter: Option<String>,
}

/// Parses the manifest file `file` (its name, for messages) with content
/// `json` into an `ApplyKindManifestRequest`.
pub fn parse_apply_request(file: &str, json: &str) -> Result<pb::ApplyKindManifestRequest, ManifestError> {
    let request: RequestJson = serde_json::from_str(json).map_err(|source| ManifestError::Json {
        file: file.to_owned(),
        source,
    })?;
    Ok(pb::ApplyKindManifestRequest {
        manifest: Some(manifest(file, request.manifest)?),
        validate_only: request.validate_only,
        request_id: request.request_id,
    })
}

/// The `manifest` object of a manifest file (or of a `KindManifest` document
/// of the command line), already parsed as JSON, as a `KindManifest`.
/// `file` names its source in messages.
pub fn parse_manifest(file: &str, value: Value) -> Result<pb::KindManifest, ManifestError> {
    let m: ManifestJson = serde_json::from_value(value).map_err(|source| ManifestError::Json {
        file: file.to_owned(),
        source,
    })?;
    manifest(file, m)
}

fn manifest(file: &str, m: ManifestJson) -> Result<pb::KindManifest, ManifestError> {
    let schema = |value: Option<Value>, field: &'static str| {
        value
            .map(|v| {
                json_to_struct(v, field).map_err(|_| ManifestError::NotAnObject {
                    file: file.to_owned(),
                    field,
                })
            })
            .transpose()
    };
    let reactions = m
        .reactions
        .into_iter()
        .map(|r| reaction(file, r))
        .collect::<Result<Vec<_>, _>>()?;
    let policy = m.policy.unwrap_or_default();
    Ok(pb::KindManifest {
        kind: m.kind,
        kind_version: m.kind_version,
        description: m.description,
        spec_schema: schema(m.spec_schema, "specSchema")?,
        status_schema: schema(m.status_schema, "statusSchema")?,
        config_schema: schema(m.config_schema, "configSchema")?,
        reactions,
        finalizer_name: m.finalizer_name,
        policy: Some(pb::KindPolicy {
            max_inflight: policy.max_inflight,
            task_deadline_secs: policy.task_deadline_secs,
            resync_interval_secs: policy.resync_interval_secs,
            resync_recomposes: policy.resync_recomposes,
            orphan_grace_secs: policy.orphan_grace_secs,
            max_transient_attempts: policy.max_transient_attempts,
            unserved_condition_after_secs: policy.unserved_condition_after_secs,
            retry_base_ms: policy.retry_base_ms,
            retry_cap_ms: policy.retry_cap_ms,
            retry_jitter: match policy.retry_jitter.as_deref() {
                None => pb::RetryJitter::Unspecified as i32,
                Some(name) => pb::RetryJitter::from_str_name(name).ok_or_else(|| ManifestError::UnknownEnum {
                    file: file.to_owned(),
                    what: "retry jitter",
                    value: name.chars().take(64).collect(),
                    example: "RETRY_JITTER_FULL",
                })? as i32,
            },
        }),
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
        composition: m.composition.map(|c| composition(file, c)).transpose()?,
        ..Default::default()
    })
}

fn composition(file: &str, c: CompositionJson) -> Result<pb::Composition, ManifestError> {
    let object = |value: Option<Value>, field: &'static str| {
        value
            .map(|v| {
                json_to_struct(v, field).map_err(|_| ManifestError::NotAnObject {
                    file: file.to_owned(),
                    field,
                })
            })
            .transpose()
    };
    Ok(pb::Composition {
        resources: c
            .resources
            .into_iter()
            .map(|r| {
                Ok(pb::ComposedResource {
                    spec: object(r.spec, "composition.resources[].spec")?,
                    id: r.id,
                    kind: r.kind,
                    kind_version: r.kind_version,
                    name: r.name,
                    labels: r.labels,
                    for_each: r.for_each,
                    include_when: r.include_when,
                    provider_config: r.provider_config,
                })
            })
            .collect::<Result<_, ManifestError>>()?,
        rollup: c
            .rollup
            .map(|r| {
                Ok::<_, ManifestError>(pb::CompositionRollup {
                    status: object(r.status, "composition.rollup.status")?,
                    ready: r.ready,
                    message: r.message,
                })
            })
            .transpose()?,
    })
}

fn reaction(file: &str, r: ReactionJson) -> Result<pb::Reaction, ManifestError> {
    let unknown = |what, value: &str, example| ManifestError::UnknownEnum {
        file: file.to_owned(),
        what,
        value: value.to_owned(),
        example,
    };
    let trigger =
        pb::Trigger::from_str_name(&r.trigger).ok_or_else(|| unknown("trigger", &r.trigger, "TRIGGER_SPEC_CHANGE"))?;
    let emits = r
        .emits
        .iter()
        .map(|e| {
            pb::Emit::from_str_name(e)
                .map(|e| e as i32)
                .ok_or_else(|| unknown("emit", e, "EMIT_STATUS"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let input_schema = r
        .input_schema
        .map(|v| {
            json_to_struct(v, "inputSchema").map_err(|_| ManifestError::NotAnObject {
                file: file.to_owned(),
                field: "inputSchema",
            })
        })
        .transpose()?;
    Ok(pb::Reaction {
        name: r.name,
        trigger: trigger as i32,
        emits,
        verb: r.verb,
        finalizer: r.finalizer,
        input_schema,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_noop_file_parses() {
        let request =
            parse_apply_request("noop/manifest.json", include_str!("../../examples/noop/manifest.json")).unwrap();
        let manifest = request.manifest.unwrap();
        assert_eq!(manifest.kind, "noop");
        assert_eq!(manifest.kind_version, 1);
        assert_eq!(manifest.reactions.len(), 1);
        assert_eq!(manifest.reactions[0].trigger, pb::Trigger::SpecChange as i32);
        assert_eq!(manifest.reactions[0].emits, [pb::Emit::Status as i32]);
        assert!(manifest.spec_schema.is_some());
        assert!(manifest.status_schema.is_none());
    }

    #[test]
    fn bad_files_name_the_problem() {
        let err = parse_apply_request(
            "x.json",
            r#"{"manifest": {"kind": "x", "kindVersion": 1, "reactions": [{"name": "w", "trigger": "SPEC"}]}}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("\"SPEC\" is not a known trigger"), "{err}");

        let err = parse_apply_request(
            "x.json",
            r#"{"manifest": {"kind": "x", "kindVersion": 1, "specSchema": 3}}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("specSchema must be a JSON object"), "{err}");

        let err = parse_apply_request(
            "x.json",
            r#"{"manifest": {"kind": "x", "kindVersion": 1, "colour": 3}}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("unknown field `colour`"), "{err}");
    }
}
