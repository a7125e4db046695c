//! The soak's mixed workload: leaf resources created, changed and deleted,
//! composed trees created and deleted, operations invoked, and a watcher
//! that resumes across faults. Every call is retried (with its request id,
//! so a retry is the same write) until it is acknowledged; what was
//! acknowledged goes into the [`Ledger`] the checks compare the system with.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use converge_proto::v1::{
    ApplyResourceRequest, DeleteResourceRequest, InvokeOperationRequest, WatchEventType, WatchResourcesRequest,
};
use converge_sdk::Client;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use serde_json::{Value, json};
use tokio::sync::watch;
use tonic::{Code, Status};

use crate::api::object;

/// How long one call may take before it is tried again elsewhere.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a write is retried before its outcome is left uncertain.
const PERSIST_FOR: Duration = Duration::from_secs(120);
/// The prefix of the reason of the event each applied leaf result records;
/// [`applied_reason`] makes it unique per write, so that each write's
/// applications are one run of events whose count counts them.
pub const APPLIED_REASON: &str = "SoakApplied";

/// The event reason of the write whose spec value is `value`.
pub fn applied_reason(value: &str) -> String {
    let token: String = value.chars().filter(char::is_ascii_alphanumeric).collect();
    format!("{APPLIED_REASON}{token}")
}
/// Live trees kept at most; the oldest is deleted beyond.
const TREES: usize = 4;
/// The verb invoked on `soak-op` resources.
pub const VERB: &str = "touch";
/// `soak-op` resources the operations run on.
pub const OP_TARGETS: usize = 3;

/// Where a name is in its life, as far as acknowledged calls say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Life {
    /// Applied and acknowledged.
    Live,
    /// A delete acknowledged.
    Deleted,
    /// A call was sent and never acknowledged within [`PERSIST_FOR`]: the
    /// stored state may be either.
    Uncertain,
}

/// A leaf resource as acknowledged.
#[derive(Debug, Clone)]
pub struct Leaf {
    /// The `value` of the last acknowledged spec.
    pub value: String,
    /// The generation the last acknowledged apply returned.
    pub generation: i64,
    /// Its spec asks for a terminal failure.
    pub expect_failed: bool,
    /// Its life.
    pub life: Life,
}

/// A composed tree as acknowledged.
#[derive(Debug, Clone)]
pub struct Tree {
    /// Its children's names, each depending on the one before.
    pub children: Vec<String>,
    /// Its life.
    pub life: Life,
}

/// What was acknowledged, and how the calls went.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    /// `conf-leaf` resources written directly, by name.
    pub leaves: BTreeMap<String, Leaf>,
    /// `conf-composite` roots, by name.
    pub trees: BTreeMap<String, Tree>,
    /// uids of acknowledged operations.
    pub operations: Vec<String>,
    /// Acknowledged calls by what they did.
    pub acknowledged: BTreeMap<&'static str, u64>,
    /// Failed attempts by gRPC code (each retried).
    pub refused: BTreeMap<String, u64>,
    /// Answers no fault explains (INTERNAL from the server), at most 20.
    pub unexplained: Vec<String>,
}

/// The ledger, shared by the workload's tasks and the checks.
#[derive(Debug, Clone, Default)]
pub struct SharedLedger(Arc<Mutex<Ledger>>);

