"""Tests of the worker's session protocol against an in-process fake broker
(a grpc.aio WorkerService on loopback): Subscribe contents, heartbeats,
config prime and push, results buffered across a reconnect and redelivered
first with their leases resumed, results kept until acknowledged, and the
drain."""

import asyncio

import grpc
from google.protobuf import struct_pb2

from converge_sdk.gen.converge.worker.v1 import worker_pb2 as pb
from converge_sdk.gen.converge.worker.v1 import worker_pb2_grpc
from converge_sdk.worker import KindVersion, Outcome, Reactions, Worker, WorkerOptions
from converge_sdk.worker.convert import struct_to_json

KIND = KindVersion("leaf", 1)
TIMEOUT = 10


def _struct(value):
    s = struct_pb2.Struct()
    s.update(value)
    return s


class FakeSession:
    def __init__(self, subscribe):
        self.subscribe = subscribe
        self.inbox: "asyncio.Queue" = asyncio.Queue()
        self.outbox: "asyncio.Queue" = asyncio.Queue()

    async def next(self, payload, skip=("heartbeat",)):
        """The next message with ``payload``; others of kinds in ``skip`` are
        passed over, anything else fails the test."""
        while True:
            message = await asyncio.wait_for(self.inbox.get(), TIMEOUT)
            if message is None:
                raise AssertionError(f"stream half-closed while waiting for {payload}")
            which = message.WhichOneof("payload")
            if which == payload:
                return getattr(message, payload)
            assert which in skip, f"expected {payload}, got {message}"

    def send_task(self, lease, **fields):
        task = pb.StageTask(
            stage=pb.STAGE_WORK,
            kind=KIND.kind,
            kind_version=KIND.version,
            generation=2,
            reaction="work",
            trigger=pb.TRIGGER_SPEC_CHANGE,
            lease_token=lease,
            claim_epoch=7,
            manifest_version=11,
            attempt=1,
            resource=pb.Resource(kind=KIND.kind, kind_version=1, name=lease, spec=_struct({}), generation=2),
            **fields,
        )
        self.outbox.put_nowait(pb.WorkStreamResponse(task=task))


class FakeBroker(worker_pb2_grpc.WorkerServiceServicer):
    def __init__(self):
        self.sessions: "asyncio.Queue[FakeSession]" = asyncio.Queue()
        self.accepting = asyncio.Event()
        self.accepting.set()
        self.default = {"a": 1, "nested": {"x": 1}}
        self.config_calls = 0
        #: Acknowledge no completion (a broker that cannot write them). By
        #: default each completion is acknowledged as it arrives.
        self.withhold_acks = False

    async def GetProviderConfig(self, request, context):
        self.config_calls += 1
        assert [(k.kind, k.kind_version) for k in request.kinds] == [(KIND.kind, KIND.version)]
        if self.default is None:
            return pb.GetProviderConfigResponse()
        return pb.GetProviderConfigResponse(
            entries=[pb.ProviderConfigEntry(kind=KIND.kind, kind_version=1, spec=_struct(self.default), data=b"dflt")]
        )

    async def WorkStream(self, request_iterator, context):
        await self.accepting.wait()
        requests = request_iterator.__aiter__()
        first = await requests.__anext__()
        assert first.WhichOneof("payload") == "subscribe", first
        # Like the real broker: headers go out once Subscribe is read.
        await context.send_initial_metadata(())
        session = FakeSession(first.subscribe)

        async def pump():
            async for message in requests:
                if message.WhichOneof("payload") == "complete" and not self.withhold_acks:
                    # Acknowledged at once, as a broker does once written.
                    lease = pb.LeaseRef(
                        lease_token=message.complete.lease_token, claim_epoch=message.complete.claim_epoch
                    )
                    session.outbox.put_nowait(pb.WorkStreamResponse(result_ack=pb.ResultAck(leases=[lease])))
                await session.inbox.put(message)
            await session.inbox.put(None)

        reader = asyncio.get_running_loop().create_task(pump())
        await self.sessions.put(session)
        try:
            while True:
                item = await session.outbox.get()
                if item is None:
                    return
                if isinstance(item, grpc.StatusCode):
                    await context.abort(item, "fake broker went away")
                yield item
        finally:
            reader.cancel()


