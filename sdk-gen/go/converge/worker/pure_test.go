package worker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	workerv1 "converge.dev/sdk/go/gen/converge/worker/v1"
)

func TestBackoffGrowsToTheCapWithJitterAndResets(t *testing.T) {
	b := newBackoff(100*time.Millisecond, time.Second)
	if d := b.next(); d < 50*time.Millisecond || d > 100*time.Millisecond {
		t.Errorf("first delay %v, want [50ms, 100ms]", d)
	}
	if d := b.next(); d < 100*time.Millisecond || d > 200*time.Millisecond {
		t.Errorf("second delay %v, want [100ms, 200ms]", d)
	}
	for range 100 {
		if d := b.next(); d > time.Second {
			t.Fatalf("delay %v above the cap", d)
		}
	}
	if d := b.next(); d < 500*time.Millisecond {
		t.Errorf("capped delay %v, want >= 500ms", d)
	}
	b.reset()
	if d := b.next(); d > 100*time.Millisecond {
		t.Errorf("after reset %v, want <= 100ms", d)
	}
	huge := newBackoff(time.Duration(1<<62), time.Duration(1<<62)+1)
	for range 5 {
		if d := huge.next(); d <= 0 {
			t.Fatalf("overflowed to %v", d)
		}
	}
}

func complete(lease string) *workerv1.StageComplete {
	return &workerv1.StageComplete{LeaseToken: lease}
}

func TestBufferOverflowDiscardsTheOldest(t *testing.T) {
	b := newResultBuffer(2)
	if b.push(complete("a")) != nil || b.push(complete("b")) != nil {
		t.Fatal("dropped below capacity")
	}
	if d := b.push(complete("c")); d.GetLeaseToken() != "a" {
		t.Fatalf("dropped %v, want a", d)
	}
	front := b.pop()
	if front.GetLeaseToken() != "b" {
		t.Fatalf("pop = %v, want b", front)
	}
	if b.pushFront(front) != nil {
		t.Fatal("pushFront dropped below capacity")
	}
	if d := b.pushFront(complete("z")); d.GetLeaseToken() != "z" {
		t.Fatalf("pushFront when full dropped %v, want z itself", d)
	}
	var order []string
	b.each(func(c *workerv1.StageComplete) { order = append(order, c.GetLeaseToken()) })
	if !reflect.DeepEqual(order, []string{"b", "c"}) || b.len() != 2 {
		t.Errorf("buffer = %v", order)
	}
}

func TestUnacknowledgedResultsGoBackInFrontInOrderAndAreAttested(t *testing.T) {
	st := defaultSettings()
	st.resultBufferCapacity = 3
	st.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	sh := newShared(&st, nil)
	leases := func(b *resultBuffer) []string {
		var out []string
		b.each(func(c *workerv1.StageComplete) { out = append(out, c.GetLeaseToken()) })
		return out
	}
	for _, l := range []string{"a", "b", "c", "d"} {
		sh.sent(complete(l))
	}
	if got := leases(sh.unacked); !reflect.DeepEqual(got, []string{"b", "c", "d"}) || sh.bufferedDropped.Load() != 1 {
		t.Fatalf("unacked = %v (dropped %d), want the oldest forgotten", got, sh.bufferedDropped.Load())
	}
	sh.acknowledge([]*workerv1.LeaseRef{{LeaseToken: "c"}, {LeaseToken: "unknown"}})
	sh.begin("b", 0) // a lease both running and unacknowledged is attested once
	var attested []string
	for _, l := range sh.attestedLeases() {
		attested = append(attested, l.GetLeaseToken())
	}
	if !reflect.DeepEqual(attested, []string{"b", "d"}) {
		t.Errorf("attested = %v, want [b d]", attested)
	}
	if _, undelivered := sh.outstanding(); undelivered != 2 {
		t.Errorf("undelivered = %d, want 2 (unacknowledged count)", undelivered)
	}
	// A result computed while disconnected waits behind the unacknowledged.
	sh.results.push(complete("e"))
	sh.requeueUnacknowledged()
	if got := leases(sh.results); !reflect.DeepEqual(got, []string{"b", "d", "e"}) || sh.unacked.len() != 0 {
		t.Errorf("results = %v, unacked %d; want [b d e] and none", got, sh.unacked.len())
	}
	// Requeued onto a full buffer, the oldest are discarded.
	sh.sent(sh.results.pop())
	sh.results.push(complete("f"))
	sh.requeueUnacknowledged()
	if got := leases(sh.results); !reflect.DeepEqual(got, []string{"d", "e", "f"}) || sh.bufferedDropped.Load() != 2 {
		t.Errorf("results = %v (dropped %d), want [d e f] and b discarded", got, sh.bufferedDropped.Load())
	}
}

