import datetime

from google.api import field_behavior_pb2 as _field_behavior_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Phase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PHASE_UNSPECIFIED: _ClassVar[Phase]
    PHASE_READY: _ClassVar[Phase]
    PHASE_RECONCILING: _ClassVar[Phase]
    PHASE_DEGRADED: _ClassVar[Phase]
    PHASE_FAILED: _ClassVar[Phase]
    PHASE_DELETING: _ClassVar[Phase]
    PHASE_ORPHANED: _ClassVar[Phase]
    PHASE_QUARANTINED: _ClassVar[Phase]

class ConditionStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONDITION_STATUS_UNSPECIFIED: _ClassVar[ConditionStatus]
    CONDITION_STATUS_TRUE: _ClassVar[ConditionStatus]
    CONDITION_STATUS_FALSE: _ClassVar[ConditionStatus]
    CONDITION_STATUS_UNKNOWN: _ClassVar[ConditionStatus]

class WatchEventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WATCH_EVENT_TYPE_UNSPECIFIED: _ClassVar[WatchEventType]
    WATCH_EVENT_TYPE_ADDED: _ClassVar[WatchEventType]
    WATCH_EVENT_TYPE_MODIFIED: _ClassVar[WatchEventType]
    WATCH_EVENT_TYPE_DELETED: _ClassVar[WatchEventType]
    WATCH_EVENT_TYPE_BOOKMARK: _ClassVar[WatchEventType]

class EventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_TYPE_UNSPECIFIED: _ClassVar[EventType]
    EVENT_TYPE_NORMAL: _ClassVar[EventType]
    EVENT_TYPE_WARNING: _ClassVar[EventType]

class EventWatchType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_WATCH_TYPE_UNSPECIFIED: _ClassVar[EventWatchType]
    EVENT_WATCH_TYPE_SNAPSHOT: _ClassVar[EventWatchType]
    EVENT_WATCH_TYPE_APPENDED: _ClassVar[EventWatchType]
    EVENT_WATCH_TYPE_EXTENDED: _ClassVar[EventWatchType]
    EVENT_WATCH_TYPE_BOOKMARK: _ClassVar[EventWatchType]

class SpecRevisionSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SPEC_REVISION_SOURCE_UNSPECIFIED: _ClassVar[SpecRevisionSource]
    SPEC_REVISION_SOURCE_APPLY: _ClassVar[SpecRevisionSource]
    SPEC_REVISION_SOURCE_ROLLBACK: _ClassVar[SpecRevisionSource]
    SPEC_REVISION_SOURCE_CONVERSION: _ClassVar[SpecRevisionSource]

class TaskType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_TYPE_UNSPECIFIED: _ClassVar[TaskType]
    TASK_TYPE_RECONCILE: _ClassVar[TaskType]
    TASK_TYPE_TEARDOWN: _ClassVar[TaskType]

