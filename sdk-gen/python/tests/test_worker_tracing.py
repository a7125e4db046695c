"""The handler span: a task's handler runs in a child span of the trace
context the broker sent, through the OpenTelemetry API. The OpenTelemetry SDK
(a development dependency, not one of the package) records the spans here."""

import asyncio

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from converge_sdk.worker import KindVersion, Outcome, Provider, TransientError, WorkerOptions
from converge_sdk.worker.state import SharedState
from converge_sdk.worker.task import accept

from test_worker_dispatch import _task

KIND = KindVersion("leaf", 1)
TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
BROKER_SPAN_ID = 0x00F067AA0BA902B7
TRACEPARENT = f"00-{TRACE_ID:032x}-{BROKER_SPAN_ID:016x}-01"

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans():
    # The global tracer provider can be set once per process: the first test
    # here sets it, the others reuse it.
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    return _EXPORTER


class Seeing(Provider):
    """Records the span current while its handler runs; fails on request."""

    def __init__(self):
        self.seen = []

    @property
    def kind(self):
        return KIND

    async def handle(self, request):
        await asyncio.sleep(0)  # the span stays current across awaits
        self.seen.append(trace.get_current_span().get_span_context())
        if request.resource.name == "fails":
            raise TransientError("no")
        return Outcome()


def _run(provider, *tasks):
    async def main():
        state = SharedState({provider.kind: provider}, WorkerOptions())
        running = set()
        for task in tasks:
            accept(state, running, task, draining=False)
        await asyncio.gather(*running)

    asyncio.run(main())


def test_the_handler_runs_in_a_child_span_of_the_brokers_trace(spans):
    provider = Seeing()
    traced = _task("traced")
    traced.trace_context["traceparent"] = TRACEPARENT
    failing = _task("failing")
    failing.resource.name = "fails"
    failing.trace_context["traceparent"] = TRACEPARENT
    _run(provider, traced, failing)

    finished = {s.attributes["converge.lease"]: s for s in spans.get_finished_spans()}
    assert sorted(finished) == ["failing", "traced"]
    span = finished["traced"]
    assert span.name == "handle leaf:1 work"
    assert span.kind is trace.SpanKind.CONSUMER
    assert span.context.trace_id == TRACE_ID
    assert span.parent is not None and span.parent.span_id == BROKER_SPAN_ID and span.parent.is_remote
    assert dict(span.attributes) == {"converge.kind": "leaf:1", "converge.reaction": "work", "converge.lease": "traced"}
    assert span.status.status_code is trace.StatusCode.UNSET
    assert span.context in provider.seen, "the handler did not run with its span current"
    assert finished["failing"].status.status_code is trace.StatusCode.ERROR


def test_an_untraced_task_gets_no_span(spans):
    provider = Seeing()
    _run(provider, _task("plain"))
    assert spans.get_finished_spans() == ()
    assert provider.seen == [trace.INVALID_SPAN_CONTEXT]
