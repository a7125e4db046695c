import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MemberRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMBER_ROLE_UNSPECIFIED: _ClassVar[MemberRole]
    MEMBER_ROLE_ALL: _ClassVar[MemberRole]
    MEMBER_ROLE_CONTROL: _ClassVar[MemberRole]
    MEMBER_ROLE_BROKER: _ClassVar[MemberRole]
MEMBER_ROLE_UNSPECIFIED: MemberRole
MEMBER_ROLE_ALL: MemberRole
MEMBER_ROLE_CONTROL: MemberRole
MEMBER_ROLE_BROKER: MemberRole

class ShardRange(_message.Message):
    __slots__ = ("lo", "hi")
    LO_FIELD_NUMBER: _ClassVar[int]
    HI_FIELD_NUMBER: _ClassVar[int]
    lo: int
    hi: int
    def __init__(self, lo: _Optional[int] = ..., hi: _Optional[int] = ...) -> None: ...

class ServedKind(_message.Message):
    __slots__ = ("kind", "kind_version", "ready")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    kind: str
    kind_version: int
    ready: bool
    def __init__(self, kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., ready: _Optional[bool] = ...) -> None: ...

class ConnectedWorker(_message.Message):
    __slots__ = ("identity", "agent", "kinds", "max_inflight", "in_flight", "connect_time")
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    MAX_INFLIGHT_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    CONNECT_TIME_FIELD_NUMBER: _ClassVar[int]
    identity: str
    agent: str
    kinds: _containers.RepeatedCompositeFieldContainer[ServedKind]
    max_inflight: int
    in_flight: int
    connect_time: _timestamp_pb2.Timestamp
    def __init__(self, identity: _Optional[str] = ..., agent: _Optional[str] = ..., kinds: _Optional[_Iterable[_Union[ServedKind, _Mapping]]] = ..., max_inflight: _Optional[int] = ..., in_flight: _Optional[int] = ..., connect_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ClusterMember(_message.Message):
    __slots__ = ("member_id", "role", "shard_range", "version", "hostname", "pid", "start_time", "last_heartbeat_time", "ready", "in_flight", "connected_workers", "workers", "config", "broker_counters")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    SHARD_RANGE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_TIME_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_WORKERS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    BROKER_COUNTERS_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    role: MemberRole
    shard_range: ShardRange
    version: str
    hostname: str
    pid: int
    start_time: _timestamp_pb2.Timestamp
    last_heartbeat_time: _timestamp_pb2.Timestamp
    ready: bool
    in_flight: int
    connected_workers: int
    workers: _containers.RepeatedCompositeFieldContainer[ConnectedWorker]
    config: _struct_pb2.Struct
    broker_counters: BrokerCounters
    def __init__(self, member_id: _Optional[str] = ..., role: _Optional[_Union[MemberRole, str]] = ..., shard_range: _Optional[_Union[ShardRange, _Mapping]] = ..., version: _Optional[str] = ..., hostname: _Optional[str] = ..., pid: _Optional[int] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_heartbeat_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ready: _Optional[bool] = ..., in_flight: _Optional[int] = ..., connected_workers: _Optional[int] = ..., workers: _Optional[_Iterable[_Union[ConnectedWorker, _Mapping]]] = ..., config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., broker_counters: _Optional[_Union[BrokerCounters, _Mapping]] = ...) -> None: ...

class BrokerCounters(_message.Message):
    __slots__ = ("dispatched", "applied", "failed", "stale", "composed")
    DISPATCHED_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    COMPOSED_FIELD_NUMBER: _ClassVar[int]
    dispatched: int
    applied: int
    failed: int
    stale: int
    composed: int
    def __init__(self, dispatched: _Optional[int] = ..., applied: _Optional[int] = ..., failed: _Optional[int] = ..., stale: _Optional[int] = ..., composed: _Optional[int] = ...) -> None: ...
