//! The client commands of the real `converge` binary against a real server
//! process (and real workers): apply, get in every format, watch across a
//! server restart, delete --wait of a composed tree, graph, exit codes.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use converge_integration::processes::{
    binary, connect_when_up, converge_process, converge_process_with, crash_postgres_state, free_local_addr,
    noop_worker, signal, stop_cleanly,
};
use converge_integration::{TestDatabase, eventually};
use converge_proto::v1 as pb;
use converge_sdk::Client;
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

/// Runs `converge ARGS` against `address` (stdin from `input`, when given).
async fn converge(address: &str, args: &[&str], input: Option<&str>) -> anyhow::Result<Output> {
    let mut command = Command::new(binary("converge")?);
    command
        .args(args)
        .env("CONVERGE_SERVER", address)
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn()?;
    if let Some(text) = input {
        use tokio::io::AsyncWriteExt as _;
        let mut stdin = child.stdin.take().ok_or_else(|| anyhow::anyhow!("no stdin"))?;
        stdin.write_all(text.as_bytes()).await?;
        drop(stdin);
    }
    Ok(tokio::time::timeout(Duration::from_secs(120), child.wait_with_output()).await??)
}

/// Runs `converge ARGS` and returns its stdout, failing unless it exits 0.
async fn ok(address: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = converge(address, args, None).await?;
    anyhow::ensure!(
        out.status.success(),
        "converge {args:?} exited {}:\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// A directory with every object type: a kind with a config schema, a
/// reactor kind, a default provider config, three resources (one file of
/// several YAML documents, one JSON stream) and a reactor binding.
fn write_objects(dir: &Path) -> anyhow::Result<()> {
    std::fs::write(
        dir.join("00-kinds.yaml"),
        "\
apiVersion: converge.dev/v1
type: KindManifest
kind: noop
kindVersion: 1
description: Does nothing.
specSchema:
  type: object
configSchema:
  type: object
  properties:
    org: {type: string}
reactions:
  - name: work
    trigger: TRIGGER_SPEC_CHANGE
    emits: [EMIT_STATUS]
---
apiVersion: converge.dev/v1
type: KindManifest
kind: cli-publisher
kindVersion: 1
reactions:
  - name: react
    trigger: TRIGGER_REACTOR
    emits: [EMIT_SIDE_EFFECT]
",
    )?;
    // Resources come first by name: apply still puts kinds before them.
    std::fs::write(
        dir.join("-resources.yaml"),
        "\
apiVersion: converge.dev/v1
type: Resource
kind: noop
kindVersion: 1
name: alpha
labels: {team: payments, tier: web}
spec: {size: 1}
---
apiVersion: converge.dev/v1
type: Resource
kind: noop
kindVersion: 1
name: beta
labels: {team: payments, tier: api}
spec: {size: 2, nested: {list: [1, two, true]}}
",
    )?;
    std::fs::write(
        dir.join("more.json"),
        r#"{"apiVersion": "converge.dev/v1", "type": "Resource", "kind": "noop", "kind_version": 1,
            "name": "gamma", "labels": {"team": "ledger"}, "spec": {}}
           {"apiVersion": "converge.dev/v1", "type": "ProviderConfig", "name": "noop-default",
            "kind": "noop", "kindVersion": 1, "isDefault": true, "spec": {"org": "acme"}}"#,
    )?;
    std::fs::write(
        dir.join("zz-binding.yml"),
        "\
apiVersion: converge.dev/v1
type: ReactorBinding
name: publish-noops
watchKind: noop
transition: TRANSITION_SYNCED
reactor: cli-publisher
",
    )?;
    std::fs::write(dir.join("README.txt"), "not a document: skipped by extension")?;
    Ok(())
}

/// The applied objects' lines in the order apply prints them.
fn applied(word: &str) -> String {
    [
        "KindManifest/noop.v1",
        "KindManifest/cli-publisher.v1",
        "ProviderConfig/noop-default",
        "Resource/noop/alpha",
        "Resource/noop/beta",
        "Resource/noop/gamma",
        "ReactorBinding/publish-noops",
    ]
    .iter()
    .map(|name| format!("{name} {word}\n"))
    .collect()
}

/// A converge server process on a fresh database.
struct Site {
    _database: TestDatabase,
    url: String,
    pool: sqlx::PgPool,
    addr: String,
    scratch: tempfile::TempDir,
}

impl Site {
    async fn new() -> anyhow::Result<Self> {
        let database = TestDatabase::new().await?;
        Ok(Self {
            url: database.url()?,
            pool: database.pool().clone(),
            _database: database,
            addr: free_local_addr()?,
            scratch: tempfile::tempdir()?,
        })
    }

    fn address(&self) -> String {
        format!("http://{}", self.addr)
    }

    async fn start(&self, log: &str) -> anyhow::Result<(Child, Client)> {
        let child = converge_process(&self.url, &self.addr, &self.scratch.path().join(log))?;
        let client = connect_when_up(&self.address()).await?;
        Ok((child, client))
    }
}

fn user_fields(item: &Value) -> Value {
    json!({
        "type": item["type"], "kind": item["kind"], "name": item["name"],
        "labels": item["labels"], "spec": item["spec"],
    })
}

#[tokio::test]
async fn apply_twice_then_get_in_every_format_and_apply_the_output_back() -> anyhow::Result<()> {
    let site = Site::new().await?;
    let (mut server, client) = site.start("server.log").await?;
    let address = site.address();
    let dir = site.scratch.path().join("objects");
    std::fs::create_dir(&dir)?;
    write_objects(&dir)?;
    let dir_arg = dir.to_string_lossy().into_owned();

    assert_eq!(ok(&address, &["apply", "-f", &dir_arg]).await?, applied("created"));
    assert_eq!(ok(&address, &["apply", "-f", &dir_arg]).await?, applied("unchanged"));

    let record = site.scratch.path().join("worked.log");
    let mut worker = noop_worker(&address, 4, 0, &record)?;
    eventually(Duration::from_secs(60), || async {
        let table = ok(&address, &["get", "noop", "--phase", "ready"]).await?;
        Ok((table.lines().count() == 4).then_some(()))
    })
    .await?;

    // Every output format, with a selector.
    let sel = ["get", "noop", "-l", "team=payments"];
    let table = ok(&address, &sel).await?;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[0].starts_with("KIND") && lines[0].contains("PHASE"), "{table}");
    assert!(
        lines[1..].iter().all(|l| l.contains("Ready") && l.contains("1/1")),
        "{table}"
    );
    let wide = ok(&address, &[&sel[..], &["-o", "wide"]].concat()).await?;
    assert!(
        wide.contains("team=payments,tier=web") && wide.contains("LABELS"),
        "{wide}"
    );
    let names = ok(&address, &[&sel[..], &["-o", "name"]].concat()).await?;
    let mut names: Vec<&str> = names.lines().collect();
    names.sort_unstable();
    assert_eq!(names, ["Resource/noop/alpha", "Resource/noop/beta"]);
    let tier = ok(&address, &["get", "resources", "-l", "tier in (api)", "-o", "name"]).await?;
    assert_eq!(tier, "Resource/noop/beta\n");

    let json_text = ok(&address, &[&sel[..], &["-o", "json"]].concat()).await?;
    let yaml_text = ok(&address, &[&sel[..], &["-o", "yaml"]].concat()).await?;
    let from_json: Value = serde_json::from_str(&json_text)?;
    let from_yaml: Value = serde_norway::from_str(&yaml_text)?;
    assert_eq!(from_json["type"], "List");
    let mut items: Vec<Value> = from_json["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(user_fields)
        .collect();
    items.sort_by_key(|i| i["name"].to_string());
    assert_eq!(
        items,
        [
            json!({"type": "Resource", "kind": "noop", "name": "alpha",
                   "labels": {"team": "payments", "tier": "web"}, "spec": {"size": 1}}),
            json!({"type": "Resource", "kind": "noop", "name": "beta",
                   "labels": {"team": "payments", "tier": "api"},
                   "spec": {"size": 2, "nested": {"list": [1, "two", true]}}}),
        ]
    );
    assert_eq!(from_json, from_yaml, "json and yaml print the same objects");
    assert_eq!(from_json["items"][0]["phase"], "PHASE_READY");

    // The printed objects apply back as they are: nothing changes.
    for (format, text) in [("json", &json_text), ("yaml", &yaml_text)] {
        let out = converge(&address, &["apply", "-f", "-"], Some(text)).await?;
        assert!(
            out.status.success(),
            "{format}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut lines: Vec<String> = String::from_utf8(out.stdout)?.lines().map(str::to_owned).collect();
        lines.sort();
        assert_eq!(
            lines,
            ["Resource/noop/alpha unchanged", "Resource/noop/beta unchanged"],
            "{format}"
        );
    }
    // One named object prints as itself, and the other types too.
    let one: Value = serde_norway::from_str(&ok(&address, &["get", "noop", "beta", "-o", "yaml"]).await?)?;
    assert_eq!(one["name"], "beta");
    for what in ["kinds", "providerconfigs", "reactorbindings", "members"] {
        let listed: Value = serde_json::from_str(&ok(&address, &["get", what, "-o", "json"]).await?)?;
        let n = listed["items"].as_array().map_or(0, Vec::len);
        assert!(n >= 1, "get {what}: {listed}");
        let text = ok(&address, &["get", what]).await?;
        assert!(
            text.lines().count() > n,
            "get {what} prints a header and a row each:\n{text}"
        );
    }
    let kinds = ok(&address, &["get", "kinds", "-o", "yaml"]).await?;
    let out = converge(&address, &["apply", "-f", "-"], Some(&kinds)).await?;
    let mut lines: Vec<String> = String::from_utf8(out.stdout)?.lines().map(str::to_owned).collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "KindManifest/cli-publisher.v1 unchanged",
            "KindManifest/noop.v1 unchanged"
        ]
    );
    // --limit bounds what is read (pages are followed otherwise).
    assert_eq!(
        ok(&address, &["get", "noop", "--limit", "2", "-o", "name"])
            .await?
            .lines()
            .count(),
        2
    );

    // A changed spec is configured, the rest unchanged; a dry run says so
    // first and writes nothing.
    std::fs::write(
        dir.join("-resources.yaml"),
        std::fs::read_to_string(dir.join("-resources.yaml"))?.replace("spec: {size: 1}", "spec: {size: 10}"),
    )?;
    let dry = ok(&address, &["apply", "-f", &dir_arg, "--dry-run"]).await?;
    assert!(dry.contains("Resource/noop/alpha configured (dry run)\n"), "{dry}");
    assert_eq!(dry.matches(" unchanged (dry run)\n").count(), 6, "{dry}");
    let alpha = client
        .resources()
        .get_resource(pb::GetResourceRequest {
            kind: "noop".into(),
            name: "alpha".into(),
        })
        .await?
        .into_inner()
        .resource
        .ok_or_else(|| anyhow::anyhow!("alpha is gone"))?;
    assert_eq!(alpha.generation, 1, "a dry run writes nothing");
    let third = ok(&address, &["apply", "-f", &dir_arg]).await?;
    assert!(third.contains("Resource/noop/alpha configured\n"), "{third}");
    assert_eq!(third.matches(" unchanged\n").count(), 6, "{third}");

    let described = ok(&address, &["describe", "noop", "alpha"]).await?;
    for part in [
        "Name:",
        "noop/alpha",
        "Conditions:",
        "Spec:",
        "size: 10",
        "Events:",
        "Waiting for:",
    ] {
        assert!(described.contains(part), "{part} missing from:\n{described}");
    }

    // The one-call verbs, followed by `watch events`.
    let mut events = Command::new(binary("converge")?)
        .args(["watch", "events", "noop", "alpha"])
        .env("CONVERGE_SERVER", &address)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = events.stdout.take().ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    read_until(&mut lines, &mut seen, |l| l.contains("Created")).await?;
    assert_eq!(
        ok(&address, &["quarantine", "noop", "alpha", "-m", "hands off"]).await?,
        "Resource/noop/alpha quarantined\n"
    );
    read_until(&mut lines, &mut seen, |l| l.contains("Quarantine")).await?;
    let described = ok(&address, &["describe", "noop", "alpha"]).await?;
    assert!(described.contains("\n  quarantined: "), "{described}");
    assert!(
        described
            .lines()
            .any(|l| l.starts_with("Quarantined:") && l.contains("yes, since ") && l.contains("hands off")),
        "the header names the quarantine's note:\n{described}"
    );
    ok(&address, &["unquarantine", "noop", "alpha"]).await?;
    ok(&address, &["reconcile", "noop", "alpha", "--reset-backoff"]).await?;
    let history = ok(&address, &["history", "noop", "alpha"]).await?;
    assert!(
        history.starts_with("GENERATION") && history.lines().count() == 3,
        "{history}"
    );
    let rolled = ok(&address, &["rollback", "noop", "alpha", "--to-generation", "1"]).await?;
    assert!(rolled.contains("now generation 3"), "{rolled}");
    let spec: Value = serde_json::from_str(&ok(&address, &["get", "noop", "alpha", "-o", "json"]).await?)?;
    assert_eq!(spec["spec"], json!({"size": 1}), "{spec}");
    // The history's machine formats are envelopes with the enum's names.
    let revisions: Value = serde_json::from_str(&ok(&address, &["history", "noop", "alpha", "-o", "json"]).await?)?;
    let items = revisions["items"].as_array().cloned().unwrap_or_default();
    let rollback = items
        .iter()
        .find(|r| r["generation"] == 3)
        .ok_or_else(|| anyhow::anyhow!("no generation 3 in {revisions}"))?;
    assert_eq!(rollback["apiVersion"], "converge.dev/v1", "{rollback}");
    assert_eq!(rollback["type"], "SpecRevision", "{rollback}");
    assert_eq!(rollback["source"], "SPEC_REVISION_SOURCE_ROLLBACK", "{rollback}");
    assert_eq!(rollback["restoredGeneration"], 1, "{rollback}");
    assert_eq!(
        rollback["resource"],
        json!({"kind": "noop", "name": "alpha"}),
        "{rollback}"
    );
    assert_eq!(rollback["spec"], json!({"size": 1}), "{rollback}");
    assert!(
        items.iter().any(|r| r["generation"] == 1
            && r["source"] == "SPEC_REVISION_SOURCE_APPLY"
            && r.get("restoredGeneration").is_none()),
        "{revisions}"
    );
    let from_yaml: Value = serde_norway::from_str(&ok(&address, &["history", "noop", "alpha", "-o", "yaml"]).await?)?;
    assert_eq!(from_yaml, revisions);
    let mut names: Vec<String> = ok(&address, &["history", "noop", "alpha", "-o", "name"])
        .await?
        .lines()
        .map(str::to_owned)
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "SpecRevision/noop/alpha/1",
            "SpecRevision/noop/alpha/2",
            "SpecRevision/noop/alpha/3"
        ]
    );
    let wide = ok(&address, &["history", "noop", "alpha", "-o", "wide"]).await?;
    assert!(
        wide.starts_with("GENERATION") && wide.lines().next().is_some_and(|h| h.contains("CREATED")),
        "{wide}"
    );
    let listed = ok(&address, &["events", "noop", "alpha"]).await?;
    assert!(listed.starts_with("LAST") && listed.contains("Created"), "{listed}");
    signal(&events, Signal::SIGTERM)?;
    events.wait().await?;

    stop_cleanly(&mut worker).await?;
    stop_cleanly(&mut server).await?;
    Ok(())
}