func TestMergeIsDeepOverrideWinsAndInputsStayUntouched(t *testing.T) {
	base := map[string]any{"a": 1.0, "nested": map[string]any{"x": 1.0, "y": 2.0}, "list": []any{1.0, 2.0}}
	over := map[string]any{"nested": map[string]any{"y": 3.0, "z": 4.0}, "list": []any{9.0}, "b": true}
	got := MergeJSON(base, over)
	want := map[string]any{"a": 1.0, "nested": map[string]any{"x": 1.0, "y": 3.0, "z": 4.0}, "list": []any{9.0}, "b": true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("merge = %v, want %v", got, want)
	}
	got["nested"].(map[string]any)["x"] = "changed"
	if base["nested"].(map[string]any)["x"] != 1.0 {
		t.Error("the merge result shares maps with its base")
	}
	if MergeJSON(nil, nil) == nil {
		t.Error("merging two nils should give an empty object")
	}
}

func TestEffectiveConfigAndBundle(t *testing.T) {
	r := &ReactionRequest{}
	if r.EffectiveConfig() != nil || r.EffectiveBundle() != nil {
		t.Error("no config and no override should give nothing")
	}
	r.DefaultConfig = &ProviderConfig{Spec: map[string]any{"k": "default"}, Data: []byte("d")}
	if r.EffectiveConfig()["k"] != "default" || string(r.EffectiveBundle()) != "d" {
		t.Error("the default alone should be effective")
	}
	r.ConfigOverride = map[string]any{"k": "override"}
	r.BundleOverride = []byte("o")
	if r.EffectiveConfig()["k"] != "override" || string(r.EffectiveBundle()) != "o" {
		t.Error("the override should win")
	}
}

func testFence(stage workerv1.Stage) fence {
	return fence{leaseToken: "l", claimEpoch: 1, stage: stage, generation: 2, manifestVersion: 3}
}

