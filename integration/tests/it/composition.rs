//! Composition end to end: a `stack` root composes `cell` children whose
//! dependency edges order their work and carry values from one cell's status
//! into another's spec; the root rolls its settled children up.
//!
//! The composer is generic: the root's spec lists the children and edges it
//! emits, so each test shapes its graph through the root's spec.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use converge_integration::api::{self, apply, apply_manifest, apply_ok, get, spawn_worker};
use converge_integration::kinds::{Cells, Run, Stacks, cell_manifest, layered, stack, stack_manifest};
use converge_integration::{TestServer, eventually};
use converge_proto::v1::{ConditionStatus, ListResourcesRequest, Phase, Resource, ResourceRef};
use converge_sdk::Client;
use converge_sdk::worker::Worker;
use serde_json::{Value, json};
use tokio::sync::oneshot;

struct Fixture {
    server: TestServer,
    client: Client,
    cells: Cells,
    stacks: Stacks,
    _worker: oneshot::Sender<()>,
}

async fn fixture(cell_delay: Duration) -> anyhow::Result<Fixture> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, cell_manifest()).await?;
    apply_manifest(&client, stack_manifest()).await?;
    let cells = Cells::with_delay(cell_delay);
    let stacks = Stacks::default();
    let worker = spawn_worker(
        Worker::builder()
            .endpoint(server.address())
            .provider(cells.clone())
            .provider(stacks.clone())
            .max_parallel(64)
            .heartbeat_interval(Duration::from_millis(500)),
    );
    Ok(Fixture {
        server,
        client,
        cells,
        stacks,
        _worker: worker,
    })
}

async fn wait_phase(
    client: &Client,
    kind: &str,
    name: &str,
    phase: Phase,
    timeout: Duration,
) -> anyhow::Result<Resource> {
    let found = eventually(timeout, || async {
        let resource = get(client, kind, name).await?;
        Ok((resource.phase() == phase).then_some(resource))
    })
    .await;
    match found {
        Ok(resource) => Ok(resource),
        Err(e) => {
            let last = get(client, kind, name).await;
            Err(anyhow::anyhow!(
                "{kind}/{name} never reached {phase:?}: {e}; now {last:?}"
            ))
        }
    }
}

async fn children(client: &Client, owner: &str) -> anyhow::Result<Vec<Resource>> {
    let mut all = Vec::new();
    let mut request = ListResourcesRequest {
        owner: Some(ResourceRef {
            kind: "stack".into(),
            name: owner.into(),
        }),
        page_size: 1000,
        ..Default::default()
    };
    loop {
        let page = client.resources().list_resources(request.clone()).await?.into_inner();
        all.extend(page.resources);
        if page.next_page_token.is_empty() {
            return Ok(all);
        }
        request.page_token = page.next_page_token;
    }
}

fn spec_of(resource: &Resource) -> Value {
    resource.spec.as_ref().map(api::json).unwrap_or(Value::Null)
}

/// Every dependency finished its last run before its dependent started its first.
fn assert_ordered(runs: &[Run], edges: &[(String, String)]) {
    let mut first_start: HashMap<&str, u64> = HashMap::new();
    let mut last_finish: HashMap<&str, u64> = HashMap::new();
    for run in runs {
        first_start
            .entry(&run.name)
            .and_modify(|s| *s = (*s).min(run.started))
            .or_insert(run.started);
        last_finish
            .entry(&run.name)
            .and_modify(|f| *f = (*f).max(run.finished))
            .or_insert(run.finished);
    }
    for (from, to) in edges {
        let started = first_start.get(from.as_str()).copied().unwrap_or(u64::MAX);
        let upstream_done = last_finish.get(to.as_str()).copied().unwrap_or(u64::MAX);
        assert!(
            upstream_done < started,
            "{from} started ({started}) before its upstream {to} finished ({upstream_done})"
        );
    }
}

