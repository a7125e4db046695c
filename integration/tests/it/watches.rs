//! Watches over real gRPC: snapshots, commit-ordered changes, resume without
//! gap or overlap, retention errors, slow clients, several pods, events.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use converge_integration::api::{apply, apply_manifest, apply_ok, expect_error, resource_of, work_kind};
use converge_integration::{TestDatabase, TestServer};
use converge_proto::v1::{
    DeleteResourceRequest, EventWatchType, WatchEventType, WatchResourceEventsRequest, WatchResourceEventsResponse,
    WatchResourcesRequest, WatchResourcesResponse,
};
use converge_sdk::Client;
use converge_service::config::Role;
use serde_json::json;
use tokio_stream::StreamExt;
use tonic::{Code, Status, Streaming};

const STEP: Duration = Duration::from_secs(15);

async fn watch(client: &Client, request: WatchResourcesRequest) -> anyhow::Result<Streaming<WatchResourcesResponse>> {
    Ok(client.resources().watch_resources(request).await?.into_inner())
}

async fn next(stream: &mut Streaming<WatchResourcesResponse>) -> anyhow::Result<WatchResourcesResponse> {
    match tokio::time::timeout(STEP, stream.next()).await? {
        Some(message) => Ok(message?),
        None => anyhow::bail!("the stream ended"),
    }
}

/// The next non-bookmark message.
async fn next_change(stream: &mut Streaming<WatchResourcesResponse>) -> anyhow::Result<WatchResourcesResponse> {
    loop {
        let message = next(stream).await?;
        if message.r#type() != WatchEventType::Bookmark {
            return Ok(message);
        }
    }
}

fn name_of(message: &WatchResourcesResponse) -> String {
    message.resource.as_ref().map(|r| r.name.clone()).unwrap_or_default()
}

async fn server_with_kind() -> anyhow::Result<(TestServer, Client)> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    // A finalizer keeps a deleted app in place (Deleting) until its teardown
    // runs; no worker runs here, so deletions stay visible as modifications.
    let mut app = work_kind("app", 1, None);
    app.finalizer_name = "converge.dev/app".into();
    apply_manifest(&client, app).await?;
    apply_manifest(&client, work_kind("other", 1, None)).await?;
    Ok((server, client))
}