#[tokio::test]
async fn failures_exit_with_distinct_codes_and_print_the_reason() -> anyhow::Result<()> {
    let site = Site::new().await?;
    let (mut server, _client) = site.start("server.log").await?;
    let address = site.address();
    let code = |out: &Output| out.status.code();
    let stderr = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();

    let missing = converge(&address, &["get", "noop", "nope"], None).await?;
    assert_eq!(code(&missing), Some(3), "{}", stderr(&missing));
    assert!(
        stderr(&missing).contains("converge: NOT_FOUND: "),
        "{}",
        stderr(&missing)
    );
    assert!(
        stderr(&missing).contains("\n  reason: RESOURCE_NOT_FOUND\n"),
        "{}",
        stderr(&missing)
    );
    let gone = converge(&address, &["delete", "noop", "nope"], None).await?;
    assert_eq!(code(&gone), Some(3));
    let ignored = converge(&address, &["delete", "noop", "nope", "--ignore-not-found"], None).await?;
    assert_eq!(code(&ignored), Some(0), "{}", stderr(&ignored));

    // A bad file is refused before anything is sent.
    let bad = site.scratch.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: converge.dev/v1\ntype: Resource\nkind: noop\nkindVersion: 1\nname: x\nsepc: {}\n",
    )?;
    let out = converge(&address, &["apply", "-f", &bad.to_string_lossy()], None).await?;
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("bad.yaml: unknown field `sepc`"),
        "{}",
        stderr(&out)
    );
    let out = converge(&address, &["apply", "-f", "/nonexistent/file.yaml"], None).await?;
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));

    // The server's refusal: one line per field violation.
    let kind = site.scratch.path().join("kind.yaml");
    std::fs::write(
        &kind,
        "apiVersion: converge.dev/v1\ntype: KindManifest\nkind: sized\nkindVersion: 1\n\
         specSchema: {type: object, required: [size], properties: {size: {type: integer}}}\n\
         reactions: [{name: work, trigger: TRIGGER_SPEC_CHANGE, emits: [EMIT_STATUS]}]\n\
         ---\napiVersion: converge.dev/v1\ntype: Resource\nkind: sized\nkindVersion: 1\nname: s\nspec: {size: big}\n",
    )?;
    let out = converge(&address, &["apply", "-f", &kind.to_string_lossy()], None).await?;
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "KindManifest/sized.v1 created\n");
    let err = stderr(&out);
    assert!(
        err.starts_with("converge: INVALID_ARGUMENT: Resource/sized/s ("),
        "{err}"
    );
    assert!(err.contains("\n  reason: SPEC_SCHEMA_VIOLATION\n"), "{err}");
    assert!(err.contains("\n  field /spec/size: "), "{err}");

    let bad_flag = converge(&address, &["get", "noop", "-o", "xml"], None).await?;
    assert_eq!(code(&bad_flag), Some(2));

    stop_cleanly(&mut server).await?;
    let unreachable = converge(&address, &["get", "kinds"], None).await?;
    assert_eq!(code(&unreachable), Some(4), "{}", stderr(&unreachable));
    assert!(
        stderr(&unreachable).starts_with("converge: unavailable: cannot connect"),
        "{}",
        stderr(&unreachable)
    );

    // Client commands neither show nor need the server's options.
    let help = ok(&address, &["get", "--help"]).await?;
    assert!(
        !help.contains("--database-url") && help.contains("--server") && help.contains("Exit codes:"),
        "{help}"
    );
    let completion = ok(&address, &["completion", "bash"]).await?;
    assert!(
        completion.contains("converge") && completion.contains("describe"),
        "{completion:.200}"
    );
    Ok(())
}

