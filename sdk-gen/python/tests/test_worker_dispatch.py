"""Unit tests of dispatch, execution (deadline, exception isolation,
bounded concurrency), task acceptance and the config cache, without a
broker."""

import asyncio
import threading
import time

import pytest
from google.protobuf import struct_pb2

from converge_sdk.gen.converge.worker.v1 import worker_pb2 as pb
from converge_sdk.worker import (
    UNKNOWN_REACTION_REASON,
    DEADLINE_EXCEEDED_REASON,
    HandlerError,
    KindVersion,
    Outcome,
    Provider,
    ProviderConfig,
    ReactionRequest,
    Reactions,
    Resource,
    Stage,
    TerminalError,
    Trigger,
    UnknownReactionError,
    WorkerOptions,
)
from converge_sdk.worker.state import SharedState
from converge_sdk.worker.task import accept, execute

KIND = KindVersion("leaf", 1)


def _request(reaction="work", deadline=None):
    resource = Resource(
        uid="u",
        kind="leaf",
        kind_version=1,
        name="r",
        labels={},
        spec={},
        status=None,
        generation=1,
        observed_generation=0,
        ready=False,
        healthy=False,
    )
    return ReactionRequest(
        reaction=reaction,
        stage=Stage.WORK,
        trigger=Trigger.SPEC_CHANGE,
        kind=KIND,
        resource=resource,
        generation=1,
        attempt=1,
        input=None,
        deadline=deadline,
    )


def _state(provider, **settings):
    return SharedState({provider.kind: provider}, WorkerOptions(**settings))


async def _failure(state, provider, request) -> HandlerError:
    with pytest.raises(HandlerError) as excinfo:
        await execute(state, provider, request)
    return excinfo.value


def test_dispatch_by_reaction_name_async_and_sync():
    provider = Reactions(KIND)
    seen = []

    @provider.reaction("work")
    async def work(request):
        return Outcome(status={"via": "async"})

    @provider.reaction("teardown")
    def teardown(request):
        seen.append(threading.current_thread() is not threading.main_thread())
        return Outcome(status={"via": "thread"})

    with pytest.raises(ValueError):
        provider.reaction("work")(work)

    async def main():
        state = _state(provider)
        assert (await execute(state, provider, _request("work"))).status == {"via": "async"}
        assert (await execute(state, provider, _request("teardown"))).status == {"via": "thread"}

    asyncio.run(main())
    assert seen == [True], "a plain function runs off the event loop thread"


def test_unknown_reaction_is_transient_by_default_and_terminal_only_on_request():
    async def main():
        default = Reactions(KIND)
        error = await _failure(_state(default), default, _request("nope"))
        assert isinstance(error, UnknownReactionError) and not error.terminal
        assert error.reason == UNKNOWN_REACTION_REASON
        assert "'nope'" in error.message and "leaf:1" in error.message
        strict = Reactions(KIND, unknown_reaction_terminal=True)
        strict_error = await _failure(_state(strict), strict, _request("nope"))
        assert strict_error.terminal and strict_error.reason == UNKNOWN_REACTION_REASON

    asyncio.run(main())
    assert not UnknownReactionError("r", KIND).terminal


def test_exceptions_become_transient_and_terminal_errors_stay_terminal():
    async def boom(request):
        raise KeyError("missing")

    async def fatal(request):
        raise TerminalError("bad spec", reason="InvalidSpec")

    provider = Reactions(KIND, {"boom": boom, "fatal": fatal, "none": lambda r: None, "wrong": lambda r: 5})

    async def main():
        state = _state(provider)
        error = await _failure(state, provider, _request("boom"))
        assert not error.terminal and "KeyError" in error.message
        error = await _failure(state, provider, _request("fatal"))
        assert error.terminal and error.reason == "InvalidSpec"
        assert await execute(state, provider, _request("none")) == Outcome()
        error = await _failure(state, provider, _request("wrong"))
        assert error.terminal and error.reason == "InvalidOutcome"

    asyncio.run(main())


def test_the_deadline_cancels_the_handler():
    observed = []

    async def hang(request):
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            observed.append(request.cancelled())
            raise

    provider = Reactions(KIND, {"hang": hang})

    async def main():
        state = _state(provider)
        started = time.monotonic()
        error = await _failure(state, provider, _request("hang", deadline=time.monotonic() + 0.2))
        assert 0.15 <= time.monotonic() - started < 1.0
        assert not error.terminal and error.reason == DEADLINE_EXCEEDED_REASON
        # The slot was released when the handler unwound.
        assert not state.slots.locked()

    asyncio.run(main())
    assert observed == [True]


def test_a_sync_handler_past_its_deadline_sees_the_cancel_event():
    finished = threading.Event()

    def slow(request):
        request.cancel_event.wait(5)
        finished.set()

    provider = Reactions(KIND, {"slow": slow})

    async def main():
        error = await _failure(_state(provider), provider, _request("slow", deadline=time.monotonic() + 0.1))
        assert error.reason == DEADLINE_EXCEEDED_REASON

    asyncio.run(main())
    assert finished.wait(2), "the thread was told to stop"


def test_concurrency_is_bounded_by_max_parallel():
    running = 0
    peak = 0

    async def work(request):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)
        running -= 1

    provider = Reactions(KIND, {"work": work})

    async def main():
        state = _state(provider, max_parallel=2)
        await asyncio.gather(*(execute(state, provider, _request()) for _ in range(6)))

    asyncio.run(main())
    assert peak == 2


def _task(lease, kind="leaf", deadline=None):
    task = pb.StageTask(
        stage=pb.STAGE_WORK,
        kind=kind,
        kind_version=1,
        generation=1,
        reaction="work",
        lease_token=lease,
        claim_epoch=3,
        manifest_version=5,
        attempt=1,
        resource=pb.Resource(kind=kind, kind_version=1, name="r", spec=struct_pb2.Struct()),
    )
    if deadline is not None:
        task.task_deadline.FromMilliseconds(deadline)
    return task


