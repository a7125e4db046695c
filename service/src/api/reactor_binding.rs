//! The `converge.v1.ReactorBindingService` API: which lifecycle transitions
//! of which kind run which reactor kind.

use crate::domain::authz::{Access, Object};
use converge_proto::v1 as pb;
use converge_proto::v1::reactor_binding_service_server::ReactorBindingService;
use converge_proto::v1::{
    ApplyReactorBindingRequest, ApplyReactorBindingResponse, DeleteReactorBindingRequest, DeleteReactorBindingResponse,
    GetReactorBindingRequest, GetReactorBindingResponse, ListReactorBindingsRequest, ListReactorBindingsResponse,
    ListReactorDeliveriesRequest, ListReactorDeliveriesResponse, RedriveReactorDeliveriesRequest,
    RedriveReactorDeliveriesResponse, redrive_reactor_deliveries_request,
};
use sqlx::PgConnection;
use tonic::{Request, Response, Status};
use uuid::Uuid;

use super::ApiState;
use super::pages::{decode_token, finish_page, invalid_token};
use super::write::{self, WriteCall};
use crate::catalog::KindCatalog;
use crate::contract::caller;
use crate::contract::convert::timestamp;
use crate::contract::status::{ApiError, Reason};
use crate::domain::labels::LabelSelector;
use crate::domain::names::{validate_kind_name, validate_resource_name};
use crate::domain::page_token::{PositionPart, filter_hash, page_size};
use crate::domain::reactor::{Binding, BindingContent, BindingStats, Delivery, RedriveTarget, Transition};
use crate::domain::violation::{Violation, check_storable_text};
use crate::store::reactors::{self, BindingFilter, DeliveryFilter};
use crate::store::{kinds, resources};

/// Most deliveries one redrive call covers (also its default).
pub const MAX_REDRIVE: usize = 1000;

/// Most deliveries a redrive answer lists.
const REDRIVE_LISTED: usize = 20;

/// Longest accepted redrive reason, in bytes.
const MAX_REASON_BYTES: usize = 1024;

/// Serves `converge.v1.ReactorBindingService`.
#[derive(Debug, Clone)]
pub struct ReactorBindingApi {
    state: ApiState,
}

impl ReactorBindingApi {
    /// A service over `state`.
    pub fn new(state: ApiState) -> Self {
        Self { state }
    }
}

fn transition_from_proto(raw: i32) -> Option<Transition> {
    match pb::Transition::try_from(raw).ok()? {
        pb::Transition::Unspecified => None,
        pb::Transition::Created => Some(Transition::Created),
        pb::Transition::Synced => Some(Transition::Synced),
        pb::Transition::Degraded => Some(Transition::Degraded),
        pb::Transition::Failed => Some(Transition::Failed),
        pb::Transition::Deleted => Some(Transition::Deleted),
    }
}

fn transition_to_proto(transition: Transition) -> pb::Transition {
    match transition {
        Transition::Created => pb::Transition::Created,
        Transition::Synced => pb::Transition::Synced,
        Transition::Degraded => pb::Transition::Degraded,
        Transition::Failed => pb::Transition::Failed,
        Transition::Deleted => pb::Transition::Deleted,
    }
}

fn binding_to_proto(binding: Binding, stats: BindingStats) -> pb::ReactorBinding {
    let etag = binding.etag();
    let c = binding.content;
    pb::ReactorBinding {
        name: c.name,
        watch_kind: c.watch_kind,
        watch_kind_version: c.watch_kind_version,
        transition: transition_to_proto(c.transition).into(),
        label_match: c.label_match.into_iter().collect(),
        reactor: c.reactor,
        reactor_version: c.reactor_version,
        enabled: Some(c.enabled),
        create_time: Some(timestamp(binding.created_at)),
        update_time: Some(timestamp(binding.updated_at)),
        etag,
        pending_deliveries: stats.pending,
        failed_deliveries: stats.failed,
        last_failure: stats.last_failure.unwrap_or_default(),
    }
}

fn not_found(name: &str) -> ApiError {
    ApiError::refused(
        Reason::ReactorBindingNotFound,
        format!("reactor binding {name:?} does not exist"),
    )
}