class TaskCause(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_CAUSE_UNSPECIFIED: _ClassVar[TaskCause]
    TASK_CAUSE_CHANGE: _ClassVar[TaskCause]
    TASK_CAUSE_RESYNC: _ClassVar[TaskCause]
    TASK_CAUSE_RESYNC_RECOMPOSE: _ClassVar[TaskCause]
    TASK_CAUSE_CONFIG_CHANGE: _ClassVar[TaskCause]
PHASE_UNSPECIFIED: Phase
PHASE_READY: Phase
PHASE_RECONCILING: Phase
PHASE_DEGRADED: Phase
PHASE_FAILED: Phase
PHASE_DELETING: Phase
PHASE_ORPHANED: Phase
PHASE_QUARANTINED: Phase
CONDITION_STATUS_UNSPECIFIED: ConditionStatus
CONDITION_STATUS_TRUE: ConditionStatus
CONDITION_STATUS_FALSE: ConditionStatus
CONDITION_STATUS_UNKNOWN: ConditionStatus
WATCH_EVENT_TYPE_UNSPECIFIED: WatchEventType
WATCH_EVENT_TYPE_ADDED: WatchEventType
WATCH_EVENT_TYPE_MODIFIED: WatchEventType
WATCH_EVENT_TYPE_DELETED: WatchEventType
WATCH_EVENT_TYPE_BOOKMARK: WatchEventType
EVENT_TYPE_UNSPECIFIED: EventType
EVENT_TYPE_NORMAL: EventType
EVENT_TYPE_WARNING: EventType
EVENT_WATCH_TYPE_UNSPECIFIED: EventWatchType
EVENT_WATCH_TYPE_SNAPSHOT: EventWatchType
EVENT_WATCH_TYPE_APPENDED: EventWatchType
EVENT_WATCH_TYPE_EXTENDED: EventWatchType
EVENT_WATCH_TYPE_BOOKMARK: EventWatchType
SPEC_REVISION_SOURCE_UNSPECIFIED: SpecRevisionSource
SPEC_REVISION_SOURCE_APPLY: SpecRevisionSource
SPEC_REVISION_SOURCE_ROLLBACK: SpecRevisionSource
SPEC_REVISION_SOURCE_CONVERSION: SpecRevisionSource
TASK_TYPE_UNSPECIFIED: TaskType
TASK_TYPE_RECONCILE: TaskType
TASK_TYPE_TEARDOWN: TaskType
TASK_CAUSE_UNSPECIFIED: TaskCause
TASK_CAUSE_CHANGE: TaskCause
TASK_CAUSE_RESYNC: TaskCause
TASK_CAUSE_RESYNC_RECOMPOSE: TaskCause
TASK_CAUSE_CONFIG_CHANGE: TaskCause

class ResourceRef(_message.Message):
    __slots__ = ("kind", "name")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class Condition(_message.Message):
    __slots__ = ("type", "status", "reason", "message", "observed_generation", "last_transition_time", "update_time", "expire_time")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_GENERATION_FIELD_NUMBER: _ClassVar[int]
    LAST_TRANSITION_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    type: str
    status: ConditionStatus
    reason: str
    message: str
    observed_generation: int
    last_transition_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    expire_time: _timestamp_pb2.Timestamp
    def __init__(self, type: _Optional[str] = ..., status: _Optional[_Union[ConditionStatus, str]] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., observed_generation: _Optional[int] = ..., last_transition_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Resource(_message.Message):
    __slots__ = ("uid", "kind", "kind_version", "name", "labels", "spec", "status", "generation", "observed_generation", "resource_version", "phase", "conditions", "owner", "root", "finalizers", "create_time", "update_time", "delete_time", "etag", "healthy", "failure_attempts", "failed_generation", "quarantined", "orphan_expire_time", "provider_config", "manifest_version")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    UID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_GENERATION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    ROOT_FIELD_NUMBER: _ClassVar[int]
    FINALIZERS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    DELETE_TIME_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    FAILURE_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    FAILED_GENERATION_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    ORPHAN_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_CONFIG_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_VERSION_FIELD_NUMBER: _ClassVar[int]
    uid: str
    kind: str
    kind_version: int
    name: str
    labels: _containers.ScalarMap[str, str]
    spec: _struct_pb2.Struct
    status: _struct_pb2.Struct
    generation: int
    observed_generation: int
    resource_version: str
    phase: Phase
    conditions: _containers.RepeatedCompositeFieldContainer[Condition]
    owner: ResourceRef
    root: ResourceRef
    finalizers: _containers.RepeatedScalarFieldContainer[str]
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    delete_time: _timestamp_pb2.Timestamp
    etag: str
    healthy: bool
    failure_attempts: int
    failed_generation: int
    quarantined: bool
    orphan_expire_time: _timestamp_pb2.Timestamp
    provider_config: str
    manifest_version: int
    def __init__(self, uid: _Optional[str] = ..., kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., spec: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., status: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., generation: _Optional[int] = ..., observed_generation: _Optional[int] = ..., resource_version: _Optional[str] = ..., phase: _Optional[_Union[Phase, str]] = ..., conditions: _Optional[_Iterable[_Union[Condition, _Mapping]]] = ..., owner: _Optional[_Union[ResourceRef, _Mapping]] = ..., root: _Optional[_Union[ResourceRef, _Mapping]] = ..., finalizers: _Optional[_Iterable[str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delete_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., etag: _Optional[str] = ..., healthy: _Optional[bool] = ..., failure_attempts: _Optional[int] = ..., failed_generation: _Optional[int] = ..., quarantined: _Optional[bool] = ..., orphan_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., provider_config: _Optional[str] = ..., manifest_version: _Optional[int] = ...) -> None: ...

class ResourceEvent(_message.Message):
    __slots__ = ("uid", "resource", "resource_uid", "category", "type", "reason", "message", "detail", "count", "first_time", "last_time", "actor", "generation", "event_version")
    UID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_UID_FIELD_NUMBER: _ClassVar[int]
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    FIRST_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_TIME_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    EVENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    uid: str
    resource: ResourceRef
    resource_uid: str
    category: str
    type: EventType
    reason: str
    message: str
    detail: _struct_pb2.Struct
    count: int
    first_time: _timestamp_pb2.Timestamp
    last_time: _timestamp_pb2.Timestamp
    actor: str
    generation: int
    event_version: str
    def __init__(self, uid: _Optional[str] = ..., resource: _Optional[_Union[ResourceRef, _Mapping]] = ..., resource_uid: _Optional[str] = ..., category: _Optional[str] = ..., type: _Optional[_Union[EventType, str]] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., detail: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., count: _Optional[int] = ..., first_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., actor: _Optional[str] = ..., generation: _Optional[int] = ..., event_version: _Optional[str] = ...) -> None: ...

class SpecRevision(_message.Message):
    __slots__ = ("generation", "spec", "source", "restored_generation", "create_time", "kind_version")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    RESTORED_GENERATION_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    generation: int
    spec: _struct_pb2.Struct
    source: SpecRevisionSource
    restored_generation: int
    create_time: _timestamp_pb2.Timestamp
    kind_version: int
    def __init__(self, generation: _Optional[int] = ..., spec: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., source: _Optional[_Union[SpecRevisionSource, str]] = ..., restored_generation: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., kind_version: _Optional[int] = ...) -> None: ...

class GraphNode(_message.Message):
    __slots__ = ("uid", "kind", "name", "kind_version", "phase", "owner", "generation", "observed_generation")
    UID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_GENERATION_FIELD_NUMBER: _ClassVar[int]
    uid: str
    kind: str
    name: str
    kind_version: int
    phase: Phase
    owner: ResourceRef
    generation: int
    observed_generation: int
    def __init__(self, uid: _Optional[str] = ..., kind: _Optional[str] = ..., name: _Optional[str] = ..., kind_version: _Optional[int] = ..., phase: _Optional[_Union[Phase, str]] = ..., owner: _Optional[_Union[ResourceRef, _Mapping]] = ..., generation: _Optional[int] = ..., observed_generation: _Optional[int] = ...) -> None: ...

class ValueFlow(_message.Message):
    __slots__ = ("dependent_field", "source_field")
    DEPENDENT_FIELD_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_FIELD_NUMBER: _ClassVar[int]
    dependent_field: str
    source_field: str
    def __init__(self, dependent_field: _Optional[str] = ..., source_field: _Optional[str] = ...) -> None: ...

class DependencyEdge(_message.Message):
    __slots__ = ("dependent", "dependency", "value_flows")
    DEPENDENT_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FLOWS_FIELD_NUMBER: _ClassVar[int]
    dependent: ResourceRef
    dependency: ResourceRef
    value_flows: _containers.RepeatedCompositeFieldContainer[ValueFlow]
    def __init__(self, dependent: _Optional[_Union[ResourceRef, _Mapping]] = ..., dependency: _Optional[_Union[ResourceRef, _Mapping]] = ..., value_flows: _Optional[_Iterable[_Union[ValueFlow, _Mapping]]] = ...) -> None: ...

class WaitingResource(_message.Message):
    __slots__ = ("ref", "phase")
    REF_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    ref: ResourceRef
    phase: Phase
    def __init__(self, ref: _Optional[_Union[ResourceRef, _Mapping]] = ..., phase: _Optional[_Union[Phase, str]] = ...) -> None: ...

class PhaseCount(_message.Message):
    __slots__ = ("phase", "count")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    phase: Phase
    count: int
    def __init__(self, phase: _Optional[_Union[Phase, str]] = ..., count: _Optional[int] = ...) -> None: ...

class DependenciesWait(_message.Message):
    __slots__ = ("total", "first")
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    total: int
    first: _containers.RepeatedCompositeFieldContainer[WaitingResource]
    def __init__(self, total: _Optional[int] = ..., first: _Optional[_Iterable[_Union[WaitingResource, _Mapping]]] = ...) -> None: ...

class ChildrenWait(_message.Message):
    __slots__ = ("total", "progressing", "by_phase", "first")
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    PROGRESSING_FIELD_NUMBER: _ClassVar[int]
    BY_PHASE_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    total: int
    progressing: int
    by_phase: _containers.RepeatedCompositeFieldContainer[PhaseCount]
    first: _containers.RepeatedCompositeFieldContainer[WaitingResource]
    def __init__(self, total: _Optional[int] = ..., progressing: _Optional[int] = ..., by_phase: _Optional[_Iterable[_Union[PhaseCount, _Mapping]]] = ..., first: _Optional[_Iterable[_Union[WaitingResource, _Mapping]]] = ...) -> None: ...

class NoWorkerWait(_message.Message):
    __slots__ = ("kind", "kind_version", "unready_workers")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    UNREADY_WORKERS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    kind_version: int
    unready_workers: int
    def __init__(self, kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., unready_workers: _Optional[int] = ...) -> None: ...

class ConcurrencyCapWait(_message.Message):
    __slots__ = ("in_flight", "limit")
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    in_flight: int
    limit: int
    def __init__(self, in_flight: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class QueuedWait(_message.Message):
    __slots__ = ("task", "cause", "eligible_time", "claims")
    TASK_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    ELIGIBLE_TIME_FIELD_NUMBER: _ClassVar[int]
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    task: TaskType
    cause: TaskCause
    eligible_time: _timestamp_pb2.Timestamp
    claims: int
    def __init__(self, task: _Optional[_Union[TaskType, str]] = ..., cause: _Optional[_Union[TaskCause, str]] = ..., eligible_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., claims: _Optional[int] = ...) -> None: ...

class RunningWait(_message.Message):
    __slots__ = ("task", "member", "heartbeat_time", "deadline_time", "claims")
    TASK_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIME_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_TIME_FIELD_NUMBER: _ClassVar[int]
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    task: TaskType
    member: str
    heartbeat_time: _timestamp_pb2.Timestamp
    deadline_time: _timestamp_pb2.Timestamp
    claims: int
    def __init__(self, task: _Optional[_Union[TaskType, str]] = ..., member: _Optional[str] = ..., heartbeat_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., deadline_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., claims: _Optional[int] = ...) -> None: ...

class ApplyingWait(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: TaskType
    def __init__(self, task: _Optional[_Union[TaskType, str]] = ...) -> None: ...

class RetryBackoffWait(_message.Message):
    __slots__ = ("task", "attempt", "max_attempts", "retry_time", "last_error_reason", "last_error")
    TASK_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_REASON_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    task: TaskType
    attempt: int
    max_attempts: int
    retry_time: _timestamp_pb2.Timestamp
    last_error_reason: str
    last_error: str
    def __init__(self, task: _Optional[_Union[TaskType, str]] = ..., attempt: _Optional[int] = ..., max_attempts: _Optional[int] = ..., retry_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_error_reason: _Optional[str] = ..., last_error: _Optional[str] = ...) -> None: ...

class RequeuedWait(_message.Message):
    __slots__ = ("task", "retry_time")
    TASK_FIELD_NUMBER: _ClassVar[int]
    RETRY_TIME_FIELD_NUMBER: _ClassVar[int]
    task: TaskType
    retry_time: _timestamp_pb2.Timestamp
    def __init__(self, task: _Optional[_Union[TaskType, str]] = ..., retry_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class FailedWait(_message.Message):
    __slots__ = ("task", "generation", "budget_exhausted", "attempts", "last_error_reason", "last_error")
    TASK_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    BUDGET_EXHAUSTED_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_REASON_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    task: TaskType
    generation: int
    budget_exhausted: bool
    attempts: int
    last_error_reason: str
    last_error: str
    def __init__(self, task: _Optional[_Union[TaskType, str]] = ..., generation: _Optional[int] = ..., budget_exhausted: _Optional[bool] = ..., attempts: _Optional[int] = ..., last_error_reason: _Optional[str] = ..., last_error: _Optional[str] = ...) -> None: ...

class QuarantinedWait(_message.Message):
    __slots__ = ("since_time", "message")
    SINCE_TIME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    since_time: _timestamp_pb2.Timestamp
    message: str
    def __init__(self, since_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

class OrphanedWait(_message.Message):
    __slots__ = ("owner", "teardown_time")
    OWNER_FIELD_NUMBER: _ClassVar[int]
    TEARDOWN_TIME_FIELD_NUMBER: _ClassVar[int]
    owner: ResourceRef
    teardown_time: _timestamp_pb2.Timestamp
    def __init__(self, owner: _Optional[_Union[ResourceRef, _Mapping]] = ..., teardown_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DeletionWait(_message.Message):
    __slots__ = ("delete_time", "dependents_total", "dependents", "children_total", "children", "finalizers")
    DELETE_TIME_FIELD_NUMBER: _ClassVar[int]
    DEPENDENTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    DEPENDENTS_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_TOTAL_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    FINALIZERS_FIELD_NUMBER: _ClassVar[int]
    delete_time: _timestamp_pb2.Timestamp
    dependents_total: int
    dependents: _containers.RepeatedCompositeFieldContainer[WaitingResource]
    children_total: int
    children: _containers.RepeatedCompositeFieldContainer[WaitingResource]
    finalizers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, delete_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., dependents_total: _Optional[int] = ..., dependents: _Optional[_Iterable[_Union[WaitingResource, _Mapping]]] = ..., children_total: _Optional[int] = ..., children: _Optional[_Iterable[_Union[WaitingResource, _Mapping]]] = ..., finalizers: _Optional[_Iterable[str]] = ...) -> None: ...

class ProviderConfigMissingWait(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class UnhealthyWait(_message.Message):
    __slots__ = ("false_conditions",)
    FALSE_CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    false_conditions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, false_conditions: _Optional[_Iterable[str]] = ...) -> None: ...

class UnscheduledWait(_message.Message):
    __slots__ = ("since_time",)
    SINCE_TIME_FIELD_NUMBER: _ClassVar[int]
    since_time: _timestamp_pb2.Timestamp
    def __init__(self, since_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Wait(_message.Message):
    __slots__ = ("message", "dependencies", "children", "no_worker", "concurrency_cap", "queued", "running", "applying", "retry_backoff", "requeued", "failed", "quarantined", "orphaned", "deletion", "provider_config_missing", "unhealthy", "unscheduled")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCIES_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    NO_WORKER_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_CAP_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    APPLYING_FIELD_NUMBER: _ClassVar[int]
    RETRY_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    REQUEUED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    ORPHANED_FIELD_NUMBER: _ClassVar[int]
    DELETION_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_CONFIG_MISSING_FIELD_NUMBER: _ClassVar[int]
    UNHEALTHY_FIELD_NUMBER: _ClassVar[int]
    UNSCHEDULED_FIELD_NUMBER: _ClassVar[int]
    message: str
    dependencies: DependenciesWait
    children: ChildrenWait
    no_worker: NoWorkerWait
    concurrency_cap: ConcurrencyCapWait
    queued: QueuedWait
    running: RunningWait
    applying: ApplyingWait
    retry_backoff: RetryBackoffWait
    requeued: RequeuedWait
    failed: FailedWait
    quarantined: QuarantinedWait
    orphaned: OrphanedWait
    deletion: DeletionWait
    provider_config_missing: ProviderConfigMissingWait
    unhealthy: UnhealthyWait
    unscheduled: UnscheduledWait
    def __init__(self, message: _Optional[str] = ..., dependencies: _Optional[_Union[DependenciesWait, _Mapping]] = ..., children: _Optional[_Union[ChildrenWait, _Mapping]] = ..., no_worker: _Optional[_Union[NoWorkerWait, _Mapping]] = ..., concurrency_cap: _Optional[_Union[ConcurrencyCapWait, _Mapping]] = ..., queued: _Optional[_Union[QueuedWait, _Mapping]] = ..., running: _Optional[_Union[RunningWait, _Mapping]] = ..., applying: _Optional[_Union[ApplyingWait, _Mapping]] = ..., retry_backoff: _Optional[_Union[RetryBackoffWait, _Mapping]] = ..., requeued: _Optional[_Union[RequeuedWait, _Mapping]] = ..., failed: _Optional[_Union[FailedWait, _Mapping]] = ..., quarantined: _Optional[_Union[QuarantinedWait, _Mapping]] = ..., orphaned: _Optional[_Union[OrphanedWait, _Mapping]] = ..., deletion: _Optional[_Union[DeletionWait, _Mapping]] = ..., provider_config_missing: _Optional[_Union[ProviderConfigMissingWait, _Mapping]] = ..., unhealthy: _Optional[_Union[UnhealthyWait, _Mapping]] = ..., unscheduled: _Optional[_Union[UnscheduledWait, _Mapping]] = ...) -> None: ...
