"""End-to-end tests of the worker runtime against a real converge server:
the conformance providers served by an in-process Worker, and the
conformance worker as its own process (SIGTERM drain)."""

import asyncio
import base64
import os
import signal
import subprocess
import sys
import time

from google.protobuf import struct_pb2

from conftest import apply_conformance_kinds, is_ready, read_log, require_server, unique, wait_for

from converge_sdk import AsyncConvergeClient, ErrorReason
from converge_sdk.conformance import EventLog, composite_provider, leaf_provider
from converge_sdk.gen.converge.v1 import resource_pb2, resource_service_pb2
from converge_sdk.worker import (
    Condition,
    Event,
    KindVersion,
    Outcome,
    Reactions,
    TransientError,
    Worker,
    WorkerOptions,
)
from converge_sdk.worker.convert import struct_to_json

SETTINGS = WorkerOptions(max_parallel=4, heartbeat_interval=1.0, drain_timeout=10.0)


async def _serving(addr, log_path, scenario, settings=SETTINGS):
    """Runs ``scenario(client)`` while an in-process worker serves the
    conformance kinds, then drains the worker."""
    events = EventLog(str(log_path), "python")
    async with AsyncConvergeClient(addr) as client:
        await apply_conformance_kinds(client)
        worker = Worker([leaf_provider(events), composite_provider(events)], address=addr, options=settings)
        try:
            async with worker:
                await scenario(client)
        finally:
            events.close()
    stats = worker.stats()
    assert stats.running == 0 and stats.buffered == 0, stats
    return stats


def test_a_resource_becomes_ready_served_by_the_worker(tmp_path):
    addr = require_server()
    name = unique("ready")

    async def scenario(client):
        await client.apply_resource("conf-leaf", name, {"value": "hello"})
        resource = await wait_for(client, "conf-leaf", name, is_ready)
        status = dict(resource.status)
        assert status["language"] == "python"
        assert status["value"] == "hello"
        assert status["attempt"] == 1
        assert status["observedGeneration"] == 1
        assert status["trigger"] == "spec_change"
        assert status["config"] is None and status["bundle"] is None
        ready = [c for c in resource.conditions if c.type == "Ready"]
        assert ready and ready[0].reason == "Conformed"

    stats = asyncio.run(_serving(addr, tmp_path / "log", scenario))
    assert stats.completed >= 1 and stats.sessions >= 1
    lines = [l for l in read_log(tmp_path / "log") if l["name"] == name]
    assert [l["event"] for l in lines] == ["start", "end"]
    assert lines[0] == {
        "event": "start",
        "kind": "conf-leaf",
        "name": name,
        "reaction": "work",
        "generation": 1,
        "attempt": 1,
        "plan": False,
        "language": "python",
    }


def test_a_transient_failure_is_retried_then_succeeds(tmp_path):
    addr = require_server()
    name = unique("flaky")

    async def scenario(client):
        await client.apply_resource("conf-leaf", name, {"failTransient": 1})
        resource = await wait_for(client, "conf-leaf", name, is_ready)
        assert dict(resource.status)["attempt"] == 2

    asyncio.run(_serving(addr, tmp_path / "log", scenario))
    lines = [(l["event"], l["attempt"]) for l in read_log(tmp_path / "log") if l["name"] == name]
    assert lines == [("start", 1), ("end", 1), ("start", 2), ("end", 2)]


def test_a_terminal_failure_stops_at_once(tmp_path):
    addr = require_server()
    name = unique("fatal")

    async def scenario(client):
        await client.apply_resource("conf-leaf", name, {"failTerminal": True})
        resource = await wait_for(client, "conf-leaf", name, lambda r: r.phase == resource_pb2.PHASE_FAILED)
        assert any(c.reason == "ConformanceTerminal" for c in resource.conditions), resource.conditions

    asyncio.run(_serving(addr, tmp_path / "log", scenario))
    starts = [l for l in read_log(tmp_path / "log") if l["name"] == name and l["event"] == "start"]
    assert len(starts) == 1


def test_an_exception_fails_only_its_task(tmp_path):
    addr = require_server()
    bad, good = unique("raises"), unique("fine")

    async def scenario(client):
        await client.apply_resource("conf-leaf", bad, {"panic": True})
        await client.apply_resource("conf-leaf", good, {"value": 1})
        await wait_for(client, "conf-leaf", good, is_ready)
        resource = await wait_for(client, "conf-leaf", bad, lambda r: r.failure_attempts >= 1)
        assert not is_ready(resource)

    asyncio.run(_serving(addr, tmp_path / "log", scenario))
    lines = read_log(tmp_path / "log")
    assert not [l for l in lines if l["name"] == bad and l["event"] == "end"], "a raising handler writes no end line"


