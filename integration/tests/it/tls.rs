//! TLS and mTLS on the gRPC listener with certificates made in the test:
//! who is admitted, who is refused and how, identities recorded, and
//! rotation of every file while calls and a WorkStream keep running.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use converge_integration::api::{self, apply, apply_manifest, expect_error, wait_phase, work_kind};
use converge_integration::pki::{Leaf, TestCa, replace};
use converge_integration::{TestDatabase, TestServer, eventually};
use converge_proto::v1::{ListKindManifestsRequest, Phase};
use converge_proto::worker_v1::work_stream_request::Payload as Up;
use converge_proto::worker_v1::work_stream_response::Payload as Down;
use converge_proto::worker_v1::{KindVersion, StageComplete, Subscribe, WorkStreamRequest};
use converge_sdk::Client;
use converge_sdk::tls::{ClientTls, ClientTlsFiles};
use converge_service::config::{Role, TlsArgs};
use converge_tls::tokio_rustls::TlsConnector;
use serde_json::json;
use tonic::Code;

/// Files are re-read this often in these tests.
const RELOAD: Duration = Duration::from_secs(1);

const OPERATOR: &str = "spiffe://converge.test/ops/alice";
const WORKER: &str = "spiffe://converge.test/workers/noop";
const WORKER_NEXT: &str = "spiffe://converge.test/workers/noop-rotated";

/// A directory of PEM files and the CA that signed them.
pub(crate) struct Pki {
    dir: tempfile::TempDir,
    ca: TestCa,
}