#[tokio::test]
async fn a_watch_sends_a_snapshot_a_bookmark_then_changes() -> anyhow::Result<()> {
    let (server, client) = server_with_kind().await?;
    for name in ["a", "b", "c"] {
        apply_ok(&client, apply("app", name, json!({}))).await?;
    }
    apply_ok(&client, apply("other", "x", json!({}))).await?;
    let mut stream = watch(
        &client,
        WatchResourcesRequest {
            kind: Some("app".into()),
            ..Default::default()
        },
    )
    .await?;
    let mut snapshot = Vec::new();
    for _ in 0..3 {
        let message = next(&mut stream).await?;
        assert_eq!(message.r#type(), WatchEventType::Added);
        snapshot.push(name_of(&message));
    }
    snapshot.sort();
    assert_eq!(snapshot, ["a", "b", "c"]);
    let end = next(&mut stream).await?;
    assert_eq!(end.r#type(), WatchEventType::Bookmark);
    assert!(end.initial_events_end);

    apply_ok(&client, apply("app", "b", json!({"v": 2}))).await?;
    apply_ok(&client, apply("other", "y", json!({}))).await?;
    apply_ok(&client, apply("app", "d", json!({}))).await?;
    client
        .resources()
        .delete_resource(DeleteResourceRequest {
            kind: "app".into(),
            name: "a".into(),
            ..Default::default()
        })
        .await?;

    let modified = next_change(&mut stream).await?;
    assert_eq!(
        (modified.r#type(), name_of(&modified)),
        (WatchEventType::Modified, "b".into())
    );
    assert_eq!(modified.resource.as_ref().map(|r| r.generation), Some(2));
    let added = next_change(&mut stream).await?;
    assert_eq!((added.r#type(), name_of(&added)), (WatchEventType::Added, "d".into()));
    let deleting = next_change(&mut stream).await?;
    assert_eq!(
        (deleting.r#type(), name_of(&deleting)),
        (WatchEventType::Modified, "a".into())
    );
    assert!(
        deleting
            .resource
            .as_ref()
            .and_then(|r| r.delete_time.as_ref())
            .is_some()
    );
    server.shutdown().await
}

#[tokio::test]
async fn a_resumed_watch_has_no_gap_and_no_overlap() -> anyhow::Result<()> {
    let (server, client) = server_with_kind().await?;
    let mut stream = watch(
        &client,
        WatchResourcesRequest {
            send_initial_events: Some(false),
            ..Default::default()
        },
    )
    .await?;
    let start = next(&mut stream).await?;
    assert!(start.initial_events_end);
    for i in 0..5 {
        apply_ok(&client, apply("app", &format!("r{i}"), json!({}))).await?;
    }
    let mut seen = Vec::new();
    let mut last = String::new();
    while seen.len() < 3 {
        let message = next_change(&mut stream).await?;
        seen.push(name_of(&message));
        last = message.resource_version;
    }
    drop(stream);
    for i in 5..8 {
        apply_ok(&client, apply("app", &format!("r{i}"), json!({}))).await?;
    }
    let mut resumed = watch(
        &client,
        WatchResourcesRequest {
            resource_version: last,
            ..Default::default()
        },
    )
    .await?;
    while seen.len() < 8 {
        seen.push(name_of(&next_change(&mut resumed).await?));
    }
    let expected: Vec<String> = (0..8).map(|i| format!("r{i}")).collect();
    assert_eq!(seen, expected, "every change exactly once, in commit order");
    server.shutdown().await
}

/// Applies the latest state of `message` to `view`, checking per-object order.
fn absorb(view: &mut HashMap<String, i64>, message: &WatchResourcesResponse) -> anyhow::Result<()> {
    let Some(resource) = &message.resource else {
        return Ok(());
    };
    let previous = view.insert(resource.name.clone(), resource.generation).unwrap_or(0);
    anyhow::ensure!(
        resource.generation >= previous,
        "{} went back from generation {previous} to {}",
        resource.name,
        resource.generation
    );
    Ok(())
}

#[tokio::test]
async fn concurrent_writers_lose_nothing_for_a_watcher_or_a_resumed_watcher() -> anyhow::Result<()> {
    const WRITERS: usize = 8;
    const CHANGES: usize = 20_000;
    const NAMES: usize = 400;
    let (server, client) = server_with_kind().await?;
    let mut full = watch(&client, WatchResourcesRequest::default()).await?;
    let mut interrupted = watch(&client, WatchResourcesRequest::default()).await?;
    assert!(next(&mut full).await?.initial_events_end);
    assert!(next(&mut interrupted).await?.initial_events_end);

    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let client = client.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..CHANGES / WRITERS {
                // Each name belongs to one writer, which bumps its spec each time.
                let name = format!("n{}", (i * WRITERS + w) % NAMES);
                client
                    .resources()
                    .apply_resource(apply("app", &name, json!({"i": i})))
                    .await?;
            }
            anyhow::Ok(())
        }));
    }

    // The second watcher reads a while, disconnects, and resumes later.
    let mut resumed_view: HashMap<String, i64> = HashMap::new();
    let mut position = String::new();
    for _ in 0..2_000 {
        let message = next_change(&mut interrupted).await?;
        absorb(&mut resumed_view, &message)?;
        position = message.resource_version.clone();
    }
    drop(interrupted);

    let mut view: HashMap<String, i64> = HashMap::new();
    let reader = async {
        loop {
            let message = next_change(&mut full).await?;
            absorb(&mut view, &message)?;
            if view.len() == NAMES && view.values().all(|g| *g == (CHANGES / NAMES) as i64) {
                return anyhow::Ok(());
            }
        }
    };
    let (read, written) = tokio::join!(reader, async {
        for writer in writers {
            writer.await??;
        }
        anyhow::Ok(())
    });
    written?;
    read?;

    let mut resumed = watch(
        &client,
        WatchResourcesRequest {
            resource_version: position,
            ..Default::default()
        },
    )
    .await?;
    while !(resumed_view.len() == NAMES && resumed_view.values().all(|g| *g == (CHANGES / NAMES) as i64)) {
        let message = next_change(&mut resumed).await?;
        absorb(&mut resumed_view, &message)?;
    }

    // Both views equal the database's final state.
    let rows: Vec<(String, i64)> = sqlx::query_as("SELECT name, generation FROM resources WHERE kind = 'app'")
        .fetch_all(server.database().pool())
        .await?;
    let truth: HashMap<String, i64> = rows.into_iter().collect();
    assert_eq!(view, truth);
    assert_eq!(resumed_view, truth);
    server.shutdown().await
}

#[tokio::test]
async fn positions_outside_the_log_are_refused() -> anyhow::Result<()> {
    let (server, client) = server_with_kind().await?;
    let first = resource_of(apply_ok(&client, apply("app", "old", json!({}))).await?)?;
    let mut stream = watch(
        &client,
        WatchResourcesRequest {
            send_initial_events: Some(false),
            ..Default::default()
        },
    )
    .await?;
    let start = next(&mut stream).await?.resource_version;
    drop(stream);
    apply_ok(&client, apply("app", "old", json!({"v": 2}))).await?;
    // Retention trims everything (as if the age limit had passed).
    sqlx::query("SELECT trim_resource_changes(0, 100000)")
        .execute(server.database().pool())
        .await?;

    let status = |request: WatchResourcesRequest| {
        let client = client.clone();
        async move {
            match client.resources().watch_resources(request).await {
                Err(status) => Err::<(), Status>(status),
                Ok(response) => {
                    let mut stream = response.into_inner();
                    match stream.next().await {
                        Some(Err(status)) => Err(status),
                        other => panic!("expected an error, got {other:?}"),
                    }
                }
            }
        }
    };
    expect_error(
        status(WatchResourcesRequest {
            resource_version: start,
            ..Default::default()
        })
        .await,
        Code::OutOfRange,
        "RESOURCE_VERSION_TOO_OLD",
    );
    expect_error(
        status(WatchResourcesRequest {
            resource_version: "999999999.1".into(),
            ..Default::default()
        })
        .await,
        Code::OutOfRange,
        "RESOURCE_VERSION_TOO_NEW",
    );
    expect_error(
        status(WatchResourcesRequest {
            resource_version: "yesterday".into(),
            ..Default::default()
        })
        .await,
        Code::InvalidArgument,
        "INVALID_FIELD",
    );
    expect_error(
        status(WatchResourcesRequest {
            resource_version: first.resource_version,
            send_initial_events: Some(true),
            ..Default::default()
        })
        .await,
        Code::InvalidArgument,
        "INVALID_FIELD",
    );
    server.shutdown().await
}

#[tokio::test]
async fn a_stalled_watcher_is_cut_off_while_others_keep_streaming() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let server = TestServer::start_with(database, Role::All, |config| {
        config.watch.queue_capacity = 64;
        config.watch.window = 64;
    })
    .await?;
    let client = server.client().await?;
    apply_manifest(&client, work_kind("app", 1, None)).await?;
    // Its own connection, as a real stalled client would have: a stream
    // nobody reads fills its connection's flow-control window.
    let stalled_client = server.client().await?;
    let mut stalled = watch(&stalled_client, WatchResourcesRequest::default()).await?;
    let mut live = watch(&client, WatchResourcesRequest::default()).await?;
    assert!(next(&mut stalled).await?.initial_events_end);
    assert!(next(&mut live).await?.initial_events_end);

    // About 12 MB of changes: far more than a client buffers unread (HTTP/2
    // grants a stream 2 MiB by default) plus the server's bounded queues.
    let total = 3_000;
    let padding = "p".repeat(4096);
    let writer = {
        let client = client.clone();
        tokio::spawn(async move {
            for i in 0..total {
                client
                    .resources()
                    .apply_resource(apply("app", &format!("s{}", i % 50), json!({"i": i, "pad": padding})))
                    .await?;
            }
            anyhow::Ok(())
        })
    };
    let mut received = 0;
    let mut last_generation: BTreeMap<String, i64> = BTreeMap::new();
    while last_generation.len() < 50 || last_generation.values().any(|g| *g < (total / 50) as i64) {
        let message = next_change(&mut live).await?;
        received += 1;
        if let Some(r) = message.resource {
            last_generation.insert(r.name, r.generation);
        }
    }
    writer.await??;
    assert!(received > 0);

    // The stalled watcher drains what was queued, then learns it was cut off.
    let outcome = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match stalled.next().await {
                Some(Ok(_)) => continue,
                Some(Err(status)) => return Some(status),
                None => return None,
            }
        }
    })
    .await?;
    let status = outcome.ok_or_else(|| anyhow::anyhow!("the stalled stream ended without a status"))?;
    expect_error(Err::<(), _>(status), Code::ResourceExhausted, "WATCH_TOO_SLOW");
    server.shutdown().await
}

