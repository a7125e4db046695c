//! The `converge.v1.AdminService` API: the fleet summary and operator
//! actions on one resource or many.

use super::authorize::{require_resource, scoped_selector};
use crate::contract::authz::on_kind;
use crate::domain::authz::{EVERY_KIND, Verb};
use std::time::Duration;

use converge_proto::v1 as pb;
use converge_proto::v1::admin_service_server::AdminService;
use converge_proto::v1::{
    ActOnResourcesRequest, ActOnResourcesResponse, GetFleetSummaryRequest, GetFleetSummaryResponse,
};
use tonic::{Request, Response, Status};

use super::ApiState;
use super::keys::{check_key, resource_not_found};
use super::pages::{decode_token, invalid_token};
use super::write::{self, WriteCall};
use crate::contract::caller;
use crate::contract::convert::{phase_to_proto, phases_from_proto, timestamp};
use crate::contract::status::{ApiError, Reason};
use crate::domain::admin::{AdminAction, FleetSummary, MAX_REASON_BYTES};
use crate::domain::labels::LabelSelector;
use crate::domain::names::validate_kind_name;
use crate::domain::page_token::{PageToken, PositionPart, filter_hash, page_size};
use crate::domain::resource::Phase;
use crate::domain::violation::{Violation, check_storable_text};
use crate::store::admin::{self, ActionTarget};
use crate::store::resources;
use crate::store::summary::{self, SummaryFilter};
use crate::store::unserved::{self, UnservedTasks};

/// Failure reasons a summary returns by default, and at most.
const DEFAULT_TOP_FAILURES: usize = 10;
const MAX_TOP_FAILURES: usize = 100;

/// A snapshot older than this is served only while nothing has written
/// resources since it was taken; otherwise the summary is counted now.
const SNAPSHOT_SERVED_FOR: Duration = Duration::from_secs(60);

/// Serves `converge.v1.AdminService`.
#[derive(Debug, Clone)]
pub struct AdminApi {
    state: ApiState,
}

impl AdminApi {
    /// A service over `state`.
    pub fn new(state: ApiState) -> Self {
        Self { state }
    }

    /// The task backlogs no connected worker serves, counted now (never
    /// from the snapshot: workers come and go without any resource write),
    /// of one kind or all. Tasks carry no labels, so a label selector does
    /// not narrow them.
    async fn unserved(&self, kind: Option<&str>) -> Result<Vec<UnservedTasks>, ApiError> {
        let mut pairs = unserved::unserved(&self.state.pool, self.state.liveness_secs())
            .await
            .map_err(ApiError::from)?;
        if let Some(kind) = kind {
            pairs.retain(|p| p.kind == kind);
        }
        Ok(pairs)
    }
}

/// The permission an admin action needs.
fn verb_of(action: AdminAction) -> Verb {
    match action {
        AdminAction::Reconcile => Verb::Reconcile,
        AdminAction::Quarantine | AdminAction::Unquarantine => Verb::Quarantine,
        AdminAction::ClearFailure => Verb::ClearFailure,
        AdminAction::ResetBackoff => Verb::ResetBackoff,
        AdminAction::ReleaseLease => Verb::ReleaseLease,
        AdminAction::ForceFinalize => Verb::ForceFinalize,
    }
}

/// A request's `label_selector`, or INVALID_LABEL_SELECTOR naming it.
pub(super) fn parse_selector(raw: &str) -> Result<LabelSelector, ApiError> {
    LabelSelector::parse(raw).map_err(|e| {
        ApiError::violations(
            Reason::InvalidLabelSelector,
            vec![Violation::new("/label_selector", e.to_string())],
        )
    })
}

fn action_from_proto(raw: i32) -> Result<AdminAction, ApiError> {
    let action = match pb::ResourceAction::try_from(raw) {
        Ok(pb::ResourceAction::Reconcile) => AdminAction::Reconcile,
        Ok(pb::ResourceAction::Quarantine) => AdminAction::Quarantine,
        Ok(pb::ResourceAction::Unquarantine) => AdminAction::Unquarantine,
        Ok(pb::ResourceAction::ClearFailure) => AdminAction::ClearFailure,
        Ok(pb::ResourceAction::ResetBackoff) => AdminAction::ResetBackoff,
        Ok(pb::ResourceAction::ReleaseLease) => AdminAction::ReleaseLease,
        Ok(pb::ResourceAction::ForceFinalize) => AdminAction::ForceFinalize,
        Ok(pb::ResourceAction::Unspecified) | Err(_) => {
            return Err(Violation::new("/action", "must be one of the ResourceAction values").into());
        }
    };
    Ok(action)
}

