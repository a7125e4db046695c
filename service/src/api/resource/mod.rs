//! The `converge.v1.ResourceService` API.

pub(crate) mod apply;
mod plan;

use converge_proto::v1::resource_service_server::ResourceService;
use converge_proto::v1::{
    ApplyResourceRequest, ApplyResourceResponse, BatchApplyResourcesRequest, BatchApplyResourcesResponse,
    CreateResourceRequest, CreateResourceResponse, DeleteResourceRequest, DeleteResourceResponse,
    ExplainResourceRequest, ExplainResourceResponse, GetResourceGraphRequest, GetResourceGraphResponse,
    GetResourceRequest, GetResourceResponse, ListResourceEventsRequest, ListResourceEventsResponse,
    ListResourcesRequest, ListResourcesResponse, ListSpecRevisionsRequest, ListSpecRevisionsResponse,
    QuarantineResourceRequest, QuarantineResourceResponse, ReconcileResourceRequest, ReconcileResourceResponse,
    ResourceRef as PbResourceRef, RollbackResourceRequest, RollbackResourceResponse, UnquarantineResourceRequest,
    UnquarantineResourceResponse, WatchResourceEventsRequest, WatchResourceEventsResponse, WatchResourcesRequest,
    WatchResourcesResponse,
};
use sqlx::{PgConnection, PgPool};
use tonic::{Request, Response, Status};
use uuid::Uuid;

use super::ApiState;
use super::authorize::{require_resource, scoped_selector};
use super::keys::{check_key, resource_not_found};
use super::pages::{decode_token, finish_page, invalid_token, time_and_id, time_and_id_position};
use super::write::{self, WriteCall};
use crate::contract::ResponseStream;
use crate::contract::authz::on_kind;
use crate::contract::caller;
use crate::contract::convert::{
    edge_to_proto, event_to_proto, explanation_to_proto, from_timestamp, graph_node_to_proto, json_to_struct,
    phases_from_proto, resource_to_proto, timestamp,
};
use crate::contract::status::{ApiError, Reason};
use crate::domain::authz::{EVERY_KIND, Verb};
use crate::domain::event::EventType;
use crate::domain::labels::LabelSelector;
use crate::domain::names::{validate_kind_name, validate_resource_name};
use crate::domain::page_token::{PositionPart, filter_hash, page_size};
use crate::domain::resource::Resource;
use crate::domain::violation::Violation;
use crate::store::deletion::{self, SetAside};
use crate::store::events::{EventCursor, EventFilter};
use crate::store::graph::GraphCursor;
use crate::store::resources::{ListCursor, ResourceFilter};
use crate::store::revisions::{self, Revision};
use crate::store::{events, explain, graph, kinds, resources, work};
use apply::{Items, MAX_BATCH_ITEMS, ResourceWrite, Written, write_resources};

/// Serves `converge.v1.ResourceService`.
#[derive(Debug, Clone)]
pub struct ResourceApi {
    state: ApiState,
}

impl ResourceApi {
    /// A service over `state`.
    pub fn new(state: ApiState) -> Self {
        Self { state }
    }
}

/// The one answer of a single write.
fn single(written: Vec<Written>) -> Result<Written, ApiError> {
    written
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::Internal("a write answered nothing".into()))
}

/// Validates the items of a batch apply; every item's violations are
/// reported at once, under `/requests/{i}`.
fn batch_inputs(req: &BatchApplyResourcesRequest) -> Result<Vec<ResourceWrite>, ApiError> {
    if req.requests.is_empty() || req.requests.len() > MAX_BATCH_ITEMS {
        return Err(Violation::new(
            "/requests",
            format!("must hold 1 to {MAX_BATCH_ITEMS} items; has {}", req.requests.len()),
        )
        .into());
    }
    let mut inputs = Vec::with_capacity(req.requests.len());
    let mut refusal: Option<(Reason, Vec<Violation>)> = None;
    for (i, item) in req.requests.iter().enumerate() {
        let mut item_violations = Vec::new();
        if !item.request_id.is_empty() {
            item_violations.push(Violation::new(
                format!("/requests/{i}/request_id"),
                "must be empty: set request_id on the batch",
            ));
        }
        if item.validate_only {
            item_violations.push(Violation::new(
                format!("/requests/{i}/validate_only"),
                "must be false: set validate_only on the batch",
            ));
        }
        let input = ResourceWrite::apply(item);
        let reason = match input {
            Ok(input) => {
                inputs.push(input);
                Reason::InvalidField
            }
            Err(e) => {
                let reason = e.reason();
                if let ApiError::Refused { violations, .. } = e.within(&format!("/requests/{i}")) {
                    item_violations.extend(violations);
                }
                reason
            }
        };
        if !item_violations.is_empty() {
            refusal
                .get_or_insert_with(|| (reason, Vec::new()))
                .1
                .extend(item_violations);
        }
    }
    match refusal {
        Some((reason, violations)) => Err(ApiError::violations(reason, violations)),
        None => Ok(inputs),
    }
}

