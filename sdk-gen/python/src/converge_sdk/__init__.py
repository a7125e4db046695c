"""Python client for the converge gRPC API.

Generated messages and stubs live under ``converge_sdk.gen`` (mirroring the proto
packages: ``converge_sdk.gen.converge.v1``, ``converge_sdk.gen.converge.worker.v1``);
google.rpc types come from ``googleapis-common-protos`` (``google.rpc``).

- :class:`ConvergeClient`: blocking stubs for every service, plus the
  operator's helpers (explain, fleet summary, actions, reactor deliveries);
- :class:`AsyncConvergeClient` (``converge_sdk.aio``): asyncio stubs plus
  apply / get / list / watch / delete and the operator's helpers, raising
  :class:`ConvergeError`;
- ``converge_sdk.worker``: the worker runtime that serves kinds for a broker;
- ``converge_sdk.conformance``: the SDK conformance worker.
"""

__version__ = "0.1.0"

from converge_sdk.aio import AsyncConvergeClient, ResourceWatch
from converge_sdk.client import ConvergeClient
from converge_sdk.errors import (
    ERROR_DOMAIN,
    ConvergeError,
    FieldViolation,
    error_info,
    error_reason,
    error_status,
    has_reason,
)
from converge_sdk.reasons import ErrorReason

__all__ = [
    "ERROR_DOMAIN",
    "AsyncConvergeClient",
    "ConvergeClient",
    "ConvergeError",
    "ErrorReason",
    "FieldViolation",
    "ResourceWatch",
    "__version__",
    "error_info",
    "error_reason",
    "error_status",
    "has_reason",
]
