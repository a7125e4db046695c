package worker

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// spanRecorder is a tracer provider built on the OpenTelemetry API alone
// (the SDK is no dependency of this module, not even for tests): it records
// every span started, with its parent, kind, attributes and status.
type spanRecorder struct {
	embedded.TracerProvider
	mu    sync.Mutex
	spans []*recordedSpan
}

type recordedSpan struct {
	trace.Span // a non-recording span that only carries the span context
	name       string
	parent     trace.SpanContext
	kind       trace.SpanKind
	attrs      []attribute.KeyValue
	status     codes.Code
	ended      bool
}

func (s *recordedSpan) SetStatus(code codes.Code, _ string) { s.status = code }
func (s *recordedSpan) End(...trace.SpanEndOption)          { s.ended = true }

func (p *spanRecorder) Tracer(string, ...trace.TracerOption) trace.Tracer {
	return &recordingTracer{p: p}
}

func (p *spanRecorder) recorded() []*recordedSpan {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*recordedSpan(nil), p.spans...)
}

type recordingTracer struct {
	embedded.Tracer
	p *spanRecorder
}

func (t *recordingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	parent := trace.SpanContextFromContext(ctx)
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	id := trace.SpanID{0xAA, byte(len(t.p.spans) + 1)}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: parent.TraceID(), SpanID: id, TraceFlags: parent.TraceFlags()})
	s := &recordedSpan{
		Span:   trace.SpanFromContext(trace.ContextWithSpanContext(ctx, sc)),
		name:   name,
		parent: parent,
		kind:   cfg.SpanKind(),
		attrs:  cfg.Attributes(),
	}
	t.p.spans = append(t.p.spans, s)
	return trace.ContextWithSpan(ctx, s), s
}

// withGlobalTracing installs p and the W3C propagator for the test.
func withGlobalTracing(t *testing.T, p trace.TracerProvider) {
	prevProvider, prevPropagator := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(p)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() {
		otel.SetTracerProvider(prevProvider)
		otel.SetTextMapPropagator(prevPropagator)
	})
}

const (
	brokerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	brokerSpan  = "00f067aa0ba902b7"
)

// A task that carries the broker's trace context runs its handler inside a
// child span of it (named and attributed as in the Rust SDK), and the
// handler's context carries that span; a failed task marks it failed.
func TestTheHandlerContinuesTheBrokersTrace(t *testing.T) {
	recorder := &spanRecorder{}
	withGlobalTracing(t, recorder)
	seen := make(chan trace.SpanContext, 2)
	h := HandlerFunc(func(ctx context.Context, req *ReactionRequest) (*Outcome, error) {
		seen <- trace.SpanContextFromContext(ctx)
		if req.Resource.Name == "r-fails" {
			return nil, errors.New("no")
		}
		return nil, nil
	})
	r := newRig(t, nil, WithHandler(testKind, h))
	s := r.session()
	traced := workTask("traced", "work")
	traced.TraceContext = map[string]string{"traceparent": "00-" + brokerTrace + "-" + brokerSpan + "-01"}
	s.task(t, traced)
	if c := s.completion(t); c.GetError() != nil {
		t.Fatalf("traced task failed: %v", c.GetError())
	}
	inHandler := <-seen

	spans := recorder.recorded()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	span := spans[0]
	if span.name != "handle "+testKind.String()+" work" || span.kind != trace.SpanKindConsumer || !span.ended {
		t.Errorf("span %q kind %v ended %v", span.name, span.kind, span.ended)
	}
	if span.parent.TraceID().String() != brokerTrace || span.parent.SpanID().String() != brokerSpan || !span.parent.IsRemote() {
		t.Errorf("parent %v, want the broker's remote span %s/%s", span.parent, brokerTrace, brokerSpan)
	}
	if !inHandler.Equal(span.SpanContext()) {
		t.Errorf("the handler's context carries %v, not its span %v", inHandler, span.SpanContext())
	}
	want := map[attribute.Key]string{
		"converge.kind":     testKind.String(),
		"converge.reaction": "work",
		"converge.lease":    "traced",
	}
	for _, kv := range span.attrs {
		if want[kv.Key] == kv.Value.AsString() {
			delete(want, kv.Key)
		}
	}
	if len(want) != 0 || span.status != codes.Unset {
		t.Errorf("attributes %v (missing %v), status %v", span.attrs, want, span.status)
	}

	failing := workTask("fails", "work")
	failing.TraceContext = traced.TraceContext
	s.task(t, failing)
	if c := s.completion(t); c.GetError() == nil {
		t.Fatal("the failing task succeeded")
	}
	<-seen
	if spans := recorder.recorded(); len(spans) != 2 || spans[1].status != codes.Error {
		t.Errorf("the failed task's span was not marked failed: %d spans", len(spans))
	}
}

// Without a trace context the handler runs in no span of the SDK's.
func TestAnUntracedTaskStartsNoSpan(t *testing.T) {
	recorder := &spanRecorder{}
	withGlobalTracing(t, recorder)
	seen := make(chan trace.SpanContext, 1)
	h := HandlerFunc(func(ctx context.Context, _ *ReactionRequest) (*Outcome, error) {
		seen <- trace.SpanContextFromContext(ctx)
		return nil, nil
	})
	r := newRig(t, nil, WithHandler(testKind, h))
	s := r.session()
	s.task(t, workTask("plain", "work"))
	s.completion(t)
	if sc := <-seen; sc.IsValid() {
		t.Errorf("an untraced handler runs in span %v", sc)
	}
	if n := len(recorder.recorded()); n != 0 {
		t.Errorf("%d spans for an untraced task", n)
	}
}
