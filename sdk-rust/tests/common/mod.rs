//! A scripted in-process broker and a controllable provider for the worker
//! runtime tests. The broker records everything it receives and sends what
//! the test tells it to; tests wait on recorded events, never on sleeps.

// Test support: panicking on a broken harness is the right failure mode.
#![allow(
    dead_code,
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::large_enum_variant
)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use converge_proto::worker_v1::work_stream_request::Payload as Up;
use converge_proto::worker_v1::work_stream_response::Payload as Down;
use converge_proto::worker_v1::worker_service_server::{WorkerService, WorkerServiceServer};
use converge_proto::worker_v1::{
    GetProviderConfigRequest, GetProviderConfigResponse, LeaseRef, ProviderConfigEntry, ProviderConfigUpdate,
    ResultAck, Stage, StageComplete, StageTask, WorkStreamRequest, WorkStreamResponse,
};
use converge_sdk::worker::convert::json_to_struct;
use converge_sdk::worker::{
    Condition, ConditionStatus, HandlerError, KindVersion, Outcome, Provider, ProviderConfig, ReactionRequest, Worker,
    WorkerBuilder, async_trait,
};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_stream::Stream;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// How long any wait in a test may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(15);

/// Something the broker observed.
#[derive(Debug, Clone)]
pub enum Event {
    /// A WorkStream call arrived (stream ids count from 0).
    Opened(usize),
    /// A WorkStream call was refused (reject mode).
    Rejected,
    /// A message on a stream.
    Message(usize, Up),
    /// The worker half-closed or the stream broke.
    Closed(usize),
    /// A GetProviderConfig call.
    ConfigRequested(Vec<KindVersion>),
}

#[derive(Default)]
struct Inner {
    events: Mutex<Vec<Event>>,
    /// Senders of the response side of each stream, by id; removed when the
    /// stream ends.
    streams: Mutex<HashMap<usize, mpsc::Sender<Result<WorkStreamResponse, Status>>>>,
    next_stream: AtomicUsize,
    reject: AtomicBool,
    /// Acknowledge no completion (a broker that cannot write them).
    withhold_acks: AtomicBool,
    configs: Mutex<Vec<ProviderConfigEntry>>,
    changed: Option<watch::Sender<usize>>,
}

impl Inner {
    fn record(&self, event: Event) {
        let count = {
            let mut events = self.events.lock().unwrap();
            events.push(event);
            events.len()
        };
        if let Some(changed) = &self.changed {
            changed.send_replace(count);
        }
    }
}

#[derive(Clone)]
struct Service(Arc<Inner>);

type ResponseStream = Pin<Box<dyn Stream<Item = Result<WorkStreamResponse, Status>> + Send>>;

#[tonic::async_trait]
impl WorkerService for Service {
    type WorkStreamStream = ResponseStream;

