//! The envelope: how every object type is written as one YAML or JSON
//! document, for `apply -f` to read and `get -o json|yaml` to print (so
//! the output of `get` applies back unchanged). Documented in docs/cli.md.
//!
//! ```yaml
//! apiVersion: converge.dev/v1
//! type: Resource            # | KindManifest | ProviderConfig | ReactorBinding
//! kind: noop
//! kindVersion: 1
//! name: hello
//! spec: {}
//! ```
//!
//! Field names are the proto3 JSON names of the contract's messages (the
//! names `buf curl` bodies and the manifest files in examples/ use), with
//! the proto (snake_case) names accepted too; enum values are their proto
//! names. Output-only fields (`status`, `phase`, `etag`, ...) are printed
//! by `get` and ignored by `apply`; any other unknown field is an error, so
//! a typo is not silently dropped.

use std::collections::BTreeMap;

use base64::Engine as _;
use converge_proto::json::{json_to_struct, struct_to_json};
use converge_sdk::proto::v1 as pb;
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// The `apiVersion` of every document.
pub const API_VERSION: &str = "converge.dev/v1";

/// The object types `apply` accepts, in the order it applies them: kinds
/// before the configs and resources of those kinds, bindings last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ObjectType {
    /// A kind manifest.
    KindManifest,
    /// A provider config.
    ProviderConfig,
    /// A resource.
    Resource,
    /// A reactor binding.
    ReactorBinding,
}

impl ObjectType {
    /// The `type` value of the envelope.
    pub fn name(self) -> &'static str {
        match self {
            ObjectType::KindManifest => "KindManifest",
            ObjectType::ProviderConfig => "ProviderConfig",
            ObjectType::Resource => "Resource",
            ObjectType::ReactorBinding => "ReactorBinding",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        [
            ObjectType::KindManifest,
            ObjectType::ProviderConfig,
            ObjectType::Resource,
            ObjectType::ReactorBinding,
        ]
        .into_iter()
        .find(|t| t.name() == name)
    }

    /// The fields `get` prints that `apply` ignores.
    fn output_only(self) -> &'static [&'static str] {
        match self {
            ObjectType::KindManifest => &["manifestVersion", "createTime", "updateTime"],
            ObjectType::ProviderConfig => &["owner", "createTime", "updateTime", "etag"],
            ObjectType::Resource => &[
                "uid",
                "status",
                "generation",
                "observedGeneration",
                "resourceVersion",
                "phase",
                "conditions",
                "owner",
                "root",
                "finalizers",
                "createTime",
                "updateTime",
                "deleteTime",
                "etag",
                "healthy",
                "failureAttempts",
                "failedGeneration",
                "quarantined",
                "orphanExpireTime",
                "manifestVersion",
                // What `converge render` adds to a composed child.
                "dependsOn",
            ],
            ObjectType::ReactorBinding => &[
                "createTime",
                "updateTime",
                "etag",
                "pendingDeliveries",
                "failedDeliveries",
                "lastFailure",
            ],
        }
    }
}

/// One object read from a document.
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    /// A kind manifest.
    KindManifest(pb::KindManifest),
    /// A provider config.
    ProviderConfig(pb::ProviderConfig),
    /// A resource, as the apply request it becomes.
    Resource(pb::ApplyResourceRequest),
    /// A reactor binding.
    ReactorBinding(pb::ReactorBinding),
}

impl Object {
    /// Its type.
    pub fn object_type(&self) -> ObjectType {
        match self {
            Object::KindManifest(_) => ObjectType::KindManifest,
            Object::ProviderConfig(_) => ObjectType::ProviderConfig,
            Object::Resource(_) => ObjectType::Resource,
            Object::ReactorBinding(_) => ObjectType::ReactorBinding,
        }
    }

    /// `Type/name` as `apply` prints it.
    pub fn display_name(&self) -> String {
        match self {
            Object::KindManifest(m) => kind_display(&m.kind, m.kind_version),
            Object::ProviderConfig(c) => format!("ProviderConfig/{}", c.name),
            Object::Resource(r) => format!("Resource/{}/{}", r.kind, r.name),
            Object::ReactorBinding(b) => format!("ReactorBinding/{}", b.name),
        }
    }
}

/// `KindManifest/<kind>.v<version>`.
pub fn kind_display(kind: &str, version: i32) -> String {
    format!("KindManifest/{kind}.v{version}")
}