/// The Python that reads YAML with PyYAML (a YAML 1.1 reader): the SDK
/// toolchain's venv (sdk-gen/generate installs PyYAML there), else the
/// system's.
fn python_with_pyyaml() -> std::path::PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk-gen/.venv/bin/python");
    if venv.exists() { venv } else { "python3".into() }
}

/// `text` read by PyYAML's safe_load, as JSON.
async fn read_with_pyyaml(text: &str) -> anyhow::Result<Value> {
    let mut child = Command::new(python_with_pyyaml())
        .args([
            "-c",
            "import json, sys, yaml; json.dump(yaml.safe_load(sys.stdin), sys.stdout)",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    {
        use tokio::io::AsyncWriteExt as _;
        let mut stdin = child.stdin.take().ok_or_else(|| anyhow::anyhow!("no stdin"))?;
        stdin.write_all(text.as_bytes()).await?;
    }
    let out = child.wait_with_output().await?;
    anyhow::ensure!(
        out.status.success(),
        "PyYAML cannot read:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

#[tokio::test]
async fn yaml_output_reads_the_same_in_a_yaml_1_1_reader() -> anyhow::Result<()> {
    let site = Site::new().await?;
    let (mut server, _client) = site.start("server.log").await?;
    let address = site.address();
    // Every string here is one a YAML 1.1 reader resolves to another type
    // when it is printed plain.
    let documents = r#"
apiVersion: converge.dev/v1
type: KindManifest
kind: noop
kindVersion: 1
specSchema: {type: object}
reactions: [{name: work, trigger: TRIGGER_SPEC_CHANGE, emits: [EMIT_STATUS]}]
---
apiVersion: converge.dev/v1
type: Resource
kind: noop
kindVersion: 1
name: tricky
labels: {public: "off", enabled: "yes", answer: "no", state: "On", release: "2026-01-01", count: "1_000", hex: "0x1f", octal: "0755"}
spec:
  eq: "="
  at: "12:30"
  tilde: "~"
  big: 1.0e+300
  small: 2.5e-7
  words: ["y", "n", "null", "true", ".inf", "-", "1e5"]
  multi: "first line
second line
"
  quote: 'say "hi"'
  empty: ""
  nested: {list: [{k: "off"}, []], map: {}}
"#;
    let out = converge(&address, &["apply", "-f", "-"], Some(documents)).await?;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for args in [
        &["get", "noop", "tricky"][..],
        &["get", "noop"][..],
        &["get", "kinds"][..],
    ] {
        let json_text = ok(&address, &[args, &["-o", "json"]].concat()).await?;
        let yaml_text = ok(&address, &[args, &["-o", "yaml"]].concat()).await?;
        let expected: Value = serde_json::from_str(&json_text)?;
        assert_eq!(read_with_pyyaml(&yaml_text).await?, expected, "{args:?}:\n{yaml_text}");
        let own: Value = serde_norway::from_str(&yaml_text)?;
        assert_eq!(own, expected, "{args:?}:\n{yaml_text}");
    }
    let one: Value = serde_json::from_str(&ok(&address, &["get", "noop", "tricky", "-o", "json"]).await?)?;
    assert_eq!(one["labels"]["public"], "off");
    assert_eq!(one["spec"]["big"], 1e300);
    stop_cleanly(&mut server).await?;
    Ok(())
}

/// Runs `converge ARGS` with a stdout whose reader is already gone.
async fn with_closed_stdout(address: &str, args: &[&str]) -> anyhow::Result<Output> {
    let (read, write) = std::io::pipe()?;
    drop(read);
    let child = Command::new(binary("converge")?)
        .args(args)
        .env("CONVERGE_SERVER", address)
        .stdin(Stdio::null())
        .stdout(Stdio::from(write))
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    Ok(tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await??)
}

#[tokio::test]
async fn typos_missing_roots_closed_pipes_and_byte_order_marks_are_handled() -> anyhow::Result<()> {
    let site = Site::new().await?;
    let (mut server, _client) = site.start("server.log").await?;
    let address = site.address();
    let code = |out: &Output| out.status.code();
    let stderr = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();

    // A file saved with a UTF-8 byte-order mark applies like any other.
    let file = site.scratch.path().join("bom.yaml");
    std::fs::write(
        &file,
        "\u{feff}apiVersion: converge.dev/v1\ntype: KindManifest\nkind: noop\nkindVersion: 1\n\
         reactions: [{name: work, trigger: TRIGGER_SPEC_CHANGE, emits: [EMIT_STATUS]}]\n---\n\
         apiVersion: converge.dev/v1\ntype: Resource\nkind: noop\nkindVersion: 1\nname: hello\n",
    )?;
    assert_eq!(
        ok(&address, &["apply", "-f", &file.to_string_lossy()]).await?,
        "KindManifest/noop.v1 created\nResource/noop/hello created\n"
    );

    // A kind nobody declared is reported, with the close one when there is.
    let unknown = converge(&address, &["get", "nosuchkind"], None).await?;
    assert_eq!(code(&unknown), Some(3), "{}", stderr(&unknown));
    assert_eq!(
        stderr(&unknown),
        "converge: not found: no kind named \"nosuchkind\" (see `converge get kinds`)\n"
    );
    assert!(unknown.stdout.is_empty());
    for args in [&["get", "nop"][..], &["watch", "nop"][..]] {
        let typo = converge(&address, args, None).await?;
        assert_eq!(code(&typo), Some(3), "{args:?}: {}", stderr(&typo));
        assert_eq!(
            stderr(&typo),
            "converge: not found: no kind named \"nop\"; did you mean \"noop\"?\n",
            "{args:?}"
        );
    }
    // An empty list of a declared kind is no error.
    let none = converge(&address, &["get", "noop", "-l", "team=nobody"], None).await?;
    assert_eq!(code(&none), Some(0), "{}", stderr(&none));

    // graph reports a missing root as every command does.
    let missing = converge(&address, &["graph", "noop", "missing"], None).await?;
    assert_eq!(code(&missing), Some(3), "{}", stderr(&missing));
    assert!(
        stderr(&missing).starts_with("converge: NOT_FOUND: ")
            && stderr(&missing).contains("\n  reason: RESOURCE_NOT_FOUND\n"),
        "{}",
        stderr(&missing)
    );

    // A closed stdout ends the command quietly, with success.
    for args in [
        &["completion", "bash"][..],
        &["get", "noop", "-o", "yaml"][..],
        &["get", "kinds"][..],
    ] {
        let out = with_closed_stdout(&address, args).await?;
        assert_eq!(code(&out), Some(0), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{args:?}");
    }
    stop_cleanly(&mut server).await?;
    Ok(())
}

#[tokio::test]
async fn a_peer_that_never_answers_ends_the_command_with_exit_4_in_bounded_time() -> anyhow::Result<()> {
    // A listener that accepts connections and never says a word, as a
    // wedged or stopped server does.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?.to_string();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    let dir = tempfile::tempdir()?;
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, converge_integration::pki::TestCa::new("silent CA")?.pem())?;
    let ca = ca.to_string_lossy().into_owned();
    /// A command line and the environment it runs with.
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)]);
    let cases: [Case<'_>; 4] = [
        (&["get", "noop", "--request-timeout", "2s"], &[]),
        (&["describe", "noop", "hello"], &[("CONVERGE_REQUEST_TIMEOUT", "2s")]),
        (&["watch", "noop"], &[("CONVERGE_REQUEST_TIMEOUT", "2s")]),
        // Over TLS the handshake itself never completes.
        (&["get", "kinds", "--ca-file", &ca, "--connect-timeout", "1s"], &[]),
    ];
    for (args, env) in cases {
        let started = std::time::Instant::now();
        let out = Command::new(binary("converge")?)
            .args(args)
            .env("CONVERGE_SERVER", &address)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?
            .wait_with_output();
        let out = tokio::time::timeout(Duration::from_secs(30), out)
            .await
            .map_err(|_| anyhow::anyhow!("converge {args:?} still waits after 30 s"))??;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{args:?}: {stderr}");
        assert!(stderr.starts_with("converge: unavailable: "), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{args:?} took {:?}",
            started.elapsed()
        );
    }
    held.abort();
    Ok(())
}

/// Reads lines from a watch's stdout until one satisfies `until`.
async fn read_until(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    seen: &mut Vec<String>,
    until: impl Fn(&str) -> bool,
) -> anyhow::Result<()> {
    tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await? {
            let done = until(&line);
            seen.push(line);
            if done {
                return anyhow::Ok(());
            }
        }
        anyhow::bail!("the watch ended; it printed {seen:?}")
    })
    .await
    .map_err(|_| anyhow::anyhow!("no such line within 60s; the watch printed {seen:?}"))?
}

