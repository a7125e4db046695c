package converge_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"converge.dev/sdk/go/converge"
	convergev1 "converge.dev/sdk/go/gen/converge/v1"
)

// client dials the server in CONVERGE_ADDR (sdk-gen/test starts one); without it the
// test is skipped.
func client(t *testing.T) (*converge.Client, context.Context) {
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c, ctx
}

func TestGetVersion(t *testing.T) {
	c, ctx := client(t)
	v, err := c.Cluster.GetVersion(ctx, &convergev1.GetVersionRequest{})
	if err != nil {
		t.Fatalf("GetVersion: %v", err)
	}
	if v.GetVersion() == "" {
		t.Errorf("empty version in %v", v)
	}
	if !slices.Contains(v.GetApiVersions(), "converge.v1") {
		t.Errorf("api_versions %q lacks converge.v1", v.GetApiVersions())
	}
}

func TestListClusterMembers(t *testing.T) {
	c, ctx := client(t)
	resp, err := c.Cluster.ListClusterMembers(ctx, &convergev1.ListClusterMembersRequest{})
	if err != nil {
		t.Fatalf("ListClusterMembers: %v", err)
	}
	if n := len(resp.GetMembers()); n != 1 {
		t.Fatalf("got %d members, want 1: %v", n, resp)
	}
	if m := resp.GetMembers()[0]; !m.GetReady() || m.GetMemberId() == "" {
		t.Errorf("member not ready or unnamed: %v", m)
	}
}

// An operation uid that is not a UUID: InvalidArgument with reason ERROR_REASON_INVALID_FIELD.
func TestMalformedOperationUIDCarriesErrorInfo(t *testing.T) {
	c, ctx := client(t)
	_, err := c.Operation.GetOperation(ctx, &convergev1.GetOperationRequest{Uid: "y"})
	if code := status.Code(err); code != codes.InvalidArgument {
		t.Fatalf("GetOperation: got %v (%v), want InvalidArgument", code, err)
	}
	// Also through a wrapping error.
	info := converge.ErrorInfo(fmt.Errorf("get operation: %w", err))
	if info == nil {
		t.Fatalf("no google.rpc.ErrorInfo in %v", err)
	}
	want := convergev1.ErrorReason_ERROR_REASON_INVALID_FIELD
	if converge.ParseReason(info.GetReason()) != want || info.GetDomain() != converge.ErrorDomain {
		t.Errorf("ErrorInfo = %v, want reason %v domain %s", info, want, converge.ErrorDomain)
	}
	if !converge.HasReason(fmt.Errorf("get operation: %w", err), want) {
		t.Errorf("HasReason(%v) is false for %v", want, err)
	}
}

// A resource that does not exist: NotFound with reason ERROR_REASON_RESOURCE_NOT_FOUND.
func TestGetMissingResourceCarriesErrorInfo(t *testing.T) {
	c, ctx := client(t)
	_, err := c.Resource.GetResource(ctx, &convergev1.GetResourceRequest{Kind: "x", Name: "y"})
	code := status.Code(err)
	if code != codes.NotFound {
		t.Fatalf("GetResource: got %v (%v), want NotFound", code, err)
	}
	info := converge.ErrorInfo(err)
	if info == nil {
		t.Fatalf("no google.rpc.ErrorInfo in %v", err)
	}
	if info.GetDomain() != converge.ErrorDomain {
		t.Errorf("ErrorInfo domain = %q, want %q", info.GetDomain(), converge.ErrorDomain)
	}
	if want := convergev1.ErrorReason_ERROR_REASON_RESOURCE_NOT_FOUND; converge.ParseReason(info.GetReason()) != want {
		t.Errorf("ErrorInfo reason %q, want %v", info.GetReason(), want)
	}
}

// A batch apply names its refused item: the kind of item 1 has no manifest.
func TestBatchApplyNamesTheRefusedItem(t *testing.T) {
	c, ctx := client(t)
	_, err := c.Resource.BatchApplyResources(ctx, &convergev1.BatchApplyResourcesRequest{
		Requests: []*convergev1.ApplyResourceRequest{
			{Kind: "go-sdk-missing", KindVersion: 1, Name: "a"},
			{Kind: "go-sdk-missing", KindVersion: 1, Name: "Not_A_Name"},
		},
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("BatchApplyResources: got %v (%v), want InvalidArgument", status.Code(err), err)
	}
	if !converge.HasReason(err, convergev1.ErrorReason_ERROR_REASON_INVALID_NAME) {
		t.Fatalf("ErrorInfo = %v, want reason ERROR_REASON_INVALID_NAME", converge.ErrorInfo(err))
	}
	if !strings.Contains(status.Convert(err).Message(), "/requests/1/name") {
		t.Errorf("message %q does not name /requests/1/name", status.Convert(err).Message())
	}
}

func TestErrorInfoAbsent(t *testing.T) {
	if converge.ErrorInfo(nil) != nil || converge.ErrorInfo(errors.New("plain")) != nil {
		t.Error("ErrorInfo of a non-gRPC error must be nil")
	}
	if converge.ErrorInfo(status.Error(codes.NotFound, "no details")) != nil {
		t.Error("ErrorInfo of a status without details must be nil")
	}
}

func TestAllServices(t *testing.T) {
	c := converge.New(nil)
	if c.Resource == nil || c.Operation == nil || c.Kind == nil || c.ProviderConfig == nil ||
		c.ReactorBinding == nil || c.Cluster == nil || c.Worker == nil {
		t.Errorf("a service client is missing: %+v", c)
	}
}
