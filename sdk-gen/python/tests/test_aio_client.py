"""Tests of the asyncio client: error decoding (offline) and the resource
helpers against a real server (CONVERGE_ADDR)."""

import asyncio

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from conftest import apply_conformance_kinds, require_server, unique

from converge_sdk import ERROR_DOMAIN, AsyncConvergeClient, ConvergeError, ErrorReason, FieldViolation, has_reason
from converge_sdk.gen.converge.v1 import resource_pb2


class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details, trailers):
        self._code, self._details, self._trailers = code, details, trailers

    def code(self):
        return self._code

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._trailers


def _packed(message):
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def test_converge_error_decodes_every_detail():
    status = status_pb2.Status(
        code=3,
        message="spec is invalid",
        details=[
            _packed(
                error_details_pb2.ErrorInfo(reason=ErrorReason.SPEC_SCHEMA_VIOLATION, domain=ERROR_DOMAIN, metadata={"kind": "x"})
            ),
            _packed(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(field="/spec/a", description="not allowed"),
                        error_details_pb2.BadRequest.FieldViolation(
                            field="/spec/b", description="too big", reason="MAX"
                        ),
                    ]
                )
            ),
            _packed(error_details_pb2.RetryInfo(retry_delay={"seconds": 1, "nanos": 500_000_000})),
        ],
    )
    raw = FakeRpcError(
        grpc.StatusCode.INVALID_ARGUMENT,
        "spec is invalid",
        (("other", "x"), ("grpc-status-details-bin", status.SerializeToString())),
    )
    err = ConvergeError.from_rpc_error(raw)
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT
    assert err.message == "spec is invalid"
    assert err.reason is ErrorReason.SPEC_SCHEMA_VIOLATION and err.error_reason is ErrorReason.SPEC_SCHEMA_VIOLATION
    assert (err.domain, err.metadata) == (ERROR_DOMAIN, {"kind": "x"})
    assert has_reason(err, ErrorReason.SPEC_SCHEMA_VIOLATION) and has_reason(raw, ErrorReason.SPEC_SCHEMA_VIOLATION)
    assert err.field_violations == [
        FieldViolation("/spec/a", "not allowed"),
        FieldViolation("/spec/b", "too big", "MAX"),
    ]
    assert err.retry_delay == 1.5
    assert err.__cause__ is raw
    assert "INVALID_ARGUMENT" in str(err) and str(ErrorReason.SPEC_SCHEMA_VIOLATION) in str(err)


def test_converge_error_without_details():
    err = ConvergeError.from_rpc_error(FakeRpcError(grpc.StatusCode.UNAVAILABLE, "down", ()))
    assert err.code == grpc.StatusCode.UNAVAILABLE
    assert (err.reason, err.domain, err.metadata, err.field_violations, err.retry_delay) == ("", "", {}, [], None)
    assert err.reason is ErrorReason.UNSPECIFIED and not has_reason(err, ErrorReason.UNSPECIFIED)


def test_apply_get_list_delete_and_errors():
    addr = require_server()
    run = unique("list")
    names = sorted(unique(f"item{i}") for i in range(3))

    async def main():
        async with AsyncConvergeClient(addr) as client:
            await apply_conformance_kinds(client)
            for name in names:
                response = await client.apply_resource("conf-leaf", name, {"value": name}, labels={"py-run": run})
                assert response.created and response.resource.generation == 1
            again = await client.apply_resource("conf-leaf", names[0], {"value": names[0]}, labels={"py-run": run})
            assert not again.created and again.resource.generation == 1, "re-applying the same content is a no-op"

            got = await client.get_resource("conf-leaf", names[1])
            assert got.name == names[1] and got.status is not None and dict(got.spec) == {"value": names[1]}

            # page_size 1 forces one page per resource: the iterator follows the cursor.
            listed = [
                r.name
                async for r in client.list_resources(kind="conf-leaf", label_selector=f"py-run={run}", page_size=1)
            ]
            assert sorted(listed) == names

            with pytest.raises(ConvergeError) as excinfo:
                await client.get_resource("conf-leaf", unique("missing"))
            assert excinfo.value.code == grpc.StatusCode.NOT_FOUND
            assert excinfo.value.reason is ErrorReason.RESOURCE_NOT_FOUND and excinfo.value.domain == ERROR_DOMAIN

            with pytest.raises(ConvergeError) as excinfo:
                await client.apply_resource("conf-leaf", unique("invalid"), {"sleepMs": "slow", "unknown": 1})
            err = excinfo.value
            assert err.code == grpc.StatusCode.INVALID_ARGUMENT and err.reason
            by_field = {v.field: v.description for v in err.field_violations}
            assert "/spec/sleepMs" in by_field, err.field_violations
            assert "unknown" in by_field.get("/spec", ""), err.field_violations

            deleted = await client.delete_resource("conf-leaf", names[2])
            assert deleted is not None and deleted.phase == resource_pb2.PHASE_DELETING
            assert await client.delete_resource("conf-leaf", unique("never"), allow_missing=True) is None

    asyncio.run(main())


def test_watch_resumes_from_a_resource_version():
    addr = require_server()
    run = unique("watch")
    name = unique("watched")

    async def next_change(watch_iter):
        # Skip bookmarks; a change to our one resource is what we wait for.
        while True:
            message = await asyncio.wait_for(watch_iter.__anext__(), timeout=30)
            if message.type != resource_pb2.WATCH_EVENT_TYPE_BOOKMARK:
                return message

    async def main():
        async with AsyncConvergeClient(addr) as client:
            await apply_conformance_kinds(client)
            await client.apply_resource("conf-leaf", name, {"value": 1}, labels={"py-run": run})
            async with client.watch_resources(kind="conf-leaf", label_selector=f"py-run={run}") as watch:
                it = watch.__aiter__()
                added = await next_change(it)
                assert added.type == resource_pb2.WATCH_EVENT_TYPE_ADDED and added.resource.name == name
                end = await asyncio.wait_for(it.__anext__(), timeout=30)
                assert end.type == resource_pb2.WATCH_EVENT_TYPE_BOOKMARK and end.initial_events_end
                await client.apply_resource("conf-leaf", name, {"value": 2}, labels={"py-run": run})
                modified = await next_change(it)
                assert modified.type == resource_pb2.WATCH_EVENT_TYPE_MODIFIED and dict(modified.resource.spec) == {
                    "value": 2
                }
                position = watch.resource_version
                assert position == modified.resource_version
            # A change made while nobody watches is delivered on resume, and
            # nothing before the saved position is repeated.
            await client.apply_resource("conf-leaf", name, {"value": 3}, labels={"py-run": run})
            async with client.watch_resources(
                label_selector=f"py-run={run}", kind="conf-leaf", resource_version=position
            ) as watch:
                resumed = await next_change(watch.__aiter__())
                assert resumed.type == resource_pb2.WATCH_EVENT_TYPE_MODIFIED and dict(resumed.resource.spec) == {
                    "value": 3
                }

    asyncio.run(main())
