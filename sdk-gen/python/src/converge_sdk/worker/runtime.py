"""The :class:`Worker`: priming, the reconnect loop, drain and stats."""

from __future__ import annotations

import asyncio
import logging
import time
from types import TracebackType
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Type

import grpc

from converge_sdk import _deprecated
from converge_sdk.gen.converge.worker.v1 import worker_pb2 as pb
from converge_sdk.gen.converge.worker.v1 import worker_pb2_grpc
from converge_sdk.worker._wait import wait_event
from converge_sdk.worker.backoff import Backoff
from converge_sdk.worker.convert import kind_to_proto, provider_config
from converge_sdk.worker.provider import Provider
from converge_sdk.worker.session import Session, SessionEnd
from converge_sdk.worker.settings import MAX_MESSAGE_BYTES, TlsConfig, WorkerOptions, parse_address
from converge_sdk.worker.state import SharedState, WorkerStats
from converge_sdk.worker.types import KindVersion

log = logging.getLogger("converge_sdk.worker")


class DrainIncompleteError(Exception):
    """Shutdown's drain timeout passed before every in-flight handler
    finished and the broker acknowledged every result. The broker re-runs those tasks
    once their leases are released or go stale. Called ``DrainIncomplete``
    in 0.1 (still importable, deprecated)."""

    def __init__(self, running: int, undelivered: int) -> None:
        super().__init__(f"drain timed out with {running} handlers still running and {undelivered} results undelivered")
        #: Handlers still running at the end (they were cancelled).
        self.running = running
        #: Results computed but not acknowledged by the broker (never sent,
        #: or sent without an acknowledgement).
        self.undelivered = undelivered


class Run:
    """The state of one :meth:`Worker.run`, handed to each session."""

    def __init__(self, state: SharedState, stub: Any) -> None:
        self.state = state
        self.stub = stub
        #: Running task coroutines. They belong to the run, not to a session,
        #: so a stream drop does not cancel them.
        self.tasks: Set["asyncio.Task[None]"] = set()
        #: Set by :meth:`Worker.shutdown`.
        self.shutdown_requested = asyncio.Event()
        #: When the drain gives up (``time.monotonic``); set once draining.
        self.drain_deadline: Optional[float] = None

    @property
    def draining(self) -> bool:
        return self.drain_deadline is not None

    def start_drain(self) -> None:
        """Enters drain mode (idempotent)."""
        if self.drain_deadline is None:
            timeout = self.state.settings.drain_timeout
            log.info("shutdown requested; draining for up to %.1f s", timeout)
            self.drain_deadline = time.monotonic() + timeout


