"""State shared by the run loop, the sessions and the running tasks. It
lives for the whole run, not for one stream, which is what lets handlers
outlive a stream drop. Everything here runs on the worker's event loop, so
it needs no locks."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from converge_sdk.gen.converge.worker.v1 import worker_pb2 as pb
from converge_sdk.worker.buffer import ResultBuffer
from converge_sdk.worker.provider import Provider
from converge_sdk.worker.settings import WorkerOptions
from converge_sdk.worker.types import KindVersion, ProviderConfig

log = logging.getLogger("converge_sdk.worker")


@dataclass(frozen=True)
class WorkerStats:
    """A snapshot of a worker's counters."""

    #: Tasks whose handler succeeded.
    completed: int = 0
    #: Tasks that failed, for any reason (handler error, deadline, unknown or
    #: unready provider, shutting down).
    failed: int = 0
    #: Results discarded because the buffer (of unsent or of unacknowledged
    #: results) was full.
    buffered_dropped: int = 0
    #: Times an established stream was lost.
    reconnects: int = 0
    #: Streams opened so far.
    sessions: int = 0
    #: Tasks accepted whose handler has not finished (now).
    running: int = 0
    #: Results not yet acknowledged by the broker (now): waiting to be sent,
    #: or sent and kept until acknowledged.
    buffered: int = 0


class Counters:
    """The monotonic counters behind :class:`WorkerStats`."""

    def __init__(self) -> None:
        self.completed = 0
        self.failed = 0
        self.buffered_dropped = 0
        self.reconnects = 0
        self.sessions = 0