/// Reads the objects of one parsed document (`List` documents hold several
/// in `items`). Errors say what is wrong without the location, which the
/// caller adds.
pub fn parse(document: Value) -> Result<Vec<Object>, String> {
    let Value::Object(mut map) = document else {
        return Err("a document must be a mapping with apiVersion and type".to_owned());
    };
    // A manifest file of examples/ (the body of ApplyKindManifest, as
    // `buf curl -d @file` sends it) is a kind manifest too.
    if !map.contains_key("apiVersion") && map.get("manifest").is_some_and(Value::is_object) {
        let Some(manifest) = map.remove("manifest") else {
            return Err("manifest is missing".to_owned());
        };
        return Ok(vec![Object::KindManifest(kind_manifest(manifest)?)]);
    }
    match map.remove("apiVersion") {
        Some(Value::String(v)) if v == API_VERSION => {}
        Some(_) => return Err(format!("apiVersion must be {API_VERSION:?}")),
        None => return Err(format!("apiVersion is missing (it must be {API_VERSION:?})")),
    }
    let type_name = match map.remove("type") {
        Some(Value::String(t)) => t,
        _ => {
            return Err(
                "type is missing: one of KindManifest, Resource, ProviderConfig, ReactorBinding, List".to_owned(),
            );
        }
    };
    if type_name == "List" {
        let Some(Value::Array(items)) = map.remove("items") else {
            return Err("a List needs an items array".to_owned());
        };
        if let Some(extra) = map.keys().next() {
            return Err(format!("unknown field `{extra}` in a List"));
        }
        let mut objects = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            objects.extend(parse(item).map_err(|e| format!("items[{i}]: {e}"))?);
        }
        return Ok(objects);
    }
    let Some(object_type) = ObjectType::parse(&type_name) else {
        return Err(format!(
            "type {:?} is not one of KindManifest, Resource, ProviderConfig, ReactorBinding, List",
            converge_service::domain::names::first_chars(&type_name, 64)
        ));
    };
    for field in object_type.output_only() {
        map.remove(*field);
    }
    let body = Value::Object(map);
    let object = match object_type {
        ObjectType::KindManifest => Object::KindManifest(kind_manifest(body)?),
        ObjectType::Resource => Object::Resource(resource(body)?),
        ObjectType::ProviderConfig => Object::ProviderConfig(provider_config(body)?),
        ObjectType::ReactorBinding => Object::ReactorBinding(reactor_binding(body)?),
    };
    Ok(vec![object])
}

/// The manifest parser of the example files, whose messages name a file:
/// here the caller names the document.
fn kind_manifest(body: Value) -> Result<pb::KindManifest, String> {
    converge_examples::manifest::parse_manifest("document", body)
        .map_err(|e| e.to_string().trim_start_matches("manifest file document: ").to_owned())
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ResourceDoc {
    kind: String,
    #[serde(alias = "kind_version")]
    kind_version: i32,
    name: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    spec: Option<Value>,
    #[serde(default, alias = "provider_config")]
    provider_config: Option<String>,
}

fn resource(body: Value) -> Result<pb::ApplyResourceRequest, String> {
    let doc: ResourceDoc = serde_json::from_value(body).map_err(|e| e.to_string())?;
    Ok(pb::ApplyResourceRequest {
        kind: doc.kind,
        kind_version: doc.kind_version,
        name: doc.name,
        labels: doc.labels,
        spec: object_field(doc.spec, "spec")?,
        provider_config: doc.provider_config,
        ..Default::default()
    })
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProviderConfigDoc {
    name: String,
    kind: String,
    #[serde(alias = "kind_version")]
    kind_version: i32,
    #[serde(default, alias = "is_default")]
    is_default: bool,
    #[serde(default)]
    spec: Option<Value>,
    /// Opaque bytes, base64 as in the proto3 JSON mapping.
    #[serde(default)]
    data: Option<String>,
}

fn provider_config(body: Value) -> Result<pb::ProviderConfig, String> {
    let doc: ProviderConfigDoc = serde_json::from_value(body).map_err(|e| e.to_string())?;
    let data = match doc.data {
        Some(text) => base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|e| format!("data must be base64: {e}"))?,
        None => Vec::new(),
    };
    Ok(pb::ProviderConfig {
        name: doc.name,
        kind: doc.kind,
        kind_version: doc.kind_version,
        is_default: doc.is_default,
        spec: object_field(doc.spec, "spec")?,
        data,
        ..Default::default()
    })
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ReactorBindingDoc {
    name: String,
    #[serde(alias = "watch_kind")]
    watch_kind: String,
    #[serde(default, alias = "watch_kind_version")]
    watch_kind_version: Option<i32>,
    transition: String,
    #[serde(default, alias = "label_match")]
    label_match: BTreeMap<String, String>,
    reactor: String,
    #[serde(default, alias = "reactor_version")]
    reactor_version: Option<i32>,
    #[serde(default)]
    enabled: Option<bool>,
}

fn reactor_binding(body: Value) -> Result<pb::ReactorBinding, String> {
    let doc: ReactorBindingDoc = serde_json::from_value(body).map_err(|e| e.to_string())?;
    let transition = pb::Transition::from_str_name(&doc.transition).ok_or_else(|| {
        format!(
            "transition {:?} is not a known transition (use the proto name, e.g. TRANSITION_SYNCED)",
            converge_service::domain::names::first_chars(&doc.transition, 64)
        )
    })?;
    Ok(pb::ReactorBinding {
        name: doc.name,
        watch_kind: doc.watch_kind,
        watch_kind_version: doc.watch_kind_version,
        transition: transition as i32,
        label_match: doc.label_match,
        reactor: doc.reactor,
        reactor_version: doc.reactor_version,
        enabled: doc.enabled,
        ..Default::default()
    })
}

fn object_field(value: Option<Value>, field: &str) -> Result<Option<prost_types::Struct>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => json_to_struct(&v)
            .map(Some)
            .ok_or_else(|| format!("{field} must be a mapping")),
    }
}

