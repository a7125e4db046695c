//! `WatchResources` and `WatchResourceEvents`: positions, snapshots,
//! bookmarks and the errors that end a stream.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use converge_proto::v1::{
    EventWatchType, WatchEventType, WatchResourceEventsRequest, WatchResourceEventsResponse, WatchResourcesRequest,
    WatchResourcesResponse,
};
use sqlx::Connection;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;
use uuid::Uuid;

use super::ApiState;
use crate::contract::ResponseStream;
use crate::contract::authz::Principal;
use crate::contract::convert::{event_to_proto, resource_to_proto};
use crate::contract::status::{ApiError, Reason};
use crate::domain::labels::LabelSelector;
use crate::domain::names::validate_resource_name;
use crate::domain::page_token::MAX_PAGE_SIZE;
use crate::domain::position::Position;
use crate::domain::resource::ResourceRef;
use crate::domain::violation::Violation;
use crate::store::resources::{ListCursor, ResourceFilter};
use crate::store::{changes, events, resources};
use crate::watch::{ChangeType, Delivery, SubscriptionEnd, WatchFilter, WatchHub};

/// Messages buffered between a stream's task and the transport.
const OUTBOX: usize = 64;
/// Runs read per event-log poll.
const EVENT_PAGE: usize = 500;
/// Default and maximum snapshot size of an event watch.
const DEFAULT_EVENT_SNAPSHOT: usize = 100;
/// Failsafe poll of an event watch.
const EVENT_POLL: Duration = Duration::from_secs(1);
/// Periodic bookmarks of an event watch.
const EVENT_BOOKMARK: Duration = Duration::from_secs(5);

fn parse_position(field: &str, value: &str) -> Result<Option<Position>, ApiError> {
    if value.is_empty() {
        return Ok(None);
    }
    value.parse().map(Some).map_err(|_| {
        ApiError::violations(
            Reason::InvalidField,
            vec![Violation::new(field, "is not a position this server issued")],
        )
    })
}

fn too_old(what: &str) -> ApiError {
    ApiError::refused(
        Reason::ResourceVersionTooOld,
        format!("{what} is older than the retained change log; start a new watch without it (fresh snapshot)"),
    )
}

fn too_new(what: &str) -> ApiError {
    ApiError::refused(
        Reason::ResourceVersionTooNew,
        format!("{what} is ahead of the change log; start a new watch without it"),
    )
}

fn end_status(end: Option<SubscriptionEnd>) -> Status {
    let error = match end {
        Some(SubscriptionEnd::Lagged) => ApiError::refused(
            Reason::WatchTooSlow,
            "the watcher read too slowly and was cut off; resume from the last resource_version received",
        ),
        Some(SubscriptionEnd::TooOld) => too_old("the watch position"),
        Some(SubscriptionEnd::Unavailable) => ApiError::refused(
            Reason::WatchUnavailable,
            "the change log could not be read; resume from the last resource_version received",
        ),
        Some(SubscriptionEnd::ShuttingDown) | None => ApiError::ShuttingDown,
    };
    error.into()
}

fn resource_ref(reference: Option<&converge_proto::v1::ResourceRef>) -> Option<ResourceRef> {
    reference
        .filter(|r| !(r.kind.is_empty() && r.name.is_empty()))
        .map(|r| ResourceRef {
            kind: r.kind.clone(),
            name: r.name.clone(),
        })
}

fn hub(state: &ApiState) -> Result<Arc<WatchHub>, ApiError> {
    state
        .watch
        .clone()
        .ok_or_else(|| ApiError::Internal("watches requested on a process without a watch hub".into()))
}

