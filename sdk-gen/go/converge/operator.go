package converge

import (
	"context"
	"iter"
	"strconv"

	"google.golang.org/protobuf/proto"

	convergev1 "converge.dev/sdk/go/gen/converge/v1"
)

// The operator's calls: why a resource waits (ExplainResource), the fleet
// summary and actions on many resources (AdminService), and the reactor
// deliveries (ReactorBindingService). Like the resource helpers they return
// *Error failures; the paging helpers follow the continuation tokens.

// ExplainResource says what currently holds a resource back from READY (or,
// while it is deleted, from being removed): the resource, the waits most
// decisive first, and when the control plane next acts on it by itself. A
// missing resource is an *Error with reason
// convergev1.ErrorReason_ERROR_REASON_RESOURCE_NOT_FOUND.
func (c *Client) ExplainResource(ctx context.Context, kind, name string) (*convergev1.ExplainResourceResponse, error) {
	resp, err := c.Resource.ExplainResource(ctx, &convergev1.ExplainResourceRequest{Kind: kind, Name: name})
	if err != nil {
		return nil, wrap(err)
	}
	return resp, nil
}

// GetFleetSummary counts the resources by kind, kind version and phase, with
// the most common failure reasons, the oldest resource of each unsettled phase
// and the tasks no connected worker serves. req may be nil: every kind, from
// the engine's snapshot.
func (c *Client) GetFleetSummary(ctx context.Context, req *convergev1.GetFleetSummaryRequest) (*convergev1.GetFleetSummaryResponse, error) {
	if req == nil {
		req = &convergev1.GetFleetSummaryRequest{}
	}
	resp, err := c.Admin.GetFleetSummary(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	return resp, nil
}

// ActOnResources runs one call of ActOnResources: the action on one resource
// (req.Name) or on at most req.PageSize of the resources the filters match.
// Its NextPageToken continues the run; ActOnAllResources follows it.
func (c *Client) ActOnResources(ctx context.Context, req *convergev1.ActOnResourcesRequest) (*convergev1.ActOnResourcesResponse, error) {
	resp, err := c.Admin.ActOnResources(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	return resp, nil
}

// ActOnAllResources runs an action on every resource the filters match,
// one call per page of req.PageSize, following next_page_token until it is
// empty, and yields each call's answer (ActedCount and Names of that page;
// MatchedCount on the first). It stops at the first error, yielded last.
// req is not modified; req.PageToken is the starting point.
//
// Each page is its own request: with req.RequestId set, the first call uses
// it and call n (from 2) uses PageRequestID(req.RequestId, n), so running the
// same loop again replays the pages already done instead of acting twice.
func (c *Client) ActOnAllResources(ctx context.Context, req *convergev1.ActOnResourcesRequest) iter.Seq2[*convergev1.ActOnResourcesResponse, error] {
	return func(yield func(*convergev1.ActOnResourcesResponse, error) bool) {
		page := proto.Clone(req).(*convergev1.ActOnResourcesRequest)
		for n := 1; ; n++ {
			page.RequestId = PageRequestID(req.GetRequestId(), n)
			resp, err := c.Admin.ActOnResources(ctx, page)
			if err != nil {
				yield(nil, wrap(err))
				return
			}
			if !yield(resp, nil) || resp.GetNextPageToken() == "" {
				return
			}
			page.PageToken = resp.GetNextPageToken()
		}
	}
}

// ListReactorDeliveries iterates over the recorded deliveries (pending and
// given up) matching req, oldest first, fetching the pages as it goes (req is
// not modified). The iteration stops at the first error, yielded last.
func (c *Client) ListReactorDeliveries(ctx context.Context, req *convergev1.ListReactorDeliveriesRequest) iter.Seq2[*convergev1.ReactorDelivery, error] {
	return func(yield func(*convergev1.ReactorDelivery, error) bool) {
		page := &convergev1.ListReactorDeliveriesRequest{}
		if req != nil {
			page = proto.Clone(req).(*convergev1.ListReactorDeliveriesRequest)
		}
		for {
			resp, err := c.ReactorBinding.ListReactorDeliveries(ctx, page)
			if err != nil {
				yield(nil, wrap(err))
				return
			}
			for _, d := range resp.GetReactorDeliveries() {
				if !yield(d, nil) {
					return
				}
			}
			if resp.GetNextPageToken() == "" {
				return
			}
			page.PageToken = resp.GetNextPageToken()
		}
	}
}

// RedriveReactorDeliveries runs one call of RedriveReactorDeliveries: makes at
// most req.Limit given-up deliveries of the target deliverable again. Its
// NextPageToken continues; RedriveAllReactorDeliveries follows it. One
// delivery that has not given up is an *Error with reason
// convergev1.ErrorReason_ERROR_REASON_DELIVERY_NOT_GIVEN_UP.
func (c *Client) RedriveReactorDeliveries(ctx context.Context, req *convergev1.RedriveReactorDeliveriesRequest) (*convergev1.RedriveReactorDeliveriesResponse, error) {
	resp, err := c.ReactorBinding.RedriveReactorDeliveries(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	return resp, nil
}

// RedriveAllReactorDeliveries redrives every given-up delivery of the target,
// one call per req.Limit deliveries, following next_page_token until it is
// empty, and yields each call's answer (Count and the First of that call). It
// stops at the first error, yielded last. req is not modified. Request ids
// are derived per page as in ActOnAllResources.
func (c *Client) RedriveAllReactorDeliveries(ctx context.Context, req *convergev1.RedriveReactorDeliveriesRequest) iter.Seq2[*convergev1.RedriveReactorDeliveriesResponse, error] {
	return func(yield func(*convergev1.RedriveReactorDeliveriesResponse, error) bool) {
		page := proto.Clone(req).(*convergev1.RedriveReactorDeliveriesRequest)
		for n := 1; ; n++ {
			page.RequestId = PageRequestID(req.GetRequestId(), n)
			resp, err := c.ReactorBinding.RedriveReactorDeliveries(ctx, page)
			if err != nil {
				yield(nil, wrap(err))
				return
			}
			if !yield(resp, nil) || resp.GetNextPageToken() == "" {
				return
			}
			page.PageToken = resp.GetNextPageToken()
		}
	}
}

// PageRequestID is the request id of call n (1-based) of a paged run whose
// first call has id: id itself for n = 1 and "" when id is "", else id + "/"
// + n. The server takes at most 128 bytes, so leave room for the suffix.
func PageRequestID(id string, n int) string {
	if id == "" || n <= 1 {
		return id
	}
	return id + "/" + strconv.Itoa(n)
}
