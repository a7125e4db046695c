//! The operator's toolkit (AdminService) over real gRPC with an in-process
//! worker on the real worker stream: bulk actions by selector, the escape
//! hatches for stuck state, the fleet summary, and refusals that change
//! nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use converge_integration::api::{
    apply, apply_manifest, apply_ok, events, expect_error, fields, spawn_worker, work_kind,
};
use converge_integration::{TestServer, eventually};
use converge_proto::v1::{
    ActOnResourcesRequest, ActOnResourcesResponse, ApplyResourceRequest, BatchApplyResourcesRequest,
    GetFleetSummaryRequest, GetFleetSummaryResponse, GetResourceRequest, Phase, Resource, ResourceAction,
};
use converge_sdk::Client;
use converge_sdk::worker::{HandlerError, KindVersion, Outcome, Provider, ReactionRequest, Worker, async_trait};
use serde_json::json;
use tonic::Code;

/// How the probe worker answers for one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Healthy,
    Transient,
    Terminal,
    /// Holds the task (its lease) for a minute.
    Hang,
}

/// Modes and run counts by resource name, shared with the test.
#[derive(Clone, Default)]
struct Probe {
    modes: Arc<Mutex<HashMap<String, Mode>>>,
    runs: Arc<Mutex<HashMap<String, usize>>>,
}

impl Probe {
    fn set(&self, name: &str, mode: Mode) {
        if let Ok(mut modes) = self.modes.lock() {
            modes.insert(name.to_owned(), mode);
        }
    }

    fn runs(&self, name: &str) -> usize {
        self.runs.lock().map(|r| r.get(name).copied().unwrap_or(0)).unwrap_or(0)
    }
}

#[async_trait]
impl Provider for Probe {
    fn kind(&self) -> KindVersion {
        KindVersion::new("probe", 1)
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        let name = request.resource.name.clone();
        if let Ok(mut runs) = self.runs.lock() {
            *runs.entry(name.clone()).or_default() += 1;
        }
        let mode = self
            .modes
            .lock()
            .map(|m| m.get(&name).copied().unwrap_or(Mode::Healthy))
            .unwrap_or(Mode::Healthy);
        match mode {
            Mode::Healthy => Ok(Outcome::new().with_status(json!({"ok": true}))),
            Mode::Transient => Err(HandlerError::transient("not yet").with_reason("NotYet")),
            Mode::Terminal => Err(HandlerError::terminal("cannot ever work").with_reason("Impossible")),
            Mode::Hang => {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(Outcome::new())
            }
        }
    }
}

struct Fixture {
    server: TestServer,
    client: Client,
    probe: Probe,
    _worker: tokio::sync::oneshot::Sender<()>,
}

async fn fixture() -> anyhow::Result<Fixture> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    let mut manifest = work_kind("probe", 1, None);
    if let Some(policy) = manifest.policy.as_mut() {
        // Transient failures stay transient (Reconciling, backing off).
        policy.max_transient_attempts = 1000;
    }
    apply_manifest(&client, manifest).await?;
    let probe = Probe::default();
    let worker = spawn_worker(
        Worker::builder()
            .endpoint(server.address())
            .provider(probe.clone())
            .max_parallel(64)
            .heartbeat_interval(Duration::from_millis(500)),
    );
    Ok(Fixture {
        server,
        client,
        probe,
        _worker: worker,
    })
}

fn labelled(name: &str, group: &str) -> ApplyResourceRequest {
    let mut request = apply("probe", name, json!({}));
    request.labels.insert("group".into(), group.into());
    request
}

async fn get(client: &Client, name: &str) -> anyhow::Result<Resource> {
    client
        .resources()
        .get_resource(GetResourceRequest {
            kind: "probe".into(),
            name: name.into(),
        })
        .await?
        .into_inner()
        .resource
        .ok_or_else(|| anyhow::anyhow!("no resource"))
}