/// Opens a resource watch.
pub async fn watch_resources(
    state: &ApiState,
    principal: &Principal,
    req: WatchResourcesRequest,
) -> Result<ResponseStream<WatchResourcesResponse>, ApiError> {
    let hub = hub(state)?;
    check_kind_filter(req.kind.as_deref(), req.kind_version)?;
    let selector = LabelSelector::parse(&req.label_selector).map_err(|e| {
        ApiError::violations(
            Reason::InvalidLabelSelector,
            vec![Violation::new("/label_selector", e.to_string())],
        )
    })?;
    let selector = super::authorize::scoped_selector(
        state,
        principal,
        crate::domain::authz::ResourceAction {
            verb: crate::domain::authz::Verb::Watch,
            kind: req.kind.as_deref().unwrap_or(crate::domain::authz::EVERY_KIND),
            kind_version: req.kind_version,
            operation: None,
        },
        selector,
    )?;
    let from = parse_position("/resource_version", &req.resource_version)?;
    let snapshot = req.send_initial_events.unwrap_or(from.is_none());
    if snapshot && from.is_some() {
        return Err(Violation::new(
            "/send_initial_events",
            "cannot be true together with resource_version (a resumed watch has no snapshot)",
        )
        .into());
    }
    if let Some(position) = from {
        if position < changes::horizon(&state.pool).await? {
            return Err(too_old("resource_version"));
        }
        if position > changes::head(&state.pool).await? {
            return Err(too_new("resource_version"));
        }
    }
    if let Some(name) = &req.name {
        if req.kind.is_none() {
            return Err(Violation::new("/kind", "is required with name").into());
        }
        validate_resource_name("/name", name).map_err(|v| ApiError::violations(Reason::InvalidName, vec![v]))?;
    }
    let filter = WatchFilter {
        kind: req.kind.clone(),
        kind_version: req.kind_version,
        selector,
        owner: resource_ref(req.owner.as_ref()),
        root: resource_ref(req.root.as_ref()),
        name: req.name.clone(),
    };
    let (out, rx) = mpsc::channel(OUTBOX);
    let state = state.clone();
    let bookmarks = req.allow_bookmarks;
    tokio::spawn(async move {
        let mut overlap = Overlap::new();
        let start = match from {
            Some(position) => position,
            None => {
                let begun = if snapshot {
                    send_snapshot(&state, &filter, &out).await
                } else {
                    changes::head(&state.pool)
                        .await
                        .map(|head| (head, Overlap::new()))
                        .map_err(ApiError::from)
                };
                match begun {
                    Ok((position, shown)) => {
                        overlap = shown;
                        let end = bookmark(position, true);
                        if out.send(Ok(end)).await.is_err() {
                            return;
                        }
                        position
                    }
                    Err(e) => {
                        let _ = out.send(Err(e.into())).await;
                        return;
                    }
                }
            }
        };
        let mut subscription = hub.subscribe(filter, start, bookmarks);
        loop {
            tokio::select! {
                delivery = subscription.recv() => {
                    let message = match delivery {
                        Some(Delivery::Change(change)) => {
                            let mut kind = change.change;
                            if let Some(shown) = overlap.get(&change.id).copied() {
                                if change.position <= shown {
                                    continue; // already in the snapshot
                                }
                                overlap.remove(&change.id);
                                if kind == ChangeType::Added {
                                    kind = ChangeType::Modified; // the client has it
                                }
                            }
                            Ok(WatchResourcesResponse {
                                r#type: kind.to_proto().into(),
                                resource: Some(change.resource.clone()),
                                resource_version: change.position.to_string(),
                                initial_events_end: false,
                            })
                        }
                        Some(Delivery::Bookmark(position)) => Ok(bookmark(position, false)),
                        None => Err(end_status(subscription.end())),
                    };
                    let last = message.is_err();
                    if out.send(message).await.is_err() || last {
                        return;
                    }
                }
                _ = out.closed() => return,
            }
        }
    });
    Ok(Box::pin(ReceiverStream::new(rx)))
}

fn bookmark(position: Position, initial_events_end: bool) -> WatchResourcesResponse {
    WatchResourcesResponse {
        r#type: WatchEventType::Bookmark.into(),
        resource: None,
        resource_version: position.to_string(),
        initial_events_end,
    }
}

/// Resources whose snapshot state was written by a transaction at or above
/// the snapshot position: the change log delivers those changes again, and
/// the stream skips every one it already showed.
type Overlap = HashMap<Uuid, Position>;

