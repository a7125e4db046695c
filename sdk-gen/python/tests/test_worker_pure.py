"""Unit tests of the worker runtime's pure parts: backoff, merge, the
result buffer, settings and addresses."""

import random

import pytest

from converge_sdk.gen.converge.worker.v1 import worker_pb2 as pb
from converge_sdk.worker import KindVersion, TlsConfig, WorkerOptions, merge_json
from converge_sdk.worker.backoff import Backoff
from converge_sdk.worker.buffer import ResultBuffer
from converge_sdk.worker.settings import parse_address
from converge_sdk.worker.state import SharedState


def test_backoff_grows_to_the_cap_with_jitter_and_resets():
    b = Backoff(0.1, 1.0, rng=random.Random(7))
    first = b.next_delay()
    assert 0.05 <= first <= 0.1
    second = b.next_delay()
    assert 0.1 <= second <= 0.2
    delays = [b.next_delay() for _ in range(80)]
    assert all(d <= 1.0 for d in delays)
    assert delays[-1] >= 0.5
    b.reset()
    assert b.next_delay() <= 0.1


def test_backoff_jitter_differs_between_draws():
    b = Backoff(1.0, 1.0, rng=random.Random(1))
    assert len({round(b.next_delay(), 9) for _ in range(10)}) > 1


def test_merge_is_deep_and_the_override_wins():
    base = {"a": 1, "nested": {"x": 1, "y": 2}, "list": [1, 2]}
    over = {"nested": {"y": 3, "z": 4}, "list": [9], "b": True}
    merged = merge_json(base, over)
    assert merged == {"a": 1, "nested": {"x": 1, "y": 3, "z": 4}, "list": [9], "b": True}
    # Neither input is modified.
    assert base == {"a": 1, "nested": {"x": 1, "y": 2}, "list": [1, 2]}
    assert over == {"nested": {"y": 3, "z": 4}, "list": [9], "b": True}


def test_merge_replaces_non_objects_wholesale():
    assert merge_json({"a": {"x": 1}}, {"a": None}) == {"a": None}
    assert merge_json({"a": 1}, {"a": {"x": 1}}) == {"a": {"x": 1}}
    assert merge_json([1], {"x": 1}) == {"x": 1}


def _complete(token: str) -> pb.StageComplete:
    return pb.StageComplete(lease_token=token, claim_epoch=len(token))


def test_buffer_overflow_discards_the_oldest():
    buffer = ResultBuffer(2)
    assert buffer.push(_complete("a")) is None
    assert buffer.push(_complete("b")) is None
    dropped = buffer.push(_complete("c"))
    assert dropped is not None and dropped.lease_token == "a"
    assert len(buffer) == 2
    front = buffer.pop()
    assert front is not None and front.lease_token == "b"
    assert buffer.push_front(front) is None
    # Full again: a put-back result is the oldest, so it is the one dropped.
    refused = buffer.push_front(_complete("z"))
    assert refused is not None and refused.lease_token == "z"
    assert [t for t, _ in buffer.leases()] == ["b", "c"]
    assert [buffer.pop().lease_token, buffer.pop().lease_token, buffer.pop()] == ["b", "c", None]


def test_unacknowledged_results_go_back_in_front_in_order_and_are_attested():
    state = SharedState({}, WorkerOptions(result_buffer_capacity=3))

    def results():
        return [t for t, _ in state._results.leases()]

    for lease in ("a", "b", "c", "d"):
        state.sent(_complete(lease))
    # Too many unacknowledged: the oldest is forgotten and counted.
    assert [t for t, _ in state._unacked.leases()] == ["b", "c", "d"]
    assert state.stats().buffered_dropped == 1
    state.acknowledge([pb.LeaseRef(lease_token="c"), pb.LeaseRef(lease_token="unknown")])
    assert state.begin("b", 1)  # both running and unacknowledged: attested once
    assert [lease.lease_token for lease in state.attested_leases()] == ["b", "d"]
    assert state.outstanding() == (1, 2) and state.stats().buffered == 2
    # A result computed while disconnected waits behind the unacknowledged.
    state._results.push(_complete("e"))
    state.requeue_unacknowledged()
    assert results() == ["b", "d", "e"] and len(state._unacked) == 0
    # Requeued onto a full buffer, the oldest are discarded.
    sent = state.pop_result()
    assert sent is not None
    state.sent(sent)
    state._results.push(_complete("f"))
    state.requeue_unacknowledged()
    assert results() == ["d", "e", "f"] and state.stats().buffered_dropped == 2


