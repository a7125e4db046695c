//! The `converge.v1.OperationService` API: verbs invoked on resources.

use super::authorize::require_resource;
use crate::contract::authz::on_kind;
use crate::domain::authz::Verb;
use converge_proto::google::rpc;
use converge_proto::v1 as pb;
use converge_proto::v1::operation_service_server::OperationService;
use converge_proto::v1::{
    GetOperationRequest, GetOperationResponse, InvokeOperationRequest, InvokeOperationResponse, ListOperationsRequest,
    ListOperationsResponse,
};
use prost::Message;
use serde_json::Value;
use sqlx::PgConnection;
use tonic::{Request, Response, Status};
use uuid::Uuid;

use super::ApiState;
use super::keys::{check_key, resource_not_found};
use super::pages::{decode_token, finish_page, invalid_token};
use super::write::{self, WriteCall};
use crate::contract::caller;
use crate::contract::convert::{json_to_struct, optional_struct_to_json, timestamp};
use crate::contract::status::{ApiError, ERROR_DOMAIN, Reason};
use crate::domain::operation::{
    MAX_INPUT_BYTES, Operation, OperationState, unknown_verb_message, validate_verb, verbs_of,
};
use crate::domain::page_token::{PositionPart, filter_hash, page_size};
use crate::domain::violation::Violation;
use crate::store::operations::{self, NewOperation, OperationFilter};
use crate::store::resources;

/// Serves `converge.v1.OperationService`.
#[derive(Debug, Clone)]
pub struct OperationApi {
    state: ApiState,
}

impl OperationApi {
    /// A service over `state`.
    pub fn new(state: ApiState) -> Self {
        Self { state }
    }
}

fn state_from_proto(raw: i32) -> Result<Option<OperationState>, ApiError> {
    match pb::OperationState::try_from(raw) {
        Ok(pb::OperationState::Unspecified) => Ok(None),
        Ok(pb::OperationState::Pending) => Ok(Some(OperationState::Pending)),
        Ok(pb::OperationState::Running) => Ok(Some(OperationState::Running)),
        Ok(pb::OperationState::Succeeded) => Ok(Some(OperationState::Succeeded)),
        Ok(pb::OperationState::Failed) => Ok(Some(OperationState::Failed)),
        Err(_) => Err(Violation::new("/state", "must be a known operation state").into()),
    }
}

fn state_to_proto(state: OperationState) -> pb::OperationState {
    match state {
        OperationState::Pending => pb::OperationState::Pending,
        OperationState::Running => pb::OperationState::Running,
        OperationState::Succeeded => pb::OperationState::Succeeded,
        OperationState::Failed => pb::OperationState::Failed,
    }
}

/// The `google.rpc.Status` of a failed operation, with one ErrorInfo.
fn error_to_proto(op: &Operation) -> Option<rpc::Status> {
    let error = op.error.as_ref()?;
    let info = rpc::ErrorInfo {
        reason: error.reason.clone().unwrap_or_else(|| "OperationFailed".to_owned()),
        domain: ERROR_DOMAIN.to_owned(),
        metadata: [
            ("attempts".to_owned(), op.attempts.to_string()),
            ("operation".to_owned(), op.id.to_string()),
        ]
        .into_iter()
        .collect(),
    };
    Some(rpc::Status {
        code: error.code,
        message: error.message.clone(),
        details: vec![prost_types::Any {
            type_url: "type.googleapis.com/google.rpc.ErrorInfo".to_owned(),
            value: info.encode_to_vec(),
        }],
    })
}

