//! The worker runtime: serve `(kind, kind_version)` pairs for a converge
//! broker over `converge.worker.v1.WorkerService`.
//!
//! Implement a [`Provider`] per pair (or build one from a table of
//! handlers with [`Reactions`]), register them on a [`Worker`] and run it:
//!
//! ```no_run
//! use converge_sdk::worker::{HandlerError, KindVersion, Outcome, Provider, ReactionRequest, Worker};
//!
//! struct Noop;
//!
//! #[async_trait::async_trait]
//! impl Provider for Noop {
//!     fn kind(&self) -> KindVersion {
//!         KindVersion::new("noop", 1)
//!     }
//!     async fn handle(&self, request: ReactionRequest) -> Result<Outcome, HandlerError> {
//!         Ok(Outcome::new().with_status(serde_json::json!({"observed_generation": request.generation})))
//!     }
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let worker = Worker::builder().endpoint("http://127.0.0.1:50051").provider(Noop).build()?;
//! worker.run(async { tokio::signal::ctrl_c().await.ok(); }).await?;
//! # Ok(())
//! # }
//! ```
//!
//! What the runtime does:
//! - primes the default provider configs with `GetProviderConfig` (retrying
//!   with backoff), refreshes them periodically and on every (re)connect,
//!   applies `ProviderConfigUpdate` pushes, and calls
//!   [`Provider::on_config`] on every change;
//! - opens `WorkStream` with `Subscribe` first (served pairs, `max_inflight`
//!   = `max_parallel`, and the tasks it still runs or holds results for),
//!   followed by `Interest{ready: false}` for every unready provider;
//! - keeps every result until the broker acknowledges it (`ResultAck`,
//!   written or stale), and redelivers unsent and unacknowledged results
//!   first on every new stream;
//! - runs at most `max_parallel` handlers at once, each bounded by its task
//!   deadline (expiry = transient "deadline exceeded"), with panics turned
//!   into transient failures; handlers run on the process, so a stream drop
//!   does not cancel them, and their results are buffered (bounded; the
//!   oldest is discarded on overflow) for the next stream;
//! - answers each task with one `StageComplete` echoing its fence;
//! - sends a `WorkHeartbeat` every interval listing the leases of accepted
//!   tasks whose handlers have not finished (including any waiting for a
//!   slot: they are the worker's responsibility until answered) and of
//!   results not yet acknowledged;
//! - polls [`Provider::ready`] and sends `Interest` on every change; tasks
//!   for an unknown or unready pair fail transiently. A provider whose
//!   [`Provider::requires_default_config`] is true counts as unready until
//!   its kind's default config has arrived (readiness is re-announced the
//!   moment a config change lands, not at the next poll);
//! - hands each task the cached default and the resource's override;
//!   [`ReactionRequest::effective_config`] merges them (the override wins
//!   per key) and [`ReactionRequest::effective_bundle`] picks the bundle;
//! - reconnects with exponential backoff and jitter, resetting the backoff
//!   only after a healthy session (open for the healthy threshold, 10 s by
//!   default, or one that received a task);
//! - on shutdown announces every pair unready, fails tasks that still arrive
//!   (transient), waits up to the drain timeout for in-flight handlers,
//!   sends their results (reconnecting if needed), closes the stream and
//!   returns.

mod backoff;
mod buffer;
mod config;
pub mod convert;
mod outcome;
mod provider;
mod reactions;
mod request;
mod runtime;
mod session;
mod state;
mod task;
mod types;

pub use config::{
    DEFAULT_BACKOFF_BASE, DEFAULT_BACKOFF_MAX, DEFAULT_CONFIG_REFRESH_INTERVAL, DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_HEALTHY_SESSION, DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_MAX_PARALLEL, DEFAULT_READINESS_POLL_INTERVAL,
    DEFAULT_RESULT_BUFFER_CAPACITY, DEFAULT_RPC_TIMEOUT, WorkerBuilder,
};
pub use outcome::{DEADLINE_EXCEEDED_REASON, HandlerError, Outcome, UNKNOWN_REACTION_REASON};
pub use provider::Provider;
pub use reactions::{ReactionHandler, Reactions};
pub use request::{ReactionRequest, merge_json};
pub use runtime::{Worker, WorkerError, WorkerHandle, WorkerStats};
pub use types::{
    ChildSpec, ComposeInput, Condition, ConditionStatus, DeleteInput, DepEdge, Event, EventType, KindVersion,
    OperateInput, Operation, ParseKindVersionError, ProviderConfig, ProviderConfigSpec, ReactInput, Resource,
    ResourceRef, RollupInput, Stage, StageInput, Transition, Trigger, ValueFlow, WorkInput,
};

/// Re-exported so providers can implement [`Provider`] without depending on
/// `async-trait` themselves: `#[converge_sdk::worker::async_trait]`.
pub use async_trait::async_trait;