    async fn work_stream(
        &self,
        request: Request<Streaming<WorkStreamRequest>>,
    ) -> Result<Response<Self::WorkStreamStream>, Status> {
        if self.0.reject.load(Ordering::SeqCst) {
            self.0.record(Event::Rejected);
            return Err(Status::unavailable("scripted rejection"));
        }
        let id = self.0.next_stream.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel(1024);
        self.0.streams.lock().unwrap().insert(id, tx);
        self.0.record(Event::Opened(id));
        let inner = Arc::clone(&self.0);
        let mut inbound = request.into_inner();
        tokio::spawn(async move {
            while let Some(Ok(message)) = inbound.next().await {
                if let Some(payload) = message.payload {
                    // Acknowledged at once, as a broker does once written.
                    if let Up::Complete(complete) = &payload
                        && !inner.withhold_acks.load(Ordering::SeqCst)
                    {
                        let ack = WorkStreamResponse {
                            payload: Some(Down::ResultAck(ResultAck {
                                leases: vec![LeaseRef {
                                    lease_token: complete.lease_token.clone(),
                                    claim_epoch: complete.claim_epoch,
                                }],
                            })),
                        };
                        let sender = inner.streams.lock().unwrap().get(&id).cloned();
                        if let Some(sender) = sender {
                            let _ = sender.send(Ok(ack)).await;
                        }
                    }
                    inner.record(Event::Message(id, payload));
                }
            }
            // Ending the response side tells the worker its half-close was
            // seen (what a real broker does).
            inner.streams.lock().unwrap().remove(&id);
            inner.record(Event::Closed(id));
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn get_provider_config(
        &self,
        request: Request<GetProviderConfigRequest>,
    ) -> Result<Response<GetProviderConfigResponse>, Status> {
        let kinds = request
            .into_inner()
            .kinds
            .into_iter()
            .map(|k| KindVersion::new(k.kind, k.kind_version))
            .collect();
        self.0.record(Event::ConfigRequested(kinds));
        let entries = self.0.configs.lock().unwrap().clone();
        Ok(Response::new(GetProviderConfigResponse { entries }))
    }
}

/// The scripted broker.
pub struct Broker {
    inner: Arc<Inner>,
    changed: watch::Receiver<usize>,
    pub addr: SocketAddr,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Broker {
    pub async fn start() -> Self {
        let (changed_tx, changed) = watch::channel(0);
        let inner = Arc::new(Inner {
            changed: Some(changed_tx),
            ..Default::default()
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let service = WorkerServiceServer::new(Service(Arc::clone(&inner)));
        let server = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await
                .unwrap();
        });
        Self {
            inner,
            changed,
            addr,
            server,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A worker builder aimed at this broker with fast test timings.
    pub fn worker(&self) -> WorkerBuilder {
        Worker::builder()
            .endpoint(self.url())
            .heartbeat_interval(Duration::from_millis(100))
            .readiness_poll_interval(Duration::from_millis(50))
            .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200))
            .drain_timeout(Duration::from_secs(10))
    }

    pub fn events(&self) -> Vec<Event> {
        self.inner.events.lock().unwrap().clone()
    }

    /// Waits until `check` returns `Some` for the recorded history.
    pub async fn wait_for<T>(&self, what: &str, mut check: impl FnMut(&History) -> Option<T>) -> T {
        let mut changed = self.changed.clone();
        let wait = async {
            loop {
                let history = History(self.events());
                if let Some(found) = check(&history) {
                    return found;
                }
                changed.changed().await.unwrap();
            }
        };
        match tokio::time::timeout(WAIT, wait).await {
            Ok(found) => found,
            Err(_) => panic!("timed out waiting for {what}; events: {:#?}", self.events()),
        }
    }

    /// Waits for the completion of `lease` (on any stream).
    pub async fn completion(&self, lease: &str) -> StageComplete {
        self.wait_for(&format!("completion of {lease}"), |h| {
            h.completes()
                .into_iter()
                .find(|(_, _, c)| c.lease_token == lease)
                .map(|(_, _, c)| c)
        })
        .await
    }

    /// Waits for stream `id` to be open.
    pub async fn stream_opened(&self, id: usize) {
        self.wait_for(&format!("stream {id}"), |h| {
            h.0.iter()
                .any(|e| matches!(e, Event::Opened(i) if *i == id))
                .then_some(())
        })
        .await
    }

    fn sender(&self, id: usize) -> mpsc::Sender<Result<WorkStreamResponse, Status>> {
        self.inner
            .streams
            .lock()
            .unwrap()
            .get(&id)
            .cloned()
            .unwrap_or_else(|| panic!("stream {id} is not open"))
    }

    /// Sends a task on stream `id`.
    pub async fn send_task(&self, id: usize, task: StageTask) {
        self.sender(id)
            .send(Ok(WorkStreamResponse {
                payload: Some(Down::Task(task)),
            }))
            .await
            .unwrap();
    }

    /// Pushes a config update on stream `id`.
    pub async fn push_config(&self, id: usize, update: ProviderConfigUpdate) {
        self.sender(id)
            .send(Ok(WorkStreamResponse {
                payload: Some(Down::ProviderConfigUpdate(update)),
            }))
            .await
            .unwrap();
    }

    /// Breaks stream `id` with an error status, as a failing broker would.
    pub async fn break_stream(&self, id: usize) {
        let sender = self.inner.streams.lock().unwrap().remove(&id).unwrap();
        sender
            .send(Err(Status::unavailable("scripted stream drop")))
            .await
            .unwrap();
    }

    /// Acknowledge no completion from now on (true), or every one (false).
    pub fn withhold_acks(&self, withhold: bool) {
        self.inner.withhold_acks.store(withhold, Ordering::SeqCst);
    }

    /// Refuse (true) or accept (false) new streams.
    pub fn reject_streams(&self, reject: bool) {
        self.inner.reject.store(reject, Ordering::SeqCst);
    }

    pub fn set_configs(&self, entries: Vec<ProviderConfigEntry>) {
        *self.inner.configs.lock().unwrap() = entries;
    }
}

/// A view over the recorded events.
pub struct History(pub Vec<Event>);

impl History {
    /// (event index, stream id, message) of every message.
    pub fn messages(&self) -> Vec<(usize, usize, Up)> {
        self.0
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e {
                Event::Message(id, m) => Some((i, *id, m.clone())),
                _ => None,
            })
            .collect()
    }

    /// Messages of one stream in order.
    pub fn stream(&self, id: usize) -> Vec<Up> {
        self.messages()
            .into_iter()
            .filter(|(_, s, _)| *s == id)
            .map(|(_, _, m)| m)
            .collect()
    }

    pub fn completes(&self) -> Vec<(usize, usize, StageComplete)> {
        self.messages()
            .into_iter()
            .filter_map(|(i, s, m)| match m {
                Up::Complete(c) => Some((i, s, c)),
                _ => None,
            })
            .collect()
    }

    /// (event index, sorted lease tokens) of every heartbeat.
    pub fn heartbeats(&self) -> Vec<(usize, Vec<String>)> {
        self.messages()
            .into_iter()
            .filter_map(|(i, _, m)| match m {
                Up::Heartbeat(h) => {
                    let mut leases: Vec<String> = h.leases.into_iter().map(|l| l.lease_token).collect();
                    leases.sort();
                    Some((i, leases))
                }
                _ => None,
            })
            .collect()
    }

    pub fn interests(&self) -> Vec<(usize, String, i32, bool)> {
        self.messages()
            .into_iter()
            .filter_map(|(i, _, m)| match m {
                Up::Interest(x) => Some((i, x.kind, x.kind_version, x.ready)),
                _ => None,
            })
            .collect()
    }

    pub fn has_closed(&self, id: usize) -> bool {
        self.0.iter().any(|e| matches!(e, Event::Closed(i) if *i == id))
    }

    pub fn config_requests(&self) -> usize {
        self.0.iter().filter(|e| matches!(e, Event::ConfigRequested(_))).count()
    }
}

/// A WORK task for `kind` with the given lease and resource spec.
pub fn task(lease: &str, kind: &str, version: i32, spec: Value) -> StageTask {
    StageTask {
        stage: Stage::Work as i32,
        kind: kind.to_owned(),
        kind_version: version,
        resource: Some(converge_proto::worker_v1::Resource {
            uid: format!("uid-{lease}"),
            kind: kind.to_owned(),
            kind_version: version,
            name: format!("res-{lease}"),
            spec: Some(json_to_struct(spec, "spec").unwrap()),
            generation: 1,
            ..Default::default()
        }),
        generation: 1,
        reaction: "work".to_owned(),
        trigger: converge_proto::worker_v1::Trigger::SpecChange as i32,
        lease_token: lease.to_owned(),
        claim_epoch: 1,
        manifest_version: 42,
        attempt: 1,
        ..Default::default()
    }
}

/// A provider steered by the resource spec:
/// `{"mode": "ok" | "block" | "panic" | "terminal" | "transient" | "io_error" | "hang", "sleep_ms": N}`.
/// "block" waits on the gate named after the resource until released.
pub struct TestProvider {
    pub kind: KindVersion,
    pub ready: AtomicBool,
    pub running: AtomicUsize,
    pub max_running: AtomicUsize,
    pub started: Mutex<Vec<String>>,
    pub configs: Mutex<Vec<Option<ProviderConfig>>>,
    pub requests: Mutex<Vec<ReactionRequest>>,
    gates: Mutex<BTreeMap<String, Arc<Semaphore>>>,
    changed: watch::Sender<usize>,
}

impl TestProvider {
    pub fn new(kind: &str, version: i32) -> Arc<Self> {
        Arc::new(Self {
            kind: KindVersion::new(kind, version),
            ready: AtomicBool::new(true),
            running: AtomicUsize::new(0),
            max_running: AtomicUsize::new(0),
            started: Mutex::new(Vec::new()),
            configs: Mutex::new(Vec::new()),
            requests: Mutex::new(Vec::new()),
            gates: Mutex::new(BTreeMap::new()),
            changed: watch::channel(0).0,
        })
    }

    fn gate(&self, name: &str) -> Arc<Semaphore> {
        Arc::clone(
            self.gates
                .lock()
                .unwrap()
                .entry(name.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(0))),
        )
    }

    /// Lets the blocked handler of resource `name` finish.
    pub fn release(&self, name: &str) {
        self.gate(name).add_permits(1);
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// Waits until `check` holds for the provider.
    pub async fn wait_until(&self, what: &str, mut check: impl FnMut(&Self) -> bool) {
        let mut changed = self.changed.subscribe();
        let wait = async {
            while !check(self) {
                changed.changed().await.unwrap();
            }
        };
        if tokio::time::timeout(WAIT, wait).await.is_err() {
            panic!("timed out waiting for {what}");
        }
    }

    pub fn started(&self) -> Vec<String> {
        self.started.lock().unwrap().clone()
    }
}

struct Running<'a>(&'a TestProvider);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
        self.0.bump();
    }
}

