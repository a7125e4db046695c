//! The resource write path of ApplyResource, CreateResource and
//! BatchApplyResources. A batch is validated item by item, then read and
//! written with set-based statements, so N resources share a handful of
//! statements and one commit instead of N of each.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use converge_proto::v1::{ApplyResourceRequest, CreateResourceRequest};
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use super::check_etag;
use crate::api::ApiState;
use crate::api::keys::resource_not_found;
use crate::contract::convert::struct_to_json;
use crate::contract::status::{ApiError, Reason};
use crate::domain::compiled::{CompiledKind, Refusal};
use crate::domain::event::NewEvent;
use crate::domain::labels::validate_labels;
use crate::domain::names::{validate_kind_name, validate_kind_version, validate_resource_name};
use crate::domain::resource::{FIRST_GENERATION, MAX_SPEC_BYTES, Resource};
use crate::domain::violation::Violation;
use crate::store::kinds::KindState;
use crate::store::resources::{self, DesiredResource};
use crate::store::revisions::{self, NewRevision, Source};
use crate::store::{events, kinds, provider_configs, work};

/// Most items one BatchApplyResources call may carry.
pub(super) const MAX_BATCH_ITEMS: usize = 1000;

/// How a write treats an existing resource of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Create or update.
    Apply,
    /// Create only.
    Create,
}

/// A validated resource write.
#[derive(Debug, Clone)]
pub(crate) struct ResourceWrite {
    kind: String,
    kind_version: i32,
    name: String,
    labels: BTreeMap<String, String>,
    spec: Value,
    etag: Option<String>,
    provider_config: Option<Option<String>>,
    mode: Mode,
    /// For a rollback, the generation whose spec is restored.
    restores: Option<i64>,
    /// For a kind migration's conversion, the version converted from.
    converts_from: Option<i32>,
}

impl ResourceWrite {
    /// The same write under another name (a generated name's next try).
    pub(super) fn renamed(&self, name: String) -> Self {
        Self { name, ..self.clone() }
    }

    /// Whether `principal` may make this write (ADR 47).
    pub(super) async fn authorize(
        &self,
        state: &ApiState,
        principal: &crate::contract::authz::Principal,
    ) -> Result<(), ApiError> {
        let action =
            crate::contract::authz::on_version(crate::domain::authz::Verb::Apply, &self.kind, self.kind_version);
        crate::api::authorize::require_resource(state, principal, action, &self.name, Some(&self.labels)).await
    }

