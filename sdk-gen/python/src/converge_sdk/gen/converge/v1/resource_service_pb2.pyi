import datetime

from converge_sdk.gen.converge.v1 import plan_pb2 as _plan_pb2
from converge_sdk.gen.converge.v1 import resource_pb2 as _resource_pb2
from google.api import field_behavior_pb2 as _field_behavior_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PlanResourceRequest(_message.Message):
    __slots__ = ("apply", "delete", "max_depth", "compose_timeout")
    APPLY_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    MAX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    COMPOSE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    apply: ApplyResourceRequest
    delete: _resource_pb2.ResourceRef
    max_depth: int
    compose_timeout: _duration_pb2.Duration
    def __init__(self, apply: _Optional[_Union[ApplyResourceRequest, _Mapping]] = ..., delete: _Optional[_Union[_resource_pb2.ResourceRef, _Mapping]] = ..., max_depth: _Optional[int] = ..., compose_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class PlanResourceResponse(_message.Message):
    __slots__ = ("plan", "changes")
    PLAN_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    plan: _plan_pb2.ResourcePlan
    changes: bool
    def __init__(self, plan: _Optional[_Union[_plan_pb2.ResourcePlan, _Mapping]] = ..., changes: _Optional[bool] = ...) -> None: ...

class PlanResourcesRequest(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[PlanResourceRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[PlanResourceRequest, _Mapping]]] = ...) -> None: ...

class PlanResourcesResponse(_message.Message):
    __slots__ = ("plans",)
    PLANS_FIELD_NUMBER: _ClassVar[int]
    plans: _containers.RepeatedCompositeFieldContainer[PlanResourceResponse]
    def __init__(self, plans: _Optional[_Iterable[_Union[PlanResourceResponse, _Mapping]]] = ...) -> None: ...

class ApplyResourceRequest(_message.Message):
    __slots__ = ("kind", "kind_version", "name", "labels", "spec", "request_id", "validate_only", "etag", "provider_config")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_CONFIG_FIELD_NUMBER: _ClassVar[int]
    kind: str
    kind_version: int
    name: str
    labels: _containers.ScalarMap[str, str]
    spec: _struct_pb2.Struct
    request_id: str
    validate_only: bool
    etag: str
    provider_config: str
    def __init__(self, kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., spec: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., request_id: _Optional[str] = ..., validate_only: _Optional[bool] = ..., etag: _Optional[str] = ..., provider_config: _Optional[str] = ...) -> None: ...