#[tokio::test]
async fn watch_resumes_across_a_server_restart_without_gaps_or_repeats() -> anyhow::Result<()> {
    let site = Site::new().await?;
    let (mut server, client) = site.start("first.log").await?;
    let address = site.address();
    let dir = site.scratch.path().join("objects");
    std::fs::create_dir(&dir)?;
    write_objects(&dir)?;
    ok(&address, &["apply", "-f", &dir.to_string_lossy()]).await?;

    let mut watch = Command::new(binary("converge")?)
        .args(["watch", "noop", "-l", "team=payments"])
        .env("CONVERGE_SERVER", &address)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(
            site.scratch.path().join("watch.err"),
        )?))
        .kill_on_drop(true)
        .spawn()?;
    let stdout = watch.stdout.take().ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    // The snapshot, then a change before the restart.
    read_until(&mut lines, &mut seen, |l| l.starts_with("ADDED noop/")).await?;
    read_until(&mut lines, &mut seen, |l| l.starts_with("ADDED noop/")).await?;
    let apply = |name: &str, size: i64| pb::ApplyResourceRequest {
        kind: "noop".into(),
        kind_version: 1,
        name: name.into(),
        labels: [("team".to_owned(), "payments".to_owned())].into(),
        spec: converge_proto::json::json_to_struct(&json!({"size": size})),
        ..Default::default()
    };
    client.resources().apply_resource(apply("delta", 1)).await?;
    read_until(&mut lines, &mut seen, |l| l.starts_with("ADDED noop/delta")).await?;
    let before = seen.len();

    // Killed, as a crash: the watch loses its stream mid-flight.
    signal(&server, Signal::SIGKILL)?;
    server.wait().await?;
    crash_postgres_state(&site.pool).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut restarted = converge_process_with(&site.url, &site.addr, &site.scratch.path().join("second.log"), &[])?;
    let client = connect_when_up(&address).await?;
    client.resources().apply_resource(apply("delta", 2)).await?;
    client.resources().apply_resource(apply("epsilon", 1)).await?;
    read_until(&mut lines, &mut seen, |l| l.starts_with("ADDED noop/epsilon")).await?;

    let after: Vec<&String> = seen[before..].iter().collect();
    assert!(
        after
            .iter()
            .any(|l| l.starts_with("MODIFIED noop/delta") && l.ends_with("/2")),
        "the change made after the restart is printed: {seen:?}"
    );
    assert!(
        !after
            .iter()
            .any(|l| l.starts_with("ADDED noop/delta") || l.starts_with("ADDED noop/alpha")),
        "nothing from before the restart is printed again: {seen:?}"
    );
    assert!(
        !seen.iter().any(|l| l.contains("gamma")),
        "the selector holds: {seen:?}"
    );

    signal(&watch, Signal::SIGTERM)?;
    watch.wait().await?;
    stop_cleanly(&mut restarted).await?;
    Ok(())
}