/// A timestamp as RFC 3339 text.
pub fn timestamp(t: &prost_types::Timestamp) -> String {
    chrono::DateTime::from_timestamp(t.seconds, u32::try_from(t.nanos).unwrap_or(0))
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// Inserts `key: value` unless the value is the field's default (empty,
/// zero, false, absent), as the proto3 JSON mapping prints.
fn put(map: &mut Map<String, Value>, key: &str, value: Value) {
    let empty = match &value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    };
    if !empty {
        map.insert(key.to_owned(), value);
    }
}

fn head(object_type: &str) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert("apiVersion".to_owned(), json!(API_VERSION));
    map.insert("type".to_owned(), json!(object_type));
    map
}

fn time(t: Option<&prost_types::Timestamp>) -> Value {
    t.map_or(Value::Null, |t| json!(timestamp(t)))
}

fn reference(r: Option<&pb::ResourceRef>) -> Value {
    r.map_or(Value::Null, |r| json!({"kind": r.kind, "name": r.name}))
}

fn labels(map: &BTreeMap<String, String>) -> Value {
    json!(map)
}

/// The proto name of a phase (`PHASE_READY`).
pub fn phase_proto_name(phase: i32) -> &'static str {
    pb::Phase::try_from(phase).map_or("PHASE_UNSPECIFIED", |p| p.as_str_name())
}

