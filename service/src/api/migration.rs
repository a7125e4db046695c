//! The `converge.v1.KindMigrationService` API and the duty that runs kind
//! migrations (ADR 48).
//!
//! The runner lives here, not in `engine`, because a conversion is a
//! resource write: it goes through the API's write path
//! ([`write_resources`]: the kind lock, the target schema, events, the
//! spec history and the scheduling of the new generation), exactly as an
//! apply that changes the version would.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::time::Duration;

use converge_proto::v1 as pb;
use converge_proto::v1::kind_migration_service_server::KindMigrationService;
use converge_proto::v1::{
    CancelKindMigrationRequest, CancelKindMigrationResponse, GetKindMigrationRequest, GetKindMigrationResponse,
    ListKindMigrationsRequest, ListKindMigrationsResponse, StartKindMigrationRequest, StartKindMigrationResponse,
    WatchKindMigrationRequest, WatchKindMigrationResponse,
};
use futures::Stream;
use sqlx::PgConnection;
use tokio::sync::watch;
use tonic::{Request, Response, Status};
use uuid::Uuid;

use super::ApiState;
use super::admin::parse_selector;
use super::pages::{decode_token, finish_page, invalid_token};
use super::resource::apply::{Items, ResourceWrite, write_resources};
use super::write::{self, WriteCall};
use crate::contract::caller;
use crate::contract::convert::timestamp;
use crate::contract::status::{ApiError, Reason};
use crate::domain::authz::{Access, Object};
use crate::domain::labels::LabelSelector;
use crate::domain::names::{validate_kind_name, validate_kind_version};
use crate::domain::page_token::{PositionPart, filter_hash, page_size};
use crate::domain::resource::ConditionInput;
use crate::domain::violation::{Violation, clip};
use crate::store::kinds;
use crate::store::migrations::{self, Candidate, Failure, MAX_FIRST_FAILURES, Migration, NewMigration, Progress, Walk};
use crate::store::resources;

/// Resources converted per transaction.
pub const BATCH: i64 = 500;
/// How often an idle runner looks for a running migration.
const IDLE_POLL: Duration = Duration::from_secs(1);
/// How often a watch re-reads its migration.
const WATCH_POLL: Duration = Duration::from_millis(500);
/// The condition a failed conversion leaves on its resource.
pub const CONVERTED: &str = "Converted";

/// Serves `converge.v1.KindMigrationService`.
#[derive(Debug, Clone)]
pub struct KindMigrationApi {
    state: ApiState,
}

impl KindMigrationApi {
    /// A service over `state`.
    pub fn new(state: ApiState) -> Self {
        Self { state }
    }
}

fn state_to_proto(state: &str) -> pb::KindMigrationState {
    match state {
        "running" => pb::KindMigrationState::Running,
        "succeeded" => pb::KindMigrationState::Succeeded,
        "failed" => pb::KindMigrationState::Failed,
        "cancelled" => pb::KindMigrationState::Cancelled,
        _ => pb::KindMigrationState::Unspecified,
    }
}

fn migration_to_proto(m: Migration) -> pb::KindMigration {
    pb::KindMigration {
        uid: m.id.to_string(),
        kind: m.kind,
        from_version: m.from_version,
        to_version: m.to_version,
        label_selector: m.label_selector,
        validate_only: m.validate_only,
        state: state_to_proto(&m.state).into(),
        total: m.total,
        converted: m.converted,
        failed: m.failed,
        first_failures: m
            .first_failures
            .0
            .into_iter()
            .map(|f| pb::KindMigrationFailure {
                name: f.name,
                message: f.message,
            })
            .collect(),
        requested_by: m.requested_by,
        create_time: Some(timestamp(m.created_at)),
        update_time: Some(timestamp(m.updated_at)),
        end_time: m.ended_at.map(timestamp),
        done: m.state != "running",
    }
}

fn not_found(uid: &str) -> ApiError {
    ApiError::refused(
        Reason::MigrationNotFound,
        format!("kind migration {uid} does not exist"),
    )
}

fn parse_uid(uid: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(uid).map_err(|_| Violation::new("/uid", "must be a UUID").into())
}