    /// Validates everything that needs no database: names, labels, spec size.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        mode: Mode,
        kind: String,
        kind_version: i32,
        name: String,
        labels: BTreeMap<String, String>,
        spec: Option<prost_types::Struct>,
        etag: Option<String>,
        provider_config: Option<Option<String>>,
    ) -> Result<Self, ApiError> {
        let mut violations = Vec::new();
        let mut reason = Reason::InvalidField;
        if let Err(v) = validate_kind_name("/kind", &kind) {
            violations.push(v);
            reason = Reason::InvalidName;
        }
        violations.extend(validate_kind_version("/kind_version", kind_version).err());
        if let Err(v) = validate_resource_name("/name", &name) {
            violations.push(v);
            reason = Reason::InvalidName;
        }
        if let Err(label_violations) = validate_labels(&labels) {
            if violations.is_empty() {
                reason = Reason::InvalidLabels;
            }
            violations.extend(label_violations);
        }
        if !violations.is_empty() {
            return Err(ApiError::violations(reason, violations));
        }
        let spec = struct_to_json("/spec", spec)?;
        let size = serde_json::to_vec(&spec).map(|b| b.len()).unwrap_or(usize::MAX);
        if size > MAX_SPEC_BYTES {
            return Err(ApiError::violations(
                Reason::SpecTooLarge,
                vec![Violation::new(
                    "/spec",
                    format!("is {size} bytes of JSON; the limit is {MAX_SPEC_BYTES}"),
                )],
            ));
        }
        Ok(Self {
            kind,
            kind_version,
            name,
            labels,
            spec,
            etag,
            provider_config,
            mode,
            restores: None,
            converts_from: None,
        })
    }

    /// The write of a rollback of `current` to `spec`, the spec of its
    /// revision `generation` written for `kind_version` (`None`: the
    /// resource's own): labels and override stay as stored.
    pub(super) fn rollback(
        current: &Resource,
        spec: Value,
        kind_version: Option<i32>,
        generation: i64,
        etag: Option<String>,
    ) -> Self {
        Self {
            kind: current.kind.clone(),
            kind_version: kind_version.unwrap_or(current.kind_version),
            name: current.name.clone(),
            labels: current.labels.clone(),
            spec,
            etag,
            provider_config: None,
            mode: Mode::Apply,
            restores: Some(generation),
            converts_from: None,
        }
    }

    /// The write of a kind migration's conversion of the resource
    /// `kind/name` (row-locked by the migration, labels unchanged) from
    /// `from_version` to `to_version` with the converted `spec`.
    pub(crate) fn conversion(
        kind: &str,
        name: &str,
        labels: BTreeMap<String, String>,
        (from_version, to_version): (i32, i32),
        spec: Value,
    ) -> Self {
        Self {
            kind: kind.to_owned(),
            kind_version: to_version,
            name: name.to_owned(),
            labels,
            spec,
            etag: None,
            provider_config: None,
            mode: Mode::Apply,
            restores: None,
            converts_from: Some(from_version),
        }
    }

    /// The write an `ApplyResource` request (or a batch item) asks for.
    pub(super) fn apply(req: &ApplyResourceRequest) -> Result<Self, ApiError> {
        Self::new(
            Mode::Apply,
            req.kind.clone(),
            req.kind_version,
            req.name.clone(),
            req.labels.clone(),
            req.spec.clone(),
            req.etag.clone(),
            req.provider_config.clone().map(|p| (!p.is_empty()).then_some(p)),
        )
    }

    /// The write a `CreateResource` request asks for, under `name` (the
    /// request's, or one generated from its `generate_name`).
    pub(super) fn create(req: &CreateResourceRequest, name: &str) -> Result<Self, ApiError> {
        Self::new(
            Mode::Create,
            req.kind.clone(),
            req.kind_version,
            name.to_owned(),
            req.labels.clone(),
            req.spec.clone(),
            None,
            Some((!req.provider_config.is_empty()).then(|| req.provider_config.clone())),
        )
    }

    fn desired(&self) -> DesiredResource<'_> {
        DesiredResource {
            kind: &self.kind,
            kind_version: self.kind_version,
            name: &self.name,
            labels: &self.labels,
            spec: &self.spec,
            provider_config: self.provider_config.as_ref().map(|p| p.as_deref()),
        }
    }
}

/// What a resource write produced.
pub(crate) struct Written {
    /// The resource as stored.
    pub(crate) resource: Resource,
    /// Whether this write created it.
    pub(super) created: bool,
    /// The manifest version it was validated under.
    pub(super) manifest_version: i64,
}

/// An item's outcome while its batch is being written.
enum Slot {
    /// Updated (or unchanged): the resource as it is now.
    Updated(Box<Written>),
    /// Inserted: the resource as stored.
    Created(Box<Resource>),
}

/// Where a batch item's refusals point: `/requests/{i}` in a batch, the
/// request itself for a single write.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Items {
    /// One write: refusals name the request's own fields.
    Single,
    /// A batch: refusals name the item under `/requests/{i}`.
    Batch,
}

impl Items {
    fn at(self, index: usize, error: ApiError) -> ApiError {
        match self {
            Items::Single => error,
            Items::Batch => error.within(&format!("/requests/{index}")),
        }
    }
}

