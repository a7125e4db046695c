package converge_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"converge.dev/sdk/go/converge"
	convergev1 "converge.dev/sdk/go/gen/converge/v1"
)

// leafKind applies the conformance leaf kind (no worker needed: the tests
// only read and write resources) and returns its name.
func leafKind(t *testing.T, c *converge.Client, ctx context.Context) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "conformance", "kinds", "leaf.json"))
	if err != nil {
		t.Fatalf("read the conf-leaf kind: %v", err)
	}
	req := &convergev1.ApplyKindManifestRequest{}
	if err := protojson.Unmarshal(raw, req); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kind.ApplyKindManifest(ctx, req); err != nil {
		t.Fatalf("apply conf-leaf: %v", err)
	}
	return req.GetManifest().GetKind()
}

func suffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func TestApplyGetListDelete(t *testing.T) {
	c, ctx := client(t)
	kind := leafKind(t, c, ctx)
	run := suffix()
	labels := map[string]string{"go-sdk-run": run}
	type spec struct {
		Value string `json:"value"`
	}
	var names []string
	for i := range 3 {
		name := fmt.Sprintf("go-client-%s-%d", run, i)
		names = append(names, name)
		r, err := c.ApplyResource(ctx, kind, 1, name, spec{Value: name}, converge.WithLabels(labels))
		if err != nil {
			t.Fatalf("ApplyResource: %v", err)
		}
		if r.GetName() != name || r.GetSpec().AsMap()["value"] != name {
			t.Fatalf("applied %v", r)
		}
	}
	got, err := c.GetResource(ctx, kind, names[1])
	if err != nil || got.GetLabels()["go-sdk-run"] != run {
		t.Fatalf("GetResource = %v, %v", got, err)
	}

	// Page size 1: the iterator follows the page tokens.
	var listed []string
	for r, err := range c.ListResources(ctx, &convergev1.ListResourcesRequest{Kind: &kind, LabelSelector: "go-sdk-run=" + run, PageSize: 1}) {
		if err != nil {
			t.Fatalf("ListResources: %v", err)
		}
		listed = append(listed, r.GetName())
	}
	if len(listed) != 3 {
		t.Errorf("listed %v, want the 3 applied", listed)
	}
	// Stopping early is fine.
	for range c.ListResources(ctx, &convergev1.ListResourcesRequest{Kind: &kind, LabelSelector: "go-sdk-run=" + run, PageSize: 1}) {
		break
	}

	if _, err := c.DeleteResource(ctx, kind, "go-client-missing-"+run, converge.AllowMissing()); err != nil {
		t.Errorf("DeleteResource(AllowMissing) of a missing resource: %v", err)
	}
	for _, name := range names {
		if _, err := c.DeleteResource(ctx, kind, name); err != nil {
			t.Errorf("DeleteResource(%s): %v", name, err)
		}
	}
}

func TestTypedErrors(t *testing.T) {
	c, ctx := client(t)
	kind := leafKind(t, c, ctx)
	_, err := c.GetResource(ctx, kind, "go-client-absent-"+suffix())
	var e *converge.Error
	notFound := convergev1.ErrorReason_ERROR_REASON_RESOURCE_NOT_FOUND
	if !errors.As(err, &e) || e.Code != codes.NotFound || e.ErrorReason() != notFound || e.Domain != converge.ErrorDomain {
		t.Fatalf("GetResource of a missing resource: %#v", err)
	}
	wrapped := fmt.Errorf("wrapped: %w", err)
	if status.Code(err) != codes.NotFound || !converge.HasReason(wrapped, notFound) {
		t.Errorf("status.Code / HasReason do not see through: %v", err)
	}
	if !errors.Is(wrapped, converge.ReasonError(notFound)) ||
		errors.Is(wrapped, converge.ReasonError(convergev1.ErrorReason_ERROR_REASON_KIND_NOT_FOUND)) {
		t.Errorf("errors.Is with ReasonError does not match the reason: %v", err)
	}

	_, err = c.ApplyResource(ctx, kind, 1, "go-client-bad-"+suffix(), map[string]any{"sleepMs": "soon"})
	e = converge.AsError(err)
	if e == nil || e.Code != codes.InvalidArgument || len(e.FieldViolations) == 0 {
		t.Fatalf("invalid spec: %#v", err)
	}
	if v := e.FieldViolations[0]; v.Field == "" || v.Description == "" {
		t.Errorf("field violation %+v", v)
	}
	if _, err := c.ApplyResource(ctx, kind, 1, "x", []int{1}); err == nil || converge.AsError(err) != nil {
		t.Errorf("a non-object spec should fail locally, got %v", err)
	}
}

// Offline: decoding needs no server.
func TestAsErrorDecodesDetails(t *testing.T) {
	inUse := convergev1.ErrorReason_ERROR_REASON_KIND_IN_USE
	st, err := status.New(codes.FailedPrecondition, "in use").WithDetails(
		&errdetails.ErrorInfo{Reason: converge.ReasonName(inUse), Domain: converge.ErrorDomain, Metadata: map[string]string{"kind": "k"}},
		&errdetails.PreconditionFailure{Violations: []*errdetails.PreconditionFailure_Violation{{Type: converge.ReasonName(inUse), Subject: "k/r1", Description: "still exists"}}},
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "/kind", Description: "bad"}}},
	)
	if err != nil {
		t.Fatal(err)
	}
	e := converge.AsError(fmt.Errorf("delete: %w", st.Err()))
	if e.Code != codes.FailedPrecondition || e.ErrorReason() != inUse || e.Reason != converge.ReasonName(inUse) || e.Metadata["kind"] != "k" ||
		len(e.PreconditionViolations) != 1 || e.PreconditionViolations[0].Subject != "k/r1" ||
		len(e.FieldViolations) != 1 || e.FieldViolations[0].Field != "/kind" {
		t.Errorf("decoded %+v", e)
	}
	if converge.AsError(errors.New("plain")) != nil || converge.AsError(nil) != nil {
		t.Error("errors without a status decode to nil")
	}
}

func TestWatchSeesChangesAfterTheSnapshot(t *testing.T) {
	c, ctx := client(t)
	kind := leafKind(t, c, ctx)
	run := suffix()
	name := "go-watch-" + run
	labels := converge.WithLabels(map[string]string{"go-sdk-run": run})
	if _, err := c.ApplyResource(ctx, kind, 1, name, map[string]any{"value": 1}, labels); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	var snapshot, modified bool
	for m, err := range c.WatchResources(wctx, &convergev1.WatchResourcesRequest{Kind: &kind, LabelSelector: "go-sdk-run=" + run}) {
		if err != nil {
			t.Fatalf("watch: %v (snapshot %v, modified %v)", err, snapshot, modified)
		}
		switch {
		case m.GetInitialEventsEnd():
			snapshot = true
			if _, err := c.ApplyResource(ctx, kind, 1, name, map[string]any{"value": 2}, labels); err != nil {
				t.Fatal(err)
			}
		case snapshot && m.GetType() == convergev1.WatchEventType_WATCH_EVENT_TYPE_MODIFIED && m.GetResource().GetSpec().AsMap()["value"] == 2.0:
			modified = true
		}
		if modified {
			break
		}
	}
	if !modified {
		t.Error("the watch did not deliver the change")
	}
	_, _ = c.DeleteResource(ctx, kind, name)
}
