package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	workerv1 "converge.dev/sdk/go/gen/converge/worker/v1"
)

// fakeBroker is an in-process WorkerService that hands each accepted stream
// to the test as a fakeSession.
type fakeBroker struct {
	workerv1.UnimplementedWorkerServiceServer

	mu      sync.Mutex
	configs []*workerv1.ProviderConfigEntry
	reject  bool // refuse new streams (after reading their Subscribe)
	// withholdAcks: acknowledge no completion (a broker that cannot write
	// them). By default each completion is acknowledged as it arrives.
	withholdAcks bool

	sessions chan *fakeSession
}

// fakeSession is one accepted stream: what the worker sent (Subscribe
// first) and a way to send tasks and end the stream.
type fakeSession struct {
	subscribe *workerv1.Subscribe
	recv      chan *workerv1.WorkStreamRequest // closed when the worker half-closes or the stream ends
	send      chan *workerv1.WorkStreamResponse
	end       chan error
}

func (b *fakeBroker) GetProviderConfig(context.Context, *workerv1.GetProviderConfigRequest) (*workerv1.GetProviderConfigResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return &workerv1.GetProviderConfigResponse{Entries: b.configs}, nil
}

func (b *fakeBroker) setReject(v bool) {
	b.mu.Lock()
	b.reject = v
	b.mu.Unlock()
}

func (b *fakeBroker) setWithholdAcks(v bool) {
	b.mu.Lock()
	b.withholdAcks = v
	b.mu.Unlock()
}

func (b *fakeBroker) acking() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.withholdAcks
}

func (b *fakeBroker) WorkStream(stream grpc.BidiStreamingServer[workerv1.WorkStreamRequest, workerv1.WorkStreamResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if first.GetSubscribe() == nil {
		return status.Error(codes.FailedPrecondition, "the first message must be Subscribe")
	}
	b.mu.Lock()
	reject := b.reject
	b.mu.Unlock()
	if reject {
		return status.Error(codes.Unavailable, "broker refuses streams")
	}
	// Like converge's broker: headers go out once the Subscribe is accepted.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	s := &fakeSession{
		subscribe: first.GetSubscribe(),
		recv:      make(chan *workerv1.WorkStreamRequest, 1000),
		send:      make(chan *workerv1.WorkStreamResponse),
		end:       make(chan error, 1),
	}
	clientDone := make(chan struct{})
	// Acknowledgements, sent by the loop below (one sender per stream).
	acks := make(chan *workerv1.WorkStreamResponse, 1000)
	go func() {
		defer close(clientDone)
		defer close(s.recv)
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			// Acknowledged at once, as a broker does once written.
			if c := m.GetComplete(); c != nil && b.acking() {
				acks <- &workerv1.WorkStreamResponse{Payload: &workerv1.WorkStreamResponse_ResultAck{
					ResultAck: &workerv1.ResultAck{Leases: []*workerv1.LeaseRef{{LeaseToken: c.GetLeaseToken(), ClaimEpoch: c.GetClaimEpoch()}}},
				}}
			}
			s.recv <- m
		}
	}()
	b.sessions <- s
	for {
		select {
		case m := <-s.send:
			if err := stream.Send(m); err != nil {
				return err
			}
		case m := <-acks:
			if err := stream.Send(m); err != nil {
				return err
			}
		case err := <-s.end:
			return err
		case <-clientDone:
			return nil
		case <-stream.Context().Done():
			return nil
		}
	}
}

// rig is a fake broker, a worker connected to it, and the worker's Run.
type rig struct {
	t      *testing.T
	broker *fakeBroker
	w      *Worker
	cancel context.CancelFunc
	done   chan error
}

var testKind = KindVersion{Kind: "test", Version: 1}

// newRig starts a fake broker and a worker with fast timings plus opts; the
// worker runs until stop (or the test's end).
func newRig(t *testing.T, configs []*workerv1.ProviderConfigEntry, opts ...Option) *rig {
	t.Helper()
	return newRigWithServer(t, nil, configs, opts...)
}

