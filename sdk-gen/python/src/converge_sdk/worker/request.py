"""The request a provider's handler receives for one task."""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from converge_sdk.worker.types import JsonObject, KindVersion, ProviderConfig, Resource, Stage, StageInput, Trigger


def merge_json(base: Any, override: Any) -> Any:
    """Deep-merges ``override`` over ``base`` and returns the result (neither
    argument is modified): objects merge per key, recursively; anything else
    (scalars, lists, null) is replaced by the override."""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = {key: copy.deepcopy(value) for key, value in base.items()}
        for key, value in override.items():
            merged[key] = merge_json(merged[key], value) if key in merged else copy.deepcopy(value)
        return merged
    return copy.deepcopy(override)


@dataclass(frozen=True)
class ReactionRequest:
    """One task, decoded: run reaction ``reaction`` of ``kind`` for
    ``resource``.

    Handlers must be idempotent: the same task can run more than once (after
    a lost lease or a broker restart).
    """

    #: Name of the reaction to run, chosen by the broker from the manifest
    #: (e.g. ``work``, ``compose``, ``rollup``, ``teardown``).
    reaction: str
    #: The pipeline stage, i.e. which outcome parts are expected.
    stage: Stage
    #: What fired the reaction.
    trigger: Trigger
    #: The pair whose handler runs (for react: the reactor kind).
    kind: KindVersion
    #: The resource to act on, as of dispatch (for react: the watched one).
    resource: Resource
    #: The spec generation this task was scheduled for.
    generation: int
    #: 1-based attempt number of this task for this generation.
    attempt: int
    #: The stage-specific input.
    input: StageInput
    #: A plan, not a reconcile (compose only): a client asked what applying
    #: the resource would do. Compute the answer as usual but cause **no
    #: side effects** (no calls that change the outside world, no writes of
    #: your own): the outcome is shown to the client, never applied. The
    #: resource may not exist yet (empty ``uid``).
    plan: bool = False
    #: The kind's default provider config as cached when the task arrived.
    default_config: Optional[ProviderConfig] = None
    #: The resource's config override (spec of its custom ProviderConfig).
    config_override: Optional[JsonObject] = None
    #: The resource's bundle override; empty = none.
    bundle_override: bytes = b""
    #: When the task's time budget runs out, on the :func:`time.monotonic`
    #: clock; ``None`` = no deadline. The runtime cancels the handler then.
    deadline: Optional[float] = None
    #: Set by the runtime when it gives up on the handler (deadline). An
    #: async handler is cancelled outright; a synchronous one running in a
    #: thread cannot be, so it should poll :meth:`cancelled` (or wait on this
    #: event) to stop early.
    cancel_event: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)

    def effective_config(self) -> Optional[JsonObject]:
        """The override deep-merged over the default spec (the override wins
        per key); ``None`` when neither exists."""
        default = self.default_config.spec if self.default_config is not None else None
        if default is None and self.config_override is None:
            return None
        if self.config_override is None:
            return copy.deepcopy(default)
        if default is None:
            return copy.deepcopy(self.config_override)
        merged: JsonObject = merge_json(default, self.config_override)
        return merged

    def effective_bundle(self) -> bytes:
        """The bundle override if non-empty (it wins wholesale), else the
        default config's bundle; empty = none."""
        if self.bundle_override:
            return self.bundle_override
        return self.default_config.data if self.default_config is not None else b""

    def remaining(self) -> Optional[float]:
        """Seconds left before the deadline (never negative); ``None``
        without a deadline."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())

    def cancelled(self) -> bool:
        """Whether the runtime has given up on this task (its deadline
        passed)."""
        return self.cancel_event.is_set()