fn summary_to_proto(
    summary: FleetSummary,
    unserved: Vec<UnservedTasks>,
    as_of: chrono::DateTime<chrono::Utc>,
) -> GetFleetSummaryResponse {
    let phase = |name: &str| {
        Phase::from_db(name)
            .map(phase_to_proto)
            .unwrap_or(pb::Phase::Unspecified) as i32
    };
    let total = summary.total();
    GetFleetSummaryResponse {
        phase_counts: summary
            .phase_counts
            .into_iter()
            .map(|c| pb::KindPhaseCount {
                phase: phase(&c.phase),
                kind: c.kind,
                kind_version: c.kind_version,
                count: c.count,
            })
            .collect(),
        top_failures: summary
            .top_failures
            .into_iter()
            .map(|f| pb::FailureReasonCount {
                example: Some(pb::ResourceRef {
                    kind: f.kind.clone(),
                    name: f.example,
                }),
                kind: f.kind,
                stage: f.stage,
                reason: f.reason,
                count: f.count,
                example_message: f.example_message,
            })
            .collect(),
        oldest: summary
            .oldest
            .into_iter()
            .map(|o| pb::OldestInPhase {
                phase: phase(&o.phase),
                resource: Some(pb::ResourceRef {
                    kind: o.kind,
                    name: o.name,
                }),
                since: Some(timestamp(o.since)),
            })
            .collect(),
        unserved: unserved
            .into_iter()
            .map(|u| pb::UnservedTasks {
                kind: u.kind,
                kind_version: u.kind_version,
                tasks: u.tasks,
                oldest_since: Some(timestamp(u.oldest_waiting_since)),
            })
            .collect(),
        as_of: Some(timestamp(as_of)),
        total,
    }
}

/// The checked parts of an ActOnResources request.
#[derive(Debug, Clone)]
struct ActRequest {
    action: AdminAction,
    target: ActionTarget,
    name: Option<String>,
    limit: usize,
    after: Option<uuid::Uuid>,
    filters: u64,
}

fn check_act_request(req: &ActOnResourcesRequest) -> Result<ActRequest, ApiError> {
    let action = action_from_proto(req.action)?;
    let mut violations = Vec::new();
    if req.reason.trim().is_empty() {
        violations.push(Violation::new(
            "/reason",
            "is required: say why (it is recorded with your identity)",
        ));
    } else if req.reason.len() > MAX_REASON_BYTES {
        violations.push(Violation::new(
            "/reason",
            format!("must be at most {MAX_REASON_BYTES} bytes"),
        ));
    }
    if !req.name.is_empty() {
        for (field, set) in [
            ("/label_selector", !req.label_selector.is_empty()),
            ("/phases", !req.phases.is_empty()),
            ("/page_token", !req.page_token.is_empty()),
        ] {
            if set {
                violations.push(Violation::new(field, "must be empty when name is set"));
            }
        }
    }
    if !violations.is_empty() {
        return Err(ApiError::violations(Reason::InvalidField, violations));
    }
    check_storable_text("/reason", &req.reason)?;
    if req.name.is_empty() {
        validate_kind_name("/kind", &req.kind).map_err(|v| ApiError::violations(Reason::InvalidName, vec![v]))?;
    } else {
        check_key(&req.kind, &req.name)?;
    }
    let selector = parse_selector(&req.label_selector)?;
    let phases = phases_from_proto("/phases", &req.phases)?;
    let limit = page_size(req.page_size).map_err(ApiError::from)?;
    let mut phase_names: Vec<&str> = phases.iter().map(|p| p.as_db()).collect();
    phase_names.sort_unstable();
    let filters = filter_hash(&[action.as_db(), &req.kind, &selector.to_string(), &phase_names.join(",")]);
    let after = match decode_token(&req.page_token, filters)?.as_deref() {
        None => None,
        Some([PositionPart::Uuid(id)]) => Some(*id),
        Some(_) => return Err(invalid_token("is not a position of this call")),
    };
    Ok(ActRequest {
        action,
        target: ActionTarget {
            action,
            kind: req.kind.clone(),
            selector,
            phases,
        },
        name: (!req.name.is_empty()).then(|| req.name.clone()),
        limit,
        after,
        filters,
    })
}