fn check_etag(binding: &Binding, etag: &str) -> Result<(), ApiError> {
    if !etag.is_empty() && etag != binding.etag() {
        return Err(ApiError::refused(
            Reason::EtagMismatch,
            format!(
                "reactor binding {:?} changed since etag {etag:?} was read; read it again",
                binding.content.name
            ),
        ));
    }
    Ok(())
}

/// The content an apply asks for, checked for everything that needs no
/// database.
fn content_of(binding: Option<pb::ReactorBinding>) -> Result<(BindingContent, String), ApiError> {
    let Some(b) = binding else {
        return Err(Violation::new("/reactor_binding", "is required").into());
    };
    let Some(transition) = transition_from_proto(b.transition) else {
        return Err(Violation::new(
            "/reactor_binding/transition",
            "must be one of TRANSITION_CREATED, TRANSITION_SYNCED, TRANSITION_DEGRADED, TRANSITION_FAILED, \
             TRANSITION_DELETED",
        )
        .into());
    };
    let content = BindingContent {
        name: b.name,
        watch_kind: b.watch_kind,
        watch_kind_version: b.watch_kind_version,
        transition,
        label_match: b.label_match.into_iter().collect(),
        reactor: b.reactor,
        reactor_version: b.reactor_version,
        enabled: b.enabled.unwrap_or(true),
    };
    if let Err(violations) = content.validate("/reactor_binding") {
        let reason = if violations.iter().any(|v| v.field.contains("/label_match")) {
            Reason::InvalidLabels
        } else if violations
            .iter()
            .any(|v| v.field.ends_with("/name") || v.field.ends_with("kind"))
        {
            Reason::InvalidName
        } else {
            Reason::InvalidField
        };
        return Err(ApiError::violations(reason, violations));
    }
    Ok((content, b.etag))
}

/// Whether the manifests of `kind` at `version` (any version when `None`)
/// exist, and whether any of them is a reactor kind (by the stage plan the
/// catalog compiled for it): `(any, reactors)`.
async fn versions_of(
    conn: &mut PgConnection,
    catalog: &KindCatalog,
    kind: &str,
    version: Option<i32>,
) -> Result<(bool, bool), ApiError> {
    let manifests = kinds::manifests_of(conn, kind).await?;
    let mut any = false;
    let mut reactor = false;
    for stored in manifests
        .iter()
        .filter(|m| version.is_none_or(|v| m.manifest.kind_version == v))
    {
        any = true;
        let compiled = catalog
            .compiled(conn, kind, stored.manifest.kind_version, stored.manifest_version)
            .await?;
        reactor |= compiled.plan.is_reactor();
    }
    Ok((any, reactor))
}

fn missing_kind(field: &str, kind: &str, version: Option<i32>) -> ApiError {
    let which = version.map_or_else(|| "any version".to_owned(), |v| format!("version {v}"));
    ApiError::Refused {
        reason: Reason::KindNotFound,
        message: format!("kind {kind:?} has no manifest at {which}"),
        violations: vec![Violation::new(
            field,
            format!("kind {kind:?} has no manifest at {which}"),
        )],
    }
}

/// Checks the kinds a binding names, inside the caller's transaction.
async fn check_kinds(conn: &mut PgConnection, catalog: &KindCatalog, content: &BindingContent) -> Result<(), ApiError> {
    let (watched, watched_reactor) =
        versions_of(conn, catalog, &content.watch_kind, content.watch_kind_version).await?;
    if !watched {
        return Err(missing_kind(
            "/reactor_binding/watch_kind",
            &content.watch_kind,
            content.watch_kind_version,
        ));
    }
    if watched_reactor {
        return Err(ApiError::violations(
            Reason::NotAReactor,
            vec![Violation::new(
                "/reactor_binding/watch_kind",
                format!(
                    "{:?} is a reactor kind: it has no resources whose transitions could fire a binding",
                    content.watch_kind
                ),
            )],
        ));
    }
    let (exists, is_reactor) = versions_of(conn, catalog, &content.reactor, content.reactor_version).await?;
    if !exists {
        return Err(missing_kind(
            "/reactor_binding/reactor",
            &content.reactor,
            content.reactor_version,
        ));
    }
    if !is_reactor {
        return Err(ApiError::violations(
            Reason::NotAReactor,
            vec![Violation::new(
                "/reactor_binding/reactor",
                format!(
                    "{:?} is not a reactor kind: its manifest declares no TRIGGER_REACTOR reaction",
                    content.reactor
                ),
            )],
        ));
    }
    Ok(())
}

