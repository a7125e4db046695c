"""The domain types a provider sees: decoded tasks, resources and outcome parts.

They mirror ``converge.worker.v1`` but use plain Python values: JSON documents
are ``dict``/``list``/``str``/``int``/``float``/``bool``/``None`` (integral
numbers come back as ``int``), times are aware ``datetime`` values, and enums
are :class:`enum.Enum` members named as the SDK names them (lower snake case
values, e.g. ``Trigger.SPEC_CHANGE.value == "spec_change"``). Durations are
seconds (``float``) or ``timedelta`` values.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Dict, Mapping, Optional, Tuple, Union

#: A JSON object as the SDK hands it around.
JsonObject = Dict[str, Any]


@dataclass(frozen=True, order=True)
class KindVersion:
    """A ``(kind, kind_version)`` pair. Routing is exact: a provider for
    version 1 never receives version 2 tasks."""

    kind: str
    version: int

    def __str__(self) -> str:
        return f"{self.kind}:{self.version}"

    @classmethod
    def parse(cls, text: str) -> "KindVersion":
        """Parses ``kind:version``; a bare ``kind`` means version 1.

        Raises :class:`ValueError` for an empty kind, a non-integer version or
        a version below 1.
        """
        kind, sep, version_text = text.rpartition(":")
        if not sep:
            kind, version_text = text, "1"
        try:
            version = int(version_text)
        except ValueError:
            raise ValueError(f"invalid kind {text!r}: version is not an integer (expected KIND:VERSION)") from None
        if not kind:
            raise ValueError(f"invalid kind {text!r}: kind is empty (expected KIND:VERSION)")
        if version < 1:
            raise ValueError(f"invalid kind {text!r}: version must be >= 1")
        return cls(kind, version)


class Stage(enum.Enum):
    """The stage of the reconcile pipeline a task runs."""

    #: Composer: return the desired children, edges, configs and status.
    COMPOSE = "compose"
    #: Leaf work: act on the outside world and return status and conditions.
    WORK = "work"
    #: Rollup: summarise the settled subtree into the root's status.
    ROLLUP = "rollup"
    #: Teardown of a finalizer-bearing resource.
    DELETE = "delete"
    #: Run an operation verb and return its output.
    OPERATE = "operate"
    #: Reactor: a side effect for another resource's lifecycle transition.
    REACT = "react"


class Trigger(enum.Enum):
    """What fired the reaction of a task."""

    #: Not set, or a value this SDK does not know (a newer broker).
    UNSPECIFIED = "unspecified"
    #: The resource's generation moved.
    SPEC_CHANGE = "spec_change"
    #: The resource's subtree has settled.
    CHILDREN_SETTLED = "children_settled"
    #: The resource is being torn down.
    DELETE_REQUESTED = "delete_requested"
    #: An operation was invoked.
    OPERATION = "operation"
    #: A reactor binding fired.
    REACTOR = "reactor"
    #: A periodic resync re-pended the resource without a spec change.
    RESYNC = "resync"
    #: The resource's provider config override changed (same generation).
    CONFIG_CHANGE = "config_change"


class Transition(enum.Enum):
    """A lifecycle edge that fired a reactor binding."""

    #: Not set, or a value this SDK does not know.
    UNSPECIFIED = "unspecified"
    #: The resource was created.
    CREATED = "created"
    #: A new generation was reconciled successfully.
    SYNCED = "synced"
    #: The resource became degraded (synced but unhealthy).
    DEGRADED = "degraded"
    #: The resource became failed.
    FAILED = "failed"
    #: The resource was removed after its teardown.
    DELETED = "deleted"


class ConditionStatus(enum.Enum):
    """Truth value of a condition."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class Condition:
    """A named observation about the worked resource. The server stamps times
    and generations; a ``Ready`` condition also sets the resource's health
    unless the outcome says otherwise.

    ``status`` accepts a :class:`ConditionStatus` or a ``bool`` (``True`` /
    ``False``).
    """

    #: UpperCamelCase type, e.g. ``"Ready"``; unique per outcome.
    type: str
    #: Whether the condition holds.
    status: Union[ConditionStatus, bool]
    #: UpperCamelCase machine-readable cause; may be empty.
    reason: str = ""
    #: Human-readable explanation; may be empty.
    message: str = ""
    #: Makes it a liveness condition: the report holds this long (seconds or
    #: a ``timedelta``, 1 s to 24 h) unless it is reported again within that
    #: window; after that, reads show it as ``Unknown`` with reason
    #: ``ReportExpired`` until the next report. ``None`` (or 0) = an ordinary
    #: condition, held until replaced.
    liveness: Union[float, timedelta, None] = None

    @property
    def condition_status(self) -> ConditionStatus:
        """``status`` as a :class:`ConditionStatus`."""
        if isinstance(self.status, bool):
            return ConditionStatus.TRUE if self.status else ConditionStatus.FALSE
        return self.status