#[tokio::test]
async fn graph_prints_the_tree_and_delete_wait_returns_once_it_is_gone() -> anyhow::Result<()> {
    let site = Site::new().await?;
    // `converge dev` serves the BOM kinds with in-process workers and
    // applies bom/demo: a real composed tree of 11 children.
    let mut dev = Command::new(binary("converge")?)
        .args(["dev", "--teams", "payments"])
        .env("DATABASE_URL", &site.url)
        .env("LISTEN_ADDR", &site.addr)
        .env("HEALTH_ADDR", "127.0.0.1:0")
        .env("LOG_LEVEL", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(site.scratch.path().join("dev.log"))?))
        .kill_on_drop(true)
        .spawn()?;
    let address = site.address();
    connect_when_up(&address).await?;
    eventually(Duration::from_secs(120), || async {
        let out = converge(&address, &["get", "bom", "demo"], None).await?;
        Ok(String::from_utf8_lossy(&out.stdout).contains("Ready").then_some(()))
    })
    .await?;

    let graph = ok(&address, &["graph", "bom", "demo"]).await?;
    assert!(graph.starts_with("bom/demo is Ready\n"), "{graph}");
    for part in ["account (", "route (", "demo-payments"] {
        assert!(graph.contains(part), "{part} missing from:\n{graph}");
    }
    assert!(
        graph
            .lines()
            .any(|l| l.contains("demo-payments") && l.contains("Ready")),
        "{graph}"
    );
    let children = ok(&address, &["get", "resources", "-o", "name"]).await?.lines().count();
    assert!(children > 1, "a tree to delete");

    let out = ok(&address, &["delete", "bom", "demo", "--wait", "--timeout", "2m"]).await?;
    assert_eq!(out, "Resource/bom/demo deleted\n");
    // Gone the moment it returned: the root and every child.
    let left = ok(&address, &["get", "resources", "-o", "name"]).await?;
    assert_eq!(left, "", "the tree is gone when delete --wait returns");
    let missing = converge(&address, &["describe", "bom", "demo"], None).await?;
    assert_eq!(missing.status.code(), Some(3));

    signal(&dev, Signal::SIGTERM)?;
    tokio::time::timeout(Duration::from_secs(30), dev.wait()).await??;
    Ok(())
}

