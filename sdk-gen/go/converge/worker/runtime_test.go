package worker

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	workerv1 "converge.dev/sdk/go/gen/converge/worker/v1"
)

func TestSubscribeFirstAndACompletionEchoesTheFence(t *testing.T) {
	h := Reactions{"work": func(_ context.Context, req *ReactionRequest) (*Outcome, error) {
		return &Outcome{
			Status:     map[string]any{"seen": req.Resource.Name, "generation": req.Generation},
			Conditions: []Condition{{Type: "Ready", Status: ConditionTrue, Reason: "Done"}},
		}, nil
	}}
	r := newRig(t, nil, WithHandler(testKind, h), WithMaxParallel(3), WithAgent("test-agent"))
	s := r.session()
	sub := s.subscribe
	if len(sub.GetKinds()) != 1 || sub.GetKinds()[0].GetKind() != "test" || sub.GetMaxInflight() != 3 || sub.GetAgent() != "test-agent" {
		t.Fatalf("Subscribe = %v", sub)
	}
	s.task(t, workTask("l1", "work"))
	c := s.completion(t)
	if c.GetLeaseToken() != "l1" || c.GetClaimEpoch() != 7 || c.GetGeneration() != 2 || c.GetManifestVersion() != 99 || c.GetStage() != workerv1.Stage_STAGE_WORK {
		t.Errorf("fence not echoed: %v", c)
	}
	if c.GetError() != nil {
		t.Fatalf("unexpected error %v", c.GetError())
	}
	if got := c.GetStatus().AsMap(); got["seen"] != "r-l1" || got["generation"] != 2.0 {
		t.Errorf("status = %v", got)
	}
	if len(c.GetConditions()) != 1 || c.GetConditions()[0].GetStatus() != workerv1.ConditionStatus_CONDITION_STATUS_TRUE {
		t.Errorf("conditions = %v", c.GetConditions())
	}
	if err := r.stop(); err != nil {
		t.Errorf("Run = %v", err)
	}
	if st := r.w.Stats(); st.Completed != 1 || st.Sessions != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestHeartbeatsListTheLeasesOfRunningHandlers(t *testing.T) {
	g := newGate()
	r := newRig(t, nil, WithHandler(testKind, g))
	s := r.session()
	s.task(t, workTask("hb", "work"))
	g.waitStarted(t)
	s.next(t, func(m *workerv1.WorkStreamRequest) bool {
		l := m.GetHeartbeat().GetLeases()
		return len(l) == 1 && l[0].GetLeaseToken() == "hb" && l[0].GetClaimEpoch() == 7
	})
	close(g.release)
	s.completion(t)
	// Once answered, the lease is no longer attested.
	s.next(t, func(m *workerv1.WorkStreamRequest) bool {
		return m.GetHeartbeat() != nil && len(m.GetHeartbeat().GetLeases()) == 0
	})
}

func TestResultsAreBufferedAcrossAReconnectAndRedeliveredFirst(t *testing.T) {
	g := newGate()
	r := newRig(t, nil, WithHandler(testKind, g))
	s1 := r.session()
	s1.task(t, workTask("keep", "work"))
	g.waitStarted(t)
	r.broker.setReject(true)
	s1.end <- status.Error(codes.Unavailable, "broker restarting")
	waitStats(t, r.w, func(st WorkerStats) bool { return st.Reconnects == 1 })
	// The handler outlives the stream; its result waits in the buffer.
	close(g.release)
	waitStats(t, r.w, func(st WorkerStats) bool { return st.Buffered == 1 })
	r.broker.setReject(false)
	s2 := r.session()
	if res := s2.subscribe.GetResumed(); len(res) != 1 || res[0].GetLeaseToken() != "keep" || res[0].GetClaimEpoch() != 7 {
		t.Errorf("Subscribe.resumed = %v", res)
	}
	first := s2.next(t, func(m *workerv1.WorkStreamRequest) bool { return m.GetInterest() == nil })
	if first.GetComplete().GetLeaseToken() != "keep" {
		t.Errorf("first message after Subscribe = %v, want the buffered completion", first)
	}
	if st := r.w.Stats(); st.Reconnects < 1 || st.Sessions != 2 {
		t.Errorf("stats = %+v", st)
	}
}

func TestAResultIsKeptUntilAcknowledgedAndSentAgainOnTheNextStream(t *testing.T) {
	var runs atomic.Int32
	h := HandlerFunc(func(context.Context, *ReactionRequest) (*Outcome, error) {
		runs.Add(1)
		return nil, nil
	})
	r := newRig(t, nil, WithHandler(testKind, h))
	s0 := r.session()

	// Sent, but the broker cannot write it (no acknowledgement).
	r.broker.setWithholdAcks(true)
	s0.task(t, workTask("A", "work"))
	if c := s0.completion(t); c.GetLeaseToken() != "A" || c.GetClaimEpoch() != 7 {
		t.Fatalf("completion = %v", c)
	}
	waitStats(t, r.w, func(st WorkerStats) bool { return st.Buffered == 1 && st.Running == 0 })
	// Its lease is attested meanwhile.
	s0.next(t, func(m *workerv1.WorkStreamRequest) bool {
		l := m.GetHeartbeat().GetLeases()
		return len(l) == 1 && l[0].GetLeaseToken() == "A" && l[0].GetClaimEpoch() == 7
	})

	// The stream goes: the next one resumes A and sends its result again.
	r.broker.setWithholdAcks(false)
	s0.end <- status.Error(codes.Unavailable, "broker restarting")
	s1 := r.session()
	if res := s1.subscribe.GetResumed(); len(res) != 1 || res[0].GetLeaseToken() != "A" || res[0].GetClaimEpoch() != 7 {
		t.Errorf("Subscribe.resumed = %v, want A", res)
	}
	first := s1.next(t, func(m *workerv1.WorkStreamRequest) bool { return m.GetInterest() == nil })
	if c := first.GetComplete(); c.GetLeaseToken() != "A" || c.GetClaimEpoch() != 7 {
		t.Errorf("first message after Subscribe = %v, want A's completion again", first)
	}

	// Acknowledged now: forgotten, and not sent on a third stream.
	waitStats(t, r.w, func(st WorkerStats) bool { return st.Buffered == 0 })
	s1.end <- status.Error(codes.Unavailable, "broker restarting")
	s2 := r.session()
	if res := s2.subscribe.GetResumed(); len(res) != 0 {
		t.Errorf("Subscribe.resumed = %v after the acknowledgement, want none", res)
	}
	quiet := time.After(200 * time.Millisecond)
	for done := false; !done; {
		select {
		case m, ok := <-s2.recv:
			if !ok {
				t.Fatal("the stream ended")
			}
			if m.GetComplete() != nil {
				t.Errorf("an acknowledged result was sent again: %v", m)
			}
		case <-quiet:
			done = true
		}
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
	if st := r.w.Stats(); st.Completed != 1 || st.BufferedDropped != 0 {
		t.Errorf("stats = %+v", st)
	}
	if err := r.stop(); err != nil {
		t.Errorf("Run = %v, want a clean drain", err)
	}
}

func TestTheDrainWaitsForTheAcknowledgement(t *testing.T) {
	h := HandlerFunc(func(context.Context, *ReactionRequest) (*Outcome, error) { return nil, nil })
	r := newRig(t, nil, WithHandler(testKind, h), WithDrainTimeout(200*time.Millisecond))
	s := r.session()
	r.broker.setWithholdAcks(true)
	s.task(t, workTask("A", "work"))
	s.completion(t)
	err := r.stop()
	var de *DrainIncompleteError
	if !errors.As(err, &de) || de.Running != 0 || de.Undelivered != 1 {
		t.Fatalf("Run = %v, want a DrainIncompleteError with 1 undelivered", err)
	}
}

func TestDrainAnnouncesUnreadyRefusesNewTasksAndDeliversRunningResults(t *testing.T) {
	g := newGate()
	r := newRig(t, nil, WithHandler(testKind, g))
	s := r.session()
	s.task(t, workTask("running", "work"))
	g.waitStarted(t)
	r.cancel()
	if i := s.interest(t); i.GetReady() || i.GetKind() != "test" {
		t.Errorf("interest = %v, want test unready", i)
	}
	s.task(t, workTask("late", "work"))
	late := s.completion(t)
	if late.GetLeaseToken() != "late" || late.GetError() == nil || late.GetError().GetTerminal() {
		t.Errorf("late task = %v, want a transient failure", late)
	}
	close(g.release)
	c := s.completion(t)
	if c.GetLeaseToken() != "running" || c.GetError() != nil {
		t.Errorf("running task = %v, want its success", c)
	}
	// The worker half-closes once idle.
	for range s.recv {
	}
	if err := r.stop(); err != nil {
		t.Errorf("Run = %v, want a clean drain", err)
	}
}

func TestDrainTimeoutCancelsHandlersAndReportsThem(t *testing.T) {
	cancelled := make(chan error, 1)
	started := make(chan struct{})
	h := HandlerFunc(func(ctx context.Context, _ *ReactionRequest) (*Outcome, error) {
		close(started)
		<-ctx.Done()
		cancelled <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	r := newRig(t, nil, WithHandler(testKind, h), WithDrainTimeout(100*time.Millisecond))
	s := r.session()
	s.task(t, workTask("stuck", "work"))
	<-started
	err := r.stop()
	var de *DrainIncompleteError
	if !errors.As(err, &de) || !errors.Is(err, ErrDrainIncomplete) || de.Running != 1 {
		t.Fatalf("Run = %v, want a DrainIncompleteError with 1 running", err)
	}
	select {
	case cause := <-cancelled:
		if !errors.Is(cause, errDrainTimeout) {
			t.Errorf("handler cancelled with %v", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler was not cancelled")
	}
}

func TestConcurrencyIsBoundedByMaxParallel(t *testing.T) {
	var running, peak atomic.Int32
	h := HandlerFunc(func(context.Context, *ReactionRequest) (*Outcome, error) {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(30 * time.Millisecond)
		running.Add(-1)
		return nil, nil
	})
	r := newRig(t, nil, WithHandler(testKind, h), WithMaxParallel(2))
	s := r.session()
	for _, l := range []string{"a", "b", "c", "d", "e", "f"} {
		s.task(t, workTask(l, "work"))
	}
	for range 6 {
		if c := s.completion(t); c.GetError() != nil {
			t.Errorf("%s failed: %v", c.GetLeaseToken(), c.GetError())
		}
	}
	if p := peak.Load(); p != 2 {
		t.Errorf("peak concurrency %d, want 2", p)
	}
}

func TestTheDeadlineCancelsTheHandler(t *testing.T) {
	var sawDeadline atomic.Bool
	h := HandlerFunc(func(ctx context.Context, req *ReactionRequest) (*Outcome, error) {
		d, ok := ctx.Deadline()
		sawDeadline.Store(ok && d.Equal(req.Deadline))
		<-ctx.Done()
		return nil, ctx.Err()
	})
	r := newRig(t, nil, WithHandler(testKind, h))
	s := r.session()
	task := workTask("slow", "work")
	task.TaskDeadline = durationpb.New(50 * time.Millisecond)
	s.task(t, task)
	c := s.completion(t)
	e := c.GetError()
	if e == nil || e.GetTerminal() || e.GetReason() != DeadlineExceededReason || e.GetMessage() != "deadline exceeded" {
		t.Errorf("error = %v, want transient DeadlineExceeded", e)
	}
	if !sawDeadline.Load() {
		t.Error("the handler's context did not carry the task deadline")
	}
}

func TestAPanicFailsOnlyItsTask(t *testing.T) {
	h := Reactions{
		"boom": func(context.Context, *ReactionRequest) (*Outcome, error) { panic("kaboom") },
		"work": func(context.Context, *ReactionRequest) (*Outcome, error) { return nil, nil },
	}
	r := newRig(t, nil, WithHandler(testKind, h))
	s := r.session()
	s.task(t, workTask("p", "boom"))
	c := s.completion(t)
	if e := c.GetError(); e == nil || e.GetTerminal() || !strings.Contains(e.GetMessage(), "kaboom") {
		t.Errorf("panic = %v, want a transient failure naming it", e)
	}
	s.task(t, workTask("ok", "work"))
	if c := s.completion(t); c.GetError() != nil {
		t.Errorf("next task = %v", c)
	}
}

func TestErrorsAreClassified(t *testing.T) {
	h := Reactions{
		"plain": func(context.Context, *ReactionRequest) (*Outcome, error) { return nil, errBoom },
		"terminal": func(context.Context, *ReactionRequest) (*Outcome, error) {
			return nil, WithReason(Terminal(errBoom), "Bad")
		},
		"badstat": func(context.Context, *ReactionRequest) (*Outcome, error) { return &Outcome{Status: []int{1}}, nil },
		"evented": func(context.Context, *ReactionRequest) (*Outcome, error) {
			return nil, WithEvents(Terminal(errBoom), WarningEvent("HalfDone", "created 1 of 2"))
		},
	}
	r := newRig(t, nil, WithHandler(testKind, h))
	s := r.session()
	cases := []struct {
		reaction, reason string
		terminal         bool
	}{
		{"plain", "", false},
		{"terminal", "Bad", true},
		{"badstat", invalidOutcomeReason, true},
		{"evented", "", true},
		{"nope", UnknownReactionReason, false},
	}
	for _, tc := range cases {
		s.task(t, workTask(tc.reaction, tc.reaction))
		c := s.completion(t)
		e := c.GetError()
		if e == nil || e.GetTerminal() != tc.terminal || e.GetReason() != tc.reason {
			t.Errorf("%s: error = %v, want terminal=%v reason=%q", tc.reaction, e, tc.terminal, tc.reason)
		}
		if wantEvents := tc.reaction == "evented"; (len(c.GetEvents()) == 1) != wantEvents {
			t.Errorf("%s: events = %v", tc.reaction, c.GetEvents())
		}
	}
	// A pair this worker does not serve fails transiently.
	other := workTask("other", "work")
	other.Kind = "other"
	s.task(t, other)
	if e := s.completion(t).GetError(); e == nil || e.GetTerminal() {
		t.Errorf("unknown kind: %v, want a transient failure", e)
	}
}

func TestReadinessChangesAreAnnounced(t *testing.T) {
	var ready atomic.Bool
	r := newRig(t, nil, WithProvider(Provider{
		Kind:    testKind,
		Handler: HandlerFunc(func(context.Context, *ReactionRequest) (*Outcome, error) { return nil, nil }),
		Ready:   ready.Load,
	}))
	s := r.session()
	if i := s.interest(t); i.GetReady() {
		t.Fatalf("opening burst: %v, want unready", i)
	}
	s.task(t, workTask("early", "work"))
	if e := s.completion(t).GetError(); e == nil || !strings.Contains(e.GetMessage(), "not ready") {
		t.Errorf("task while unready: %v", e)
	}
	ready.Store(true)
	if i := s.interest(t); !i.GetReady() {
		t.Errorf("after Ready: %v, want ready", i)
	}
}

func TestDefaultConfigGatesReadinessAndMergesWithTheOverride(t *testing.T) {
	var seen atomic.Pointer[ReactionRequest]
	var configs atomic.Int32
	r := newRig(t, nil, WithProvider(Provider{
		Kind: testKind,
		Handler: HandlerFunc(func(_ context.Context, req *ReactionRequest) (*Outcome, error) {
			seen.Store(req)
			return nil, nil
		}),
		RequiresDefaultConfig: true,
		OnConfig:              func(*ProviderConfig) { configs.Add(1) },
	}))
	s := r.session()
	if i := s.interest(t); i.GetReady() {
		t.Fatalf("without a default: %v, want unready", i)
	}
	spec, _ := structpb.NewStruct(map[string]any{"region": "eu", "limits": map[string]any{"cpu": 1, "mem": 2}})
	// Like the real broker: the stored default changes, then it is pushed.
	r.broker.mu.Lock()
	r.broker.configs = []*workerv1.ProviderConfigEntry{{Kind: "test", KindVersion: 1, Spec: spec, Data: []byte("bundle")}}
	r.broker.mu.Unlock()
	s.send <- &workerv1.WorkStreamResponse{Payload: &workerv1.WorkStreamResponse_ProviderConfigUpdate{
		ProviderConfigUpdate: &workerv1.ProviderConfigUpdate{Kind: "test", KindVersion: 1, Spec: spec, Data: []byte("bundle")},
	}}
	if i := s.interest(t); !i.GetReady() {
		t.Fatalf("after the push: %v, want ready", i)
	}
	task := workTask("cfg", "work")
	task.ProviderConfig, _ = structpb.NewStruct(map[string]any{"limits": map[string]any{"mem": 8}})
	s.task(t, task)
	if c := s.completion(t); c.GetError() != nil {
		t.Fatalf("task failed: %v", c.GetError())
	}
	req := seen.Load()
	got := req.EffectiveConfig()
	limits, _ := got["limits"].(map[string]any)
	if got["region"] != "eu" || limits["cpu"] != 1.0 || limits["mem"] != 8.0 {
		t.Errorf("effective config = %v", got)
	}
	if string(req.EffectiveBundle()) != "bundle" {
		t.Errorf("effective bundle = %q", req.EffectiveBundle())
	}
	if n := configs.Load(); n != 2 { // the prime (none) and the push
		t.Errorf("OnConfig called %d times, want 2", n)
	}
}

// waitStats polls the worker's counters until ok holds.
func waitStats(t *testing.T, w *Worker, ok func(WorkerStats) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok(w.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("stats never matched: %+v", w.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestShutdownWhilePrimingAgainstAnUnreachableBrokerReturnsAtOnce(t *testing.T) {
	w, err := New("127.0.0.1:1", WithHandler(testKind, Reactions{}), WithReconnectBackoff(10*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := w.Run(ctx); err != nil {
		t.Errorf("Run = %v, want nil (nothing was running)", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Run took %v after the shutdown", d)
	}
	if err := w.Run(context.Background()); err == nil {
		t.Error("a second Run was accepted")
	}
}
