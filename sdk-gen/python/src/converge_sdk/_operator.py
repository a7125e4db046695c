"""Requests of the operator's helpers (ExplainResource, AdminService, the
reactor deliveries), shared by the blocking and the asyncio client."""

from __future__ import annotations

from typing import Iterable, Optional, Tuple

from converge_sdk.gen.converge.v1 import (
    admin_service_pb2,
    reactor_binding_service_pb2,
    resource_pb2,
    resource_service_pb2,
)


def page_request_id(request_id: str, page: int) -> str:
    """The request id of call ``page`` (from 1) of a paged run whose first
    call has ``request_id``: itself for the first call and ``""`` when it is
    empty, else ``request_id + "/" + page``. The server takes at most 128
    bytes, so leave room for the suffix."""
    if not request_id or page <= 1:
        return request_id
    return f"{request_id}/{page}"


def explain(kind: str, name: str) -> resource_service_pb2.ExplainResourceRequest:
    return resource_service_pb2.ExplainResourceRequest(kind=kind, name=name)


def fleet_summary(
    kind: Optional[str], label_selector: str, fresh: bool, top_failures: int
) -> admin_service_pb2.GetFleetSummaryRequest:
    return admin_service_pb2.GetFleetSummaryRequest(
        kind=kind, label_selector=label_selector, fresh=fresh, top_failures=top_failures
    )


def act(
    action: "admin_service_pb2.ResourceAction",
    kind: str,
    *,
    reason: str,
    name: str,
    label_selector: str,
    phases: Iterable["resource_pb2.Phase"],
    validate_only: bool,
    page_size: int,
    page_token: str,
    request_id: str,
) -> admin_service_pb2.ActOnResourcesRequest:
    return admin_service_pb2.ActOnResourcesRequest(
        action=action,
        kind=kind,
        name=name,
        label_selector=label_selector,
        phases=list(phases),
        reason=reason,
        validate_only=validate_only,
        page_size=page_size,
        page_token=page_token,
        request_id=request_id,
    )


def list_deliveries(
    binding: Optional[str],
    resource: Optional[Tuple[str, str]],
    resource_uid: Optional[str],
    only_given_up: bool,
    page_size: int,
) -> reactor_binding_service_pb2.ListReactorDeliveriesRequest:
    return reactor_binding_service_pb2.ListReactorDeliveriesRequest(
        binding=binding,
        resource=None if resource is None else resource_pb2.ResourceRef(kind=resource[0], name=resource[1]),
        resource_uid=resource_uid,
        only_given_up=only_given_up,
        page_size=page_size,
    )


def redrive(
    *,
    reason: str,
    delivery_id: Optional[str],
    binding: Optional[str],
    resources: Optional[Tuple[str, str]],
    validate_only: bool,
    limit: int,
    page_token: str,
    request_id: str,
) -> reactor_binding_service_pb2.RedriveReactorDeliveriesRequest:
    targets = [t for t in (delivery_id, binding, resources) if t is not None]
    if len(targets) != 1:
        raise ValueError("give exactly one of delivery_id, binding and resources")
    request = reactor_binding_service_pb2.RedriveReactorDeliveriesRequest(
        reason=reason, validate_only=validate_only, limit=limit, page_token=page_token, request_id=request_id
    )
    if delivery_id is not None:
        request.delivery_id = delivery_id
    elif binding is not None:
        request.binding = binding
    elif resources is not None:
        request.resources.kind, request.resources.label_selector = resources
    return request
