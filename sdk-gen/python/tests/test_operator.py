"""The operator's helpers (ExplainResource, AdminService, reactor
deliveries) of the blocking and the asyncio client, against the server in
CONVERGE_ADDR (skipped without it), plus the pure request building."""

import asyncio
import uuid

import pytest

from conftest import apply_conformance_kinds, require_server, unique

from converge_sdk import AsyncConvergeClient, ConvergeClient, ConvergeError, ErrorReason, has_reason
from converge_sdk._operator import page_request_id, redrive
from converge_sdk.gen.converge.v1 import admin_service_pb2, kind_pb2, reactor_binding_pb2, reactor_binding_service_pb2

LEAF = "conf-leaf"
SINK = "py-sdk-sink"


def test_page_request_ids():
    assert [page_request_id("r", n) for n in (1, 2, 10)] == ["r", "r/2", "r/10"]
    assert page_request_id("", 3) == ""


def test_a_redrive_names_exactly_one_target():
    def build(delivery_id=None, binding=None, resources=None):
        return redrive(
            reason="r",
            delivery_id=delivery_id,
            binding=binding,
            resources=resources,
            validate_only=True,
            limit=5,
            page_token="",
            request_id="",
        )

    for targets in ({}, {"binding": "b", "delivery_id": "d"}):
        with pytest.raises(ValueError):
            build(**targets)
    request = build(resources=("k", "a=b"))
    assert request.WhichOneof("target") == "resources" and request.resources.label_selector == "a=b"


async def _setup(addr: str, run: str, count: int, *, bind: bool = False):
    """Applies the conformance kinds (and with ``bind`` a reactor kind and a
    binding on the run's resources created), then ``count`` resources labelled
    ``py-op-run=run``. Returns their names, sorted, and the binding's name."""
    binding = f"py-sdk-{run}"
    async with AsyncConvergeClient(addr) as client:
        await apply_conformance_kinds(client)
        if bind:
            await client.apply_kind_manifest(
                kind_pb2.KindManifest(
                    kind=SINK,
                    kind_version=1,
                    reactions=[
                        kind_pb2.Reaction(
                            name="react", trigger=kind_pb2.TRIGGER_REACTOR, emits=[kind_pb2.EMIT_SIDE_EFFECT]
                        )
                    ],
                )
            )
            await client.reactor_binding.ApplyReactorBinding(
                reactor_binding_service_pb2.ApplyReactorBindingRequest(
                    reactor_binding=reactor_binding_pb2.ReactorBinding(
                        name=binding,
                        watch_kind=LEAF,
                        transition=reactor_binding_pb2.TRANSITION_CREATED,
                        label_match={"py-op-run": run},
                        reactor=SINK,
                    )
                )
            )
        names = []
        for i in range(count):
            name = unique(f"op{i}")
            await client.apply_resource(LEAF, name, {"value": name}, labels={"py-op-run": run})
            names.append(name)
    return sorted(names), binding


def test_sync_explain_summary_and_act_on_all_resources():
    addr = require_server()
    run = uuid.uuid4().hex[:8]
    names, _ = asyncio.run(_setup(addr, run, 3))
    with ConvergeClient(addr) as client:
        explained = client.explain_resource(LEAF, names[0])
        assert explained.resource.name == names[0] and explained.HasField("read_time")
        with pytest.raises(ConvergeError) as excinfo:
            client.explain_resource(LEAF, unique("missing"))
        assert excinfo.value.reason is ErrorReason.RESOURCE_NOT_FOUND

        summary = client.get_fleet_summary(kind=LEAF, fresh=True)
        assert summary.phase_counts and all(c.kind == LEAF for c in summary.phase_counts)
        assert sum(c.count for c in summary.phase_counts) >= 3

        selector = f"py-op-run={run}"

        def act(action, request_id=""):
            pages = list(
                client.act_on_all_resources(
                    action, LEAF, reason="python sdk test", label_selector=selector, page_size=1, request_id=request_id
                )
            )
            return pages, sorted(n for p in pages for n in p.names)

        request_id = f"py-sdk-{run}"
        pages, acted = act(admin_service_pb2.RESOURCE_ACTION_QUARANTINE, request_id)
        assert len(pages) >= 3 and acted == names and pages[0].matched_count == 3
        assert sum(p.acted_count for p in pages) == 3
        # The same run again replays its pages (derived request ids) instead of acting twice.
        replayed, acted_again = act(admin_service_pb2.RESOURCE_ACTION_QUARANTINE, request_id)
        assert [p.acted_count for p in replayed] == [p.acted_count for p in pages] and acted_again == names
        released, _ = act(admin_service_pb2.RESOURCE_ACTION_UNQUARANTINE)
        assert sum(p.acted_count for p in released) == 3

        with pytest.raises(ConvergeError) as excinfo:
            client.act_on_resources(
                admin_service_pb2.RESOURCE_ACTION_FORCE_FINALIZE, LEAF, name=names[0], reason="python sdk test"
            )
        assert has_reason(excinfo.value, ErrorReason.ACTION_NOT_APPLICABLE)