/// Applies a binding inside the caller's transaction.
async fn apply_in(
    conn: &mut PgConnection,
    catalog: &KindCatalog,
    content: &BindingContent,
    etag: &str,
) -> Result<ApplyReactorBindingResponse, ApiError> {
    check_kinds(conn, catalog, content).await?;
    let existing = reactors::lock(conn, &content.name).await?;
    match &existing {
        Some(stored) => {
            check_etag(stored, etag)?;
            if stored.content == *content {
                let stats = stats_of(conn, &stored.content.name).await?;
                return Ok(ApplyReactorBindingResponse {
                    reactor_binding: Some(binding_to_proto(stored.clone(), stats)),
                    created: false,
                });
            }
        }
        None if !etag.is_empty() => return Err(not_found(&content.name)),
        None => {}
    }
    let stored = reactors::upsert(conn, content).await?;
    let stats = stats_of(conn, &stored.content.name).await?;
    Ok(ApplyReactorBindingResponse {
        reactor_binding: Some(binding_to_proto(stored, stats)),
        created: existing.is_none(),
    })
}

async fn stats_of(conn: &mut PgConnection, name: &str) -> Result<BindingStats, ApiError> {
    Ok(reactors::stats(conn, &[name.to_owned()])
        .await?
        .remove(name)
        .unwrap_or_default())
}

/// Deletes a binding inside the caller's transaction.
async fn delete_in(
    conn: &mut PgConnection,
    req: &DeleteReactorBindingRequest,
) -> Result<DeleteReactorBindingResponse, ApiError> {
    let Some(stored) = reactors::lock(conn, &req.name).await? else {
        if req.allow_missing && req.etag.is_none() {
            return Ok(DeleteReactorBindingResponse {});
        }
        return Err(not_found(&req.name));
    };
    check_etag(&stored, req.etag.as_deref().unwrap_or(""))?;
    reactors::delete(conn, &stored.content.name).await?;
    Ok(DeleteReactorBindingResponse {})
}

fn check_name(name: &str) -> Result<(), ApiError> {
    validate_resource_name("/name", name).map_err(|v| ApiError::violations(Reason::InvalidName, vec![v]))
}

fn delivery_to_proto(d: Delivery) -> pb::ReactorDelivery {
    pb::ReactorDelivery {
        id: d.id.to_string(),
        binding: d.binding,
        reactor: d.reactor,
        reactor_version: d.reactor_version,
        transition: d
            .transition
            .map_or(pb::Transition::Unspecified, transition_to_proto)
            .into(),
        resource: Some(pb::ResourceRef {
            kind: d.resource_kind,
            name: d.resource_name,
        }),
        resource_uid: d.resource_id.to_string(),
        generation: d.generation,
        dedup_token: d.dedup_token,
        attempts: d.attempts,
        create_time: Some(timestamp(d.created_at)),
        next_attempt_time: Some(timestamp(d.not_before)),
        fail_time: d.failed_at.map(timestamp),
        last_error: d.last_error.unwrap_or_default(),
        leased: d.leased,
    }
}

fn parse_uid(field: &str, raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| Violation::new(field, "must be a UUID").into())
}

/// The list position after the delivery `id`.
fn delivery_position(position: Option<Vec<PositionPart>>) -> Result<Option<Uuid>, ApiError> {
    match position.as_deref() {
        None => Ok(None),
        Some([PositionPart::Uuid(id)]) => Ok(Some(*id)),
        Some(_) => Err(invalid_token("is not a reactor delivery position")),
    }
}