/// Sends every matching resource as ADDED from one consistent snapshot and
/// returns the snapshot's position (every change below it is in the
/// snapshot) with the snapshot's overlap with the changes that follow.
async fn send_snapshot(
    state: &ApiState,
    filter: &WatchFilter,
    out: &mpsc::Sender<Result<WatchResourcesResponse, Status>>,
) -> Result<(Position, Overlap), ApiError> {
    let mut owner_id = None;
    let mut root_id = None;
    for (reference, slot) in [(&filter.owner, &mut owner_id), (&filter.root, &mut root_id)] {
        if let Some(r) = reference {
            match resources::id_of(&state.pool, &r.kind, &r.name).await? {
                Some(id) => *slot = Some(id),
                // Not there (yet): the snapshot is empty, later changes still flow.
                None => *slot = Some(Uuid::nil()),
            }
        }
    }
    let list_filter = ResourceFilter {
        kind: filter.kind.clone(),
        kind_version: filter.kind_version,
        phases: Vec::new(),
        selector: filter.selector.clone(),
        owner_id,
        root_id,
        roots_only: false,
        provider_config: None,
    };
    let mut conn = state.pool.acquire().await?;
    let mut tx = conn.begin().await?;
    let frontier = changes::begin_snapshot(&mut tx).await?;
    let mut overlap = Overlap::new();
    let mut after: Option<ListCursor> = None;
    loop {
        let page = match (&filter.name, &filter.kind) {
            // One resource by its key: one indexed read, the other filters
            // checked on it.
            (Some(name), Some(kind)) => resources::get(&mut *tx, kind, name)
                .await?
                .filter(|r| {
                    filter.kind_version.is_none_or(|v| v == r.kind_version)
                        && filter.selector.matches(&r.labels)
                        && filter.owner.as_ref().is_none_or(|o| r.owner.as_ref() == Some(o))
                        && filter.root.as_ref().is_none_or(|o| r.root.as_ref() == Some(o))
                })
                .into_iter()
                .collect(),
            _ => resources::list_in(&mut tx, &list_filter, after, MAX_PAGE_SIZE).await?,
        };
        let full = page.len() >= MAX_PAGE_SIZE;
        after = page.last().map(|r| ListCursor {
            created_at: r.created_at,
            id: r.id,
        });
        for resource in page {
            if resource.position.txid >= frontier {
                overlap.insert(resource.id, resource.position);
            }
            let version = state
                .catalog
                .cached_version(&resource.kind, resource.kind_version)
                .unwrap_or(0);
            let message = WatchResourcesResponse {
                r#type: WatchEventType::Added.into(),
                resource_version: resource.position.to_string(),
                resource: Some(resource_to_proto(resource, version)),
                initial_events_end: false,
            };
            if out.send(Ok(message)).await.is_err() {
                return Err(ApiError::ShuttingDown);
            }
        }
        if !full {
            break;
        }
    }
    tx.rollback().await?;
    let position = Position { txid: frontier, seq: 0 };
    Ok((position, overlap))
}

/// Opens an event watch on one resource.
pub async fn watch_resource_events(
    state: &ApiState,
    principal: &Principal,
    req: WatchResourceEventsRequest,
) -> Result<ResponseStream<WatchResourceEventsResponse>, ApiError> {
    let hub = hub(state)?;
    super::keys::check_key(&req.kind, &req.name)?;
    super::authorize::require_resource(
        state,
        principal,
        crate::contract::authz::on_kind(crate::domain::authz::Verb::Watch, &req.kind),
        &req.name,
        None,
    )
    .await?;
    let id = resources::id_of(&state.pool, &req.kind, &req.name)
        .await?
        .ok_or_else(|| {
            ApiError::refused(
                Reason::ResourceNotFound,
                format!("{}/{} does not exist", req.kind, req.name),
            )
        })?;
    let limit = match req.snapshot_limit {
        0 => DEFAULT_EVENT_SNAPSHOT,
        n if n < 0 => return Err(Violation::new("/snapshot_limit", "must not be negative").into()),
        n => usize::try_from(n).unwrap_or(MAX_PAGE_SIZE).min(MAX_PAGE_SIZE),
    };
    let from = parse_position("/event_version", &req.event_version)?;
    if let Some(position) = from {
        let mut conn = state.pool.acquire().await?;
        let (horizon, head) = events::horizon_and_head(&mut conn, id).await?;
        if position < horizon {
            return Err(too_old("event_version"));
        }
        if position > head {
            return Err(too_new("event_version"));
        }
    }
    let (out, rx) = mpsc::channel(OUTBOX);
    let pool = state.pool.clone();
    let category = req.category.clone();
    let bookmarks = req.allow_bookmarks;
    tokio::spawn(async move {
        if let Err(status) = follow_events(&pool, &hub, id, category.as_deref(), from, limit, bookmarks, &out).await {
            let _ = out.send(Err(status)).await;
        }
    });
    Ok(Box::pin(ReceiverStream::new(rx)))
}