/// Lets tests register an `Arc<TestProvider>` and keep a handle on it.
pub struct Shared(pub Arc<TestProvider>);

#[async_trait]
impl Provider for Shared {
    fn kind(&self) -> KindVersion {
        self.0.kind.clone()
    }

    async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
        let p = &self.0;
        let now = p.running.fetch_add(1, Ordering::SeqCst) + 1;
        p.max_running.fetch_max(now, Ordering::SeqCst);
        let _running = Running(p);
        let name = request.resource.name.clone();
        p.requests.lock().unwrap().push(request.clone());
        p.started.lock().unwrap().push(name.clone());
        p.bump();
        let spec = &request.resource.spec;
        if let Some(ms) = spec.get("sleep_ms").and_then(Value::as_u64) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        match spec.get("mode").and_then(Value::as_str).unwrap_or("ok") {
            "block" => {
                p.gate(&name).acquire().await.unwrap().forget();
            }
            "hang" => std::future::pending::<()>().await,
            "panic" => panic!("scripted panic in {name}"),
            "terminal" => return Err(HandlerError::terminal("scripted terminal").with_reason("Scripted")),
            "transient" => return Err(HandlerError::transient("scripted transient")),
            "rich" => {
                return Ok(Outcome::new()
                    .with_status(json!({"handled": name}))
                    .with_condition(Condition::new("Ready", ConditionStatus::True).with_reason("Done"))
                    .with_healthy(false)
                    .with_requeue_after(Duration::from_secs(2))
                    .with_operation_output(json!({"out": 1})));
            }
            "io_error" => {
                std::fs::read("/definitely/not/here")?;
            }
            _ => {}
        }
        Ok(Outcome::new().with_status(json!({"handled": name, "generation": request.generation})))
    }

    fn ready(&self) -> bool {
        self.0.ready.load(Ordering::SeqCst)
    }

    fn on_config(&self, config: Option<ProviderConfig>) {
        self.0.configs.lock().unwrap().push(config);
        self.0.bump();
    }
}