/// Draws of a generated name before a create gives up (each taken name is
/// one chance in 27^5 ≈ 14M per existing name with the prefix).
const GENERATE_NAME_TRIES: usize = 8;
/// The characters a generated suffix is drawn from: no vowels, so no words;
/// no 0/1/3 (confused with o, l, e).
const GENERATED_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
/// Length of a generated suffix.
const GENERATED_SUFFIX_LEN: usize = 5;

/// The `generate_name` prefix of a create, checked (None: the name is given).
fn generated_prefix(req: &CreateResourceRequest) -> Result<Option<String>, ApiError> {
    if req.generate_name.is_empty() {
        return Ok(None);
    }
    if !req.name.is_empty() {
        return Err(Violation::new("/generate_name", "set name or generate_name, not both").into());
    }
    let longest = crate::domain::names::MAX_RESOURCE_NAME_LEN - GENERATED_SUFFIX_LEN;
    if req.generate_name.len() > longest {
        return Err(ApiError::violations(
            Reason::InvalidName,
            vec![Violation::new(
                "/generate_name",
                format!("must be at most {longest} bytes"),
            )],
        ));
    }
    // The prefix with a suffix must be a name: checked on a sample suffix.
    let sample = format!("{}{}", req.generate_name, "b".repeat(GENERATED_SUFFIX_LEN));
    validate_resource_name("/generate_name", &sample)
        .map_err(|v| ApiError::violations(Reason::InvalidName, vec![v]))?;
    Ok(Some(req.generate_name.clone()))
}

/// `prefix` and a random suffix.
fn generated_name(prefix: &str) -> String {
    let random = Uuid::new_v4();
    let suffix: String = random.as_bytes()[..GENERATED_SUFFIX_LEN]
        .iter()
        .map(|b| char::from(GENERATED_ALPHABET[usize::from(*b) % GENERATED_ALPHABET.len()]))
        .collect();
    format!("{prefix}{suffix}")
}

fn check_etag(current: &Resource, etag: Option<&str>) -> Result<(), ApiError> {
    match etag {
        Some(expected) if expected != current.etag() => Err(ApiError::refused(
            Reason::EtagMismatch,
            format!(
                "{}/{} changed since etag {expected:?} was read; read it again",
                current.kind, current.name
            ),
        )),
        _ => Ok(()),
    }
}

/// The manifest version of a resource's kind version, read in the write's transaction.
async fn manifest_version_in(conn: &mut PgConnection, resource: &Resource) -> Result<i64, ApiError> {
    Ok(kinds::kind_state(conn, &resource.kind, resource.kind_version)
        .await?
        .map(|s| s.manifest_version)
        .unwrap_or(0))
}

/// Requests deletion of a resource (and its teardown tree) inside the
/// caller's transaction.
async fn delete_in(
    conn: &mut PgConnection,
    req: &DeleteResourceRequest,
    actor: &str,
) -> Result<DeleteResourceResponse, ApiError> {
    let Some(current) = resources::find_for_update(conn, &req.kind, &req.name).await? else {
        if req.allow_missing {
            return Ok(DeleteResourceResponse { resource: None });
        }
        return Err(resource_not_found(&req.kind, &req.name));
    };
    check_etag(&current, req.etag.as_deref())?;
    if req.validate_only {
        let version = manifest_version_in(conn, &current).await?;
        return Ok(DeleteResourceResponse {
            resource: Some(resource_to_proto(current, version)),
        });
    }
    // Marks the whole teardown tree (idempotent: an already marked tree is
    // left as it is), reads the target as marked, then starts the teardown
    // of what is already unblocked. The sweep may remove the target at once
    // (nothing depends on it and it has no finalizer); the answer is the
    // resource as it stood when its deletion was requested.
    let tree = deletion::mark(conn, current.id, actor).await?;
    let resource = resources::get_by_id(conn, current.id).await?.unwrap_or(current);
    deletion::sweep(conn, &tree).await?;
    let version = manifest_version_in(conn, &resource).await?;
    Ok(DeleteResourceResponse {
        resource: Some(resource_to_proto(resource, version)),
    })
}

/// Longest note accepted on a quarantine or release, in bytes.
const MAX_NOTE_BYTES: usize = 1024;

/// Which way a quarantine call goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quarantine {
    /// Set the resource aside.
    Set,
    /// Release it.
    Release,
}