def test_requeue_after_runs_the_task_again_without_a_failure(tmp_path):
    addr = require_server()
    name = unique("requeue")

    async def scenario(client):
        await client.apply_resource("conf-leaf", name, {"requeueMs": 200})
        resource = await wait_for(client, "conf-leaf", name, is_ready)
        status = struct_to_json(resource.status)
        assert status["requeuedGeneration"] == 1 and status["observedGeneration"] == 1
        assert resource.failure_attempts == 0

    asyncio.run(_serving(addr, tmp_path / "log", scenario))
    runs = [l for l in read_log(tmp_path / "log") if l["name"] == name and l["event"] == "start"]
    assert len(runs) == 2, runs


def test_concurrency_never_exceeds_max_parallel(tmp_path):
    addr = require_server()
    names = [unique(f"par{i}") for i in range(6)]

    async def scenario(client):
        for name in names:
            await client.apply_resource("conf-leaf", name, {"sleepMs": 400})
        for name in names:
            await wait_for(client, "conf-leaf", name, is_ready)

    settings = WorkerOptions(max_parallel=2, heartbeat_interval=1.0, drain_timeout=10.0)
    asyncio.run(_serving(addr, tmp_path / "log", scenario, settings))
    running, peak = 0, 0
    for line in read_log(tmp_path / "log"):
        if line["name"] in names:
            running += {"start": 1, "end": -1}.get(line["event"], 0)
            peak = max(peak, running)
    assert peak == 2, f"peak {peak} handlers at once with max_parallel=2"


def test_compose_with_value_flows_and_teardown_order(tmp_path):
    addr = require_server()
    top, source, sink = unique("top"), unique("src"), unique("sink")
    spec = {
        "children": [
            {"name": source, "spec": {"value": "flowed"}},
            {"name": sink, "flows": [{"from": source, "source": "/value", "field": "/value"}]},
        ]
    }

    async def scenario(client):
        await client.apply_resource("conf-composite", top, spec)
        root = await wait_for(client, "conf-composite", top, is_ready)
        assert dict(root.status) == {"phase": "ready", "children": 2, "ready": 2, "language": "python"}
        child = await client.get_resource("conf-leaf", sink)
        assert dict(child.status)["value"] == "flowed", "the dependency's status value flowed into the spec"
        await client.delete_resource("conf-composite", top)

        async def gone(name):
            from converge_sdk import ConvergeError

            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    await client.get_resource("conf-leaf", name)
                except ConvergeError as err:
                    if err.reason is ErrorReason.RESOURCE_NOT_FOUND:
                        return
                    raise
                await asyncio.sleep(0.2)
            raise AssertionError(f"{name} was not torn down")

        await gone(source)
        await gone(sink)

    asyncio.run(_serving(addr, tmp_path / "log", scenario))
    teardowns = [l["name"] for l in read_log(tmp_path / "log") if l["event"] == "teardown"]
    assert teardowns.index(sink) < teardowns.index(source), "dependents are torn down before their dependencies"


def test_a_config_override_reaches_the_handler(tmp_path):
    addr = require_server()
    config, name = unique("cfg"), unique("configured")
    override = {"region": "eu", "nested": {"depth": 2}}

    async def scenario(client):
        from converge_sdk.gen.converge.v1 import provider_config_pb2, provider_config_service_pb2

        spec = struct_pb2.Struct()
        spec.update(override)
        # A non-default config: attaching it to one resource leaves every
        # other test's (and language's) resources alone.
        await client.provider_config.ApplyProviderConfig(
            provider_config_service_pb2.ApplyProviderConfigRequest(
                provider_config=provider_config_pb2.ProviderConfig(
                    name=config, kind="conf-leaf", kind_version=1, spec=spec, data=b"py-bundle"
                )
            ),
            timeout=10,
        )
        await client.apply_resource("conf-leaf", name, {}, provider_config=config)
        resource = await wait_for(client, "conf-leaf", name, is_ready)
        status = struct_to_json(resource.status)
        # Deep-merged over whatever default the kind has: the override's keys win.
        assert status["config"]["region"] == "eu"
        assert status["config"]["nested"]["depth"] == 2
        assert base64.b64decode(status["bundle"]) == b"py-bundle"

    asyncio.run(_serving(addr, tmp_path / "log", scenario))