impl Pki {
    pub(crate) fn new() -> anyhow::Result<Self> {
        let pki = Self {
            dir: tempfile::tempdir()?,
            ca: TestCa::new("converge test CA")?,
        };
        replace(&pki.path("ca.pem"), &pki.ca.pem())?;
        pki.ca.server()?.write(pki.dir.path(), "server")?;
        Ok(pki)
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes a client certificate for `id` as `name.crt`/`name.key`.
    pub(crate) fn client(&self, name: &str, id: Option<&str>) -> anyhow::Result<Leaf> {
        let leaf = self.ca.client(id)?;
        leaf.write(self.dir.path(), name)?;
        Ok(leaf)
    }

    pub(crate) fn server_args(&self, mutual: bool) -> TlsArgs {
        TlsArgs {
            tls_cert_file: Some(self.path("server.crt")),
            tls_key_file: Some(self.path("server.key")),
            tls_client_ca_file: mutual.then(|| self.path("ca.pem")),
            tls_reload_interval_secs: RELOAD.as_secs(),
            ..TlsArgs::default()
        }
    }

    /// The client configuration of `name`'s files (no client certificate
    /// when None), trusting `ca`.
    pub(crate) fn client_tls(&self, ca: &Path, name: Option<&str>) -> anyhow::Result<ClientTls> {
        Ok(ClientTls::load(
            &ClientTlsFiles {
                ca: ca.to_path_buf(),
                identity: name.map(|n| (self.path(&format!("{n}.crt")), self.path(&format!("{n}.key")))),
            },
            RELOAD,
        )?)
    }
}

async fn tls_server(pki: &Pki, mutual: bool, adjust: impl FnOnce(&mut TlsArgs)) -> anyhow::Result<TestServer> {
    let mut args = pki.server_args(mutual);
    adjust(&mut args);
    TestServer::start_with(TestDatabase::new().await?, Role::All, move |config| {
        config.serve.tls = args;
    })
    .await
}

pub(crate) fn https(server: &TestServer) -> String {
    server.address().replacen("http://", "https://", 1)
}

/// One call that needs the API, or the status that refused it.
async fn list_kinds(client: &Client) -> Result<(), tonic::Status> {
    client
        .kinds()
        .list_kind_manifests(ListKindManifestsRequest::default())
        .await
        .map(|_| ())
}

/// A client through `tls`; connecting may already fail (the server refused
/// the handshake), else the first call does.
async fn call_through(server: &TestServer, tls: ClientTls) -> Result<(), String> {
    let client = Client::connect_tls(https(server), tls)
        .await
        .map_err(|e| e.to_string())?;
    list_kinds(&client).await.map_err(|e| e.to_string())
}

/// The DER certificate the server presents to a new connection.
async fn presented_certificate(server: &TestServer, pki: &Pki, client: &str) -> anyhow::Result<Vec<u8>> {
    let tls = pki.client_tls(&pki.path("ca.pem"), Some(client))?;
    let addr = server.address().replacen("http://", "", 1);
    let tcp = tokio::net::TcpStream::connect(&addr).await?;
    let connector: TlsConnector = tls.connector();
    let stream = connector.connect(tls.server_name_for("127.0.0.1")?, tcp).await?;
    let chain = stream
        .get_ref()
        .1
        .peer_certificates()
        .ok_or_else(|| anyhow::anyhow!("no server certificate"))?;
    Ok(chain.first().map(|c| c.to_vec()).unwrap_or_default())
}

#[tokio::test]
async fn tls_serves_clients_that_trust_the_ca_and_plaintext_clients_fail() -> anyhow::Result<()> {
    let pki = Pki::new()?;
    let server = tls_server(&pki, false, |_| {}).await?;
    call_through(&server, pki.client_tls(&pki.path("ca.pem"), None)?)
        .await
        .map_err(anyhow::Error::msg)?;

    // A client that trusts another CA refuses the server.
    let other = TestCa::new("another CA")?;
    replace(&pki.path("other-ca.pem"), &other.pem())?;
    let refused = call_through(&server, pki.client_tls(&pki.path("other-ca.pem"), None)?).await;
    assert!(refused.is_err(), "a client of another CA was served");

    // Plaintext HTTP/2 against the TLS port gets no answer it can use.
    let plain = match Client::connect(server.address()).await {
        Ok(client) => list_kinds(&client).await.map_err(|e| e.code()),
        Err(_) => Err(Code::Unavailable),
    };
    assert!(plain.is_err(), "a plaintext client was served");
    server.shutdown().await
}

#[tokio::test]
async fn mtls_admits_clients_of_the_ca_records_their_identity_and_refuses_others() -> anyhow::Result<()> {
    let pki = Pki::new()?;
    pki.client("alice", Some(OPERATOR))?;
    pki.client("anonymous", None)?;
    let server = tls_server(&pki, true, |_| {}).await?;
    let ca = pki.path("ca.pem");

    let alice = Client::connect_tls(https(&server), pki.client_tls(&ca, Some("alice"))?).await?;
    list_kinds(&alice).await?;

    // No client certificate, or one from an unknown CA: refused at the
    // handshake, so no call is ever served.
    assert!(call_through(&server, pki.client_tls(&ca, None)?).await.is_err());
    let rogue = TestCa::new("rogue CA")?;
    rogue.client(Some(OPERATOR))?.write(pki.dir.path(), "rogue")?;
    let refused = call_through(&server, pki.client_tls(&ca, Some("rogue"))?).await;
    assert!(refused.is_err(), "a certificate of an unknown CA was admitted");

    // A certificate without a SPIFFE ID is admitted (no allowlist) and anonymous.
    call_through(&server, pki.client_tls(&ca, Some("anonymous"))?)
        .await
        .map_err(anyhow::Error::msg)?;

    // The identity is what the server records: an operation's invoker, the
    // applier's and the worker's actors in events.
    let mut manifest = work_kind("certified", 1, None);
    manifest.reactions.push(converge_proto::v1::Reaction {
        name: "operate:ping".into(),
        trigger: converge_proto::v1::Trigger::Operation.into(),
        verb: "ping".into(),
        emits: vec![converge_proto::v1::Emit::OperationOutput.into()],
        ..Default::default()
    });
    apply_manifest(&alice, manifest).await?;
    let worker = Client::connect_tls(https(&server), pki.client_tls(&ca, Some("alice"))?).await?;
    let mut stream = RawWorker::start(&worker, "certified").await?;
    alice
        .resources()
        .apply_resource(apply("certified", "one", json!({})))
        .await?;
    let served = stream.serve_until(1).await?;
    wait_phase(&alice, "certified", "one", Phase::Ready).await?;
    assert_eq!(served.load(Ordering::SeqCst), 1);
    let invoked = alice
        .operations()
        .invoke_operation(converge_proto::v1::InvokeOperationRequest {
            kind: "certified".into(),
            name: "one".into(),
            verb: "ping".into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .operation
        .ok_or_else(|| anyhow::anyhow!("no operation"))?;
    assert_eq!(invoked.requested_by, OPERATOR);
    let actors = actors(&alice, "certified", "one").await?;
    assert!(
        actors.contains(&format!("worker:{OPERATOR}")),
        "no event names the worker's SPIFFE ID: {actors:?}"
    );
    assert!(
        actors.contains(&format!("api:{OPERATOR}")),
        "no event names the applier's SPIFFE ID: {actors:?}"
    );
    server.shutdown().await
}

#[tokio::test]
async fn allowlists_refuse_other_identities_per_audience_with_permission_denied() -> anyhow::Result<()> {
    let pki = Pki::new()?;
    pki.client("alice", Some(OPERATOR))?;
    pki.client("worker", Some(WORKER))?;
    pki.client("anonymous", None)?;
    let server = tls_server(&pki, true, |args| {
        args.allowed_api_identities = vec![OPERATOR.parse().expect("pattern")];
        args.allowed_worker_identities = vec!["spiffe://converge.test/workers/*".parse().expect("pattern")];
    })
    .await?;
    let ca = pki.path("ca.pem");
    let alice = Client::connect_tls(https(&server), pki.client_tls(&ca, Some("alice"))?).await?;
    let worker = Client::connect_tls(https(&server), pki.client_tls(&ca, Some("worker"))?).await?;
    let anonymous = Client::connect_tls(https(&server), pki.client_tls(&ca, Some("anonymous"))?).await?;

    list_kinds(&alice).await?;
    apply_manifest(&alice, work_kind("guarded", 1, None)).await?;
    for refused in [&worker, &anonymous] {
        expect_error(
            list_kinds(refused).await,
            Code::PermissionDenied,
            "IDENTITY_NOT_ALLOWED",
        );
    }
    // The operator may not take work; the worker may.
    let subscribe = |client: &Client| {
        let mut raw = client.workers();
        async move {
            let (up, rx) = tokio::sync::mpsc::channel(4);
            up.send(subscribe_to("guarded")).await.ok();
            raw.work_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await
                .map(|stream| (up, stream))
        }
    };
    expect_error(
        subscribe(&alice).await.map(|_| ()),
        Code::PermissionDenied,
        "IDENTITY_NOT_ALLOWED",
    );
    let (_up, _stream) = subscribe(&worker).await?;

    // Health stays open to every admitted client.
    let mut health = tonic_health::pb::health_client::HealthClient::new(anonymous.channel());
    health
        .check(tonic_health::pb::HealthCheckRequest { service: String::new() })
        .await?;
    server.shutdown().await
}

#[tokio::test]
async fn rotating_every_file_mid_stream_fails_no_call_and_drops_no_stream() -> anyhow::Result<()> {
    let pki = Pki::new()?;
    pki.client("alice", Some(OPERATOR))?;
    pki.client("worker", Some(WORKER))?;
    let server = tls_server(&pki, true, |_| {}).await?;
    let ca = pki.path("ca.pem");
    let alice = Client::connect_tls(https(&server), pki.client_tls(&ca, Some("alice"))?).await?;
    apply_manifest(&alice, work_kind("rotated", 1, None)).await?;
    let worker_tls = pki.client_tls(&ca, Some("worker"))?;
    let worker = Client::connect_tls(https(&server), worker_tls.clone()).await?;
    let stream = RawWorker::start(&worker, "rotated").await?;
    let served = stream.counter();
    let serving = tokio::spawn(async move {
        let mut stream = stream;
        stream.serve_until(usize::MAX).await
    });

    // Calls run throughout; none may fail.
    let failures = Arc::new(AtomicUsize::new(0));
    let calls = Arc::new(AtomicUsize::new(0));
    let (stop_calls, mut stopped) = tokio::sync::watch::channel(false);
    let caller = {
        let (alice, failures, calls) = (alice.clone(), failures.clone(), calls.clone());
        tokio::spawn(async move {
            while !*stopped.borrow() {
                if list_kinds(&alice).await.is_err() {
                    failures.fetch_add(1, Ordering::SeqCst);
                }
                calls.fetch_add(1, Ordering::SeqCst);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                    _ = stopped.changed() => {}
                }
            }
        })
    };
    let ready = |range: std::ops::Range<usize>| {
        let alice = alice.clone();
        async move {
            for i in range.clone() {
                alice
                    .resources()
                    .apply_resource(apply("rotated", &format!("r{i}"), json!({})))
                    .await?;
            }
            for i in range {
                wait_phase(&alice, "rotated", &format!("r{i}"), Phase::Ready).await?;
            }
            anyhow::Ok(())
        }
    };
    ready(0..5).await?;
    let before = presented_certificate(&server, &pki, "alice").await?;

    // A half-written certificate is refused and the last good one kept.
    std::fs::write(pki.path("server.crt"), "-----BEGIN CERTIFICATE-----\nMIIB")?;
    tokio::time::sleep(RELOAD * 2).await;
    assert_eq!(presented_certificate(&server, &pki, "alice").await?, before);

    // Rotate the server's keypair, both clients' keypairs, and the CA
    // bundle (the old CA plus a new one whose clients are admitted next).
    let next_ca = TestCa::new("next converge test CA")?;
    let server_leaf = pki.ca.server()?;
    server_leaf.write(pki.dir.path(), "server")?;
    pki.client("alice", Some(OPERATOR))?;
    pki.client("worker", Some(WORKER_NEXT))?;
    next_ca.client(Some(OPERATOR))?.write(pki.dir.path(), "next")?;
    assert!(
        call_through(&server, pki.client_tls(&ca, Some("next"))?).await.is_err(),
        "a client of the new CA was admitted before the bundle named it"
    );
    replace(&ca, &format!("{}{}", pki.ca.pem(), next_ca.pem()))?;
    eventually(Duration::from_secs(10), || {
        let (server, pki, expected) = (&server, &pki, server_leaf.der.clone());
        async move { Ok((presented_certificate(server, pki, "alice").await? == expected).then_some(())) }
    })
    .await?;
    eventually(Duration::from_secs(10), || {
        let (server, tls) = (&server, pki.client_tls(&ca, Some("next")));
        async move { Ok(call_through(server, tls?).await.is_ok().then_some(())) }
    })
    .await?;
    // The worker's own reloading configuration presents its new keypair
    // (another identity, to tell them apart) on its next connection.
    tokio::time::sleep(RELOAD * 2).await;
    let second = Client::connect_tls(https(&server), worker_tls.clone()).await?;
    apply_manifest(&alice, work_kind("rotated-next", 1, None)).await?;
    let mut next_stream = RawWorker::start(&second, "rotated-next").await?;
    alice
        .resources()
        .apply_resource(apply("rotated-next", "n", json!({})))
        .await?;
    next_stream.serve_until(1).await?;
    wait_phase(&alice, "rotated-next", "n", Phase::Ready).await?;
    let next_actors = actors(&alice, "rotated-next", "n").await?;
    assert!(
        next_actors.contains(&format!("worker:{WORKER_NEXT}")),
        "the worker did not present its rotated certificate: {next_actors:?}"
    );

    // The stream opened before the rotation still takes work, and no call failed.
    ready(5..10).await?;
    stop_calls.send(true)?;
    caller.await?;
    assert!(served.load(Ordering::SeqCst) >= 10);
    assert!(calls.load(Ordering::SeqCst) > 20, "too few calls to mean anything");
    assert_eq!(failures.load(Ordering::SeqCst), 0, "calls failed during the rotation");
    assert!(!serving.is_finished(), "the WorkStream ended during the rotation");
    serving.abort();
    server.shutdown().await
}

/// The actors of a resource's event runs.
async fn actors(client: &Client, kind: &str, name: &str) -> anyhow::Result<Vec<String>> {
    Ok(api::events(client, kind, name)
        .await?
        .into_iter()
        .map(|e| e.actor)
        .collect())
}

pub(crate) fn subscribe_to(kind: &str) -> WorkStreamRequest {
    WorkStreamRequest {
        payload: Some(Up::Subscribe(Subscribe {
            kinds: vec![KindVersion {
                kind: kind.into(),
                kind_version: 1,
            }],
            max_inflight: 4,
            agent: "tls-test".into(),
            ..Default::default()
        })),
    }
}

/// A worker speaking the wire protocol directly on one stream, completing
/// every task; the stream ending is an error, not a reconnect.
struct RawWorker {
    up: tokio::sync::mpsc::Sender<WorkStreamRequest>,
    down: tonic::Streaming<converge_proto::worker_v1::WorkStreamResponse>,
    served: Arc<AtomicUsize>,
}

impl RawWorker {
    async fn start(client: &Client, kind: &str) -> anyhow::Result<Self> {
        let (up, rx) = tokio::sync::mpsc::channel(16);
        up.send(subscribe_to(kind)).await?;
        let down = client
            .workers()
            .work_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await?
            .into_inner();
        Ok(Self {
            up,
            down,
            served: Arc::new(AtomicUsize::new(0)),
        })
    }

    fn counter(&self) -> Arc<AtomicUsize> {
        self.served.clone()
    }

    /// Completes tasks until `count` are done; Err if the stream ends first.
    async fn serve_until(&mut self, count: usize) -> anyhow::Result<Arc<AtomicUsize>> {
        while self.served.load(Ordering::SeqCst) < count {
            let Some(message) = self.down.message().await? else {
                anyhow::bail!("the WorkStream ended");
            };
            if let Some(Down::Task(task)) = message.payload {
                self.up
                    .send(WorkStreamRequest {
                        payload: Some(Up::Complete(StageComplete {
                            lease_token: task.lease_token,
                            claim_epoch: task.claim_epoch,
                            stage: task.stage,
                            generation: task.generation,
                            manifest_version: task.manifest_version,
                            status: Some(api::object(json!({"served": true}))),
                            events: vec![converge_proto::worker_v1::WorkerEvent {
                                reason: "Served".into(),
                                ..Default::default()
                            }],
                            ..Default::default()
                        })),
                    })
                    .await?;
                self.served.fetch_add(1, Ordering::SeqCst);
            }
        }
        Ok(self.served.clone())
    }
}

/// Runs the real `converge` client binary with `args`, `input` on stdin.
async fn converge_cli(args: &[&str], input: &str) -> anyhow::Result<std::process::Output> {
    use tokio::io::AsyncWriteExt as _;
    let mut child = tokio::process::Command::new(converge_integration::processes::binary("converge")?)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).await?;
    }
    Ok(tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await??)
}

