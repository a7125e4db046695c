"""Tests against a running converge server whose address is in CONVERGE_ADDR
(sdk-gen/test starts one). Without CONVERGE_ADDR they are skipped."""

import os

import grpc
import pytest

from converge_sdk import ERROR_DOMAIN, ConvergeClient, ErrorReason, error_info, has_reason
from converge_sdk.gen.converge.v1 import (
    cluster_service_pb2,
    operation_service_pb2,
    resource_service_pb2,
)

ADDR = os.environ.get("CONVERGE_ADDR", "")
TIMEOUT = 10.0


@pytest.fixture(scope="module")
def client():
    if not ADDR:
        pytest.skip("CONVERGE_ADDR is not set: start a converge server and set it (sdk-gen/test does)")
    with ConvergeClient(ADDR) as c:
        yield c


def test_get_version(client):
    resp = client.cluster.GetVersion(cluster_service_pb2.GetVersionRequest(), timeout=TIMEOUT)
    assert resp.version
    assert "converge.v1" in resp.api_versions


def test_list_cluster_members(client):
    resp = client.cluster.ListClusterMembers(cluster_service_pb2.ListClusterMembersRequest(), timeout=TIMEOUT)
    assert len(resp.members) == 1
    assert resp.members[0].ready
    assert resp.members[0].member_id


def test_malformed_operation_uid_carries_error_info(client):
    # An operation uid that is not a UUID: INVALID_ARGUMENT with ErrorReason.INVALID_FIELD.
    with pytest.raises(grpc.RpcError) as excinfo:
        client.operation.GetOperation(operation_service_pb2.GetOperationRequest(uid="y"), timeout=TIMEOUT)
    err = excinfo.value
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
    info = error_info(err)
    assert info is not None, f"no google.rpc.ErrorInfo in {err!r}"
    assert ErrorReason.parse(info.reason) is ErrorReason.INVALID_FIELD, info.reason
    assert has_reason(err, ErrorReason.INVALID_FIELD)
    assert info.domain == ERROR_DOMAIN


def test_get_missing_resource_carries_error_info(client):
    # A resource that does not exist: NOT_FOUND with ErrorReason.RESOURCE_NOT_FOUND.
    with pytest.raises(grpc.RpcError) as excinfo:
        client.resource.GetResource(resource_service_pb2.GetResourceRequest(kind="x", name="y"), timeout=TIMEOUT)
    err = excinfo.value
    assert err.code() == grpc.StatusCode.NOT_FOUND, err
    info = error_info(err)
    assert info is not None, f"no google.rpc.ErrorInfo in {err!r}"
    assert info.domain == ERROR_DOMAIN
    assert has_reason(err, ErrorReason.RESOURCE_NOT_FOUND), info.reason


def test_error_info_absent_on_plain_errors():
    assert error_info(ValueError("not an RPC error")) is None


def test_all_services_exposed():
    client = ConvergeClient("127.0.0.1:1")  # no connection is made until a call
    try:
        for name in ("resource", "operation", "kind", "provider_config", "reactor_binding", "cluster", "worker"):
            assert getattr(client, name) is not None
    finally:
        client.close()