func TestOutcomeEncoding(t *testing.T) {
	type status struct {
		Phase string `json:"phase"`
		Count int    `json:"count"`
	}
	c := testFence(workerv1.Stage_STAGE_WORK).complete(&Outcome{
		Status:       status{Phase: "up", Count: 5},
		Healthy:      Bool(false),
		RequeueAfter: 1500 * time.Millisecond,
	}, nil)
	if c.GetError() != nil {
		t.Fatalf("error %v", c.GetError())
	}
	if got := c.GetStatus().AsMap(); got["phase"] != "up" || got["count"] != 5.0 {
		t.Errorf("struct status = %v", got)
	}
	if c.Healthy == nil || *c.Healthy || c.GetRequeueAfter().AsDuration() != 1500*time.Millisecond {
		t.Errorf("healthy %v, requeue %v", c.Healthy, c.GetRequeueAfter())
	}
	if c.GetComposeResult() != nil {
		t.Error("a work outcome without composition parts should send no compose result")
	}
	if c.GetLeaseToken() != "l" || c.GetManifestVersion() != 3 || c.GetGeneration() != 2 || c.GetClaimEpoch() != 1 {
		t.Errorf("fence = %v", c)
	}

	// A composer always sends a compose result: empty prunes everything.
	if testFence(workerv1.Stage_STAGE_COMPOSE).complete(nil, nil).GetComposeResult() == nil {
		t.Error("compose without a compose result")
	}
	c = testFence(workerv1.Stage_STAGE_COMPOSE).complete(&Outcome{
		Children: []ChildSpec{{Kind: "leaf", KindVersion: 1, Name: "a"}, {Kind: "leaf", KindVersion: 1, Name: "b", Spec: map[string]any{"tags": []string{"x"}}}},
		Edges: []DepEdge{{Dependent: ResourceRef{"leaf", "b"}, Dependency: ResourceRef{"leaf", "a"},
			ValueFlows: []ValueFlow{{DependentField: "/in", SourceField: "/out"}}}},
		Configs: []ProviderConfigSpec{{Name: "cfg", Kind: "leaf", KindVersion: 1, Data: []byte{1}}},
	}, nil)
	r := c.GetComposeResult()
	if c.GetError() != nil || len(r.GetDesired()) != 2 || r.GetDesired()[0].GetSpec() == nil || len(r.GetEdges()) != 1 || len(r.GetConfigs()) != 1 {
		t.Fatalf("compose result = %v (error %v)", r, c.GetError())
	}
	if tags := r.GetDesired()[1].GetSpec().AsMap()["tags"]; !reflect.DeepEqual(tags, []any{"x"}) {
		t.Errorf("child spec tags = %v", tags)
	}
	if f := r.GetEdges()[0].GetValueFlows()[0]; f.GetDependentField() != "/in" || f.GetSourceField() != "/out" {
		t.Errorf("value flow = %v", f)
	}
	if r.GetConfigs()[0].GetSpec() != nil {
		t.Error("a config without a spec should send none")
	}
}

func TestInvalidOutcomesFailTerminally(t *testing.T) {
	cases := map[string]*Outcome{
		"status must be a JSON object":   {Status: 5},
		"operation_output":               {OperationOutput: []any{1}},
		"children[0].spec":               {Children: []ChildSpec{{Name: "x", Spec: "text"}}},
		"has no status":                  {Conditions: []Condition{{Type: "Ready"}}},
		"status cannot be encoded":       {Status: map[string]any{"f": func() {}}},
		"configs[0].spec must be a JSON": {Configs: []ProviderConfigSpec{{Name: "c", Spec: true}}},
	}
	for want, o := range cases {
		e := testFence(workerv1.Stage_STAGE_WORK).complete(o, nil).GetError()
		if e == nil || !e.GetTerminal() || e.GetReason() != invalidOutcomeReason || !strings.Contains(e.GetMessage(), want) {
			t.Errorf("%q: error = %v", want, e)
		}
	}
	// Null documents are absent, not invalid.
	var typedNil *struct{}
	if c := testFence(workerv1.Stage_STAGE_WORK).complete(&Outcome{Status: typedNil}, nil); c.GetError() != nil || c.GetStatus() != nil {
		t.Errorf("typed nil status = %v", c)
	}
}

