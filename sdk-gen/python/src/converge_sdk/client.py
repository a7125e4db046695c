"""A thin client over the generated converge stubs.

>>> from converge_sdk import ConvergeClient, error_info
>>> from converge_sdk.gen.converge.v1 import cluster_service_pb2
>>> with ConvergeClient("127.0.0.1:50051") as client:
...     version = client.cluster.GetVersion(cluster_service_pb2.GetVersionRequest())
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import grpc

from converge_sdk.errors import ERROR_DOMAIN, error_info, error_status
from converge_sdk.gen.converge.v1 import (
    admin_service_pb2_grpc,
    cluster_service_pb2_grpc,
    kind_service_pb2_grpc,
    operation_service_pb2_grpc,
    provider_config_service_pb2_grpc,
    reactor_binding_service_pb2_grpc,
    resource_service_pb2_grpc,
)
from converge_sdk.gen.converge.worker.v1 import worker_pb2_grpc

# error_info and friends moved to converge_sdk.errors; re-exported here for
# code that imported them from this module.
__all__ = ["ERROR_DOMAIN", "ConvergeClient", "error_info", "error_status"]


class ConvergeClient:
    """Typed stubs for every converge service over one gRPC channel.

    ``target`` is a gRPC target such as ``"127.0.0.1:50051"``. The channel is
    plaintext unless ``credentials`` (``grpc.ssl_channel_credentials(...)``) is
    given; pass ``channel`` instead to use one you built yourself (it is then
    yours to close). ``options`` are gRPC channel arguments.
    """

    def __init__(
        self,
        target: Optional[str] = None,
        *,
        credentials: Optional[grpc.ChannelCredentials] = None,
        options: Optional[Sequence[Tuple[str, object]]] = None,
        channel: Optional[grpc.Channel] = None,
    ) -> None:
        if channel is None:
            if target is None:
                raise ValueError("either target or channel is required")
            if credentials is None:
                channel = grpc.insecure_channel(target, options=options)
            else:
                channel = grpc.secure_channel(target, credentials, options=options)
            self._owns_channel = True
        else:
            self._owns_channel = False
        self.channel: grpc.Channel = channel

        self.resource = resource_service_pb2_grpc.ResourceServiceStub(channel)
        self.operation = operation_service_pb2_grpc.OperationServiceStub(channel)
        self.kind = kind_service_pb2_grpc.KindServiceStub(channel)
        self.provider_config = provider_config_service_pb2_grpc.ProviderConfigServiceStub(channel)
        self.reactor_binding = reactor_binding_service_pb2_grpc.ReactorBindingServiceStub(channel)
        self.admin = admin_service_pb2_grpc.AdminServiceStub(channel)
        self.cluster = cluster_service_pb2_grpc.ClusterServiceStub(channel)
        self.worker = worker_pb2_grpc.WorkerServiceStub(channel)

    def close(self) -> None:
        """Close the channel if this client created it."""
        if self._owns_channel:
            self.channel.close()

    def __enter__(self) -> "ConvergeClient":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