/// Writes resources inside the caller's transaction; answers in input
/// order. Any refusal refuses the whole batch (the caller's transaction
/// rolls back).
pub(crate) async fn write_resources(
    conn: &mut PgConnection,
    state: &ApiState,
    actor: &str,
    inputs: &[ResourceWrite],
    items: Items,
) -> Result<Vec<Written>, ApiError> {
    let mut first_of: HashMap<(&str, &str), usize> = HashMap::new();
    for (i, input) in inputs.iter().enumerate() {
        if let Some(first) = first_of.insert((&input.kind, &input.name), i) {
            let repeated = Violation::new(
                "/name",
                format!("{}/{} is also item {first} of this batch", input.kind, input.name),
            );
            return Err(items.at(i, ApiError::violations(Reason::InvalidField, vec![repeated])));
        }
    }
    let kind_states = lock_kinds(conn, inputs, items).await?;
    let compiled = validate_specs(conn, state, inputs, &kind_states, items).await?;

    let mut written: Vec<Option<Slot>> = inputs.iter().map(|_| None).collect();
    let mut to_schedule: Vec<Uuid> = Vec::new();
    let first = NewEvent::lifecycle("Created", format!("created at generation {FIRST_GENERATION}"));
    let mut pending: Vec<usize> = (0..inputs.len()).collect();
    // Two passes at most: the second takes the creates that lost a race to
    // a concurrent writer of the same name, as updates.
    for _ in 0..2 {
        if pending.is_empty() {
            break;
        }
        let keys: Vec<(String, String)> = pending
            .iter()
            .map(|&i| (inputs[i].kind.clone(), inputs[i].name.clone()))
            .collect();
        let mut existing = resources::find_many_for_update(conn, &keys).await?;
        let mut creates = Vec::new();
        let mut updates = Vec::new();
        for (&i, key) in pending.iter().zip(keys) {
            let input = &inputs[i];
            let kind_state = state_of(&kind_states, input)?;
            match existing.remove(&key) {
                Some(current) => {
                    check_writable(&current, input, kind_state.retired).map_err(|e| items.at(i, e))?;
                    check_transition(&compiled, input, &current).map_err(|e| items.at(i, e))?;
                    updates.push((i, current));
                }
                None if input.etag.is_some() => {
                    return Err(items.at(i, resource_not_found(&input.kind, &input.name)));
                }
                None if kind_state.retired => return Err(items.at(i, retired(&input.kind, input.kind_version))),
                None => creates.push(i),
            }
        }
        for (i, resource, reschedule) in update(conn, state, actor, inputs, updates).await? {
            if reschedule {
                to_schedule.push(resource.id);
            }
            written[i] = Some(Slot::Updated(Box::new(Written {
                resource,
                created: false,
                manifest_version: state_of(&kind_states, &inputs[i])?.manifest_version,
            })));
        }
        let desired: Vec<DesiredResource<'_>> = creates.iter().map(|&i| inputs[i].desired()).collect();
        let mut inserted = resources::insert_many(conn, &desired, &first, actor).await?;
        pending = Vec::new();
        for i in creates {
            match inserted.remove(&(inputs[i].kind.clone(), inputs[i].name.clone())) {
                Some(resource) => {
                    written[i] = Some(Slot::Created(Box::new(resource)));
                }
                None => pending.push(i),
            }
        }
    }
    if let Some(&i) = pending.first() {
        return Err(items.at(
            i,
            ApiError::refused(
                Reason::ConcurrentModification,
                "the resource changed concurrently; retry",
            ),
        ));
    }

    // Created resources were queued by their insert.
    work::schedule(conn, &to_schedule).await?;

    // Every new generation of these roots is a revision of their history.
    let respecified: std::collections::HashSet<Uuid> = to_schedule.iter().copied().collect();
    let mut history = Vec::new();
    for (slot, input) in written.iter().zip(inputs) {
        let resource = match slot {
            Some(Slot::Created(resource)) => resource.as_ref(),
            Some(Slot::Updated(done)) if respecified.contains(&done.resource.id) => &done.resource,
            _ => continue,
        };
        history.push(NewRevision {
            resource_id: resource.id,
            generation: resource.generation,
            kind_version: resource.kind_version,
            spec: &input.spec,
            source: if input.restores.is_some() {
                Source::Rollback
            } else if input.converts_from.is_some() {
                Source::Conversion
            } else {
                Source::Apply
            },
            restored_generation: input.restores,
        });
    }
    revisions::record(conn, &history, actor).await?;

    let mut answers = Vec::with_capacity(inputs.len());
    for (slot, input) in written.into_iter().zip(inputs) {
        let done = match slot {
            Some(Slot::Updated(done)) => *done,
            Some(Slot::Created(resource)) => Written {
                resource: *resource,
                created: true,
                manifest_version: state_of(&kind_states, input)?.manifest_version,
            },
            None => {
                return Err(ApiError::Internal(
                    "a batch item was neither created nor updated".into(),
                ));
            }
        };
        answers.push(done);
    }
    Ok(answers)
}

/// The state read under the lock of an input's kind version.
fn state_of(kind_states: &HashMap<(String, i32), KindState>, input: &ResourceWrite) -> Result<KindState, ApiError> {
    kind_states
        .get(&(input.kind.clone(), input.kind_version))
        .copied()
        .ok_or_else(|| ApiError::Internal(format!("kind {:?} was not locked for this write", input.kind)))
}

