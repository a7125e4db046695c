// The handler span: the worker's side of the broker's trace.

import {
  type Context,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  propagation,
  trace,
} from "@opentelemetry/api";

import type { StageComplete } from "../gen/converge/worker/v1/worker_pb.js";
import { SDK_VERSION } from "./options.js";

/** The instrumentation scope of the handler spans. */
export const TRACER_NAME = "@converge/sdk/worker";

/** A started handler span and the context to run the handler in. */
export interface HandlerSpan {
  readonly span: Span;
  readonly context: Context;
}

/**
 * Starts the span of a task's handler when the broker traced the reconcile:
 * a child of the context the task carries (W3C `traceparent`/`tracestate`),
 * extracted with the application's global propagator, named and attributed
 * like the Rust SDK's span. Undefined for a task without a trace context (the
 * broker does not trace, or did not sample the reconcile).
 *
 * Only `@opentelemetry/api` is used: until the application registers an
 * OpenTelemetry SDK (a tracer provider, a propagator and a context manager,
 * as `NodeTracerProvider.register()` does) the span is a no-op.
 */
export function startHandlerSpan(
  carrier: Readonly<Record<string, string>>,
  kind: string,
  reaction: string,
  lease: string,
): HandlerSpan | undefined {
  if (Object.keys(carrier).length === 0) {
    return undefined;
  }
  // From the root: nothing of the stream reader's own context belongs to the task.
  const parent = propagation.extract(ROOT_CONTEXT, carrier);
  const span = trace.getTracer(TRACER_NAME, SDK_VERSION).startSpan(
    `handle ${kind} ${reaction}`,
    {
      kind: SpanKind.CONSUMER,
      attributes: { "converge.kind": kind, "converge.reaction": reaction, "converge.lease": lease },
    },
    parent,
  );
  return { span, context: trace.setSpan(parent, span) };
}

/** Ends a handler span, marked failed when the task failed. */
export function endHandlerSpan(handler: HandlerSpan | undefined, complete: StageComplete): void {
  if (handler === undefined) {
    return;
  }
  if (complete.error !== undefined) {
    handler.span.setStatus({ code: SpanStatusCode.ERROR, message: complete.error.message });
  }
  handler.span.end();
}
