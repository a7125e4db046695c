package converge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	convergev1 "converge.dev/sdk/go/gen/converge/v1"
)

// Spec converts a document for a request: a map[string]any, a struct with
// json tags, json.RawMessage, or anything else encoding/json turns into a
// JSON object. nil gives nil.
func Spec(v any) (*structpb.Struct, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case *structpb.Struct:
		return v, nil
	case map[string]any:
		if s, err := structpb.NewStruct(v); err == nil {
			return s, nil
		}
	}
	raw, ok := v.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("converge: encode spec: %w", err)
		}
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(raw, s); err != nil {
		return nil, fmt.Errorf("converge: the spec must be a JSON object: %w", err)
	}
	return s, nil
}

// ApplyOption adjusts an ApplyResource request.
type ApplyOption func(*convergev1.ApplyResourceRequest)

// WithLabels sets the resource's labels.
func WithLabels(labels map[string]string) ApplyOption {
	return func(r *convergev1.ApplyResourceRequest) { r.Labels = labels }
}

// WithProviderConfig attaches a provider config as the resource's override;
// "" detaches it. Without this option the attachment is left as it is.
func WithProviderConfig(name string) ApplyOption {
	return func(r *convergev1.ApplyResourceRequest) { r.ProviderConfig = &name }
}

// IfMatch makes the apply conditional on the resource's current etag.
func IfMatch(etag string) ApplyOption {
	return func(r *convergev1.ApplyResourceRequest) { r.Etag = &etag }
}

// WithRequestID sets the idempotency key of the apply.
func WithRequestID(id string) ApplyOption {
	return func(r *convergev1.ApplyResourceRequest) { r.RequestId = id }
}

// ApplyResource creates or updates a resource (declarative upsert) and
// returns it. spec is any document Spec accepts.
func (c *Client) ApplyResource(ctx context.Context, kind string, kindVersion int32, name string, spec any, opts ...ApplyOption) (*convergev1.Resource, error) {
	s, err := Spec(spec)
	if err != nil {
		return nil, err
	}
	req := &convergev1.ApplyResourceRequest{Kind: kind, KindVersion: kindVersion, Name: name, Spec: s}
	for _, o := range opts {
		o(req)
	}
	resp, err := c.Resource.ApplyResource(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetResource(), nil
}

// GetResource reads one resource. A missing one is an *Error with code
// NotFound and reason convergev1.ErrorReason_ERROR_REASON_RESOURCE_NOT_FOUND.
func (c *Client) GetResource(ctx context.Context, kind, name string) (*convergev1.Resource, error) {
	resp, err := c.Resource.GetResource(ctx, &convergev1.GetResourceRequest{Kind: kind, Name: name})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetResource(), nil
}

// DeleteOption adjusts a DeleteResource request.
type DeleteOption func(*convergev1.DeleteResourceRequest)

// AllowMissing makes deleting a resource that does not exist a success.
func AllowMissing() DeleteOption {
	return func(r *convergev1.DeleteResourceRequest) { r.AllowMissing = true }
}

// DeleteIfMatch makes the delete conditional on the resource's current etag.
func DeleteIfMatch(etag string) DeleteOption {
	return func(r *convergev1.DeleteResourceRequest) { r.Etag = &etag }
}

// DeleteResource requests the deletion of a resource (its ordered teardown
// starts) and returns its state.
func (c *Client) DeleteResource(ctx context.Context, kind, name string, opts ...DeleteOption) (*convergev1.Resource, error) {
	req := &convergev1.DeleteResourceRequest{Kind: kind, Name: name}
	for _, o := range opts {
		o(req)
	}
	resp, err := c.Resource.DeleteResource(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetResource(), nil
}

// ListResources iterates over every resource matching req, fetching the pages
// as it goes (req.PageToken is the starting page; req is not modified). The
// iteration stops at the first error, which is yielded as the last element.
//
//	for r, err := range c.ListResources(ctx, &convergev1.ListResourcesRequest{Kind: &kind}) {
//		if err != nil { return err }
//		...
//	}
func (c *Client) ListResources(ctx context.Context, req *convergev1.ListResourcesRequest) iter.Seq2[*convergev1.Resource, error] {
	return func(yield func(*convergev1.Resource, error) bool) {
		page := cloneList(req)
		for {
			resp, err := c.Resource.ListResources(ctx, page)
			if err != nil {
				yield(nil, wrap(err))
				return
			}
			for _, r := range resp.GetResources() {
				if !yield(r, nil) {
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

func cloneList(req *convergev1.ListResourcesRequest) *convergev1.ListResourcesRequest {
	if req == nil {
		return &convergev1.ListResourcesRequest{}
	}
	return proto.Clone(req).(*convergev1.ListResourcesRequest)
}

// Watch resume pacing.
const (
	watchBackoffBase = 100 * time.Millisecond
	watchBackoffMax  = 5 * time.Second
)

// WatchResources iterates over the changes matching req, resuming
// transparently: when the stream ends with UNAVAILABLE (a server shutting
// down), RESOURCE_EXHAUSTED (a slow reader) or without a status, it reopens
// the watch from the resource_version of the last message received, so no
// change is missed or repeated. Any other error (e.g. OUT_OF_RANGE with
// reason ERROR_REASON_RESOURCE_VERSION_TOO_OLD: start over without a position) ends the
// iteration, yielded as the last element, as does ctx ending.
//
// req is not modified; its resource_version is the starting position.
func (c *Client) WatchResources(ctx context.Context, req *convergev1.WatchResourcesRequest) iter.Seq2[*convergev1.WatchResourcesResponse, error] {
	return func(yield func(*convergev1.WatchResourcesResponse, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel() // ends the stream when the caller stops early
		position := req.GetResourceVersion()
		first := true
		delay := watchBackoffBase
		for {
			w := &convergev1.WatchResourcesRequest{
				Kind:            req.Kind,
				KindVersion:     req.KindVersion,
				LabelSelector:   req.GetLabelSelector(),
				Owner:           req.GetOwner(),
				Root:            req.GetRoot(),
				ResourceVersion: position,
				AllowBookmarks:  req.GetAllowBookmarks(),
			}
			if first {
				w.SendInitialEvents = req.SendInitialEvents
			}
			stream, err := c.Resource.WatchResources(ctx, w)
			if err == nil {
				for {
					var m *convergev1.WatchResourcesResponse
					if m, err = stream.Recv(); err != nil {
						break
					}
					first = false
					delay = watchBackoffBase
					if m.GetResourceVersion() != "" {
						position = m.GetResourceVersion()
					}
					if !yield(m, nil) {
						return
					}
				}
			}
			if ctx.Err() != nil {
				yield(nil, ctx.Err())
				return
			}
			// Before anything arrived there is no position to resume from:
			// the caller's request decides how to start, so only resumable
			// failures of a stream with a position are retried.
			if !resumable(err) || (first && position == "") {
				yield(nil, wrap(err))
				return
			}
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				yield(nil, ctx.Err())
				return
			case <-t.C:
			}
			delay = min(delay*2, watchBackoffMax)
		}
	}
}

// resumable reports whether a watch that ended with err can be reopened from
// its last position.
func resumable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	e := AsError(err)
	if e == nil {
		return true // io.EOF: the server closed the stream without a status
	}
	return e.Code == codes.Unavailable || e.Code == codes.ResourceExhausted
}