#[tokio::test]
async fn a_root_with_eleven_children_reaches_ready_with_values_flowed_in_order() -> anyhow::Result<()> {
    let f = fixture(Duration::from_millis(20)).await?;
    // account -> vpc -> route pattern: 3 teams + a shared network account and gateway.
    let mut cells: Vec<(String, Value)> = vec![("net-acct".into(), json!({})), ("tgw".into(), json!({}))];
    let mut edges: Vec<(String, String)> = vec![("tgw".into(), "net-acct".into())];
    for team in ["a", "b", "c"] {
        cells.push((format!("{team}-acct"), json!({})));
        cells.push((format!("{team}-vpc"), json!({"cidr": "10.0.0.0/16"})));
        cells.push((format!("{team}-route"), json!({})));
        edges.push((format!("{team}-vpc"), format!("{team}-acct")));
        edges.push((format!("{team}-route"), format!("{team}-vpc")));
        edges.push((format!("{team}-route"), "tgw".into()));
    }
    assert_eq!(cells.len(), 11);
    let cell_refs: Vec<(&str, Value)> = cells.iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
    let edge_refs: Vec<(&str, &str)> = edges.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    apply_ok(&f.client, apply("stack", "bom", stack(&cell_refs, &edge_refs))).await?;

    let root = wait_phase(&f.client, "stack", "bom", Phase::Ready, Duration::from_secs(60)).await?;
    assert_eq!(
        root.status.as_ref().map(api::json),
        Some(json!({"ready": 11, "total": 11}))
    );
    let kids = children(&f.client, "bom").await?;
    assert_eq!(kids.len(), 11);
    assert!(kids.iter().all(|k| k.phase() == Phase::Ready), "{kids:?}");

    // Every dependent carries the values of its upstreams.
    let by_name: HashMap<String, Resource> = kids.into_iter().map(|k| (k.name.clone(), k)).collect();
    for (from, to) in &edges {
        let spec = spec_of(&by_name[from]);
        assert_eq!(
            spec.pointer(&format!("/inputs/{to}")),
            Some(&json!(format!("{to}:0"))),
            "{from} lacks the value of {to}: {spec}"
        );
    }
    // No dependent was worked before its upstreams were synced, and each
    // worked with its inputs already present.
    let runs = f.cells.runs();
    assert_ordered(&runs, &edges);
    for run in &runs {
        for (from, to) in edges.iter().filter(|(from, _)| *from == run.name) {
            assert!(
                run.spec.pointer(&format!("/inputs/{to}")).is_some(),
                "{from} ran without the value of {to}: {run:?}"
            );
        }
    }
    // Each cell was worked exactly once.
    let mut per_cell: HashMap<&str, usize> = HashMap::new();
    for run in &runs {
        *per_cell.entry(&run.name).or_default() += 1;
    }
    assert!(per_cell.values().all(|n| *n == 1), "{per_cell:?}");
    assert_eq!(per_cell.len(), 11);
    f.server.shutdown().await
}

#[tokio::test]
async fn upstream_status_changes_flow_on_and_unchanged_values_do_not() -> anyhow::Result<()> {
    let f = fixture(Duration::ZERO).await?;
    let graph = |a_spec: Value| stack(&[("a", a_spec), ("b", json!({}))], &[("b", "a")]);
    apply_ok(&f.client, apply("stack", "flow", graph(json!({"salt": 1})))).await?;
    wait_phase(&f.client, "stack", "flow", Phase::Ready, Duration::from_secs(30)).await?;
    let b = get(&f.client, "cell", "b").await?;
    assert_eq!(spec_of(&b).pointer("/inputs/a"), Some(&json!("a:1")));
    let b_generation = b.generation;

    // a's output changes: b gets the new value and is worked again.
    apply_ok(&f.client, apply("stack", "flow", graph(json!({"salt": 2})))).await?;
    let b = eventually(Duration::from_secs(30), || async {
        let b = get(&f.client, "cell", "b").await?;
        Ok((spec_of(&b).pointer("/inputs/a") == Some(&json!("a:2")) && b.phase() == Phase::Ready).then_some(b))
    })
    .await?;
    assert_eq!(b.generation, b_generation + 1, "one bump for one changed value");
    wait_phase(&f.client, "stack", "flow", Phase::Ready, Duration::from_secs(30)).await?;
    assert_eq!(f.cells.runs_of("b").len(), 2);

    // a changes without changing its output: b is left alone.
    apply_ok(
        &f.client,
        apply("stack", "flow", graph(json!({"salt": 2, "note": "cosmetic"}))),
    )
    .await?;
    eventually(Duration::from_secs(30), || async {
        let a = get(&f.client, "cell", "a").await?;
        Ok((a.observed_generation == a.generation && spec_of(&a).get("note").is_some()).then_some(()))
    })
    .await?;
    wait_phase(&f.client, "stack", "flow", Phase::Ready, Duration::from_secs(30)).await?;
    let b_after = get(&f.client, "cell", "b").await?;
    assert_eq!(b_after.generation, b.generation);
    assert_eq!(f.cells.runs_of("b").len(), 2, "b was not worked again");
    assert_eq!(f.cells.runs_of("a").len(), 3);
    f.server.shutdown().await
}

