package conformance_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"converge.dev/sdk/go/converge"
	"converge.dev/sdk/go/converge/worker"
	convergev1 "converge.dev/sdk/go/gen/converge/v1"
	"converge.dev/sdk/go/internal/conformance"
	"converge.dev/sdk/go/internal/e2elock"
)

// server dials CONVERGE_ADDR (sdk-gen/test starts a server and sets it) and
// applies the conformance kinds; without it the test is skipped.
func server(t *testing.T) (*converge.Client, string) {
	t.Helper()
	addr := os.Getenv("CONVERGE_ADDR")
	if addr == "" {
		t.Skip("CONVERGE_ADDR is not set: start a converge server and set it (sdk-gen/test does)")
	}
	c, err := converge.Dial(addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	for _, file := range []string{"leaf.json", "composite.json"} {
		raw, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "conformance", "kinds", file))
		if err != nil {
			t.Fatalf("read kind: %v", err)
		}
		req := &convergev1.ApplyKindManifestRequest{}
		if err := protojson.Unmarshal(raw, req); err != nil {
			t.Fatalf("parse %s: %v", file, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = c.Kind.ApplyKindManifest(ctx, req)
		cancel()
		if err != nil {
			t.Fatalf("apply %s: %v", file, err)
		}
	}
	return c, addr
}

// startWorker runs the conformance providers on the runtime for the test's
// duration; cleanup drains it and fails the test unless the drain is clean.
func startWorker(t *testing.T, addr string) {
	t.Helper()
	// Registered first, so released after the worker's cleanup has drained it.
	e2elock.Acquire(t, e2elock.Conformance)
	var opts []worker.Option
	for _, p := range conformance.Providers(nil) {
		opts = append(opts, worker.WithProvider(p))
	}
	opts = append(opts,
		worker.WithMaxParallel(4),
		worker.WithHeartbeatInterval(time.Second),
		worker.WithDrainTimeout(10*time.Second),
		worker.WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))),
	)
	w, err := worker.New(addr, opts...)
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Run did not return within 30 s of the shutdown")
		}
	})
}

// testWriter sends the worker's log to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func uniqueName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

func apply(t *testing.T, c *converge.Client, kind, name string, spec map[string]any) {
	t.Helper()
	s, err := structpb.NewStruct(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Resource.ApplyResource(ctx, &convergev1.ApplyResourceRequest{Kind: kind, KindVersion: 1, Name: name, Spec: s}); err != nil {
		t.Fatalf("apply %s/%s: %v", kind, name, err)
	}
}

// waitFor polls the resource until it reaches phase, failing the test at the
// timeout or if it settles in another terminal phase.
func waitFor(t *testing.T, c *converge.Client, kind, name string, phase convergev1.Phase) *convergev1.Resource {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last *convergev1.Resource
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.Resource.GetResource(ctx, &convergev1.GetResourceRequest{Kind: kind, Name: name})
		cancel()
		if err != nil {
			t.Fatalf("get %s/%s: %v", kind, name, err)
		}
		last = resp.GetResource()
		if last.GetPhase() == phase {
			return last
		}
		if last.GetPhase() == convergev1.Phase_PHASE_FAILED && phase != convergev1.Phase_PHASE_FAILED {
			t.Fatalf("%s/%s failed: %v", kind, name, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s/%s not %v after 60 s: %v", kind, name, phase, last)
	return nil
}

func TestLeafBecomesReady(t *testing.T) {
	c, addr := server(t)
	startWorker(t, addr)
	name := uniqueName("go-ready")
	apply(t, c, "conf-leaf", name, map[string]any{"value": "hello"})
	r := waitFor(t, c, "conf-leaf", name, convergev1.Phase_PHASE_READY)
	st := r.GetStatus().AsMap()
	want := map[string]any{"language": "go", "value": "hello", "trigger": "spec_change", "attempt": 1.0, "observedGeneration": 1.0}
	for k, v := range want {
		if st[k] != v {
			t.Errorf("status[%q] = %v, want %v (status %v)", k, st[k], v, st)
		}
	}
}

func TestTransientFailuresAreRetriedUntilSuccess(t *testing.T) {
	c, addr := server(t)
	startWorker(t, addr)
	name := uniqueName("go-retry")
	apply(t, c, "conf-leaf", name, map[string]any{"failTransient": 2})
	r := waitFor(t, c, "conf-leaf", name, convergev1.Phase_PHASE_READY)
	if got := r.GetStatus().AsMap()["attempt"]; got != 3.0 {
		t.Errorf("succeeded at attempt %v, want 3", got)
	}
}

func TestTerminalFailureFailsAtOnce(t *testing.T) {
	c, addr := server(t)
	startWorker(t, addr)
	name := uniqueName("go-terminal")
	apply(t, c, "conf-leaf", name, map[string]any{"failTerminal": true})
	r := waitFor(t, c, "conf-leaf", name, convergev1.Phase_PHASE_FAILED)
	if n := r.GetFailureAttempts(); n > 1 {
		t.Errorf("failure_attempts = %d, want 1", n)
	}
}

func TestCompositeFlowsAValueToADependent(t *testing.T) {
	c, addr := server(t)
	startWorker(t, addr)
	root, a, b := uniqueName("go-comp"), uniqueName("go-comp-a"), uniqueName("go-comp-b")
	apply(t, c, "conf-composite", root, map[string]any{"children": []any{
		map[string]any{"name": a, "spec": map[string]any{"value": "from-a"}},
		map[string]any{"name": b, "flows": []any{map[string]any{"from": a, "source": "/value", "field": "/value"}}},
	}})
	r := waitFor(t, c, "conf-composite", root, convergev1.Phase_PHASE_READY)
	if st := r.GetStatus().AsMap(); st["phase"] != "ready" || st["children"] != 2.0 || st["ready"] != 2.0 {
		t.Errorf("composite status = %v", st)
	}
	child := waitFor(t, c, "conf-leaf", b, convergev1.Phase_PHASE_READY)
	if got := child.GetStatus().AsMap()["value"]; got != "from-a" {
		t.Errorf("%s status.value = %v, want the flowed value from-a", b, got)
	}
}