/// The checks of a start that need no database.
fn check_start(req: &StartKindMigrationRequest) -> Result<LabelSelector, ApiError> {
    let mut violations = Vec::new();
    let mut reason = Reason::InvalidField;
    if let Err(v) = validate_kind_name("/kind", &req.kind) {
        violations.push(v);
        reason = Reason::InvalidName;
    }
    violations.extend(validate_kind_version("/from_version", req.from_version).err());
    violations.extend(validate_kind_version("/to_version", req.to_version).err());
    if req.from_version == req.to_version {
        violations.push(Violation::new("/to_version", "must differ from from_version"));
    }
    if !violations.is_empty() {
        return Err(ApiError::violations(reason, violations));
    }
    parse_selector(&req.label_selector)
}

/// Checks and records a migration inside the caller's transaction.
async fn start_in(
    conn: &mut PgConnection,
    state: &ApiState,
    req: &StartKindMigrationRequest,
    selector: &LabelSelector,
    requested_by: &str,
) -> Result<StartKindMigrationResponse, ApiError> {
    let (kind, from, to) = (req.kind.as_str(), req.from_version, req.to_version);
    let target = kinds::lock_kind_state(conn, kind, to).await?.ok_or_else(|| {
        ApiError::refused(
            Reason::KindNotFound,
            format!("kind {kind:?} version {to} has no manifest; apply the target version's manifest first"),
        )
    })?;
    if target.retired {
        return Err(ApiError::refused(
            Reason::KindVersionRetired,
            format!("kind {kind:?} version {to} is retired; no resources may move to it"),
        ));
    }
    let compiled = state.catalog.compiled(conn, kind, to, target.manifest_version).await?;
    if compiled.conversions.from_version(from).is_none() {
        let declared = compiled.conversions.versions();
        let declared = if declared.is_empty() {
            "none".to_owned()
        } else {
            declared.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
        };
        return Err(ApiError::Refused {
            reason: Reason::ConversionNotDeclared,
            message: format!(
                "the manifest of kind {kind:?} version {to} declares no conversion from version {from} (declared: \
                 {declared}); add a SpecConversion with from_version {from} to it"
            ),
            violations: vec![Violation::new(
                "/from_version",
                format!("has no conversion to version {to}"),
            )],
        });
    }
    let total = migrations::count(conn, kind, from, selector).await?;
    if total == 0 && kinds::kind_state(conn, kind, from).await?.is_none() {
        return Err(ApiError::refused(
            Reason::KindNotFound,
            format!("kind {kind:?} has neither a manifest nor resources at version {from}"),
        ));
    }
    if let Some(running) = migrations::running_of_kind(conn, kind).await? {
        return Err(in_progress(&running));
    }
    let new = NewMigration {
        kind,
        from_version: from,
        to_version: to,
        label_selector: &req.label_selector,
        validate_only: req.validate_only,
        total,
        requested_by,
    };
    match migrations::insert(conn, &new).await? {
        Some(migration) => Ok(StartKindMigrationResponse {
            migration: Some(migration_to_proto(migration)),
        }),
        // Two starts raced past the check: the unique index decided.
        None => Err(ApiError::refused(
            Reason::MigrationInProgress,
            format!("another migration of kind {kind:?} is running; wait for it or cancel it"),
        )),
    }
}