async def _start_broker():
    server = grpc.aio.server()
    broker = FakeBroker()
    worker_pb2_grpc.add_WorkerServiceServicer_to_server(broker, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, broker, f"127.0.0.1:{port}"


def _provider(gates):
    leaf = Reactions(KIND)
    leaf.configs = []

    @leaf.reaction("work")
    async def work(request):
        await gates.setdefault(request.resource.name, asyncio.Event()).wait()
        bundle = request.effective_bundle().decode()
        return Outcome(status={"config": request.effective_config(), "bundle": bundle})

    def on_config(config):
        leaf.configs.append(config)

    leaf.on_config = on_config
    return leaf


def _drain(queue):
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items


async def _eventually(predicate):
    for _ in range(TIMEOUT * 50):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


def test_session_protocol_reconnect_redelivery_and_drain():
    async def main():
        server, broker, addr = await _start_broker()
        gates = {}
        provider = _provider(gates)
        settings = WorkerOptions(
            max_parallel=3,
            heartbeat_interval=0.1,
            backoff_base=0.05,
            backoff_max=0.2,
            healthy_session=0.0,
            drain_timeout=5.0,
            close_grace=2.0,
        )
        worker = Worker([provider], address=f"http://{addr}", options=settings)
        run = asyncio.get_running_loop().create_task(worker.run())
        try:
            # Prime, then Subscribe with the served pairs and max_inflight.
            s1 = await asyncio.wait_for(broker.sessions.get(), TIMEOUT)
            assert broker.config_calls >= 1
            assert provider.configs and provider.configs[0].spec == broker.default
            assert [(k.kind, k.kind_version) for k in s1.subscribe.kinds] == [("leaf", 1)]
            assert s1.subscribe.max_inflight == 3 and not s1.subscribe.resumed
            assert s1.subscribe.agent.startswith("converge-sdk-python/")

            # A running task is attested by heartbeats.
            s1.send_task("L1", provider_config=_struct({"nested": {"y": 2}}))
            while True:
                heartbeat = await s1.next("heartbeat", skip=())
                if [l.lease_token for l in heartbeat.leases] == ["L1"]:
                    assert heartbeat.leases[0].claim_epoch == 7
                    break

            # The stream breaks; the handler keeps running and finishes while
            # the broker is away, so its result is buffered.
            broker.accepting.clear()
            s1.outbox.put_nowait(grpc.StatusCode.UNAVAILABLE)
            await _eventually(lambda: worker.stats().reconnects >= 1)
            gates.setdefault("L1", asyncio.Event()).set()
            await _eventually(lambda: worker.stats().buffered == 1)

            # The new stream resumes the lease and redelivers the result first.
            broker.accepting.set()
            s2 = await asyncio.wait_for(broker.sessions.get(), TIMEOUT)
            assert [(r.lease_token, r.claim_epoch) for r in s2.subscribe.resumed] == [("L1", 7)]
            complete = await s2.next("complete", skip=())
            assert (complete.lease_token, complete.claim_epoch, complete.generation, complete.manifest_version) == (
                "L1",
                7,
                2,
                11,
            )
            assert complete.stage == pb.STAGE_WORK and not complete.HasField("error")
            assert struct_to_json(complete.status) == {"config": {"a": 1, "nested": {"x": 1, "y": 2}}, "bundle": "dflt"}

            # A pushed default applies to the next task.
            s2.outbox.put_nowait(
                pb.WorkStreamResponse(
                    provider_config_update=pb.ProviderConfigUpdate(kind="leaf", kind_version=1, spec=_struct({"a": 5}))
                )
            )
            await _eventually(lambda: provider.configs[-1] is not None and provider.configs[-1].spec == {"a": 5})
            gates["L2"] = asyncio.Event()
            gates["L2"].set()
            s2.send_task("L2")
            complete = await s2.next("complete")
            assert complete.lease_token == "L2" and struct_to_json(complete.status)["config"] == {"a": 5}

            # Drain: unready first, a late task fails transiently, the running
            # one still delivers, then the stream is half-closed.
            s2.send_task("L3")
            await _eventually(lambda: worker.stats().running == 1)
            worker.shutdown()
            interest = await s2.next("interest")
            assert (interest.kind, interest.kind_version, interest.ready) == ("leaf", 1, False)
            s2.send_task("L4")
            late = await s2.next("complete")
            assert late.lease_token == "L4" and late.error.message == "worker is shutting down"
            assert not late.error.terminal
            gates.setdefault("L3", asyncio.Event()).set()
            done = await s2.next("complete")
            assert done.lease_token == "L3" and not done.HasField("error")
            while (message := await asyncio.wait_for(s2.inbox.get(), TIMEOUT)) is not None:
                assert message.WhichOneof("payload") == "heartbeat", message
            s2.outbox.put_nowait(None)  # the broker ends the stream in turn
            await asyncio.wait_for(run, TIMEOUT)
            stats = worker.stats()
            assert (stats.completed, stats.failed, stats.running, stats.buffered) == (3, 1, 0, 0)
        finally:
            if not run.done():
                run.cancel()
                await asyncio.gather(run, return_exceptions=True)
            await server.stop(0)

    asyncio.run(main())


def test_drain_timeout_reports_the_work_left():
    async def main():
        server, broker, addr = await _start_broker()
        provider = _provider({})  # gates never open: the handler hangs
        settings = WorkerOptions(heartbeat_interval=0.1, drain_timeout=0.3, close_grace=0.5)
        worker = Worker([provider], address=addr, options=settings)
        run = asyncio.get_running_loop().create_task(worker.run())
        try:
            session = await asyncio.wait_for(broker.sessions.get(), TIMEOUT)
            session.send_task("H1")
            await _eventually(lambda: worker.stats().running == 1)
            worker.shutdown()
            try:
                await asyncio.wait_for(run, TIMEOUT)
            except Exception as exc:  # noqa: BLE001 - the type is what is checked
                from converge_sdk.worker import DrainIncompleteError

                assert isinstance(exc, DrainIncompleteError) and exc.running == 1, exc
            else:
                raise AssertionError("run() returned cleanly with a handler still running")
        finally:
            if not run.done():
                run.cancel()
            await server.stop(0)

    asyncio.run(main())


def test_cancelling_run_leaves_no_session_tasks_behind():
    async def main():
        server, broker, addr = await _start_broker()
        worker = Worker([_provider({})], address=addr, options=WorkerOptions(heartbeat_interval=0.1))
        run = asyncio.get_running_loop().create_task(worker.run())
        try:
            session = await asyncio.wait_for(broker.sessions.get(), TIMEOUT)
            session.send_task("C1")  # a handler that never finishes on its own
            await _eventually(lambda: worker.stats().running == 1)
            run.cancel()
            results = await asyncio.gather(run, return_exceptions=True)
            assert isinstance(results[0], asyncio.CancelledError)
            await asyncio.sleep(0.1)
            leftovers = [
                t
                for t in asyncio.all_tasks()
                if t.get_coro().__qualname__.split(".")[0] in ("Session", "_Writer", "_run", "_in_slot", "Worker")
            ]
            assert not leftovers, leftovers
        finally:
            await server.stop(0)

    asyncio.run(main())


class NeedsConfig(Reactions):
    def __init__(self):
        super().__init__(KIND, {"work": lambda request: Outcome()})
        self.healthy = True

    def requires_default_config(self):
        return True

    def ready(self):
        return self.healthy


def test_readiness_follows_the_default_config_and_ready():
    async def main():
        server, broker, addr = await _start_broker()
        broker.default = None
        provider = NeedsConfig()
        # Polls are far apart: every Interest below comes from a config change.
        settings = WorkerOptions(heartbeat_interval=0.1, readiness_poll_interval=60)
        worker = Worker([provider], address=addr, options=settings)
        run = asyncio.get_running_loop().create_task(worker.run())
        try:
            session = await asyncio.wait_for(broker.sessions.get(), TIMEOUT)
            first = await session.next("interest", skip=())
            assert (first.kind, first.ready) == ("leaf", False), "unready until a default config exists"
            session.send_task("U1")
            refused = await session.next("complete")
            assert refused.error.message == "provider for kind leaf:1 is not ready" and not refused.error.terminal

            update = pb.ProviderConfigUpdate(kind="leaf", kind_version=1, spec=_struct({"k": 1}))
            session.outbox.put_nowait(pb.WorkStreamResponse(provider_config_update=update))
            assert (await session.next("interest")).ready is True, "announced as soon as the default arrived"
            session.send_task("U2")
            assert not (await session.next("complete")).HasField("error")

            provider.healthy = False
            update = pb.ProviderConfigUpdate(kind="leaf", kind_version=1, spec=_struct({"k": 2}))
            session.outbox.put_nowait(pb.WorkStreamResponse(provider_config_update=update))
            assert (await session.next("interest")).ready is False, "ready() is consulted too"
            worker.shutdown()
            await asyncio.sleep(0.2)
            session.outbox.put_nowait(None)
            await asyncio.wait_for(run, TIMEOUT)
        finally:
            if not run.done():
                run.cancel()
                await asyncio.gather(run, return_exceptions=True)
            await server.stop(0)

    asyncio.run(main())


def test_results_buffered_while_disconnected_are_redelivered_oldest_first():
    async def main():
        server, broker, addr = await _start_broker()
        gates = {}
        settings = WorkerOptions(heartbeat_interval=0.1, backoff_base=0.05, backoff_max=0.1, result_buffer_capacity=2)
        worker = Worker([_provider(gates)], address=addr, options=settings)
        run = asyncio.get_running_loop().create_task(worker.run())
        try:
            s1 = await asyncio.wait_for(broker.sessions.get(), TIMEOUT)
            for lease in ("R1", "R2", "R3"):
                s1.send_task(lease)
            await _eventually(lambda: worker.stats().running == 3)
            broker.accepting.clear()
            s1.outbox.put_nowait(grpc.StatusCode.UNAVAILABLE)
            await _eventually(lambda: worker.stats().reconnects >= 1)
            for count, lease in enumerate(("R1", "R2", "R3"), start=1):
                gates.setdefault(lease, asyncio.Event()).set()
                await _eventually(lambda: worker.stats().completed == count)
            # Capacity 2: the oldest result (R1) was dropped to make room.
            assert worker.stats().buffered == 2 and worker.stats().buffered_dropped == 1
            broker.accepting.set()
            s2 = await asyncio.wait_for(broker.sessions.get(), TIMEOUT)
            # Subscribe lists what was running or buffered when this connection
            # attempt began (it may have waited on the broker since).
            assert {"R2", "R3"} <= {r.lease_token for r in s2.subscribe.resumed}
            assert (await s2.next("complete", skip=())).lease_token == "R2"
            assert (await s2.next("complete")).lease_token == "R3"
            await asyncio.sleep(0.3)
            assert all(m is None or m.WhichOneof("payload") == "heartbeat" for m in _drain(s2.inbox)), "R1 is gone"
        finally:
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
            await server.stop(0)

    asyncio.run(main())


def test_a_result_is_kept_until_acknowledged_and_sent_again_on_the_next_stream():
    async def main():
        server, broker, addr = await _start_broker()
        gates = {"A": asyncio.Event()}
        gates["A"].set()
        settings = WorkerOptions(
            heartbeat_interval=0.1, backoff_base=0.05, backoff_max=0.1, drain_timeout=5.0, close_grace=2.0
        )
        worker = Worker([_provider(gates)], address=addr, options=settings)
        run = asyncio.get_running_loop().create_task(worker.run())
        try:
            s1 = await asyncio.wait_for(broker.sessions.get(), TIMEOUT)

            # Sent, but the broker cannot write it (no acknowledgement).
            broker.withhold_acks = True
            s1.send_task("A")
            complete = await s1.next("complete")
            assert (complete.lease_token, complete.claim_epoch) == ("A", 7)
            await _eventually(lambda: worker.stats().running == 0 and worker.stats().buffered == 1)
            # Its lease is attested meanwhile.
            while True:
                heartbeat = await s1.next("heartbeat", skip=())
                if [(l.lease_token, l.claim_epoch) for l in heartbeat.leases] == [("A", 7)]:
                    break

            # The stream goes: the next one resumes A and sends its result
            # again, first.
            broker.withhold_acks = False
            s1.outbox.put_nowait(grpc.StatusCode.UNAVAILABLE)
            s2 = await asyncio.wait_for(broker.sessions.get(), TIMEOUT)
            assert [(r.lease_token, r.claim_epoch) for r in s2.subscribe.resumed] == [("A", 7)]
            again = await s2.next("complete", skip=())
            assert (again.lease_token, again.claim_epoch) == ("A", 7)

            # Acknowledged now: forgotten, and not sent on a third stream.
            await _eventually(lambda: worker.stats().buffered == 0)
            s2.outbox.put_nowait(grpc.StatusCode.UNAVAILABLE)
            s3 = await asyncio.wait_for(broker.sessions.get(), TIMEOUT)
            assert not s3.subscribe.resumed
            await asyncio.sleep(0.3)
            sent = _drain(s3.inbox)
            assert all(m is None or m.WhichOneof("payload") != "complete" for m in sent), sent
            stats = worker.stats()
            assert (stats.completed, stats.buffered, stats.buffered_dropped) == (1, 0, 0)

            # Nothing is left: the drain closes at once.
            worker.shutdown()
            while (message := await asyncio.wait_for(s3.inbox.get(), TIMEOUT)) is not None:
                assert message.WhichOneof("payload") != "complete", message
            s3.outbox.put_nowait(None)
            await asyncio.wait_for(run, TIMEOUT)
        finally:
            if not run.done():
                run.cancel()
                await asyncio.gather(run, return_exceptions=True)
            await server.stop(0)

    asyncio.run(main())


def test_the_drain_waits_for_the_acknowledgement():
    async def main():
        from converge_sdk.worker import DrainIncompleteError

        server, broker, addr = await _start_broker()
        gates = {"W1": asyncio.Event()}
        gates["W1"].set()
        settings = WorkerOptions(heartbeat_interval=0.1, drain_timeout=0.3, close_grace=0.5)
        worker = Worker([_provider(gates)], address=addr, options=settings)
        run = asyncio.get_running_loop().create_task(worker.run())
        try:
            session = await asyncio.wait_for(broker.sessions.get(), TIMEOUT)
            broker.withhold_acks = True
            session.send_task("W1")
            await session.next("complete")
            worker.shutdown()
            try:
                await asyncio.wait_for(run, TIMEOUT)
            except DrainIncompleteError as exc:
                assert (exc.running, exc.undelivered) == (0, 1), exc
            else:
                raise AssertionError("run() returned cleanly with a result not acknowledged")
        finally:
            if not run.done():
                run.cancel()
                await asyncio.gather(run, return_exceptions=True)
            await server.stop(0)

    asyncio.run(main())


def test_prime_retries_until_a_broker_answers():
    import socket

    async def main():
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        settings = WorkerOptions(backoff_base=0.05, backoff_max=0.2, rpc_timeout=1.0)
        worker = Worker([_provider({})], address=f"127.0.0.1:{port}", options=settings)
        run = asyncio.get_running_loop().create_task(worker.run())
        server = None
        try:
            await asyncio.sleep(0.5)  # several failed attempts against a closed port
            assert not run.done() and worker.stats().sessions == 0
            server = grpc.aio.server()
            broker = FakeBroker()
            worker_pb2_grpc.add_WorkerServiceServicer_to_server(broker, server)
            server.add_insecure_port(f"127.0.0.1:{port}")
            await server.start()
            session = await asyncio.wait_for(broker.sessions.get(), TIMEOUT)
            assert broker.config_calls >= 1 and session.subscribe.kinds[0].kind == "leaf"
        finally:
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
            if server is not None:
                await server.stop(0)

    asyncio.run(main())