#[tonic::async_trait]
impl AdminService for AdminApi {
    async fn get_fleet_summary(
        &self,
        request: Request<GetFleetSummaryRequest>,
    ) -> Result<Response<GetFleetSummaryResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        if let Some(kind) = &req.kind {
            validate_kind_name("/kind", kind).map_err(|v| ApiError::violations(Reason::InvalidName, vec![v]))?;
        }
        let top = match req.top_failures {
            0 => DEFAULT_TOP_FAILURES,
            n if n < 0 => return Err(ApiError::from(Violation::new("/top_failures", "must not be negative")).into()),
            n => usize::try_from(n).unwrap_or(MAX_TOP_FAILURES).min(MAX_TOP_FAILURES),
        };
        // A summary counts resources: the list verb, on the kind asked for
        // or on every kind, within the caller's label scope.
        let permission = on_kind(Verb::List, req.kind.as_deref().unwrap_or(EVERY_KIND));
        let filter = SummaryFilter {
            kind: req.kind.clone(),
            selector: scoped_selector(
                &self.state,
                &principal,
                permission,
                parse_selector(&req.label_selector)?,
            )?,
        };
        let pool = &self.state.pool;
        if !req.fresh && filter.is_everything() && top <= DEFAULT_TOP_FAILURES {
            let (taken_at, mut snapshot) = match summary::current_snapshot(pool, SNAPSHOT_SERVED_FOR)
                .await
                .map_err(ApiError::from)?
            {
                Some(current) => {
                    summary::mark_requested(pool).await.map_err(ApiError::from)?;
                    current
                }
                // Counted now and kept: the engine keeps it fresh from here
                // while callers keep asking.
                None => summary::take(pool, DEFAULT_TOP_FAILURES)
                    .await
                    .map_err(ApiError::from)?,
            };
            snapshot.top_failures.truncate(top);
            let unserved = self.unserved(filter.kind.as_deref()).await?;
            return Ok(Response::new(summary_to_proto(snapshot, unserved, taken_at)));
        }
        let now = chrono::Utc::now();
        let counted = summary::count(pool, &filter, top).await.map_err(ApiError::from)?;
        let unserved = self.unserved(filter.kind.as_deref()).await?;
        Ok(Response::new(summary_to_proto(counted, unserved, now)))
    }

    async fn act_on_resources(
        &self,
        request: Request<ActOnResourcesRequest>,
    ) -> Result<Response<ActOnResourcesResponse>, Status> {
        let actor = caller::api_actor(&request);
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        let mut checked = check_act_request(&req)?;
        let permission = on_kind(verb_of(checked.action), &req.kind);
        match &checked.name {
            Some(name) => require_resource(&self.state, &principal, permission, name, None).await?,
            None => {
                let requested = std::mem::take(&mut checked.target.selector);
                checked.target.selector = scoped_selector(&self.state, &principal, permission, requested)?;
            }
        }
        let call = WriteCall::new("ActOnResources", &req.request_id, req.validate_only, &req, |r| {
            r.request_id.clear()
        })?;
        let first_call = req.page_token.is_empty();
        let (reason, validate_only) = (req.reason.clone(), req.validate_only);
        let (target, audit_actor) = (checked.clone(), actor.clone());
        let answer = write::run(&self.state.pool, &call, move |conn| {
            let (actor, reason, checked) = (actor.clone(), reason.clone(), target.clone());
            Box::pin(async move {
                let action = checked.action;
                if let Some(name) = &checked.name {
                    let resource = resources::find_for_update(conn, &checked.target.kind, name)
                        .await?
                        .ok_or_else(|| resource_not_found(&checked.target.kind, name))?;
                    let done = if validate_only {
                        admin::applies(conn, resource.id, action).await?
                    } else {
                        admin::act(conn, resource.id, action, &actor, &reason).await?
                    };
                    if !done {
                        return Err(ApiError::refused(
                            Reason::ActionNotApplicable,
                            format!(
                                "{}/{name} is {}: {} applies only to {}",
                                checked.target.kind,
                                resource.phase.as_db(),
                                action.as_db(),
                                action.applies_to()
                            ),
                        ));
                    }
                    return Ok(ActOnResourcesResponse {
                        acted_count: i64::from(!validate_only),
                        names: vec![name.clone()],
                        matched_count: 1,
                        next_page_token: String::new(),
                    });
                }
                let matched_count = if first_call || validate_only {
                    admin::count(conn, &checked.target).await?
                } else {
                    0
                };
                // One extra row says whether another page follows.
                let mut page =
                    admin::page(conn, &checked.target, checked.after, checked.limit + 1, !validate_only).await?;
                let more = page.len() > checked.limit;
                page.truncate(checked.limit);
                let mut names = Vec::with_capacity(page.len());
                let mut acted = 0i64;
                for (id, name) in &page {
                    if validate_only || admin::act(conn, *id, action, &actor, &reason).await? {
                        acted += i64::from(!validate_only);
                        names.push(name.clone());
                    }
                }
                let next_page_token = match page.last() {
                    Some((last, _)) if more && !validate_only => PageToken {
                        position: vec![PositionPart::Uuid(*last)],
                        filter_hash: checked.filters,
                    }
                    .encode(),
                    _ => String::new(),
                };
                Ok(ActOnResourcesResponse {
                    acted_count: acted,
                    names,
                    matched_count,
                    next_page_token,
                })
            })
        })
        .await?;
        if !validate_only {
            tracing::info!(
                target: "audit",
                verb = checked.action.as_db(),
                actor = %audit_actor,
                kind = %req.kind,
                name = %req.name,
                selector = %checked.target.selector,
                acted = answer.acted_count,
                reason = %req.reason,
                "operator action"
            );
        }
        Ok(Response::new(answer))
    }
}
