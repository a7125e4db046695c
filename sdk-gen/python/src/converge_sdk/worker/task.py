"""Accepting and executing one task: provider lookup, readiness, bounded
concurrency, the deadline and exception isolation."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Mapping, Optional, Set

from opentelemetry import context as otel_context
from opentelemetry.trace import Status, StatusCode

from converge_sdk.gen.converge.worker.v1 import worker_pb2 as pb
from converge_sdk.worker.convert import DecodeError, Fence, request_from_task, task_deadline
from converge_sdk.worker.outcome import DEADLINE_EXCEEDED_REASON, HandlerError, Outcome, TerminalError, TransientError
from converge_sdk.worker.provider import Provider
from converge_sdk.worker.request import ReactionRequest
from converge_sdk.worker.state import SharedState
from converge_sdk.worker.tracing import start_handler_span
from converge_sdk.worker.types import KindVersion

log = logging.getLogger("converge_sdk.worker")

#: Message of the transient failure a task gets when its deadline passes.
DEADLINE_EXCEEDED_MESSAGE = "deadline exceeded"

# How long a handler cancelled at its deadline gets to unwind (run its
# finally blocks, write its last log line) before the runtime reports the
# failure without it. A handler that swallows the cancellation keeps its slot
# until it really returns, so bounded concurrency still holds.
_CANCEL_GRACE = 1.0


def accept(state: SharedState, tasks: Set["asyncio.Task[None]"], task: pb.StageTask, draining: bool) -> None:
    """Takes a task off the stream.

    Tasks that cannot run (draining, unknown pair, provider not ready,
    undecodable) fail transiently at once so the broker retries them
    elsewhere or later; never terminally, since another worker or a later
    moment may succeed. The rest run as asyncio tasks held in ``tasks``,
    which belong to the run rather than to the stream, so a stream drop does
    not cancel them.
    """
    fence = Fence.of(task)
    kind = KindVersion(task.kind, task.kind_version)

    def reject(message: str) -> None:
        log.debug("task %s for %s rejected: %s", fence.lease_token, kind, message)
        state.finish(fence.failure(TransientError(message)))

    if draining:
        return reject("worker is shutting down")
    provider = state.providers.get(kind)
    if provider is None:
        return reject(f"this worker has no provider for kind {kind}")
    if not state.is_ready(kind, provider):
        return reject(f"provider for kind {kind} is not ready")
    # The budget counts from arrival, including any wait for a free slot.
    deadline = task_deadline(task, time.monotonic())
    if not state.begin(fence.lease_token, fence.claim_epoch):
        log.warning("duplicate delivery of task %s ignored", fence.lease_token)
        return None
    try:
        request = request_from_task(task, state.default_config(kind), deadline)
    except DecodeError as exc:
        state.finish(fence.failure(TransientError(f"cannot decode task: {exc}")))
        return None
    runner = asyncio.get_running_loop().create_task(
        _run(state, provider, request, fence, dict(task.trace_context)), name=f"converge-task-{fence.lease_token}"
    )
    tasks.add(runner)
    runner.add_done_callback(tasks.discard)
    return None


async def _run(
    state: SharedState, provider: Provider, request: ReactionRequest, fence: Fence, trace_context: Mapping[str, str]
) -> None:
    traced = start_handler_span(trace_context, request, fence.lease_token)
    # This coroutine is a task of its own, so the context attached here is
    # this task's; the handler's task, created inside, starts with a copy of
    # it and sees the span as current.
    token = otel_context.attach(traced[1]) if traced is not None else None
    try:
        outcome = await execute(state, provider, request)
    except HandlerError as error:
        log.debug(
            "task %s (%s %s) failed (%s): %s",
            fence.lease_token,
            request.kind,
            request.reaction,
            "terminal" if error.terminal else "transient",
            error.message,
        )
        if traced is not None:
            traced[0].set_status(Status(StatusCode.ERROR, error.message))
        state.finish(fence.failure(error))
        return
    finally:
        if traced is not None:
            traced[0].end()
        if token is not None:
            otel_context.detach(token)
    state.finish(fence.success(outcome))


async def execute(state: SharedState, provider: Provider, request: ReactionRequest) -> Outcome:
    """Runs the handler in a slot, bounded by the request's deadline. Every
    failure comes back as a :class:`HandlerError`: the handler's own, a
    transient one for any other exception, or a transient
    ``DeadlineExceeded``."""
    inner = asyncio.get_running_loop().create_task(_in_slot(state, provider, request))
    timeout = request.remaining()
    try:
        done, _ = await asyncio.wait({inner}, timeout=timeout)
    except asyncio.CancelledError:
        # The run itself is being torn down (drain gave up): take the handler
        # down with it, as a cancellation rather than a handler failure.
        request.cancel_event.set()
        inner.cancel()
        raise
    if inner in done:
        return inner.result()
    request.cancel_event.set()
    inner.cancel()
    await asyncio.wait({inner}, timeout=_CANCEL_GRACE)
    if not inner.done():
        log.warning("handler of task %s ignored its cancellation; reporting the deadline without it", request.reaction)
    raise TransientError(DEADLINE_EXCEEDED_MESSAGE, reason=DEADLINE_EXCEEDED_REASON)


async def _in_slot(state: SharedState, provider: Provider, request: ReactionRequest) -> Outcome:
    # The permit is held inside this task, so it is released only when the
    # handler has really stopped (returned, raised or unwound a cancel).
    async with state.slots:
        try:
            result = await provider.handle(request)
        except HandlerError:
            raise
        except asyncio.CancelledError:
            if request.cancel_event.is_set():
                raise
            # Not ours: the handler (or something it awaited) cancelled itself.
            raise TransientError("handler was cancelled") from None
        except Exception as exc:
            log.warning("handler of %s %s raised", request.kind, request.reaction, exc_info=True)
            raise TransientError(f"handler raised {type(exc).__name__}: {exc}") from exc
    return _as_outcome(result)


def _as_outcome(result: Optional[object]) -> Outcome:
    if result is None:
        return Outcome()
    if isinstance(result, Outcome):
        return result
    raise TerminalError(
        f"invalid outcome: the handler returned a {type(result).__name__}, not an Outcome", reason="InvalidOutcome"
    )