class EventType(enum.Enum):
    """Severity of a reported :class:`Event`."""

    #: Routine, expected progress (e.g. ``BucketCreated``).
    NORMAL = "normal"
    #: Something needing attention (e.g. ``QuotaNearlyExhausted``).
    WARNING = "warning"


@dataclass(frozen=True)
class Event:
    """An observation recorded on the resource's event timeline, next to the
    server's own lifecycle events. Consecutive events of one category with
    the same type and reason aggregate into one run (count, first and last
    time).

    Events travel with the task's result: add them to an :class:`Outcome`
    (``events`` or :meth:`Outcome.add_event`) or to a raised
    :class:`HandlerError` (``events=`` or :meth:`HandlerError.add_event`).
    The server refuses an invalid event (reason ``EventInvalid``, failing the
    task, and none of its events is recorded).
    """

    #: UpperCamelCase machine-readable cause, at most 128 characters, e.g.
    #: ``"BucketCreated"``. Required.
    reason: str
    #: Human-readable message; the server cuts it at 1024 characters.
    message: str = ""
    #: Severity.
    type: EventType = EventType.NORMAL
    #: Timeline: lower case letters, digits and ``-``, starting with a letter,
    #: at most 63 characters; empty = ``"worker"``. The server's own
    #: timelines (``lifecycle``, ``reconcile``, ``operation``, ``reactor``)
    #: are refused.
    category: str = ""
    #: Optional structured detail, a JSON object of at most 8 KiB.
    detail: Optional[JsonObject] = None

    @classmethod
    def normal(
        cls, reason: str, message: str = "", *, category: str = "", detail: Optional[JsonObject] = None
    ) -> "Event":
        """A routine event (``worker`` timeline unless ``category`` is set)."""
        return cls(reason, message, EventType.NORMAL, category, detail)

    @classmethod
    def warning(
        cls, reason: str, message: str = "", *, category: str = "", detail: Optional[JsonObject] = None
    ) -> "Event":
        """An event needing attention (``worker`` timeline unless
        ``category`` is set)."""
        return cls(reason, message, EventType.WARNING, category, detail)


@dataclass(frozen=True)
class ResourceRef:
    """Public identity of a resource."""

    kind: str
    name: str


@dataclass(frozen=True)
class Resource:
    """A snapshot of a resource as handed to a worker."""

    uid: str
    kind: str
    kind_version: int
    name: str
    #: Labels of the resource.
    labels: Mapping[str, str]
    #: Desired state (an empty object when none).
    spec: JsonObject
    #: Last stored status; ``None`` before the first one.
    status: Optional[JsonObject]
    #: Current spec generation.
    generation: int
    #: Highest generation whose result has been applied.
    observed_generation: int
    #: Synced for its generation, healthy and not being deleted.
    ready: bool
    #: Whether the last reconcile reported the resource healthy.
    healthy: bool
    #: Composer that owns this resource; ``None`` for roots.
    owner: Optional[ResourceRef] = None
    #: Root of the composition tree; ``None`` for roots.
    root: Optional[ResourceRef] = None
    #: Finalizers still present.
    finalizers: Tuple[str, ...] = ()
    #: When deletion was requested, if it was.
    delete_time: Optional[datetime] = None
    #: End of the orphan grace period, if orphaned.
    orphan_expire_time: Optional[datetime] = None
    #: Whether the resource is quarantined.
    quarantined: bool = False