/// A resource as its envelope.
pub fn resource_value(r: &pb::Resource) -> Value {
    let mut m = head("Resource");
    put(&mut m, "kind", json!(r.kind));
    put(&mut m, "kindVersion", json!(r.kind_version));
    put(&mut m, "name", json!(r.name));
    put(&mut m, "labels", labels(&r.labels));
    m.insert(
        "spec".to_owned(),
        r.spec.clone().map_or_else(|| json!({}), struct_to_json),
    );
    put(&mut m, "providerConfig", json!(r.provider_config));
    put(&mut m, "uid", json!(r.uid));
    put(&mut m, "status", r.status.clone().map_or(Value::Null, struct_to_json));
    put(&mut m, "generation", json!(r.generation));
    put(&mut m, "observedGeneration", json!(r.observed_generation));
    put(&mut m, "resourceVersion", json!(r.resource_version));
    put(&mut m, "phase", json!(phase_proto_name(r.phase)));
    let conditions: Vec<Value> = r
        .conditions
        .iter()
        .map(|c| {
            let mut cm = Map::new();
            put(&mut cm, "type", json!(c.r#type));
            put(
                &mut cm,
                "status",
                json!(
                    pb::ConditionStatus::try_from(c.status).map_or("CONDITION_STATUS_UNSPECIFIED", |s| s.as_str_name())
                ),
            );
            put(&mut cm, "reason", json!(c.reason));
            put(&mut cm, "message", json!(c.message));
            put(&mut cm, "lastTransitionTime", time(c.last_transition_time.as_ref()));
            put(&mut cm, "observedGeneration", json!(c.observed_generation));
            Value::Object(cm)
        })
        .collect();
    put(&mut m, "conditions", json!(conditions));
    put(&mut m, "owner", reference(r.owner.as_ref()));
    put(&mut m, "root", reference(r.root.as_ref()));
    put(&mut m, "finalizers", json!(r.finalizers));
    put(&mut m, "createTime", time(r.create_time.as_ref()));
    put(&mut m, "updateTime", time(r.update_time.as_ref()));
    put(&mut m, "deleteTime", time(r.delete_time.as_ref()));
    put(&mut m, "etag", json!(r.etag));
    put(&mut m, "healthy", json!(r.healthy));
    put(&mut m, "failureAttempts", json!(r.failure_attempts));
    put(&mut m, "failedGeneration", json!(r.failed_generation));
    put(&mut m, "quarantined", json!(r.quarantined));
    put(&mut m, "orphanExpireTime", time(r.orphan_expire_time.as_ref()));
    put(&mut m, "manifestVersion", json!(r.manifest_version.to_string()));
    Value::Object(m)
}

/// A kind manifest as its envelope (the fields of the manifest files in
/// examples/).
pub fn kind_manifest_value(k: &pb::KindManifest) -> Value {
    let mut m = head("KindManifest");
    put(&mut m, "kind", json!(k.kind));
    put(&mut m, "kindVersion", json!(k.kind_version));
    put(&mut m, "description", json!(k.description));
    put(
        &mut m,
        "specSchema",
        k.spec_schema.clone().map_or(Value::Null, struct_to_json),
    );
    put(
        &mut m,
        "statusSchema",
        k.status_schema.clone().map_or(Value::Null, struct_to_json),
    );
    put(
        &mut m,
        "configSchema",
        k.config_schema.clone().map_or(Value::Null, struct_to_json),
    );
    let reactions: Vec<Value> = k
        .reactions
        .iter()
        .map(|r| {
            let mut rm = Map::new();
            put(&mut rm, "name", json!(r.name));
            put(
                &mut rm,
                "trigger",
                json!(pb::Trigger::try_from(r.trigger).map_or("TRIGGER_UNSPECIFIED", |t| t.as_str_name())),
            );
            let emits: Vec<&str> = r
                .emits
                .iter()
                .map(|e| pb::Emit::try_from(*e).map_or("EMIT_UNSPECIFIED", |e| e.as_str_name()))
                .collect();
            put(&mut rm, "emits", json!(emits));
            put(&mut rm, "verb", json!(r.verb));
            put(&mut rm, "finalizer", json!(r.finalizer));
            put(
                &mut rm,
                "inputSchema",
                r.input_schema.clone().map_or(Value::Null, struct_to_json),
            );
            Value::Object(rm)
        })
        .collect();
    put(&mut m, "reactions", json!(reactions));
    put(&mut m, "finalizerName", json!(k.finalizer_name));
    let conversions: Vec<Value> = k
        .conversions
        .iter()
        .map(|c| {
            let fields: Vec<Value> = c
                .fields
                .iter()
                .map(|f| {
                    let mut fm = Map::new();
                    put(&mut fm, "path", json!(f.path));
                    put(&mut fm, "value", json!(f.value));
                    put(&mut fm, "remove", json!(f.remove));
                    Value::Object(fm)
                })
                .collect();
            let mut cm = Map::new();
            put(&mut cm, "fromVersion", json!(c.from_version));
            put(&mut cm, "spec", json!(c.spec));
            put(&mut cm, "fields", json!(fields));
            Value::Object(cm)
        })
        .collect();
    put(&mut m, "conversions", json!(conversions));
    if let Some(c) = &k.composition {
        put(&mut m, "composition", composition_value(c));
    }
    if let Some(p) = &k.policy {
        let mut pm = Map::new();
        put(&mut pm, "maxInflight", json!(p.max_inflight));
        put(&mut pm, "taskDeadlineSecs", json!(p.task_deadline_secs));
        put(&mut pm, "resyncIntervalSecs", json!(p.resync_interval_secs));
        put(&mut pm, "resyncRecomposes", json!(p.resync_recomposes));
        put(&mut pm, "orphanGraceSecs", json!(p.orphan_grace_secs));
        put(&mut pm, "maxTransientAttempts", json!(p.max_transient_attempts));
        put(
            &mut pm,
            "unservedConditionAfterSecs",
            json!(p.unserved_condition_after_secs),
        );
        put(&mut pm, "retryBaseMs", json!(p.retry_base_ms));
        put(&mut pm, "retryCapMs", json!(p.retry_cap_ms));
        if let Ok(jitter) = pb::RetryJitter::try_from(p.retry_jitter)
            && jitter != pb::RetryJitter::Unspecified
        {
            put(&mut pm, "retryJitter", json!(jitter.as_str_name()));
        }
        put(&mut m, "policy", Value::Object(pm));
    }
    put(&mut m, "manifestVersion", json!(k.manifest_version.to_string()));
    put(&mut m, "createTime", time(k.create_time.as_ref()));
    put(&mut m, "updateTime", time(k.update_time.as_ref()));
    Value::Object(m)
}

/// A composition declared as data, in the field names of the contract.
fn composition_value(c: &pb::Composition) -> Value {
    let resources: Vec<Value> = c
        .resources
        .iter()
        .map(|r| {
            let mut rm = Map::new();
            put(&mut rm, "id", json!(r.id));
            put(&mut rm, "kind", json!(r.kind));
            put(&mut rm, "kindVersion", json!(r.kind_version));
            put(&mut rm, "name", json!(r.name));
            put(&mut rm, "labels", json!(r.labels));
            put(&mut rm, "spec", r.spec.clone().map_or(Value::Null, struct_to_json));
            put(&mut rm, "forEach", json!(r.for_each));
            put(&mut rm, "includeWhen", json!(r.include_when));
            put(&mut rm, "providerConfig", json!(r.provider_config));
            Value::Object(rm)
        })
        .collect();
    let mut cm = Map::new();
    put(&mut cm, "resources", json!(resources));
    if let Some(rollup) = &c.rollup {
        let mut rm = Map::new();
        put(
            &mut rm,
            "status",
            rollup.status.clone().map_or(Value::Null, struct_to_json),
        );
        put(&mut rm, "ready", json!(rollup.ready));
        put(&mut rm, "message", json!(rollup.message));
        put(&mut cm, "rollup", Value::Object(rm));
    }
    Value::Object(cm)
}

/// A provider config as its envelope.
pub fn provider_config_value(c: &pb::ProviderConfig) -> Value {
    let mut m = head("ProviderConfig");
    put(&mut m, "name", json!(c.name));
    put(&mut m, "kind", json!(c.kind));
    put(&mut m, "kindVersion", json!(c.kind_version));
    put(&mut m, "isDefault", json!(c.is_default));
    put(&mut m, "spec", c.spec.clone().map_or(Value::Null, struct_to_json));
    put(
        &mut m,
        "data",
        json!(base64::engine::general_purpose::STANDARD.encode(&c.data)),
    );
    put(&mut m, "owner", reference(c.owner.as_ref()));
    put(&mut m, "createTime", time(c.create_time.as_ref()));
    put(&mut m, "updateTime", time(c.update_time.as_ref()));
    put(&mut m, "etag", json!(c.etag));
    Value::Object(m)
}

/// The proto name of a transition (`TRANSITION_SYNCED`).
pub fn transition_name(t: i32) -> &'static str {
    pb::Transition::try_from(t).map_or("TRANSITION_UNSPECIFIED", |t| t.as_str_name())
}

/// A reactor binding as its envelope.
pub fn reactor_binding_value(b: &pb::ReactorBinding) -> Value {
    let mut m = head("ReactorBinding");
    put(&mut m, "name", json!(b.name));
    put(&mut m, "watchKind", json!(b.watch_kind));
    if let Some(v) = b.watch_kind_version {
        m.insert("watchKindVersion".to_owned(), json!(v));
    }
    put(&mut m, "transition", json!(transition_name(b.transition)));
    put(&mut m, "labelMatch", labels(&b.label_match));
    put(&mut m, "reactor", json!(b.reactor));
    if let Some(v) = b.reactor_version {
        m.insert("reactorVersion".to_owned(), json!(v));
    }
    if let Some(enabled) = b.enabled {
        m.insert("enabled".to_owned(), json!(enabled));
    }
    put(&mut m, "createTime", time(b.create_time.as_ref()));
    put(&mut m, "updateTime", time(b.update_time.as_ref()));
    put(&mut m, "etag", json!(b.etag));
    put(&mut m, "pendingDeliveries", json!(b.pending_deliveries));
    put(&mut m, "failedDeliveries", json!(b.failed_deliveries));
    put(&mut m, "lastFailure", json!(b.last_failure));
    Value::Object(m)
}

/// A reactor delivery (output only: `deliveries list` prints it).
pub fn reactor_delivery_value(d: &pb::ReactorDelivery) -> Value {
    let mut m = head("ReactorDelivery");
    put(&mut m, "id", json!(d.id));
    put(&mut m, "binding", json!(d.binding));
    put(&mut m, "reactor", json!(d.reactor));
    if let Some(v) = d.reactor_version {
        m.insert("reactorVersion".to_owned(), json!(v));
    }
    put(&mut m, "transition", json!(transition_name(d.transition)));
    put(&mut m, "resource", reference(d.resource.as_ref()));
    put(&mut m, "resourceUid", json!(d.resource_uid));
    put(&mut m, "generation", json!(d.generation));
    put(&mut m, "dedupToken", json!(d.dedup_token));
    put(&mut m, "attempts", json!(d.attempts));
    put(&mut m, "createTime", time(d.create_time.as_ref()));
    put(&mut m, "nextAttemptTime", time(d.next_attempt_time.as_ref()));
    put(&mut m, "failTime", time(d.fail_time.as_ref()));
    put(&mut m, "lastError", json!(d.last_error));
    put(&mut m, "leased", json!(d.leased));
    Value::Object(m)
}

/// The proto name of an operation state.
pub fn operation_state_name(s: i32) -> &'static str {
    pb::OperationState::try_from(s).map_or("OPERATION_STATE_UNSPECIFIED", |s| s.as_str_name())
}

