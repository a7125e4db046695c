package main

import (
	"context"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// serviceName is the service.name of the worker's spans.
const serviceName = "converge-conformance-go"

// setupTracing installs the OpenTelemetry SDK, exporting over OTLP/gRPC to
// OTEL_EXPORTER_OTLP_ENDPOINT, and the W3C propagator, when that variable is
// set: what an application does to see its handlers inside the broker's
// traces. The SDK library itself uses only the OpenTelemetry API; the SDK and
// the exporter are dependencies of this module, not of converge.dev/sdk/go.
// The returned function flushes and stops the exporter.
func setupTracing(ctx context.Context) (func(context.Context) error, error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		return func(context.Context) error { return nil }, nil
	}
	// The exporter takes the endpoint (an http:// one is plaintext) and its
	// other settings from the standard OTEL_EXPORTER_OTLP_* variables, the
	// batch processor its delay from OTEL_BSP_SCHEDULE_DELAY.
	exporter, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, err
	}
	provider := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exporter),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", serviceName))),
	)
	otel.SetTracerProvider(provider)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return provider.Shutdown, nil
}