@dataclass(frozen=True)
class ChildSpec:
    """A child a composer wants to exist, owned by the task's resource."""

    kind: str
    kind_version: int
    #: Unique within its kind cluster-wide.
    name: str
    #: Desired spec (validated against the child kind's schema); fields that
    #: value flows target are filled in by the server.
    spec: JsonObject = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Name of a provider config to attach as the child's override (one of
    #: the composition's configs, or any config of the child's pair).
    provider_config: Optional[str] = None


@dataclass(frozen=True)
class ValueFlow:
    """Copies one value from a dependency's status into a dependent's spec."""

    #: JSON pointer (RFC 6901) into the dependent's spec.
    dependent_field: str
    #: JSON pointer (RFC 6901) into the dependency's status.
    source_field: str


@dataclass(frozen=True)
class DepEdge:
    """A dependency edge: the dependent is worked only after the dependency
    is synced, and torn down before it."""

    dependent: ResourceRef
    dependency: ResourceRef
    #: Values copied along the edge; empty = ordering only.
    value_flows: Tuple[ValueFlow, ...] = ()


@dataclass(frozen=True)
class ProviderConfigSpec:
    """A provider config a composer wants to exist, owned by the task's
    resource."""

    #: Cluster-wide unique name.
    name: str
    kind: str
    kind_version: int
    #: Whether it is the default config of its pair.
    is_default: bool = False
    #: Configuration document, if any.
    spec: Optional[JsonObject] = None
    #: Opaque bundle; empty = none.
    data: bytes = b""


@dataclass(frozen=True)
class ProviderConfig:
    """The default provider config of a ``(kind, kind_version)``."""

    #: Configuration document, if any.
    spec: Optional[JsonObject] = None
    #: Opaque bundle; empty = none.
    data: bytes = b""


@dataclass(frozen=True)
class Operation:
    """An invoked operation."""

    uid: str
    verb: str
    #: Input document, if any.
    input: Optional[JsonObject]
    #: 1-based attempt number of this dispatch.
    attempts: int
    #: Authenticated identity of the caller.
    requested_by: str


@dataclass(frozen=True)
class ComposeInput:
    """Input of a compose task."""

    #: The children the resource currently owns, as stored.
    observed: Tuple[Resource, ...] = ()
    #: The children the previous compose emitted.
    desired: Tuple[ChildSpec, ...] = ()
    #: The edges the previous compose emitted.
    edges: Tuple[DepEdge, ...] = ()
    #: The provider configs the previous compose emitted.
    configs: Tuple[ProviderConfigSpec, ...] = ()


@dataclass(frozen=True)
class WorkInput:
    """Input of a work task."""

    #: Status accumulated so far in this reconcile, or the stored status.
    status: Optional[JsonObject] = None


@dataclass(frozen=True)
class RollupInput:
    """Input of a rollup task."""

    #: The whole settled subtree under the resource.
    descendants: Tuple[Resource, ...] = ()
    #: The resource's status accumulated so far.
    status: Optional[JsonObject] = None


@dataclass(frozen=True)
class DeleteInput:
    """Input of a delete (teardown) task."""

    #: The finalizer this teardown clears on success.
    finalizer: str = ""


@dataclass(frozen=True)
class OperateInput:
    """Input of an operate task."""

    operation: Operation


@dataclass(frozen=True)
class ReactInput:
    """Input of a react task."""

    #: The lifecycle edge the watched resource crossed.
    transition: Transition
    #: Stable key of this delivery, identical across redeliveries.
    dedup_token: str
    #: Name of the reactor binding that fired.
    binding: str


#: The stage-specific input of a task; ``None`` when the task carried none.
StageInput = Union[ComposeInput, WorkInput, RollupInput, DeleteInput, OperateInput, ReactInput, None]