#[tokio::test]
async fn changes_through_one_pod_reach_watchers_on_another() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let a = TestServer::start_on(database.clone(), Role::All).await?;
    let b = TestServer::start_on(database, Role::Control).await?;
    let (ca, cb) = (a.client().await?, b.client().await?);
    apply_manifest(&ca, work_kind("app", 1, None)).await?;
    let mut stream = watch(
        &cb,
        WatchResourcesRequest {
            label_selector: "env=prod".into(),
            ..Default::default()
        },
    )
    .await?;
    assert!(next(&mut stream).await?.initial_events_end);
    let mut dev = apply("app", "dev", json!({}));
    dev.labels = [("env".to_owned(), "dev".to_owned())].into();
    apply_ok(&ca, dev).await?;
    let mut prod = apply("app", "prod", json!({}));
    prod.labels = [("env".to_owned(), "prod".to_owned())].into();
    apply_ok(&ca, prod).await?;
    let message = next_change(&mut stream).await?;
    assert_eq!(
        name_of(&message),
        "prod",
        "filtered by the selector, delivered across pods"
    );
    a.shutdown().await?;
    b.shutdown().await
}

#[tokio::test]
async fn idle_watchers_get_bookmarks_and_shutdown_ends_streams() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let server = TestServer::start_with(database, Role::All, |config| {
        config.watch.bookmark_interval = Duration::from_millis(200);
    })
    .await?;
    let client = server.client().await?;
    apply_manifest(&client, work_kind("app", 1, None)).await?;
    let mut stream = watch(
        &client,
        WatchResourcesRequest {
            allow_bookmarks: true,
            ..Default::default()
        },
    )
    .await?;
    let start = next(&mut stream).await?;
    assert!(start.initial_events_end);
    apply_ok(&client, apply("app", "tick", json!({}))).await?;
    let added = next_change(&mut stream).await?;
    // Later bookmarks move past the change, so resuming from them is safe.
    let bookmark = next(&mut stream).await?;
    assert_eq!(bookmark.r#type(), WatchEventType::Bookmark);
    assert!(!bookmark.initial_events_end);
    let position = |v: &str| -> (i64, i64) {
        let (t, s) = v.split_once('.').unwrap_or(("0", "0"));
        (t.parse().unwrap_or(0), s.parse().unwrap_or(0))
    };
    assert!(position(&bookmark.resource_version) > position(&added.resource_version));

    let stopping = tokio::spawn(server.shutdown());
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match stream.next().await {
                Some(Ok(_)) => continue,
                Some(Err(status)) => return Some(status),
                None => return None,
            }
        }
    })
    .await?;
    let status = ended.ok_or_else(|| anyhow::anyhow!("no status at shutdown"))?;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    stopping.await??;
    Ok(())
}

