"""An asyncio client for converge (``grpc.aio``), with helpers for the
common resource calls.

Every helper raises :class:`~converge_sdk.errors.ConvergeError` (gRPC code,
ErrorInfo reason and metadata, BadRequest field violations) instead of the
raw ``grpc.aio.AioRpcError``. The raw stubs are there too for everything
else (``client.resource``, ``client.kind``, ...)::

    async with AsyncConvergeClient("127.0.0.1:50051") as client:
        await client.apply_resource("bucket", "logs", {"region": "eu"})
        resource = await client.get_resource("bucket", "logs")
        async for r in client.list_resources(kind="bucket"):
            print(r.name, r.phase)
"""

from __future__ import annotations

import asyncio
import random
from types import TracebackType
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
)

import grpc
from google.protobuf import json_format, struct_pb2

from converge_sdk import _operator
from converge_sdk.errors import ConvergeError
from converge_sdk.gen.converge.v1 import (
    admin_service_pb2,
    admin_service_pb2_grpc,
    cluster_service_pb2_grpc,
    kind_pb2,
    kind_service_pb2,
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

_T = TypeVar("_T")

#: A spec as a ``dict`` or an already built ``Struct``.
SpecLike = Union[Mapping[str, Any], struct_pb2.Struct]

# Codes after which a watch resumes from its last position: the server shut
# down or lost its database (UNAVAILABLE), or this client read too slowly
# (RESOURCE_EXHAUSTED). Anything else, notably OUT_OF_RANGE (the position
# left the retained log), ends the watch with the error.
_RESUMABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})


def _struct(spec: Optional[SpecLike]) -> Optional[struct_pb2.Struct]:
    if spec is None or isinstance(spec, struct_pb2.Struct):
        return spec
    result = struct_pb2.Struct()
    result.update(spec)
    return result


def _ref(ref: Optional[Tuple[str, str]]) -> Optional[resource_pb2.ResourceRef]:
    return None if ref is None else resource_pb2.ResourceRef(kind=ref[0], name=ref[1])


async def _call(call: Callable[[], Awaitable[_T]]) -> _T:
    try:
        return await call()
    except grpc.aio.AioRpcError as err:
        raise ConvergeError.from_rpc_error(err) from err


