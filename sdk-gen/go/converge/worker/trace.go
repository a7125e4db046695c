package worker

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the handler spans.
const tracerName = "converge.dev/sdk/go/converge/worker"

// handlerSpan starts the handler's span when the broker traced the reconcile:
// a child of the context the task carries (W3C traceparent and tracestate),
// extracted with the application's global propagator, under the global
// tracer provider. The returned context carries the span, so the handler
// (and whatever it calls with that context) continues the broker's trace.
//
// Only the OpenTelemetry API is used: until the application installs a
// tracer provider and a propagator (otel.SetTracerProvider,
// otel.SetTextMapPropagator(propagation.TraceContext{})), the span is a
// no-op. A task without a trace context (the broker does not trace, or did
// not sample the reconcile) gets no span. The name, kind and attributes are
// those of the Rust SDK's span.
func handlerSpan(ctx context.Context, carrier map[string]string, kind KindVersion, reaction, lease string) (context.Context, trace.Span) {
	if len(carrier) == 0 {
		return ctx, nil
	}
	parent := otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier(carrier))
	return otel.Tracer(tracerName, trace.WithInstrumentationVersion(Version)).Start(
		parent,
		"handle "+kind.String()+" "+reaction,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("converge.kind", kind.String()),
			attribute.String("converge.reaction", reaction),
			attribute.String("converge.lease", lease),
		),
	)
}

// endHandlerSpan ends span (nil when the task was not traced), marking it
// failed when the task failed.
func endHandlerSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