def test_events_and_liveness_reach_the_server():
    addr = require_server()
    name = unique("observed")
    leaf = Reactions(KindVersion("conf-leaf", 1))

    @leaf.reaction("work")
    async def work(request):
        if request.attempt == 1:
            # A detail that is not an object is dropped from a failure; the
            # event itself is still recorded.
            raise TransientError("probe down", reason="ProbeDown").add_event(
                Event.warning("ProbeFailed", "no answer", detail=[1])
            )
        return Outcome(
            status={"attempt": request.attempt},
            conditions=[Condition("Ready", True, reason="Probed"), Condition("Reachable", True, liveness=60)],
            events=[Event.normal("ProbeAnswered", "in 5 ms", category="probe", detail={"ms": 5})],
        )

    @leaf.reaction("teardown")
    async def teardown(request):
        return Outcome()

    async def main():
        async with AsyncConvergeClient(addr) as client:
            await apply_conformance_kinds(client)
            async with Worker([leaf], address=addr, options=SETTINGS):
                await client.apply_resource("conf-leaf", name, {"value": "observed"})
                resource = await wait_for(client, "conf-leaf", name, is_ready)
            assert dict(resource.status)["attempt"] == 2
            conditions = {c.type: c for c in resource.conditions}
            assert conditions["Reachable"].HasField("expire_time"), "a liveness condition has an expiry"
            assert not conditions["Ready"].HasField("expire_time"), "an ordinary condition has none"
            listed = await client.resource.ListResourceEvents(
                resource_service_pb2.ListResourceEventsRequest(kind="conf-leaf", name=name), timeout=10
            )
            runs = {(e.category, e.reason): e for e in listed.events}
            failed = runs[("worker", "ProbeFailed")]
            assert failed.type == resource_pb2.EVENT_TYPE_WARNING and failed.message == "no answer"
            assert not failed.HasField("detail")
            answered = runs[("probe", "ProbeAnswered")]
            assert answered.type == resource_pb2.EVENT_TYPE_NORMAL and answered.count == 1
            assert struct_to_json(answered.detail) == {"ms": 5}

    asyncio.run(main())


def test_the_conformance_worker_drains_on_sigterm(tmp_path):
    addr = require_server()
    name = unique("drain")
    log_path = tmp_path / "log"
    env = {
        **os.environ,
        "CONVERGE_BROKER_ADDR": f"http://{addr}",
        "CONFORMANCE_LOG": str(log_path),
        "CONFORMANCE_MAX_PARALLEL": "2",
        "CONFORMANCE_DRAIN_TIMEOUT_MS": "15000",
        "CONFORMANCE_HEARTBEAT_MS": "1000",
        "PYTHONPATH": os.pathsep.join([str(p) for p in sys.path if p]),
    }
    process = subprocess.Popen([sys.executable, "-m", "converge_sdk.conformance"], env=env, stderr=subprocess.PIPE)
    try:

        async def scenario():
            async with AsyncConvergeClient(addr) as client:
                await apply_conformance_kinds(client)
                await client.apply_resource("conf-leaf", name, {"sleepMs": 2500})
                deadline = time.monotonic() + 60
                while not any(l["name"] == name for l in read_log(log_path)):
                    assert time.monotonic() < deadline, "the task never started"
                    assert process.poll() is None, "the worker exited early"
                    await asyncio.sleep(0.1)
                process.send_signal(signal.SIGTERM)
                code = await asyncio.to_thread(process.wait, 30)
                assert code == 0, process.stderr.read().decode() if process.stderr else code
                resource = await wait_for(client, "conf-leaf", name, is_ready, timeout=10)
                assert dict(resource.status)["attempt"] == 1, "the running task's result arrived"

        asyncio.run(scenario())
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stderr:
            process.stderr.close()


def test_bad_configuration_exits_2():
    env = {k: v for k, v in os.environ.items() if k != "CONVERGE_BROKER_ADDR"}
    env["PYTHONPATH"] = os.pathsep.join([str(p) for p in sys.path if p])
    result = subprocess.run(
        [sys.executable, "-m", "converge_sdk.conformance"], env=env, capture_output=True, timeout=30
    )
    assert result.returncode == 2, result.stderr
    env["CONVERGE_BROKER_ADDR"] = "http://127.0.0.1:1"
    env["CONFORMANCE_MAX_PARALLEL"] = "zero"
    result = subprocess.run(
        [sys.executable, "-m", "converge_sdk.conformance"], env=env, capture_output=True, timeout=30
    )
    assert result.returncode == 2, result.stderr