/// Quarantines or releases a resource inside the caller's transaction;
/// returns the resource as it is afterwards.
async fn quarantine_in(
    conn: &mut PgConnection,
    kind: &str,
    name: &str,
    note: &str,
    action: Quarantine,
    actor: &str,
) -> Result<converge_proto::v1::Resource, ApiError> {
    let current = resources::find_for_update(conn, kind, name)
        .await?
        .ok_or_else(|| resource_not_found(kind, name))?;
    let outcome = match action {
        Quarantine::Set => deletion::quarantine(conn, current.id, actor, note).await?,
        Quarantine::Release => deletion::unquarantine(conn, current.id, actor, note).await?,
    };
    match outcome {
        SetAside::NotFound => return Err(resource_not_found(kind, name)),
        SetAside::Deleting => {
            return Err(ApiError::refused(
                Reason::DeletionPending,
                format!("{kind}/{name} is being deleted and cannot be quarantined"),
            ));
        }
        SetAside::Unchanged | SetAside::Changed => {}
    }
    let resource = resources::get_by_id(conn, current.id)
        .await?
        .ok_or_else(|| resource_not_found(kind, name))?;
    let version = manifest_version_in(conn, &resource).await?;
    Ok(resource_to_proto(resource, version))
}

/// Checks the names and the note of a quarantine call.
fn check_quarantine_request(kind: &str, name: &str, note: &str) -> Result<(), ApiError> {
    check_key(kind, name)?;
    if note.len() > MAX_NOTE_BYTES {
        return Err(Violation::new("/message", format!("must be at most {MAX_NOTE_BYTES} bytes")).into());
    }
    crate::domain::violation::check_storable_text("/message", note)?;
    Ok(())
}

/// Resolves a kind + name reference to an id (`None` when missing); a
/// malformed reference is refused, naming `field`.
async fn resolve(
    pool: &PgPool,
    field: &str,
    reference: Option<&PbResourceRef>,
) -> Result<Option<Option<Uuid>>, ApiError> {
    match reference {
        Some(r) if !(r.kind.is_empty() && r.name.is_empty()) => {
            let mut violations = Vec::new();
            violations.extend(validate_kind_name(&format!("{field}/kind"), &r.kind).err());
            violations.extend(validate_resource_name(&format!("{field}/name"), &r.name).err());
            if !violations.is_empty() {
                return Err(ApiError::violations(Reason::InvalidName, violations));
            }
            Ok(Some(resources::id_of(pool, &r.kind, &r.name).await?))
        }
        _ => Ok(None),
    }
}

fn optional_ref_key(reference: Option<&PbResourceRef>) -> String {
    reference.map(|r| format!("{}/{}", r.kind, r.name)).unwrap_or_default()
}

/// Most changes one PlanResources call may plan.
const MAX_PLANNED_REQUESTS: usize = 100;

impl ResourceApi {
    /// Plans one change (issue 46): an apply runs through the write path in
    /// a transaction that is rolled back (the same checks and refusals as
    /// ApplyResource with validate_only), then `plan` compares what it would
    /// store with what is stored; a delete lists the teardown order.
    async fn plan_one(
        &self,
        principal: &crate::contract::authz::Principal,
        req: converge_proto::v1::PlanResourceRequest,
    ) -> Result<converge_proto::v1::PlanResourceResponse, ApiError> {
        use converge_proto::v1::plan_resource_request::Change;
        let depth = match req.max_depth {
            0 => plan::DEFAULT_DEPTH,
            d if (1..=plan::MAX_DEPTH).contains(&d) => d,
            _ => {
                return Err(Violation::new("/max_depth", format!("must be 0 to {}", plan::MAX_DEPTH)).into());
            }
        };
        let compose_timeout = match req.compose_timeout {
            None => plan::DEFAULT_COMPOSE_TIMEOUT,
            Some(d) => match u64::try_from(d.seconds).ok().zip(u32::try_from(d.nanos).ok()) {
                Some((secs, nanos)) if std::time::Duration::new(secs, nanos) <= plan::MAX_COMPOSE_TIMEOUT => {
                    std::time::Duration::new(secs, nanos)
                }
                _ => {
                    let max = plan::MAX_COMPOSE_TIMEOUT.as_secs();
                    return Err(Violation::new("/compose_timeout", format!("must be 0 to {max} s")).into());
                }
            },
        };
        match req.change {
            None => Err(Violation::new("/change", "is required: apply or delete").into()),
            Some(Change::Delete(target)) => {
                check_key(&target.kind, &target.name)?;
                require_resource(
                    &self.state,
                    principal,
                    on_kind(Verb::Delete, &target.kind),
                    &target.name,
                    None,
                )
                .await?;
                let current = resources::get(&self.state.pool, &target.kind, &target.name)
                    .await?
                    .ok_or_else(|| resource_not_found(&target.kind, &target.name))?;
                plan::plan_delete(&self.state, &current).await
            }
            Some(Change::Apply(apply)) => {
                let input = ResourceWrite::apply(&apply).map_err(|e| e.within("/apply"))?;
                input.authorize(&self.state, principal).await?;
                let current = resources::get(&self.state.pool, &apply.kind, &apply.name).await?;
                let call = WriteCall {
                    validate_only: true,
                    ..WriteCall::unkeyed("PlanResource")
                };
                let state = self.state.clone();
                let written = write::run(&self.state.pool, &call, move |conn| {
                    let (state, input) = (state.clone(), input.clone());
                    Box::pin(async move {
                        let written = single(
                            write_resources(conn, &state, "plan", std::slice::from_ref(&input), Items::Single).await?,
                        )?;
                        Ok(resource_to_proto(written.resource, written.manifest_version))
                    })
                })
                .await
                .map_err(|e| e.within("/apply"))?;
                plan::plan_apply(&self.state, current.as_ref(), &written, depth, compose_timeout).await
            }
        }
    }
}