fn operation_to_proto(op: Operation) -> pb::Operation {
    let error = error_to_proto(&op);
    let pending = op.pending_reason();
    pb::Operation {
        uid: op.id.to_string(),
        resource: Some(pb::ResourceRef {
            kind: op.kind.clone(),
            name: op.name.clone(),
        }),
        resource_uid: op.resource_id.to_string(),
        verb: op.verb.clone(),
        input: op.input.as_ref().and_then(json_to_struct),
        output: op.output.as_ref().and_then(json_to_struct),
        state: state_to_proto(op.state).into(),
        error,
        attempts: op.attempts,
        requested_by: op.requested_by.clone(),
        create_time: Some(timestamp(op.created_at)),
        complete_time: op.completed_at.map(timestamp),
        pending_reason: pending.map(|p| p.as_str().to_owned()).unwrap_or_default(),
        next_attempt_time: pending.map(|_| timestamp(op.not_before.max(op.read_at))),
    }
}

fn not_found(uid: &str) -> ApiError {
    ApiError::refused(Reason::OperationNotFound, format!("operation {uid} does not exist"))
}

fn parse_uid(uid: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(uid).map_err(|_| Violation::new("/uid", "must be a UUID").into())
}

/// What an invocation asks for, checked for everything that needs no
/// database.
struct Invocation {
    kind: String,
    name: String,
    verb: String,
    input: Option<Value>,
    requested_by: String,
}

fn invocation_of(req: &InvokeOperationRequest, requested_by: String) -> Result<Invocation, ApiError> {
    check_key(&req.kind, &req.name)?;
    validate_verb("/verb", &req.verb).map_err(|v| ApiError::violations(Reason::InvalidField, vec![v]))?;
    let input = optional_struct_to_json("/input", req.input.clone())?;
    if let Some(input) = &input {
        let bytes = input.to_string().len();
        if bytes > MAX_INPUT_BYTES {
            return Err(ApiError::violations(
                Reason::InvalidOperationInput,
                vec![Violation::new(
                    "/input",
                    format!("is {bytes} bytes as JSON; at most {MAX_INPUT_BYTES} are accepted"),
                )],
            ));
        }
    }
    Ok(Invocation {
        kind: req.kind.clone(),
        name: req.name.clone(),
        verb: req.verb.clone(),
        input,
        requested_by,
    })
}

/// Checks and records an invocation inside the caller's transaction.
async fn invoke_in(
    conn: &mut PgConnection,
    state: &ApiState,
    invocation: &Invocation,
    validate_only: bool,
) -> Result<InvokeOperationResponse, ApiError> {
    let resource = resources::find_for_update(conn, &invocation.kind, &invocation.name)
        .await?
        .ok_or_else(|| resource_not_found(&invocation.kind, &invocation.name))?;
    if resource.deletion_requested_at.is_some() {
        return Err(ApiError::refused(
            Reason::DeletionPending,
            format!(
                "{}/{} is being deleted; no operation can start on it",
                resource.kind, resource.name
            ),
        ));
    }
    let compiled = state
        .catalog
        .current(&state.pool, &resource.kind, resource.kind_version)
        .await
        .ok_or_else(|| {
            ApiError::refused(
                Reason::KindNotFound,
                format!(
                    "kind {:?} version {} has no manifest",
                    resource.kind, resource.kind_version
                ),
            )
        })?;
    let verbs = verbs_of(&compiled.manifest.reactions);
    if !verbs.iter().any(|v| v.verb == invocation.verb) {
        let message = unknown_verb_message(&resource.kind, resource.kind_version, &invocation.verb, &verbs);
        return Err(ApiError::Refused {
            reason: Reason::UnknownVerb,
            message: message.clone(),
            violations: vec![Violation::new("/verb", message)],
        });
    }
    if let Some(schema) = compiled.inputs.get(&invocation.verb) {
        let empty = Value::Object(serde_json::Map::new());
        schema
            .validate("/input", invocation.input.as_ref().unwrap_or(&empty))
            .map_err(|violations| ApiError::violations(Reason::InvalidOperationInput, violations))?;
    }
    let new = NewOperation {
        resource_id: resource.id,
        kind: &resource.kind,
        verb: &invocation.verb,
        input: invocation.input.as_ref(),
        requested_by: &invocation.requested_by,
    };
    let recorded = operations::invoke(conn, &new, state.retention.event_runs_per_timeline).await?;
    let mut operation = operation_to_proto(recorded);
    if validate_only {
        operation.uid.clear();
    }
    Ok(InvokeOperationResponse {
        operation: Some(operation),
    })
}

