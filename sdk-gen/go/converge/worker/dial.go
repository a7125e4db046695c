package worker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// parseAddress splits an address into a gRPC target and whether it asks for
// TLS: "http://h:p" is plaintext, "https://h:p" TLS, anything else (h:p or a
// gRPC target such as dns:///h:p) is passed through as given.
func parseAddress(address string) (target string, scheme string, err error) {
	for _, s := range []string{"http", "https"} {
		if rest, ok := strings.CutPrefix(address, s+"://"); ok {
			rest = strings.TrimSuffix(rest, "/")
			if rest == "" || strings.Contains(rest, "/") {
				return "", "", fmt.Errorf("worker: invalid broker address %q: want %s://host:port", address, s)
			}
			return rest, s, nil
		}
	}
	if address == "" {
		return "", "", errors.New("worker: no broker address")
	}
	return address, "", nil
}

// transportCredentials picks plaintext or TLS from the address scheme and the
// TLS options.
func transportCredentials(scheme string, s *settings) (credentials.TransportCredentials, error) {
	wantTLS := s.tlsFiles != nil || s.tlsConfig != nil
	switch {
	case scheme == "http" && wantTLS:
		return nil, errors.New("worker: an http:// broker address is plaintext, but TLS options were given (use https:// or host:port)")
	case s.tlsConfig != nil:
		return credentials.NewTLS(s.tlsConfig.Clone()), nil
	case s.tlsFiles != nil:
		source, err := newTLSFilesSource(*s.tlsFiles, s.logger)
		if err != nil {
			return nil, err
		}
		return &reloadingTLS{source: source, serverName: s.tlsFiles.ServerName}, nil
	case scheme == "https":
		return credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12}), nil
	default:
		return insecure.NewCredentials(), nil
	}
}

// dial creates the connection (lazily: grpc.NewClient does not connect).
func dial(address string, s *settings) (*grpc.ClientConn, error) {
	target, scheme, err := parseAddress(address)
	if err != nil {
		return nil, err
	}
	creds, err := transportCredentials(scheme, s)
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(MaxMessageBytes),
			grpc.MaxCallSendMsgSize(MaxMessageBytes),
		),
		// The broker sends no keepalive of its own; HTTP/2 pings are how a
		// silently dead broker is noticed.
		// The worker's own reconnect loop paces new streams; the channel's
		// reconnects follow the same backoff instead of gRPC's default (up
		// to 120 s), so a restarted broker is found as soon as the loop
		// tries again.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: grpcbackoff.Config{
				BaseDelay:  s.backoffBase,
				Multiplier: 2,
				Jitter:     0.2,
				MaxDelay:   max(s.backoffMax, s.backoffBase),
			},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                10 * time.Second,
			Timeout:             10 * time.Second,
			PermitWithoutStream: true,
		}),
	}
	opts = append(opts, s.dialOptions...)
	return grpc.NewClient(target, opts...)
}