/// An operation (output only: `get` prints it, `apply` refuses it).
pub fn operation_value(o: &pb::Operation) -> Value {
    let mut m = head("Operation");
    put(&mut m, "uid", json!(o.uid));
    put(&mut m, "resource", reference(o.resource.as_ref()));
    put(&mut m, "resourceUid", json!(o.resource_uid));
    put(&mut m, "verb", json!(o.verb));
    put(&mut m, "input", o.input.clone().map_or(Value::Null, struct_to_json));
    put(&mut m, "output", o.output.clone().map_or(Value::Null, struct_to_json));
    put(&mut m, "state", json!(operation_state_name(o.state)));
    if let Some(e) = &o.error {
        m.insert("error".to_owned(), json!({"code": e.code, "message": e.message}));
    }
    put(&mut m, "attempts", json!(o.attempts));
    put(&mut m, "requestedBy", json!(o.requested_by));
    put(&mut m, "createTime", time(o.create_time.as_ref()));
    put(&mut m, "completeTime", time(o.complete_time.as_ref()));
    put(&mut m, "pendingReason", json!(o.pending_reason));
    put(&mut m, "nextAttemptTime", time(o.next_attempt_time.as_ref()));
    Value::Object(m)
}

/// A cluster member (output only).
pub fn member_value(c: &pb::ClusterMember) -> Value {
    let mut m = head("ClusterMember");
    put(&mut m, "memberId", json!(c.member_id));
    put(
        &mut m,
        "role",
        json!(pb::MemberRole::try_from(c.role).map_or("MEMBER_ROLE_UNSPECIFIED", |r| r.as_str_name())),
    );
    if let Some(r) = &c.shard_range {
        m.insert("shardRange".to_owned(), json!({"lo": r.lo, "hi": r.hi}));
    }
    put(&mut m, "version", json!(c.version));
    put(&mut m, "hostname", json!(c.hostname));
    put(&mut m, "pid", json!(c.pid));
    put(&mut m, "startTime", time(c.start_time.as_ref()));
    put(&mut m, "lastHeartbeatTime", time(c.last_heartbeat_time.as_ref()));
    put(&mut m, "ready", json!(c.ready));
    put(&mut m, "inFlight", json!(c.in_flight));
    put(&mut m, "connectedWorkers", json!(c.connected_workers));
    let workers: Vec<Value> = c
        .workers
        .iter()
        .map(|w| {
            json!({
                "identity": w.identity,
                "agent": w.agent,
                "kinds": w.kinds.iter().map(|k| json!({"kind": k.kind, "kindVersion": k.kind_version, "ready": k.ready})).collect::<Vec<_>>(),
                "maxInflight": w.max_inflight,
                "inFlight": w.in_flight,
            })
        })
        .collect();
    put(&mut m, "workers", json!(workers));
    Value::Object(m)
}

