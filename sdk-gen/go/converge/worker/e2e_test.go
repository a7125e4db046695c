package worker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"converge.dev/sdk/go/converge"
	"converge.dev/sdk/go/converge/worker"
	convergev1 "converge.dev/sdk/go/gen/converge/v1"
)

// Kinds of this file's end-to-end tests, served by no other test.
var (
	observedKind = worker.KindVersion{Kind: "go-sdk-observed", Version: 1}
	unknownKind  = worker.KindVersion{Kind: "go-sdk-unknown-reaction", Version: 1}
)

// e2eServer dials CONVERGE_ADDR and applies this file's kinds; without it
// the test is skipped.
func e2eServer(t *testing.T) (*converge.Client, string) {
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
	for _, k := range []worker.KindVersion{observedKind, unknownKind} {
		req := &convergev1.ApplyKindManifestRequest{}
		manifest := `{"manifest": {"kind": "` + k.Kind + `", "kindVersion": 1,
			"description": "Go SDK end-to-end test kind (converge/worker/e2e_test.go).",
			"reactions": [{"name": "work", "trigger": "TRIGGER_SPEC_CHANGE", "emits": ["EMIT_STATUS", "EMIT_CONDITIONS"]}],
			"policy": {"maxTransientAttempts": 2}}}`
		if err := protojson.Unmarshal([]byte(manifest), req); err != nil {
			t.Fatalf("parse manifest of %s: %v", k, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Kind.ApplyKindManifest(ctx, req)
		cancel()
		if err != nil {
			t.Fatalf("apply %s: %v", k, err)
		}
	}
	return c, addr
}

// runWorker runs providers on the runtime until the test ends, then drains.
func runWorker(t *testing.T, addr string, providers ...worker.Provider) {
	t.Helper()
	opts := []worker.Option{worker.WithHeartbeatInterval(time.Second), worker.WithDrainTimeout(10 * time.Second)}
	for _, p := range providers {
		opts = append(opts, worker.WithProvider(p))
	}
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
			t.Error("Run did not return within 30 s of the shutdown")
		}
	})
}

