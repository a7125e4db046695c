from converge_sdk.gen.converge.v1 import reactor_binding_pb2 as _reactor_binding_pb2
from google.api import field_behavior_pb2 as _field_behavior_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ApplyReactorBindingRequest(_message.Message):
    __slots__ = ("reactor_binding", "validate_only", "request_id")
    REACTOR_BINDING_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    reactor_binding: _reactor_binding_pb2.ReactorBinding
    validate_only: bool
    request_id: str
    def __init__(self, reactor_binding: _Optional[_Union[_reactor_binding_pb2.ReactorBinding, _Mapping]] = ..., validate_only: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class ApplyReactorBindingResponse(_message.Message):
    __slots__ = ("reactor_binding", "created")
    REACTOR_BINDING_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    reactor_binding: _reactor_binding_pb2.ReactorBinding
    created: bool
    def __init__(self, reactor_binding: _Optional[_Union[_reactor_binding_pb2.ReactorBinding, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class GetReactorBindingRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetReactorBindingResponse(_message.Message):
    __slots__ = ("reactor_binding",)
    REACTOR_BINDING_FIELD_NUMBER: _ClassVar[int]
    reactor_binding: _reactor_binding_pb2.ReactorBinding
    def __init__(self, reactor_binding: _Optional[_Union[_reactor_binding_pb2.ReactorBinding, _Mapping]] = ...) -> None: ...

class ListReactorBindingsRequest(_message.Message):
    __slots__ = ("watch_kind", "reactor", "page_size", "page_token")
    WATCH_KIND_FIELD_NUMBER: _ClassVar[int]
    REACTOR_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    watch_kind: str
    reactor: str
    page_size: int
    page_token: str
    def __init__(self, watch_kind: _Optional[str] = ..., reactor: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListReactorBindingsResponse(_message.Message):
    __slots__ = ("reactor_bindings", "next_page_token")
    REACTOR_BINDINGS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    reactor_bindings: _containers.RepeatedCompositeFieldContainer[_reactor_binding_pb2.ReactorBinding]
    next_page_token: str
    def __init__(self, reactor_bindings: _Optional[_Iterable[_Union[_reactor_binding_pb2.ReactorBinding, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteReactorBindingRequest(_message.Message):
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

class DeleteReactorBindingResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