def test_settings_are_validated():
    WorkerOptions().validate()
    with pytest.raises(ValueError, match="max_parallel"):
        WorkerOptions(max_parallel=0).validate()
    with pytest.raises(ValueError, match="heartbeat_interval"):
        WorkerOptions(heartbeat_interval=0).validate()
    with pytest.raises(ValueError, match="result_buffer_capacity"):
        WorkerOptions(result_buffer_capacity=0).validate()
    with pytest.raises(ValueError, match="drain_timeout"):
        WorkerOptions(drain_timeout=-1).validate()
    with pytest.raises(ValueError, match="finite"):
        WorkerOptions(backoff_max=float("inf")).validate()


def test_addresses():
    assert parse_address("http://127.0.0.1:50051") == ("127.0.0.1:50051", False)
    assert parse_address("https://broker.example:443/") == ("broker.example:443", True)
    assert parse_address("127.0.0.1:50051") == ("127.0.0.1:50051", False)
    for bad in ("ftp://x:1", "http://", "http://host:1/path"):
        with pytest.raises(ValueError):
            parse_address(bad)


def test_tls_needs_cert_and_key_together():
    with pytest.raises(ValueError):
        TlsConfig(client_cert=b"cert")
    assert TlsConfig(ca_bundle=None).credentials() is not None


def test_kind_version_parses():
    assert KindVersion.parse("noop:2") == KindVersion("noop", 2)
    assert KindVersion.parse("noop") == KindVersion("noop", 1)
    assert str(KindVersion("noop", 2)) == "noop:2"
    for bad in ("noop:0", "noop:x", ":1"):
        with pytest.raises(ValueError):
            KindVersion.parse(bad)


def test_worker_validates_its_providers_and_builds_tls_channels():
    import asyncio

    import grpc

    from converge_sdk.worker import Reactions, Worker

    leaf = Reactions(KindVersion("leaf", 1))
    with pytest.raises(ValueError, match="at least one provider"):
        Worker([], address="127.0.0.1:1")
    with pytest.raises(ValueError, match="more than one provider"):
        Worker([leaf, Reactions(KindVersion("leaf", 1))], address="127.0.0.1:1")
    with pytest.raises(ValueError, match="exactly one of address and channel"):
        Worker([leaf])
    with pytest.raises(ValueError, match="version"):
        Worker([Reactions(KindVersion("leaf", 0))], address="127.0.0.1:1")

    async def channels():
        # No connection is attempted until a call; building must succeed.
        for worker in (
            Worker([leaf], address="https://127.0.0.1:1"),
            Worker([leaf], address="127.0.0.1:1", tls=TlsConfig(server_name="broker.internal")),
            Worker([leaf], address="http://127.0.0.1:1"),
        ):
            channel = worker._make_channel()
            assert isinstance(channel, grpc.aio.Channel)
            await channel.close()

    asyncio.run(channels())


def test_unknown_reaction_is_a_transient_error_with_its_reason():
    from converge_sdk.worker import UNKNOWN_REACTION_REASON, TransientError, UnknownReactionError

    err = UnknownReactionError("operate:reboot", KindVersion("leaf", 1))
    assert isinstance(err, TransientError) and not err.terminal
    assert err.reason == UNKNOWN_REACTION_REASON
    assert UnknownReactionError("x", KindVersion("leaf", 1), terminal=True).terminal


def test_the_names_of_0_1_are_deprecated_aliases():
    import converge_sdk.worker as worker
    from converge_sdk.worker import DrainIncompleteError, Reactions, Worker, WorkerOptions

    for old, new in (("WorkerSettings", WorkerOptions), ("DrainIncomplete", DrainIncompleteError)):
        with pytest.warns(DeprecationWarning, match=new.__name__):
            assert getattr(worker, old) is new
    with pytest.warns(DeprecationWarning):
        from converge_sdk.worker.runtime import DrainIncomplete  # noqa: F401
    with pytest.raises(AttributeError):
        getattr(worker, "NoSuchName")
    options = WorkerOptions(max_parallel=3)
    with pytest.warns(DeprecationWarning, match="options="):
        w = Worker([Reactions(KindVersion("leaf", 1))], address="127.0.0.1:1", settings=options)
    assert w.options is options
    with pytest.warns(DeprecationWarning, match="Worker.options"):
        assert w.settings is options
    with pytest.raises(ValueError):
        Worker([Reactions(KindVersion("leaf", 1))], address="127.0.0.1:1", options=options, settings=options)
