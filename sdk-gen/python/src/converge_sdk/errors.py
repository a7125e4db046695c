"""converge errors decoded into one typed exception.

converge answers a failed call with a ``google.rpc.Status`` in the
``grpc-status-details-bin`` trailer holding exactly one ``ErrorInfo``
(domain ``converge.dev``, an UPPER_SNAKE reason, metadata) and, for schema
and field errors, a ``BadRequest`` with one violation per JSON pointer.
:class:`ConvergeError` carries all of it. Reasons are compared as
:class:`~converge_sdk.reasons.ErrorReason` members (the proto enum
``converge.v1.ErrorReason``), never as hand-written strings: see
:func:`has_reason`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Union

import grpc
from google.rpc import error_details_pb2, status_pb2

from converge_sdk.reasons import ErrorReason

#: Domain of the google.rpc.ErrorInfo that converge attaches to its errors.
ERROR_DOMAIN = "converge.dev"

_STATUS_DETAILS_KEY = "grpc-status-details-bin"


def error_status(err: BaseException) -> Optional[status_pb2.Status]:
    """The google.rpc.Status carried by a failed call, or None.

    Reads the ``grpc-status-details-bin`` trailer of a ``grpc.RpcError``
    (sync or ``grpc.aio``) raised by a stub call.
    """
    trailing_metadata = getattr(err, "trailing_metadata", None)
    if not callable(trailing_metadata):
        return None
    for key, value in trailing_metadata() or ():
        if key == _STATUS_DETAILS_KEY:
            return status_pb2.Status.FromString(value)
    return None


def error_info(err: BaseException) -> Optional[error_details_pb2.ErrorInfo]:
    """The google.rpc.ErrorInfo (reason, domain, metadata) of a failed call,
    or None."""
    status = error_status(err)
    if status is None:
        return None
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info
    return None


@dataclass(frozen=True)
class FieldViolation:
    """One ``google.rpc.BadRequest`` field violation: ``field`` is a JSON
    pointer into the request (e.g. ``/spec/replicas``)."""

    field: str
    description: str
    #: UPPER_SNAKE reason of the violation; may be empty.
    reason: str = ""


class ConvergeError(Exception):
    """A failed converge call: the gRPC code and message, and the decoded
    ErrorInfo and BadRequest details when the server sent them. The original
    ``grpc.RpcError`` is the ``__cause__``."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        reason: Union[ErrorReason, str] = ErrorReason.UNSPECIFIED,
        domain: str = "",
        metadata: Optional[Dict[str, str]] = None,
        field_violations: Optional[List[FieldViolation]] = None,
        retry_delay: Optional[float] = None,
    ) -> None:
        super().__init__(f"{code.name}: {message}" + (f" ({reason})" if reason else ""))
        #: The gRPC status code.
        self.code = code
        #: The server's message.
        self.message = message
        #: ErrorInfo reason: the :class:`ErrorReason` member when this SDK
        #: knows it (``err.reason is ErrorReason.RESOURCE_NOT_FOUND``), else
        #: the string as sent; ``ErrorReason.UNSPECIFIED`` (``""``) when absent.
        known = ErrorReason.parse(reason)
        self.reason: str = known if known is not ErrorReason.UNSPECIFIED or not reason else str(reason)
        #: ErrorInfo domain (``converge.dev`` for converge's own errors).
        self.domain = domain
        #: ErrorInfo metadata.
        self.metadata: Dict[str, str] = dict(metadata or {})
        #: BadRequest field violations, in the server's order.
        self.field_violations: List[FieldViolation] = list(field_violations or [])
        #: Seconds to wait before retrying (RetryInfo), when the server said.
        self.retry_delay = retry_delay

    @property
    def error_reason(self) -> ErrorReason:
        """The reason as an :class:`ErrorReason`; ``UNSPECIFIED`` when there
        is none or this SDK does not know it."""
        return ErrorReason.parse(self.reason)

    @classmethod
    def from_rpc_error(cls, err: grpc.RpcError) -> "ConvergeError":
        """Decodes a failed call (sync or ``grpc.aio``)."""
        code_fn = getattr(err, "code", None)
        details_fn = getattr(err, "details", None)
        code = code_fn() if callable(code_fn) else grpc.StatusCode.UNKNOWN
        message = (details_fn() if callable(details_fn) else None) or str(err)
        reason, domain, metadata = "", "", {}
        violations: List[FieldViolation] = []
        retry_delay: Optional[float] = None
        status = error_status(err)
        for detail in status.details if status is not None else ():
            info = error_details_pb2.ErrorInfo()
            bad = error_details_pb2.BadRequest()
            retry = error_details_pb2.RetryInfo()
            if detail.Unpack(info):
                reason, domain, metadata = info.reason, info.domain, dict(info.metadata)
            elif detail.Unpack(bad):
                violations.extend(
                    FieldViolation(field=v.field, description=v.description, reason=v.reason)
                    for v in bad.field_violations
                )
            elif detail.Unpack(retry):
                retry_delay = retry.retry_delay.seconds + retry.retry_delay.nanos / 1e9
        error = cls(
            code,
            message,
            reason=reason,
            domain=domain,
            metadata=metadata,
            field_violations=violations,
            retry_delay=retry_delay,
        )
        error.__cause__ = err
        return error


def error_reason(err: BaseException) -> ErrorReason:
    """The :class:`ErrorReason` of a failed call: a :class:`ConvergeError`,
    a raw ``grpc.RpcError`` (sync or ``grpc.aio``), or an exception raised
    from one (its ``__cause__`` chain is followed). ``UNSPECIFIED`` when
    none carries a reason this SDK knows."""
    seen: Optional[BaseException] = err
    for _ in range(32):  # a cause chain is short; never loop forever
        if seen is None:
            break
        if isinstance(seen, ConvergeError):
            return seen.error_reason
        info = error_info(seen)
        if info is not None:
            return ErrorReason.parse(info.reason)
        seen = seen.__cause__
    return ErrorReason.UNSPECIFIED


def has_reason(err: BaseException, reason: ErrorReason) -> bool:
    """Whether a failed call (see :func:`error_reason`) carries ``reason``,
    e.g. ``has_reason(err, ErrorReason.RESOURCE_NOT_FOUND)``. Always false
    for ``ErrorReason.UNSPECIFIED``."""
    return reason is not ErrorReason.UNSPECIFIED and error_reason(err) is reason