#[tokio::test]
async fn the_command_line_speaks_mtls_with_its_certificate_as_identity() -> anyhow::Result<()> {
    let pki = Pki::new()?;
    pki.client("alice", Some(OPERATOR))?;
    let server = tls_server(&pki, true, |_| {}).await?;
    let address = https(&server);
    let (ca, cert, key) = (pki.path("ca.pem"), pki.path("alice.crt"), pki.path("alice.key"));
    let (ca, cert, key) = (ca.to_string_lossy(), cert.to_string_lossy(), key.to_string_lossy());
    let tls = [
        "--server",
        &address,
        "--ca-file",
        &ca,
        "--cert-file",
        &cert,
        "--key-file",
        &key,
    ];
    let documents = "\
apiVersion: converge.dev/v1
type: KindManifest
kind: certified
kindVersion: 1
reactions: [{name: work, trigger: TRIGGER_SPEC_CHANGE, emits: [EMIT_STATUS]}]
---
apiVersion: converge.dev/v1
type: Resource
kind: certified
kindVersion: 1
name: one
";
    let out = converge_cli(&[&["apply", "-f", "-"][..], &tls[..]].concat(), documents).await?;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "KindManifest/certified.v1 created\nResource/certified/one created\n"
    );
    // The client certificate's SPIFFE ID is the applier the server records.
    let out = converge_cli(
        &[&["events", "certified", "one", "-o", "json"][..], &tls[..]].concat(),
        "",
    )
    .await?;
    let events: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let actors: Vec<&str> = events["items"]
        .as_array()
        .map(|items| items.iter().filter_map(|e| e["actor"].as_str()).collect())
        .unwrap_or_default();
    assert!(actors.contains(&format!("api:{OPERATOR}").as_str()), "{events}");

    // An https:// server without --ca-file is verified against the system's
    // CA bundle, here named by SSL_CERT_FILE as OpenSSL tools read it.
    let system_trust = tokio::process::Command::new(converge_integration::processes::binary("converge")?)
        .args([
            "get",
            "kinds",
            "-o",
            "name",
            "--server",
            &address,
            "--cert-file",
            &cert,
            "--key-file",
            &key,
        ])
        .env("SSL_CERT_FILE", &*ca)
        .env_remove("CONVERGE_CA_FILE")
        .stdin(std::process::Stdio::null())
        .output()
        .await?;
    assert!(
        system_trust.status.success(),
        "{}",
        String::from_utf8_lossy(&system_trust.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&system_trust.stdout),
        "KindManifest/certified.v1\n"
    );

    // Without the client certificate, or over plaintext, nothing is served,
    // and the exit code says unavailable.
    let no_cert = converge_cli(&["get", "kinds", "--server", &address, "--ca-file", &ca], "").await?;
    assert_eq!(
        no_cert.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&no_cert.stderr)
    );
    let plain = converge_cli(&["get", "kinds", "--server", &server.address()], "").await?;
    assert_eq!(
        plain.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    // A CA file with an http:// server is a contradiction, refused up front.
    let mixed = converge_cli(&["get", "kinds", "--server", &server.address(), "--ca-file", &ca], "").await?;
    assert_eq!(
        mixed.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&mixed.stderr)
    );
    server.shutdown().await
}
