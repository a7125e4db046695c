import datetime

from converge_sdk.gen.converge.v1 import cluster_pb2 as _cluster_pb2
from google.api import field_behavior_pb2 as _field_behavior_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListClusterMembersRequest(_message.Message):
    __slots__ = ("ready_only",)
    READY_ONLY_FIELD_NUMBER: _ClassVar[int]
    ready_only: bool
    def __init__(self, ready_only: _Optional[bool] = ...) -> None: ...

class ListClusterMembersResponse(_message.Message):
    __slots__ = ("members",)
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[_cluster_pb2.ClusterMember]
    def __init__(self, members: _Optional[_Iterable[_Union[_cluster_pb2.ClusterMember, _Mapping]]] = ...) -> None: ...

class GetVersionRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetVersionResponse(_message.Message):
    __slots__ = ("version", "commit", "api_versions", "rust_version", "build_time", "database_version", "schema_version")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    API_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    RUST_VERSION_FIELD_NUMBER: _ClassVar[int]
    BUILD_TIME_FIELD_NUMBER: _ClassVar[int]
    DATABASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    version: str
    commit: str
    api_versions: _containers.RepeatedScalarFieldContainer[str]
    rust_version: str
    build_time: _timestamp_pb2.Timestamp
    database_version: str
    schema_version: int
    def __init__(self, version: _Optional[str] = ..., commit: _Optional[str] = ..., api_versions: _Optional[_Iterable[str]] = ..., rust_version: _Optional[str] = ..., build_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., database_version: _Optional[str] = ..., schema_version: _Optional[int] = ...) -> None: ...
