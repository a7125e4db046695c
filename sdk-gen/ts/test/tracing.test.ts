import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";

import { TransientError, defineProvider } from "../src/worker/index.js";
import { accept } from "../src/worker/task.js";
import { results, stateFor, workTask } from "./helpers.js";

// The OpenTelemetry SDK (a development dependency, not one of the package)
// records the spans. node --test runs each file in its own process, so the
// global registration stays in this file.
const exporter = new InMemorySpanExporter();
new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }).register();

const never = new AbortController().signal;
const kind = { kind: "k", version: 1 };
const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
const brokerSpanId = "00f067aa0ba902b7";
const traceparent = `00-${traceId}-${brokerSpanId}-01`;

describe("the handler span", () => {
  it("is a child of the broker's trace context, active in the handler, failed with its task", async () => {
    exporter.reset();
    const seen: (string | undefined)[] = [];
    const provider = defineProvider({
      kind,
      reactions: {
        work: async (r) => {
          await new Promise((resolve) => setImmediate(resolve)); // active across awaits
          seen.push(trace.getActiveSpan()?.spanContext().spanId);
          if (r.resource.spec["fail"] === true) {
            throw new TransientError("no");
          }
          return {};
        },
      },
    });
    const state = stateFor([provider]);
    const ok = workTask("k");
    ok.traceContext = { traceparent };
    const failing = workTask("k", { spec: { fail: true } });
    failing.traceContext = { traceparent };
    accept(state, ok, false, never);
    accept(state, failing, false, never);
    await results(state, 2);

    const spans = new Map(exporter.getFinishedSpans().map((s) => [s.attributes["converge.lease"], s]));
    const span = spans.get(ok.leaseToken);
    assert.ok(span !== undefined, "no span for the traced task");
    assert.equal(span.name, "handle k:1 work");
    assert.equal(span.kind, SpanKind.CONSUMER);
    assert.equal(span.spanContext().traceId, traceId);
    assert.equal(span.parentSpanContext?.spanId, brokerSpanId);
    assert.equal(span.parentSpanContext?.isRemote, true);
    assert.deepEqual(span.attributes, {
      "converge.kind": "k:1",
      "converge.reaction": "work",
      "converge.lease": ok.leaseToken,
    });
    assert.equal(span.status.code, SpanStatusCode.UNSET);
    assert.ok(seen.includes(span.spanContext().spanId), "the handler did not run with its span active");
    assert.equal(spans.get(failing.leaseToken)?.status.code, SpanStatusCode.ERROR);
  });

  it("is not started for a task without a trace context", async () => {
    exporter.reset();
    let active: unknown = "unset";
    const provider = defineProvider({
      kind,
      reactions: {
        work: () => {
          active = trace.getActiveSpan();
          return {};
        },
      },
    });
    const state = stateFor([provider]);
    accept(state, workTask("k"), false, never);
    await results(state, 1);
    assert.equal(active, undefined);
    assert.deepEqual(exporter.getFinishedSpans(), []);
  });
});