/// A retained spec revision of the resource `kind`/`name` (output only).
pub fn spec_revision_value(kind: &str, name: &str, r: &pb::SpecRevision) -> Value {
    let mut m = head("SpecRevision");
    put(&mut m, "resource", json!({"kind": kind, "name": name}));
    put(&mut m, "generation", json!(r.generation));
    put(&mut m, "kindVersion", json!(r.kind_version));
    put(
        &mut m,
        "source",
        json!(
            pb::SpecRevisionSource::try_from(r.source).map_or("SPEC_REVISION_SOURCE_UNSPECIFIED", |s| s.as_str_name())
        ),
    );
    if let Some(g) = r.restored_generation {
        m.insert("restoredGeneration".to_owned(), json!(g));
    }
    put(&mut m, "createTime", time(r.create_time.as_ref()));
    // An empty spec is still the spec of that generation.
    m.insert("spec".to_owned(), r.spec.clone().map_or(json!({}), struct_to_json));
    Value::Object(m)
}

/// An event run (output only).
pub fn event_value(e: &pb::ResourceEvent) -> Value {
    let mut m = head("ResourceEvent");
    put(&mut m, "uid", json!(e.uid));
    put(&mut m, "resource", reference(e.resource.as_ref()));
    put(&mut m, "category", json!(e.category));
    put(
        &mut m,
        "eventType",
        json!(pb::EventType::try_from(e.r#type).map_or("EVENT_TYPE_UNSPECIFIED", |t| t.as_str_name())),
    );
    put(&mut m, "reason", json!(e.reason));
    put(&mut m, "message", json!(e.message));
    put(&mut m, "detail", e.detail.clone().map_or(Value::Null, struct_to_json));
    put(&mut m, "count", json!(e.count));
    put(&mut m, "firstTime", time(e.first_time.as_ref()));
    put(&mut m, "lastTime", time(e.last_time.as_ref()));
    put(&mut m, "actor", json!(e.actor));
    put(&mut m, "generation", json!(e.generation));
    put(&mut m, "eventVersion", json!(e.event_version));
    Value::Object(m)
}

/// A fleet summary as its envelope (output only).
pub fn fleet_summary_value(s: &pb::GetFleetSummaryResponse) -> Value {
    let mut m = head("FleetSummary");
    put(&mut m, "asOf", time(s.as_of.as_ref()));
    put(&mut m, "total", json!(s.total));
    let counts: Vec<Value> = s
        .phase_counts
        .iter()
        .map(|c| json!({"kind": c.kind, "kindVersion": c.kind_version, "phase": phase_proto_name(c.phase), "count": c.count}))
        .collect();
    put(&mut m, "phaseCounts", json!(counts));
    let failures: Vec<Value> = s
        .top_failures
        .iter()
        .map(|f| {
            json!({"kind": f.kind, "stage": f.stage, "reason": f.reason, "count": f.count,
                   "example": reference(f.example.as_ref()), "exampleMessage": f.example_message})
        })
        .collect();
    put(&mut m, "topFailures", json!(failures));
    let oldest: Vec<Value> = s
        .oldest
        .iter()
        .map(|o| json!({"phase": phase_proto_name(o.phase), "resource": reference(o.resource.as_ref()), "since": time(o.since.as_ref())}))
        .collect();
    put(&mut m, "oldest", json!(oldest));
    let unserved: Vec<Value> = s
        .unserved
        .iter()
        .map(|u| json!({"kind": u.kind, "kindVersion": u.kind_version, "tasks": u.tasks, "oldestSince": time(u.oldest_since.as_ref())}))
        .collect();
    put(&mut m, "unserved", json!(unserved));
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_parses_with_camel_or_snake_names() {
        let docs = json!({"apiVersion": API_VERSION, "type": "List", "items": [
            {"apiVersion": API_VERSION, "type": "KindManifest", "kind": "noop", "kindVersion": 1,
             "reactions": [{"name": "work", "trigger": "TRIGGER_SPEC_CHANGE", "emits": ["EMIT_STATUS"]}]},
            {"apiVersion": API_VERSION, "type": "Resource", "kind": "noop", "kind_version": 1, "name": "a",
             "labels": {"team": "x"}, "spec": {"n": 1}},
            {"apiVersion": API_VERSION, "type": "ProviderConfig", "name": "c", "kind": "noop", "kindVersion": 1,
             "isDefault": true, "spec": {"org": "o"}, "data": "aGk="},
            {"apiVersion": API_VERSION, "type": "ReactorBinding", "name": "b", "watchKind": "noop",
             "transition": "TRANSITION_SYNCED", "reactor": "pub"},
        ]});
        let objects = parse(docs).unwrap();
        let names: Vec<String> = objects.iter().map(Object::display_name).collect();
        assert_eq!(
            names,
            [
                "KindManifest/noop.v1",
                "Resource/noop/a",
                "ProviderConfig/c",
                "ReactorBinding/b"
            ]
        );
        let Object::ProviderConfig(c) = &objects[2] else {
            panic!()
        };
        assert_eq!(c.data, b"hi");
    }

    #[test]
    fn printed_objects_parse_back_to_the_same_request() {
        let resource = pb::Resource {
            kind: "noop".into(),
            kind_version: 2,
            name: "a".into(),
            labels: [("team".to_owned(), "x".to_owned())].into(),
            spec: json_to_struct(&json!({"n": 1, "s": {"t": [true]}})),
            status: json_to_struct(&json!({"seen": 1})),
            generation: 3,
            phase: pb::Phase::Ready as i32,
            etag: "e".into(),
            ..Default::default()
        };
        let objects = parse(resource_value(&resource)).unwrap();
        assert_eq!(
            objects,
            [Object::Resource(pb::ApplyResourceRequest {
                kind: "noop".into(),
                kind_version: 2,
                name: "a".into(),
                labels: resource.labels.clone(),
                spec: resource.spec.clone(),
                ..Default::default()
            })]
        );
        let binding = pb::ReactorBinding {
            name: "b".into(),
            watch_kind: "bom".into(),
            transition: pb::Transition::Synced as i32,
            reactor: "pub".into(),
            enabled: Some(true),
            pending_deliveries: 4,
            ..Default::default()
        };
        assert_eq!(
            parse(reactor_binding_value(&binding)).unwrap(),
            [Object::ReactorBinding(pb::ReactorBinding {
                pending_deliveries: 0,
                ..binding
            })]
        );
    }

    #[test]
    fn the_example_manifest_files_are_kind_manifests() {
        let file: Value = serde_json::from_str(include_str!("../../../examples/noop/manifest.json")).unwrap();
        let objects = parse(file).unwrap();
        assert_eq!(objects.len(), 1);
        assert_eq!(objects[0].display_name(), "KindManifest/noop.v1");
    }

    #[test]
    fn bad_documents_say_what_is_wrong() {
        let err = |v: Value| parse(v).unwrap_err();
        assert!(err(json!([1])).contains("mapping"));
        assert!(err(json!({"type": "Resource"})).contains("apiVersion is missing"));
        assert!(err(json!({"apiVersion": "v1", "type": "Resource"})).contains("apiVersion must be"));
        assert!(err(json!({"apiVersion": API_VERSION, "type": "Pod"})).contains("is not one of"));
        let typo = err(
            json!({"apiVersion": API_VERSION, "type": "Resource", "kind": "k", "kindVersion": 1,
                              "name": "n", "sepc": {}}),
        );
        assert!(typo.contains("unknown field `sepc`"), "{typo}");
        let spec = err(
            json!({"apiVersion": API_VERSION, "type": "Resource", "kind": "k", "kindVersion": 1,
                              "name": "n", "spec": [1]}),
        );
        assert!(spec.contains("spec must be a mapping"), "{spec}");
        let transition = err(json!({"apiVersion": API_VERSION, "type": "ReactorBinding", "name": "b",
                                    "watchKind": "k", "transition": "SYNCED", "reactor": "r"}));
        assert!(transition.contains("TRANSITION_SYNCED"), "{transition}");
    }
}
