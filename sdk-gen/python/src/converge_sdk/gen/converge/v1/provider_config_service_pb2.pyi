from converge_sdk.gen.converge.v1 import provider_config_pb2 as _provider_config_pb2
from converge_sdk.gen.converge.v1 import resource_pb2 as _resource_pb2
from google.api import field_behavior_pb2 as _field_behavior_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ApplyProviderConfigRequest(_message.Message):
    __slots__ = ("provider_config", "validate_only", "request_id")
    PROVIDER_CONFIG_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    provider_config: _provider_config_pb2.ProviderConfig
    validate_only: bool
    request_id: str
    def __init__(self, provider_config: _Optional[_Union[_provider_config_pb2.ProviderConfig, _Mapping]] = ..., validate_only: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class ApplyProviderConfigResponse(_message.Message):
    __slots__ = ("provider_config", "created")
    PROVIDER_CONFIG_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    provider_config: _provider_config_pb2.ProviderConfig
    created: bool
    def __init__(self, provider_config: _Optional[_Union[_provider_config_pb2.ProviderConfig, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class GetProviderConfigRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetProviderConfigResponse(_message.Message):
    __slots__ = ("provider_config",)
    PROVIDER_CONFIG_FIELD_NUMBER: _ClassVar[int]
    provider_config: _provider_config_pb2.ProviderConfig
    def __init__(self, provider_config: _Optional[_Union[_provider_config_pb2.ProviderConfig, _Mapping]] = ...) -> None: ...

class ListProviderConfigsRequest(_message.Message):
    __slots__ = ("kind", "kind_version", "is_default", "owner", "page_size", "page_token")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    kind: str
    kind_version: int
    is_default: bool
    owner: _resource_pb2.ResourceRef
    page_size: int
    page_token: str
    def __init__(self, kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., is_default: _Optional[bool] = ..., owner: _Optional[_Union[_resource_pb2.ResourceRef, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListProviderConfigsResponse(_message.Message):
    __slots__ = ("provider_configs", "next_page_token")
    PROVIDER_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    provider_configs: _containers.RepeatedCompositeFieldContainer[_provider_config_pb2.ProviderConfig]
    next_page_token: str
    def __init__(self, provider_configs: _Optional[_Iterable[_Union[_provider_config_pb2.ProviderConfig, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteProviderConfigRequest(_message.Message):
    __slots__ = ("name", "allow_missing", "request_id", "etag")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ALLOW_MISSING_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    name: str
    allow_missing: bool
    request_id: str
    etag: str
    def __init__(self, name: _Optional[str] = ..., allow_missing: _Optional[bool] = ..., request_id: _Optional[str] = ..., etag: _Optional[str] = ...) -> None: ...

class DeleteProviderConfigResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
