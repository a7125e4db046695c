"""The worker runtime: serve ``(kind, kind_version)`` pairs for a converge
broker over ``converge.worker.v1.WorkerService``.

Register a provider per pair on a :class:`Worker` and run it::

    import asyncio
    import signal

    from converge_sdk.worker import KindVersion, Outcome, ReactionRequest, Reactions, Worker

    noop = Reactions(KindVersion("noop", 1))

    @noop.reaction("work")
    async def work(request: ReactionRequest) -> Outcome:
        return Outcome(status={"observedGeneration": request.generation})

    async def main() -> None:
        worker = Worker([noop], address="http://127.0.0.1:50051")
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.shutdown)
        await worker.run()

What the runtime does (the same as the Rust SDK's ``converge_sdk::worker``):

- primes the default provider configs with ``GetProviderConfig`` (retrying
  with backoff), refreshes them periodically and on every (re)connect,
  applies ``ProviderConfigUpdate`` pushes, and calls
  :meth:`Provider.on_config` on every change;
- opens ``WorkStream`` with ``Subscribe`` first (served pairs,
  ``max_inflight`` = ``max_parallel``, and the tasks it still runs or holds
  results for), followed by ``Interest{ready: false}`` for every unready
  provider;
- keeps every result it sent until the broker acknowledges it
  (``ResultAck``: written durably or found stale), and on every new stream
  lists the unacknowledged ones in ``Subscribe.resumed`` and sends them again
  first (the broker's fence makes a second copy harmless);
- runs at most ``max_parallel`` handlers at once, each bounded by its task
  deadline (expiry = transient failure with reason ``DeadlineExceeded``, the
  handler coroutine cancelled), with exceptions turned into transient
  failures of their task only; handlers belong to the process, so a stream
  drop does not cancel them, and their results are buffered (bounded; the
  oldest is discarded on overflow) for the next stream;
- answers each task with one ``StageComplete`` echoing its fence;
- sends a ``WorkHeartbeat`` every interval listing the leases of accepted
  tasks whose handlers have not finished (including any waiting for a slot)
  and of results not yet acknowledged;
- polls :meth:`Provider.ready` and sends ``Interest`` on every change; tasks
  for an unknown or unready pair fail transiently. A provider whose
  :meth:`Provider.requires_default_config` is true counts as unready until
  its kind's default config has arrived (re-announced the moment a config
  change lands);
- hands each task the cached default and the resource's override;
  :meth:`ReactionRequest.effective_config` deep-merges them (the override
  wins per key) and :meth:`ReactionRequest.effective_bundle` picks the
  bundle;
- reconnects with exponential backoff and jitter, resetting the backoff only
  after a healthy session (open for ``healthy_session``, 10 s by default, or
  one that received a task);
- on shutdown announces every pair unready, fails tasks that still arrive
  (transient), waits up to the drain timeout for in-flight handlers and for
  the broker to acknowledge every result, sends their results (reconnecting
  if needed), closes the stream and returns.
"""

from converge_sdk import _deprecated
from converge_sdk.worker.outcome import (
    DEADLINE_EXCEEDED_REASON,
    UNKNOWN_REACTION_REASON,
    HandlerError,
    Outcome,
    TerminalError,
    TransientError,
    UnknownReactionError,
)
from converge_sdk.worker.provider import Handler, HandlerResult, Provider, Reactions
from converge_sdk.worker.request import ReactionRequest, merge_json
from converge_sdk.worker.runtime import DrainIncompleteError, Worker
from converge_sdk.worker.settings import (
    DEFAULT_BACKOFF_BASE,
    DEFAULT_BACKOFF_MAX,
    DEFAULT_CONFIG_REFRESH_INTERVAL,
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_HEALTHY_SESSION,
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_MAX_PARALLEL,
    DEFAULT_READINESS_POLL_INTERVAL,
    DEFAULT_RESULT_BUFFER_CAPACITY,
    DEFAULT_RPC_TIMEOUT,
    TlsConfig,
    WorkerOptions,
)
from converge_sdk.worker.state import WorkerStats
from converge_sdk.worker.types import (
    ChildSpec,
    ComposeInput,
    Condition,
    ConditionStatus,
    DeleteInput,
    DepEdge,
    Event,
    EventType,
    JsonObject,
    KindVersion,
    OperateInput,
    Operation,
    ProviderConfig,
    ProviderConfigSpec,
    ReactInput,
    Resource,
    ResourceRef,
    RollupInput,
    Stage,
    StageInput,
    Transition,
    Trigger,
    ValueFlow,
    WorkInput,
)

__all__ = [
    "DEADLINE_EXCEEDED_REASON",
    "DEFAULT_BACKOFF_BASE",
    "DEFAULT_BACKOFF_MAX",
    "DEFAULT_CONFIG_REFRESH_INTERVAL",
    "DEFAULT_DRAIN_TIMEOUT",
    "DEFAULT_HEALTHY_SESSION",
    "DEFAULT_HEARTBEAT_INTERVAL",
    "DEFAULT_MAX_PARALLEL",
    "DEFAULT_READINESS_POLL_INTERVAL",
    "DEFAULT_RESULT_BUFFER_CAPACITY",
    "DEFAULT_RPC_TIMEOUT",
    "UNKNOWN_REACTION_REASON",
    "ChildSpec",
    "ComposeInput",
    "Condition",
    "ConditionStatus",
    "DeleteInput",
    "DepEdge",
    "DrainIncompleteError",
    "Event",
    "EventType",
    "Handler",
    "HandlerError",
    "HandlerResult",
    "JsonObject",
    "KindVersion",
    "OperateInput",
    "Operation",
    "Outcome",
    "Provider",
    "ProviderConfig",
    "ProviderConfigSpec",
    "ReactInput",
    "ReactionRequest",
    "Reactions",
    "Resource",
    "ResourceRef",
    "RollupInput",
    "Stage",
    "StageInput",
    "TerminalError",
    "TlsConfig",
    "TransientError",
    "Transition",
    "Trigger",
    "UnknownReactionError",
    "ValueFlow",
    "WorkInput",
    "Worker",
    "WorkerOptions",
    "WorkerStats",
    "merge_json",
]

# Names of 0.1, renamed so that every converge SDK uses the same ones
# (sdk-gen/README.md, "One naming table"); deprecated.
__getattr__ = _deprecated.aliases(
    __name__, {"DrainIncomplete": lambda: DrainIncompleteError, "WorkerSettings": lambda: WorkerOptions}
)
