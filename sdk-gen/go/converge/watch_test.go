package converge_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"converge.dev/sdk/go/converge"
	convergev1 "converge.dev/sdk/go/gen/converge/v1"
)

// flakyWatch serves WatchResources from a fixed change log: each stream sends
// the changes after the requested position, at most perStream of them, then
// ends with failWith.
type flakyWatch struct {
	convergev1.UnimplementedResourceServiceServer
	perStream int
	failWith  error

	mu       sync.Mutex
	requests []*convergev1.WatchResourcesRequest
}

var changeLog = []string{"1", "2", "3", "4", "5"}

func (f *flakyWatch) WatchResources(req *convergev1.WatchResourcesRequest, stream grpc.ServerStreamingServer[convergev1.WatchResourcesResponse]) error {
	f.mu.Lock()
	f.requests = append(f.requests, req)
	f.mu.Unlock()
	start := 0
	for i, v := range changeLog {
		if v == req.GetResourceVersion() {
			start = i + 1
		}
	}
	for i, v := range changeLog[start:] {
		if i == f.perStream {
			break
		}
		if err := stream.Send(&convergev1.WatchResourcesResponse{
			Type:            convergev1.WatchEventType_WATCH_EVENT_TYPE_MODIFIED,
			Resource:        &convergev1.Resource{Name: "r" + v},
			ResourceVersion: v,
		}); err != nil {
			return err
		}
	}
	return f.failWith
}

func fakeResources(t *testing.T, srv convergev1.ResourceServiceServer) *converge.Client {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	s := grpc.NewServer()
	convergev1.RegisterResourceServiceServer(s, srv)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient("passthrough:///fake",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return converge.New(conn)
}

func TestWatchResumesFromTheLastPositionWithoutGapsOrRepeats(t *testing.T) {
	fake := &flakyWatch{perStream: 2, failWith: status.Error(codes.Unavailable, "server shutting down")}
	c := fakeResources(t, fake)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kind := "k"
	var got []string
	for m, err := range c.WatchResources(ctx, &convergev1.WatchResourcesRequest{Kind: &kind, ResourceVersion: "0"}) {
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		got = append(got, m.GetResourceVersion())
		if len(got) == len(changeLog) {
			break
		}
	}
	if len(got) != 5 || got[0] != "1" || got[4] != "5" {
		t.Fatalf("received %v, want every change once, in order", got)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	var positions []string
	for _, r := range fake.requests {
		positions = append(positions, r.GetResourceVersion())
		if r.GetKind() != "k" {
			t.Errorf("resumed without the filter: %v", r)
		}
	}
	if len(positions) != 3 || positions[1] != "2" || positions[2] != "4" {
		t.Errorf("watch opened at %v, want 0, 2, 4", positions)
	}
}

func TestWatchEndsOnAnErrorItCannotResumeFrom(t *testing.T) {
	fake := &flakyWatch{perStream: 1, failWith: status.Error(codes.OutOfRange, "too old")}
	c := fakeResources(t, fake)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	var last error
	for _, err := range c.WatchResources(ctx, &convergev1.WatchResourcesRequest{ResourceVersion: "0"}) {
		if err != nil {
			last = err
			break
		}
		n++
	}
	if e := converge.AsError(last); n != 1 || e == nil || e.Code != codes.OutOfRange {
		t.Errorf("after %d messages: %v, want OUT_OF_RANGE", n, last)
	}
}