class AsyncConvergeClient:
    """Async stubs for every converge service over one ``grpc.aio`` channel,
    plus resource helpers.

    ``target`` is a gRPC target such as ``"127.0.0.1:50051"``; the channel is
    plaintext unless ``credentials`` is given. Pass ``channel`` instead to use
    one you built (it is then yours to close). ``timeout`` bounds each unary
    helper call in seconds (``None`` = unbounded). Create it inside the event
    loop that uses it (in async code), as every ``grpc.aio`` channel.
    """

    def __init__(
        self,
        target: Optional[str] = None,
        *,
        credentials: Optional[grpc.ChannelCredentials] = None,
        options: Optional[Sequence[Tuple[str, Any]]] = None,
        channel: Optional[grpc.aio.Channel] = None,
        timeout: Optional[float] = 30.0,
    ) -> None:
        if channel is None:
            if target is None:
                raise ValueError("either target or channel is required")
            if credentials is None:
                channel = grpc.aio.insecure_channel(target, options=options)
            else:
                channel = grpc.aio.secure_channel(target, credentials, options=options)
            self._owns_channel = True
        else:
            self._owns_channel = False
        self.channel: grpc.aio.Channel = channel
        self.timeout = timeout
        self.resource = resource_service_pb2_grpc.ResourceServiceStub(channel)
        self.operation = operation_service_pb2_grpc.OperationServiceStub(channel)
        self.kind = kind_service_pb2_grpc.KindServiceStub(channel)
        self.provider_config = provider_config_service_pb2_grpc.ProviderConfigServiceStub(channel)
        self.reactor_binding = reactor_binding_service_pb2_grpc.ReactorBindingServiceStub(channel)
        self.admin = admin_service_pb2_grpc.AdminServiceStub(channel)
        self.cluster = cluster_service_pb2_grpc.ClusterServiceStub(channel)
        self.worker = worker_pb2_grpc.WorkerServiceStub(channel)

    async def close(self) -> None:
        """Closes the channel if this client created it."""
        if self._owns_channel:
            await self.channel.close()

    async def __aenter__(self) -> "AsyncConvergeClient":
        return self

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        await self.close()

    async def apply_kind_manifest(
        self, manifest: Union[kind_pb2.KindManifest, Mapping[str, Any]], *, validate_only: bool = False
    ) -> kind_service_pb2.ApplyKindManifestResponse:
        """Stores a kind manifest, given as a message or in its JSON form
        (``{"kind": ..., "kindVersion": ..., "reactions": [...]}``).
        Re-applying the same manifest is a no-op."""
        if not isinstance(manifest, kind_pb2.KindManifest):
            manifest = json_format.ParseDict(dict(manifest), kind_pb2.KindManifest())
        request = kind_service_pb2.ApplyKindManifestRequest(manifest=manifest, validate_only=validate_only)
        response: kind_service_pb2.ApplyKindManifestResponse = await _call(
            lambda: self.kind.ApplyKindManifest(request, timeout=self.timeout)
        )
        return response

    async def apply_resource(
        self,
        kind: str,
        name: str,
        spec: Optional[SpecLike] = None,
        *,
        kind_version: int = 1,
        labels: Optional[Mapping[str, str]] = None,
        provider_config: Optional[str] = None,
        etag: Optional[str] = None,
        request_id: str = "",
        validate_only: bool = False,
    ) -> resource_service_pb2.ApplyResourceResponse:
        """Creates or updates a resource (``response.resource``,
        ``response.created``). ``provider_config``: ``None`` leaves the
        override unchanged, ``""`` detaches it."""
        request = resource_service_pb2.ApplyResourceRequest(
            kind=kind,
            kind_version=kind_version,
            name=name,
            labels=dict(labels or {}),
            spec=_struct(spec),
            request_id=request_id,
            validate_only=validate_only,
            etag=etag,
            provider_config=provider_config,
        )
        response: resource_service_pb2.ApplyResourceResponse = await _call(
            lambda: self.resource.ApplyResource(request, timeout=self.timeout)
        )
        return response

    async def get_resource(self, kind: str, name: str) -> resource_pb2.Resource:
        """Reads one resource, including status and conditions."""
        request = resource_service_pb2.GetResourceRequest(kind=kind, name=name)
        response: resource_service_pb2.GetResourceResponse = await _call(
            lambda: self.resource.GetResource(request, timeout=self.timeout)
        )
        return response.resource

    async def list_resources(
        self,
        *,
        kind: Optional[str] = None,
        kind_version: Optional[int] = None,
        phases: Iterable["resource_pb2.Phase"] = (),
        label_selector: str = "",
        owner: Optional[Tuple[str, str]] = None,
        root: Optional[Tuple[str, str]] = None,
        roots_only: bool = False,
        provider_config: Optional[str] = None,
        page_size: int = 0,
    ) -> AsyncIterator[resource_pb2.Resource]:
        """Every matching resource, newest created first, fetching pages as
        the iteration reaches them. ``owner`` and ``root`` are
        ``(kind, name)`` pairs; ``page_size`` 0 = the server's default."""
        request = resource_service_pb2.ListResourcesRequest(
            kind=kind,
            kind_version=kind_version,
            phases=list(phases),
            label_selector=label_selector,
            owner=_ref(owner),
            root=_ref(root),
            roots_only=roots_only,
            provider_config=provider_config,
            page_size=page_size,
        )
        while True:
            page: resource_service_pb2.ListResourcesResponse = await _call(
                lambda: self.resource.ListResources(request, timeout=self.timeout)
            )
            for resource in page.resources:
                yield resource
            if not page.next_page_token:
                return
            request.page_token = page.next_page_token

    async def delete_resource(
        self,
        kind: str,
        name: str,
        *,
        allow_missing: bool = False,
        etag: Optional[str] = None,
        request_id: str = "",
        validate_only: bool = False,
    ) -> Optional[resource_pb2.Resource]:
        """Requests deletion; returns the resource (now DELETING), or
        ``None`` when ``allow_missing`` is set and it did not exist."""
        request = resource_service_pb2.DeleteResourceRequest(
            kind=kind,
            name=name,
            allow_missing=allow_missing,
            etag=etag,
            request_id=request_id,
            validate_only=validate_only,
        )
        response: resource_service_pb2.DeleteResourceResponse = await _call(
            lambda: self.resource.DeleteResource(request, timeout=self.timeout)
        )
        return response.resource if response.HasField("resource") else None

    def watch_resources(
        self,
        *,
        kind: Optional[str] = None,
        kind_version: Optional[int] = None,
        label_selector: str = "",
        owner: Optional[Tuple[str, str]] = None,
        root: Optional[Tuple[str, str]] = None,
        resource_version: str = "",
        send_initial_events: Optional[bool] = None,
        allow_bookmarks: bool = False,
        max_resumes: int = 10,
    ) -> "ResourceWatch":
        """Streams resource changes; see :class:`ResourceWatch`. With
        ``resource_version`` set it resumes right after that position, with
        no snapshot."""
        request = resource_service_pb2.WatchResourcesRequest(
            kind=kind,
            kind_version=kind_version,
            label_selector=label_selector,
            owner=_ref(owner),
            root=_ref(root),
            resource_version=resource_version,
            send_initial_events=send_initial_events,
            allow_bookmarks=allow_bookmarks,
        )
        return ResourceWatch(self.resource, request, max_resumes=max_resumes)

    async def explain_resource(self, kind: str, name: str) -> resource_service_pb2.ExplainResourceResponse:
        """What holds a resource back from READY (or, while it is deleted,
        from being removed): ``resource``, ``waiting_for`` (most decisive
        first), ``next_due_time`` and ``read_time``."""
        request = _operator.explain(kind, name)
        response: resource_service_pb2.ExplainResourceResponse = await _call(
            lambda: self.resource.ExplainResource(request, timeout=self.timeout)
        )
        return response

    async def get_fleet_summary(
        self,
        *,
        kind: Optional[str] = None,
        label_selector: str = "",
        fresh: bool = False,
        top_failures: int = 0,
    ) -> admin_service_pb2.GetFleetSummaryResponse:
        """Counts of resources by kind, kind version and phase, the most
        common failure reasons, the oldest resource of each unsettled phase
        and the tasks no connected worker serves (``AdminService``)."""
        request = _operator.fleet_summary(kind, label_selector, fresh, top_failures)
        response: admin_service_pb2.GetFleetSummaryResponse = await _call(
            lambda: self.admin.GetFleetSummary(request, timeout=self.timeout)
        )
        return response

    async def act_on_resources(
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
        """One call of ``ActOnResources``: ``action`` on one resource
        (``name``) or on at most ``page_size`` of those the filters match;
        ``next_page_token`` continues the run (see
        :meth:`act_on_all_resources`). ``reason`` is recorded on each
        resource's event and in the audit log."""
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
        response: admin_service_pb2.ActOnResourcesResponse = await _call(
            lambda: self.admin.ActOnResources(request, timeout=self.timeout)
        )
        return response

    async def act_on_all_resources(
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
    ) -> AsyncIterator[admin_service_pb2.ActOnResourcesResponse]:
        """Runs ``action`` on every resource the filters match, one call per
        ``page_size`` resources, following ``next_page_token`` until it is
        empty, and yields each call's answer (``acted_count`` and ``names``
        of that page; ``matched_count`` on the first). With ``request_id``
        the first call uses it and call *n* (from 2) ``request_id + "/n"``,
        so running the same loop again replays the pages already done."""
        phases = list(phases)
        page = 1
        while True:
            response = await self.act_on_resources(
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

    async def list_reactor_deliveries(
        self,
        *,
        binding: Optional[str] = None,
        resource: Optional[Tuple[str, str]] = None,
        resource_uid: Optional[str] = None,
        only_given_up: bool = False,
        page_size: int = 0,
    ) -> AsyncIterator[reactor_binding_service_pb2.ReactorDelivery]:
        """Every recorded reactor delivery (pending and given up) matching
        the filters, oldest first, fetching pages as the iteration reaches
        them. ``resource`` is a ``(kind, name)`` pair."""
        request = _operator.list_deliveries(binding, resource, resource_uid, only_given_up, page_size)
        while True:
            page: reactor_binding_service_pb2.ListReactorDeliveriesResponse = await _call(
                lambda: self.reactor_binding.ListReactorDeliveries(request, timeout=self.timeout)
            )
            for delivery in page.reactor_deliveries:
                yield delivery
            if not page.next_page_token:
                return
            request.page_token = page.next_page_token

    async def redrive_reactor_deliveries(
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
        """One call of ``RedriveReactorDeliveries`` on exactly one target:
        ``delivery_id``, every given-up delivery of ``binding``, or of the
        resources ``(kind, label_selector)`` selects; at most ``limit`` per
        call, ``next_page_token`` continues (see
        :meth:`redrive_all_reactor_deliveries`). One delivery that has not
        given up raises with ``ErrorReason.DELIVERY_NOT_GIVEN_UP``."""
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
        response: reactor_binding_service_pb2.RedriveReactorDeliveriesResponse = await _call(
            lambda: self.reactor_binding.RedriveReactorDeliveries(request, timeout=self.timeout)
        )
        return response

    async def redrive_all_reactor_deliveries(
        self,
        *,
        reason: str,
        binding: Optional[str] = None,
        resources: Optional[Tuple[str, str]] = None,
        validate_only: bool = False,
        limit: int = 0,
        page_token: str = "",
        request_id: str = "",
    ) -> AsyncIterator[reactor_binding_service_pb2.RedriveReactorDeliveriesResponse]:
        """Redrives every given-up delivery of ``binding`` or ``resources``,
        one call per ``limit`` deliveries, following ``next_page_token``
        until it is empty, and yields each call's answer (``count``,
        ``first``). Request ids are derived per page as in
        :meth:`act_on_all_resources`."""
        page = 1
        while True:
            response = await self.redrive_reactor_deliveries(
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


class ResourceWatch:
    """An async iterator of ``WatchResourcesResponse`` messages that resumes
    by itself.

    It remembers the ``resource_version`` of the last message it yielded
    (:attr:`resource_version`). When the stream ends with UNAVAILABLE (server
    shutdown, lost database) or RESOURCE_EXHAUSTED (this client read too
    slowly) it reopens the watch from that position, with no gap, no overlap
    and no new snapshot, after a short jittered backoff; up to
    ``max_resumes`` times in a row (a message received resets the count).
    Any other error, notably OUT_OF_RANGE (``ErrorReason.RESOURCE_VERSION_TOO_OLD``: the
    position left the retained log; start over without a position), ends the
    iteration with :class:`ConvergeError`. Persist :attr:`resource_version`
    to resume in a later process with ``watch_resources(resource_version=...)``.
    Call :meth:`close` (or leave an ``async with`` block) to stop early.
    """

    def __init__(self, stub: Any, request: resource_service_pb2.WatchResourcesRequest, *, max_resumes: int) -> None:
        self._stub = stub
        self._request = request
        self._max_resumes = max_resumes
        self._call: Any = None
        self._closed = False
        #: Position of the last message yielded; empty before the first.
        self.resource_version: str = request.resource_version

    def __aiter__(self) -> AsyncIterator[resource_service_pb2.WatchResourcesResponse]:
        return self._iterate()

    async def __aenter__(self) -> "ResourceWatch":
        return self

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stops the watch."""
        self._closed = True
        if self._call is not None:
            self._call.cancel()

    async def _iterate(self) -> AsyncIterator[resource_service_pb2.WatchResourcesResponse]:
        failures = 0
        request = self._request
        try:
            while not self._closed:
                self._call = self._stub.WatchResources(request)
                try:
                    async for message in self._call:
                        failures = 0
                        self.resource_version = message.resource_version
                        yield message
                    return  # the server ended the stream cleanly
                except asyncio.CancelledError:
                    # close() from another task cancels the call under a
                    # pending read, which ends the iteration; a cancellation
                    # of the consuming task itself propagates.
                    if self._closed and not _being_cancelled():
                        return
                    raise
                except grpc.aio.AioRpcError as err:
                    if self._closed:
                        return
                    if err.code() not in _RESUMABLE or failures >= self._max_resumes:
                        raise ConvergeError.from_rpc_error(err) from err
                    failures += 1
                if self.resource_version:
                    # Resume right after the last position, without a new
                    # snapshot.
                    request = resource_service_pb2.WatchResourcesRequest()
                    request.CopyFrom(self._request)
                    request.resource_version = self.resource_version
                    request.ClearField("send_initial_events")
                # else: nothing was received yet, so the original request
                # (snapshot included, if it asked for one) starts over.
                await asyncio.sleep(min(5.0, 0.1 * 2**failures) * random.uniform(0.5, 1.0))
        finally:
            if self._call is not None and not self._call.done():
                self._call.cancel()


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+
    return bool(cancelling()) if callable(cancelling) else False