/// `converge dev ARGS` on the site's database and address: the BOM kinds
/// served in-process and bom/demo applied.
async fn start_dev(site: &Site, args: &[&str]) -> anyhow::Result<Child> {
    let dev = Command::new(binary("converge")?)
        .arg("dev")
        .args(args)
        .env("DATABASE_URL", &site.url)
        .env("LISTEN_ADDR", &site.addr)
        .env("HEALTH_ADDR", "127.0.0.1:0")
        .env("LOG_LEVEL", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(site.scratch.path().join("dev.log"))?))
        .kill_on_drop(true)
        .spawn()?;
    connect_when_up(&site.address()).await?;
    Ok(dev)
}

/// Describes `kind name` until its "Waiting for:" section has a line
/// starting with `cause:` that contains every one of `parts`; returns that
/// line.
async fn waits_on(address: &str, kind: &str, name: &str, cause: &str, parts: &[&str]) -> anyhow::Result<String> {
    let prefix = format!("  {cause}: ");
    let last = std::sync::Mutex::new(String::new());
    let found = eventually(Duration::from_secs(90), || async {
        let out = converge(address, &["describe", kind, name], None).await?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let waits = text.split("Waiting for:\n").nth(1).unwrap_or_default().to_owned();
        let line = waits
            .lines()
            .take_while(|l| l.starts_with("  "))
            .find(|l| l.starts_with(&prefix) && parts.iter().all(|p| l.contains(p)))
            .map(str::to_owned);
        if let Ok(mut last) = last.lock() {
            *last = text;
        }
        Ok(line)
    })
    .await;
    found.map_err(|e| {
        let text = last.lock().map(|t| t.clone()).unwrap_or_default();
        anyhow::anyhow!("{kind}/{name} never waited on {cause} {parts:?} ({e}); last describe:\n{text}")
    })
}