/// Takes each kind version's shared lock (in a fixed order, so two batches
/// never wait on each other crosswise) and reads its state.
async fn lock_kinds(
    conn: &mut PgConnection,
    inputs: &[ResourceWrite],
    items: Items,
) -> Result<HashMap<(String, i32), KindState>, ApiError> {
    let mut first_use: BTreeMap<(String, i32), usize> = BTreeMap::new();
    for (i, input) in inputs.iter().enumerate() {
        first_use.entry((input.kind.clone(), input.kind_version)).or_insert(i);
    }
    let mut states = HashMap::new();
    for ((kind, version), i) in first_use {
        let state = kinds::lock_kind_state(conn, &kind, version)
            .await?
            .ok_or_else(|| items.at(i, kind_not_found(&kind, version)))?;
        states.insert((kind, version), state);
    }
    check_references(conn, inputs, items).await?;
    Ok(states)
}

/// Checks every provider config an input attaches: it exists, is for the
/// input's kind and version, and was applied through the API (a composer's
/// configs belong to its own composition). The configs stay key-share
/// locked until the write commits, so none is deleted under it.
async fn check_references(conn: &mut PgConnection, inputs: &[ResourceWrite], items: Items) -> Result<(), ApiError> {
    let mut names: Vec<String> = inputs
        .iter()
        .filter_map(|input| input.provider_config.clone().flatten())
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    names.sort_unstable();
    names.dedup();
    let found: HashMap<String, provider_configs::Referenced> = provider_configs::lock_referenced(conn, &names)
        .await?
        .into_iter()
        .map(|r| (r.name.clone(), r))
        .collect();
    for (i, input) in inputs.iter().enumerate() {
        let Some(Some(name)) = &input.provider_config else {
            continue;
        };
        let refused = |reason: Reason, description: String| {
            items.at(
                i,
                ApiError::violations(reason, vec![Violation::new("/provider_config", description)]),
            )
        };
        match found.get(name) {
            None => {
                return Err(refused(
                    Reason::ProviderConfigNotFound,
                    format!("provider config {name:?} does not exist"),
                ));
            }
            Some(config) if config.kind != input.kind || config.kind_version != input.kind_version => {
                return Err(refused(
                    Reason::ProviderConfigKindMismatch,
                    format!(
                        "provider config {name:?} is for kind {:?} version {}, not {:?} version {}",
                        config.kind, config.kind_version, input.kind, input.kind_version
                    ),
                ));
            }
            Some(config) if config.owned => {
                return Err(refused(
                    Reason::ProviderConfigOwned,
                    format!("provider config {name:?} was emitted by a composer and serves only its composition"),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Judges an update by the transition rules of its kind version's spec
/// schema (ADR 49), the stored spec as `oldSelf`; a change of version is
/// not a transition of one schema and is not judged.
fn check_transition(
    compiled: &HashMap<(String, i32), Arc<CompiledKind>>,
    input: &ResourceWrite,
    current: &Resource,
) -> Result<(), ApiError> {
    if current.kind_version != input.kind_version {
        return Ok(());
    }
    let Some(schema) = compiled
        .get(&(input.kind.clone(), input.kind_version))
        .and_then(|c| c.spec.as_ref())
        .filter(|s| s.has_transition_rules())
    else {
        return Ok(());
    };
    schema
        .validate_transition("/spec", &input.spec, &current.spec)
        .map_err(|violations| ApiError::violations(Reason::SpecSchemaViolation, violations))
}

/// Checks every spec against its kind version's schema, as of the manifest
/// version read under the lock; returns the compiled kinds it used.
async fn validate_specs(
    conn: &mut PgConnection,
    state: &ApiState,
    inputs: &[ResourceWrite],
    kind_states: &HashMap<(String, i32), KindState>,
    items: Items,
) -> Result<HashMap<(String, i32), Arc<CompiledKind>>, ApiError> {
    let mut compiled = HashMap::new();
    for (i, input) in inputs.iter().enumerate() {
        let key = (input.kind.clone(), input.kind_version);
        let manifest = match compiled.entry(key) {
            Entry::Occupied(known) => known.into_mut(),
            Entry::Vacant(slot) => {
                let manifest_version = state_of(kind_states, input)?.manifest_version;
                let manifest = state
                    .catalog
                    .compiled(conn, &input.kind, input.kind_version, manifest_version)
                    .await?;
                slot.insert(manifest)
            }
        };
        match manifest.admit("/spec", &input.spec) {
            Ok(()) => {}
            Err(Refusal::ReactorKind) => return Err(items.at(i, reactor_kind(&input.kind, input.kind_version))),
            Err(Refusal::Schema(violations)) => {
                return Err(items.at(i, ApiError::violations(Reason::SpecSchemaViolation, violations)));
            }
        }
    }
    Ok(compiled)
}

/// Writes the user-owned fields of existing resources (`(input index,
/// stored resource)`), with their events, set-based: one statement for the
/// rows and one for the events, whatever the batch size. Returns, per
/// input, the resource as it is now and whether it needs a reconcile.
async fn update(
    conn: &mut PgConnection,
    state: &ApiState,
    actor: &str,
    inputs: &[ResourceWrite],
    stored: Vec<(usize, Resource)>,
) -> Result<Vec<(usize, Resource, bool)>, ApiError> {
    let desired: Vec<(Uuid, DesiredResource<'_>)> = stored
        .iter()
        .map(|(i, current)| (current.id, inputs[*i].desired()))
        .collect();
    let mut written = resources::update_many(conn, &desired).await?;
    let mut events: Vec<(Uuid, i64, NewEvent)> = Vec::new();
    let mut config_changes: Vec<(Uuid, String)> = Vec::new();
    let mut answers = Vec::with_capacity(stored.len());
    for (i, current) in stored {
        let Some(updated) = written.remove(&current.id) else {
            answers.push((i, current, false));
            continue;
        };
        let respec = updated.generation != current.generation;
        // A version flip always moves the generation: one event says both
        // (a kind migration writes one per resource, so this halves them).
        if updated.kind_version != current.kind_version {
            let event = NewEvent::lifecycle(
                "KindVersionChanged",
                format!(
                    "kind version {} -> {}, generation {}",
                    current.kind_version, updated.kind_version, updated.generation
                ),
            );
            events.push((updated.id, updated.generation, event));
        } else if respec {
            let event = NewEvent::lifecycle("SpecChanged", format!("generation {}", updated.generation));
            events.push((updated.id, updated.generation, event));
        }
        if updated.provider_config != current.provider_config {
            let shown = |c: &Option<String>| c.as_deref().map_or_else(|| "none".to_owned(), |n| format!("{n:?}"));
            let message = format!(
                "provider config override {} -> {}",
                shown(&current.provider_config),
                shown(&updated.provider_config)
            );
            config_changes.push((updated.id, message));
        }
        answers.push((i, updated, respec));
    }
    let events: Vec<(Uuid, i64, &NewEvent)> = events.iter().map(|(id, g, e)| (*id, *g, e)).collect();
    events::record_many(conn, &events, actor, state.retention.event_runs_per_timeline).await?;
    // A changed override is a reason to reconcile even at the same
    // generation (rare: one call each, as its message names both configs).
    for (id, message) in &config_changes {
        provider_configs::pend_change(conn, &[*id], message, actor, state.retention.event_runs_per_timeline).await?;
    }
    Ok(answers)
}

/// Refuses writes the stored resource does not allow. Deletion wins over
/// every other problem, as clients expect.
fn check_writable(current: &Resource, input: &ResourceWrite, retired_target: bool) -> Result<(), ApiError> {
    if input.mode == Mode::Create {
        let deleting = if current.deletion_requested_at.is_some() {
            " (it is being deleted)"
        } else {
            ""
        };
        return Err(ApiError::refused(
            Reason::NameTaken,
            format!("{}/{} already exists{deleting}", current.kind, current.name),
        ));
    }
    if current.deletion_requested_at.is_some() {
        return Err(ApiError::refused(
            Reason::DeletionPending,
            format!(
                "{}/{} is being deleted and accepts no writes",
                current.kind, current.name
            ),
        ));
    }
    if current.owner.is_some() {
        return Err(ApiError::refused(
            Reason::ResourceOwned,
            format!(
                "{}/{} was composed by another resource; its spec belongs to its composer",
                current.kind, current.name
            ),
        ));
    }
    check_etag(current, input.etag.as_deref())?;
    if current.kind_version != input.kind_version && retired_target {
        return Err(retired(&input.kind, input.kind_version));
    }
    Ok(())
}

fn kind_not_found(kind: &str, kind_version: i32) -> ApiError {
    ApiError::refused(
        Reason::KindNotFound,
        format!("kind {kind:?} version {kind_version} has no manifest; apply one with KindService.ApplyKindManifest"),
    )
}

fn reactor_kind(kind: &str, kind_version: i32) -> ApiError {
    ApiError::refused(
        Reason::KindIsReactor,
        format!(
            "kind {kind:?} version {kind_version} is a reactor kind: it owns no resources and runs only through \
             reactor bindings (ReactorBindingService)"
        ),
    )
}

fn retired(kind: &str, kind_version: i32) -> ApiError {
    ApiError::refused(
        Reason::KindVersionRetired,
        format!("kind {kind:?} version {kind_version} is retired and accepts no new resources"),
    )
}