#[tokio::test]
async fn a_recompose_prunes_and_adds_exactly_the_difference() -> anyhow::Result<()> {
    let f = fixture(Duration::ZERO).await?;
    let cells = |names: &[&str]| -> Value {
        let cells: Vec<(&str, Value)> = names.iter().map(|n| (*n, json!({}))).collect();
        stack(&cells, &[])
    };
    apply_ok(&f.client, apply("stack", "re", cells(&["x", "y", "z"]))).await?;
    wait_phase(&f.client, "stack", "re", Phase::Ready, Duration::from_secs(30)).await?;
    let before: HashMap<String, Resource> = children(&f.client, "re")
        .await?
        .into_iter()
        .map(|k| (k.name.clone(), k))
        .collect();

    apply_ok(&f.client, apply("stack", "re", cells(&["x", "y", "w"]))).await?;
    let root = eventually(Duration::from_secs(30), || async {
        let root = get(&f.client, "stack", "re").await?;
        Ok((root.phase() == Phase::Ready && root.observed_generation == 2).then_some(root))
    })
    .await?;
    assert_eq!(root.generation, 2);
    let after: HashMap<String, Resource> = children(&f.client, "re")
        .await?
        .into_iter()
        .map(|k| (k.name.clone(), k))
        .collect();
    let mut names: Vec<&String> = after.keys().collect();
    names.sort();
    assert_eq!(names, ["w", "x", "y"]);
    for kept in ["x", "y"] {
        assert_eq!(after[kept].uid, before[kept].uid);
        assert_eq!(after[kept].generation, 1, "{kept} untouched");
        assert_eq!(f.cells.runs_of(kept).len(), 1);
    }
    assert!(
        get(&f.client, "cell", "z").await.is_err(),
        "z was pruned (no finalizer: removed)"
    );
    assert_eq!(f.cells.runs_of("w").len(), 1);
    f.server.shutdown().await
}

#[tokio::test]
async fn five_hundred_children_in_ten_layers_are_each_worked_once() -> anyhow::Result<()> {
    let f = fixture(Duration::ZERO).await?;
    let (cells, edges) = layered(10, 50);
    let cell_refs: Vec<(&str, Value)> = cells.iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
    let edge_refs: Vec<(&str, &str)> = edges.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let started = std::time::Instant::now();
    apply_ok(&f.client, apply("stack", "deep", stack(&cell_refs, &edge_refs))).await?;
    let root = wait_phase(&f.client, "stack", "deep", Phase::Ready, Duration::from_secs(180)).await?;
    eprintln!("500 children in 10 layers: Ready after {:?}", started.elapsed());
    assert_eq!(
        root.status.as_ref().map(api::json),
        Some(json!({"ready": 500, "total": 500}))
    );
    let runs = f.cells.runs();
    let mut per_cell: HashMap<&str, usize> = HashMap::new();
    for run in &runs {
        *per_cell.entry(&run.name).or_default() += 1;
    }
    assert_eq!(per_cell.len(), 500);
    let repeated: Vec<_> = per_cell.iter().filter(|(_, n)| **n != 1).collect();
    assert!(repeated.is_empty(), "worked more than once: {repeated:?}");
    assert_ordered(&runs, &edges);
    f.server.shutdown().await
}

