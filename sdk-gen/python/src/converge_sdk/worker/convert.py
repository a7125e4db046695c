"""Conversions between the generated ``converge.worker.v1`` messages and the
domain types. Nothing else in the worker runtime touches ``Struct`` values."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, Iterable, List, Mapping, Optional, Union

from google.protobuf import duration_pb2, struct_pb2, timestamp_pb2

from converge_sdk.gen.converge.worker.v1 import worker_pb2 as pb
from converge_sdk.worker.outcome import HandlerError, Outcome, TerminalError
from converge_sdk.worker.request import ReactionRequest
from converge_sdk.worker.types import (
    ChildSpec,
    ComposeInput,
    Condition,
    ConditionStatus,
    DeleteInput,
    DepEdge,
    Event,
    EventType,
    JsonObject,
    KindVersion,
    OperateInput,
    Operation,
    ProviderConfig,
    ProviderConfigSpec,
    ReactInput,
    Resource,
    ResourceRef,
    RollupInput,
    Stage,
    StageInput,
    Transition,
    Trigger,
    ValueFlow,
    WorkInput,
)

# Integral doubles up to 2^53 are exact, so they come back as int: a spec's
# {"count": 5} reads as 5, not 5.0, as it was written.
_MAX_SAFE_INTEGER = 2**53


class InvalidValue(ValueError):
    """A domain value that cannot be expressed on the wire (a non-object
    where a JSON object is required, or a value JSON cannot hold)."""


def value_to_json(value: struct_pb2.Value) -> Any:
    """A ``google.protobuf.Value`` as a plain JSON value. Non-finite numbers
    become ``None``; integral numbers within 2^53 become ``int``."""
    which = value.WhichOneof("kind")
    if which == "bool_value":
        return value.bool_value
    if which == "number_value":
        number = value.number_value
        if not math.isfinite(number):
            return None
        if number.is_integer() and abs(number) <= _MAX_SAFE_INTEGER:
            return int(number)
        return number
    if which == "string_value":
        return value.string_value
    if which == "struct_value":
        return struct_to_json(value.struct_value)
    if which == "list_value":
        return [value_to_json(item) for item in value.list_value.values]
    return None


def struct_to_json(value: struct_pb2.Struct) -> JsonObject:
    """A ``google.protobuf.Struct`` as a ``dict``."""
    return {key: value_to_json(item) for key, item in value.fields.items()}


def _fill_value(target: struct_pb2.Value, value: Any, path: str) -> None:
    if value is None:
        target.null_value = struct_pb2.NULL_VALUE
    elif isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidValue(f"{path} is a non-finite number, which JSON cannot hold")
        target.number_value = float(value)
    elif isinstance(value, str):
        target.string_value = value
    elif isinstance(value, Mapping):
        _fill_struct(target.struct_value, value, path)
    elif isinstance(value, (list, tuple)):
        target.list_value.SetInParent()
        for index, item in enumerate(value):
            _fill_value(target.list_value.values.add(), item, f"{path}[{index}]")
    else:
        raise InvalidValue(f"{path} holds a {type(value).__name__}, which is not a JSON value")


def _fill_struct(target: struct_pb2.Struct, value: Mapping[Any, Any], path: str) -> None:
    target.SetInParent()
    for key, item in value.items():
        if not isinstance(key, str):
            raise InvalidValue(f"{path} has a non-string key {key!r}")
        _fill_value(target.fields[key], item, f"{path}.{key}")


def json_to_struct(value: Any, field: str) -> struct_pb2.Struct:
    """A JSON object as a ``google.protobuf.Struct``; ``field`` names the
    value in the :class:`InvalidValue` raised when it is not an object."""
    if not isinstance(value, Mapping):
        raise InvalidValue(f"{field} must be a JSON object, got {_json_type(value)}")
    result = struct_pb2.Struct()
    _fill_struct(result, value, field)
    return result


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    return f"a {type(value).__name__}"


def duration_from_proto(value: duration_pb2.Duration) -> float:
    """A protobuf duration in seconds; negative values clamp to zero."""
    return max(0.0, value.seconds + value.nanos / 1e9)


def duration_to_proto(seconds: float) -> duration_pb2.Duration:
    """Seconds as a protobuf duration."""
    whole = math.floor(seconds)
    return duration_pb2.Duration(seconds=whole, nanos=min(999_999_999, round((seconds - whole) * 1e9)))


def _seconds(value: Union[float, timedelta], field: str) -> float:
    """A duration field (seconds or a ``timedelta``) in seconds; raises
    :class:`InvalidValue` unless it is finite and non-negative."""
    try:
        seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidValue(f"{field} must be a finite, non-negative duration, got {value!r}")
    return seconds


def _timestamp(value: timestamp_pb2.Timestamp) -> datetime:
    return datetime.fromtimestamp(value.seconds + value.nanos / 1e9, tz=timezone.utc)


_STAGES: Dict[int, Stage] = {
    pb.STAGE_COMPOSE: Stage.COMPOSE,
    pb.STAGE_WORK: Stage.WORK,
    pb.STAGE_ROLLUP: Stage.ROLLUP,
    pb.STAGE_DELETE: Stage.DELETE,
    pb.STAGE_OPERATE: Stage.OPERATE,
    pb.STAGE_REACT: Stage.REACT,
}

_TRIGGERS: Dict[int, Trigger] = {
    pb.TRIGGER_SPEC_CHANGE: Trigger.SPEC_CHANGE,
    pb.TRIGGER_CHILDREN_SETTLED: Trigger.CHILDREN_SETTLED,
    pb.TRIGGER_DELETE_REQUESTED: Trigger.DELETE_REQUESTED,
    pb.TRIGGER_OPERATION: Trigger.OPERATION,
    pb.TRIGGER_REACTOR: Trigger.REACTOR,
    pb.TRIGGER_RESYNC: Trigger.RESYNC,
    pb.TRIGGER_CONFIG_CHANGE: Trigger.CONFIG_CHANGE,
}

_TRANSITIONS: Dict[int, Transition] = {
    pb.TRANSITION_CREATED: Transition.CREATED,
    pb.TRANSITION_SYNCED: Transition.SYNCED,
    pb.TRANSITION_DEGRADED: Transition.DEGRADED,
    pb.TRANSITION_FAILED: Transition.FAILED,
    pb.TRANSITION_DELETED: Transition.DELETED,
}

_CONDITION_STATUSES: Dict[ConditionStatus, "pb.ConditionStatus"] = {
    ConditionStatus.TRUE: pb.CONDITION_STATUS_TRUE,
    ConditionStatus.FALSE: pb.CONDITION_STATUS_FALSE,
    ConditionStatus.UNKNOWN: pb.CONDITION_STATUS_UNKNOWN,
}

_EVENT_TYPES: Dict[EventType, "pb.EventType"] = {
    EventType.NORMAL: pb.EVENT_TYPE_NORMAL,
    EventType.WARNING: pb.EVENT_TYPE_WARNING,
}


def stage_from_proto(stage: int) -> Optional[Stage]:
    """The domain stage; ``None`` for unspecified or unknown values."""
    return _STAGES.get(stage)


def _ref(ref: pb.ResourceRef) -> ResourceRef:
    return ResourceRef(kind=ref.kind, name=ref.name)


def resource_from_proto(r: pb.Resource) -> Resource:
    """A protobuf resource as a domain resource."""
    return Resource(
        uid=r.uid,
        kind=r.kind,
        kind_version=r.kind_version,
        name=r.name,
        labels=dict(r.labels),
        spec=struct_to_json(r.spec) if r.HasField("spec") else {},
        status=struct_to_json(r.status) if r.HasField("status") else None,
        generation=r.generation,
        observed_generation=r.observed_generation,
        ready=r.ready,
        healthy=r.healthy,
        owner=_ref(r.owner) if r.HasField("owner") else None,
        root=_ref(r.root) if r.HasField("root") else None,
        finalizers=tuple(r.finalizers),
        delete_time=_timestamp(r.delete_time) if r.HasField("delete_time") else None,
        orphan_expire_time=_timestamp(r.orphan_expire_time) if r.HasField("orphan_expire_time") else None,
        quarantined=r.quarantined,
    )


def _child_from_proto(c: pb.ChildSpec) -> ChildSpec:
    return ChildSpec(
        kind=c.kind,
        kind_version=c.kind_version,
        name=c.name,
        spec=struct_to_json(c.spec) if c.HasField("spec") else {},
        labels=dict(c.labels),
        provider_config=c.provider_config or None,
    )


def _edge_from_proto(e: pb.DepEdge) -> DepEdge:
    return DepEdge(
        dependent=_ref(e.dependent),
        dependency=_ref(e.dependency),
        value_flows=tuple(ValueFlow(f.dependent_field, f.source_field) for f in e.value_flows),
    )


def _config_spec_from_proto(c: pb.ProviderConfigSpec) -> ProviderConfigSpec:
    return ProviderConfigSpec(
        name=c.name,
        kind=c.kind,
        kind_version=c.kind_version,
        is_default=c.is_default,
        spec=struct_to_json(c.spec) if c.HasField("spec") else None,
        data=c.data,
    )


def provider_config(spec: Optional[struct_pb2.Struct], data: bytes) -> Optional[ProviderConfig]:
    """A default provider config as pushed or fetched; spec and bundle travel
    together and both absent means "no default"."""
    if spec is None and not data:
        return None
    return ProviderConfig(spec=struct_to_json(spec) if spec is not None else None, data=data)


def _stage_input(task: pb.StageTask) -> StageInput:
    which = task.WhichOneof("input")
    if which == "compose_input":
        i = task.compose_input
        return ComposeInput(
            observed=tuple(resource_from_proto(r) for r in i.observed),
            desired=tuple(_child_from_proto(c) for c in i.desired),
            edges=tuple(_edge_from_proto(e) for e in i.edges),
            configs=tuple(_config_spec_from_proto(c) for c in i.configs),
        )
    if which == "work_input":
        w = task.work_input
        return WorkInput(status=struct_to_json(w.status) if w.HasField("status") else None)
    if which == "rollup_input":
        r = task.rollup_input
        return RollupInput(
            descendants=tuple(resource_from_proto(d) for d in r.descendants),
            status=struct_to_json(r.status) if r.HasField("status") else None,
        )
    if which == "delete_input":
        return DeleteInput(finalizer=task.delete_input.finalizer)
    if which == "operate_input":
        op = task.operate_input.operation
        return OperateInput(
            Operation(
                uid=op.uid,
                verb=op.verb,
                input=struct_to_json(op.input) if op.HasField("input") else None,
                attempts=op.attempts,
                requested_by=op.requested_by,
            )
        )
    if which == "react_input":
        react = task.react_input
        return ReactInput(
            transition=_TRANSITIONS.get(react.transition, Transition.UNSPECIFIED),
            dedup_token=react.dedup_token,
            binding=react.binding,
        )
    return None


class DecodeError(ValueError):
    """A task this SDK cannot decode (unknown stage, missing resource)."""


def request_from_task(
    task: pb.StageTask, default_config: Optional[ProviderConfig], deadline: Optional[float]
) -> ReactionRequest:
    """Decodes a task into the request a handler sees. ``deadline`` is on the
    :func:`time.monotonic` clock. Raises :class:`DecodeError`."""
    stage = stage_from_proto(task.stage)
    if stage is None:
        raise DecodeError(f"unsupported stage {task.stage}")
    if not task.HasField("resource"):
        raise DecodeError("task has no resource")
    return ReactionRequest(
        reaction=task.reaction,
        stage=stage,
        trigger=_TRIGGERS.get(task.trigger, Trigger.UNSPECIFIED),
        kind=KindVersion(task.kind, task.kind_version),
        resource=resource_from_proto(task.resource),
        generation=task.generation,
        attempt=task.attempt,
        input=_stage_input(task),
        plan=task.plan,
        default_config=default_config,
        config_override=struct_to_json(task.provider_config) if task.HasField("provider_config") else None,
        bundle_override=task.provider_bundle,
        deadline=deadline,
    )


def task_deadline(task: pb.StageTask, now: Optional[float] = None) -> Optional[float]:
    """The task's deadline on the :func:`time.monotonic` clock, counted from
    ``now`` (its arrival); ``None`` when the task has none."""
    if not task.HasField("task_deadline"):
        return None
    return (time.monotonic() if now is None else now) + duration_from_proto(task.task_deadline)


def _condition_to_proto(c: Condition, index: int) -> pb.Condition:
    condition = pb.Condition(
        type=c.type, status=_CONDITION_STATUSES[c.condition_status], reason=c.reason, message=c.message
    )
    if c.liveness is not None:
        window = _seconds(c.liveness, f"conditions[{index}].liveness")
        # Zero means "an ordinary condition", the same as absent.
        if window > 0:
            condition.liveness.CopyFrom(duration_to_proto(window))
    return condition


def _event_to_proto(event: Event, index: int) -> pb.WorkerEvent:
    """The protobuf form of the ``index``th reported event; raises
    :class:`InvalidValue` for a detail that is not a JSON object."""
    message = _event_without_detail(event, index)
    if event.detail is not None:
        message.detail.CopyFrom(json_to_struct(event.detail, f"events[{index}].detail"))
    return message


def _event_without_detail(event: Event, index: int) -> pb.WorkerEvent:
    """The protobuf form of an event, leaving its detail out."""
    event_type = _EVENT_TYPES.get(event.type) if isinstance(event.type, EventType) else None
    if event_type is None:
        raise InvalidValue(f"events[{index}].type must be an EventType, got {event.type!r}")
    try:
        return pb.WorkerEvent(category=event.category, type=event_type, reason=event.reason, message=event.message)
    except (TypeError, ValueError) as exc:  # a non-string field, or text that is not valid UTF-8
        raise InvalidValue(f"events[{index}] cannot be encoded: {exc}") from None


def _failure_events(events: Iterable[Event]) -> List[pb.WorkerEvent]:
    """The events of a failure. A detail that cannot travel is dropped and
    the event still sent (the failure matters more than its detail); an
    event that cannot travel even without it is left out."""
    encoded: List[pb.WorkerEvent] = []
    for index, event in enumerate(events):
        try:
            encoded.append(_event_to_proto(event, index))
        except InvalidValue:
            try:
                encoded.append(_event_without_detail(event, index))
            except InvalidValue:
                continue
    return encoded


def _ref_to_proto(r: ResourceRef) -> pb.ResourceRef:
    return pb.ResourceRef(kind=r.kind, name=r.name)


def _child_to_proto(c: ChildSpec, index: int) -> pb.ChildSpec:
    return pb.ChildSpec(
        kind=c.kind,
        kind_version=c.kind_version,
        name=c.name,
        labels=dict(c.labels),
        spec=json_to_struct(c.spec, f"children[{index}].spec"),
        provider_config=c.provider_config or "",
    )


def _edge_to_proto(e: DepEdge) -> pb.DepEdge:
    return pb.DepEdge(
        dependent=_ref_to_proto(e.dependent),
        dependency=_ref_to_proto(e.dependency),
        value_flows=[
            pb.ValueFlow(dependent_field=f.dependent_field, source_field=f.source_field) for f in e.value_flows
        ],
    )


def _config_spec_to_proto(c: ProviderConfigSpec, index: int) -> pb.ProviderConfigSpec:
    spec = None if c.spec is None else json_to_struct(c.spec, f"configs[{index}].spec")
    return pb.ProviderConfigSpec(
        name=c.name, kind=c.kind, kind_version=c.kind_version, is_default=c.is_default, spec=spec, data=c.data
    )


def _optional_struct(value: Optional[Any], field: str) -> Optional[struct_pb2.Struct]:
    return None if value is None else json_to_struct(value, field)


@dataclass(frozen=True)
class Fence:
    """The fence values of a task, echoed verbatim in its completion."""

    lease_token: str
    claim_epoch: int
    #: The task's stage, as sent.
    stage: int
    generation: int
    manifest_version: int

    @classmethod
    def of(cls, task: pb.StageTask) -> "Fence":
        """The fence of ``task``."""
        return cls(task.lease_token, task.claim_epoch, task.stage, task.generation, task.manifest_version)

    def _blank(self) -> pb.StageComplete:
        return pb.StageComplete(
            lease_token=self.lease_token,
            claim_epoch=self.claim_epoch,
            stage=self.stage,  # type: ignore[arg-type]  # echoed as received, even if unknown here
            generation=self.generation,
            manifest_version=self.manifest_version,
        )

    def failure(self, error: HandlerError) -> pb.StageComplete:
        """The completion of this task for a failed run, carrying the error's
        events (see :class:`HandlerError` for those that cannot be encoded)."""
        complete = self._blank()
        complete.error.message = error.message or "handler failed without a message"
        complete.error.terminal = error.terminal
        complete.error.reason = error.reason
        complete.events.extend(_failure_events(error.events))
        return complete

    def success(self, outcome: Outcome) -> pb.StageComplete:
        """The completion of this task for a successful run. An outcome that
        cannot be encoded (e.g. a non-object status) becomes a terminal
        failure: running the same code again would produce it again. That
        includes an event whose detail is not a JSON object; the failure then
        carries none of the outcome's events."""
        try:
            return self._encode(outcome)
        except InvalidValue as exc:
            return self.failure(TerminalError(f"invalid outcome: {exc}", reason="InvalidOutcome"))

    def _encode(self, outcome: Outcome) -> pb.StageComplete:
        complete = self._blank()
        status = _optional_struct(outcome.status, "status")
        if status is not None:
            complete.status.CopyFrom(status)
        output = _optional_struct(outcome.operation_output, "operation_output")
        if output is not None:
            complete.operation_output.CopyFrom(output)
        complete.conditions.extend(_condition_to_proto(c, i) for i, c in enumerate(outcome.conditions))
        complete.events.extend(_event_to_proto(e, i) for i, e in enumerate(outcome.events))
        # A compose result replaces the previous composition, so a composer
        # always sends one (empty = prune all); other stages only if set.
        if self.stage == pb.STAGE_COMPOSE or outcome.children or outcome.edges or outcome.configs:
            complete.compose_result.SetInParent()
            complete.compose_result.desired.extend(_children(outcome.children))
            complete.compose_result.edges.extend(_edge_to_proto(e) for e in outcome.edges)
            complete.compose_result.configs.extend(_config_spec_to_proto(c, i) for i, c in enumerate(outcome.configs))
        if outcome.healthy is not None:
            complete.healthy = outcome.healthy
        if outcome.requeue_after is not None:
            seconds = _seconds(outcome.requeue_after, "requeue_after")
            if seconds > 0:
                complete.requeue_after.CopyFrom(duration_to_proto(seconds))
        return complete


def _children(children: Iterable[ChildSpec]) -> List[pb.ChildSpec]:
    return [_child_to_proto(c, i) for i, c in enumerate(children)]


def condition_from_proto(c: pb.Condition) -> Condition:
    """A domain condition from its protobuf form (for tools and tests that
    read completions back)."""
    status = {
        pb.CONDITION_STATUS_TRUE: ConditionStatus.TRUE,
        pb.CONDITION_STATUS_FALSE: ConditionStatus.FALSE,
    }.get(c.status, ConditionStatus.UNKNOWN)
    window = duration_from_proto(c.liveness) if c.HasField("liveness") else 0.0
    return Condition(
        type=c.type, status=status, reason=c.reason, message=c.message, liveness=window if window > 0 else None
    )


def kind_to_proto(kind: KindVersion) -> pb.KindVersion:
    """The protobuf pair of a domain pair."""
    return pb.KindVersion(kind=kind.kind, kind_version=kind.version)
