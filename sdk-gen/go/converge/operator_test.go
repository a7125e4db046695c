package converge_test

import (
	"fmt"
	"slices"
	"testing"

	"converge.dev/sdk/go/converge"
	convergev1 "converge.dev/sdk/go/gen/converge/v1"
)

// applyRun applies n conf-leaf resources labelled go-sdk-run=run and deletes
// them at the end of the test.
func applyRun(t *testing.T, c *converge.Client, kind, run string, n int) []string {
	t.Helper()
	ctx := t.Context()
	var names []string
	for i := range n {
		name := fmt.Sprintf("go-op-%s-%d", run, i)
		if _, err := c.ApplyResource(ctx, kind, 1, name, map[string]any{"value": name}, converge.WithLabels(map[string]string{"go-sdk-run": run})); err != nil {
			t.Fatalf("apply %s: %v", name, err)
		}
		names = append(names, name)
	}
	t.Cleanup(func() {
		for _, name := range names {
			_, _ = c.DeleteResource(t.Context(), kind, name, converge.AllowMissing())
		}
	})
	return names
}

func TestExplainAndFleetSummary(t *testing.T) {
	c, ctx := client(t)
	kind := leafKind(t, c, ctx)
	names := applyRun(t, c, kind, suffix(), 1)

	explained, err := c.ExplainResource(ctx, kind, names[0])
	if err != nil {
		t.Fatalf("ExplainResource: %v", err)
	}
	if explained.GetResource().GetName() != names[0] || explained.GetReadTime() == nil {
		t.Errorf("ExplainResource answered %v", explained)
	}
	_, err = c.ExplainResource(ctx, kind, "go-op-missing-"+suffix())
	if !converge.HasReason(err, convergev1.ErrorReason_ERROR_REASON_RESOURCE_NOT_FOUND) {
		t.Errorf("ExplainResource of a missing resource: %v", err)
	}

	summary, err := c.GetFleetSummary(ctx, &convergev1.GetFleetSummaryRequest{Kind: &kind, Fresh: true})
	if err != nil {
		t.Fatalf("GetFleetSummary: %v", err)
	}
	var counted int64
	for _, pc := range summary.GetPhaseCounts() {
		if pc.GetKind() != kind {
			t.Errorf("a count of another kind: %v", pc)
		}
		counted += pc.GetCount()
	}
	if counted < 1 {
		t.Errorf("GetFleetSummary(%s) counts %d resources: %v", kind, counted, summary)
	}
	if _, err := c.GetFleetSummary(ctx, nil); err != nil {
		t.Errorf("GetFleetSummary(nil): %v", err)
	}
}

// An action on a label selector, one resource per page: the helper follows
// the continuation token over every page, and running it again with the same
// request id replays the pages instead of acting twice.
func TestActOnAllResourcesPagesThroughTheRun(t *testing.T) {
	c, ctx := client(t)
	kind := leafKind(t, c, ctx)
	run := suffix()
	names := applyRun(t, c, kind, run, 3)

	act := func(action convergev1.ResourceAction, requestID string) (pages int, acted int64, actedNames []string, matched int64) {
		req := &convergev1.ActOnResourcesRequest{
			Action: action, Kind: kind, LabelSelector: "go-sdk-run=" + run,
			Reason: "go sdk test", PageSize: 1, RequestId: requestID,
		}
		for resp, err := range c.ActOnAllResources(ctx, req) {
			if err != nil {
				t.Fatalf("ActOnAllResources(%v) page %d: %v", action, pages+1, err)
			}
			if pages == 0 {
				matched = resp.GetMatchedCount()
			}
			pages++
			acted += resp.GetActedCount()
			actedNames = append(actedNames, resp.GetNames()...)
		}
		if req.GetPageToken() != "" || req.GetRequestId() != requestID {
			t.Errorf("the request was modified: %v", req)
		}
		slices.Sort(actedNames)
		return pages, acted, actedNames, matched
	}

	requestID := "go-sdk-" + run
	pages, acted, actedNames, matched := act(convergev1.ResourceAction_RESOURCE_ACTION_QUARANTINE, requestID)
	if pages < 3 || acted != 3 || matched != 3 || !slices.Equal(actedNames, names) {
		t.Errorf("quarantine: %d pages, %d acted (%v), %d matched; want 3 pages or more, all of %v", pages, acted, actedNames, matched, names)
	}
	again, actedAgain, namesAgain, _ := act(convergev1.ResourceAction_RESOURCE_ACTION_QUARANTINE, requestID)
	if again != pages || actedAgain != acted || !slices.Equal(namesAgain, actedNames) {
		t.Errorf("a second run with the same request id: %d pages, %d acted (%v); want the first run's answers replayed", again, actedAgain, namesAgain)
	}
	for _, name := range names {
		r, err := c.GetResource(ctx, kind, name)
		if err != nil || !r.GetQuarantined() {
			t.Errorf("%s is not quarantined: %v %v", name, r, err)
		}
	}
	_, released, _, _ := act(convergev1.ResourceAction_RESOURCE_ACTION_UNQUARANTINE, "")
	if released != 3 {
		t.Errorf("unquarantine acted on %d, want 3", released)
	}

	_, err := c.ActOnResources(ctx, &convergev1.ActOnResourcesRequest{
		Action: convergev1.ResourceAction_RESOURCE_ACTION_FORCE_FINALIZE, Kind: kind, Name: names[0], Reason: "go sdk test",
	})
	if !converge.HasReason(err, convergev1.ErrorReason_ERROR_REASON_ACTION_NOT_APPLICABLE) {
		t.Errorf("FORCE_FINALIZE of a live resource: %v", err)
	}
}

