"""What a handler produces: an :class:`Outcome` on success, or a raised
:class:`HandlerError` (or any other exception) on failure."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Iterable, List, Optional, TypeVar, Union

from converge_sdk.worker.types import (
    ChildSpec,
    Condition,
    DepEdge,
    Event,
    JsonObject,
    KindVersion,
    ProviderConfigSpec,
)

#: The reason of a failure caused by the task deadline. The runtime reports
#: it for a handler it cut off; the server reports an operation whose last
#: attempt failed with it as DEADLINE_EXCEEDED.
DEADLINE_EXCEEDED_REASON = "DeadlineExceeded"

#: The reason of an :class:`UnknownReactionError`: a task named a reaction its
#: provider has no handler for.
UNKNOWN_REACTION_REASON = "UnknownReaction"

_E = TypeVar("_E", bound="HandlerError")


@dataclass
class Outcome:
    """The result of a successful handler run.

    Only the parts the reaction's manifest entry declares in ``emits`` are
    applied by the broker; the rest are ignored. For a compose task the
    children, edges and configs are always sent and replace the previous
    composition, so empty lists prune everything.
    """

    #: New status document; ``None`` = unchanged.
    status: Optional[JsonObject] = None
    #: Conditions to record (each type is stored on change only).
    conditions: List[Condition] = field(default_factory=list)
    #: The desired children (compose).
    children: List[ChildSpec] = field(default_factory=list)
    #: Dependency edges among the children and to other resources (compose).
    edges: List[DepEdge] = field(default_factory=list)
    #: Provider configs the resource should own (compose).
    configs: List[ProviderConfigSpec] = field(default_factory=list)
    #: Output document of an operation (operate).
    operation_output: Optional[JsonObject] = None
    #: Explicit health; ``None`` = taken from a ``Ready`` condition, if any.
    healthy: Optional[bool] = None
    #: "Not done yet": the parts are applied but the task runs again after
    #: this delay (seconds, or a ``timedelta``). Not a failure. ``None`` or 0
    #: = done.
    requeue_after: Union[float, timedelta, None] = None
    #: Events to record on the resource's timelines (at most 16; every stage
    #: except react), whatever the reaction declares in ``emits``.
    events: List[Event] = field(default_factory=list)

    def add_event(self, event: Event) -> "Outcome":
        """Appends ``event`` to :attr:`events` and returns this outcome, for
        chaining: ``return Outcome(status=s).add_event(Event.normal("Done"))``."""
        self.events.append(event)
        return self


class HandlerError(Exception):
    """A failed handler run, with an optional UpperCamelCase ``reason`` that
    the server records on the resulting condition and event, and optional
    :class:`Event` values describing what the handler did before it failed,
    recorded with the failure.

    Raise :class:`TransientError` or :class:`TerminalError`; any other
    exception a handler raises counts as transient (without events).

    An event whose ``detail`` cannot be encoded (not a JSON object, or
    holding a non-JSON value) is still sent, without its detail: the failure
    matters more than the detail. One that cannot be encoded even without it
    (e.g. a non-string reason) is left out.
    """

    #: Whether retrying cannot help.
    terminal: bool = False

    def __init__(self, message: str, *, reason: str = "", events: Iterable[Event] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        #: The events reported with the failure.
        self.events: List[Event] = list(events)

    def add_event(self: _E, event: Event) -> _E:
        """Appends ``event`` to :attr:`events` and returns this error, for
        chaining: ``raise TransientError("quota").add_event(Event.warning(...))``."""
        self.events.append(event)
        return self

    def __repr__(self) -> str:
        events = f", events={self.events!r}" if self.events else ""
        return f"{type(self).__name__}({self.message!r}, reason={self.reason!r}{events})"


class TransientError(HandlerError):
    """A failure that retrying may fix: the broker retries the task with
    backoff until the kind's ``maxTransientAttempts``."""

    terminal = False


class TerminalError(HandlerError):
    """A failure that retrying cannot fix: the generation is marked failed at
    once."""

    terminal = True


class UnknownReactionError(TransientError):
    """A task named a reaction the provider does not handle (reason
    :data:`UNKNOWN_REACTION_REASON`).

    A :class:`TransientError`, as in every converge SDK: during a rolling
    upgrade another worker (or a newer build of this one) may know the
    reaction, and the kind's ``maxTransientAttempts`` bounds the retries.
    Pass ``terminal=True`` to fail the generation at once instead (an
    explicit opt-in).
    """

    def __init__(self, reaction: str, kind: KindVersion, *, terminal: bool = False) -> None:
        super().__init__(f"reaction {reaction!r} is not handled by the provider of {kind}", reason=UNKNOWN_REACTION_REASON)
        self.reaction = reaction
        self.kind = kind
        self.terminal = terminal