#[tokio::test]
async fn a_failing_child_degrades_the_root_until_it_is_fixed() -> anyhow::Result<()> {
    let f = fixture(Duration::ZERO).await?;
    let graph = |fail: bool| stack(&[("ok", json!({})), ("bad", json!({"fail": fail}))], &[]);
    apply_ok(&f.client, apply("stack", "deg", graph(true))).await?;
    let root = wait_phase(&f.client, "stack", "deg", Phase::Degraded, Duration::from_secs(30)).await?;
    let ready = root
        .conditions
        .iter()
        .find(|c| c.r#type == "Ready")
        .ok_or_else(|| anyhow::anyhow!("no Ready condition: {root:?}"))?;
    assert_eq!(ready.status(), ConditionStatus::False);
    assert_eq!(ready.reason, "ChildrenNotReady");
    assert!(ready.message.contains("cell/bad"), "{}", ready.message);
    assert_eq!(get(&f.client, "cell", "bad").await?.phase(), Phase::Failed);
    let by_phase = |phase: Phase| ListResourcesRequest {
        phases: vec![phase.into()],
        ..Default::default()
    };
    for (phase, name) in [(Phase::Degraded, "deg"), (Phase::Failed, "bad")] {
        let listed = f.client.resources().list_resources(by_phase(phase)).await?.into_inner();
        let names: Vec<_> = listed.resources.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, [name], "listed as {phase:?}");
    }

    apply_ok(&f.client, apply("stack", "deg", graph(false))).await?;
    let root = wait_phase(&f.client, "stack", "deg", Phase::Ready, Duration::from_secs(30)).await?;
    let ready = root.conditions.iter().find(|c| c.r#type == "Ready");
    assert_eq!(ready.map(|c| c.status()), Some(ConditionStatus::True));
    assert!(f.stacks.rollups.load(Ordering::SeqCst) >= 2);
    f.server.shutdown().await
}

#[tokio::test]
async fn a_composition_naming_an_unknown_kind_fails_the_root_with_the_reason() -> anyhow::Result<()> {
    let f = fixture(Duration::ZERO).await?;
    // An edge to a resource that does not exist: refused whole, nothing created.
    let spec = json!({"cells": [{"name": "lonely", "spec": {}}], "edges": [{"from": "lonely", "to": "ghost"}]});
    apply_ok(&f.client, apply("stack", "broken", spec)).await?;
    wait_phase(&f.client, "stack", "broken", Phase::Failed, Duration::from_secs(30)).await?;
    assert!(children(&f.client, "broken").await?.is_empty());
    let events = f
        .client
        .resources()
        .list_resource_events(converge_proto::v1::ListResourceEventsRequest {
            kind: "stack".into(),
            name: "broken".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(
        events
            .events
            .iter()
            .any(|e| e.reason == "CompositionRefused" && e.message.contains("cell/ghost")),
        "{events:?}"
    );
    f.server.shutdown().await
}

#[tokio::test]
async fn a_composition_claiming_a_config_it_does_not_own_is_refused_whole() -> anyhow::Result<()> {
    let f = fixture(Duration::ZERO).await?;
    // The name is held by a config applied through the API.
    f.client
        .provider_configs()
        .apply_provider_config(converge_proto::v1::ApplyProviderConfigRequest {
            provider_config: Some(converge_proto::v1::ProviderConfig {
                name: "owned".into(),
                kind: "cell".into(),
                kind_version: 1,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await?;
    let spec = json!({"cells": [{"name": "c1", "spec": {}}], "edges": [], "config": "owned"});
    apply_ok(&f.client, apply("stack", "configured", spec)).await?;
    wait_phase(&f.client, "stack", "configured", Phase::Failed, Duration::from_secs(30)).await?;
    assert!(
        children(&f.client, "configured").await?.is_empty(),
        "nothing was written"
    );
    let events = f
        .client
        .resources()
        .list_resource_events(converge_proto::v1::ListResourceEventsRequest {
            kind: "stack".into(),
            name: "configured".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(
        events
            .events
            .iter()
            .any(|e| e.reason == "CompositionRefused" && e.message.contains("provider config owned already exists")),
        "{events:?}"
    );
    f.server.shutdown().await
}