func TestErrorClassification(t *testing.T) {
	wrapped := fmt.Errorf("context: %w", Terminal(errBoom))
	if !IsTerminal(wrapped) || !errors.Is(wrapped, errBoom) {
		t.Error("Terminal through a wrapper")
	}
	if IsTerminal(errBoom) || reasonOf(errBoom) != "" {
		t.Error("a plain error is transient without a reason")
	}
	r := WithReason(Terminal(errBoom), "Why")
	if !IsTerminal(r) || reasonOf(r) != "Why" || r.Error() != "boom" {
		t.Errorf("WithReason: terminal=%v reason=%q msg=%q", IsTerminal(r), reasonOf(r), r.Error())
	}
	if Terminal(nil) != nil || WithReason(nil, "x") != nil {
		t.Error("nil stays nil")
	}
	// An unknown reaction is transient: a newer worker may know it.
	u := fmt.Errorf("dispatch: %w", UnknownReaction("nope", testKind))
	if !errors.Is(u, ErrUnknownReaction) || IsTerminal(u) || reasonOf(u) != UnknownReactionReason {
		t.Errorf("UnknownReaction = %v (terminal %v, reason %q)", u, IsTerminal(u), reasonOf(u))
	}
	if e := testFence(workerv1.Stage_STAGE_WORK).failure(u).GetError(); e.GetTerminal() || e.GetReason() != UnknownReactionReason ||
		!strings.Contains(e.GetMessage(), `unknown reaction "nope" for kind test:1`) {
		t.Errorf("unknown reaction failure = %v", e)
	}
	if bare := fmt.Errorf("x: %w", ErrUnknownReaction); IsTerminal(bare) || reasonOf(bare) != UnknownReactionReason {
		t.Error("the bare sentinel should be transient with its reason")
	}
	if tu := Terminal(UnknownReaction("nope", testKind)); !IsTerminal(tu) || !errors.Is(tu, ErrUnknownReaction) || reasonOf(tu) != UnknownReactionReason {
		t.Errorf("Terminal(UnknownReaction) = %v", tu)
	}
	f := testFence(workerv1.Stage_STAGE_WORK).failure(Transientf("Later", "try %d", 2))
	if e := f.GetError(); e.GetTerminal() || e.GetReason() != "Later" || e.GetMessage() != "try 2" {
		t.Errorf("Transientf = %v", e)
	}
	if !errors.Is(&DrainIncompleteError{Running: 1}, ErrDrainIncomplete) {
		t.Error("DrainIncompleteError should match ErrDrainIncomplete")
	}
}

func TestEventsAndLivenessTravelWithASuccess(t *testing.T) {
	type probe struct {
		Millis int `json:"ms"`
	}
	out := &Outcome{Conditions: []Condition{
		{Type: "Reachable", Status: ConditionTrue, Liveness: 2500 * time.Millisecond},
		{Type: "Ready", Status: ConditionTrue},
	}}
	out = out.AddEvents(
		Event{Category: "probe", Type: EventWarning, Reason: "ProbeSlow", Message: "slow", Detail: probe{Millis: 900}},
		NormalEvent("Probed", "done"),
	)
	c := testFence(workerv1.Stage_STAGE_WORK).complete(out, nil)
	if c.GetError() != nil {
		t.Fatalf("error %v", c.GetError())
	}
	conds := c.GetConditions()
	if len(conds) != 2 || conds[0].GetLiveness().AsDuration() != 2500*time.Millisecond || conds[1].GetLiveness() != nil {
		t.Errorf("conditions = %v, want a 2.5 s liveness on the first only", conds)
	}
	events := c.GetEvents()
	if len(events) != 2 {
		t.Fatalf("events = %v", events)
	}
	if e := events[0]; e.GetCategory() != "probe" || e.GetType() != workerv1.EventType_EVENT_TYPE_WARNING ||
		e.GetReason() != "ProbeSlow" || e.GetMessage() != "slow" || e.GetDetail().AsMap()["ms"] != 900.0 {
		t.Errorf("events[0] = %v", e)
	}
	if e := events[1]; e.GetCategory() != "" || e.GetType() != workerv1.EventType_EVENT_TYPE_NORMAL || e.GetReason() != "Probed" || e.GetDetail() != nil {
		t.Errorf("events[1] = %v", e)
	}
	var none *Outcome
	if got := none.AddEvents(WarningEvent("W", "m")); len(got.Events) != 1 || got.Events[0].Type != EventWarning {
		t.Errorf("AddEvents on nil = %v", got)
	}
	if c := testFence(workerv1.Stage_STAGE_WORK).complete(nil, nil); c.GetEvents() != nil || c.GetError() != nil {
		t.Errorf("an empty outcome sent %v", c)
	}
}

