from converge_sdk.gen.converge.v1 import kind_pb2 as _kind_pb2
from google.api import field_behavior_pb2 as _field_behavior_pb2
from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ApplyKindManifestRequest(_message.Message):
    __slots__ = ("manifest", "validate_only", "request_id")
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    manifest: _kind_pb2.KindManifest
    validate_only: bool
    request_id: str
    def __init__(self, manifest: _Optional[_Union[_kind_pb2.KindManifest, _Mapping]] = ..., validate_only: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class ApplyKindManifestResponse(_message.Message):
    __slots__ = ("manifest", "created", "unchanged")
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    manifest: _kind_pb2.KindManifest
    created: bool
    unchanged: bool
    def __init__(self, manifest: _Optional[_Union[_kind_pb2.KindManifest, _Mapping]] = ..., created: _Optional[bool] = ..., unchanged: _Optional[bool] = ...) -> None: ...

class GetKindManifestRequest(_message.Message):
    __slots__ = ("kind", "kind_version")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    kind: str
    kind_version: int
    def __init__(self, kind: _Optional[str] = ..., kind_version: _Optional[int] = ...) -> None: ...

class GetKindManifestResponse(_message.Message):
    __slots__ = ("manifest",)
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    manifest: _kind_pb2.KindManifest
    def __init__(self, manifest: _Optional[_Union[_kind_pb2.KindManifest, _Mapping]] = ...) -> None: ...

class ListKindManifestsRequest(_message.Message):
    __slots__ = ("kind", "page_size", "page_token")
    KIND_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    kind: str
    page_size: int
    page_token: str
    def __init__(self, kind: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListKindManifestsResponse(_message.Message):
    __slots__ = ("manifests", "next_page_token")
    MANIFESTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    manifests: _containers.RepeatedCompositeFieldContainer[_kind_pb2.KindManifest]
    next_page_token: str
    def __init__(self, manifests: _Optional[_Iterable[_Union[_kind_pb2.KindManifest, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteKindManifestRequest(_message.Message):
    __slots__ = ("kind", "kind_version", "allow_missing", "request_id")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    ALLOW_MISSING_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    kind: str
    kind_version: int
    allow_missing: bool
    request_id: str
    def __init__(self, kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., allow_missing: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class DeleteKindManifestResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetKindConfigRequest(_message.Message):
    __slots__ = ("kind", "kind_version")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    kind: str
    kind_version: int
    def __init__(self, kind: _Optional[str] = ..., kind_version: _Optional[int] = ...) -> None: ...

class GetKindConfigResponse(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: _kind_pb2.KindConfig
    def __init__(self, config: _Optional[_Union[_kind_pb2.KindConfig, _Mapping]] = ...) -> None: ...

class UpdateKindConfigRequest(_message.Message):
    __slots__ = ("config", "update_mask", "validate_only", "request_id")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    config: _kind_pb2.KindConfig
    update_mask: _field_mask_pb2.FieldMask
    validate_only: bool
    request_id: str
    def __init__(self, config: _Optional[_Union[_kind_pb2.KindConfig, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ..., validate_only: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class UpdateKindConfigResponse(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: _kind_pb2.KindConfig
    def __init__(self, config: _Optional[_Union[_kind_pb2.KindConfig, _Mapping]] = ...) -> None: ...
