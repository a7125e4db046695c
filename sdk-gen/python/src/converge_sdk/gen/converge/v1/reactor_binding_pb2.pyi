import datetime

from google.api import field_behavior_pb2 as _field_behavior_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Transition(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSITION_UNSPECIFIED: _ClassVar[Transition]
    TRANSITION_CREATED: _ClassVar[Transition]
    TRANSITION_SYNCED: _ClassVar[Transition]
    TRANSITION_DEGRADED: _ClassVar[Transition]
    TRANSITION_FAILED: _ClassVar[Transition]
    TRANSITION_DELETED: _ClassVar[Transition]
TRANSITION_UNSPECIFIED: Transition
TRANSITION_CREATED: Transition
TRANSITION_SYNCED: Transition
TRANSITION_DEGRADED: Transition
TRANSITION_FAILED: Transition
TRANSITION_DELETED: Transition

class ReactorBinding(_message.Message):
    __slots__ = ("name", "watch_kind", "watch_kind_version", "transition", "label_match", "reactor", "reactor_version", "enabled", "create_time", "update_time", "etag", "pending_deliveries", "failed_deliveries", "last_failure")
    class LabelMatchEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    WATCH_KIND_FIELD_NUMBER: _ClassVar[int]
    WATCH_KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    TRANSITION_FIELD_NUMBER: _ClassVar[int]
    LABEL_MATCH_FIELD_NUMBER: _ClassVar[int]
    REACTOR_FIELD_NUMBER: _ClassVar[int]
    REACTOR_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    PENDING_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    FAILED_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    LAST_FAILURE_FIELD_NUMBER: _ClassVar[int]
    name: str
    watch_kind: str
    watch_kind_version: int
    transition: Transition
    label_match: _containers.ScalarMap[str, str]
    reactor: str
    reactor_version: int
    enabled: bool
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    etag: str
    pending_deliveries: int
    failed_deliveries: int
    last_failure: str
    def __init__(self, name: _Optional[str] = ..., watch_kind: _Optional[str] = ..., watch_kind_version: _Optional[int] = ..., transition: _Optional[_Union[Transition, str]] = ..., label_match: _Optional[_Mapping[str, str]] = ..., reactor: _Optional[str] = ..., reactor_version: _Optional[int] = ..., enabled: _Optional[bool] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., etag: _Optional[str] = ..., pending_deliveries: _Optional[int] = ..., failed_deliveries: _Optional[int] = ..., last_failure: _Optional[str] = ...) -> None: ...
