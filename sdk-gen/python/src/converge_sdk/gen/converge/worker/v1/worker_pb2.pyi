import datetime

from google.api import field_behavior_pb2 as _field_behavior_pb2
from google.api import field_info_pb2 as _field_info_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Stage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STAGE_UNSPECIFIED: _ClassVar[Stage]
    STAGE_COMPOSE: _ClassVar[Stage]
    STAGE_WORK: _ClassVar[Stage]
    STAGE_ROLLUP: _ClassVar[Stage]
    STAGE_DELETE: _ClassVar[Stage]
    STAGE_OPERATE: _ClassVar[Stage]
    STAGE_REACT: _ClassVar[Stage]

class Trigger(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRIGGER_UNSPECIFIED: _ClassVar[Trigger]
    TRIGGER_SPEC_CHANGE: _ClassVar[Trigger]
    TRIGGER_CHILDREN_SETTLED: _ClassVar[Trigger]
    TRIGGER_DELETE_REQUESTED: _ClassVar[Trigger]
    TRIGGER_OPERATION: _ClassVar[Trigger]
    TRIGGER_REACTOR: _ClassVar[Trigger]
    TRIGGER_RESYNC: _ClassVar[Trigger]
    TRIGGER_CONFIG_CHANGE: _ClassVar[Trigger]

class Transition(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSITION_UNSPECIFIED: _ClassVar[Transition]
    TRANSITION_CREATED: _ClassVar[Transition]
    TRANSITION_SYNCED: _ClassVar[Transition]
    TRANSITION_DEGRADED: _ClassVar[Transition]
    TRANSITION_FAILED: _ClassVar[Transition]
    TRANSITION_DELETED: _ClassVar[Transition]

class ConditionStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONDITION_STATUS_UNSPECIFIED: _ClassVar[ConditionStatus]
    CONDITION_STATUS_TRUE: _ClassVar[ConditionStatus]
    CONDITION_STATUS_FALSE: _ClassVar[ConditionStatus]
    CONDITION_STATUS_UNKNOWN: _ClassVar[ConditionStatus]

class EventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_TYPE_UNSPECIFIED: _ClassVar[EventType]
    EVENT_TYPE_NORMAL: _ClassVar[EventType]
    EVENT_TYPE_WARNING: _ClassVar[EventType]
STAGE_UNSPECIFIED: Stage
STAGE_COMPOSE: Stage
STAGE_WORK: Stage
STAGE_ROLLUP: Stage
STAGE_DELETE: Stage
STAGE_OPERATE: Stage
STAGE_REACT: Stage
TRIGGER_UNSPECIFIED: Trigger
TRIGGER_SPEC_CHANGE: Trigger
TRIGGER_CHILDREN_SETTLED: Trigger
TRIGGER_DELETE_REQUESTED: Trigger
TRIGGER_OPERATION: Trigger
TRIGGER_REACTOR: Trigger
TRIGGER_RESYNC: Trigger
TRIGGER_CONFIG_CHANGE: Trigger
TRANSITION_UNSPECIFIED: Transition
TRANSITION_CREATED: Transition
TRANSITION_SYNCED: Transition
TRANSITION_DEGRADED: Transition
TRANSITION_FAILED: Transition
TRANSITION_DELETED: Transition
CONDITION_STATUS_UNSPECIFIED: ConditionStatus
CONDITION_STATUS_TRUE: ConditionStatus
CONDITION_STATUS_FALSE: ConditionStatus
CONDITION_STATUS_UNKNOWN: ConditionStatus
EVENT_TYPE_UNSPECIFIED: EventType
EVENT_TYPE_NORMAL: EventType
EVENT_TYPE_WARNING: EventType

class KindVersion(_message.Message):
    __slots__ = ("kind", "kind_version")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    kind: str
    kind_version: int
    def __init__(self, kind: _Optional[str] = ..., kind_version: _Optional[int] = ...) -> None: ...

class ResourceRef(_message.Message):
    __slots__ = ("kind", "name")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class Resource(_message.Message):
    __slots__ = ("uid", "kind", "kind_version", "name", "labels", "spec", "status", "generation", "observed_generation", "ready", "healthy", "owner", "root", "finalizers", "delete_time", "orphan_expire_time", "quarantined")
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
    READY_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    ROOT_FIELD_NUMBER: _ClassVar[int]
    FINALIZERS_FIELD_NUMBER: _ClassVar[int]
    DELETE_TIME_FIELD_NUMBER: _ClassVar[int]
    ORPHAN_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    uid: str
    kind: str
    kind_version: int
    name: str
    labels: _containers.ScalarMap[str, str]
    spec: _struct_pb2.Struct
    status: _struct_pb2.Struct
    generation: int
    observed_generation: int
    ready: bool
    healthy: bool
    owner: ResourceRef
    root: ResourceRef
    finalizers: _containers.RepeatedScalarFieldContainer[str]
    delete_time: _timestamp_pb2.Timestamp
    orphan_expire_time: _timestamp_pb2.Timestamp
    quarantined: bool
    def __init__(self, uid: _Optional[str] = ..., kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., spec: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., status: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., generation: _Optional[int] = ..., observed_generation: _Optional[int] = ..., ready: _Optional[bool] = ..., healthy: _Optional[bool] = ..., owner: _Optional[_Union[ResourceRef, _Mapping]] = ..., root: _Optional[_Union[ResourceRef, _Mapping]] = ..., finalizers: _Optional[_Iterable[str]] = ..., delete_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., orphan_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., quarantined: _Optional[bool] = ...) -> None: ...

class Condition(_message.Message):
    __slots__ = ("type", "status", "reason", "message", "liveness")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LIVENESS_FIELD_NUMBER: _ClassVar[int]
    type: str
    status: ConditionStatus
    reason: str
    message: str
    liveness: _duration_pb2.Duration
    def __init__(self, type: _Optional[str] = ..., status: _Optional[_Union[ConditionStatus, str]] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., liveness: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class WorkerEvent(_message.Message):
    __slots__ = ("category", "type", "reason", "message", "detail")
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    category: str
    type: EventType
    reason: str
    message: str
    detail: _struct_pb2.Struct
    def __init__(self, category: _Optional[str] = ..., type: _Optional[_Union[EventType, str]] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., detail: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ChildSpec(_message.Message):
    __slots__ = ("kind", "kind_version", "name", "labels", "spec", "provider_config")
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
    PROVIDER_CONFIG_FIELD_NUMBER: _ClassVar[int]
    kind: str
    kind_version: int
    name: str
    labels: _containers.ScalarMap[str, str]
    spec: _struct_pb2.Struct
    provider_config: str
    def __init__(self, kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., spec: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., provider_config: _Optional[str] = ...) -> None: ...

class ValueFlow(_message.Message):
    __slots__ = ("dependent_field", "source_field")
    DEPENDENT_FIELD_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_FIELD_NUMBER: _ClassVar[int]
    dependent_field: str
    source_field: str
    def __init__(self, dependent_field: _Optional[str] = ..., source_field: _Optional[str] = ...) -> None: ...

class DepEdge(_message.Message):
    __slots__ = ("dependent", "dependency", "value_flows")
    DEPENDENT_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FLOWS_FIELD_NUMBER: _ClassVar[int]
    dependent: ResourceRef
    dependency: ResourceRef
    value_flows: _containers.RepeatedCompositeFieldContainer[ValueFlow]
    def __init__(self, dependent: _Optional[_Union[ResourceRef, _Mapping]] = ..., dependency: _Optional[_Union[ResourceRef, _Mapping]] = ..., value_flows: _Optional[_Iterable[_Union[ValueFlow, _Mapping]]] = ...) -> None: ...

class ProviderConfigSpec(_message.Message):
    __slots__ = ("name", "kind", "kind_version", "is_default", "spec", "data")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    kind_version: int
    is_default: bool
    spec: _struct_pb2.Struct
    data: bytes
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., is_default: _Optional[bool] = ..., spec: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class Operation(_message.Message):
    __slots__ = ("uid", "verb", "input", "attempts", "requested_by")
    UID_FIELD_NUMBER: _ClassVar[int]
    VERB_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_BY_FIELD_NUMBER: _ClassVar[int]
    uid: str
    verb: str
    input: _struct_pb2.Struct
    attempts: int
    requested_by: str
    def __init__(self, uid: _Optional[str] = ..., verb: _Optional[str] = ..., input: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., attempts: _Optional[int] = ..., requested_by: _Optional[str] = ...) -> None: ...

class WorkStreamRequest(_message.Message):
    __slots__ = ("subscribe", "complete", "interest", "heartbeat")
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    INTEREST_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    subscribe: Subscribe
    complete: StageComplete
    interest: Interest
    heartbeat: WorkHeartbeat
    def __init__(self, subscribe: _Optional[_Union[Subscribe, _Mapping]] = ..., complete: _Optional[_Union[StageComplete, _Mapping]] = ..., interest: _Optional[_Union[Interest, _Mapping]] = ..., heartbeat: _Optional[_Union[WorkHeartbeat, _Mapping]] = ...) -> None: ...

class WorkStreamResponse(_message.Message):
    __slots__ = ("task", "provider_config_update", "result_ack")
    TASK_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_CONFIG_UPDATE_FIELD_NUMBER: _ClassVar[int]
    RESULT_ACK_FIELD_NUMBER: _ClassVar[int]
    task: StageTask
    provider_config_update: ProviderConfigUpdate
    result_ack: ResultAck
    def __init__(self, task: _Optional[_Union[StageTask, _Mapping]] = ..., provider_config_update: _Optional[_Union[ProviderConfigUpdate, _Mapping]] = ..., result_ack: _Optional[_Union[ResultAck, _Mapping]] = ...) -> None: ...

class ResultAck(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[LeaseRef]
    def __init__(self, leases: _Optional[_Iterable[_Union[LeaseRef, _Mapping]]] = ...) -> None: ...

class Subscribe(_message.Message):
    __slots__ = ("kinds", "max_inflight", "resumed", "agent")
    KINDS_FIELD_NUMBER: _ClassVar[int]
    MAX_INFLIGHT_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    kinds: _containers.RepeatedCompositeFieldContainer[KindVersion]
    max_inflight: int
    resumed: _containers.RepeatedCompositeFieldContainer[ResumedTask]
    agent: str
    def __init__(self, kinds: _Optional[_Iterable[_Union[KindVersion, _Mapping]]] = ..., max_inflight: _Optional[int] = ..., resumed: _Optional[_Iterable[_Union[ResumedTask, _Mapping]]] = ..., agent: _Optional[str] = ...) -> None: ...

class ResumedTask(_message.Message):
    __slots__ = ("lease_token", "claim_epoch")
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CLAIM_EPOCH_FIELD_NUMBER: _ClassVar[int]
    lease_token: str
    claim_epoch: int
    def __init__(self, lease_token: _Optional[str] = ..., claim_epoch: _Optional[int] = ...) -> None: ...

class LeaseRef(_message.Message):
    __slots__ = ("lease_token", "claim_epoch")
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CLAIM_EPOCH_FIELD_NUMBER: _ClassVar[int]
    lease_token: str
    claim_epoch: int
    def __init__(self, lease_token: _Optional[str] = ..., claim_epoch: _Optional[int] = ...) -> None: ...

class Interest(_message.Message):
    __slots__ = ("kind", "kind_version", "ready")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    kind: str
    kind_version: int
    ready: bool
    def __init__(self, kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., ready: _Optional[bool] = ...) -> None: ...

class WorkHeartbeat(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[LeaseRef]
    def __init__(self, leases: _Optional[_Iterable[_Union[LeaseRef, _Mapping]]] = ...) -> None: ...

class StageTask(_message.Message):
    __slots__ = ("stage", "kind", "kind_version", "resource", "generation", "reaction", "trigger", "lease_token", "claim_epoch", "manifest_version", "task_deadline", "attempt", "provider_config", "provider_bundle", "trace_context", "plan", "compose_input", "work_input", "rollup_input", "delete_input", "operate_input", "react_input")
    class TraceContextEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    STAGE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REACTION_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CLAIM_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_VERSION_FIELD_NUMBER: _ClassVar[int]
    TASK_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_CONFIG_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_BUNDLE_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    COMPOSE_INPUT_FIELD_NUMBER: _ClassVar[int]
    WORK_INPUT_FIELD_NUMBER: _ClassVar[int]
    ROLLUP_INPUT_FIELD_NUMBER: _ClassVar[int]
    DELETE_INPUT_FIELD_NUMBER: _ClassVar[int]
    OPERATE_INPUT_FIELD_NUMBER: _ClassVar[int]
    REACT_INPUT_FIELD_NUMBER: _ClassVar[int]
    stage: Stage
    kind: str
    kind_version: int
    resource: Resource
    generation: int
    reaction: str
    trigger: Trigger
    lease_token: str
    claim_epoch: int
    manifest_version: int
    task_deadline: _duration_pb2.Duration
    attempt: int
    provider_config: _struct_pb2.Struct
    provider_bundle: bytes
    trace_context: _containers.ScalarMap[str, str]
    plan: bool
    compose_input: ComposeInput
    work_input: WorkInput
    rollup_input: RollupInput
    delete_input: DeleteInput
    operate_input: OperateInput
    react_input: ReactInput
    def __init__(self, stage: _Optional[_Union[Stage, str]] = ..., kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., resource: _Optional[_Union[Resource, _Mapping]] = ..., generation: _Optional[int] = ..., reaction: _Optional[str] = ..., trigger: _Optional[_Union[Trigger, str]] = ..., lease_token: _Optional[str] = ..., claim_epoch: _Optional[int] = ..., manifest_version: _Optional[int] = ..., task_deadline: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., attempt: _Optional[int] = ..., provider_config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., provider_bundle: _Optional[bytes] = ..., trace_context: _Optional[_Mapping[str, str]] = ..., plan: _Optional[bool] = ..., compose_input: _Optional[_Union[ComposeInput, _Mapping]] = ..., work_input: _Optional[_Union[WorkInput, _Mapping]] = ..., rollup_input: _Optional[_Union[RollupInput, _Mapping]] = ..., delete_input: _Optional[_Union[DeleteInput, _Mapping]] = ..., operate_input: _Optional[_Union[OperateInput, _Mapping]] = ..., react_input: _Optional[_Union[ReactInput, _Mapping]] = ...) -> None: ...

class ComposeInput(_message.Message):
    __slots__ = ("observed", "desired", "edges", "configs")
    OBSERVED_FIELD_NUMBER: _ClassVar[int]
    DESIRED_FIELD_NUMBER: _ClassVar[int]
    EDGES_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    observed: _containers.RepeatedCompositeFieldContainer[Resource]
    desired: _containers.RepeatedCompositeFieldContainer[ChildSpec]
    edges: _containers.RepeatedCompositeFieldContainer[DepEdge]
    configs: _containers.RepeatedCompositeFieldContainer[ProviderConfigSpec]
    def __init__(self, observed: _Optional[_Iterable[_Union[Resource, _Mapping]]] = ..., desired: _Optional[_Iterable[_Union[ChildSpec, _Mapping]]] = ..., edges: _Optional[_Iterable[_Union[DepEdge, _Mapping]]] = ..., configs: _Optional[_Iterable[_Union[ProviderConfigSpec, _Mapping]]] = ...) -> None: ...

class WorkInput(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: _struct_pb2.Struct
    def __init__(self, status: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class RollupInput(_message.Message):
    __slots__ = ("descendants", "status")
    DESCENDANTS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    descendants: _containers.RepeatedCompositeFieldContainer[Resource]
    status: _struct_pb2.Struct
    def __init__(self, descendants: _Optional[_Iterable[_Union[Resource, _Mapping]]] = ..., status: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class DeleteInput(_message.Message):
    __slots__ = ("finalizer",)
    FINALIZER_FIELD_NUMBER: _ClassVar[int]
    finalizer: str
    def __init__(self, finalizer: _Optional[str] = ...) -> None: ...

class OperateInput(_message.Message):
    __slots__ = ("operation",)
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...

class ReactInput(_message.Message):
    __slots__ = ("transition", "dedup_token", "binding")
    TRANSITION_FIELD_NUMBER: _ClassVar[int]
    DEDUP_TOKEN_FIELD_NUMBER: _ClassVar[int]
    BINDING_FIELD_NUMBER: _ClassVar[int]
    transition: Transition
    dedup_token: str
    binding: str
    def __init__(self, transition: _Optional[_Union[Transition, str]] = ..., dedup_token: _Optional[str] = ..., binding: _Optional[str] = ...) -> None: ...

class StageComplete(_message.Message):
    __slots__ = ("lease_token", "claim_epoch", "stage", "generation", "manifest_version", "status", "conditions", "compose_result", "operation_output", "healthy", "error", "requeue_after", "events")
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CLAIM_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_VERSION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    COMPOSE_RESULT_FIELD_NUMBER: _ClassVar[int]
    OPERATION_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    REQUEUE_AFTER_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    lease_token: str
    claim_epoch: int
    stage: Stage
    generation: int
    manifest_version: int
    status: _struct_pb2.Struct
    conditions: _containers.RepeatedCompositeFieldContainer[Condition]
    compose_result: ComposeResult
    operation_output: _struct_pb2.Struct
    healthy: bool
    error: TaskError
    requeue_after: _duration_pb2.Duration
    events: _containers.RepeatedCompositeFieldContainer[WorkerEvent]
    def __init__(self, lease_token: _Optional[str] = ..., claim_epoch: _Optional[int] = ..., stage: _Optional[_Union[Stage, str]] = ..., generation: _Optional[int] = ..., manifest_version: _Optional[int] = ..., status: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., conditions: _Optional[_Iterable[_Union[Condition, _Mapping]]] = ..., compose_result: _Optional[_Union[ComposeResult, _Mapping]] = ..., operation_output: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., healthy: _Optional[bool] = ..., error: _Optional[_Union[TaskError, _Mapping]] = ..., requeue_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., events: _Optional[_Iterable[_Union[WorkerEvent, _Mapping]]] = ...) -> None: ...

class ComposeResult(_message.Message):
    __slots__ = ("desired", "edges", "configs")
    DESIRED_FIELD_NUMBER: _ClassVar[int]
    EDGES_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    desired: _containers.RepeatedCompositeFieldContainer[ChildSpec]
    edges: _containers.RepeatedCompositeFieldContainer[DepEdge]
    configs: _containers.RepeatedCompositeFieldContainer[ProviderConfigSpec]
    def __init__(self, desired: _Optional[_Iterable[_Union[ChildSpec, _Mapping]]] = ..., edges: _Optional[_Iterable[_Union[DepEdge, _Mapping]]] = ..., configs: _Optional[_Iterable[_Union[ProviderConfigSpec, _Mapping]]] = ...) -> None: ...

class TaskError(_message.Message):
    __slots__ = ("message", "terminal", "reason")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    message: str
    terminal: bool
    reason: str
    def __init__(self, message: _Optional[str] = ..., terminal: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class ProviderConfigUpdate(_message.Message):
    __slots__ = ("kind", "kind_version", "spec", "data", "deleted")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    kind: str
    kind_version: int
    spec: _struct_pb2.Struct
    data: bytes
    deleted: bool
    def __init__(self, kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., spec: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., data: _Optional[bytes] = ..., deleted: _Optional[bool] = ...) -> None: ...

class GetProviderConfigRequest(_message.Message):
    __slots__ = ("kinds",)
    KINDS_FIELD_NUMBER: _ClassVar[int]
    kinds: _containers.RepeatedCompositeFieldContainer[KindVersion]
    def __init__(self, kinds: _Optional[_Iterable[_Union[KindVersion, _Mapping]]] = ...) -> None: ...

class GetProviderConfigResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[ProviderConfigEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[ProviderConfigEntry, _Mapping]]] = ...) -> None: ...

class ProviderConfigEntry(_message.Message):
    __slots__ = ("kind", "kind_version", "spec", "data")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    kind: str
    kind_version: int
    spec: _struct_pb2.Struct
    data: bytes
    def __init__(self, kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., spec: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...