#[tokio::test]
async fn describe_names_a_missing_worker_and_an_upstream_not_synced() -> anyhow::Result<()> {
    let site = Site::new().await?;
    // Nobody serves the demo's accounts: each account waits for a worker,
    // and each VPC for its account.
    let mut dev = start_dev(&site, &["--teams", "payments", "--external-kinds", "account"]).await?;
    let address = site.address();
    waits_on(
        &address,
        "account",
        "demo-payments",
        "no_worker",
        &["kind \"account\" version 1"],
    )
    .await?;
    waits_on(
        &address,
        "vpc",
        "demo-payments",
        "dependencies",
        &["account/demo-payments"],
    )
    .await?;
    waits_on(&address, "bom", "demo", "children", &["account/demo-payments"]).await?;
    // The dependency's phase is shown although it is a sibling, outside
    // the VPC's own graph.
    let described = ok(&address, &["describe", "vpc", "demo-payments"]).await?;
    let depends = described.split("Depends on:\n").nth(1).unwrap_or_default();
    let row = depends
        .lines()
        .find(|l| l.contains("account/demo-payments"))
        .ok_or_else(|| anyhow::anyhow!("no dependency row:\n{described}"))?;
    assert!(row.contains(" Reconciling "), "{row}\n{described}");
    // A dry-run invocation records nothing, so it prints no operation id.
    let dry = ok(
        &address,
        &["invoke", "account", "demo-payments", "rotate_credentials", "--dry-run"],
    )
    .await?;
    assert_eq!(
        dry,
        "Operation rotate_credentials on Resource/account/demo-payments accepted (dry run)\n"
    );
    signal(&dev, Signal::SIGTERM)?;
    tokio::time::timeout(Duration::from_secs(30), dev.wait()).await??;
    Ok(())
}

