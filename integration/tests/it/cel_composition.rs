//! Compositions declared as data (ADR 49): converge composes and rolls up a
//! kind from the CEL templates of its manifest, with no composer worker.
//! The demo's `bom-cel` reaches Ready with the demo's leaf workers (a real
//! worker process), its value flows fill the children's specs, and a change
//! of its teams prunes and adds exactly the difference; `include_when`
//! drops children; a runtime error and a hostile expression fail the
//! parent with a condition and leave the server serving; bad compositions
//! and validation rules are refused with field paths.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use converge_integration::api::{apply, apply_manifest, apply_ok, expect_error, fields, get, json, object};
use converge_integration::kinds::work_manifest;
use converge_integration::processes::{binary, noop_worker_of};
use converge_integration::{TestServer, eventually};
use converge_proto::v1::{
    ComposedResource, Composition, CompositionRollup, ConditionStatus, KindManifest, ListResourcesRequest, Phase,
    Resource, ResourceRef,
};
use converge_sdk::Client;
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use tonic::Code;

const SETTLE: Duration = Duration::from_secs(90);

fn demo_worker(address: &str) -> anyhow::Result<Child> {
    Ok(Command::new(binary("converge-demo-worker")?)
        .args(["--broker", address, "--delay-ms", "0"])
        .env("LOG_LEVEL", "error")
        .env("WORKER_DRAIN_TIMEOUT_SECS", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?)
}

async fn children(client: &Client, kind: &str, owner: &str) -> anyhow::Result<Vec<Resource>> {
    let mut all = Vec::new();
    let mut request = ListResourcesRequest {
        owner: Some(ResourceRef {
            kind: kind.into(),
            name: owner.into(),
        }),
        page_size: 500,
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

async fn until_phase(client: &Client, kind: &str, name: &str, phase: Phase) -> anyhow::Result<Resource> {
    let found = eventually(SETTLE, || async {
        let resource = get(client, kind, name).await?;
        Ok((resource.phase() == phase).then_some(resource))
    })
    .await;
    match found {
        Ok(resource) => Ok(resource),
        Err(e) => Err(anyhow::anyhow!(
            "{kind}/{name} never reached {phase:?}: {e}; now {:?}",
            get(client, kind, name).await
        )),
    }
}

fn status(resource: &Resource) -> Value {
    resource.status.as_ref().map(json).unwrap_or(Value::Null)
}

fn spec(resource: &Resource) -> Value {
    resource.spec.as_ref().map(json).unwrap_or(Value::Null)
}

fn keyed(children: &[Resource]) -> BTreeMap<String, Resource> {
    children
        .iter()
        .map(|r| (format!("{}/{}", r.kind, r.name), r.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cel_bom_composes_flows_values_and_recomposes_exactly_the_difference() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    for manifest in converge_examples::manifests()? {
        apply_manifest(&client, manifest).await?;
    }
    let _worker = demo_worker(&server.address())?;

    let teams = json!({"teams": ["pay", "search", "ledger"], "region": "us-east-1"});
    apply_ok(&client, apply("bom-cel", "cel", teams)).await?;
    let root = until_phase(&client, "bom-cel", "cel", Phase::Ready).await?;
    let rolled = status(&root);
    assert_eq!(rolled["phase"], "ready", "{rolled}");
    assert_eq!(rolled["children"], 11, "{rolled}");
    assert_eq!(rolled["ready"], 11, "{rolled}");
    assert_eq!(rolled["notReady"], json!([]), "{rolled}");
    let ready = root
        .conditions
        .iter()
        .find(|c| c.r#type == "Ready")
        .expect("a Ready condition");
    assert_eq!(ready.status(), ConditionStatus::True);

    let first = keyed(&children(&client, "bom-cel", "cel").await?);
    let names: BTreeSet<&str> = first.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "account/cel-network",
            "account/cel-pay",
            "account/cel-search",
            "account/cel-ledger",
            "tgw/cel-tgw",
            "vpc/cel-pay",
            "vpc/cel-search",
            "vpc/cel-ledger",
            "route/cel-pay",
            "route/cel-search",
            "route/cel-ledger",
        ])
    );
    // The value flows filled the dependents' specs from their upstreams' status.
    for team in ["pay", "search", "ledger"] {
        let account = &first[&format!("account/cel-{team}")];
        let vpc = &first[&format!("vpc/cel-{team}")];
        let route = &first[&format!("route/cel-{team}")];
        assert_eq!(spec(vpc)["accountId"], status(account)["accountId"], "vpc/cel-{team}");
        assert_eq!(spec(route)["vpcId"], status(vpc)["vpcId"], "route/cel-{team}");
        assert_eq!(spec(route)["tgwId"], status(&first["tgw/cel-tgw"])["tgwId"]);
        assert_eq!(account.labels.get("team").map(String::as_str), Some(team));
        assert_eq!(route.phase(), Phase::Ready);
    }
    assert_eq!(spec(&first["vpc/cel-search"])["cidr"], "10.2.0.0/16");
    assert_eq!(
        rolled["routes"],
        json!(
            ["pay", "search", "ledger"]
                .iter()
                .map(|t| status(&first[&format!("route/cel-{t}")])["routeId"].clone())
                .collect::<Vec<_>>()
        )
    );

    // One team out, one in: exactly three children go and three come; the
    // others keep their identity.
    let teams = json!({"teams": ["pay", "ledger", "ml"], "region": "us-east-1"});
    apply_ok(&client, apply("bom-cel", "cel", teams)).await?;
    let settled = eventually(SETTLE, || async {
        let root = get(&client, "bom-cel", "cel").await?;
        let now = keyed(&children(&client, "bom-cel", "cel").await?);
        let done = root.phase() == Phase::Ready
            && root.observed_generation == root.generation
            && now.len() == 11
            && !now.contains_key("vpc/cel-search");
        Ok(done.then_some(now))
    })
    .await?;
    let names: BTreeSet<&str> = settled.keys().map(String::as_str).collect();
    let before: BTreeSet<&str> = first.keys().map(String::as_str).collect();
    let gone: Vec<&str> = before.difference(&names).copied().collect();
    assert_eq!(gone.len(), 3, "{gone:?}");
    assert!(gone.iter().all(|n| n.ends_with("cel-search")), "{gone:?}");
    for kept in [
        "account/cel-pay",
        "vpc/cel-ledger",
        "route/cel-pay",
        "tgw/cel-tgw",
        "account/cel-network",
    ] {
        assert_eq!(settled[kept].uid, first[kept].uid, "{kept} kept its identity");
    }
    assert!(settled.contains_key("route/cel-ml") && settled.contains_key("vpc/cel-ml"));
    // ledger moved from position 3 to 2: its ranges follow.
    assert_eq!(spec(&settled["vpc/cel-ledger"])["cidr"], "10.2.0.0/16");
    assert_eq!(
        spec(&settled["vpc/cel-ml"])["accountId"],
        status(&settled["account/cel-ml"])["accountId"]
    );
    server.shutdown().await
}

fn leaf() -> KindManifest {
    KindManifest {
        spec_schema: Some(object(json!({
            "type": "object",
            "properties": {"size": {"type": "integer"}, "peer": {"type": "string"}},
            "x-converge-validations": [{"rule": "!has(self.size) || self.size < 100", "message": "size must stay below 100"}]
        }))),
        status_schema: Some(object(json!({"type": "object", "properties": {"worked": {}}}))),
        ..work_manifest("leaf")
    }
}

fn resource(id: &str, name: &str, spec: Value) -> ComposedResource {
    ComposedResource {
        id: id.into(),
        kind: "leaf".into(),
        kind_version: 1,
        name: name.into(),
        spec: Some(object(spec)),
        ..Default::default()
    }
}

/// `pick` composes one leaf per enabled item, `size` = 10 / div, and rolls
/// up how many are ready.
fn pick() -> KindManifest {
    KindManifest {
        kind: "pick".into(),
        kind_version: 1,
        spec_schema: Some(object(json!({
            "type": "object",
            "properties": {"items": {"type": "array"}, "l": {"type": "array"}}
        }))),
        composition: Some(Composition {
            resources: vec![ComposedResource {
                for_each: "spec.items".into(),
                include_when: "each.enabled".into(),
                ..resource(
                    "items",
                    "${metadata.name}-${each.name}",
                    json!({"size": "${10 / each.div}"}),
                )
            }],
            rollup: Some(CompositionRollup {
                status: Some(object(json!({"ready": "${items.filter(i, i.ready).size()}"}))),
                ready: "items.all(i, i.ready)".into(),
                message: String::new(),
            }),
        }),
        ..Default::default()
    }
}

async fn failure_message(client: &Client, kind: &str, name: &str) -> anyhow::Result<(String, String)> {
    let failed = until_phase(client, kind, name, Phase::Failed).await?;
    let synced = failed
        .conditions
        .iter()
        .find(|c| c.r#type == "Synced")
        .ok_or_else(|| anyhow::anyhow!("{kind}/{name} has no Synced condition: {:?}", failed.conditions))?;
    Ok((synced.reason.clone(), synced.message.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn include_when_errors_budgets_and_refusals() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, leaf()).await?;
    apply_manifest(&client, pick()).await?;
    let scratch = tempfile::tempdir()?;
    let _worker = noop_worker_of(&server.address(), "leaf:1", 8, &scratch.path().join("worked"))?;

    let items = json!({"items": [
        {"name": "x", "enabled": true, "div": 2},
        {"name": "y", "enabled": false, "div": 1},
        {"name": "z", "enabled": true, "div": 5}
    ]});
    apply_ok(&client, apply("pick", "p1", items)).await?;
    let root = until_phase(&client, "pick", "p1", Phase::Ready).await?;
    assert_eq!(status(&root), json!({"ready": 2}));
    let made = keyed(&children(&client, "pick", "p1").await?);
    assert_eq!(made.keys().collect::<Vec<_>>(), ["leaf/p1-x", "leaf/p1-z"]);
    assert_eq!(spec(&made["leaf/p1-x"]), json!({"size": 5}));

    // A division by zero is a condition on the parent, not a crash.
    let zero = json!({"items": [{"name": "x", "enabled": true, "div": 0}]});
    apply_ok(&client, apply("pick", "p2", zero)).await?;
    let (reason, message) = failure_message(&client, "pick", "p2").await?;
    assert_eq!(reason, "CompositionEvaluationFailed");
    assert!(
        message.contains("/manifest/composition/resources/0/spec/size") && message.contains("zero"),
        "{message}"
    );
    // A child the child kind's rules refuse fails the composition.
    let over = json!({"items": [{"name": "x", "enabled": true, "div": 1}]});
    let mut manifest = pick();
    if let Some(c) = manifest.composition.as_mut() {
        c.resources[0].spec = Some(object(json!({"size": "${1000 / each.div}"})));
    }
    manifest.kind = "pick-big".into();
    apply_manifest(&client, manifest).await?;
    apply_ok(&client, apply("pick-big", "b1", over)).await?;
    let (reason, message) = failure_message(&client, "pick-big", "b1").await?;
    assert_eq!(reason, "CompositionInvalid");
    assert!(message.contains("size must stay below 100"), "{message}");

    // A hostile expression: nested loops over a wide list exceed the budget
    // before they run.
    let mut wide = pick();
    wide.kind = "wide".into();
    if let Some(c) = wide.composition.as_mut() {
        c.resources[0].for_each =
            "spec.l.map(x, spec.l.map(y, x * y)).map(r, {'name': string(r[0]), 'enabled': false, 'div': 1})".into();
    }
    apply_manifest(&client, wide).await?;
    let list: Vec<i64> = (0..5000).collect();
    apply_ok(&client, apply("wide", "w1", json!({"l": list}))).await?;
    let (reason, message) = failure_message(&client, "wide", "w1").await?;
    assert_eq!(reason, "CompositionEvaluationFailed");
    assert!(message.contains("evaluation budget"), "{message}");
    // The server kept serving: a new parent still composes.
    apply_ok(
        &client,
        apply(
            "pick",
            "p3",
            json!({"items": [{"name": "a", "enabled": true, "div": 1}]}),
        ),
    )
    .await?;
    until_phase(&client, "pick", "p3", Phase::Ready).await?;

    // Refused at ApplyKindManifest, each with a field path.
    let refuse = |mut manifest: KindManifest, edit: &dyn Fn(&mut Composition)| {
        if let Some(c) = manifest.composition.as_mut() {
            edit(c);
        }
        manifest.kind = "bad".into();
        manifest
    };
    let cases: Vec<(KindManifest, &str, &str)> = vec![
        (
            refuse(pick(), &|c| c.resources[0].kind = "nope".into()),
            "/manifest/composition/resources/0/kind",
            "does not exist",
        ),
        (
            refuse(pick(), &|c| {
                c.resources[0].for_each = "spec.l.map(a, spec.l.map(b, spec.l.map(c, c)))".into()
            }),
            "/manifest/composition/resources/0/for_each",
            "loop macros",
        ),
        (
            refuse(pick(), &|c| c.resources[0].name = "${spec.missing}".into()),
            "/manifest/composition/resources/0/name",
            "does not declare",
        ),
        (
            refuse(pick(), &|c| {
                c.resources[0].for_each = String::new();
                c.resources[0].include_when = String::new();
                c.resources[0].name = "a".into();
                c.resources[0].spec = Some(object(json!({"peer": "${b.status.worked}"})));
                c.resources
                    .push(resource("b", "b", json!({"peer": "${items.status.worked}"})));
            }),
            "/manifest/composition/resources",
            "cycle",
        ),
        (
            refuse(pick(), &|c| {
                c.resources.push(ComposedResource {
                    for_each: "spec.items".into(),
                    ..resource("other", "${each.name}-o", json!({"peer": "${items.status.nothing}"}))
                });
            }),
            "/manifest/composition/resources/1/spec/peer",
            "status schema of leaf",
        ),
        (
            refuse(pick(), &|c| {
                c.resources
                    .push(resource("other", "o", json!({"peer": "${items.status.worked}"})));
            }),
            "/manifest/composition/resources/1/spec/peer",
            "reads the collection",
        ),
    ];
    for (manifest, field, words) in cases {
        let violations = expect_error(
            apply_manifest(&client, manifest).await,
            Code::InvalidArgument,
            "INVALID_KIND_MANIFEST",
        );
        assert!(fields(&violations).contains(&field), "{field}: {violations:?}");
        assert!(
            violations.iter().any(|(f, d)| f == field && d.contains(words)),
            "{field}: {words}: {violations:?}"
        );
    }
    server.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn validation_rules_refuse_with_their_message_at_their_path() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    let ruled = KindManifest {
        spec_schema: Some(object(json!({
            "type": "object",
            "x-converge-validations": [
                {"rule": "!has(self.min) || !has(self.max) || self.min <= self.max",
                 "message": "min must not exceed max", "fieldPath": "/min"}
            ],
            "properties": {
                "region": {"type": "string",
                           "x-converge-validations": [{"rule": "self == oldSelf", "message": "region is immutable"}]},
                "size": {"type": "integer",
                         "x-converge-validations": [{"rule": "self >= oldSelf", "message": "size may only grow"}]},
                "min": {"type": "integer"},
                "max": {"type": "integer"}
            }
        }))),
        ..work_manifest("ruled")
    };
    apply_manifest(&client, ruled.clone()).await?;
    apply_ok(
        &client,
        apply("ruled", "r", json!({"region": "eu", "size": 2, "min": 1, "max": 3})),
    )
    .await?;
    let refusals = [
        (
            json!({"region": "us", "size": 2}),
            "/spec/region",
            "region is immutable",
        ),
        (json!({"region": "eu", "size": 1}), "/spec/size", "size may only grow"),
        (
            json!({"region": "eu", "size": 3, "min": 5, "max": 4}),
            "/spec/min",
            "min must not exceed max",
        ),
    ];
    for (spec, field, message) in refusals {
        let violations = expect_error(
            client.resources().apply_resource(apply("ruled", "r", spec)).await,
            Code::InvalidArgument,
            "SPEC_SCHEMA_VIOLATION",
        );
        assert_eq!(violations, [(field.to_owned(), message.to_owned())]);
    }
    // Growing is fine, and a new resource has no old value to compare.
    apply_ok(&client, apply("ruled", "r", json!({"region": "eu", "size": 3}))).await?;
    apply_ok(&client, apply("ruled", "s", json!({"region": "us", "size": 1}))).await?;
    let stored = get(&client, "ruled", "r").await?;
    assert_eq!(spec(&stored), json!({"region": "eu", "size": 3}));

    // A rule that does not compile is refused where it sits.
    let mut bad = ruled;
    bad.kind = "ruled-bad".into();
    bad.spec_schema = Some(object(json!({
        "type": "object",
        "properties": {"a": {"x-converge-validations": [{"rule": "self >", "message": "m"}]}}
    })));
    let violations = expect_error(
        apply_manifest(&client, bad).await,
        Code::InvalidArgument,
        "INVALID_KIND_MANIFEST",
    );
    assert_eq!(
        fields(&violations),
        ["/manifest/spec_schema/properties/a/x-converge-validations/0/rule"]
    );
    server.shutdown().await
}

/// `converge render` evaluates the demo's `bom-cel` offline: the same
/// children, labels, edges and value flows as the worker composer of `bom`
/// (route specs add `simulateFailure: false`), a given status flows into
/// the dependents, and bad input exits 2 with the reason.
#[tokio::test]
async fn render_shows_the_worker_boms_children_offline() -> anyhow::Result<()> {
    use converge_examples::bom::compose::{BomSpec, compose};
    let scratch = tempfile::tempdir()?;
    let document = scratch.path().join("bom.yaml");
    std::fs::write(
        &document,
        "apiVersion: converge.dev/v1\ntype: Resource\nkind: bom-cel\nkindVersion: 1\nname: demo\n\
         spec: {teams: [pay, search, ledger], region: eu-west-1, failTeams: [search]}\n",
    )?;
    let examples = converge_integration::processes::repository_root().join("examples/bom");
    let output = Command::new(binary("converge")?)
        .arg("render")
        .arg("-f")
        .arg(&examples)
        .arg("-f")
        .arg(&document)
        .args([
            "-o",
            "json",
            "--status",
            r#"account/demo-pay={"accountId": "acct-000000000001"}"#,
        ])
        .output()
        .await?;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let rendered: Value = serde_json::from_slice(&output.stdout)?;
    let items = rendered["items"].as_array().cloned().unwrap_or_default();
    let children: Vec<&Value> = items.iter().filter(|i| i["kind"] != "bom-cel").collect();

    let spec: BomSpec = serde_json::from_value(json!({
        "teams": ["pay", "search", "ledger"], "region": "eu-west-1", "failTeams": ["search"]
    }))?;
    let expected = compose("demo", &spec)?;
    let shape = |kind: &str, name: &str, labels: &Value| format!("{kind}/{name} {labels}");
    let mut want: Vec<String> = expected
        .children
        .iter()
        .map(|c| shape(&c.kind, &c.name, &json!(c.labels)))
        .collect();
    let mut got: Vec<String> = children
        .iter()
        .map(|c| {
            let labels = if c["labels"].is_null() {
                json!({})
            } else {
                c["labels"].clone()
            };
            shape(
                c["kind"].as_str().unwrap_or_default(),
                c["name"].as_str().unwrap_or_default(),
                &labels,
            )
        })
        .collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    for child in &expected.children {
        let rendered = children
            .iter()
            .find(|c| c["kind"] == child.kind && c["name"] == child.name)
            .expect("rendered");
        let mut spec = rendered["spec"].clone();
        if child.kind == "route" && spec["simulateFailure"] == false {
            spec.as_object_mut().map(|o| o.remove("simulateFailure"));
        }
        if child.name == "demo-pay" && child.kind == "vpc" {
            // The given status flowed in.
            assert_eq!(spec["accountId"], "acct-000000000001");
            spec.as_object_mut().map(|o| o.remove("accountId"));
        }
        assert_eq!(spec, child.spec, "{}/{}", child.kind, child.name);
    }
    let mut want: Vec<String> = expected
        .edges
        .iter()
        .flat_map(|e| {
            e.value_flows.iter().map(move |f| {
                format!(
                    "{}/{} <- {}/{} {} <- {}",
                    e.dependent.kind,
                    e.dependent.name,
                    e.dependency.kind,
                    e.dependency.name,
                    f.dependent_field,
                    f.source_field
                )
            })
        })
        .collect();
    let mut got: Vec<String> = children
        .iter()
        .flat_map(|c| {
            c["dependsOn"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .flat_map(move |d| {
                    d["valueFlows"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                        .into_iter()
                        .map(move |f| {
                            format!(
                                "{}/{} <- {}/{} {} <- {}",
                                c["kind"].as_str().unwrap_or_default(),
                                c["name"].as_str().unwrap_or_default(),
                                d["kind"].as_str().unwrap_or_default(),
                                d["name"].as_str().unwrap_or_default(),
                                f["dependent"].as_str().unwrap_or_default(),
                                f["source"].as_str().unwrap_or_default()
                            )
                        })
                })
        })
        .collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);

    // A status that is not JSON, and a resource whose kind has no manifest.
    let bad = Command::new(binary("converge")?)
        .arg("render")
        .arg("-f")
        .arg(&examples)
        .arg("-f")
        .arg(&document)
        .args(["--status", "account/demo-pay={"])
        .output()
        .await?;
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not JSON"));
    let alone = Command::new(binary("converge")?)
        .arg("render")
        .arg("-f")
        .arg(&document)
        .output()
        .await?;
    assert_eq!(alone.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&alone.stderr).contains("no KindManifest of bom-cel"));
    Ok(())
}

/// A converge process SIGKILLed while it composes (its own sessions hold
/// CEL compose tasks) and its queue lost as in a PostgreSQL crash: after a
/// restart every root composes exactly its children, once, and is Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cel_compositions_survive_a_sigkilled_server() -> anyhow::Result<()> {
    use converge_integration::TestDatabase;
    use converge_integration::api::count;
    use converge_integration::processes::{
        connect_when_up, converge_process, crash_postgres_state, free_local_addr, signal,
    };
    use converge_proto::v1::BatchApplyResourcesRequest;
    use nix::sys::signal::Signal;
    const ROOTS: usize = 300;
    const CHILDREN: usize = 5;

    let scratch = tempfile::tempdir()?;
    let database = TestDatabase::new().await?;
    let (url, pool) = (database.url()?, database.pool().clone());
    let addr = free_local_addr()?;
    let address = format!("http://{addr}");
    let mut server = converge_process(&url, &addr, &scratch.path().join("first.log"))?;
    let client = connect_when_up(&address).await?;
    apply_manifest(&client, leaf()).await?;
    apply_manifest(&client, pick()).await?;
    let _worker = noop_worker_of(&address, "leaf:1", 32, &scratch.path().join("worked"))?;
    let items: Vec<Value> = (0..CHILDREN)
        .map(|i| json!({"name": format!("c{i}"), "enabled": true, "div": 1}))
        .collect();
    for batch in (0..ROOTS).collect::<Vec<_>>().chunks(100) {
        let requests = batch
            .iter()
            .map(|i| apply("pick", &format!("k{i}"), json!({"items": items})))
            .collect();
        client
            .resources()
            .batch_apply_resources(BatchApplyResourcesRequest {
                requests,
                ..Default::default()
            })
            .await?;
    }
    eventually(Duration::from_secs(60), || async {
        let composed = count(
            &pool,
            "SELECT count(*) FROM resources WHERE kind = 'pick' AND composed_gen > 0",
        )
        .await?;
        Ok((composed > 0).then_some(()))
    })
    .await?;
    let pending = count(
        &pool,
        "SELECT count(*) FROM resources WHERE kind = 'pick' AND phase <> 'Ready'",
    )
    .await?;
    signal(&server, Signal::SIGKILL)?;
    server.wait().await?;
    crash_postgres_state(&pool).await?;
    assert!(pending > 0, "the kill found every root already Ready");

    let mut restarted = converge_process(&url, &addr, &scratch.path().join("second.log"))?;
    eventually(SETTLE, || async {
        let ready = count(
            &pool,
            "SELECT count(*) FROM resources WHERE kind = 'pick' AND phase = 'Ready'",
        )
        .await?;
        Ok((ready == ROOTS as i64).then_some(()))
    })
    .await?;
    let leaves = count(&pool, "SELECT count(*) FROM resources WHERE kind = 'leaf'").await?;
    assert_eq!(leaves, (ROOTS * CHILDREN) as i64);
    // Composed once: a recomposition after the restart changed no child.
    let rewritten = count(
        &pool,
        "SELECT count(*) FROM resources WHERE kind = 'leaf' AND generation > 1",
    )
    .await?;
    assert_eq!(rewritten, 0);
    let status = count(
        &pool,
        &format!("SELECT count(*) FROM resources WHERE kind = 'pick' AND status = '{{\"ready\": {CHILDREN}}}'::jsonb"),
    )
    .await?;
    assert_eq!(status, ROOTS as i64, "every rollup counted its {CHILDREN} children");
    signal(&restarted, Signal::SIGTERM)?;
    let exit = tokio::time::timeout(Duration::from_secs(20), restarted.wait()).await??;
    assert!(exit.success(), "{exit}");
    Ok(())
}

/// A kind with a composition and a worker reaction of its own: its workers'
/// streams claim it, the worker runs only the work stage, and the server
/// composes and rolls up on that same stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_composition_with_a_worker_reaction_shares_the_workers_stream() -> anyhow::Result<()> {
    use converge_integration::processes::worked;
    let server = TestServer::start().await?;
    let client = server.client().await?;
    apply_manifest(&client, leaf()).await?;
    let mixed = KindManifest {
        kind: "mixed".into(),
        ..pick()
    };
    let mixed = KindManifest {
        reactions: work_manifest("mixed").reactions,
        ..mixed
    };
    apply_manifest(&client, mixed).await?;
    let scratch = tempfile::tempdir()?;
    let record = scratch.path().join("worked");
    let _worker = noop_worker_of(&server.address(), "leaf:1,mixed:1", 8, &record)?;
    let items = json!({"items": [{"name": "a", "enabled": true, "div": 1}, {"name": "b", "enabled": true, "div": 2}]});
    apply_ok(&client, apply("mixed", "m1", items)).await?;
    let root = until_phase(&client, "mixed", "m1", Phase::Ready).await?;
    // The server's rollup wrote the status, after the worker's work stage.
    assert_eq!(status(&root), json!({"ready": 2}));
    let made = keyed(&children(&client, "mixed", "m1").await?);
    assert_eq!(made.keys().collect::<Vec<_>>(), ["leaf/m1-a", "leaf/m1-b"]);
    let runs = worked(&record)?;
    assert!(runs.get("mixed/m1 1").is_some_and(|n| *n >= 1), "{runs:?}");
    assert_eq!(runs.get("leaf/m1-a 1"), Some(&1), "{runs:?}");
    server.shutdown().await
}
