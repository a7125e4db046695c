from converge_sdk.gen.converge.v1 import kind_migration_pb2 as _kind_migration_pb2
from google.api import field_behavior_pb2 as _field_behavior_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StartKindMigrationRequest(_message.Message):
    __slots__ = ("kind", "from_version", "to_version", "label_selector", "validate_only", "request_id")
    KIND_FIELD_NUMBER: _ClassVar[int]
    FROM_VERSION_FIELD_NUMBER: _ClassVar[int]
    TO_VERSION_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    kind: str
    from_version: int
    to_version: int
    label_selector: str
    validate_only: bool
    request_id: str
    def __init__(self, kind: _Optional[str] = ..., from_version: _Optional[int] = ..., to_version: _Optional[int] = ..., label_selector: _Optional[str] = ..., validate_only: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class StartKindMigrationResponse(_message.Message):
    __slots__ = ("migration",)
    MIGRATION_FIELD_NUMBER: _ClassVar[int]
    migration: _kind_migration_pb2.KindMigration
    def __init__(self, migration: _Optional[_Union[_kind_migration_pb2.KindMigration, _Mapping]] = ...) -> None: ...

class GetKindMigrationRequest(_message.Message):
    __slots__ = ("uid",)
    UID_FIELD_NUMBER: _ClassVar[int]
    uid: str
    def __init__(self, uid: _Optional[str] = ...) -> None: ...

class GetKindMigrationResponse(_message.Message):
    __slots__ = ("migration",)
    MIGRATION_FIELD_NUMBER: _ClassVar[int]
    migration: _kind_migration_pb2.KindMigration
    def __init__(self, migration: _Optional[_Union[_kind_migration_pb2.KindMigration, _Mapping]] = ...) -> None: ...

class ListKindMigrationsRequest(_message.Message):
    __slots__ = ("kind", "page_size", "page_token")
    KIND_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    kind: str
    page_size: int
    page_token: str
    def __init__(self, kind: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListKindMigrationsResponse(_message.Message):
    __slots__ = ("migrations", "next_page_token")
    MIGRATIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    migrations: _containers.RepeatedCompositeFieldContainer[_kind_migration_pb2.KindMigration]
    next_page_token: str
    def __init__(self, migrations: _Optional[_Iterable[_Union[_kind_migration_pb2.KindMigration, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelKindMigrationRequest(_message.Message):
    __slots__ = ("uid",)
    UID_FIELD_NUMBER: _ClassVar[int]
    uid: str
    def __init__(self, uid: _Optional[str] = ...) -> None: ...

class CancelKindMigrationResponse(_message.Message):
    __slots__ = ("migration",)
    MIGRATION_FIELD_NUMBER: _ClassVar[int]
    migration: _kind_migration_pb2.KindMigration
    def __init__(self, migration: _Optional[_Union[_kind_migration_pb2.KindMigration, _Mapping]] = ...) -> None: ...

class WatchKindMigrationRequest(_message.Message):
    __slots__ = ("uid",)
    UID_FIELD_NUMBER: _ClassVar[int]
    uid: str
    def __init__(self, uid: _Optional[str] = ...) -> None: ...

class WatchKindMigrationResponse(_message.Message):
    __slots__ = ("migration",)
    MIGRATION_FIELD_NUMBER: _ClassVar[int]
    migration: _kind_migration_pb2.KindMigration
    def __init__(self, migration: _Optional[_Union[_kind_migration_pb2.KindMigration, _Mapping]] = ...) -> None: ...
