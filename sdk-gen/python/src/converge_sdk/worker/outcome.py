"""What a handler produces: an :class:`Outcome` on success, or a raised
:class:`HandlerError` (or any other exception) on failure."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import List, Optional, Union

from converge_sdk.worker.types import ChildSpec, Condition, DepEdge, JsonObject, KindVersion, ProviderConfigSpec

#: The reason of a failure caused by the task deadline. The runtime reports
#: it for a handler it cut off; the server reports an operation whose last
#: attempt failed with it as DEADLINE_EXCEEDED.
DEADLINE_EXCEEDED_REASON = "DeadlineExceeded"


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


class HandlerError(Exception):
    """A failed handler run, with an optional UpperCamelCase ``reason`` that
    the server records on the resulting condition and event.

    Raise :class:`TransientError` or :class:`TerminalError`; any other
    exception a handler raises counts as transient.
    """

    #: Whether retrying cannot help.
    terminal: bool = False

    def __init__(self, message: str, *, reason: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, reason={self.reason!r})"


class TransientError(HandlerError):
    """A failure that retrying may fix: the broker retries the task with
    backoff until the kind's ``maxTransientAttempts``."""

    terminal = False


class TerminalError(HandlerError):
    """A failure that retrying cannot fix: the generation is marked failed at
    once."""

    terminal = True


class UnknownReactionError(HandlerError):
    """A task named a reaction the provider does not handle.

    Transient by default, like the Rust SDK: during a rolling upgrade another
    worker (or a newer build of this one) may know the reaction. Pass
    ``terminal=True`` to fail the generation at once instead.
    """

    def __init__(self, reaction: str, kind: KindVersion, *, terminal: bool = False) -> None:
        super().__init__(f"reaction {reaction!r} is not handled by the provider of {kind}", reason="UnknownReaction")
        self.reaction = reaction
        self.kind = kind
        self.terminal = terminal
