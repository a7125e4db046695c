"""A thin client over the generated converge stubs.

>>> from converge_sdk import ConvergeClient, error_info
>>> from converge_sdk.gen.converge.v1 import cluster_service_pb2
>>> with ConvergeClient("127.0.0.1:50051") as client:
...     version = client.cluster.GetVersion(cluster_service_pb2.GetVersionRequest())
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Optional, Sequence, Tuple, TypeVar

import grpc

from converge_sdk import _operator
from converge_sdk.errors import ERROR_DOMAIN, ConvergeError, error_info, error_status
from converge_sdk.gen.converge.v1 import (
    admin_service_pb2,
    admin_service_pb2_grpc,
    cluster_service_pb2_grpc,
    kind_service_pb2_grpc,
    operation_service_pb2_grpc,
    provider_config_service_pb2_grpc,
    reactor_binding_service_pb2,
    reactor_binding_service_pb2_grpc,
    resource_pb2,
    resource_service_pb2,
    resource_service_pb2_grpc,
)
from converge_sdk.gen.converge.worker.v1 import worker_pb2_grpc

# error_info and friends moved to converge_sdk.errors; re-exported here for
# code that imported them from this module.
__all__ = ["ERROR_DOMAIN", "ConvergeClient", "error_info", "error_status"]

_T = TypeVar("_T")


def _call(call: Callable[[], _T]) -> _T:
    try:
        return call()
    except grpc.RpcError as err:
        raise ConvergeError.from_rpc_error(err) from err


class ConvergeClient:
    """Typed stubs for every converge service over one gRPC channel.

    ``target`` is a gRPC target such as ``"127.0.0.1:50051"``. The channel is
    plaintext unless ``credentials`` (``grpc.ssl_channel_credentials(...)``) is
    given; pass ``channel`` instead to use one you built yourself (it is then
    yours to close). ``options`` are gRPC channel arguments.

    The raw stubs are attributes (``client.resource``, ``client.admin``, ...);
    the operator's helpers (:meth:`explain_resource`, :meth:`get_fleet_summary`,
    :meth:`act_on_resources`, :meth:`list_reactor_deliveries`,
    :meth:`redrive_reactor_deliveries` and the paging ``*_all_*`` forms) raise
    :class:`~converge_sdk.errors.ConvergeError`, each call bounded by
    ``timeout`` seconds (``None`` = unbounded), as those of
    :class:`~converge_sdk.aio.AsyncConvergeClient`.
    """

    def __init__(
        self,
        target: Optional[str] = None,
        *,
        credentials: Optional[grpc.ChannelCredentials] = None,
        options: Optional[Sequence[Tuple[str, object]]] = None,
        channel: Optional[grpc.Channel] = None,
        timeout: Optional[float] = 30.0,
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
        self.timeout = timeout

        self.resource = resource_service_pb2_grpc.ResourceServiceStub(channel)
        self.operation = operation_service_pb2_grpc.OperationServiceStub(channel)
        self.kind = kind_service_pb2_grpc.KindServiceStub(channel)
        self.provider_config = provider_config_service_pb2_grpc.ProviderConfigServiceStub(channel)
        self.reactor_binding = reactor_binding_service_pb2_grpc.ReactorBindingServiceStub(channel)
        self.admin = admin_service_pb2_grpc.AdminServiceStub(channel)
        self.cluster = cluster_service_pb2_grpc.ClusterServiceStub(channel)
        self.worker = worker_pb2_grpc.WorkerServiceStub(channel)

    def explain_resource(self, kind: str, name: str) -> resource_service_pb2.ExplainResourceResponse:
        """What holds a resource back from READY; see
        :meth:`AsyncConvergeClient.explain_resource`."""
        request = _operator.explain(kind, name)
        response: resource_service_pb2.ExplainResourceResponse = _call(
            lambda: self.resource.ExplainResource(request, timeout=self.timeout)
        )
        return response

    def get_fleet_summary(
        self,
        *,
        kind: Optional[str] = None,
        label_selector: str = "",
        fresh: bool = False,
        top_failures: int = 0,
    ) -> admin_service_pb2.GetFleetSummaryResponse:
        """The fleet summary; see :meth:`AsyncConvergeClient.get_fleet_summary`."""
        request = _operator.fleet_summary(kind, label_selector, fresh, top_failures)
        response: admin_service_pb2.GetFleetSummaryResponse = _call(
            lambda: self.admin.GetFleetSummary(request, timeout=self.timeout)
        )
        return response

    def act_on_resources(
        self,
        action: "admin_service_pb2.ResourceAction",
        kind: str,
        *,
        reason: str,
        name: str = "",
        label_selector: str = "",
        phases: Iterable["resource_pb2.Phase"] = (),
        validate_only: bool = False,
        page_size: int = 0,
        page_token: str = "",
        request_id: str = "",
    ) -> admin_service_pb2.ActOnResourcesResponse:
        """One call of ``ActOnResources``; see
        :meth:`AsyncConvergeClient.act_on_resources`."""
        request = _operator.act(
            action,
            kind,
            reason=reason,
            name=name,
            label_selector=label_selector,
            phases=phases,
            validate_only=validate_only,
            page_size=page_size,
            page_token=page_token,
            request_id=request_id,
        )
        response: admin_service_pb2.ActOnResourcesResponse = _call(
            lambda: self.admin.ActOnResources(request, timeout=self.timeout)
        )
        return response

    def act_on_all_resources(
        self,
        action: "admin_service_pb2.ResourceAction",
        kind: str,
        *,
        reason: str,
        label_selector: str = "",
        phases: Iterable["resource_pb2.Phase"] = (),
        validate_only: bool = False,
        page_size: int = 0,
        page_token: str = "",
        request_id: str = "",
    ) -> Iterator[admin_service_pb2.ActOnResourcesResponse]:
        """Every page of an action run, following ``next_page_token``; see
        :meth:`AsyncConvergeClient.act_on_all_resources`."""
        phases = list(phases)
        page = 1
        while True:
            response = self.act_on_resources(
                action,
                kind,
                reason=reason,
                label_selector=label_selector,
                phases=phases,
                validate_only=validate_only,
                page_size=page_size,
                page_token=page_token,
                request_id=_operator.page_request_id(request_id, page),
            )
            yield response
            if not response.next_page_token:
                return
            page_token = response.next_page_token
            page += 1

    def list_reactor_deliveries(
        self,
        *,
        binding: Optional[str] = None,
        resource: Optional[Tuple[str, str]] = None,
        resource_uid: Optional[str] = None,
        only_given_up: bool = False,
        page_size: int = 0,
    ) -> Iterator[reactor_binding_service_pb2.ReactorDelivery]:
        """Every matching reactor delivery, oldest first, page by page; see
        :meth:`AsyncConvergeClient.list_reactor_deliveries`."""
        request = _operator.list_deliveries(binding, resource, resource_uid, only_given_up, page_size)
        while True:
            page: reactor_binding_service_pb2.ListReactorDeliveriesResponse = _call(
                lambda: self.reactor_binding.ListReactorDeliveries(request, timeout=self.timeout)
            )
            yield from page.reactor_deliveries
            if not page.next_page_token:
                return
            request.page_token = page.next_page_token

    def redrive_reactor_deliveries(
        self,
        *,
        reason: str,
        delivery_id: Optional[str] = None,
        binding: Optional[str] = None,
        resources: Optional[Tuple[str, str]] = None,
        validate_only: bool = False,
        limit: int = 0,
        page_token: str = "",
        request_id: str = "",
    ) -> reactor_binding_service_pb2.RedriveReactorDeliveriesResponse:
        """One call of ``RedriveReactorDeliveries``; see
        :meth:`AsyncConvergeClient.redrive_reactor_deliveries`."""
        request = _operator.redrive(
            reason=reason,
            delivery_id=delivery_id,
            binding=binding,
            resources=resources,
            validate_only=validate_only,
            limit=limit,
            page_token=page_token,
            request_id=request_id,
        )
        response: reactor_binding_service_pb2.RedriveReactorDeliveriesResponse = _call(
            lambda: self.reactor_binding.RedriveReactorDeliveries(request, timeout=self.timeout)
        )
        return response

    def redrive_all_reactor_deliveries(
        self,
        *,
        reason: str,
        binding: Optional[str] = None,
        resources: Optional[Tuple[str, str]] = None,
        validate_only: bool = False,
        limit: int = 0,
        page_token: str = "",
        request_id: str = "",
    ) -> Iterator[reactor_binding_service_pb2.RedriveReactorDeliveriesResponse]:
        """Every page of a redrive, following ``next_page_token``; see
        :meth:`AsyncConvergeClient.redrive_all_reactor_deliveries`."""
        page = 1
        while True:
            response = self.redrive_reactor_deliveries(
                reason=reason,
                binding=binding,
                resources=resources,
                validate_only=validate_only,
                limit=limit,
                page_token=page_token,
                request_id=_operator.page_request_id(request_id, page),
            )
            yield response
            if not response.next_page_token:
                return
            page_token = response.next_page_token
            page += 1

    def close(self) -> None:
        """Close the channel if this client created it."""
        if self._owns_channel:
            self.channel.close()

    def __enter__(self) -> "ConvergeClient":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
