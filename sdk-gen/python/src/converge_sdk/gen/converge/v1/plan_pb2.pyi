from converge_sdk.gen.converge.v1 import resource_pb2 as _resource_pb2
from google.api import field_behavior_pb2 as _field_behavior_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PlanAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PLAN_ACTION_UNSPECIFIED: _ClassVar[PlanAction]
    PLAN_ACTION_CREATE: _ClassVar[PlanAction]
    PLAN_ACTION_UPDATE: _ClassVar[PlanAction]
    PLAN_ACTION_UNCHANGED: _ClassVar[PlanAction]
    PLAN_ACTION_DELETE: _ClassVar[PlanAction]
    PLAN_ACTION_ORPHAN: _ClassVar[PlanAction]

class PlanComposer(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PLAN_COMPOSER_UNSPECIFIED: _ClassVar[PlanComposer]
    PLAN_COMPOSER_NONE: _ClassVar[PlanComposer]
    PLAN_COMPOSER_SERVER: _ClassVar[PlanComposer]
    PLAN_COMPOSER_WORKER: _ClassVar[PlanComposer]
PLAN_ACTION_UNSPECIFIED: PlanAction
PLAN_ACTION_CREATE: PlanAction
PLAN_ACTION_UPDATE: PlanAction
PLAN_ACTION_UNCHANGED: PlanAction
PLAN_ACTION_DELETE: PlanAction
PLAN_ACTION_ORPHAN: PlanAction
PLAN_COMPOSER_UNSPECIFIED: PlanComposer
PLAN_COMPOSER_NONE: PlanComposer
PLAN_COMPOSER_SERVER: PlanComposer
PLAN_COMPOSER_WORKER: PlanComposer

class FieldChange(_message.Message):
    __slots__ = ("path", "before", "after")
    PATH_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    path: str
    before: _struct_pb2.Value
    after: _struct_pb2.Value
    def __init__(self, path: _Optional[str] = ..., before: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., after: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class ResourcePlan(_message.Message):
    __slots__ = ("resource", "kind_version", "action", "spec_changes", "reconciles", "composer", "children", "unchanged_children", "edges_added", "edges_removed", "dependents", "teardown_order", "not_planned", "provider_config", "provider_configs")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    SPEC_CHANGES_FIELD_NUMBER: _ClassVar[int]
    RECONCILES_FIELD_NUMBER: _ClassVar[int]
    COMPOSER_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_CHILDREN_FIELD_NUMBER: _ClassVar[int]
    EDGES_ADDED_FIELD_NUMBER: _ClassVar[int]
    EDGES_REMOVED_FIELD_NUMBER: _ClassVar[int]
    DEPENDENTS_FIELD_NUMBER: _ClassVar[int]
    TEARDOWN_ORDER_FIELD_NUMBER: _ClassVar[int]
    NOT_PLANNED_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_CONFIG_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    resource: _resource_pb2.ResourceRef
    kind_version: int
    action: PlanAction
    spec_changes: _containers.RepeatedCompositeFieldContainer[FieldChange]
    reconciles: bool
    composer: PlanComposer
    children: _containers.RepeatedCompositeFieldContainer[ResourcePlan]
    unchanged_children: int
    edges_added: _containers.RepeatedCompositeFieldContainer[_resource_pb2.DependencyEdge]
    edges_removed: _containers.RepeatedCompositeFieldContainer[_resource_pb2.DependencyEdge]
    dependents: _containers.RepeatedCompositeFieldContainer[_resource_pb2.ResourceRef]
    teardown_order: _containers.RepeatedCompositeFieldContainer[_resource_pb2.ResourceRef]
    not_planned: str
    provider_config: str
    provider_configs: _containers.RepeatedCompositeFieldContainer[ProviderConfigPlan]
    def __init__(self, resource: _Optional[_Union[_resource_pb2.ResourceRef, _Mapping]] = ..., kind_version: _Optional[int] = ..., action: _Optional[_Union[PlanAction, str]] = ..., spec_changes: _Optional[_Iterable[_Union[FieldChange, _Mapping]]] = ..., reconciles: _Optional[bool] = ..., composer: _Optional[_Union[PlanComposer, str]] = ..., children: _Optional[_Iterable[_Union[ResourcePlan, _Mapping]]] = ..., unchanged_children: _Optional[int] = ..., edges_added: _Optional[_Iterable[_Union[_resource_pb2.DependencyEdge, _Mapping]]] = ..., edges_removed: _Optional[_Iterable[_Union[_resource_pb2.DependencyEdge, _Mapping]]] = ..., dependents: _Optional[_Iterable[_Union[_resource_pb2.ResourceRef, _Mapping]]] = ..., teardown_order: _Optional[_Iterable[_Union[_resource_pb2.ResourceRef, _Mapping]]] = ..., not_planned: _Optional[str] = ..., provider_config: _Optional[str] = ..., provider_configs: _Optional[_Iterable[_Union[ProviderConfigPlan, _Mapping]]] = ...) -> None: ...

class ProviderConfigPlan(_message.Message):
    __slots__ = ("name", "kind", "kind_version", "action", "spec_changes", "data_changes", "is_default")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    KIND_VERSION_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    SPEC_CHANGES_FIELD_NUMBER: _ClassVar[int]
    DATA_CHANGES_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    kind_version: int
    action: PlanAction
    spec_changes: _containers.RepeatedCompositeFieldContainer[FieldChange]
    data_changes: bool
    is_default: bool
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., kind_version: _Optional[int] = ..., action: _Optional[_Union[PlanAction, str]] = ..., spec_changes: _Optional[_Iterable[_Union[FieldChange, _Mapping]]] = ..., data_changes: _Optional[bool] = ..., is_default: _Optional[bool] = ...) -> None: ...