func TestInvalidEventsFailASuccessTerminally(t *testing.T) {
	cases := map[string]Event{
		"events[0].detail must be a JSON object, got an array": {Reason: "Tried", Detail: []int{1}},
		"events[0].detail cannot be encoded":                   {Reason: "Tried", Detail: map[string]any{"f": func() {}}},
		`events[0] ("Tried") has an unknown type 7`:            {Reason: "Tried", Type: EventType(7)},
	}
	for want, e := range cases {
		c := testFence(workerv1.Stage_STAGE_WORK).complete(&Outcome{Events: []Event{e}}, nil)
		if err := c.GetError(); err == nil || !err.GetTerminal() || err.GetReason() != invalidOutcomeReason || !strings.Contains(err.GetMessage(), want) {
			t.Errorf("%q: error = %v", want, err)
		}
		if len(c.GetEvents()) != 0 {
			t.Errorf("%q: an invalid outcome sent events %v", want, c.GetEvents())
		}
	}
}

func TestEventsTravelWithAFailure(t *testing.T) {
	tried := Event{Reason: "Tried", Message: "once", Detail: []int{1}}
	noted := Event{Category: "probe", Type: EventWarning, Reason: "Noted", Detail: map[string]any{"k": "v"}}
	odd := Event{Reason: "Odd", Type: EventType(9)}
	err := fmt.Errorf("handler: %w", WithReason(Terminal(WithEvents(errBoom, tried, noted)), "Broken"))
	err = WithEvents(err, odd)
	if !IsTerminal(err) || reasonOf(err) != "Broken" || !errors.Is(err, errBoom) || err.Error() != "handler: boom" {
		t.Fatalf("class, reason or text lost: terminal=%v reason=%q text=%q", IsTerminal(err), reasonOf(err), err.Error())
	}
	var he *Error
	if !errors.As(err, &he) || len(he.Events) != 3 {
		t.Fatalf("events of the *Error = %v", he)
	}
	c := testFence(workerv1.Stage_STAGE_WORK).complete(nil, err)
	if e := c.GetError(); !e.GetTerminal() || e.GetReason() != "Broken" || e.GetMessage() != "handler: boom" {
		t.Errorf("task error = %v", e)
	}
	events := c.GetEvents()
	if len(events) != 3 {
		t.Fatalf("events = %v", events)
	}
	// A detail that is not an object is dropped, its event kept.
	if e := events[0]; e.GetReason() != "Tried" || e.GetMessage() != "once" || e.GetDetail() != nil || e.GetType() != workerv1.EventType_EVENT_TYPE_NORMAL {
		t.Errorf("events[0] = %v", e)
	}
	if e := events[1]; e.GetCategory() != "probe" || e.GetType() != workerv1.EventType_EVENT_TYPE_WARNING || e.GetDetail().AsMap()["k"] != "v" {
		t.Errorf("events[1] = %v", e)
	}
	if e := events[2]; e.GetReason() != "Odd" || e.GetType() != workerv1.EventType_EVENT_TYPE_UNSPECIFIED {
		t.Errorf("events[2] = %v", e)
	}

	// Transient failures carry events too; a plain error carries none.
	if c := testFence(workerv1.Stage_STAGE_WORK).failure(WithEvents(errBoom, NormalEvent("N", ""))); c.GetError().GetTerminal() || len(c.GetEvents()) != 1 {
		t.Errorf("transient failure with an event = %v", c)
	}
	if c := testFence(workerv1.Stage_STAGE_WORK).failure(errBoom); c.GetEvents() != nil {
		t.Errorf("plain error sent events %v", c.GetEvents())
	}
	if WithEvents(nil, tried) != nil || WithEvents(errBoom) != errBoom {
		t.Error("WithEvents(nil) should be nil and WithEvents without events the error itself")
	}
	// Accumulating never writes into the wrapped error's slice, even when it
	// has room to spare.
	base := &Error{Err: errBoom, Events: append(make([]Event, 0, 4), tried)}
	first, second := WithEvents(base, noted), WithEvents(base, odd)
	if got := eventsOf(first); len(got) != 2 || got[0].Reason != "Tried" || got[1].Reason != "Noted" {
		t.Errorf("first derived events = %v", got)
	}
	if got := eventsOf(second); len(got) != 2 || got[1].Reason != "Odd" {
		t.Errorf("second derived events = %v", got)
	}
	if len(base.Events) != 1 {
		t.Errorf("the wrapped error's events changed: %v", base.Events)
	}
}