#[tonic::async_trait]
impl ResourceService for ResourceApi {
    async fn apply_resource(
        &self,
        request: Request<ApplyResourceRequest>,
    ) -> Result<Response<ApplyResourceResponse>, Status> {
        let actor = caller::api_actor(&request);
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        let call = WriteCall::new("ApplyResource", &req.request_id, req.validate_only, &req, |r| {
            r.request_id.clear()
        })?;
        let input = ResourceWrite::apply(&req)?;
        input.authorize(&self.state, &principal).await?;
        let state = self.state.clone();
        let answer = write::run(&self.state.pool, &call, move |conn| {
            let (state, input, actor) = (state.clone(), input.clone(), actor.clone());
            Box::pin(async move {
                let written =
                    single(write_resources(conn, &state, &actor, std::slice::from_ref(&input), Items::Single).await?)?;
                Ok(ApplyResourceResponse {
                    resource: Some(resource_to_proto(written.resource, written.manifest_version)),
                    created: written.created,
                })
            })
        })
        .await?;
        Ok(Response::new(answer))
    }

    async fn batch_apply_resources(
        &self,
        request: Request<BatchApplyResourcesRequest>,
    ) -> Result<Response<BatchApplyResourcesResponse>, Status> {
        let actor = caller::api_actor(&request);
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        let call = WriteCall::new("BatchApplyResources", &req.request_id, req.validate_only, &req, |r| {
            r.request_id.clear()
        })?;
        let inputs = batch_inputs(&req)?;
        for input in &inputs {
            input.authorize(&self.state, &principal).await?;
        }
        let state = self.state.clone();
        let answer = write::run(&self.state.pool, &call, move |conn| {
            let (state, inputs, actor) = (state.clone(), inputs.clone(), actor.clone());
            Box::pin(async move {
                let written = write_resources(conn, &state, &actor, &inputs, Items::Batch).await?;
                Ok(BatchApplyResourcesResponse {
                    responses: written
                        .into_iter()
                        .map(|w| ApplyResourceResponse {
                            resource: Some(resource_to_proto(w.resource, w.manifest_version)),
                            created: w.created,
                        })
                        .collect(),
                })
            })
        })
        .await?;
        Ok(Response::new(answer))
    }

    async fn create_resource(
        &self,
        request: Request<CreateResourceRequest>,
    ) -> Result<Response<CreateResourceResponse>, Status> {
        let actor = caller::api_actor(&request);
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        let call = WriteCall::new("CreateResource", &req.request_id, req.validate_only, &req, |r| {
            r.request_id.clear()
        })?;
        let prefix = generated_prefix(&req)?;
        let first_name = match &prefix {
            Some(prefix) => generated_name(prefix),
            None => req.name.clone(),
        };
        let input = ResourceWrite::create(&req, &first_name)?;
        input.authorize(&self.state, &principal).await?;
        let state = self.state.clone();
        let answer = write::run(&self.state.pool, &call, move |conn| {
            let (state, mut input, actor, prefix) = (state.clone(), input.clone(), actor.clone(), prefix.clone());
            Box::pin(async move {
                let mut tries = 0;
                let written = loop {
                    tries += 1;
                    match write_resources(conn, &state, &actor, std::slice::from_ref(&input), Items::Single).await {
                        // A generated name that is taken: another draw (the
                        // refusal comes before any write, so the
                        // transaction is intact).
                        Err(e) if e.reason() == Reason::NameTaken && tries < GENERATE_NAME_TRIES => match &prefix {
                            Some(prefix) => input = input.renamed(generated_name(prefix)),
                            None => return Err(e),
                        },
                        result => break single(result?)?,
                    }
                };
                Ok(CreateResourceResponse {
                    resource: Some(resource_to_proto(written.resource, written.manifest_version)),
                })
            })
        })
        .await?;
        Ok(Response::new(answer))
    }

