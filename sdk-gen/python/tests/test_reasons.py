"""ErrorReason is the generated enum converge.v1.ErrorReason as Python
members: the same set in both directions, each valued by its wire string."""

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from converge_sdk import ConvergeError, ErrorReason, error_reason, has_reason
from converge_sdk.gen.converge.v1 import error_reason_pb2


def test_members_are_the_generated_enum_and_only_those():
    generated = {name: number for name, number in error_reason_pb2.ErrorReason.items()}
    assert len(generated) > 50, generated
    members = {"ERROR_REASON_" + (m.value or "UNSPECIFIED"): m.number for m in ErrorReason}
    assert members == generated
    for member in ErrorReason:
        assert member.value == member.name or member is ErrorReason.UNSPECIFIED
        assert ErrorReason.from_number(member.number) is member
        assert ErrorReason.parse(member.value) is member
        assert str(member) == f"{member}" == member.value


#: A string a newer server might send that this SDK does not know.
FROM_THE_FUTURE = "ADDED_BY_A_NEWER_SERVER"


def test_unknown_reasons_are_unspecified():
    # One a newer server might send, a full value name (prefix included), the zero value's name.
    for sent in (FROM_THE_FUTURE, error_reason_pb2.ErrorReason.Name(13), "UNSPECIFIED"):
        assert ErrorReason.parse(sent) is ErrorReason.UNSPECIFIED
    assert ErrorReason.from_number(10_000) is ErrorReason.UNSPECIFIED
    err = ConvergeError(grpc.StatusCode.UNAVAILABLE, "x", reason=FROM_THE_FUTURE)
    assert err.reason == FROM_THE_FUTURE and err.error_reason is ErrorReason.UNSPECIFIED


class _RpcError(grpc.RpcError):
    def __init__(self, status: status_pb2.Status):
        self._status = status

    def code(self):
        return grpc.StatusCode.ABORTED

    def details(self):
        return self._status.message

    def trailing_metadata(self):
        return (("grpc-status-details-bin", self._status.SerializeToString()),)


def test_has_reason_reads_raw_errors_converge_errors_and_causes():
    packed = any_pb2.Any()
    packed.Pack(error_details_pb2.ErrorInfo(reason=ErrorReason.ETAG_MISMATCH.value, domain="converge.dev"))
    raw = _RpcError(status_pb2.Status(code=10, message="stale", details=[packed]))
    decoded = ConvergeError.from_rpc_error(raw)
    with pytest.raises(RuntimeError) as excinfo:
        try:
            raise decoded
        except ConvergeError as err:
            raise RuntimeError("apply failed") from err
    for err in (raw, decoded, excinfo.value):
        assert error_reason(err) is ErrorReason.ETAG_MISMATCH
        assert has_reason(err, ErrorReason.ETAG_MISMATCH)
        assert not has_reason(err, ErrorReason.NAME_TAKEN)
        assert not has_reason(err, ErrorReason.UNSPECIFIED)
    assert error_reason(ValueError("plain")) is ErrorReason.UNSPECIFIED