/// A redrive request checked for everything that needs no database: its
/// target, reason and limit.
fn redrive_input(req: &RedriveReactorDeliveriesRequest) -> Result<(RedriveTarget, String, usize), ApiError> {
    use redrive_reactor_deliveries_request::Target;
    let target = match &req.target {
        None => {
            return Err(Violation::new("/target", "one of delivery_id, binding or resources is required").into());
        }
        Some(Target::DeliveryId(id)) => RedriveTarget::Id(parse_uid("/delivery_id", id)?),
        Some(Target::Binding(name)) => {
            validate_resource_name("/binding", name).map_err(|v| ApiError::violations(Reason::InvalidName, vec![v]))?;
            RedriveTarget::Binding(name.clone())
        }
        Some(Target::Resources(selected)) => {
            validate_kind_name("/resources/kind", &selected.kind)
                .map_err(|v| ApiError::violations(Reason::InvalidName, vec![v]))?;
            let selector = LabelSelector::parse(&selected.label_selector).map_err(|e| {
                ApiError::violations(
                    Reason::InvalidLabelSelector,
                    vec![Violation::new("/resources/label_selector", e.to_string())],
                )
            })?;
            RedriveTarget::Resources {
                kind: selected.kind.clone(),
                selector,
            }
        }
    };
    let reason = req.reason.trim();
    if reason.is_empty() {
        return Err(Violation::new("/reason", "is required: say why the deliveries are redriven").into());
    }
    if reason.len() > MAX_REASON_BYTES {
        return Err(Violation::new("/reason", format!("must be at most {MAX_REASON_BYTES} bytes")).into());
    }
    check_storable_text("/reason", reason)?;
    let limit = match usize::try_from(req.limit) {
        Ok(0) => MAX_REDRIVE,
        Ok(n) if n <= MAX_REDRIVE => n,
        _ => {
            return Err(Violation::new(
                "/limit",
                format!("must be between 0 (the default, {MAX_REDRIVE}) and {MAX_REDRIVE}; page through larger sets with page_token"),
            )
            .into());
        }
    };
    Ok((target, reason.to_owned(), limit))
}

/// The filter hash a redrive page token is bound to: the target.
fn redrive_filters(target: &RedriveTarget) -> u64 {
    match target {
        RedriveTarget::Id(id) => filter_hash(&["id", &id.to_string()]),
        RedriveTarget::Binding(name) => filter_hash(&["binding", name]),
        RedriveTarget::Resources { kind, selector } => filter_hash(&["resources", kind, &selector.to_string()]),
    }
}

/// Redrives inside the caller's transaction.
async fn redrive_in(
    conn: &mut PgConnection,
    target: &RedriveTarget,
    after: Option<Uuid>,
    limit: usize,
    filters: u64,
    actor: &str,
    reason: &str,
) -> Result<RedriveReactorDeliveriesResponse, ApiError> {
    if let RedriveTarget::Id(id) = target {
        let Some(delivery) = reactors::lock_delivery(conn, *id).await? else {
            return Err(ApiError::refused(
                Reason::ReactorDeliveryNotFound,
                format!("reactor delivery {id} does not exist (it may have been made, or swept by retention)"),
            ));
        };
        if delivery.failed_at.is_none() {
            let message = format!(
                "reactor delivery {id} has not given up (attempt {} so far): it is still being delivered, there is \
                 nothing to redrive",
                delivery.attempts
            );
            return Err(ApiError::Refused {
                reason: Reason::DeliveryNotGivenUp,
                violations: vec![Violation::new(format!("reactor_deliveries/{id}"), message.clone())],
                message,
            });
        }
    }
    let mut page = reactors::lock_given_up(conn, target, after, i64::try_from(limit + 1).unwrap_or(i64::MAX)).await?;
    let next_page_token = finish_page(&mut page, limit, filters, |last| vec![PositionPart::Uuid(last.id)]);
    let ids: Vec<Uuid> = page.iter().map(|d| d.id).collect();
    let count = reactors::redrive(conn, &ids, actor, reason).await?;
    Ok(RedriveReactorDeliveriesResponse {
        count,
        first: page.into_iter().take(REDRIVE_LISTED).map(delivery_to_proto).collect(),
        next_page_token,
    })
}

