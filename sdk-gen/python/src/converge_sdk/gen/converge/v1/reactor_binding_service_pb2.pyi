import datetime

from converge_sdk.gen.converge.v1 import reactor_binding_pb2 as _reactor_binding_pb2
from converge_sdk.gen.converge.v1 import resource_pb2 as _resource_pb2
from google.api import field_behavior_pb2 as _field_behavior_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ApplyReactorBindingRequest(_message.Message):
    __slots__ = ("reactor_binding", "validate_only", "request_id")
    REACTOR_BINDING_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    reactor_binding: _reactor_binding_pb2.ReactorBinding
    validate_only: bool
    request_id: str
    def __init__(self, reactor_binding: _Optional[_Union[_reactor_binding_pb2.ReactorBinding, _Mapping]] = ..., validate_only: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class ApplyReactorBindingResponse(_message.Message):
    __slots__ = ("reactor_binding", "created")
    REACTOR_BINDING_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    reactor_binding: _reactor_binding_pb2.ReactorBinding
    created: bool
    def __init__(self, reactor_binding: _Optional[_Union[_reactor_binding_pb2.ReactorBinding, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class GetReactorBindingRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetReactorBindingResponse(_message.Message):
    __slots__ = ("reactor_binding",)
    REACTOR_BINDING_FIELD_NUMBER: _ClassVar[int]
    reactor_binding: _reactor_binding_pb2.ReactorBinding
    def __init__(self, reactor_binding: _Optional[_Union[_reactor_binding_pb2.ReactorBinding, _Mapping]] = ...) -> None: ...

class ListReactorBindingsRequest(_message.Message):
    __slots__ = ("watch_kind", "reactor", "page_size", "page_token")
    WATCH_KIND_FIELD_NUMBER: _ClassVar[int]
    REACTOR_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    watch_kind: str
    reactor: str
    page_size: int
    page_token: str
    def __init__(self, watch_kind: _Optional[str] = ..., reactor: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListReactorBindingsResponse(_message.Message):
    __slots__ = ("reactor_bindings", "next_page_token")
    REACTOR_BINDINGS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    reactor_bindings: _containers.RepeatedCompositeFieldContainer[_reactor_binding_pb2.ReactorBinding]
    next_page_token: str
    def __init__(self, reactor_bindings: _Optional[_Iterable[_Union[_reactor_binding_pb2.ReactorBinding, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteReactorBindingRequest(_message.Message):
    __slots__ = ("name", "allow_missing", "request_id", "etag")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ALLOW_MISSING_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    name: str
    allow_missing: bool
    request_id: str
    etag: str
    def __init__(self, name: _Optional[str] = ..., allow_missing: _Optional[bool] = ..., request_id: _Optional[str] = ..., etag: _Optional[str] = ...) -> None: ...

class DeleteReactorBindingResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReactorDelivery(_message.Message):
    __slots__ = ("id", "binding", "reactor", "reactor_version", "transition", "resource", "resource_uid", "generation", "dedup_token", "attempts", "create_time", "next_attempt_time", "fail_time", "last_error", "leased")
    ID_FIELD_NUMBER: _ClassVar[int]
    BINDING_FIELD_NUMBER: _ClassVar[int]
    REACTOR_FIELD_NUMBER: _ClassVar[int]
    REACTOR_VERSION_FIELD_NUMBER: _ClassVar[int]
    TRANSITION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_UID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    DEDUP_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_TIME_FIELD_NUMBER: _ClassVar[int]
    FAIL_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    id: str
    binding: str
    reactor: str
    reactor_version: int
    transition: _reactor_binding_pb2.Transition
    resource: _resource_pb2.ResourceRef
    resource_uid: str
    generation: int
    dedup_token: str
    attempts: int
    create_time: _timestamp_pb2.Timestamp
    next_attempt_time: _timestamp_pb2.Timestamp
    fail_time: _timestamp_pb2.Timestamp
    last_error: str
    leased: bool
    def __init__(self, id: _Optional[str] = ..., binding: _Optional[str] = ..., reactor: _Optional[str] = ..., reactor_version: _Optional[int] = ..., transition: _Optional[_Union[_reactor_binding_pb2.Transition, str]] = ..., resource: _Optional[_Union[_resource_pb2.ResourceRef, _Mapping]] = ..., resource_uid: _Optional[str] = ..., generation: _Optional[int] = ..., dedup_token: _Optional[str] = ..., attempts: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., next_attempt_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., fail_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_error: _Optional[str] = ..., leased: _Optional[bool] = ...) -> None: ...

class ListReactorDeliveriesRequest(_message.Message):
    __slots__ = ("binding", "resource", "resource_uid", "only_given_up", "page_size", "page_token")
    BINDING_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_UID_FIELD_NUMBER: _ClassVar[int]
    ONLY_GIVEN_UP_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    binding: str
    resource: _resource_pb2.ResourceRef
    resource_uid: str
    only_given_up: bool
    page_size: int
    page_token: str
    def __init__(self, binding: _Optional[str] = ..., resource: _Optional[_Union[_resource_pb2.ResourceRef, _Mapping]] = ..., resource_uid: _Optional[str] = ..., only_given_up: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListReactorDeliveriesResponse(_message.Message):
    __slots__ = ("reactor_deliveries", "next_page_token")
    REACTOR_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    reactor_deliveries: _containers.RepeatedCompositeFieldContainer[ReactorDelivery]
    next_page_token: str
    def __init__(self, reactor_deliveries: _Optional[_Iterable[_Union[ReactorDelivery, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeliveryResourceSelector(_message.Message):
    __slots__ = ("kind", "label_selector")
    KIND_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    kind: str
    label_selector: str
    def __init__(self, kind: _Optional[str] = ..., label_selector: _Optional[str] = ...) -> None: ...

class RedriveReactorDeliveriesRequest(_message.Message):
    __slots__ = ("delivery_id", "binding", "resources", "reason", "validate_only", "request_id", "limit", "page_token")
    DELIVERY_ID_FIELD_NUMBER: _ClassVar[int]
    BINDING_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    delivery_id: str
    binding: str
    resources: DeliveryResourceSelector
    reason: str
    validate_only: bool
    request_id: str
    limit: int
    page_token: str
    def __init__(self, delivery_id: _Optional[str] = ..., binding: _Optional[str] = ..., resources: _Optional[_Union[DeliveryResourceSelector, _Mapping]] = ..., reason: _Optional[str] = ..., validate_only: _Optional[bool] = ..., request_id: _Optional[str] = ..., limit: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class RedriveReactorDeliveriesResponse(_message.Message):
    __slots__ = ("count", "first", "next_page_token")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    count: int
    first: _containers.RepeatedCompositeFieldContainer[ReactorDelivery]
    next_page_token: str
    def __init__(self, count: _Optional[int] = ..., first: _Optional[_Iterable[_Union[ReactorDelivery, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
