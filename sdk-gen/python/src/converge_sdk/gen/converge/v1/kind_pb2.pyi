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

class Trigger(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRIGGER_UNSPECIFIED: _ClassVar[Trigger]
    TRIGGER_SPEC_CHANGE: _ClassVar[Trigger]
    TRIGGER_CHILDREN_SETTLED: _ClassVar[Trigger]
    TRIGGER_DELETE_REQUESTED: _ClassVar[Trigger]
    TRIGGER_OPERATION: _ClassVar[Trigger]
    TRIGGER_REACTOR: _ClassVar[Trigger]
    TRIGGER_RESYNC: _ClassVar[Trigger]

class Emit(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EMIT_UNSPECIFIED: _ClassVar[Emit]
    EMIT_CHILDREN: _ClassVar[Emit]
    EMIT_EDGES: _ClassVar[Emit]
    EMIT_CONFIGS: _ClassVar[Emit]
    EMIT_STATUS: _ClassVar[Emit]
    EMIT_CONDITIONS: _ClassVar[Emit]
    EMIT_FINALIZER: _ClassVar[Emit]
    EMIT_OPERATION_OUTPUT: _ClassVar[Emit]
    EMIT_SIDE_EFFECT: _ClassVar[Emit]

class RetryJitter(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RETRY_JITTER_UNSPECIFIED: _ClassVar[RetryJitter]
    RETRY_JITTER_NONE: _ClassVar[RetryJitter]
    RETRY_JITTER_FULL: _ClassVar[RetryJitter]
    RETRY_JITTER_EQUAL: _ClassVar[RetryJitter]
TRIGGER_UNSPECIFIED: Trigger
TRIGGER_SPEC_CHANGE: Trigger
TRIGGER_CHILDREN_SETTLED: Trigger
TRIGGER_DELETE_REQUESTED: Trigger
TRIGGER_OPERATION: Trigger
TRIGGER_REACTOR: Trigger
TRIGGER_RESYNC: Trigger
EMIT_UNSPECIFIED: Emit
EMIT_CHILDREN: Emit
EMIT_EDGES: Emit
EMIT_CONFIGS: Emit
EMIT_STATUS: Emit
EMIT_CONDITIONS: Emit
EMIT_FINALIZER: Emit
EMIT_OPERATION_OUTPUT: Emit
EMIT_SIDE_EFFECT: Emit
RETRY_JITTER_UNSPECIFIED: RetryJitter
RETRY_JITTER_NONE: RetryJitter
RETRY_JITTER_FULL: RetryJitter
RETRY_JITTER_EQUAL: RetryJitter

class Reaction(_message.Message):
    __slots__ = ("name", "trigger", "emits", "verb", "finalizer", "input_schema")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    EMITS_FIELD_NUMBER: _ClassVar[int]
    VERB_FIELD_NUMBER: _ClassVar[int]
    FINALIZER_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    name: str
    trigger: Trigger
    emits: _containers.RepeatedScalarFieldContainer[Emit]
    verb: str
    finalizer: str
    input_schema: _struct_pb2.Struct
    def __init__(self, name: _Optional[str] = ..., trigger: _Optional[_Union[Trigger, str]] = ..., emits: _Optional[_Iterable[_Union[Emit, str]]] = ..., verb: _Optional[str] = ..., finalizer: _Optional[str] = ..., input_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class KindPolicy(_message.Message):
    __slots__ = ("max_inflight", "task_deadline_secs", "resync_interval_secs", "resync_recomposes", "orphan_grace_secs", "max_transient_attempts", "unserved_condition_after_secs", "retry_base_ms", "retry_cap_ms", "retry_jitter")
    MAX_INFLIGHT_FIELD_NUMBER: _ClassVar[int]
    TASK_DEADLINE_SECS_FIELD_NUMBER: _ClassVar[int]
    RESYNC_INTERVAL_SECS_FIELD_NUMBER: _ClassVar[int]
    RESYNC_RECOMPOSES_FIELD_NUMBER: _ClassVar[int]
    ORPHAN_GRACE_SECS_FIELD_NUMBER: _ClassVar[int]
    MAX_TRANSIENT_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    UNSERVED_CONDITION_AFTER_SECS_FIELD_NUMBER: _ClassVar[int]
    RETRY_BASE_MS_FIELD_NUMBER: _ClassVar[int]
    RETRY_CAP_MS_FIELD_NUMBER: _ClassVar[int]
    RETRY_JITTER_FIELD_NUMBER: _ClassVar[int]
    max_inflight: int
    task_deadline_secs: int
    resync_interval_secs: int
    resync_recomposes: bool
    orphan_grace_secs: int
    max_transient_attempts: int
    unserved_condition_after_secs: int
    retry_base_ms: int
    retry_cap_ms: int
    retry_jitter: RetryJitter
    def __init__(self, max_inflight: _Optional[int] = ..., task_deadline_secs: _Optional[int] = ..., resync_interval_secs: _Optional[int] = ..., resync_recomposes: _Optional[bool] = ..., orphan_grace_secs: _Optional[int] = ..., max_transient_attempts: _Optional[int] = ..., unserved_condition_after_secs: _Optional[int] = ..., retry_base_ms: _Optional[int] = ..., retry_cap_ms: _Optional[int] = ..., retry_jitter: _Optional[_Union[RetryJitter, str]] = ...) -> None: ...

class KindManifest(_message.Message):
    __slots__ = ("kind", "kind_version", "description", "spec_schema", "status_schema", "config_schema", "reactions", "finalizer_name", "policy", "manifest_version", "create_time", "update_time", "conversions", "composition")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SPEC_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    STATUS_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    CONFIG_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    REACTIONS_FIELD_NUMBER: _ClassVar[int]
    FINALIZER_NAME_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    CONVERSIONS_FIELD_NUMBER: _ClassVar[int]
    COMPOSITION_FIELD_NUMBER: _ClassVar[int]
    kind: str
    kind_version: int
    description: str
    spec_schema: _struct_pb2.Struct
    status_schema: _struct_pb2.Struct
    config_schema: _struct_pb2.Struct
    reactions: _containers.RepeatedCompositeFieldContainer[Reaction]
    finalizer_name: str
    policy: KindPolicy
    manifest_version: int
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    conversions: _containers.RepeatedCompositeFieldContainer[SpecConversion]
    composition: Composition
    def __init__(self, kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., description: _Optional[str] = ..., spec_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., status_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., config_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., reactions: _Optional[_Iterable[_Union[Reaction, _Mapping]]] = ..., finalizer_name: _Optional[str] = ..., policy: _Optional[_Union[KindPolicy, _Mapping]] = ..., manifest_version: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., conversions: _Optional[_Iterable[_Union[SpecConversion, _Mapping]]] = ..., composition: _Optional[_Union[Composition, _Mapping]] = ...) -> None: ...

class Composition(_message.Message):
    __slots__ = ("resources", "rollup")
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    ROLLUP_FIELD_NUMBER: _ClassVar[int]
    resources: _containers.RepeatedCompositeFieldContainer[ComposedResource]
    rollup: CompositionRollup
    def __init__(self, resources: _Optional[_Iterable[_Union[ComposedResource, _Mapping]]] = ..., rollup: _Optional[_Union[CompositionRollup, _Mapping]] = ...) -> None: ...

class ComposedResource(_message.Message):
    __slots__ = ("id", "kind", "kind_version", "name", "labels", "spec", "for_each", "include_when", "provider_config")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    FOR_EACH_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_WHEN_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_CONFIG_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: str
    kind_version: int
    name: str
    labels: _containers.ScalarMap[str, str]
    spec: _struct_pb2.Struct
    for_each: str
    include_when: str
    provider_config: str
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., spec: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., for_each: _Optional[str] = ..., include_when: _Optional[str] = ..., provider_config: _Optional[str] = ...) -> None: ...

class CompositionRollup(_message.Message):
    __slots__ = ("status", "ready", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: _struct_pb2.Struct
    ready: str
    message: str
    def __init__(self, status: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., ready: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class SpecConversion(_message.Message):
    __slots__ = ("from_version", "spec", "fields")
    FROM_VERSION_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    from_version: int
    spec: str
    fields: _containers.RepeatedCompositeFieldContainer[FieldConversion]
    def __init__(self, from_version: _Optional[int] = ..., spec: _Optional[str] = ..., fields: _Optional[_Iterable[_Union[FieldConversion, _Mapping]]] = ...) -> None: ...

class FieldConversion(_message.Message):
    __slots__ = ("path", "value", "remove")
    PATH_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    path: str
    value: str
    remove: bool
    def __init__(self, path: _Optional[str] = ..., value: _Optional[str] = ..., remove: _Optional[bool] = ...) -> None: ...

class KindConfig(_message.Message):
    __slots__ = ("kind", "kind_version", "max_inflight", "task_deadline_secs", "resync_interval_secs", "resync_recomposes", "orphan_grace_secs", "max_transient_attempts", "retired", "update_time", "etag", "revision_limit", "unserved_condition_after_secs", "retry_base_ms", "retry_cap_ms", "retry_jitter")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_INFLIGHT_FIELD_NUMBER: _ClassVar[int]
    TASK_DEADLINE_SECS_FIELD_NUMBER: _ClassVar[int]
    RESYNC_INTERVAL_SECS_FIELD_NUMBER: _ClassVar[int]
    RESYNC_RECOMPOSES_FIELD_NUMBER: _ClassVar[int]
    ORPHAN_GRACE_SECS_FIELD_NUMBER: _ClassVar[int]
    MAX_TRANSIENT_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETIRED_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    REVISION_LIMIT_FIELD_NUMBER: _ClassVar[int]
    UNSERVED_CONDITION_AFTER_SECS_FIELD_NUMBER: _ClassVar[int]
    RETRY_BASE_MS_FIELD_NUMBER: _ClassVar[int]
    RETRY_CAP_MS_FIELD_NUMBER: _ClassVar[int]
    RETRY_JITTER_FIELD_NUMBER: _ClassVar[int]
    kind: str
    kind_version: int
    max_inflight: int
    task_deadline_secs: int
    resync_interval_secs: int
    resync_recomposes: bool
    orphan_grace_secs: int
    max_transient_attempts: int
    retired: bool
    update_time: _timestamp_pb2.Timestamp
    etag: str
    revision_limit: int
    unserved_condition_after_secs: int
    retry_base_ms: int
    retry_cap_ms: int
    retry_jitter: RetryJitter
    def __init__(self, kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., max_inflight: _Optional[int] = ..., task_deadline_secs: _Optional[int] = ..., resync_interval_secs: _Optional[int] = ..., resync_recomposes: _Optional[bool] = ..., orphan_grace_secs: _Optional[int] = ..., max_transient_attempts: _Optional[int] = ..., retired: _Optional[bool] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., etag: _Optional[str] = ..., revision_limit: _Optional[int] = ..., unserved_condition_after_secs: _Optional[int] = ..., retry_base_ms: _Optional[int] = ..., retry_cap_ms: _Optional[int] = ..., retry_jitter: _Optional[_Union[RetryJitter, str]] = ...) -> None: ...