#[tonic::async_trait]
impl ReactorBindingService for ReactorBindingApi {
    async fn apply_reactor_binding(
        &self,
        request: Request<ApplyReactorBindingRequest>,
    ) -> Result<Response<ApplyReactorBindingResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        self.state
            .authz
            .require_object(&principal, Object::ReactorBindings, Access::Write)?;
        let call = WriteCall::new("ApplyReactorBinding", &req.request_id, req.validate_only, &req, |r| {
            r.request_id.clear()
        })?;
        let (content, etag) = content_of(req.reactor_binding.clone())?;
        let catalog = self.state.catalog.clone();
        let answer = write::run(&self.state.pool, &call, move |conn| {
            let (content, etag, catalog) = (content.clone(), etag.clone(), catalog.clone());
            Box::pin(async move { apply_in(conn, &catalog, &content, &etag).await })
        })
        .await?;
        Ok(Response::new(answer))
    }

    async fn get_reactor_binding(
        &self,
        request: Request<GetReactorBindingRequest>,
    ) -> Result<Response<GetReactorBindingResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        self.state
            .authz
            .require_object(&principal, Object::ReactorBindings, Access::Read)?;
        check_name(&req.name)?;
        let mut conn = self.state.pool.acquire().await.map_err(ApiError::from)?;
        let binding = reactors::get(&mut conn, &req.name)
            .await
            .map_err(ApiError::from)?
            .ok_or_else(|| not_found(&req.name))?;
        let stats = stats_of(&mut conn, &req.name).await?;
        Ok(Response::new(GetReactorBindingResponse {
            reactor_binding: Some(binding_to_proto(binding, stats)),
        }))
    }

    async fn list_reactor_bindings(
        &self,
        request: Request<ListReactorBindingsRequest>,
    ) -> Result<Response<ListReactorBindingsResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        self.state
            .authz
            .require_object(&principal, Object::ReactorBindings, Access::Read)?;
        let limit = page_size(req.page_size).map_err(ApiError::from)?;
        for (field, kind) in [("/watch_kind", &req.watch_kind), ("/reactor", &req.reactor)] {
            if let Some(kind) = kind
                && let Err(v) = validate_kind_name(field, kind)
            {
                return Err(ApiError::violations(Reason::InvalidName, vec![v]).into());
            }
        }
        let filters = filter_hash(&[
            req.watch_kind.as_deref().unwrap_or(""),
            req.reactor.as_deref().unwrap_or(""),
        ]);
        let after = match decode_token(&req.page_token, filters)? {
            None => None,
            Some(position) => match position.as_slice() {
                [PositionPart::Text(name)] => Some(name.clone()),
                _ => return Err(invalid_token("is not a reactor binding list position").into()),
            },
        };
        let filter = BindingFilter {
            watch_kind: req.watch_kind.clone(),
            reactor: req.reactor.clone(),
        };
        let mut page = reactors::list(
            &self.state.pool,
            &filter,
            after.as_deref(),
            i64::try_from(limit + 1).unwrap_or(i64::MAX),
        )
        .await
        .map_err(ApiError::from)?;
        let next_page_token = finish_page(&mut page, limit, filters, |last| {
            vec![PositionPart::Text(last.content.name.clone())]
        });
        let names: Vec<String> = page.iter().map(|b| b.content.name.clone()).collect();
        let mut conn = self.state.pool.acquire().await.map_err(ApiError::from)?;
        let mut stats = reactors::stats(&mut conn, &names).await.map_err(ApiError::from)?;
        Ok(Response::new(ListReactorBindingsResponse {
            reactor_bindings: page
                .into_iter()
                .map(|b| {
                    let s = stats.remove(&b.content.name).unwrap_or_default();
                    binding_to_proto(b, s)
                })
                .collect(),
            next_page_token,
        }))
    }

    async fn delete_reactor_binding(
        &self,
        request: Request<DeleteReactorBindingRequest>,
    ) -> Result<Response<DeleteReactorBindingResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        self.state
            .authz
            .require_object(&principal, Object::ReactorBindings, Access::Write)?;
        check_name(&req.name)?;
        let call = WriteCall::new("DeleteReactorBinding", &req.request_id, false, &req, |r| {
            r.request_id.clear()
        })?;
        let target = req.clone();
        let answer = write::run(&self.state.pool, &call, move |conn| {
            let req = target.clone();
            Box::pin(async move { delete_in(conn, &req).await })
        })
        .await?;
        Ok(Response::new(answer))
    }

    async fn list_reactor_deliveries(
        &self,
        request: Request<ListReactorDeliveriesRequest>,
    ) -> Result<Response<ListReactorDeliveriesResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        self.state
            .authz
            .require_object(&principal, Object::ReactorBindings, Access::Read)?;
        let limit = page_size(req.page_size).map_err(ApiError::from)?;
        if let Some(binding) = &req.binding {
            validate_resource_name("/binding", binding)
                .map_err(|v| ApiError::violations(Reason::InvalidName, vec![v]))?;
        }
        let by_ref = req
            .resource
            .as_ref()
            .filter(|r| !(r.kind.is_empty() && r.name.is_empty()));
        if let Some(r) = by_ref {
            let mut violations = Vec::new();
            violations.extend(validate_kind_name("/resource/kind", &r.kind).err());
            violations.extend(validate_resource_name("/resource/name", &r.name).err());
            if !violations.is_empty() {
                return Err(ApiError::violations(Reason::InvalidName, violations).into());
            }
        }
        let by_uid = req
            .resource_uid
            .as_deref()
            .map(|raw| parse_uid("/resource_uid", raw))
            .transpose()?;
        let filters = filter_hash(&[
            req.binding.as_deref().unwrap_or(""),
            &by_ref.map(|r| format!("{}/{}", r.kind, r.name)).unwrap_or_default(),
            &by_uid.map(|u| u.to_string()).unwrap_or_default(),
            if req.only_given_up { "given-up" } else { "" },
        ]);
        let after = delivery_position(decode_token(&req.page_token, filters)?)?;
        let pool = &self.state.pool;
        let by_name = match by_ref {
            Some(r) => match resources::id_of(pool, &r.kind, &r.name).await.map_err(ApiError::from)? {
                Some(id) => Some(id),
                // A resource that does not exist has no deliveries to list.
                None => return Ok(Response::new(ListReactorDeliveriesResponse::default())),
            },
            None => None,
        };
        let resource_id = match (by_name, by_uid) {
            (Some(a), Some(b)) if a != b => return Ok(Response::new(ListReactorDeliveriesResponse::default())),
            (a, b) => a.or(b),
        };
        let filter = DeliveryFilter {
            binding: req.binding.clone(),
            resource_id,
            only_given_up: req.only_given_up,
        };
        let mut page = reactors::list_deliveries(pool, &filter, after, i64::try_from(limit + 1).unwrap_or(i64::MAX))
            .await
            .map_err(ApiError::from)?;
        let next_page_token = finish_page(&mut page, limit, filters, |last| vec![PositionPart::Uuid(last.id)]);
        Ok(Response::new(ListReactorDeliveriesResponse {
            reactor_deliveries: page.into_iter().map(delivery_to_proto).collect(),
            next_page_token,
        }))
    }

    async fn redrive_reactor_deliveries(
        &self,
        request: Request<RedriveReactorDeliveriesRequest>,
    ) -> Result<Response<RedriveReactorDeliveriesResponse>, Status> {
        let actor = caller::api_actor(&request);
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        let (target, reason, limit) = redrive_input(&req)?;
        // By resources: the redrive verb on their kind, within the caller's
        // label scope. By id or binding: a change to reactor bindings.
        let target = match target {
            RedriveTarget::Resources { kind, selector } => {
                let action = crate::contract::authz::on_kind(crate::domain::authz::Verb::Redrive, &kind);
                let selector = super::authorize::scoped_selector(&self.state, &principal, action, selector)?;
                RedriveTarget::Resources { kind, selector }
            }
            other => {
                self.state
                    .authz
                    .require_object(&principal, Object::ReactorBindings, Access::Write)?;
                other
            }
        };
        let filters = redrive_filters(&target);
        let after = delivery_position(decode_token(&req.page_token, filters)?)?;
        let call = WriteCall::new(
            "RedriveReactorDeliveries",
            &req.request_id,
            req.validate_only,
            &req,
            |r| r.request_id.clear(),
        )?;
        let (work_target, work_actor, work_reason) = (target.clone(), actor.clone(), reason.clone());
        let answer = write::run(&self.state.pool, &call, move |conn| {
            let (target, actor, reason) = (work_target.clone(), work_actor.clone(), work_reason.clone());
            Box::pin(async move { redrive_in(conn, &target, after, limit, filters, &actor, &reason).await })
        })
        .await?;
        if !req.validate_only {
            // One line per call for the audit trail (a repeated request id
            // logs again: the caller did call again).
            tracing::info!(
                target: "audit",
                verb = "RedriveReactorDeliveries",
                actor = %actor,
                reason = %reason,
                count = answer.count,
                "reactor deliveries redriven"
            );
        }
        Ok(Response::new(answer))
    }
}
