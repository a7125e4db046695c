//! The `converge.v1.ProviderConfigService` API: runtime-editable provider
//! configs, the default of a (kind, kind_version) and overrides attached to
//! resources.

use crate::domain::authz::{Access, Object};
use converge_proto::v1 as pb;
use converge_proto::v1::provider_config_service_server::ProviderConfigService;
use converge_proto::v1::{
    ApplyProviderConfigRequest, ApplyProviderConfigResponse, DeleteProviderConfigRequest, DeleteProviderConfigResponse,
    GetProviderConfigRequest, GetProviderConfigResponse, ListProviderConfigsRequest, ListProviderConfigsResponse,
};
use sqlx::PgConnection;
use tonic::{Request, Response, Status};

use super::ApiState;
use super::pages::{decode_token, finish_page, invalid_token};
use super::write::{self, WriteCall};
use crate::contract::caller;
use crate::contract::convert::{provider_config_to_proto, struct_to_json};
use crate::contract::status::{ApiError, Reason};
use crate::domain::names::{validate_kind_name, validate_kind_version, validate_resource_name};
use crate::domain::page_token::{PositionPart, filter_hash, page_size};
use crate::domain::provider_config::{ConfigContent, ProviderConfig};
use crate::domain::resource::ResourceRef;
use crate::domain::violation::Violation;
use crate::store::kinds;
use crate::store::provider_configs::{self, ConfigFilter, ConfigLock};

/// Resources named when a referenced config cannot be deleted.
const MAX_REPORTED_USERS: i64 = 5;
/// Bytes of data bundles one list page carries at most (at least one config
/// is always returned): a page of large bundles stays well under the
/// message limit.
const MAX_PAGE_DATA_BYTES: usize = 4 * 1024 * 1024;

/// Serves `converge.v1.ProviderConfigService`.
#[derive(Debug, Clone)]
pub struct ProviderConfigApi {
    state: ApiState,
}

impl ProviderConfigApi {
    /// A service over `state`.
    pub fn new(state: ApiState) -> Self {
        Self { state }
    }
}

fn not_found(name: &str) -> ApiError {
    ApiError::refused(
        Reason::ProviderConfigNotFound,
        format!("provider config {name:?} does not exist"),
    )
}

fn check_name(field: &str, name: &str) -> Result<(), ApiError> {
    validate_resource_name(field, name).map_err(|v| ApiError::violations(Reason::InvalidName, vec![v]))
}

fn check_etag(config: &ProviderConfig, etag: &str) -> Result<(), ApiError> {
    if !etag.is_empty() && etag != config.etag() {
        return Err(ApiError::refused(
            Reason::EtagMismatch,
            format!(
                "provider config {:?} changed since etag {etag:?} was read; read it again",
                config.name
            ),
        ));
    }
    Ok(())
}

fn owned(config: &ProviderConfig, owner: &ResourceRef) -> ApiError {
    ApiError::refused(
        Reason::ProviderConfigOwned,
        format!(
            "provider config {:?} was emitted by the composer of {}/{}; it changes with that composition",
            config.name, owner.kind, owner.name
        ),
    )
}

/// The content an apply asks for, checked for everything that needs no
/// database.
fn content_of(config: Option<pb::ProviderConfig>) -> Result<(ConfigContent, String), ApiError> {
    let Some(config) = config else {
        return Err(Violation::new("/provider_config", "is required").into());
    };
    let content = ConfigContent {
        spec: struct_to_json("/provider_config/spec", config.spec)?,
        name: config.name,
        kind: config.kind,
        kind_version: config.kind_version,
        is_default: config.is_default,
        data: config.data,
    };
    if let Err(violations) = content.validate("/provider_config") {
        let first = violations.first().map(|v| v.field.as_str()).unwrap_or_default();
        let reason = match first.rsplit('/').next() {
            Some("name" | "kind") => Reason::InvalidName,
            Some("data") => Reason::ConfigDataTooLarge,
            Some("spec") if content.spec.is_object() => Reason::SpecTooLarge,
            _ => Reason::InvalidField,
        };
        return Err(ApiError::violations(reason, violations));
    }
    Ok((content, config.etag))
}

