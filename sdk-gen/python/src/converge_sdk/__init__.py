"""Python client for the converge gRPC API.

Generated messages and stubs live under ``converge_sdk.gen`` (mirroring the proto
packages: ``converge_sdk.gen.converge.v1``, ``converge_sdk.gen.converge.worker.v1``);
google.rpc types come from ``googleapis-common-protos`` (``google.rpc``).
"""

__version__ = "0.1.0"

from converge_sdk.client import ERROR_DOMAIN, ConvergeClient, error_info, error_status

__all__ = ["ERROR_DOMAIN", "ConvergeClient", "error_info", "error_status"]
