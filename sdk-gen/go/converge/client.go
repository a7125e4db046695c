// Package converge is a thin client over the generated converge gRPC stubs.
//
//	c, err := converge.Dial("127.0.0.1:50051")
//	if err != nil { ... }
//	defer c.Close()
//	v, err := c.Cluster.GetVersion(ctx, &convergev1.GetVersionRequest{})
//	if converge.HasReason(err, convergev1.ErrorReason_ERROR_REASON_RESOURCE_NOT_FOUND) { ... }
//
// Generated messages and stubs live in converge.dev/sdk/go/gen/converge/v1
// (package convergev1) and converge.dev/sdk/go/gen/converge/worker/v1 (package
// workerv1); google.rpc types are google.golang.org/genproto/googleapis/rpc.
package converge

import (
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	convergev1 "converge.dev/sdk/go/gen/converge/v1"
	workerv1 "converge.dev/sdk/go/gen/converge/worker/v1"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of converge's errors.
const ErrorDomain = "converge.dev"

// Client holds a typed stub for every converge service, all sharing one connection.
type Client struct {
	conn *grpc.ClientConn

	Resource       convergev1.ResourceServiceClient
	Operation      convergev1.OperationServiceClient
	Kind           convergev1.KindServiceClient
	ProviderConfig convergev1.ProviderConfigServiceClient
	ReactorBinding convergev1.ReactorBindingServiceClient
	Admin          convergev1.AdminServiceClient
	Cluster        convergev1.ClusterServiceClient
	Worker         workerv1.WorkerServiceClient
}

// Dial creates a client for target (a gRPC target such as "127.0.0.1:50051" or
// "dns:///converge.example:443"). The connection is plaintext unless opts carry
// grpc.WithTransportCredentials (later options override the default). Like
// grpc.NewClient it does not wait for the server: errors surface on the first call.
func Dial(target string, opts ...grpc.DialOption) (*Client, error) {
	all := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	conn, err := grpc.NewClient(target, all...)
	if err != nil {
		return nil, err
	}
	c := New(conn)
	c.conn = conn
	return c, nil
}

// New wraps an existing connection; Close then leaves it open (it is the caller's).
func New(cc grpc.ClientConnInterface) *Client {
	return &Client{
		Resource:       convergev1.NewResourceServiceClient(cc),
		Operation:      convergev1.NewOperationServiceClient(cc),
		Kind:           convergev1.NewKindServiceClient(cc),
		ProviderConfig: convergev1.NewProviderConfigServiceClient(cc),
		ReactorBinding: convergev1.NewReactorBindingServiceClient(cc),
		Admin:          convergev1.NewAdminServiceClient(cc),
		Cluster:        convergev1.NewClusterServiceClient(cc),
		Worker:         workerv1.NewWorkerServiceClient(cc),
	}
}

// Close closes the connection if Dial created it.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// ErrorInfo returns the google.rpc.ErrorInfo (reason, domain, metadata) carried by a
// gRPC error, or nil when err is nil, not a gRPC status error, or has none. Wrapped
// errors are unwrapped.
func ErrorInfo(err error) *errdetails.ErrorInfo {
	st, ok := grpcStatus(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

func grpcStatus(err error) (*status.Status, bool) {
	if err == nil {
		return nil, false
	}
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return nil, false
	}
	st := se.GRPCStatus()
	return st, st != nil
}