async fn wait_phase(client: &Client, name: &str, phase: Phase) -> anyhow::Result<Resource> {
    eventually(Duration::from_secs(30), || async {
        let resource = get(client, name).await?;
        Ok((resource.phase() == phase).then_some(resource))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{name} did not reach {phase:?}: {e}"))
}

async fn summary(client: &Client, request: GetFleetSummaryRequest) -> anyhow::Result<GetFleetSummaryResponse> {
    Ok(client.admin().get_fleet_summary(request).await?.into_inner())
}

fn count_of(summary: &GetFleetSummaryResponse, phase: Phase) -> i64 {
    summary
        .phase_counts
        .iter()
        .filter(|c| c.kind == "probe" && c.phase() == phase)
        .map(|c| c.count)
        .sum()
}

fn act(action: ResourceAction, reason: &str) -> ActOnResourcesRequest {
    ActOnResourcesRequest {
        action: action.into(),
        kind: "probe".into(),
        reason: reason.into(),
        ..Default::default()
    }
}

async fn run(client: &Client, request: ActOnResourcesRequest) -> Result<ActOnResourcesResponse, tonic::Status> {
    client.admin().act_on_resources(request).await.map(|r| r.into_inner())
}

#[tokio::test]
async fn a_bulk_reconcile_by_selector_reruns_exactly_the_selected_resources() -> anyhow::Result<()> {
    let f = fixture().await?;
    let (a, b) = (1000, 150);
    for chunk in (0..a)
        .map(|i| labelled(&format!("a-{i:04}"), "a"))
        .chain((0..b).map(|i| labelled(&format!("b-{i:04}"), "b")))
        .collect::<Vec<_>>()
        .chunks(500)
    {
        f.client
            .resources()
            .batch_apply_resources(BatchApplyResourcesRequest {
                requests: chunk.to_vec(),
                ..Default::default()
            })
            .await?;
    }
    let fresh = GetFleetSummaryRequest {
        fresh: true,
        ..Default::default()
    };
    eventually(Duration::from_secs(120), || async {
        Ok((count_of(&summary(&f.client, fresh.clone()).await?, Phase::Ready) == a + b).then_some(()))
    })
    .await?;
    let total_runs = |probe: &Probe, prefix: &str, n: i64| -> Vec<usize> {
        (0..n).map(|i| probe.runs(&format!("{prefix}-{i:04}"))).collect()
    };
    assert!(total_runs(&f.probe, "a", a).iter().all(|r| *r == 1));

    // A dry run counts them all and names the first page, changing nothing.
    let selected = ActOnResourcesRequest {
        label_selector: "group=a".into(),
        page_size: 400,
        ..act(ResourceAction::Reconcile, "provider API was down")
    };
    let dry = run(
        &f.client,
        ActOnResourcesRequest {
            validate_only: true,
            ..selected.clone()
        },
    )
    .await?;
    assert_eq!((dry.matched_count, dry.acted_count, dry.names.len()), (a, 0, 400));
    assert!(dry.next_page_token.is_empty());
    // Ids order the pages (creation order, not name order within a batch).
    let named: std::collections::HashSet<&String> = dry.names.iter().collect();
    assert_eq!(named.len(), 400);
    assert!(dry.names.iter().all(|n| n.starts_with("a-")), "{:?}", dry.names);

    // Three pages of at most 400; the first one counts the whole run.
    let mut pages = Vec::new();
    let mut token = String::new();
    loop {
        let page = run(
            &f.client,
            ActOnResourcesRequest {
                page_token: token.clone(),
                ..selected.clone()
            },
        )
        .await?;
        pages.push((page.acted_count, page.matched_count));
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(pages, [(400, a), (400, 0), (200, 0)]);

    eventually(Duration::from_secs(60), || async {
        Ok(total_runs(&f.probe, "a", a).iter().all(|r| *r == 2).then_some(()))
    })
    .await?;
    // Exactly those: the other group never ran again, and none ran thrice.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(total_runs(&f.probe, "b", b).iter().all(|r| *r == 1));
    assert!(total_runs(&f.probe, "a", a).iter().all(|r| *r == 2));
    let recorded = events(&f.client, "probe", "a-0500").await?;
    let requested = recorded
        .iter()
        .find(|e| e.reason == "ReconcileRequested")
        .ok_or_else(|| anyhow::anyhow!("no ReconcileRequested event: {recorded:?}"))?;
    assert!(requested.message.contains("provider API was down"), "{requested:?}");
    assert!(requested.actor.starts_with("api"), "{requested:?}");
    f.server.shutdown().await
}

#[tokio::test]
async fn clear_failure_reset_backoff_and_release_lease_get_resources_moving() -> anyhow::Result<()> {
    let f = fixture().await?;
    for (name, mode) in [
        ("failed", Mode::Terminal),
        ("retrying", Mode::Transient),
        ("held", Mode::Hang),
    ] {
        f.probe.set(name, mode);
        apply_ok(&f.client, apply("probe", name, json!({}))).await?;
    }
    wait_phase(&f.client, "failed", Phase::Failed).await?;
    // Five transient failures put the next attempt 16 s away.
    eventually(Duration::from_secs(40), || async {
        Ok((f.probe.runs("retrying") >= 5).then_some(()))
    })
    .await?;
    eventually(Duration::from_secs(10), || async {
        Ok((f.probe.runs("held") == 1).then_some(()))
    })
    .await?;

    // Each action on a resource it does not apply to is refused, naming why.
    for (action, name) in [
        (ResourceAction::ClearFailure, "retrying"),
        (ResourceAction::ReleaseLease, "failed"),
        (ResourceAction::ForceFinalize, "held"),
    ] {
        let refused = run(
            &f.client,
            ActOnResourcesRequest {
                name: name.into(),
                ..act(action, "trying")
            },
        )
        .await;
        expect_error(refused, Code::FailedPrecondition, "ACTION_NOT_APPLICABLE");
    }

    f.probe.set("failed", Mode::Healthy);
    let cleared = run(
        &f.client,
        ActOnResourcesRequest {
            name: "failed".into(),
            ..act(ResourceAction::ClearFailure, "fixed the quota")
        },
    )
    .await?;
    assert_eq!(cleared.acted_count, 1);
    wait_phase(&f.client, "failed", Phase::Ready).await?;

    f.probe.set("retrying", Mode::Healthy);
    let before = f.probe.runs("retrying");
    // Once its failure is recorded (the run may still be finishing), the
    // selector matches it alone: the hung one is leased, not backing off.
    let reset = eventually(Duration::from_secs(10), || async {
        let reset = run(
            &f.client,
            ActOnResourcesRequest {
                phases: vec![Phase::Reconciling.into()],
                ..act(ResourceAction::ResetBackoff, "dependency is back")
            },
        )
        .await?;
        Ok((reset.acted_count > 0).then_some(reset))
    })
    .await?;
    assert_eq!(reset.names, ["retrying"]);
    // Runs well before its 16 s delay would have ended.
    let ready = wait_phase(&f.client, "retrying", Phase::Ready).await?;
    assert_eq!(f.probe.runs("retrying"), before + 1, "{ready:?}");

    // The hung task's lease is taken back and another run starts at once.
    let released = run(
        &f.client,
        ActOnResourcesRequest {
            name: "held".into(),
            ..act(ResourceAction::ReleaseLease, "worker wedged")
        },
    )
    .await?;
    assert_eq!(released.acted_count, 1);
    eventually(Duration::from_secs(10), || async {
        Ok((f.probe.runs("held") == 2).then_some(()))
    })
    .await?;
    let reasons: Vec<String> = events(&f.client, "probe", "held")
        .await?
        .into_iter()
        .map(|e| e.reason)
        .collect();
    assert!(reasons.contains(&"LeaseReleased".to_owned()), "{reasons:?}");
    f.server.shutdown().await
}

#[tokio::test]
async fn the_fleet_summary_counts_phases_and_names_failures_and_waits() -> anyhow::Result<()> {
    let f = fixture().await?;
    for i in 0..3 {
        let name = format!("broken-{i}");
        f.probe.set(&name, Mode::Terminal);
        apply_ok(&f.client, apply("probe", &name, json!({}))).await?;
    }
    f.probe.set("slow", Mode::Transient);
    for name in ["ok-1", "ok-2", "slow"] {
        apply_ok(&f.client, labelled(name, "web")).await?;
    }
    for i in 0..3 {
        wait_phase(&f.client, &format!("broken-{i}"), Phase::Failed).await?;
    }
    wait_phase(&f.client, "ok-2", Phase::Ready).await?;

    let fresh = summary(
        &f.client,
        GetFleetSummaryRequest {
            fresh: true,
            ..Default::default()
        },
    )
    .await?;
    assert_eq!(
        (
            count_of(&fresh, Phase::Ready),
            count_of(&fresh, Phase::Failed),
            count_of(&fresh, Phase::Reconciling),
            fresh.total
        ),
        (2, 3, 1, 6),
        "{fresh:?}"
    );
    let top = &fresh.top_failures[0];
    assert_eq!(
        (top.stage.as_str(), top.reason.as_str(), top.count),
        ("reconcile", "Impossible", 3)
    );
    assert!(top.example.as_ref().is_some_and(|e| e.name.starts_with("broken-")));
    assert_eq!(top.example_message, "cannot ever work");
    let oldest: Vec<(Phase, String)> = fresh
        .oldest
        .iter()
        .map(|o| (o.phase(), o.resource.clone().map(|r| r.name).unwrap_or_default()))
        .collect();
    assert_eq!(oldest, [(Phase::Reconciling, "slow".to_owned())]);

    // A selector narrows it (counted at call time).
    let web = summary(
        &f.client,
        GetFleetSummaryRequest {
            label_selector: "group=web".into(),
            ..Default::default()
        },
    )
    .await?;
    assert_eq!((count_of(&web, Phase::Ready), web.total), (2, 3));
    assert!(web.top_failures.is_empty());

    // The engine's snapshot catches up with the fleet.
    eventually(Duration::from_secs(60), || async {
        let snapshot = summary(&f.client, GetFleetSummaryRequest::default()).await?;
        Ok((snapshot.total == 6 && count_of(&snapshot, Phase::Failed) == 3).then_some(()))
    })
    .await?;

    let bad = f
        .client
        .admin()
        .get_fleet_summary(GetFleetSummaryRequest {
            label_selector: "group in (".into(),
            ..Default::default()
        })
        .await;
    expect_error(bad, Code::InvalidArgument, "INVALID_LABEL_SELECTOR");
    f.server.shutdown().await
}

#[tokio::test]
async fn bad_action_requests_are_refused_and_change_nothing() -> anyhow::Result<()> {
    let f = fixture().await?;
    apply_ok(&f.client, labelled("one", "a")).await?;
    wait_phase(&f.client, "one", Phase::Ready).await?;

    let no_reason = run(&f.client, act(ResourceAction::Quarantine, "  ")).await;
    assert_eq!(
        fields(&expect_error(no_reason, Code::InvalidArgument, "INVALID_FIELD")),
        ["/reason"]
    );
    let unset = run(&f.client, act(ResourceAction::Unspecified, "why")).await;
    assert_eq!(
        fields(&expect_error(unset, Code::InvalidArgument, "INVALID_FIELD")),
        ["/action"]
    );
    let selector = run(
        &f.client,
        ActOnResourcesRequest {
            label_selector: "a in b".into(),
            ..act(ResourceAction::Quarantine, "why")
        },
    )
    .await;
    expect_error(selector, Code::InvalidArgument, "INVALID_LABEL_SELECTOR");
    let both = run(
        &f.client,
        ActOnResourcesRequest {
            name: "one".into(),
            label_selector: "group=a".into(),
            ..act(ResourceAction::Quarantine, "why")
        },
    )
    .await;
    assert_eq!(
        fields(&expect_error(both, Code::InvalidArgument, "INVALID_FIELD")),
        ["/label_selector"]
    );
    let missing = run(
        &f.client,
        ActOnResourcesRequest {
            name: "nope".into(),
            ..act(ResourceAction::Quarantine, "why")
        },
    )
    .await;
    expect_error(missing, Code::NotFound, "RESOURCE_NOT_FOUND");
    let token = run(
        &f.client,
        ActOnResourcesRequest {
            page_token: "garbage".into(),
            ..act(ResourceAction::Quarantine, "why")
        },
    )
    .await;
    expect_error(token, Code::InvalidArgument, "INVALID_PAGE_TOKEN");
    assert_eq!(get(&f.client, "one").await?.phase(), Phase::Ready, "nothing changed");

    // A retried call with the same request id acts once and answers the same.
    let once = ActOnResourcesRequest {
        request_id: "quarantine-a-1".into(),
        label_selector: "group=a".into(),
        ..act(ResourceAction::Quarantine, "investigating")
    };
    let first = run(&f.client, once.clone()).await?;
    let again = run(&f.client, once).await?;
    assert_eq!((first.acted_count, first.names.clone()), (1, vec!["one".to_owned()]));
    assert_eq!(first, again);
    assert_eq!(get(&f.client, "one").await?.phase(), Phase::Quarantined);
    f.server.shutdown().await
}

/// Runs the `converge` command line against `address`; (exit code, stdout, stderr).
async fn converge(address: &str, args: &[&str]) -> anyhow::Result<(i32, String, String)> {
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(converge_integration::processes::binary("converge")?)
            .args(args)
            .env("CONVERGE_SERVER", address)
            .kill_on_drop(true)
            .output(),
    )
    .await??;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[tokio::test]
async fn the_command_line_summarises_and_acts_on_a_selection() -> anyhow::Result<()> {
    let f = fixture().await?;
    for (name, group) in [("c-1", "canary"), ("c-2", "canary"), ("s-1", "stable")] {
        apply_ok(&f.client, labelled(name, group)).await?;
    }
    for name in ["c-1", "c-2", "s-1"] {
        wait_phase(&f.client, name, Phase::Ready).await?;
    }
    let address = f.server.address();
    let (code, out, err) = converge(&address, &["get", "summary", "--fresh"]).await?;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("3 resources"), "{out}");
    let row: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with("probe"))
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(row, ["probe", "1", "ready", "3"], "{out}");

    let (code, out, err) = converge(
        &address,
        &[
            "quarantine",
            "probe",
            "-l",
            "group=canary",
            "-m",
            "bad build",
            "--dry-run",
        ],
    )
    .await?;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "2 probe resource(s) would be acted on (quarantine)\nResource/probe/c-1\nResource/probe/c-2\n"
    );
    assert_eq!(get(&f.client, "c-1").await?.phase(), Phase::Ready);

    let (code, out, err) = converge(
        &address,
        &["quarantine", "probe", "-l", "group=canary", "-m", "bad build"],
    )
    .await?;
    assert_eq!((code, out.as_str()), (0, "quarantine: 2 probe resource(s)\n"), "{err}");
    assert_eq!(get(&f.client, "c-2").await?.phase(), Phase::Quarantined);
    assert_eq!(get(&f.client, "s-1").await?.phase(), Phase::Ready);

    // An admin action without a reason is refused before anything is sent.
    let (code, _, err) = converge(&address, &["force-finalize", "probe", "s-1"]).await?;
    assert_ne!(code, 0);
    assert!(err.contains("--reason"), "{err}");
    let (code, _, err) = converge(&address, &["force-finalize", "probe", "s-1", "--reason", "gone"]).await?;
    assert_ne!(code, 0);
    assert!(err.contains("ACTION_NOT_APPLICABLE"), "{err}");
    f.server.shutdown().await
}