func uniqueName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// settle polls the resource until it is READY or FAILED (or 60 s pass).
func settle(t *testing.T, c *converge.Client, kind, name string) *convergev1.Resource {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := c.GetResource(ctx, kind, name)
		cancel()
		if err != nil {
			t.Fatalf("get %s/%s: %v", kind, name, err)
		}
		if p := r.GetPhase(); p == convergev1.Phase_PHASE_READY || p == convergev1.Phase_PHASE_FAILED {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s not settled after 60 s: %v", kind, name, r)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// events lists the resource's event runs.
func events(t *testing.T, c *converge.Client, kind, name string) []*convergev1.ResourceEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Resource.ListResourceEvents(ctx, &convergev1.ListResourceEventsRequest{Kind: kind, Name: name, PageSize: 1000})
	if err != nil {
		t.Fatalf("list events of %s/%s: %v", kind, name, err)
	}
	return resp.GetEvents()
}

func find(runs []*convergev1.ResourceEvent, category, reason string) *convergev1.ResourceEvent {
	for _, r := range runs {
		if r.GetCategory() == category && r.GetReason() == reason {
			return r
		}
	}
	return nil
}

// Events reported with a failure and with a success land on the resource's
// timelines, and a liveness condition carries its expiry.
func TestEventsAndLivenessReachTheServer(t *testing.T) {
	c, addr := e2eServer(t)
	runWorker(t, addr, worker.Provider{Kind: observedKind, Handler: worker.Reactions{
		"work": func(_ context.Context, req *worker.ReactionRequest) (*worker.Outcome, error) {
			if req.Attempt == 1 {
				return nil, worker.WithEvents(worker.Transientf("NotYet", "first attempt fails"),
					worker.Event{Type: worker.EventWarning, Reason: "FirstTryFailed", Message: "will retry",
						Detail: map[string]any{"attempt": req.Attempt}},
					// Not an object: dropped with a failure, the event kept.
					worker.Event{Reason: "DetailDropped", Detail: []int{1, 2}})
			}
			out := &worker.Outcome{
				Status: map[string]any{"attempt": req.Attempt},
				Conditions: []worker.Condition{
					{Type: "Ready", Status: worker.ConditionTrue, Reason: "Done"},
					{Type: "Reachable", Status: worker.ConditionTrue, Reason: "Probed", Liveness: 30 * time.Second},
				},
			}
			return out.AddEvents(worker.Event{Category: "probe", Reason: "Probed", Message: "reachable",
				Detail: map[string]any{"attempt": req.Attempt}}), nil
		},
	}})
	name := uniqueName("go-observed")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.ApplyResource(ctx, observedKind.Kind, observedKind.Version, name, map[string]any{}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	r := settle(t, c, observedKind.Kind, name)
	if r.GetPhase() != convergev1.Phase_PHASE_READY || r.GetStatus().AsMap()["attempt"] != 2.0 {
		t.Fatalf("resource = %v, want READY at attempt 2", r)
	}
	for _, cond := range r.GetConditions() {
		switch cond.GetType() {
		case "Reachable":
			if left := time.Until(cond.GetExpireTime().AsTime()); cond.GetExpireTime() == nil || left <= 0 || left > 31*time.Second {
				t.Errorf("Reachable expires in %v (%v), want within the 30 s window", left, cond.GetExpireTime())
			}
		case "Ready":
			if cond.GetExpireTime() != nil {
				t.Errorf("the ordinary Ready condition has an expiry %v", cond.GetExpireTime())
			}
		}
	}
	runs := events(t, c, observedKind.Kind, name)
	if e := find(runs, "worker", "FirstTryFailed"); e == nil || e.GetType() != convergev1.EventType_EVENT_TYPE_WARNING ||
		e.GetMessage() != "will retry" || e.GetDetail().AsMap()["attempt"] != 1.0 {
		t.Errorf("failure event = %v (runs %v)", e, runs)
	}
	if e := find(runs, "worker", "DetailDropped"); e == nil || e.GetDetail() != nil || e.GetType() != convergev1.EventType_EVENT_TYPE_NORMAL {
		t.Errorf("event whose detail was dropped = %v (runs %v)", e, runs)
	}
	if e := find(runs, "probe", "Probed"); e == nil || e.GetType() != convergev1.EventType_EVENT_TYPE_NORMAL ||
		e.GetDetail().AsMap()["attempt"] != 2.0 || e.GetCount() != 1 {
		t.Errorf("success event = %v (runs %v)", e, runs)
	}
}

// A reaction the provider does not handle fails transiently: the server
// retries it until the kind's max_transient_attempts (2) turns it terminal.
func TestAnUnknownReactionIsRetriedUpToMaxTransientAttempts(t *testing.T) {
	c, addr := e2eServer(t)
	runWorker(t, addr, worker.Provider{Kind: unknownKind, Handler: worker.Reactions{
		"other": func(context.Context, *worker.ReactionRequest) (*worker.Outcome, error) { return &worker.Outcome{}, nil },
	}})
	name := uniqueName("go-unknown")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.ApplyResource(ctx, unknownKind.Kind, unknownKind.Version, name, map[string]any{}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	r := settle(t, c, unknownKind.Kind, name)
	if r.GetPhase() != convergev1.Phase_PHASE_FAILED || r.GetFailureAttempts() != 2 {
		t.Errorf("resource = phase %v after %d attempts, want FAILED after 2 (transient, retried once)", r.GetPhase(), r.GetFailureAttempts())
	}
	var synced *convergev1.Condition
	for _, cond := range r.GetConditions() {
		if cond.GetType() == "Synced" {
			synced = cond
		}
	}
	if synced.GetReason() != worker.UnknownReactionReason {
		t.Errorf("Synced condition = %v, want reason %s", synced, worker.UnknownReactionReason)
	}
	runs := events(t, c, unknownKind.Kind, name)
	if e := find(runs, "reconcile", worker.UnknownReactionReason); e == nil || e.GetCount() != 2 {
		t.Errorf("reconcile run = %v, want 2 UnknownReaction failures (runs %v)", e, runs)
	}
}