async fn next_event(
    stream: &mut Streaming<WatchResourceEventsResponse>,
) -> anyhow::Result<WatchResourceEventsResponse> {
    loop {
        match tokio::time::timeout(STEP, stream.next()).await? {
            Some(message) => {
                let message = message?;
                if message.r#type() != EventWatchType::Bookmark || message.initial_events_end {
                    return Ok(message);
                }
            }
            None => anyhow::bail!("the event stream ended"),
        }
    }
}

#[tokio::test]
async fn event_watches_stream_appended_and_extended_runs() -> anyhow::Result<()> {
    let (server, client) = server_with_kind().await?;
    apply_ok(&client, apply("app", "ev", json!({"v": 0}))).await?;
    let request = WatchResourceEventsRequest {
        kind: "app".into(),
        name: "ev".into(),
        ..Default::default()
    };
    let mut stream = client
        .resources()
        .watch_resource_events(request.clone())
        .await?
        .into_inner();
    let created = next_event(&mut stream).await?;
    assert_eq!(created.r#type(), EventWatchType::Snapshot);
    assert_eq!(created.event.as_ref().map(|e| e.reason.as_str()), Some("Created"));
    let end = next_event(&mut stream).await?;
    assert!(end.initial_events_end);

    apply_ok(&client, apply("app", "ev", json!({"v": 1}))).await?;
    let appended = next_event(&mut stream).await?;
    assert_eq!(appended.r#type(), EventWatchType::Appended);
    assert_eq!(appended.event.as_ref().map(|e| e.reason.as_str()), Some("SpecChanged"));
    let position = appended.event_version.clone();
    drop(stream);

    apply_ok(&client, apply("app", "ev", json!({"v": 2}))).await?;
    let mut resumed = client
        .resources()
        .watch_resource_events(WatchResourceEventsRequest {
            event_version: position,
            ..request.clone()
        })
        .await?
        .into_inner();
    let extended = next_event(&mut resumed).await?;
    assert_eq!(extended.r#type(), EventWatchType::Extended);
    assert_eq!(extended.event.as_ref().map(|e| e.count), Some(2));

    expect_error(
        client
            .resources()
            .watch_resource_events(WatchResourceEventsRequest {
                name: "missing".into(),
                ..request.clone()
            })
            .await,
        Code::NotFound,
        "RESOURCE_NOT_FOUND",
    );
    let too_new = client
        .resources()
        .watch_resource_events(WatchResourceEventsRequest {
            event_version: "999999999.1".into(),
            ..request
        })
        .await;
    expect_error(too_new, Code::OutOfRange, "RESOURCE_VERSION_TOO_NEW");
    server.shutdown().await
}

#[tokio::test]
async fn a_watch_by_name_sees_that_resource_only_and_resumes() -> anyhow::Result<()> {
    let (server, client) = server_with_kind().await?;
    apply_ok(&client, apply("app", "one", json!({}))).await?;
    apply_ok(&client, apply("app", "two", json!({}))).await?;
    apply_ok(&client, apply("other", "one", json!({}))).await?;
    let by_name = |name: &str, from: &str| WatchResourcesRequest {
        kind: Some("app".into()),
        name: Some(name.into()),
        resource_version: from.into(),
        ..Default::default()
    };
    let mut stream = watch(&client, by_name("one", "")).await?;
    let first = next(&mut stream).await?;
    assert_eq!((first.r#type(), name_of(&first)), (WatchEventType::Added, "one".into()));
    assert!(next(&mut stream).await?.initial_events_end);
    apply_ok(&client, apply("app", "two", json!({"v": 2}))).await?;
    apply_ok(&client, apply("other", "one", json!({"v": 2}))).await?;
    apply_ok(&client, apply("app", "one", json!({"v": 2}))).await?;
    let change = next_change(&mut stream).await?;
    assert_eq!(
        (
            change.r#type(),
            name_of(&change),
            change.resource.as_ref().map(|r| r.kind.clone())
        ),
        (WatchEventType::Modified, "one".into(), Some("app".into()))
    );
    let resume_from = change.resource_version.clone();
    drop(stream);

    // Resumed from that position: only later changes of that one resource.
    apply_ok(&client, apply("app", "two", json!({"v": 3}))).await?;
    apply_ok(&client, apply("app", "one", json!({"v": 3}))).await?;
    let mut resumed = watch(&client, by_name("one", &resume_from)).await?;
    let again = next_change(&mut resumed).await?;
    assert_eq!(name_of(&again), "one");
    assert_eq!(again.resource.as_ref().map(|r| r.generation), Some(3));

    // A resource that does not exist yet: no snapshot, then its creation.
    let mut later = watch(&client, by_name("later", "")).await?;
    assert!(next(&mut later).await?.initial_events_end);
    apply_ok(&client, apply("app", "two", json!({"v": 4}))).await?;
    apply_ok(&client, apply("app", "later", json!({}))).await?;
    let created = next_change(&mut later).await?;
    assert_eq!(
        (created.r#type(), name_of(&created)),
        (WatchEventType::Added, "later".into())
    );

    // A name needs a kind, and must be a name.
    expect_error(
        client
            .resources()
            .watch_resources(WatchResourcesRequest {
                name: Some("one".into()),
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
        "INVALID_FIELD",
    );
    expect_error(
        client.resources().watch_resources(by_name("Not A Name", "")).await,
        Code::InvalidArgument,
        "INVALID_NAME",
    );
    server.shutdown().await
}