impl SharedLedger {
    /// Locks it (a panicked writer leaves it usable).
    pub fn lock(&self) -> MutexGuard<'_, Ledger> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The converge processes' API, tried in turn.
#[derive(Clone)]
pub struct Endpoints {
    clients: Arc<Vec<Client>>,
    next: Arc<AtomicUsize>,
}

impl Endpoints {
    /// Lazily connected clients of `addresses` (they reconnect by themselves).
    pub fn new(addresses: &[String]) -> anyhow::Result<Self> {
        let clients = addresses
            .iter()
            .map(|address| {
                let endpoint = tonic::transport::Endpoint::from_shared(address.clone())?
                    .connect_timeout(Duration::from_secs(2))
                    .timeout(CALL_TIMEOUT);
                Ok(Client::from_channel(endpoint.connect_lazy()))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        anyhow::ensure!(!clients.is_empty(), "no converge process");
        Ok(Self {
            clients: Arc::new(clients),
            next: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The next client in turn.
    pub fn pick(&self) -> Client {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.clients.len();
        self.clients[i].clone()
    }
}

/// Whether a failed call may succeed when tried again (on another process,
/// or after the fault passed).
fn retryable(code: Code) -> bool {
    !matches!(
        code,
        Code::InvalidArgument
            | Code::NotFound
            | Code::AlreadyExists
            | Code::FailedPrecondition
            | Code::PermissionDenied
            | Code::Unauthenticated
            | Code::OutOfRange
            | Code::Unimplemented
    )
}

/// Whether an INTERNAL answer came from a broken connection rather than
/// from the server (tonic reports some transport failures as INTERNAL).
fn transport_failure(status: &Status) -> bool {
    let message = status.message().to_ascii_lowercase();
    ["transport", "h2 protocol", "connection", "broken pipe", "stream"]
        .iter()
        .any(|m| message.contains(m))
}

/// Calls `call` on the endpoints in turn until it answers, fails with a
/// code no retry changes, or [`PERSIST_FOR`] passes (then `None`).
async fn persist<T, F, Fut>(endpoints: &Endpoints, ledger: &SharedLedger, mut call: F) -> Option<Result<T, Status>>
where
    F: FnMut(Client) -> Fut,
    Fut: Future<Output = Result<tonic::Response<T>, Status>>,
{
    let deadline = tokio::time::Instant::now() + PERSIST_FOR;
    loop {
        let answer = tokio::time::timeout(CALL_TIMEOUT, call(endpoints.pick())).await;
        let status = match answer {
            Ok(Ok(response)) => return Some(Ok(response.into_inner())),
            Ok(Err(status)) => status,
            Err(_) => Status::deadline_exceeded("the soak's call timeout"),
        };
        {
            let mut ledger = ledger.lock();
            *ledger.refused.entry(format!("{:?}", status.code())).or_default() += 1;
            if status.code() == Code::Internal && !transport_failure(&status) && ledger.unexplained.len() < 20 {
                ledger.unexplained.push(format!("INTERNAL: {}", status.message()));
            }
        }
        if !retryable(status.code()) {
            return Some(Err(status));
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The spec of a leaf: its value (also the message of its applied event),
/// a short handler sleep and teardown, now and then a transient failure
/// first, and a terminal failure when `failed`.
fn leaf_spec(value: &str, failed: bool, rng: &mut StdRng) -> Value {
    let mut spec = json!({
        "value": value,
        "sleepMs": rng.random_range(0..300),
        "teardownMs": rng.random_range(0..150),
        "events": [{"reason": applied_reason(value), "message": value}],
    });
    if rng.random_bool(0.15) {
        spec["failTransient"] = json!(1);
    }
    if failed {
        spec["failTerminal"] = json!(true);
    }
    spec
}

fn apply_request(kind: &str, name: &str, spec: Value) -> ApplyResourceRequest {
    ApplyResourceRequest {
        kind: kind.into(),
        kind_version: 1,
        name: name.into(),
        spec: Some(object(spec)),
        request_id: uuid::Uuid::new_v4().to_string(),
        ..Default::default()
    }
}

fn delete_request(kind: &str, name: &str) -> DeleteResourceRequest {
    DeleteResourceRequest {
        kind: kind.into(),
        name: name.into(),
        request_id: uuid::Uuid::new_v4().to_string(),
        ..Default::default()
    }
}

fn acknowledge(ledger: &SharedLedger, what: &'static str) {
    *ledger.lock().acknowledged.entry(what).or_default() += 1;
}

/// Applies `request` until acknowledged; its generation, or `None`.
async fn apply(endpoints: &Endpoints, ledger: &SharedLedger, request: ApplyResourceRequest) -> Option<i64> {
    let answer = persist(endpoints, ledger, |client| {
        let request = request.clone();
        async move { client.resources().apply_resource(request).await }
    })
    .await?;
    match answer {
        Ok(response) => response.resource.map(|r| r.generation),
        Err(status) => {
            let mut ledger = ledger.lock();
            if ledger.unexplained.len() < 20 {
                ledger
                    .unexplained
                    .push(format!("apply {} refused: {status:?}", request.name));
            }
            None
        }
    }
}

/// Deletes until acknowledged (NOT_FOUND counts: the resource is gone).
async fn delete(endpoints: &Endpoints, ledger: &SharedLedger, request: DeleteResourceRequest) -> bool {
    let answer = persist(endpoints, ledger, |client| {
        let request = request.clone();
        async move { client.resources().delete_resource(request).await }
    })
    .await;
    matches!(answer, Some(Ok(_))) || matches!(answer, Some(Err(ref s)) if s.code() == Code::NotFound)
}

/// Writer `w`: creates, changes and deletes its own `leaf-<w>-<n>`
/// resources, one call at a time, until `stop`.
pub async fn leaf_writer(w: usize, seed: u64, endpoints: Endpoints, ledger: SharedLedger, stop: watch::Receiver<bool>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut next = 0usize;
    let mut version = 0usize;
    while !*stop.borrow() {
        let live: Vec<(String, bool)> = ledger
            .lock()
            .leaves
            .iter()
            .filter(|(name, leaf)| leaf.life == Life::Live && name.starts_with(&format!("leaf-{w}-")))
            .map(|(name, leaf)| (name.clone(), leaf.expect_failed))
            .collect();
        let roll: f64 = rng.random();
        version += 1;
        if live.len() < 3 || roll < 0.4 {
            let name = format!("leaf-{w}-{next}");
            next += 1;
            let failed = rng.random_bool(0.05);
            let value = format!("{name}-v{version}");
            let spec = leaf_spec(&value, failed, &mut rng);
            set_leaf(&ledger, &name, &value, 0, failed, Life::Uncertain);
            if let Some(generation) = apply(&endpoints, &ledger, apply_request("conf-leaf", &name, spec)).await {
                set_leaf(&ledger, &name, &value, generation, failed, Life::Live);
                acknowledge(&ledger, "leaf-created");
            }
        } else if roll < 0.8 {
            let changeable: Vec<&String> = live.iter().filter(|(_, f)| !f).map(|(n, _)| n).collect();
            if let Some(&name) = changeable.get(rng.random_range(0..changeable.len().max(1))) {
                let value = format!("{name}-v{version}");
                let spec = leaf_spec(&value, false, &mut rng);
                set_leaf(&ledger, name, &value, 0, false, Life::Uncertain);
                if let Some(generation) = apply(&endpoints, &ledger, apply_request("conf-leaf", name, spec)).await {
                    set_leaf(&ledger, name, &value, generation, false, Life::Live);
                    acknowledge(&ledger, "leaf-changed");
                }
            }
        } else if let Some((name, failed)) = live.get(rng.random_range(0..live.len())) {
            let value = ledger
                .lock()
                .leaves
                .get(name)
                .map(|l| l.value.clone())
                .unwrap_or_default();
            set_leaf(&ledger, name, &value, 0, *failed, Life::Uncertain);
            if delete(&endpoints, &ledger, delete_request("conf-leaf", name)).await {
                set_leaf(&ledger, name, &value, 0, *failed, Life::Deleted);
                acknowledge(&ledger, "leaf-deleted");
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..400))).await;
    }
}

fn set_leaf(ledger: &SharedLedger, name: &str, value: &str, generation: i64, expect_failed: bool, life: Life) {
    ledger.lock().leaves.insert(
        name.to_owned(),
        Leaf {
            value: value.to_owned(),
            generation,
            expect_failed,
            life,
        },
    );
}

/// Creates `tree-<n>` composites (3-5 children in a dependency chain) and
/// deletes the oldest beyond [`TREES`], until `stop`.
pub async fn tree_writer(seed: u64, endpoints: Endpoints, ledger: SharedLedger, stop: watch::Receiver<bool>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut next = 0usize;
    while !*stop.borrow() {
        let live: Vec<String> = ledger
            .lock()
            .trees
            .iter()
            .filter(|(_, t)| t.life == Life::Live)
            .map(|(n, _)| n.clone())
            .collect();
        if live.len() >= TREES {
            // Names sort by number within the same width; take the lowest.
            if let Some(oldest) = live
                .iter()
                .min_by_key(|n| n.trim_start_matches("tree-").parse::<usize>().unwrap_or(0))
            {
                set_tree_life(&ledger, oldest, Life::Uncertain);
                if delete(&endpoints, &ledger, delete_request("conf-composite", oldest)).await {
                    set_tree_life(&ledger, oldest, Life::Deleted);
                    acknowledge(&ledger, "tree-deleted");
                }
            }
        } else {
            let name = format!("tree-{next}");
            next += 1;
            let children: Vec<String> = (0..rng.random_range(3..=5))
                .map(|i| format!("t{}-c{i}", next - 1))
                .collect();
            let specs: Vec<Value> = children
                .iter()
                .enumerate()
                .map(|(i, child)| {
                    let mut entry = json!({
                        "name": child,
                        "spec": {"value": child, "sleepMs": rng.random_range(0..200), "teardownMs": rng.random_range(0..100)},
                    });
                    if i > 0 {
                        entry["dependsOn"] = json!([children[i - 1]]);
                    }
                    entry
                })
                .collect();
            ledger.lock().trees.insert(
                name.clone(),
                Tree {
                    children: children.clone(),
                    life: Life::Uncertain,
                },
            );
            let request = apply_request("conf-composite", &name, json!({"children": specs}));
            if apply(&endpoints, &ledger, request).await.is_some() {
                set_tree_life(&ledger, &name, Life::Live);
                acknowledge(&ledger, "tree-created");
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(1500..4000))).await;
    }
}

fn set_tree_life(ledger: &SharedLedger, name: &str, life: Life) {
    if let Some(tree) = ledger.lock().trees.get_mut(name) {
        tree.life = life;
    }
}

/// Invokes [`VERB`] on the `soak-op-<n>` resources now and then, until `stop`.
pub async fn operator(seed: u64, endpoints: Endpoints, ledger: SharedLedger, stop: watch::Receiver<bool>) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !*stop.borrow() {
        let request = InvokeOperationRequest {
            kind: "soak-op".into(),
            name: format!("soak-op-{}", rng.random_range(0..OP_TARGETS)),
            verb: VERB.into(),
            request_id: uuid::Uuid::new_v4().to_string(),
            ..Default::default()
        };
        let answer = persist(&endpoints, &ledger, |client| {
            let request = request.clone();
            async move { client.operations().invoke_operation(request).await }
        })
        .await;
        if let Some(Ok(response)) = answer
            && let Some(operation) = response.operation
        {
            ledger.lock().operations.push(operation.uid);
            acknowledge(&ledger, "operation-invoked");
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(500..1500))).await;
    }
}

/// One message a watcher received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The resource's uid.
    pub uid: String,
    /// The message's position (`txid.seq`).
    pub position: (i64, i64),
    /// Whether it was a DELETED.
    pub deleted: bool,
}

/// What the watcher saw.
#[derive(Debug, Default)]
pub struct Watched {
    /// The position the watch started from (its first bookmark).
    pub start: Option<(i64, i64)>,
    /// Every change message, in order.
    pub seen: Vec<Seen>,
    /// Positions it resumed from, one per reconnection.
    pub resumes: Vec<String>,
    /// Resumptions the server refused (the position was no longer served).
    pub refused: Vec<String>,
    /// The last position received (a change or a bookmark).
    pub last: Option<(i64, i64)>,
}

/// The watcher's record, shared with the checks.
#[derive(Debug, Clone, Default)]
pub struct SharedWatched(Arc<Mutex<Watched>>);

impl SharedWatched {
    /// Locks it.
    pub fn lock(&self) -> MutexGuard<'_, Watched> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn position(text: &str) -> Option<(i64, i64)> {
    let (txid, seq) = text.split_once('.')?;
    Some((txid.parse().ok()?, seq.parse().ok()?))
}

/// Watches every resource from now, resuming from its last position on
/// another process after any failure, until `stop`.
pub async fn watcher(endpoints: Endpoints, watched: SharedWatched, mut stop: watch::Receiver<bool>) {
    let mut resume: Option<String> = None;
    while !*stop.borrow() {
        let request = WatchResourcesRequest {
            resource_version: resume.clone().unwrap_or_default(),
            send_initial_events: resume.is_none().then_some(false),
            allow_bookmarks: true,
            ..Default::default()
        };
        if let Some(from) = &resume {
            watched.lock().resumes.push(from.clone());
        }
        let opened = tokio::time::timeout(CALL_TIMEOUT, endpoints.pick().resources().watch_resources(request)).await;
        let mut stream = match opened {
            Ok(Ok(stream)) => stream.into_inner(),
            Ok(Err(status)) => {
                if !retryable(status.code()) {
                    watched
                        .lock()
                        .refused
                        .push(format!("{:?}: {}", status.code(), status.message()));
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            }
            Err(_) => continue,
        };
        loop {
            let message = tokio::select! {
                message = stream.message() => message,
                _ = stop.changed() => return,
            };
            let Ok(Some(message)) = message else {
                break;
            };
            let Some(at) = position(&message.resource_version) else {
                continue;
            };
            let mut record = watched.lock();
            if record.start.is_none() {
                record.start = Some(at);
            }
            record.last = Some(at);
            resume = Some(message.resource_version.clone());
            let kind = WatchEventType::try_from(message.r#type).unwrap_or(WatchEventType::Unspecified);
            if kind != WatchEventType::Bookmark
                && let Some(resource) = message.resource
            {
                record.seen.push(Seen {
                    uid: resource.uid,
                    position: at,
                    deleted: kind == WatchEventType::Deleted,
                });
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