fn in_progress(running: &Migration) -> ApiError {
    ApiError::refused(
        Reason::MigrationInProgress,
        format!(
            "migration {} of kind {:?} (version {} to {}) is running; wait for it or cancel it",
            running.id, running.kind, running.from_version, running.to_version
        ),
    )
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchKindMigrationResponse, Status>> + Send>>;

fn watched(migration: Migration) -> WatchKindMigrationResponse {
    WatchKindMigrationResponse {
        migration: Some(migration_to_proto(migration)),
    }
}

#[tonic::async_trait]
impl KindMigrationService for KindMigrationApi {
    async fn start_kind_migration(
        &self,
        request: Request<StartKindMigrationRequest>,
    ) -> Result<Response<StartKindMigrationResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        self.state
            .authz
            .require_object(&principal, Object::Kinds, Access::Write)?;
        let requested_by = caller::identity(&request);
        let req = request.into_inner();
        let selector = check_start(&req)?;
        let call = WriteCall::new("StartKindMigration", &req.request_id, false, &req, |r| {
            r.request_id.clear();
        })?;
        let (state, owned) = (self.state.clone(), req.clone());
        let answer = write::run(&self.state.pool, &call, move |conn| {
            let (state, req, selector, requested_by) =
                (state.clone(), owned.clone(), selector.clone(), requested_by.clone());
            Box::pin(async move { start_in(conn, &state, &req, &selector, &requested_by).await })
        })
        .await?;
        if let Some(m) = &answer.migration {
            tracing::info!(
                target: "converge::audit",
                migration = %m.uid, kind = %m.kind, from = m.from_version, to = m.to_version,
                validate_only = m.validate_only, requested_by = %m.requested_by,
                "kind migration started"
            );
        }
        Ok(Response::new(answer))
    }

    async fn get_kind_migration(
        &self,
        request: Request<GetKindMigrationRequest>,
    ) -> Result<Response<GetKindMigrationResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        self.state
            .authz
            .require_object(&principal, Object::Kinds, Access::Read)?;
        let uid = request.into_inner().uid;
        let id = parse_uid(&uid)?;
        let migration = migrations::get(&self.state.pool, id)
            .await
            .map_err(ApiError::from)?
            .ok_or_else(|| not_found(&uid))?;
        Ok(Response::new(GetKindMigrationResponse {
            migration: Some(migration_to_proto(migration)),
        }))
    }

    async fn list_kind_migrations(
        &self,
        request: Request<ListKindMigrationsRequest>,
    ) -> Result<Response<ListKindMigrationsResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        self.state
            .authz
            .require_object(&principal, Object::Kinds, Access::Read)?;
        let req = request.into_inner();
        if !req.kind.is_empty() {
            validate_kind_name("/kind", &req.kind).map_err(|v| ApiError::violations(Reason::InvalidName, vec![v]))?;
        }
        let limit = page_size(req.page_size).map_err(ApiError::from)?;
        let filters = filter_hash(&[&req.kind]);
        let before = match decode_token(&req.page_token, filters)? {
            None => None,
            Some(position) => match position.as_slice() {
                [PositionPart::Uuid(id)] => Some(*id),
                _ => return Err(invalid_token("is not a kind migration list position").into()),
            },
        };
        let kind = (!req.kind.is_empty()).then_some(req.kind.as_str());
        let mut page = migrations::list(
            &self.state.pool,
            kind,
            before,
            i64::try_from(limit + 1).unwrap_or(i64::MAX),
        )
        .await
        .map_err(ApiError::from)?;
        let next_page_token = finish_page(&mut page, limit, filters, |last| vec![PositionPart::Uuid(last.id)]);
        Ok(Response::new(ListKindMigrationsResponse {
            migrations: page.into_iter().map(migration_to_proto).collect(),
            next_page_token,
        }))
    }

    async fn cancel_kind_migration(
        &self,
        request: Request<CancelKindMigrationRequest>,
    ) -> Result<Response<CancelKindMigrationResponse>, Status> {
        let principal = self.state.authz.principal(&request);
        self.state
            .authz
            .require_object(&principal, Object::Kinds, Access::Write)?;
        let requested_by = caller::identity(&request);
        let uid = request.into_inner().uid;
        let id = parse_uid(&uid)?;
        let call = WriteCall::unkeyed("CancelKindMigration");
        let missing = uid.clone();
        let answer = write::run(&self.state.pool, &call, move |conn| {
            let missing = missing.clone();
            Box::pin(async move {
                let migration = migrations::cancel(conn, id).await?.ok_or_else(|| not_found(&missing))?;
                Ok(CancelKindMigrationResponse {
                    migration: Some(migration_to_proto(migration)),
                })
            })
        })
        .await?;
        tracing::info!(target: "converge::audit", migration = %uid, requested_by = %requested_by, "kind migration cancelled");
        Ok(Response::new(answer))
    }

    type WatchKindMigrationStream = WatchStream;

    async fn watch_kind_migration(
        &self,
        request: Request<WatchKindMigrationRequest>,
    ) -> Result<Response<Self::WatchKindMigrationStream>, Status> {
        let principal = self.state.authz.principal(&request);
        self.state
            .authz
            .require_object(&principal, Object::Kinds, Access::Read)?;
        let uid = request.into_inner().uid;
        let id = parse_uid(&uid)?;
        let pool = self.state.pool.clone();
        let first = migrations::get(&pool, id)
            .await
            .map_err(ApiError::from)?
            .ok_or_else(|| not_found(&uid))?;
        // Each step yields the migration once it differs from the last one
        // sent; the step after the one with done = true ends the stream.
        let stream = futures::stream::unfold(Some((first, true)), move |step| {
            let pool = pool.clone();
            async move {
                let (last, first_round) = step?;
                if first_round {
                    let next = (last.state == "running").then(|| (last.clone(), false));
                    return Some((Ok(watched(last)), next));
                }
                loop {
                    tokio::time::sleep(WATCH_POLL).await;
                    match migrations::get(&pool, id).await {
                        Err(e) => return Some((Err(Status::from(ApiError::from(e))), None)),
                        Ok(None) => return None,
                        Ok(Some(now)) if now.updated_at != last.updated_at || now.state != last.state => {
                            let next = (now.state == "running").then(|| (now.clone(), false));
                            return Some((Ok(watched(now)), next));
                        }
                        Ok(Some(_)) => {}
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }
}

/// Runs kind migrations while `stop` is false: one batch per transaction,
/// on any number of control pods at once (a migration's row is taken with
/// `SKIP LOCKED`). While nothing migrates it reads one empty partial index
/// once per second.
pub async fn run(state: ApiState, mut stop: watch::Receiver<bool>) {
    loop {
        if *stop.borrow() {
            return;
        }
        let worked = match step(&state).await {
            Ok(worked) => worked,
            Err(e) => {
                tracing::warn!(error = %e, "kind migration batch failed; retrying");
                false
            }
        };
        if !worked {
            tokio::select! {
                _ = tokio::time::sleep(IDLE_POLL) => {}
                _ = stop.changed() => {}
            }
        }
    }
}

/// Runs one batch of one running migration; false when none runs. A batch
/// the write path refuses (not a transient fault: it would be refused again
/// on every retry) ends its migration as failed, with the refusal as its
/// last failure, rather than retrying it forever.
pub async fn step(state: &ApiState) -> Result<bool, ApiError> {
    if !migrations::any_running(&state.pool).await? {
        return Ok(false);
    }
    let call = WriteCall::unkeyed("KindMigrationBatch");
    let claimed = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (inner, seen) = (state.clone(), claimed.clone());
    let outcome = write::run(&state.pool, &call, move |conn| {
        let (state, seen) = (inner.clone(), seen.clone());
        Box::pin(async move {
            let Some(migration) = migrations::claim_running(conn).await? else {
                return Ok(false);
            };
            if let Ok(mut slot) = seen.lock() {
                *slot = Some(migration.id);
            }
            batch(conn, &state, migration).await?;
            Ok(true)
        })
    })
    .await;
    match outcome {
        Err(ApiError::Refused { reason, message, .. }) => {
            let id = claimed.lock().ok().and_then(|slot| *slot);
            let Some(id) = id else {
                return Err(ApiError::refused(reason, message));
            };
            tracing::warn!(migration = %id, %message, "a kind migration batch was refused; the migration ends");
            let why = format!("a batch was refused ({}): {message}", reason.as_str());
            write::run(&state.pool, &call, move |conn| {
                let why = why.clone();
                Box::pin(async move {
                    if let Some(migration) = migrations::get(&mut *conn, id).await?
                        && migration.state == "running"
                    {
                        let progress = Progress {
                            cursor: migration.cursor_at.zip(migration.cursor_id),
                            first_failures: migration.first_failures.0,
                            ..Progress::default()
                        };
                        abort(conn, id, progress, why).await?;
                    }
                    Ok(true)
                })
            })
            .await
        }
        other => other,
    }
}

/// Converts one batch of `migration` (row-locked) and records its progress.
async fn batch(conn: &mut PgConnection, state: &ApiState, migration: Migration) -> Result<(), ApiError> {
    let (kind, from, to) = (migration.kind.clone(), migration.from_version, migration.to_version);
    let selector = LabelSelector::parse(&migration.label_selector).unwrap_or_default();
    let walk = Walk {
        kind: kind.clone(),
        from_version: from,
        selector,
        failed_mark: format!("migration {}:", migration.id),
    };
    let cursor = migration.cursor_at.zip(migration.cursor_id);
    let mut progress = Progress {
        cursor,
        converted: 0,
        failed: 0,
        first_failures: migration.first_failures.0.clone(),
        state: "running",
    };

    // The target version as of this transaction.
    let target = match kinds::lock_kind_state(conn, &kind, to).await? {
        Some(target) if !target.retired => target,
        gone => {
            let why = if gone.is_some() {
                "was retired"
            } else {
                "lost its manifest"
            };
            return abort(
                conn,
                migration.id,
                progress,
                format!("kind {kind:?} version {to} {why} during the migration"),
            )
            .await;
        }
    };
    let compiled = state.catalog.compiled(conn, &kind, to, target.manifest_version).await?;
    let Some(conversion) = compiled.conversions.from_version(from) else {
        let why = format!("the manifest of version {to} no longer declares a conversion from version {from}");
        return abort(conn, migration.id, progress, why).await;
    };

    let candidates = migrations::next_batch(conn, &walk, cursor, BATCH).await?;
    if candidates.is_empty() {
        // The end of a pass: go back for what commits behind the cursor
        // left, else finish.
        let behind = if migration.validate_only {
            None
        } else {
            migrations::left_behind(conn, &walk, cursor).await?
        };
        match behind {
            Some(position) => progress.cursor = Some(position),
            None => {
                progress.state = if migration.failed > 0 { "failed" } else { "succeeded" };
                tracing::info!(
                    migration = %migration.id, kind = %kind, from, to, converted = migration.converted,
                    failed = migration.failed, validate_only = migration.validate_only, "kind migration finished"
                );
            }
        }
        migrations::advance(conn, migration.id, &progress).await?;
        return Ok(());
    }

    let mut writes = Vec::with_capacity(candidates.len());
    let mut converted_ids = Vec::with_capacity(candidates.len());
    let mut failures: Vec<(&Candidate, String)> = Vec::new();
    for candidate in &candidates {
        let labels: &BTreeMap<String, String> = &candidate.labels.0;
        if let Some(config) = &candidate.provider_config {
            failures.push((
                candidate,
                format!(
                    "references provider config {config:?} of version {from}; attach a config of version {to} (or \
                     none) with an apply on version {to}"
                ),
            ));
            continue;
        }
        let spec = match conversion.convert(&candidate.spec.0, &candidate.name, labels) {
            Ok(spec) => spec,
            Err(e) => {
                failures.push((candidate, format!("conversion failed at {e}")));
                continue;
            }
        };
        if let Err(refusal) = compiled.admit("/spec", &spec) {
            let first = match refusal {
                crate::domain::compiled::Refusal::Schema(violations) => violations
                    .first()
                    .map(|v| format!("{}: {}", v.field, v.description))
                    .unwrap_or_default(),
                crate::domain::compiled::Refusal::ReactorKind => format!("version {to} is a reactor kind"),
            };
            failures.push((
                candidate,
                format!("the converted spec breaks version {to}'s schema: {first}"),
            ));
            continue;
        }
        converted_ids.push(candidate.id);
        writes.push(ResourceWrite::conversion(
            &kind,
            &candidate.name,
            labels.clone(),
            (from, to),
            spec,
        ));
    }
    if let Some(last) = candidates.last() {
        progress.cursor = Some((last.created_at, last.id));
    }
    progress.converted = i64::try_from(writes.len()).unwrap_or(i64::MAX);
    for (candidate, message) in &failures {
        note_failure(&mut progress, &candidate.name, message);
    }
    if !migration.validate_only {
        let actor = format!("migration:{}", migration.id);
        write_resources(conn, state, &actor, &writes, Items::Batch).await?;
        migrations::clear_converted_conditions(conn, &converted_ids).await?;
        for (candidate, message) in &failures {
            let condition = ConditionInput {
                type_: CONVERTED.to_owned(),
                status: "False",
                reason: "ConversionFailed".to_owned(),
                message: clip(format!("{} to version {to}: {message}", walk.failed_mark), 1024),
                liveness_ms: None,
            };
            resources::set_conditions(
                conn,
                candidate.id,
                candidate.generation,
                std::slice::from_ref(&condition),
            )
            .await?;
        }
    }
    migrations::advance(conn, migration.id, &progress).await?;
    Ok(())
}

/// Counts a resource that did not convert, keeping the first ones by name.
fn note_failure(progress: &mut Progress, name: &str, message: &str) {
    progress.failed += 1;
    if progress.first_failures.len() < MAX_FIRST_FAILURES {
        progress.first_failures.push(Failure {
            name: name.to_owned(),
            message: message.to_owned(),
        });
    }
}

/// Ends a migration that cannot go on, saying why in its failures.
async fn abort(conn: &mut PgConnection, id: Uuid, mut progress: Progress, why: String) -> Result<(), ApiError> {
    progress.first_failures.push(Failure {
        name: String::new(),
        message: why,
    });
    progress.state = "failed";
    migrations::advance(conn, id, &progress).await?;
    Ok(())
}