class Gated(Provider):
    def __init__(self):
        self.gate = asyncio.Event()
        self.is_ready = True

    @property
    def kind(self):
        return KIND

    async def handle(self, request):
        await self.gate.wait()
        return Outcome(status={"lease": "done"})

    def ready(self):
        return self.is_ready


def _results(state):
    out = []
    while (c := state.pop_result()) is not None:
        out.append(c)
    return out


def test_accept_runs_tracks_and_buffers_results():
    async def main():
        provider = Gated()
        state = _state(provider)
        tasks = set()
        accept(state, tasks, _task("a"), draining=False)
        accept(state, tasks, _task("a"), draining=False)  # duplicate delivery: ignored
        accept(state, tasks, _task("b"), draining=False)
        await asyncio.sleep(0)
        assert [l.lease_token for l in state.attested_leases()] == ["a", "b"]
        assert len(tasks) == 2
        provider.gate.set()
        await asyncio.gather(*tasks)
        assert state.attested_leases() == []
        results = _results(state)
        assert sorted(c.lease_token for c in results) == ["a", "b"]
        assert all(c.claim_epoch == 3 and c.manifest_version == 5 and not c.HasField("error") for c in results)
        assert state.stats().completed == 2

    asyncio.run(main())


def test_tasks_that_cannot_run_fail_transiently_at_once():
    async def main():
        provider = Gated()
        state = _state(provider)
        tasks = set()
        accept(state, tasks, _task("draining"), draining=True)
        accept(state, tasks, _task("unknown", kind="other"), draining=False)
        provider.is_ready = False
        accept(state, tasks, _task("unready"), draining=False)
        assert not tasks
        failures = {c.lease_token: c.error for c in _results(state)}
        assert set(failures) == {"draining", "unknown", "unready"}
        assert not any(e.terminal for e in failures.values())
        assert "shutting down" in failures["draining"].message
        assert "no provider" in failures["unknown"].message
        assert "not ready" in failures["unready"].message
        assert state.stats().failed == 3

    asyncio.run(main())


def test_resumed_lists_running_and_buffered_leases():
    async def main():
        provider = Gated()
        state = _state(provider)
        tasks = set()
        accept(state, tasks, _task("run"), draining=False)
        accept(state, tasks, _task("done"), draining=True)  # finished at once (failure)
        await asyncio.sleep(0)
        assert [(r.lease_token, r.claim_epoch) for r in state.resumed()] == [("done", 3), ("run", 3)]
        assert state.outstanding() == (1, 1)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())


def test_the_deadline_counts_from_arrival():
    async def main():
        provider = Gated()
        state = _state(provider)
        tasks = set()
        accept(state, tasks, _task("late", deadline=100), draining=False)
        await asyncio.gather(*tasks)
        [complete] = _results(state)
        assert complete.error.reason == DEADLINE_EXCEEDED_REASON and not complete.error.terminal

    asyncio.run(main())


class Recorder(Provider):
    def __init__(self, needs_config=False):
        self.configs = []
        self.needs_config = needs_config

    @property
    def kind(self):
        return KIND

    async def handle(self, request):
        return None

    def requires_default_config(self):
        return self.needs_config

    def on_config(self, config):
        self.configs.append(config)


def _config(n):
    return ProviderConfig(spec={"n": n})


def test_a_fetch_older_than_a_push_does_not_overwrite_it():
    async def main():
        recorder = Recorder()
        state = _state(recorder)
        state.apply_fetched_config(KIND, None, state.config_epoch())
        epoch = state.config_epoch()
        state.apply_pushed_config(KIND, _config(2))
        state.apply_fetched_config(KIND, _config(1), epoch)  # started before the push
        assert state.default_config(KIND) == _config(2)
        state.apply_fetched_config(KIND, _config(2), state.config_epoch())  # unchanged: no callback
        state.apply_fetched_config(KIND, _config(3), state.config_epoch())
        assert state.default_config(KIND) == _config(3)
        assert recorder.configs == [None, _config(2), _config(3)]

    asyncio.run(main())


def test_a_provider_that_requires_its_default_is_ready_only_while_one_is_cached():
    async def main():
        recorder = Recorder(needs_config=True)
        state = _state(recorder)
        assert not state.is_ready(KIND, recorder)
        state.apply_fetched_config(KIND, None, state.config_epoch())
        assert not state.is_ready(KIND, recorder)
        state.configs_changed.clear()
        state.apply_pushed_config(KIND, _config(1))
        assert state.configs_changed.is_set(), "a config change wakes the readiness check"
        assert state.is_ready(KIND, recorder)
        state.apply_pushed_config(KIND, None)
        assert not state.is_ready(KIND, recorder)

    asyncio.run(main())


def test_a_sync_handler_past_its_deadline_keeps_its_slot_until_it_returns():
    release = threading.Event()

    def stuck(request):
        release.wait(5)

    provider = Reactions(KIND, {"stuck": stuck})

    async def main():
        state = _state(provider, max_parallel=1)
        started = time.monotonic()
        error = await _failure(state, provider, _request("stuck", deadline=time.monotonic() + 0.1))
        assert error.reason == DEADLINE_EXCEEDED_REASON
        assert time.monotonic() - started < 2.0, "the deadline is reported on time"
        assert state.slots.locked(), "the thread is still busy, so its slot is too"
        release.set()
        for _ in range(100):
            if not state.slots.locked():
                break
            await asyncio.sleep(0.02)
        assert not state.slots.locked()

    asyncio.run(main())
