"""The conformance providers: ``conf-leaf`` v1 (work, teardown) and
``conf-composite`` v1 (compose, rollup), driven by each resource's spec.

Any other reaction name fails with the SDK's default
:class:`~converge_sdk.worker.UnknownReactionError`, which is transient (a
newer worker may know the reaction; the kind's ``maxTransientAttempts``
bounds the retries)."""

from __future__ import annotations

import asyncio
import base64
from typing import Any, Dict, List

from converge_sdk.conformance.log import EventLog
from converge_sdk.worker import (
    ChildSpec,
    Condition,
    ConditionStatus,
    DepEdge,
    Event,
    EventType,
    KindVersion,
    Outcome,
    ReactionRequest,
    Reactions,
    ResourceRef,
    RollupInput,
    TerminalError,
    TransientError,
    ValueFlow,
)

#: The ``language`` field of every log line and status.
LANGUAGE = "python"

LEAF = KindVersion("conf-leaf", 1)
COMPOSITE = KindVersion("conf-composite", 1)


def _int(spec: Dict[str, Any], key: str) -> int:
    value = spec.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def leaf_provider(log: EventLog) -> Reactions:
    """The ``conf-leaf`` v1 provider."""
    leaf = Reactions(LEAF)

    @leaf.reaction("work")
    async def work(request: ReactionRequest) -> Outcome:
        spec = request.resource.spec
        log.write("start", request)
        if spec.get("panic") is True:
            raise RuntimeError("conformance: panic requested by the spec")
        try:
            return await _work(request, spec)
        finally:
            # Also on failure and on a deadline cancellation.
            log.write("end", request)

    @leaf.reaction("teardown")
    async def teardown(request: ReactionRequest) -> Outcome:
        millis = _int(request.resource.spec, "teardownMs")
        if millis > 0:
            await asyncio.sleep(millis / 1000)
        log.write("teardown", request)
        return Outcome()

    return leaf


async def _work(request: ReactionRequest, spec: Dict[str, Any]) -> Outcome:
    if spec.get("hang") is True:
        # Never returns on its own: the runtime cancels it at the deadline.
        await asyncio.Event().wait()
    sleep_ms = _int(spec, "sleepMs")
    if sleep_ms > 0:
        await asyncio.sleep(sleep_ms / 1000)
    if request.attempt <= _int(spec, "failTransient"):
        raise TransientError(
            f"conformance: transient failure at attempt {request.attempt}", reason="ConformanceTransient"
        )
    if spec.get("failTerminal") is True:
        raise TerminalError("conformance: terminal failure", reason="ConformanceTerminal")
    stored = request.resource.status or {}
    bundle = request.effective_bundle()
    status: Dict[str, Any] = {
        "observedGeneration": request.generation,
        "attempt": request.attempt,
        "language": LANGUAGE,
        "value": spec.get("value"),
        "config": request.effective_config(),
        "bundle": base64.b64encode(bundle).decode() if bundle else None,
        "trigger": request.trigger.value,
    }
    if "requeuedGeneration" in stored:
        status["requeuedGeneration"] = stored["requeuedGeneration"]
    requeue_ms = _int(spec, "requeueMs")
    if requeue_ms > 0 and stored.get("requeuedGeneration") != request.generation:
        status["requeuedGeneration"] = request.generation
        return Outcome(status=status, requeue_after=requeue_ms / 1000)
    conditions = [Condition("Ready", ConditionStatus.TRUE, reason="Conformed")]
    liveness_ms = _int(spec, "livenessMs")
    if liveness_ms > 0:
        conditions.append(Condition("Reachable", ConditionStatus.TRUE, reason="Probed", liveness=liveness_ms / 1000))
    return Outcome(status=status, conditions=conditions, events=_events(spec))


def _events(spec: Dict[str, Any]) -> List[Event]:
    """The events ``spec.events`` asks for; absent fields keep the SDK's
    defaults."""

    def text(event: Dict[str, Any], key: str) -> str:
        value = event.get(key)
        return value if isinstance(value, str) else ""

    asked = spec.get("events")
    return [
        Event(
            reason=text(e, "reason"),
            message=text(e, "message"),
            type=EventType.WARNING if text(e, "type") == "Warning" else EventType.NORMAL,
            category=text(e, "category"),
        )
        for e in (asked if isinstance(asked, list) else [])
        if isinstance(e, dict)
    ]


def composite_provider(log: EventLog) -> Reactions:
    """The ``conf-composite`` v1 provider."""
    composite = Reactions(COMPOSITE)

    @composite.reaction("compose")
    async def compose(request: ReactionRequest) -> Outcome:
        log.write("start", request)
        try:
            if request.resource.spec.get("hang") is True:
                # Never returns on its own: the runtime cancels it at the deadline.
                await asyncio.Event().wait()
            if not request.plan:
                # What a real composer does to the world (say, reserving a
                # name), skipped when only planning.
                log.write("side-effect", request)
            return _compose(request)
        finally:
            log.write("end", request)

    @composite.reaction("rollup")
    async def rollup(request: ReactionRequest) -> Outcome:
        log.write("start", request)
        try:
            return _rollup(request)
        finally:
            log.write("end", request)

    return composite


def _compose(request: ReactionRequest) -> Outcome:
    children: List[ChildSpec] = []
    edges: List[DepEdge] = []
    for child in request.resource.spec.get("children") or []:
        name = child["name"]
        children.append(ChildSpec(kind=LEAF.kind, kind_version=LEAF.version, name=name, spec=child.get("spec") or {}))
        flows = child.get("flows") or []
        # dependsOn first, then each flow's source, without repeats.
        dependencies = list(dict.fromkeys([*(child.get("dependsOn") or []), *(f["from"] for f in flows)]))
        for dependency in dependencies:
            edges.append(
                DepEdge(
                    dependent=ResourceRef(LEAF.kind, name),
                    dependency=ResourceRef(LEAF.kind, dependency),
                    value_flows=tuple(ValueFlow(f["field"], f["source"]) for f in flows if f["from"] == dependency),
                )
            )
    status = {"phase": "composed", "children": len(children), "language": LANGUAGE}
    return Outcome(status=status, children=children, edges=edges)


def _rollup(request: ReactionRequest) -> Outcome:
    me = ResourceRef(request.resource.kind, request.resource.name)
    descendants = request.input.descendants if isinstance(request.input, RollupInput) else ()
    children = [d for d in descendants if d.owner == me]
    ready = sum(1 for c in children if c.ready)
    all_ready = ready == len(children)
    status = {
        "phase": "ready" if all_ready else "degraded",
        "children": len(children),
        "ready": ready,
        "language": LANGUAGE,
    }
    condition = Condition(
        "Ready",
        ConditionStatus.TRUE if all_ready else ConditionStatus.FALSE,
        reason="ChildrenReady" if all_ready else "ChildrenNotReady",
    )
    return Outcome(status=status, conditions=[condition], healthy=all_ready)