def test_async_explain_summary_and_act_on_all_resources():
    addr = require_server()
    run = uuid.uuid4().hex[:8]

    async def main():
        names, _ = await _setup(addr, run, 2)
        async with AsyncConvergeClient(addr) as client:
            explained = await client.explain_resource(LEAF, names[1])
            assert explained.resource.name == names[1]
            summary = await client.get_fleet_summary(kind=LEAF)
            assert all(c.kind == LEAF for c in summary.phase_counts)
            pages = [
                page
                async for page in client.act_on_all_resources(
                    admin_service_pb2.RESOURCE_ACTION_QUARANTINE,
                    LEAF,
                    reason="python sdk test",
                    label_selector=f"py-op-run={run}",
                    page_size=1,
                )
            ]
            assert len(pages) >= 2 and sorted(n for p in pages for n in p.names) == names
            dry = await client.act_on_resources(
                admin_service_pb2.RESOURCE_ACTION_UNQUARANTINE,
                LEAF,
                reason="python sdk test",
                label_selector=f"py-op-run={run}",
                validate_only=True,
            )
            assert dry.matched_count == 2 and dry.acted_count == 0

    asyncio.run(main())


def test_reactor_deliveries_sync_and_async():
    addr = require_server()
    run = uuid.uuid4().hex[:8]
    names, binding = asyncio.run(_setup(addr, run, 3, bind=True))
    try:
        with ConvergeClient(addr) as client:
            deliveries = list(client.list_reactor_deliveries(binding=binding, page_size=2))
            assert sorted(d.resource.name for d in deliveries) == names
            with pytest.raises(ConvergeError) as excinfo:
                client.redrive_reactor_deliveries(delivery_id=deliveries[0].id, reason="python sdk test")
            assert excinfo.value.reason is ErrorReason.DELIVERY_NOT_GIVEN_UP
            pages = list(client.redrive_all_reactor_deliveries(binding=binding, reason="python sdk test", limit=1))
            assert [p.count for p in pages] == [0]

        async def main():
            async with AsyncConvergeClient(addr) as client:
                listed = [d.resource.name async for d in client.list_reactor_deliveries(binding=binding, page_size=1)]
                assert sorted(listed) == names
                one = [d async for d in client.list_reactor_deliveries(resource=(LEAF, names[0]))]
                assert [d.binding for d in one] == [binding]
                with pytest.raises(ConvergeError) as excinfo:
                    await client.redrive_reactor_deliveries(delivery_id=str(uuid.uuid4()), reason="python sdk test")
                assert excinfo.value.reason is ErrorReason.REACTOR_DELIVERY_NOT_FOUND
                pages = [
                    p
                    async for p in client.redrive_all_reactor_deliveries(
                        resources=(LEAF, f"py-op-run={run}"), reason="python sdk test", validate_only=True
                    )
                ]
                assert [p.count for p in pages] == [0]

        asyncio.run(main())
    finally:
        with ConvergeClient(addr) as client:
            client.reactor_binding.DeleteReactorBinding(
                reactor_binding_service_pb2.DeleteReactorBindingRequest(name=binding)
            )
