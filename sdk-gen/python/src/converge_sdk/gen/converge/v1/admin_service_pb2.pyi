import datetime

from converge_sdk.gen.converge.v1 import resource_pb2 as _resource_pb2
from google.api import field_behavior_pb2 as _field_behavior_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ResourceAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESOURCE_ACTION_UNSPECIFIED: _ClassVar[ResourceAction]
    RESOURCE_ACTION_RECONCILE: _ClassVar[ResourceAction]
    RESOURCE_ACTION_QUARANTINE: _ClassVar[ResourceAction]
    RESOURCE_ACTION_UNQUARANTINE: _ClassVar[ResourceAction]
    RESOURCE_ACTION_CLEAR_FAILURE: _ClassVar[ResourceAction]
    RESOURCE_ACTION_RESET_BACKOFF: _ClassVar[ResourceAction]
    RESOURCE_ACTION_RELEASE_LEASE: _ClassVar[ResourceAction]
    RESOURCE_ACTION_FORCE_FINALIZE: _ClassVar[ResourceAction]
RESOURCE_ACTION_UNSPECIFIED: ResourceAction
RESOURCE_ACTION_RECONCILE: ResourceAction
RESOURCE_ACTION_QUARANTINE: ResourceAction
RESOURCE_ACTION_UNQUARANTINE: ResourceAction
RESOURCE_ACTION_CLEAR_FAILURE: ResourceAction
RESOURCE_ACTION_RESET_BACKOFF: ResourceAction
RESOURCE_ACTION_RELEASE_LEASE: ResourceAction
RESOURCE_ACTION_FORCE_FINALIZE: ResourceAction

class GetFleetSummaryRequest(_message.Message):
    __slots__ = ("kind", "label_selector", "fresh", "top_failures")
    KIND_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    FRESH_FIELD_NUMBER: _ClassVar[int]
    TOP_FAILURES_FIELD_NUMBER: _ClassVar[int]
    kind: str
    label_selector: str
    fresh: bool
    top_failures: int
    def __init__(self, kind: _Optional[str] = ..., label_selector: _Optional[str] = ..., fresh: _Optional[bool] = ..., top_failures: _Optional[int] = ...) -> None: ...

class GetFleetSummaryResponse(_message.Message):
    __slots__ = ("phase_counts", "top_failures", "oldest", "unserved", "as_of", "total")
    PHASE_COUNTS_FIELD_NUMBER: _ClassVar[int]
    TOP_FAILURES_FIELD_NUMBER: _ClassVar[int]
    OLDEST_FIELD_NUMBER: _ClassVar[int]
    UNSERVED_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    phase_counts: _containers.RepeatedCompositeFieldContainer[KindPhaseCount]
    top_failures: _containers.RepeatedCompositeFieldContainer[FailureReasonCount]
    oldest: _containers.RepeatedCompositeFieldContainer[OldestInPhase]
    unserved: _containers.RepeatedCompositeFieldContainer[UnservedTasks]
    as_of: _timestamp_pb2.Timestamp
    total: int
    def __init__(self, phase_counts: _Optional[_Iterable[_Union[KindPhaseCount, _Mapping]]] = ..., top_failures: _Optional[_Iterable[_Union[FailureReasonCount, _Mapping]]] = ..., oldest: _Optional[_Iterable[_Union[OldestInPhase, _Mapping]]] = ..., unserved: _Optional[_Iterable[_Union[UnservedTasks, _Mapping]]] = ..., as_of: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., total: _Optional[int] = ...) -> None: ...

class KindPhaseCount(_message.Message):
    __slots__ = ("kind", "kind_version", "phase", "count")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    kind: str
    kind_version: int
    phase: _resource_pb2.Phase
    count: int
    def __init__(self, kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., phase: _Optional[_Union[_resource_pb2.Phase, str]] = ..., count: _Optional[int] = ...) -> None: ...

class FailureReasonCount(_message.Message):
    __slots__ = ("kind", "stage", "reason", "count", "example", "example_message")
    KIND_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    EXAMPLE_FIELD_NUMBER: _ClassVar[int]
    EXAMPLE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    kind: str
    stage: str
    reason: str
    count: int
    example: _resource_pb2.ResourceRef
    example_message: str
    def __init__(self, kind: _Optional[str] = ..., stage: _Optional[str] = ..., reason: _Optional[str] = ..., count: _Optional[int] = ..., example: _Optional[_Union[_resource_pb2.ResourceRef, _Mapping]] = ..., example_message: _Optional[str] = ...) -> None: ...

class OldestInPhase(_message.Message):
    __slots__ = ("phase", "resource", "since")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    phase: _resource_pb2.Phase
    resource: _resource_pb2.ResourceRef
    since: _timestamp_pb2.Timestamp
    def __init__(self, phase: _Optional[_Union[_resource_pb2.Phase, str]] = ..., resource: _Optional[_Union[_resource_pb2.ResourceRef, _Mapping]] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class UnservedTasks(_message.Message):
    __slots__ = ("kind", "kind_version", "tasks", "oldest_since")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    OLDEST_SINCE_FIELD_NUMBER: _ClassVar[int]
    kind: str
    kind_version: int
    tasks: int
    oldest_since: _timestamp_pb2.Timestamp
    def __init__(self, kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., tasks: _Optional[int] = ..., oldest_since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ActOnResourcesRequest(_message.Message):
    __slots__ = ("action", "kind", "name", "label_selector", "phases", "reason", "validate_only", "page_size", "page_token", "request_id")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    PHASES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    action: ResourceAction
    kind: str
    name: str
    label_selector: str
    phases: _containers.RepeatedScalarFieldContainer[_resource_pb2.Phase]
    reason: str
    validate_only: bool
    page_size: int
    page_token: str
    request_id: str
    def __init__(self, action: _Optional[_Union[ResourceAction, str]] = ..., kind: _Optional[str] = ..., name: _Optional[str] = ..., label_selector: _Optional[str] = ..., phases: _Optional[_Iterable[_Union[_resource_pb2.Phase, str]]] = ..., reason: _Optional[str] = ..., validate_only: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class ActOnResourcesResponse(_message.Message):
    __slots__ = ("acted_count", "names", "matched_count", "next_page_token")
    ACTED_COUNT_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    MATCHED_COUNT_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    acted_count: int
    names: _containers.RepeatedScalarFieldContainer[str]
    matched_count: int
    next_page_token: str
    def __init__(self, acted_count: _Optional[int] = ..., names: _Optional[_Iterable[str]] = ..., matched_count: _Optional[int] = ..., next_page_token: _Optional[str] = ...) -> None: ...
