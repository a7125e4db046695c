"""One ``WorkStream`` session: the Subscribe burst, redelivery, then tasks,
results and their acknowledgements, heartbeats, readiness and config pushes
until the stream ends or the drain completes.

grpc.aio cancels the whole call when a coroutine blocked in ``read()`` or
``write()`` is cancelled, so exactly one reader task and one writer task own
the call for the session's lifetime; everything else only queues messages
for the writer.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Union

import grpc

from converge_sdk.gen.converge.worker.v1 import worker_pb2 as pb
from converge_sdk.worker._wait import wait_event
from converge_sdk.worker.convert import kind_to_proto, provider_config
from converge_sdk.worker.task import accept
from converge_sdk.worker.types import KindVersion

if TYPE_CHECKING:
    from converge_sdk.worker.runtime import Run

log = logging.getLogger("converge_sdk.worker")


class SessionEnd(enum.Enum):
    """How a session ended."""

    #: The stream could not be opened.
    NOT_OPENED = "not_opened"
    #: An open stream broke or was ended by the broker, before it counted as
    #: healthy.
    LOST = "lost"
    #: As LOST, but the session was healthy (open long enough, or it received
    #: a task): the reconnect backoff starts over.
    LOST_HEALTHY = "lost_healthy"
    #: The worker closed the stream at the end of a drain.
    CLOSED = "closed"


class _Close:
    """The writer's sentinel: half-close the stream."""


_CLOSE = _Close()