class SharedState:
    """Tasks in flight, unacknowledged results, the config cache and the
    wake-up signals between them."""

    def __init__(self, providers: Mapping[KindVersion, Provider], settings: WorkerOptions) -> None:
        self.providers: Dict[KindVersion, Provider] = dict(sorted(providers.items()))
        self.settings = settings
        #: One permit per handler slot.
        self.slots = asyncio.Semaphore(settings.max_parallel)
        # lease_token -> claim_epoch of accepted tasks whose handler has not
        # finished (including those waiting for a slot).
        self._running: Dict[str, int] = {}
        # Finished results not yet handed to a stream.
        self._results = ResultBuffer(settings.result_buffer_capacity)
        # Results handed to a stream and not yet acknowledged by the broker
        # (ResultAck), oldest first: sent again on the next stream.
        self._unacked = ResultBuffer(settings.result_buffer_capacity)
        #: Set whenever a result lands in the buffer.
        self.results_ready = asyncio.Event()
        self._configs: Dict[KindVersion, Optional[ProviderConfig]] = {}
        # Pushes received so far, and per pair the count when its last push
        # arrived: a fetch that started before that push may carry older data
        # and must not overwrite it.
        self._pushes = 0
        self._pushed_at: Dict[KindVersion, int] = {}
        #: Asks the config refresher for an immediate re-pull.
        self.config_repull = asyncio.Event()
        #: Set when a default config changed, so readiness that depends on
        #: it is re-announced at once instead of at the next poll.
        self.configs_changed = asyncio.Event()
        self.counters = Counters()

    # ------------------------------------------------------------- tasks

    def begin(self, lease_token: str, claim_epoch: int) -> bool:
        """Records an accepted task. False if the lease is already running (a
        duplicate delivery, which is ignored)."""
        if lease_token in self._running:
            return False
        self._running[lease_token] = claim_epoch
        return True

    def finish(self, complete: pb.StageComplete) -> None:
        """Moves a task from running to the result buffer and wakes the
        session."""
        self._running.pop(complete.lease_token, None)
        if complete.HasField("error"):
            self.counters.failed += 1
        else:
            self.counters.completed += 1
        self._note_dropped(self._results.push(complete))
        self.results_ready.set()

    def pop_result(self) -> Optional[pb.StageComplete]:
        """The oldest undelivered result, removed."""
        return self._results.pop()

    def _note_dropped(self, dropped: Optional[pb.StageComplete]) -> None:
        if dropped is not None:
            self.counters.buffered_dropped += 1
            log.warning("result buffer full; discarded the oldest result (lease %s)", dropped.lease_token)

    def sent(self, complete: pb.StageComplete) -> None:
        """Keeps a result handed to a stream until the broker acknowledges
        it."""
        dropped = self._unacked.push(complete)
        if dropped is not None:
            self.counters.buffered_dropped += 1
            log.warning("too many unacknowledged results; forgot the oldest (lease %s)", dropped.lease_token)

    def acknowledge(self, leases: Iterable[pb.LeaseRef]) -> None:
        """Forgets the results the broker acknowledged."""
        tokens = {lease.lease_token for lease in leases}
        if tokens:
            self._unacked.retain(lambda c: c.lease_token not in tokens)

    def requeue_unacknowledged(self) -> None:
        """Puts the unacknowledged results back in front of the buffer,
        keeping their order, to be sent again on a new stream (the fence
        drops a copy the broker had already written)."""
        dropped = 0
        while (complete := self._unacked.pop_back()) is not None:
            if self._results.push_front(complete) is not None:
                dropped += 1
        if dropped:
            self.counters.buffered_dropped += dropped
            log.warning("result buffer full; discarded the %d oldest unacknowledged results", dropped)

    def attested_leases(self) -> List[pb.LeaseRef]:
        """Leases to attest in a heartbeat, sorted: those of accepted tasks
        whose handlers have not finished, and of results not yet
        acknowledged (the broker may be waiting for the database to write
        them)."""
        leases = set(self._running.items())
        leases.update(self._unacked.leases())
        return [pb.LeaseRef(lease_token=t, claim_epoch=e) for t, e in sorted(leases)]

    def resumed(self) -> List[pb.ResumedTask]:
        """Tasks to list in ``Subscribe.resumed``: running or result-buffered."""
        leases = dict(self._results.leases())
        leases.update(self._running)
        return [pb.ResumedTask(lease_token=t, claim_epoch=e) for t, e in sorted(leases.items())]

    def outstanding(self) -> Tuple[int, int]:
        """(running handlers, results not yet acknowledged: unsent or
        sent)."""
        return len(self._running), len(self._results) + len(self._unacked)

    # ----------------------------------------------------------- configs

    def is_ready(self, kind: KindVersion, provider: Provider) -> bool:
        """A provider's readiness: its own ``ready()`` (an exception counts as
        not ready) and, if it requires one, a cached default config."""
        try:
            own = bool(provider.ready())
        except Exception:
            log.exception("ready() of the provider of %s raised; counting it as not ready", kind)
            return False
        return own and (not provider.requires_default_config() or self.default_config(kind) is not None)

    def default_config(self, kind: KindVersion) -> Optional[ProviderConfig]:
        """The cached default config of a pair."""
        return self._configs.get(kind)

    def config_epoch(self) -> int:
        """Marks the start of a config fetch; pass it to
        :meth:`apply_fetched_config`."""
        return self._pushes

    def apply_fetched_config(self, kind: KindVersion, config: Optional[ProviderConfig], epoch: int) -> None:
        """Applies a fetched config unless a push for the pair arrived after
        the fetch started (``epoch``), which makes the fetched value possibly
        stale."""
        if self._pushed_at.get(kind, -1) > epoch:
            log.debug("fetched provider config of %s is older than a push; ignored", kind)
            return
        self._set_config(kind, config)

    def apply_pushed_config(self, kind: KindVersion, config: Optional[ProviderConfig]) -> None:
        """Applies a pushed config."""
        self._pushes += 1
        self._pushed_at[kind] = self._pushes
        self._set_config(kind, config)

    def _set_config(self, kind: KindVersion, config: Optional[ProviderConfig]) -> None:
        provider = self.providers.get(kind)
        if provider is None:
            log.debug("ignoring a provider config for %s, which this worker does not serve", kind)
            return
        if kind in self._configs and self._configs[kind] == config:
            return
        self._configs[kind] = config
        log.debug("provider config of %s changed (present: %s)", kind, config is not None)
        try:
            provider.on_config(config)
        except Exception:
            log.exception("on_config of the provider of %s raised", kind)
        self.configs_changed.set()

    def stats(self) -> WorkerStats:
        """The current counters."""
        running, buffered = self.outstanding()
        c = self.counters
        return WorkerStats(c.completed, c.failed, c.buffered_dropped, c.reconnects, c.sessions, running, buffered)
