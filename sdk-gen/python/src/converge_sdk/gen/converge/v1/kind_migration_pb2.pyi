import datetime

from google.api import field_behavior_pb2 as _field_behavior_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class KindMigrationState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KIND_MIGRATION_STATE_UNSPECIFIED: _ClassVar[KindMigrationState]
    KIND_MIGRATION_STATE_RUNNING: _ClassVar[KindMigrationState]
    KIND_MIGRATION_STATE_SUCCEEDED: _ClassVar[KindMigrationState]
    KIND_MIGRATION_STATE_FAILED: _ClassVar[KindMigrationState]
    KIND_MIGRATION_STATE_CANCELLED: _ClassVar[KindMigrationState]
KIND_MIGRATION_STATE_UNSPECIFIED: KindMigrationState
KIND_MIGRATION_STATE_RUNNING: KindMigrationState
KIND_MIGRATION_STATE_SUCCEEDED: KindMigrationState
KIND_MIGRATION_STATE_FAILED: KindMigrationState
KIND_MIGRATION_STATE_CANCELLED: KindMigrationState

class KindMigrationFailure(_message.Message):
    __slots__ = ("name", "message")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    name: str
    message: str
    def __init__(self, name: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class KindMigration(_message.Message):
    __slots__ = ("uid", "kind", "from_version", "to_version", "label_selector", "validate_only", "state", "total", "converted", "failed", "first_failures", "requested_by", "create_time", "update_time", "end_time", "done")
    UID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    FROM_VERSION_FIELD_NUMBER: _ClassVar[int]
    TO_VERSION_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    CONVERTED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    FIRST_FAILURES_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_BY_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    uid: str
    kind: str
    from_version: int
    to_version: int
    label_selector: str
    validate_only: bool
    state: KindMigrationState
    total: int
    converted: int
    failed: int
    first_failures: _containers.RepeatedCompositeFieldContainer[KindMigrationFailure]
    requested_by: str
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    done: bool
    def __init__(self, uid: _Optional[str] = ..., kind: _Optional[str] = ..., from_version: _Optional[int] = ..., to_version: _Optional[int] = ..., label_selector: _Optional[str] = ..., validate_only: _Optional[bool] = ..., state: _Optional[_Union[KindMigrationState, str]] = ..., total: _Optional[int] = ..., converted: _Optional[int] = ..., failed: _Optional[int] = ..., first_failures: _Optional[_Iterable[_Union[KindMigrationFailure, _Mapping]]] = ..., requested_by: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., done: _Optional[bool] = ...) -> None: ...