#[tokio::test]
async fn describe_names_a_failed_child_a_cap_and_a_backoff() -> anyhow::Result<()> {
    let site = Site::new().await?;
    // The payments route fails terminally in the simulated cloud: the BOM is
    // Degraded by a failed child.
    let mut dev = start_dev(&site, &["--teams", "payments", "--fail-teams", "payments"]).await?;
    let address = site.address();
    waits_on(&address, "bom", "demo", "children", &["route/demo-payments (Failed)"]).await?;

    // A kind capped at one task in flight, served slowly: the second
    // resource waits for the cap.
    let kinds = site.scratch.path().join("kinds.yaml");
    std::fs::write(
        &kinds,
        "\
apiVersion: converge.dev/v1
type: KindManifest
kind: noop
kindVersion: 1
policy: {maxInflight: 1}
reactions: [{name: work, trigger: TRIGGER_SPEC_CHANGE, emits: [EMIT_STATUS]}]
---
apiVersion: converge.dev/v1
type: KindManifest
kind: flaky
kindVersion: 1
policy: {maxTransientAttempts: 50}
reactions: [{name: work, trigger: TRIGGER_SPEC_CHANGE, emits: [EMIT_STATUS]}]
---
apiVersion: converge.dev/v1
type: Resource
kind: noop
kindVersion: 1
name: first
---
apiVersion: converge.dev/v1
type: Resource
kind: noop
kindVersion: 1
name: second
---
apiVersion: converge.dev/v1
type: Resource
kind: flaky
kindVersion: 1
name: f
",
    )?;
    ok(&address, &["apply", "-f", &kinds.to_string_lossy()]).await?;
    let record = site.scratch.path().join("worked.log");
    let mut slow = noop_worker(&address, 4, 120_000, &record)?;
    let capped = eventually(Duration::from_secs(90), || async {
        for name in ["first", "second"] {
            let out = converge(&address, &["describe", "noop", name], None).await?;
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if let Some(line) = text.lines().find(|l| l.starts_with("  concurrency_cap: ")) {
                return Ok(Some(line.to_owned()));
            }
        }
        Ok(None)
    })
    .await?;
    assert!(capped.contains("1 in flight of 1"), "{capped}");

    // A worker whose program always fails transiently: the resource waits
    // out a retry delay.
    let dir = site.scratch.path().join("flaky");
    std::fs::create_dir(&dir)?;
    let mut flaky = converge_integration::processes::stdworker(
        &address,
        &dir,
        "#!/bin/sh\necho 'the simulated provider is down' >&2\nexit 3\n",
        &["flaky:1"],
        &[],
        &[],
    )?;
    waits_on(
        &address,
        "flaky",
        "f",
        "retry_backoff",
        &["attempt", "the simulated provider is down"],
    )
    .await?;

    for child in [&mut flaky, &mut slow] {
        signal(child, Signal::SIGKILL)?;
        child.wait().await?;
    }
    signal(&dev, Signal::SIGTERM)?;
    tokio::time::timeout(Duration::from_secs(30), dev.wait()).await??;
    Ok(())
}