class _Writer:
    """The only task that writes to the call, in queue order. A message that
    cannot be written ends the session; the completions among it and those
    still queued are already kept as unacknowledged (handed to the stream),
    so the next stream sends them again."""

    def __init__(self, call: Any, on_failure: Callable[[], None]) -> None:
        self._call = call
        self._on_failure = on_failure
        self._queue: "asyncio.Queue[Union[pb.WorkStreamRequest, _Close]]" = asyncio.Queue()
        self.failed = False
        self.task: Optional["asyncio.Task[None]"] = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name="converge-work-stream-writer")

    def send(self, message: pb.WorkStreamRequest) -> None:
        self._queue.put_nowait(message)

    def close(self) -> None:
        self._queue.put_nowait(_CLOSE)

    async def _run(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                if isinstance(item, _Close):
                    await self._call.done_writing()
                    return
                await self._call.write(item)
            except Exception as exc:  # AioRpcError, or UsageError/InternalError on a finished call
                log.debug("work stream write failed: %s", exc)
                self.failed = True
                self._on_failure()
                return


def _interest(kind: KindVersion, ready: bool) -> pb.WorkStreamRequest:
    log.debug("sending interest %s ready=%s", kind, ready)
    return pb.WorkStreamRequest(interest=pb.Interest(kind=kind.kind, kind_version=kind.version, ready=ready))


class Session:
    """The state of one stream. Create it and ``await run()`` once."""

    def __init__(self, run: "Run") -> None:
        self._run = run
        self._state = run.state
        self._settings = run.state.settings
        self._readiness: Dict[KindVersion, bool] = {}
        self._got_task = False
        self._opened_at: Optional[float] = None
        self._closing = False
        self._end: "asyncio.Future[SessionEnd]" = asyncio.get_running_loop().create_future()

    async def run(self) -> SessionEnd:
        state, run = self._state, self._run
        call = run.stub.WorkStream()
        writer = _Writer(call, self._lost)
        self._writer = writer

        # What the last stream did not acknowledge is sent again on this one
        # (and listed in Subscribe.resumed).
        state.requeue_unacknowledged()

        # The opening burst is queued before anything else, so Subscribe is
        # the first message and the Interest frames ride right behind it.
        subscribe = pb.Subscribe(
            kinds=[kind_to_proto(k) for k in state.providers],
            max_inflight=self._settings.max_parallel,
            resumed=state.resumed(),
            agent=self._settings.agent,
        )
        log.debug("opening work stream (%d resumed)", len(subscribe.resumed))
        writer.send(pb.WorkStreamRequest(subscribe=subscribe))
        for kind, provider in state.providers.items():
            # While draining every pair is announced unready: no new tasks.
            ready = not run.draining and state.is_ready(kind, provider)
            self._readiness[kind] = ready
            if not ready:
                writer.send(_interest(kind, False))
        writer.start()
        tasks: List["asyncio.Task[Any]"] = []
        try:
            if not await self._open(call):
                await self._abandon(call, writer, [])
                return SessionEnd.NOT_OPENED
            state.counters.sessions += 1
            log.info("work stream open (%d kinds)", len(state.providers))
            self._opened_at = time.monotonic()
            state.config_repull.set()

            # Redeliver what was computed while disconnected before anything
            # else.
            self._flush()
            loop = asyncio.get_running_loop()
            reader = loop.create_task(self._read(call), name="converge-work-stream-reader")
            helpers = [
                loop.create_task(coro)
                for coro in (self._heartbeats(), self._readiness_loop(), self._flusher(), self._drain_watch())
            ]
            tasks = [reader, *helpers]
            self._check_drained()
            end = await self._end
            for helper in helpers:
                helper.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            if end is SessionEnd.CLOSED:
                return await self._close(call, writer, reader)
            await self._abandon(call, writer, [reader])
            return end
        except asyncio.CancelledError:
            # The run itself is being cancelled: leave nothing behind.
            await asyncio.shield(self._abandon(call, writer, tasks))
            raise

    async def _open(self, call: Any) -> bool:
        """Waits until the broker accepted Subscribe (its response headers),
        the call failed, or shutdown was requested."""
        loop = asyncio.get_running_loop()
        opened = loop.create_task(call.initial_metadata())
        waiters = {opened}
        # Once draining, shutdown is no reason to stop: the drain needs the
        # stream to deliver its results.
        shutdown = None if self._run.draining else loop.create_task(self._run.shutdown_requested.wait())
        if shutdown is not None:
            waiters.add(shutdown)
        try:
            done, _ = await asyncio.wait(
                waiters, timeout=self._settings.rpc_timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            if shutdown is not None:
                shutdown.cancel()
        if opened not in done:
            opened.cancel()
            if shutdown is not None and shutdown in done:
                self._run.start_drain()
            else:
                log.warning("opening the work stream timed out")
            return False
        if opened.exception() is not None or call.done():
            code = await call.code() if call.done() else None
            details = await call.details() if call.done() else opened.exception()
            log.warning("cannot open work stream: %s %s", code, details)
            return False
        return True

    async def _abandon(self, call: Any, writer: _Writer, tasks: List["asyncio.Task[Any]"]) -> None:
        call.cancel()
        if writer.task is not None:
            tasks = [*tasks, writer.task]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _finish(self, end: SessionEnd) -> None:
        if not self._end.done():
            self._end.set_result(end)

    def _lost(self) -> None:
        opened_at = self._opened_at
        healthy = opened_at is not None and (
            self._got_task or time.monotonic() - opened_at >= self._settings.healthy_session
        )
        self._finish(SessionEnd.LOST_HEALTHY if healthy else SessionEnd.LOST)

    def _send(self, message: pb.WorkStreamRequest) -> None:
        if self._writer.failed:
            self._lost()
            return
        self._writer.send(message)

    def _flush(self) -> None:
        """Hands every buffered result to the writer, oldest first. A result
        handed to the writer is kept until the broker acknowledges it (and
        sent again on the next stream if this one breaks first)."""
        while not self._writer.failed:
            complete = self._state.pop_result()
            if complete is None:
                break
            self._writer.send(pb.WorkStreamRequest(complete=complete))
            self._state.sent(complete)
        if self._writer.failed:
            self._lost()

    def _check_drained(self) -> None:
        if self._run.draining and self._state.outstanding() == (0, 0):
            self._finish(SessionEnd.CLOSED)

    async def _read(self, call: Any) -> None:
        while True:
            try:
                message = await call.read()
            except grpc.aio.AioRpcError as exc:
                if not self._closing:
                    log.warning("work stream failed: %s %s", exc.code(), exc.details())
                    self._lost()
                return
            if message is grpc.aio.EOF:
                if not self._closing:
                    log.warning("broker ended the work stream")
                    self._lost()
                return
            if self._closing:
                # A task sent after the half-close cannot be answered; the
                # broker releases its lease when the stream ends.
                continue
            which = message.WhichOneof("payload")
            if which == "task":
                self._got_task = True
                accept(self._state, self._run.tasks, message.task, self._run.draining)
                self._check_drained()
            elif which == "provider_config_update":
                self._apply_update(message.provider_config_update)
            elif which == "result_ack":
                self._state.acknowledge(message.result_ack.leases)
                self._check_drained()

    def _apply_update(self, update: pb.ProviderConfigUpdate) -> None:
        kind = KindVersion(update.kind, update.kind_version)
        config = (
            None if update.deleted else provider_config(update.spec if update.HasField("spec") else None, update.data)
        )
        self._state.apply_pushed_config(kind, config)

    async def _heartbeats(self) -> None:
        interval = self._settings.heartbeat_interval
        next_at = time.monotonic() + interval
        while True:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            self._send(pb.WorkStreamRequest(heartbeat=pb.WorkHeartbeat(leases=self._state.attested_leases())))
            # A late tick is not made up for: the next one comes a full
            # interval later.
            next_at = max(next_at + interval, time.monotonic())

    async def _readiness_loop(self) -> None:
        changed = self._state.configs_changed
        while True:
            await wait_event(changed, self._settings.readiness_poll_interval)
            changed.clear()
            if not self._run.draining:
                self._poll_readiness()

    def _poll_readiness(self) -> None:
        """Sends an Interest for every pair whose readiness changed since the
        last one sent on this stream."""
        for kind, provider in self._state.providers.items():
            ready = self._state.is_ready(kind, provider)
            if self._readiness.get(kind) != ready:
                log.info("provider %s readiness changed: ready=%s", kind, ready)
                self._readiness[kind] = ready
                self._send(_interest(kind, ready))

    async def _flusher(self) -> None:
        ready = self._state.results_ready
        while True:
            await ready.wait()
            ready.clear()
            self._flush()
            self._check_drained()

    async def _drain_watch(self) -> None:
        run = self._run
        if not run.draining:
            await run.shutdown_requested.wait()
            run.start_drain()
            # Tell the broker to stop sending tasks for every pair.
            for kind, ready in self._readiness.items():
                if ready:
                    self._readiness[kind] = False
                    self._send(_interest(kind, False))
            self._check_drained()
        assert run.drain_deadline is not None
        await asyncio.sleep(max(0.0, run.drain_deadline - time.monotonic()))
        running, undelivered = self._state.outstanding()
        log.warning(
            "drain timeout reached with %d running and %d undelivered; closing the stream", running, undelivered
        )
        self._finish(SessionEnd.CLOSED)

    async def _close(self, call: Any, writer: _Writer, reader: "asyncio.Task[None]") -> SessionEnd:
        """Half-closes the stream after the queued messages and waits
        (bounded) for the broker to end it, so the last completions are
        transmitted instead of being reset with the stream."""
        self._closing = True
        writer.close()
        assert writer.task is not None
        done, _ = await asyncio.wait({writer.task, reader}, timeout=self._settings.close_grace)
        if reader not in done:
            log.debug("broker did not end the stream after the half-close")
        await self._abandon(call, writer, [reader])
        log.info("work stream closed")
        return SessionEnd.LOST_HEALTHY if writer.failed else SessionEnd.CLOSED