func TestParseKindVersion(t *testing.T) {
	for in, want := range map[string]KindVersion{"noop:2": {"noop", 2}, "noop": {"noop", 1}, "a:b:3": {"a:b", 3}} {
		got, err := ParseKindVersion(in)
		if err != nil || got != want {
			t.Errorf("ParseKindVersion(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"noop:0", "noop:x", ":1", ""} {
		if _, err := ParseKindVersion(in); err == nil {
			t.Errorf("ParseKindVersion(%q) accepted", in)
		}
	}
	if s := (KindVersion{"noop", 2}).String(); s != "noop:2" {
		t.Errorf("String = %q", s)
	}
}

func TestTriggerNamesAreLowerSnakeCase(t *testing.T) {
	want := map[workerv1.Trigger]string{
		workerv1.Trigger_TRIGGER_SPEC_CHANGE:      "spec_change",
		workerv1.Trigger_TRIGGER_CHILDREN_SETTLED: "children_settled",
		workerv1.Trigger_TRIGGER_RESYNC:           "resync",
		workerv1.Trigger_TRIGGER_CONFIG_CHANGE:    "config_change",
		workerv1.Trigger(42):                      "unspecified",
	}
	for in, name := range want {
		if got := triggerFromProto(in).String(); got != name {
			t.Errorf("%v -> %q, want %q", in, got, name)
		}
	}
}

func TestNewValidates(t *testing.T) {
	h := HandlerFunc(nil)
	ok := WithHandler(testKind, h)
	cases := map[string][]Option{
		"at least one provider":      nil,
		"more than one provider":     {ok, ok},
		"invalid provider kind":      {WithHandler(KindVersion{"", 1}, h)},
		"has no handler":             {WithProvider(Provider{Kind: testKind})},
		"max parallel":               {ok, WithMaxParallel(0)},
		"heartbeat interval":         {ok, WithHeartbeatInterval(0)},
		"result buffer capacity":     {ok, WithResultBufferCapacity(0)},
		"mutually exclusive":         {ok, WithTLS(TLSFiles{}), WithTLSConfig(&tls.Config{})},
		"plaintext, but TLS options": {ok, WithTLS(TLSFiles{})},
		"both CertFile and KeyFile":  {ok, WithTLS(TLSFiles{CertFile: "c.pem"})},
	}
	for want, opts := range cases {
		addr := "127.0.0.1:1"
		if want == "plaintext, but TLS options" {
			addr = "http://127.0.0.1:1"
		}
		if _, err := New(addr, opts...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: New error = %v", want, err)
		}
	}
	for _, addr := range []string{"http://127.0.0.1:1", "https://h:443", "127.0.0.1:1", "dns:///h:1"} {
		w, err := New(addr, ok)
		if err != nil {
			t.Errorf("New(%q) = %v", addr, err)
			continue
		}
		_ = w.conn.Close()
	}
	if _, err := New("http://h:1/path", ok); err == nil {
		t.Error("a path in the address was accepted")
	}
}

func TestTLSFilesLoadTheCABundle(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	if _, err := newTLSFilesSource(TLSFiles{CAFile: bad}, log); err == nil || !strings.Contains(err.Error(), "no PEM certificates") {
		t.Errorf("bad CA bundle: %v", err)
	}
	if _, err := newTLSFilesSource(TLSFiles{CAFile: filepath.Join(dir, "missing.pem")}, log); err == nil {
		t.Error("a missing CA bundle was accepted")
	}
	source, err := newTLSFilesSource(TLSFiles{ServerName: "broker.example"}, log)
	if err != nil {
		t.Fatal(err)
	}
	if c := source.config(); c.ServerName != "broker.example" || c.RootCAs != nil {
		t.Errorf("system roots config = %v", c)
	}
}