class ApplyResourceResponse(_message.Message):
    __slots__ = ("resource", "created")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    resource: _resource_pb2.Resource
    created: bool
    def __init__(self, resource: _Optional[_Union[_resource_pb2.Resource, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class BatchApplyResourcesRequest(_message.Message):
    __slots__ = ("requests", "request_id", "validate_only")
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[ApplyResourceRequest]
    request_id: str
    validate_only: bool
    def __init__(self, requests: _Optional[_Iterable[_Union[ApplyResourceRequest, _Mapping]]] = ..., request_id: _Optional[str] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class BatchApplyResourcesResponse(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[ApplyResourceResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[ApplyResourceResponse, _Mapping]]] = ...) -> None: ...

class CreateResourceRequest(_message.Message):
    __slots__ = ("kind", "kind_version", "name", "labels", "spec", "request_id", "validate_only", "provider_config", "generate_name")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_CONFIG_FIELD_NUMBER: _ClassVar[int]
    GENERATE_NAME_FIELD_NUMBER: _ClassVar[int]
    kind: str
    kind_version: int
    name: str
    labels: _containers.ScalarMap[str, str]
    spec: _struct_pb2.Struct
    request_id: str
    validate_only: bool
    provider_config: str
    generate_name: str
    def __init__(self, kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., spec: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., request_id: _Optional[str] = ..., validate_only: _Optional[bool] = ..., provider_config: _Optional[str] = ..., generate_name: _Optional[str] = ...) -> None: ...

class CreateResourceResponse(_message.Message):
    __slots__ = ("resource",)
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    resource: _resource_pb2.Resource
    def __init__(self, resource: _Optional[_Union[_resource_pb2.Resource, _Mapping]] = ...) -> None: ...

class GetResourceRequest(_message.Message):
    __slots__ = ("kind", "name")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class GetResourceResponse(_message.Message):
    __slots__ = ("resource",)
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    resource: _resource_pb2.Resource
    def __init__(self, resource: _Optional[_Union[_resource_pb2.Resource, _Mapping]] = ...) -> None: ...

class ExplainResourceRequest(_message.Message):
    __slots__ = ("kind", "name")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ExplainResourceResponse(_message.Message):
    __slots__ = ("resource", "waiting_for", "next_due_time", "read_time")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    WAITING_FOR_FIELD_NUMBER: _ClassVar[int]
    NEXT_DUE_TIME_FIELD_NUMBER: _ClassVar[int]
    READ_TIME_FIELD_NUMBER: _ClassVar[int]
    resource: _resource_pb2.Resource
    waiting_for: _containers.RepeatedCompositeFieldContainer[_resource_pb2.Wait]
    next_due_time: _timestamp_pb2.Timestamp
    read_time: _timestamp_pb2.Timestamp
    def __init__(self, resource: _Optional[_Union[_resource_pb2.Resource, _Mapping]] = ..., waiting_for: _Optional[_Iterable[_Union[_resource_pb2.Wait, _Mapping]]] = ..., next_due_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., read_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListResourcesRequest(_message.Message):
    __slots__ = ("kind", "kind_version", "phases", "label_selector", "owner", "root", "roots_only", "page_size", "page_token", "provider_config")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    PHASES_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    ROOT_FIELD_NUMBER: _ClassVar[int]
    ROOTS_ONLY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_CONFIG_FIELD_NUMBER: _ClassVar[int]
    kind: str
    kind_version: int
    phases: _containers.RepeatedScalarFieldContainer[_resource_pb2.Phase]
    label_selector: str
    owner: _resource_pb2.ResourceRef
    root: _resource_pb2.ResourceRef
    roots_only: bool
    page_size: int
    page_token: str
    provider_config: str
    def __init__(self, kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., phases: _Optional[_Iterable[_Union[_resource_pb2.Phase, str]]] = ..., label_selector: _Optional[str] = ..., owner: _Optional[_Union[_resource_pb2.ResourceRef, _Mapping]] = ..., root: _Optional[_Union[_resource_pb2.ResourceRef, _Mapping]] = ..., roots_only: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., provider_config: _Optional[str] = ...) -> None: ...

class ListResourcesResponse(_message.Message):
    __slots__ = ("resources", "next_page_token")
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    resources: _containers.RepeatedCompositeFieldContainer[_resource_pb2.Resource]
    next_page_token: str
    def __init__(self, resources: _Optional[_Iterable[_Union[_resource_pb2.Resource, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteResourceRequest(_message.Message):
    __slots__ = ("kind", "name", "allow_missing", "request_id", "etag", "validate_only")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ALLOW_MISSING_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    allow_missing: bool
    request_id: str
    etag: str
    validate_only: bool
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., allow_missing: _Optional[bool] = ..., request_id: _Optional[str] = ..., etag: _Optional[str] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class DeleteResourceResponse(_message.Message):
    __slots__ = ("resource",)
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    resource: _resource_pb2.Resource
    def __init__(self, resource: _Optional[_Union[_resource_pb2.Resource, _Mapping]] = ...) -> None: ...

class WatchResourcesRequest(_message.Message):
    __slots__ = ("kind", "kind_version", "label_selector", "owner", "root", "resource_version", "send_initial_events", "allow_bookmarks", "name")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    ROOT_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    SEND_INITIAL_EVENTS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_BOOKMARKS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    kind: str
    kind_version: int
    label_selector: str
    owner: _resource_pb2.ResourceRef
    root: _resource_pb2.ResourceRef
    resource_version: str
    send_initial_events: bool
    allow_bookmarks: bool
    name: str
    def __init__(self, kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., label_selector: _Optional[str] = ..., owner: _Optional[_Union[_resource_pb2.ResourceRef, _Mapping]] = ..., root: _Optional[_Union[_resource_pb2.ResourceRef, _Mapping]] = ..., resource_version: _Optional[str] = ..., send_initial_events: _Optional[bool] = ..., allow_bookmarks: _Optional[bool] = ..., name: _Optional[str] = ...) -> None: ...

class WatchResourcesResponse(_message.Message):
    __slots__ = ("type", "resource", "resource_version", "initial_events_end")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    INITIAL_EVENTS_END_FIELD_NUMBER: _ClassVar[int]
    type: _resource_pb2.WatchEventType
    resource: _resource_pb2.Resource
    resource_version: str
    initial_events_end: bool
    def __init__(self, type: _Optional[_Union[_resource_pb2.WatchEventType, str]] = ..., resource: _Optional[_Union[_resource_pb2.Resource, _Mapping]] = ..., resource_version: _Optional[str] = ..., initial_events_end: _Optional[bool] = ...) -> None: ...

class ReconcileResourceRequest(_message.Message):
    __slots__ = ("kind", "name", "reset_backoff", "request_id")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    RESET_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    reset_backoff: bool
    request_id: str
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., reset_backoff: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class ReconcileResourceResponse(_message.Message):
    __slots__ = ("resource",)
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    resource: _resource_pb2.Resource
    def __init__(self, resource: _Optional[_Union[_resource_pb2.Resource, _Mapping]] = ...) -> None: ...

class QuarantineResourceRequest(_message.Message):
    __slots__ = ("kind", "name", "message", "request_id")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    message: str
    request_id: str
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., message: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class QuarantineResourceResponse(_message.Message):
    __slots__ = ("resource",)
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    resource: _resource_pb2.Resource
    def __init__(self, resource: _Optional[_Union[_resource_pb2.Resource, _Mapping]] = ...) -> None: ...

class UnquarantineResourceRequest(_message.Message):
    __slots__ = ("kind", "name", "message", "request_id")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    message: str
    request_id: str
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., message: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class UnquarantineResourceResponse(_message.Message):
    __slots__ = ("resource",)
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    resource: _resource_pb2.Resource
    def __init__(self, resource: _Optional[_Union[_resource_pb2.Resource, _Mapping]] = ...) -> None: ...

class ListResourceEventsRequest(_message.Message):
    __slots__ = ("kind", "name", "category", "type", "reason", "since", "page_size", "page_token")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    category: str
    type: _resource_pb2.EventType
    reason: str
    since: _timestamp_pb2.Timestamp
    page_size: int
    page_token: str
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., category: _Optional[str] = ..., type: _Optional[_Union[_resource_pb2.EventType, str]] = ..., reason: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListResourceEventsResponse(_message.Message):
    __slots__ = ("events", "next_page_token")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_resource_pb2.ResourceEvent]
    next_page_token: str
    def __init__(self, events: _Optional[_Iterable[_Union[_resource_pb2.ResourceEvent, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WatchResourceEventsRequest(_message.Message):
    __slots__ = ("kind", "name", "category", "event_version", "snapshot_limit", "allow_bookmarks")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    EVENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_LIMIT_FIELD_NUMBER: _ClassVar[int]
    ALLOW_BOOKMARKS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    category: str
    event_version: str
    snapshot_limit: int
    allow_bookmarks: bool
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., category: _Optional[str] = ..., event_version: _Optional[str] = ..., snapshot_limit: _Optional[int] = ..., allow_bookmarks: _Optional[bool] = ...) -> None: ...

class WatchResourceEventsResponse(_message.Message):
    __slots__ = ("type", "event", "event_version", "initial_events_end")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    EVENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    INITIAL_EVENTS_END_FIELD_NUMBER: _ClassVar[int]
    type: _resource_pb2.EventWatchType
    event: _resource_pb2.ResourceEvent
    event_version: str
    initial_events_end: bool
    def __init__(self, type: _Optional[_Union[_resource_pb2.EventWatchType, str]] = ..., event: _Optional[_Union[_resource_pb2.ResourceEvent, _Mapping]] = ..., event_version: _Optional[str] = ..., initial_events_end: _Optional[bool] = ...) -> None: ...

class GetResourceGraphRequest(_message.Message):
    __slots__ = ("kind", "name", "page_size", "page_token")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    page_size: int
    page_token: str
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class GetResourceGraphResponse(_message.Message):
    __slots__ = ("root", "nodes", "edges", "next_page_token")
    ROOT_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    EDGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    root: _resource_pb2.GraphNode
    nodes: _containers.RepeatedCompositeFieldContainer[_resource_pb2.GraphNode]
    edges: _containers.RepeatedCompositeFieldContainer[_resource_pb2.DependencyEdge]
    next_page_token: str
    def __init__(self, root: _Optional[_Union[_resource_pb2.GraphNode, _Mapping]] = ..., nodes: _Optional[_Iterable[_Union[_resource_pb2.GraphNode, _Mapping]]] = ..., edges: _Optional[_Iterable[_Union[_resource_pb2.DependencyEdge, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListSpecRevisionsRequest(_message.Message):
    __slots__ = ("kind", "name", "page_size", "page_token")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    page_size: int
    page_token: str
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSpecRevisionsResponse(_message.Message):
    __slots__ = ("revisions", "next_page_token")
    REVISIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    revisions: _containers.RepeatedCompositeFieldContainer[_resource_pb2.SpecRevision]
    next_page_token: str
    def __init__(self, revisions: _Optional[_Iterable[_Union[_resource_pb2.SpecRevision, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RollbackResourceRequest(_message.Message):
    __slots__ = ("kind", "name", "target_generation", "request_id", "validate_only", "etag")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TARGET_GENERATION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    target_generation: int
    request_id: str
    validate_only: bool
    etag: str
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., target_generation: _Optional[int] = ..., request_id: _Optional[str] = ..., validate_only: _Optional[bool] = ..., etag: _Optional[str] = ...) -> None: ...

class RollbackResourceResponse(_message.Message):
    __slots__ = ("resource",)
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    resource: _resource_pb2.Resource
    def __init__(self, resource: _Optional[_Union[_resource_pb2.Resource, _Mapping]] = ...) -> None: ...