/// Applies a config inside the caller's transaction.
async fn apply_in(
    conn: &mut PgConnection,
    state: &ApiState,
    actor: &str,
    content: &ConfigContent,
    etag: &str,
) -> Result<ApplyProviderConfigResponse, ApiError> {
    let (kind, version) = (content.kind.as_str(), content.kind_version);
    // Shared with resource writes, exclusive for manifest changes: the config
    // schema cannot change under this check.
    let kind_state = kinds::lock_kind_state(conn, kind, version).await?.ok_or_else(|| {
        ApiError::refused(
            Reason::KindNotFound,
            format!("kind {kind:?} version {version} has no manifest; apply one with KindService.ApplyKindManifest"),
        )
    })?;
    let compiled = state
        .catalog
        .compiled(conn, kind, version, kind_state.manifest_version)
        .await?;
    if let Some(schema) = &compiled.config {
        schema
            .validate("/provider_config/spec", &content.spec)
            .map_err(|violations| ApiError::violations(Reason::ConfigSchemaViolation, violations))?;
    }
    let existing = provider_configs::lock(conn, &content.name, ConfigLock::Update).await?;
    if let Some(stored) = &existing {
        if let Some(owner) = &stored.owner {
            return Err(owned(stored, owner));
        }
        let mut immutable = Vec::new();
        if stored.kind != content.kind {
            immutable.push(Violation::new(
                "/provider_config/kind",
                format!("is immutable: the config is for kind {:?}", stored.kind),
            ));
        }
        if stored.kind_version != content.kind_version {
            immutable.push(Violation::new(
                "/provider_config/kind_version",
                format!("is immutable: the config is for version {}", stored.kind_version),
            ));
        }
        if !immutable.is_empty() {
            return Err(ApiError::violations(Reason::InvalidField, immutable));
        }
        check_etag(stored, etag)?;
        if content.same_as(stored) {
            return Ok(ApplyProviderConfigResponse {
                provider_config: Some(provider_config_to_proto(stored.clone())),
                created: false,
            });
        }
    } else if !etag.is_empty() {
        return Err(not_found(&content.name));
    }
    let was_default = existing.as_ref().is_some_and(|c| c.is_default);
    if content.is_default && !was_default {
        provider_configs::lock_pair(conn, kind, version).await?;
        if let Some(other) = provider_configs::default_of(conn, kind, version).await? {
            return Err(ApiError::Refused {
                reason: Reason::DefaultConfigExists,
                message: format!(
                    "kind {kind:?} version {version} already has a default provider config, {:?}; \
                     make it non-default first",
                    other.name
                ),
                violations: vec![Violation::new(
                    "/provider_config/is_default",
                    format!("{:?} is already the default of this kind version", other.name),
                )],
            });
        }
    }
    let stored = match &existing {
        None => provider_configs::insert(conn, content).await?,
        Some(before) => {
            let stored = provider_configs::update(conn, content).await?;
            if before.spec != stored.spec || before.data != stored.data {
                provider_configs::pend_users(
                    conn,
                    std::slice::from_ref(&stored.name),
                    actor,
                    state.retention.event_runs_per_timeline,
                )
                .await?;
            }
            stored
        }
    };
    if stored.is_default || was_default {
        provider_configs::notify_default(conn, kind, version).await?;
    }
    Ok(ApplyProviderConfigResponse {
        provider_config: Some(provider_config_to_proto(stored)),
        created: existing.is_none(),
    })
}

/// Deletes an unreferenced config inside the caller's transaction.
async fn delete_in(
    conn: &mut PgConnection,
    req: &DeleteProviderConfigRequest,
) -> Result<DeleteProviderConfigResponse, ApiError> {
    let Some(stored) = provider_configs::lock(conn, &req.name, ConfigLock::Delete).await? else {
        if req.allow_missing && req.etag.is_none() {
            return Ok(DeleteProviderConfigResponse {});
        }
        return Err(not_found(&req.name));
    };
    if let Some(owner) = &stored.owner {
        return Err(owned(&stored, owner));
    }
    check_etag(&stored, req.etag.as_deref().unwrap_or(""))?;
    // Writes attaching the config hold its row key-share locked, so the
    // references read here are all there are until this commits.
    let users = provider_configs::referencing(conn, &stored.name, MAX_REPORTED_USERS).await?;
    if !users.is_empty() {
        let total = provider_configs::count_referencing(conn, &stored.name).await?;
        return Err(ApiError::Refused {
            reason: Reason::ProviderConfigInUse,
            message: format!(
                "provider config {:?} is the override of {total} resource(s); detach it from them first \
                 (apply each with an empty provider_config)",
                stored.name
            ),
            violations: users
                .into_iter()
                .map(|(kind, name)| Violation::new(format!("{kind}/{name}"), "references this provider config"))
                .collect(),
        });
    }
    provider_configs::delete(conn, &stored.name).await?;
    if stored.is_default {
        provider_configs::notify_default(conn, &stored.kind, stored.kind_version).await?;
    }
    Ok(DeleteProviderConfigResponse {})
}