/// Streams one resource's event runs until the client leaves, the resource
/// is removed, retention overtakes the stream, or the server shuts down.
#[allow(clippy::too_many_arguments)]
async fn follow_events(
    pool: &sqlx::PgPool,
    hub: &WatchHub,
    id: Uuid,
    category: Option<&str>,
    from: Option<Position>,
    limit: usize,
    bookmarks: bool,
    out: &mpsc::Sender<Result<WatchResourceEventsResponse, Status>>,
) -> Result<(), Status> {
    let mut wake = hub.event_wake();
    let mut closed = hub.closed();
    // Snapshot runs last changed at or above the start position come again
    // from the log; skip what the snapshot already showed.
    let mut overlap: HashMap<Uuid, Position> = HashMap::new();
    let mut cursor = match from {
        Some(position) => position,
        None => {
            let mut conn = pool.acquire().await.map_err(ApiError::from)?;
            let mut tx = conn.begin().await.map_err(ApiError::from)?;
            let frontier = changes::begin_snapshot(&mut tx).await.map_err(ApiError::from)?;
            let runs = events::newest_runs(&mut tx, id, category, limit)
                .await
                .map_err(ApiError::from)?;
            tx.rollback().await.map_err(ApiError::from)?;
            for run in runs {
                if run.position.txid >= frontier {
                    overlap.insert(run.id, run.position);
                }
                let message = event_message(EventWatchType::Snapshot, run);
                if out.send(Ok(message)).await.is_err() {
                    return Ok(());
                }
            }
            let start = Position { txid: frontier, seq: 0 };
            if out.send(Ok(event_bookmark(start, true))).await.is_err() {
                return Ok(());
            }
            start
        }
    };
    let mut next_bookmark = tokio::time::Instant::now() + EVENT_BOOKMARK;
    loop {
        let mut conn = pool.acquire().await.map_err(ApiError::from)?;
        let frontier = changes::frontier(&mut conn).await.map_err(ApiError::from)?;
        let runs = events::runs_after(&mut conn, id, category, cursor, frontier, EVENT_PAGE)
            .await
            .map_err(ApiError::from)?;
        let full = runs.len() >= EVENT_PAGE;
        for run in runs {
            cursor = run.position;
            if let Some(shown) = overlap.get(&run.id).copied() {
                if run.position <= shown {
                    continue;
                }
                overlap.remove(&run.id);
            }
            let kind = if run.count == 1 {
                EventWatchType::Appended
            } else {
                EventWatchType::Extended
            };
            if out.send(Ok(event_message(kind, run))).await.is_err() {
                return Ok(());
            }
        }
        if !full {
            cursor = cursor.max(Position { txid: frontier, seq: 0 });
        }
        let (horizon, _) = events::horizon_and_head(&mut conn, id).await.map_err(ApiError::from)?;
        if cursor < horizon {
            return Err(too_old("the event watch position").into());
        }
        let exists = resources::exists(&mut conn, id).await.map_err(ApiError::from)?;
        drop(conn);
        if !exists {
            return Err(ApiError::refused(Reason::ResourceNotFound, "the resource was removed").into());
        }
        if full {
            continue;
        }
        if bookmarks && tokio::time::Instant::now() >= next_bookmark {
            if out.send(Ok(event_bookmark(cursor, false))).await.is_err() {
                return Ok(());
            }
            next_bookmark = tokio::time::Instant::now() + EVENT_BOOKMARK;
        }
        tokio::select! {
            _ = wake.changed() => {}
            _ = tokio::time::sleep(EVENT_POLL) => {}
            _ = closed.changed() => return Err(ApiError::ShuttingDown.into()),
            _ = out.closed() => return Ok(()),
        }
    }
}

fn event_message(kind: EventWatchType, run: crate::domain::event::EventRun) -> WatchResourceEventsResponse {
    let position = run.position;
    WatchResourceEventsResponse {
        r#type: kind.into(),
        event: Some(event_to_proto(run)),
        event_version: position.to_string(),
        initial_events_end: false,
    }
}

fn event_bookmark(position: Position, initial_events_end: bool) -> WatchResourceEventsResponse {
    WatchResourceEventsResponse {
        r#type: EventWatchType::Bookmark.into(),
        event: None,
        event_version: position.to_string(),
        initial_events_end,
    }
}

/// Refuses a watch or list filter (lists share the watch's filter) whose kind name is malformed or whose kind
/// version is out of its range (≥ 1).
pub(super) fn check_kind_filter(kind: Option<&str>, kind_version: Option<i32>) -> Result<(), ApiError> {
    if let Some(kind) = kind
        && let Err(v) = crate::domain::names::validate_kind_name("/kind", kind)
    {
        return Err(ApiError::violations(Reason::InvalidName, vec![v]));
    }
    if let Some(version) = kind_version {
        crate::domain::names::validate_kind_version("/kind_version", version)?;
    }
    Ok(())
}
