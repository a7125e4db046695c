"""The handler span: the worker's side of the broker's trace.

Only the OpenTelemetry API is used. Until the application installs an
OpenTelemetry SDK (a tracer provider), the span is a no-op; the propagator is
the application's global one, which by default reads the W3C ``traceparent``
and ``tracestate`` the broker sends.
"""

from __future__ import annotations

from typing import Mapping, Optional, Tuple

from opentelemetry import propagate, trace
from opentelemetry.context import Context

from converge_sdk import __version__
from converge_sdk.worker.request import ReactionRequest

#: The instrumentation scope of the handler spans.
TRACER_NAME = "converge_sdk.worker"


def start_handler_span(
    carrier: Mapping[str, str], request: ReactionRequest, lease_token: str
) -> Optional[Tuple[trace.Span, Context]]:
    """Starts the span of a task's handler when the broker traced the
    reconcile: a child of the context the task carries, named and attributed
    like the Rust SDK's span. Returns the span and the context to run the
    handler in (the extracted one with the span set), or ``None`` for a task
    without a trace context (the broker does not trace, or did not sample
    the reconcile)."""
    if not carrier:
        return None
    parent = propagate.extract(dict(carrier))
    kind = str(request.kind)
    span = trace.get_tracer(TRACER_NAME, __version__).start_span(
        f"handle {kind} {request.reaction}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes={
            "converge.kind": kind,
            "converge.reaction": request.reaction,
            "converge.lease": lease_token,
        },
    )
    return span, trace.set_span_in_context(span, parent)