#[tonic::async_trait]
impl OperationService for OperationApi {
    async fn invoke_operation(
        &self,
        request: Request<InvokeOperationRequest>,
    ) -> Result<Response<InvokeOperationResponse>, Status> {
        let requested_by = caller::identity(&request);
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        check_key(&req.kind, &req.name)?;
        let action = crate::domain::authz::ResourceAction {
            operation: Some(&req.verb),
            ..on_kind(Verb::Invoke, &req.kind)
        };
        require_resource(&self.state, &principal, action, &req.name, None).await?;
        let call = WriteCall::new("InvokeOperation", &req.request_id, req.validate_only, &req, |r| {
            r.request_id.clear()
        })?;
        let invocation = std::sync::Arc::new(invocation_of(&req, requested_by)?);
        let state = self.state.clone();
        let validate_only = req.validate_only;
        let answer = write::run(&self.state.pool, &call, move |conn| {
            let (state, invocation) = (state.clone(), invocation.clone());
            Box::pin(async move { invoke_in(conn, &state, &invocation, validate_only).await })
        })
        .await?;
        Ok(Response::new(answer))
    }

    async fn get_operation(
        &self,
        request: Request<GetOperationRequest>,
    ) -> Result<Response<GetOperationResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        let id = parse_uid(&req.uid)?;
        let operation = operations::get(&self.state.pool, id)
            .await
            .map_err(ApiError::from)?
            .ok_or_else(|| not_found(&req.uid))?;
        // Seen by those who may see its resource; to others it does not exist.
        if self.state.authz.is_on() {
            require_resource(
                &self.state,
                &principal,
                on_kind(Verb::Get, &operation.kind),
                &operation.name,
                None,
            )
            .await
            .map_err(|e| match e {
                ApiError::Refused { .. } | ApiError::NotAuthorized { .. } => not_found(&req.uid),
                other => other,
            })?;
        }
        Ok(Response::new(GetOperationResponse {
            operation: Some(operation_to_proto(operation)),
        }))
    }

    async fn list_operations(
        &self,
        request: Request<ListOperationsRequest>,
    ) -> Result<Response<ListOperationsResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        check_key(&req.kind, &req.name)?;
        require_resource(&self.state, &principal, on_kind(Verb::Get, &req.kind), &req.name, None).await?;
        if let Some(verb) = &req.verb {
            validate_verb("/verb", verb).map_err(|v| ApiError::violations(Reason::InvalidField, vec![v]))?;
        }
        let state = state_from_proto(req.state)?;
        let limit = page_size(req.page_size).map_err(ApiError::from)?;
        let state_text = state.map(OperationState::as_db).unwrap_or("");
        let filters = filter_hash(&[&req.kind, &req.name, req.verb.as_deref().unwrap_or(""), state_text]);
        let before = match decode_token(&req.page_token, filters)? {
            None => None,
            Some(position) => match position.as_slice() {
                [PositionPart::Uuid(id)] => Some(*id),
                _ => return Err(invalid_token("is not an operation list position").into()),
            },
        };
        let resource_id = resources::id_of(&self.state.pool, &req.kind, &req.name)
            .await
            .map_err(ApiError::from)?
            .ok_or_else(|| resource_not_found(&req.kind, &req.name))?;
        let filter = OperationFilter {
            verb: req.verb.clone(),
            state,
        };
        let mut page = operations::list(
            &self.state.pool,
            resource_id,
            &filter,
            before,
            i64::try_from(limit + 1).unwrap_or(i64::MAX),
        )
        .await
        .map_err(ApiError::from)?;
        let next_page_token = finish_page(&mut page, limit, filters, |last| vec![PositionPart::Uuid(last.id)]);
        Ok(Response::new(ListOperationsResponse {
            operations: page.into_iter().map(operation_to_proto).collect(),
            next_page_token,
        }))
    }
}
