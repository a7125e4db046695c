//! Quarantine and release from every phase a resource can be set aside in,
//! over real gRPC with an in-process worker on the real worker stream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use converge_integration::api::{apply, apply_manifest, apply_ok, spawn_worker, work_kind};
use converge_integration::{TestServer, eventually};
use converge_proto::v1::{GetResourceRequest, Phase, QuarantineResourceRequest, Resource, UnquarantineResourceRequest};
use converge_sdk::Client;
use converge_sdk::worker::{HandlerError, KindVersion, Outcome, Provider, ReactionRequest, Worker, async_trait};
use serde_json::json;

/// How the probe worker answers for one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Healthy,
    Unhealthy,
    Transient,
    Terminal,
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
            Mode::Healthy => Ok(Outcome::new().with_status(json!({"ok": true})).with_healthy(true)),
            Mode::Unhealthy => Ok(Outcome::new().with_status(json!({"ok": false})).with_healthy(false)),
            Mode::Transient => Err(HandlerError::transient("not yet")),
            Mode::Terminal => Err(HandlerError::terminal("cannot ever work").with_reason("Impossible")),
        }
    }
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

#[tokio::test]
async fn release_reconciles_a_resource_quarantined_in_any_phase() -> anyhow::Result<()> {
    let server = TestServer::start().await?;
    let client = server.client().await?;
    let mut manifest = work_kind("probe", 1, None);
    if let Some(policy) = manifest.policy.as_mut() {
        // Enough transient attempts that "retrying" stays Reconciling.
        policy.max_transient_attempts = 1000;
    }
    apply_manifest(&client, manifest).await?;
    let probe = Probe::default();
    let _worker = spawn_worker(
        Worker::builder()
            .endpoint(server.address())
            .provider(probe.clone())
            .heartbeat_interval(Duration::from_millis(500)),
    );

    let cases = [
        ("ready", Mode::Healthy, Phase::Ready),
        ("degraded", Mode::Unhealthy, Phase::Degraded),
        ("failed", Mode::Terminal, Phase::Failed),
        ("retrying", Mode::Transient, Phase::Reconciling),
    ];
    for (name, mode, _) in cases {
        probe.set(name, mode);
        apply_ok(&client, apply("probe", name, json!({}))).await?;
    }
    for (name, _, phase) in cases {
        if phase == Phase::Reconciling {
            eventually(Duration::from_secs(30), || async {
                Ok((probe.runs(name) >= 2).then_some(()))
            })
            .await?;
        }
        wait_phase(&client, name, phase).await?;
        let set_aside = client
            .resources()
            .quarantine_resource(QuarantineResourceRequest {
                kind: "probe".into(),
                name: name.into(),
                message: "looking into it".into(),
                ..Default::default()
            })
            .await?
            .into_inner()
            .resource
            .ok_or_else(|| anyhow::anyhow!("no resource"))?;
        assert_eq!(set_aside.phase(), Phase::Quarantined, "{name}");
    }

    // Fixed behind the scenes, then released: every one is reconciled again
    // and settles Ready, whatever phase it was set aside in.
    let mut before = HashMap::new();
    for (name, _, _) in cases {
        probe.set(name, Mode::Healthy);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (name, _, _) in cases {
        before.insert(name, probe.runs(name));
        client
            .resources()
            .unquarantine_resource(UnquarantineResourceRequest {
                kind: "probe".into(),
                name: name.into(),
                ..Default::default()
            })
            .await?;
    }
    for (name, _, phase) in cases {
        let ready = wait_phase(&client, name, Phase::Ready).await?;
        assert!(!ready.quarantined, "{name}");
        assert!(
            probe.runs(name) > before[name],
            "{name} (quarantined while {phase:?}) was reconciled after its release"
        );
        assert_eq!(ready.failed_generation, 0, "{name}: the terminal failure is lifted");
    }
    server.shutdown().await
}