// A reactor binding on the run's resources records a delivery per created
// resource: the list helper reads them, a redrive of one that has not given
// up is refused with its reason, and a redrive of the binding pages to an end.
func TestReactorDeliveries(t *testing.T) {
	c, ctx := client(t)
	kind := leafKind(t, c, ctx)
	run := suffix()
	sink := "go-sdk-sink"
	if _, err := c.Kind.ApplyKindManifest(ctx, &convergev1.ApplyKindManifestRequest{Manifest: &convergev1.KindManifest{
		Kind: sink, KindVersion: 1,
		Reactions: []*convergev1.Reaction{{Name: "react", Trigger: convergev1.Trigger_TRIGGER_REACTOR, Emits: []convergev1.Emit{convergev1.Emit_EMIT_SIDE_EFFECT}}},
	}}); err != nil {
		t.Fatalf("apply the reactor kind: %v", err)
	}
	binding := "go-sdk-" + run
	if _, err := c.ReactorBinding.ApplyReactorBinding(ctx, &convergev1.ApplyReactorBindingRequest{ReactorBinding: &convergev1.ReactorBinding{
		Name: binding, WatchKind: kind, Transition: convergev1.Transition_TRANSITION_CREATED,
		LabelMatch: map[string]string{"go-sdk-run": run}, Reactor: sink,
	}}); err != nil {
		t.Fatalf("apply the binding: %v", err)
	}
	t.Cleanup(func() {
		_, _ = c.ReactorBinding.DeleteReactorBinding(t.Context(), &convergev1.DeleteReactorBindingRequest{Name: binding})
	})
	names := applyRun(t, c, kind, run, 3)

	var listed []string
	var first *convergev1.ReactorDelivery
	for d, err := range c.ListReactorDeliveries(ctx, &convergev1.ListReactorDeliveriesRequest{Binding: &binding, PageSize: 2}) {
		if err != nil {
			t.Fatalf("ListReactorDeliveries: %v", err)
		}
		if first == nil {
			first = d
		}
		listed = append(listed, d.GetResource().GetName())
	}
	slices.Sort(listed)
	if !slices.Equal(listed, names) {
		t.Fatalf("deliveries of %s: %v, want one per resource %v", binding, listed, names)
	}

	_, err := c.RedriveReactorDeliveries(ctx, &convergev1.RedriveReactorDeliveriesRequest{
		Target: &convergev1.RedriveReactorDeliveriesRequest_DeliveryId{DeliveryId: first.GetId()}, Reason: "go sdk test",
	})
	if !converge.HasReason(err, convergev1.ErrorReason_ERROR_REASON_DELIVERY_NOT_GIVEN_UP) {
		t.Errorf("redrive of a pending delivery: %v", err)
	}

	pages := 0
	for resp, err := range c.RedriveAllReactorDeliveries(ctx, &convergev1.RedriveReactorDeliveriesRequest{
		Target: &convergev1.RedriveReactorDeliveriesRequest_Binding{Binding: binding}, Reason: "go sdk test", Limit: 1,
	}) {
		if err != nil {
			t.Fatalf("RedriveAllReactorDeliveries: %v", err)
		}
		pages++
		if resp.GetCount() != 0 {
			t.Errorf("nothing of %s gave up, yet %d were redriven", binding, resp.GetCount())
		}
	}
	if pages != 1 {
		t.Errorf("%d pages, want 1", pages)
	}
}

// Offline.
func TestPageRequestID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		n    int
		want string
	}{{"", 3, ""}, {"r", 1, "r"}, {"r", 2, "r/2"}, {"r", 10, "r/10"}} {
		if got := converge.PageRequestID(tc.id, tc.n); got != tc.want {
			t.Errorf("PageRequestID(%q, %d) = %q, want %q", tc.id, tc.n, got, tc.want)
		}
	}
}