// newRigWithServer is newRig with options for the fake broker's server (e.g.
// TLS credentials).
func newRigWithServer(t *testing.T, serverOpts []grpc.ServerOption, configs []*workerv1.ProviderConfigEntry, opts ...Option) *rig {
	t.Helper()
	baseline := runtime.NumGoroutine()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(serverOpts...)
	b := &fakeBroker{configs: configs, sessions: make(chan *fakeSession, 10)}
	workerv1.RegisterWorkerServiceServer(srv, b)
	go func() { _ = srv.Serve(lis) }()

	all := append([]Option{
		WithHeartbeatInterval(50 * time.Millisecond),
		WithReadinessPollInterval(20 * time.Millisecond),
		WithReconnectBackoff(10*time.Millisecond, 50*time.Millisecond),
		WithDrainTimeout(5 * time.Second),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		WithDialOptions(grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return lis.DialContext(ctx)
		})),
	}, opts...)
	w, err := New("passthrough:///fake-broker", all...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &rig{t: t, broker: b, w: w, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return")
		}
		srv.Stop()
		_ = lis.Close()
		// No goroutine of the worker (or of the fake) outlives Run.
		deadline := time.Now().Add(3 * time.Second)
		for runtime.NumGoroutine() > baseline && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > baseline {
			buf := make([]byte, 1<<16)
			t.Errorf("%d goroutines after the run, %d before:\n%s", n, baseline, buf[:runtime.Stack(buf, true)])
		}
	})
	return r
}

// stop cancels the Run context (the graceful drain) and returns Run's result.
func (r *rig) stop() error {
	r.t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(10 * time.Second):
		r.t.Fatal("Run did not return after the shutdown")
		return nil
	}
}

func (r *rig) session() *fakeSession {
	r.t.Helper()
	select {
	case s := <-r.broker.sessions:
		return s
	case <-time.After(5 * time.Second):
		r.t.Fatal("the worker opened no stream")
		return nil
	}
}

func (s *fakeSession) task(t *testing.T, task *workerv1.StageTask) {
	t.Helper()
	select {
	case s.send <- &workerv1.WorkStreamResponse{Payload: &workerv1.WorkStreamResponse_Task{Task: task}}:
	case <-time.After(5 * time.Second):
		t.Fatal("cannot send a task")
	}
}

// next returns the next message the worker sent that matches keep, skipping
// the others (heartbeats, interests, ...).
func (s *fakeSession) next(t *testing.T, keep func(*workerv1.WorkStreamRequest) bool) *workerv1.WorkStreamRequest {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case m, ok := <-s.recv:
			if !ok {
				t.Fatal("the stream ended")
			}
			if keep(m) {
				return m
			}
		case <-timeout:
			t.Fatal("no matching message within 5 s")
		}
	}
}

func (s *fakeSession) completion(t *testing.T) *workerv1.StageComplete {
	t.Helper()
	return s.next(t, func(m *workerv1.WorkStreamRequest) bool { return m.GetComplete() != nil }).GetComplete()
}

func (s *fakeSession) interest(t *testing.T) *workerv1.Interest {
	t.Helper()
	return s.next(t, func(m *workerv1.WorkStreamRequest) bool { return m.GetInterest() != nil }).GetInterest()
}

// workTask is a WORK task for testKind with a distinct fence.
func workTask(lease string, reaction string) *workerv1.StageTask {
	return &workerv1.StageTask{
		Stage:           workerv1.Stage_STAGE_WORK,
		Kind:            testKind.Kind,
		KindVersion:     testKind.Version,
		Resource:        &workerv1.Resource{Uid: "u-" + lease, Kind: testKind.Kind, KindVersion: 1, Name: "r-" + lease, Generation: 2},
		Generation:      2,
		Reaction:        reaction,
		Trigger:         workerv1.Trigger_TRIGGER_SPEC_CHANGE,
		LeaseToken:      lease,
		ClaimEpoch:      7,
		ManifestVersion: 99,
		Attempt:         1,
		Input:           &workerv1.StageTask_WorkInput{WorkInput: &workerv1.WorkInput{}},
	}
}

// gate is a handler that blocks until released (or its context ends).
type gate struct {
	started chan string
	release chan struct{}
}

func newGate() *gate {
	return &gate{started: make(chan string, 100), release: make(chan struct{})}
}

func (g *gate) Handle(ctx context.Context, req *ReactionRequest) (*Outcome, error) {
	g.started <- req.Resource.Name
	select {
	case <-g.release:
		return &Outcome{Status: map[string]any{"done": true}}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (g *gate) waitStarted(t *testing.T) string {
	t.Helper()
	select {
	case name := <-g.started:
		return name
	case <-time.After(5 * time.Second):
		t.Fatal("the handler did not start")
		return ""
	}
}

var errBoom = errors.New("boom")