    async fn get_resource(
        &self,
        request: Request<GetResourceRequest>,
    ) -> Result<Response<GetResourceResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        let (kind, name) = (&req.kind, &req.name);
        check_key(kind, name)?;
        require_resource(&self.state, &principal, on_kind(Verb::Get, kind), name, None).await?;
        let resource = self
            .state
            .read_pool
            .run(|pool| async move { resources::get(&pool, kind, name).await.map_err(ApiError::from) })
            .await?
            .ok_or_else(|| resource_not_found(&req.kind, &req.name))?;
        let version = self
            .state
            .manifest_version(&resource.kind, resource.kind_version)
            .await?;
        Ok(Response::new(GetResourceResponse {
            resource: Some(resource_to_proto(resource, version)),
        }))
    }

    async fn explain_resource(
        &self,
        request: Request<ExplainResourceRequest>,
    ) -> Result<Response<ExplainResourceResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        check_key(&req.kind, &req.name)?;
        require_resource(&self.state, &principal, on_kind(Verb::Get, &req.kind), &req.name, None).await?;
        // On the primary, not the replica: the answer is judged against the
        // clock (retry times, heartbeats), which replication lag would skew.
        let (resource, facts) =
            explain::resource_and_facts(&self.state.pool, &req.kind, &req.name, self.state.liveness_secs())
                .await
                .map_err(ApiError::from)?
                .ok_or_else(|| resource_not_found(&req.kind, &req.name))?;
        let explanation = crate::domain::explain::explain(&resource, &facts);
        let version = self
            .state
            .manifest_version(&resource.kind, resource.kind_version)
            .await?;
        Ok(Response::new(explanation_to_proto(resource, version, explanation)))
    }

    async fn list_resources(
        &self,
        request: Request<ListResourcesRequest>,
    ) -> Result<Response<ListResourcesResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        let limit = page_size(req.page_size).map_err(ApiError::from)?;
        super::watch::check_kind_filter(req.kind.as_deref(), req.kind_version)?;
        if let Some(config) = &req.provider_config
            && let Err(v) = crate::domain::names::validate_resource_name("/provider_config", config)
        {
            return Err(ApiError::violations(Reason::InvalidName, vec![v]).into());
        }
        let selector = LabelSelector::parse(&req.label_selector).map_err(|e| {
            ApiError::violations(
                Reason::InvalidLabelSelector,
                vec![Violation::new("/label_selector", e.to_string())],
            )
        })?;
        let selector = scoped_selector(
            &self.state,
            &principal,
            crate::domain::authz::ResourceAction {
                verb: Verb::List,
                kind: req.kind.as_deref().unwrap_or(EVERY_KIND),
                kind_version: req.kind_version,
                operation: None,
            },
            selector,
        )?;
        let phases = phases_from_proto("/phases", &req.phases)?;
        let mut phase_names: Vec<&str> = phases.iter().map(|p| p.as_db()).collect();
        phase_names.sort_unstable();
        let filters = filter_hash(&[
            req.kind.as_deref().unwrap_or(""),
            &req.kind_version.map(|v| v.to_string()).unwrap_or_default(),
            &phase_names.join(","),
            &selector.to_string(),
            &optional_ref_key(req.owner.as_ref()),
            &optional_ref_key(req.root.as_ref()),
            if req.roots_only { "roots" } else { "" },
            req.provider_config.as_deref().unwrap_or(""),
        ]);
        let after = decode_token(&req.page_token, filters)?
            .map(|position| time_and_id(&position))
            .transpose()?
            .map(|(created_at, id)| ListCursor { created_at, id });
        let filter = ResourceFilter {
            kind: req.kind.clone(),
            kind_version: req.kind_version,
            phases,
            selector,
            owner_id: None,
            root_id: None,
            roots_only: req.roots_only,
            provider_config: req.provider_config.clone(),
        };
        let (req, filter) = (&req, &filter);
        let page = self
            .state
            .read_pool
            .run(|pool| async move {
                // Resolved on the pool the list runs on, so both see one state.
                let owner = resolve(&pool, "/owner", req.owner.as_ref()).await?;
                let root = resolve(&pool, "/root", req.root.as_ref()).await?;
                // A filter on a resource that does not exist matches nothing.
                if matches!(owner, Some(None)) || matches!(root, Some(None)) {
                    return Ok(None);
                }
                let filter = ResourceFilter {
                    owner_id: owner.flatten(),
                    root_id: root.flatten(),
                    ..filter.clone()
                };
                let page = resources::list(&pool, &filter, after, limit + 1).await?;
                Ok::<_, ApiError>(Some(page))
            })
            .await?;
        let Some(mut page) = page else {
            return Ok(Response::new(ListResourcesResponse::default()));
        };
        let next_page_token = finish_page(&mut page, limit, filters, |last| {
            time_and_id_position(last.created_at, last.id)
        });
        let mut resources = Vec::with_capacity(page.len());
        for resource in page {
            let version = self
                .state
                .manifest_version(&resource.kind, resource.kind_version)
                .await?;
            resources.push(resource_to_proto(resource, version));
        }
        Ok(Response::new(ListResourcesResponse {
            resources,
            next_page_token,
        }))
    }

    async fn plan_resource(
        &self,
        request: Request<converge_proto::v1::PlanResourceRequest>,
    ) -> Result<Response<converge_proto::v1::PlanResourceResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        Ok(Response::new(self.plan_one(&principal, req).await?))
    }

    async fn plan_resources(
        &self,
        request: Request<converge_proto::v1::PlanResourcesRequest>,
    ) -> Result<Response<converge_proto::v1::PlanResourcesResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        if req.requests.is_empty() || req.requests.len() > MAX_PLANNED_REQUESTS {
            return Err(ApiError::from(Violation::new(
                "/requests",
                format!("must hold 1 to {MAX_PLANNED_REQUESTS} changes"),
            ))
            .into());
        }
        let mut plans = Vec::with_capacity(req.requests.len());
        for (i, one) in req.requests.into_iter().enumerate() {
            let plan = self
                .plan_one(&principal, one)
                .await
                .map_err(|e| e.within(&format!("/requests/{i}")))?;
            plans.push(plan);
        }
        Ok(Response::new(converge_proto::v1::PlanResourcesResponse { plans }))
    }

    async fn delete_resource(
        &self,
        request: Request<DeleteResourceRequest>,
    ) -> Result<Response<DeleteResourceResponse>, Status> {
        let actor = caller::api_actor(&request);
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        check_key(&req.kind, &req.name)?;
        require_resource(
            &self.state,
            &principal,
            on_kind(Verb::Delete, &req.kind),
            &req.name,
            None,
        )
        .await?;
        let call = WriteCall::new("DeleteResource", &req.request_id, req.validate_only, &req, |r| {
            r.request_id.clear()
        })?;
        let target = req.clone();
        let answer = write::run(&self.state.pool, &call, move |conn| {
            let (req, actor) = (target.clone(), actor.clone());
            Box::pin(async move { delete_in(conn, &req, &actor).await })
        })
        .await?;
        Ok(Response::new(answer))
    }

    type WatchResourcesStream = ResponseStream<WatchResourcesResponse>;

    async fn watch_resources(
        &self,
        request: Request<WatchResourcesRequest>,
    ) -> Result<Response<Self::WatchResourcesStream>, Status> {
        let principal = self.state.authz.principal(&request);
        let stream = super::watch::watch_resources(&self.state, &principal, request.into_inner()).await?;
        Ok(Response::new(stream))
    }

    async fn reconcile_resource(
        &self,
        request: Request<ReconcileResourceRequest>,
    ) -> Result<Response<ReconcileResourceResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        check_key(&req.kind, &req.name)?;
        require_resource(
            &self.state,
            &principal,
            on_kind(Verb::Reconcile, &req.kind),
            &req.name,
            None,
        )
        .await?;
        let call = WriteCall::new("ReconcileResource", &req.request_id, false, &req, |r| {
            r.request_id.clear()
        })?;
        let target = req.clone();
        let answer = write::run(&self.state.pool, &call, move |conn| {
            let req = target.clone();
            Box::pin(async move {
                let current = resources::find_for_update(conn, &req.kind, &req.name)
                    .await?
                    .ok_or_else(|| resource_not_found(&req.kind, &req.name))?;
                work::request_reconcile(conn, current.id, req.reset_backoff).await?;
                let resource = resources::get_by_id(conn, current.id)
                    .await?
                    .ok_or_else(|| resource_not_found(&req.kind, &req.name))?;
                let version = manifest_version_in(conn, &resource).await?;
                Ok(ReconcileResourceResponse {
                    resource: Some(resource_to_proto(resource, version)),
                })
            })
        })
        .await?;
        Ok(Response::new(answer))
    }

    async fn quarantine_resource(
        &self,
        request: Request<QuarantineResourceRequest>,
    ) -> Result<Response<QuarantineResourceResponse>, Status> {
        let actor = caller::api_actor(&request);
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        check_quarantine_request(&req.kind, &req.name, &req.message)?;
        require_resource(
            &self.state,
            &principal,
            on_kind(Verb::Quarantine, &req.kind),
            &req.name,
            None,
        )
        .await?;
        let call = WriteCall::new("QuarantineResource", &req.request_id, false, &req, |r| {
            r.request_id.clear()
        })?;
        let target = req.clone();
        let answer = write::run(&self.state.pool, &call, move |conn| {
            let (req, actor) = (target.clone(), actor.clone());
            Box::pin(async move {
                let resource = quarantine_in(conn, &req.kind, &req.name, &req.message, Quarantine::Set, &actor).await?;
                Ok(QuarantineResourceResponse {
                    resource: Some(resource),
                })
            })
        })
        .await?;
        Ok(Response::new(answer))
    }

    async fn unquarantine_resource(
        &self,
        request: Request<UnquarantineResourceRequest>,
    ) -> Result<Response<UnquarantineResourceResponse>, Status> {
        let actor = caller::api_actor(&request);
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        check_quarantine_request(&req.kind, &req.name, &req.message)?;
        require_resource(
            &self.state,
            &principal,
            on_kind(Verb::Quarantine, &req.kind),
            &req.name,
            None,
        )
        .await?;
        let call = WriteCall::new("UnquarantineResource", &req.request_id, false, &req, |r| {
            r.request_id.clear()
        })?;
        let target = req.clone();
        let answer = write::run(&self.state.pool, &call, move |conn| {
            let (req, actor) = (target.clone(), actor.clone());
            Box::pin(async move {
                let resource =
                    quarantine_in(conn, &req.kind, &req.name, &req.message, Quarantine::Release, &actor).await?;
                Ok(UnquarantineResourceResponse {
                    resource: Some(resource),
                })
            })
        })
        .await?;
        Ok(Response::new(answer))
    }

    async fn list_resource_events(
        &self,
        request: Request<ListResourceEventsRequest>,
    ) -> Result<Response<ListResourceEventsResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        check_key(&req.kind, &req.name)?;
        require_resource(&self.state, &principal, on_kind(Verb::Get, &req.kind), &req.name, None).await?;
        let limit = page_size(req.page_size).map_err(ApiError::from)?;
        let type_ = match converge_proto::v1::EventType::try_from(req.r#type) {
            Ok(converge_proto::v1::EventType::Unspecified) => None,
            Ok(converge_proto::v1::EventType::Normal) => Some(EventType::Normal),
            Ok(converge_proto::v1::EventType::Warning) => Some(EventType::Warning),
            Err(_) => return Err(ApiError::from(Violation::new("/type", "is not an event type")).into()),
        };
        let since = req
            .since
            .as_ref()
            .map(|ts| from_timestamp("/since", ts))
            .transpose()
            .map_err(ApiError::from)?;
        let filters = filter_hash(&[
            &req.kind,
            &req.name,
            req.category.as_deref().unwrap_or(""),
            type_.map(EventType::as_db).unwrap_or(""),
            req.reason.as_deref().unwrap_or(""),
            &since.map(|s| s.timestamp_micros().to_string()).unwrap_or_default(),
        ]);
        let after = decode_token(&req.page_token, filters)?
            .map(|position| time_and_id(&position))
            .transpose()?
            .map(|(last_at, id)| EventCursor { last_at, id });
        let filter = EventFilter {
            category: req.category.clone(),
            type_,
            reason: req.reason.clone(),
            since,
        };
        let (req, filter) = (&req, &filter);
        let mut page = self
            .state
            .read_pool
            .run(|pool| async move {
                let id = resources::id_of(&pool, &req.kind, &req.name)
                    .await?
                    .ok_or_else(|| resource_not_found(&req.kind, &req.name))?;
                Ok::<_, ApiError>(events::list(&pool, id, filter, after, limit + 1).await?)
            })
            .await?;
        let next_page_token = finish_page(&mut page, limit, filters, |last| {
            time_and_id_position(last.last_at, last.id)
        });
        Ok(Response::new(ListResourceEventsResponse {
            events: page.into_iter().map(event_to_proto).collect(),
            next_page_token,
        }))
    }

    type WatchResourceEventsStream = ResponseStream<WatchResourceEventsResponse>;

    async fn watch_resource_events(
        &self,
        request: Request<WatchResourceEventsRequest>,
    ) -> Result<Response<Self::WatchResourceEventsStream>, Status> {
        let principal = self.state.authz.principal(&request);
        let stream = super::watch::watch_resource_events(&self.state, &principal, request.into_inner()).await?;
        Ok(Response::new(stream))
    }

    async fn get_resource_graph(
        &self,
        request: Request<GetResourceGraphRequest>,
    ) -> Result<Response<GetResourceGraphResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        check_key(&req.kind, &req.name)?;
        require_resource(&self.state, &principal, on_kind(Verb::Get, &req.kind), &req.name, None).await?;
        let limit = page_size(req.page_size).map_err(ApiError::from)?;
        let filters = filter_hash(&[&req.kind, &req.name]);
        let after = decode_token(&req.page_token, filters)?
            .map(|position| time_and_id(&position))
            .transpose()?
            .map(|(created_at, id)| GraphCursor { created_at, id });
        let (kind, name) = (&req.kind, &req.name);
        let mut page = self
            .state
            .read_pool
            .run(|pool| async move {
                graph::page(&pool, kind, name, after, limit + 1)
                    .await
                    .map_err(ApiError::from)
            })
            .await?
            .ok_or_else(|| resource_not_found(&req.kind, &req.name))?;
        let next_page_token = finish_page(&mut page.nodes, limit, filters, |last| {
            time_and_id_position(last.created_at, last.id)
        });
        // The extra node fetched to detect a next page may have brought edges.
        page.retain_edges_of_nodes();
        let mut root = graph_node_to_proto(page.root);
        // The contract leaves the root's owner out, whatever it is.
        root.owner = None;
        Ok(Response::new(GetResourceGraphResponse {
            root: Some(root),
            nodes: page.nodes.into_iter().map(graph_node_to_proto).collect(),
            edges: page.edges.into_iter().map(edge_to_proto).collect(),
            next_page_token,
        }))
    }

    async fn list_spec_revisions(
        &self,
        request: Request<ListSpecRevisionsRequest>,
    ) -> Result<Response<ListSpecRevisionsResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        check_key(&req.kind, &req.name)?;
        require_resource(&self.state, &principal, on_kind(Verb::Get, &req.kind), &req.name, None).await?;
        let limit = page_size(req.page_size).map_err(ApiError::from)?;
        let filters = filter_hash(&[&req.kind, &req.name]);
        let before = match decode_token(&req.page_token, filters)? {
            None => None,
            Some(position) => match position.as_slice() {
                [PositionPart::Int(generation)] => Some(*generation),
                _ => return Err(invalid_token("is not a spec revision list position").into()),
            },
        };
        let (kind, name) = (&req.kind, &req.name);
        let mut page = self
            .state
            .read_pool
            .run(|pool| async move {
                let resource = resources::get(&pool, kind, name)
                    .await?
                    .ok_or_else(|| resource_not_found(kind, name))?;
                let limit = i64::try_from(limit + 1).unwrap_or(i64::MAX);
                Ok::<_, ApiError>(revisions::list(&pool, resource.id, before, limit).await?)
            })
            .await?;
        let next_page_token = finish_page(&mut page, limit, filters, |last| {
            vec![PositionPart::Int(last.generation)]
        });
        Ok(Response::new(ListSpecRevisionsResponse {
            revisions: page.into_iter().map(revision_to_proto).collect(),
            next_page_token,
        }))
    }

    async fn rollback_resource(
        &self,
        request: Request<RollbackResourceRequest>,
    ) -> Result<Response<RollbackResourceResponse>, Status> {
        let actor = caller::api_actor(&request);
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        check_key(&req.kind, &req.name)?;
        require_resource(
            &self.state,
            &principal,
            on_kind(Verb::Apply, &req.kind),
            &req.name,
            None,
        )
        .await?;
        if req.target_generation < 1 {
            return Err(ApiError::from(Violation::new("/target_generation", "must be >= 1")).into());
        }
        let call = WriteCall::new("RollbackResource", &req.request_id, req.validate_only, &req, |r| {
            r.request_id.clear()
        })?;
        let state = self.state.clone();
        let target = req.clone();
        let answer = write::run(&self.state.pool, &call, move |conn| {
            let (state, req, actor) = (state.clone(), target.clone(), actor.clone());
            Box::pin(async move {
                let key = (req.kind.clone(), req.name.clone());
                let current = resources::find_many_for_update(conn, std::slice::from_ref(&key))
                    .await?
                    .remove(&key)
                    .ok_or_else(|| resource_not_found(&req.kind, &req.name))?;
                if current.owner.is_some() {
                    return Err(ApiError::refused(
                        Reason::ResourceOwned,
                        format!(
                            "{}/{} was composed by another resource; it has no spec history of its own",
                            current.kind, current.name
                        ),
                    ));
                }
                let revision = revisions::get(conn, current.id, req.target_generation)
                    .await?
                    .ok_or_else(|| {
                        ApiError::refused(
                            Reason::RevisionNotFound,
                            format!(
                                "{}/{} has no retained revision at generation {}",
                                current.kind, current.name, req.target_generation
                            ),
                        )
                    })?;
                let write = ResourceWrite::rollback(
                    &current,
                    revision.spec.0,
                    revision.kind_version,
                    req.target_generation,
                    req.etag.clone(),
                );
                let written =
                    single(write_resources(conn, &state, &actor, std::slice::from_ref(&write), Items::Single).await?)?;
                Ok(RollbackResourceResponse {
                    resource: Some(resource_to_proto(written.resource, written.manifest_version)),
                })
            })
        })
        .await?;
        Ok(Response::new(answer))
    }
}

/// A stored revision as a proto message.
fn revision_to_proto(revision: Revision) -> converge_proto::v1::SpecRevision {
    let source = match revision.source.as_str() {
        "rollback" => converge_proto::v1::SpecRevisionSource::Rollback,
        "conversion" => converge_proto::v1::SpecRevisionSource::Conversion,
        _ => converge_proto::v1::SpecRevisionSource::Apply,
    };
    converge_proto::v1::SpecRevision {
        generation: revision.generation,
        spec: json_to_struct(&revision.spec.0),
        source: source.into(),
        restored_generation: revision.restored_generation,
        create_time: Some(timestamp(revision.created_at)),
        kind_version: revision.kind_version.unwrap_or_default(),
    }
}