/// The list filters of a request, checked.
fn filter_of(req: &ListProviderConfigsRequest) -> Result<ConfigFilter, ApiError> {
    if let Some(kind) = &req.kind
        && let Err(v) = validate_kind_name("/kind", kind)
    {
        return Err(ApiError::violations(Reason::InvalidName, vec![v]));
    }
    if let Some(version) = req.kind_version {
        validate_kind_version("/kind_version", version)?;
    }
    let owner = match &req.owner {
        None => None,
        Some(owner) => {
            let mut problems = Vec::new();
            problems.extend(validate_kind_name("/owner/kind", &owner.kind).err());
            problems.extend(validate_resource_name("/owner/name", &owner.name).err());
            if !problems.is_empty() {
                return Err(ApiError::violations(Reason::InvalidName, problems));
            }
            Some(ResourceRef {
                kind: owner.kind.clone(),
                name: owner.name.clone(),
            })
        }
    };
    Ok(ConfigFilter {
        kind: req.kind.clone(),
        kind_version: req.kind_version,
        is_default: req.is_default,
        owner,
    })
}

#[tonic::async_trait]
impl ProviderConfigService for ProviderConfigApi {
    async fn apply_provider_config(
        &self,
        request: Request<ApplyProviderConfigRequest>,
    ) -> Result<Response<ApplyProviderConfigResponse>, Status> {
        let actor = caller::api_actor(&request);
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        self.state
            .authz
            .require_object(&principal, Object::ProviderConfigs, Access::Write)?;
        let call = WriteCall::new("ApplyProviderConfig", &req.request_id, req.validate_only, &req, |r| {
            r.request_id.clear()
        })?;
        let (content, etag) = content_of(req.provider_config.clone())?;
        let state = self.state.clone();
        let answer = write::run(&self.state.pool, &call, move |conn| {
            let (state, content, etag, actor) = (state.clone(), content.clone(), etag.clone(), actor.clone());
            Box::pin(async move { apply_in(conn, &state, &actor, &content, &etag).await })
        })
        .await?;
        Ok(Response::new(answer))
    }

    async fn get_provider_config(
        &self,
        request: Request<GetProviderConfigRequest>,
    ) -> Result<Response<GetProviderConfigResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        self.state
            .authz
            .require_object(&principal, Object::ProviderConfigs, Access::Read)?;
        check_name("/name", &req.name)?;
        let mut conn = self.state.pool.acquire().await.map_err(ApiError::from)?;
        let config = provider_configs::get(&mut conn, &req.name)
            .await
            .map_err(ApiError::from)?
            .ok_or_else(|| not_found(&req.name))?;
        Ok(Response::new(GetProviderConfigResponse {
            provider_config: Some(provider_config_to_proto(config)),
        }))
    }

    async fn list_provider_configs(
        &self,
        request: Request<ListProviderConfigsRequest>,
    ) -> Result<Response<ListProviderConfigsResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        self.state
            .authz
            .require_object(&principal, Object::ProviderConfigs, Access::Read)?;
        let limit = page_size(req.page_size).map_err(ApiError::from)?;
        let filter = filter_of(&req)?;
        let owner_key = filter
            .owner
            .as_ref()
            .map(|o| format!("{}/{}", o.kind, o.name))
            .unwrap_or_default();
        let filters = filter_hash(&[
            req.kind.as_deref().unwrap_or(""),
            &req.kind_version.map(|v| v.to_string()).unwrap_or_default(),
            match req.is_default {
                Some(true) => "default",
                Some(false) => "override",
                None => "",
            },
            &owner_key,
        ]);
        let after = match decode_token(&req.page_token, filters)? {
            None => None,
            Some(position) => match position.as_slice() {
                [PositionPart::Text(name)] => Some(name.clone()),
                _ => return Err(invalid_token("is not a provider config list position").into()),
            },
        };
        let mut page = provider_configs::list(
            &self.state.pool,
            &filter,
            after.as_deref(),
            i64::try_from(limit + 1).unwrap_or(i64::MAX),
        )
        .await
        .map_err(ApiError::from)?;
        // Large bundles make a shorter page: keep what fits the data budget.
        let mut bytes = 0;
        let fits = page
            .iter()
            .take_while(|c| {
                bytes += c.data.len();
                bytes <= MAX_PAGE_DATA_BYTES
            })
            .count()
            .max(1);
        let next_page_token = finish_page(&mut page, limit.min(fits), filters, |last| {
            vec![PositionPart::Text(last.name.clone())]
        });
        Ok(Response::new(ListProviderConfigsResponse {
            provider_configs: page.into_iter().map(provider_config_to_proto).collect(),
            next_page_token,
        }))
    }

    async fn delete_provider_config(
        &self,
        request: Request<DeleteProviderConfigRequest>,
    ) -> Result<Response<DeleteProviderConfigResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        let req = request.into_inner();
        self.state
            .authz
            .require_object(&principal, Object::ProviderConfigs, Access::Write)?;
        check_name("/name", &req.name)?;
        let call = WriteCall::new("DeleteProviderConfig", &req.request_id, false, &req, |r| {
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
}