class Worker:
    """The worker runtime: serves its providers over one ``WorkStream`` at a
    time, reconnecting as needed, until shut down.

    ``address`` is the broker, ``http://host:port`` or ``host:port``
    (plaintext) or ``https://host:port`` (TLS, verified against the system
    roots unless ``tls`` says otherwise); giving ``tls`` makes the channel TLS
    whatever the scheme. Pass ``channel`` instead to use a
    ``grpc.aio.Channel`` you built (it is then yours to close; ``tls`` and
    ``channel_options`` do not apply). ``channel_options`` are extra gRPC
    channel arguments.

    Use it as ``await worker.run()`` with :meth:`shutdown` called from
    elsewhere (e.g. a signal handler), or as an async context manager that
    runs it in the background and drains on exit::

        async with Worker([provider], address="http://127.0.0.1:50051"):
            await stop_event.wait()
    """

    def __init__(
        self,
        providers: Iterable[Provider],
        *,
        address: Optional[str] = None,
        channel: Optional[grpc.aio.Channel] = None,
        tls: Optional[TlsConfig] = None,
        options: Optional[WorkerOptions] = None,
        channel_options: Sequence[Tuple[str, Any]] = (),
        settings: Optional[WorkerOptions] = None,
    ) -> None:
        if settings is not None:
            if options is not None:
                raise ValueError("give options, not both options and settings")
            _deprecated.warn("Worker(settings=...) is deprecated (renamed in 0.2): use options=")
            options = settings
        self._settings = options if options is not None else WorkerOptions()
        self._settings.validate()
        by_kind: Dict[KindVersion, Provider] = {}
        for provider in providers:
            kind = provider.kind
            if not kind.kind or kind.version < 1:
                raise ValueError(f"invalid provider kind {kind}: the kind must be non-empty and the version >= 1")
            if kind in by_kind:
                raise ValueError(f"more than one provider for {kind}")
            by_kind[kind] = provider
        if not by_kind:
            raise ValueError("a worker needs at least one provider")
        if (address is None) == (channel is None):
            raise ValueError("give exactly one of address and channel")
        self._target: Optional[Tuple[str, bool]] = parse_address(address) if address is not None else None
        self._channel = channel
        self._tls = tls
        # The channel run() made (None with a caller's channel), replaced when
        # re-read TLS files changed; channels being closed after a swap.
        self._owned: Optional[grpc.aio.Channel] = None
        self._retired: Set["asyncio.Task[None]"] = set()
        # The last TLS reload problem reported, so each is logged once.
        self._tls_problem: Optional[str] = None
        self._channel_options = list(channel_options)
        self._providers = by_kind
        self._state: Optional[SharedState] = None
        self._run: Optional[Run] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._stop_early = False
        self._background: Optional["asyncio.Task[None]"] = None

    @property
    def kinds(self) -> List[KindVersion]:
        """The pairs this worker serves, sorted."""
        return sorted(self._providers)

    @property
    def options(self) -> WorkerOptions:
        """The worker's options."""
        return self._settings

    @property
    def settings(self) -> WorkerOptions:
        """The worker's options (deprecated name: use :attr:`options`)."""
        _deprecated.warn("Worker.settings is deprecated (renamed in 0.2): use Worker.options")
        return self._settings

    def stats(self) -> WorkerStats:
        """The current counters (zero before :meth:`run`)."""
        return self._state.stats() if self._state is not None else WorkerStats()

    def shutdown(self) -> None:
        """Starts the graceful drain: announce every pair unready, fail tasks
        that still arrive (transiently), wait up to the drain timeout for
        in-flight handlers, deliver their results, close the stream; then
        :meth:`run` returns. Idempotent, and safe to call from any thread or
        from a signal handler, before or during :meth:`run`."""
        loop, run = self._loop, self._run
        if loop is None or run is None:
            self._stop_early = True
            return
        try:
            running_loop: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            running_loop = None
        if running_loop is loop:
            run.shutdown_requested.set()
        else:
            loop.call_soon_threadsafe(run.shutdown_requested.set)

    async def run(self) -> None:
        """Serves until :meth:`shutdown`, then drains and returns. Broker
        failures never end it: they are retried with backoff.

        Raises :class:`DrainIncompleteError` if the drain timed out with work left.
        """
        if self._run is not None:
            raise RuntimeError("a worker runs once")
        self._loop = asyncio.get_running_loop()
        state = SharedState(self._providers, self._settings)
        self._state = state
        if self._channel is None:
            self._owned = self._make_channel()
        channel = self._channel if self._channel is not None else self._owned
        assert channel is not None
        run = Run(state, worker_pb2_grpc.WorkerServiceStub(channel))
        self._run = run
        if self._stop_early:
            run.shutdown_requested.set()
        refresher: Optional["asyncio.Task[None]"] = None
        try:
            if not await self._prime(run):
                return
            refresher = asyncio.get_running_loop().create_task(
                self._refresh_configs(run), name="converge-config-refresh"
            )
            await self._serve(run)
        finally:
            if refresher is not None:
                refresher.cancel()
            leftover = list(run.tasks)
            for task in leftover:
                task.cancel()
            await asyncio.gather(*leftover, *([refresher] if refresher else []), return_exceptions=True)
            await asyncio.gather(*self._retired, return_exceptions=True)
            if self._owned is not None:
                await self._owned.close()

    async def __aenter__(self) -> "Worker":
        self._background = asyncio.get_running_loop().create_task(self.run(), name="converge-worker")
        return self

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.shutdown()
        assert self._background is not None
        await self._background

    def _make_channel(self) -> grpc.aio.Channel:
        assert self._target is not None
        target, wants_tls = self._target
        s = self._settings
        options: List[Tuple[str, Any]] = [
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            # The broker sends no keepalive of its own; HTTP/2 pings are how a
            # silently dead broker is noticed.
            ("grpc.keepalive_time_ms", 10_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            # The worker's own backoff paces reconnects; keep the channel's
            # from stacking minutes of delay on top after a broker restart.
            ("grpc.initial_reconnect_backoff_ms", max(1, int(s.backoff_base * 1000))),
            ("grpc.min_reconnect_backoff_ms", max(1, int(s.backoff_base * 1000))),
            ("grpc.max_reconnect_backoff_ms", max(1, int(s.backoff_max * 1000))),
            *self._channel_options,
        ]
        if self._tls is not None or wants_tls:
            credentials = (self._tls or TlsConfig()).credentials()
            if self._tls is not None and self._tls.server_name:
                options.append(("grpc.ssl_target_name_override", self._tls.server_name))
            return grpc.aio.secure_channel(target, credentials, options=options)
        return grpc.aio.insecure_channel(target, options=options)

    def _reload_tls(self, run: Run) -> None:
        """Reads the TLS files again before a (re)connect and, when they
        changed and make a usable set, moves the run to a new channel with
        the new material. A gRPC channel keeps the credentials it was made
        with for all its reconnects, so new material takes a new channel. The
        old one is closed in the background, with a grace period for a call
        still on it (a config refresh)."""
        if self._owned is None or self._tls is None or not self._tls.reloads:
            return
        try:
            fresh = self._tls.reread()
        except (OSError, ValueError) as exc:
            # Mid-rotation a file can be briefly absent, or a new key sit
            # beside the old certificate: keep the last good material.
            problem = f"{type(exc).__name__}: {exc}"
            if problem != self._tls_problem:
                log.warning("TLS files unusable (%s); keeping the current material", problem)
                self._tls_problem = problem
            return
        self._tls_problem = None
        if fresh == self._tls:
            return
        self._tls = fresh
        old, self._owned = self._owned, self._make_channel()
        run.stub = worker_pb2_grpc.WorkerServiceStub(self._owned)
        log.info("TLS material reloaded")
        closing = asyncio.get_running_loop().create_task(old.close(grace=self._settings.rpc_timeout))
        self._retired.add(closing)
        closing.add_done_callback(self._retired.discard)

    async def _prime(self, run: Run) -> bool:
        """Primes the config cache, retrying until the broker answers. False
        if shutdown came first."""
        s = self._settings
        backoff = Backoff(s.backoff_base, s.backoff_max)
        while not run.shutdown_requested.is_set():
            self._reload_tls(run)
            try:
                await _fetch_configs(run)
                return True
            except grpc.aio.AioRpcError as exc:
                log.warning("cannot fetch provider configs (%s: %s); retrying", exc.code(), exc.details())
            await wait_event(run.shutdown_requested, backoff.next_delay())
        return False

    async def _serve(self, run: Run) -> None:
        """The reconnect loop."""
        state, s = run.state, self._settings
        backoff = Backoff(s.backoff_base, s.backoff_max)
        while True:
            if run.drain_deadline is not None:
                running, undelivered = state.outstanding()
                if running == 0 and undelivered == 0:
                    return
                if time.monotonic() >= run.drain_deadline:
                    raise DrainIncompleteError(running, undelivered)
            self._reload_tls(run)
            end = await Session(run).run()
            if end is SessionEnd.CLOSED:
                running, undelivered = state.outstanding()
                if running or undelivered:
                    raise DrainIncompleteError(running, undelivered)
                return
            if end in (SessionEnd.LOST, SessionEnd.LOST_HEALTHY):
                state.counters.reconnects += 1
                if end is SessionEnd.LOST_HEALTHY:
                    backoff.reset()
            # Nothing left to deliver: no reason to reconnect just to close.
            if run.draining and state.outstanding() == (0, 0):
                return
            delay = backoff.next_delay()
            log.debug("reconnecting in %.2f s", delay)
            await self._sleep_unless_shutdown(run, delay)

    @staticmethod
    async def _sleep_unless_shutdown(run: Run, delay: float) -> None:
        """Sleeps ``delay``; a shutdown request starts the drain and ends the
        sleep early, and once draining the sleep never passes the drain
        deadline."""
        if run.drain_deadline is not None:
            await asyncio.sleep(max(0.0, min(delay, run.drain_deadline - time.monotonic())))
            return
        if await wait_event(run.shutdown_requested, delay):
            run.start_drain()

    async def _refresh_configs(self, run: Run) -> None:
        """The failsafe refresher: re-pulls configs periodically and whenever
        a session asks (on every (re)connect)."""
        repull = run.state.config_repull
        while True:
            await wait_event(repull, self._settings.config_refresh_interval)
            repull.clear()
            try:
                await _fetch_configs(run)
            except grpc.aio.AioRpcError as exc:
                log.debug("provider config refresh failed: %s %s", exc.code(), exc.details())


async def _fetch_configs(run: Run) -> None:
    """Fetches the default config of every served pair and applies it. Pairs
    the broker omits have no default."""
    state = run.state
    request = pb.GetProviderConfigRequest(kinds=[kind_to_proto(k) for k in state.providers])
    epoch = state.config_epoch()
    response = await run.stub.GetProviderConfig(request, timeout=state.settings.rpc_timeout)
    configs = {kind: None for kind in state.providers}
    fetched = {}
    for entry in response.entries:
        kind = KindVersion(entry.kind, entry.kind_version)
        if kind in configs:
            fetched[kind] = provider_config(entry.spec if entry.HasField("spec") else None, entry.data)
    for kind in configs:
        state.apply_fetched_config(kind, fetched.get(kind), epoch)


__getattr__ = _deprecated.aliases(__name__, {"DrainIncomplete": lambda: DrainIncompleteError})
