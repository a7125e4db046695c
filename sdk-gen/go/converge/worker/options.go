package worker

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"
)

// Defaults of the settings.
const (
	DefaultMaxParallel           = 16
	DefaultHeartbeatInterval     = 5 * time.Second
	DefaultReadinessPollInterval = 2 * time.Second
	DefaultDrainTimeout          = 30 * time.Second
	DefaultConfigRefreshInterval = 60 * time.Second
	DefaultBackoffBase           = 100 * time.Millisecond
	DefaultBackoffMax            = 30 * time.Second
	DefaultResultBufferCapacity  = 1024
	DefaultHealthySession        = 10 * time.Second
	DefaultRPCTimeout            = 10 * time.Second
)

// Version is the SDK version reported in the default agent string.
const Version = "0.1.0"

// MaxMessageBytes is the largest message the worker sends or accepts, matching
// the server's limit.
const MaxMessageBytes = 16 << 20

// settings are the tunables of a worker, validated by New.
type settings struct {
	providers             []Provider
	maxParallel           int
	heartbeatInterval     time.Duration
	readinessPollInterval time.Duration
	drainTimeout          time.Duration
	configRefreshInterval time.Duration
	backoffBase           time.Duration
	backoffMax            time.Duration
	resultBufferCapacity  int
	healthySession        time.Duration
	rpcTimeout            time.Duration
	agent                 string
	logger                *slog.Logger
	tlsFiles              *TLSFiles
	tlsConfig             *tls.Config
	dialOptions           []grpc.DialOption
	conn                  grpc.ClientConnInterface
}

func defaultSettings() settings {
	return settings{
		maxParallel:           DefaultMaxParallel,
		heartbeatInterval:     DefaultHeartbeatInterval,
		readinessPollInterval: DefaultReadinessPollInterval,
		drainTimeout:          DefaultDrainTimeout,
		configRefreshInterval: DefaultConfigRefreshInterval,
		backoffBase:           DefaultBackoffBase,
		backoffMax:            DefaultBackoffMax,
		resultBufferCapacity:  DefaultResultBufferCapacity,
		healthySession:        DefaultHealthySession,
		rpcTimeout:            DefaultRPCTimeout,
		agent:                 "converge-sdk-go/" + Version,
	}
}

func (s *settings) validate() error {
	positive := []struct {
		name string
		d    time.Duration
	}{
		{"heartbeat interval", s.heartbeatInterval},
		{"readiness poll interval", s.readinessPollInterval},
		{"config refresh interval", s.configRefreshInterval},
		{"reconnect backoff base", s.backoffBase},
		{"RPC timeout", s.rpcTimeout},
	}
	for _, p := range positive {
		if p.d <= 0 {
			return fmt.Errorf("worker: %s must be greater than zero, got %v", p.name, p.d)
		}
	}
	if s.drainTimeout < 0 || s.healthySession < 0 || s.backoffMax < 0 {
		return fmt.Errorf("worker: durations must not be negative")
	}
	if s.maxParallel < 1 || s.maxParallel > 1<<31-1 {
		return fmt.Errorf("worker: max parallel must be between 1 and 2^31-1, got %d", s.maxParallel)
	}
	if s.resultBufferCapacity < 1 {
		return fmt.Errorf("worker: result buffer capacity must be at least 1, got %d", s.resultBufferCapacity)
	}
	if s.tlsFiles != nil && s.tlsConfig != nil {
		return fmt.Errorf("worker: WithTLS and WithTLSConfig are mutually exclusive")
	}
	return nil
}

// Option configures a Worker.
type Option func(*settings)

// WithProvider adds a provider. A worker needs at least one, and at most one
// per (kind, kind_version).
func WithProvider(p Provider) Option {
	return func(s *settings) { s.providers = append(s.providers, p) }
}

// WithHandler adds a provider for kind with default readiness and no config
// callback: shorthand for WithProvider(Provider{Kind: kind, Handler: h}).
func WithHandler(kind KindVersion, h Handler) Option {
	return WithProvider(Provider{Kind: kind, Handler: h})
}

// WithMaxParallel sets how many handlers run at once, also sent to the broker
// as max_inflight (default 16).
func WithMaxParallel(n int) Option { return func(s *settings) { s.maxParallel = n } }

// WithHeartbeatInterval sets the interval between heartbeats (default 5 s).
// It must be well below the broker's lease timeout.
func WithHeartbeatInterval(d time.Duration) Option {
	return func(s *settings) { s.heartbeatInterval = d }
}

// WithReadinessPollInterval sets the interval between Provider.Ready polls
// (default 2 s).
func WithReadinessPollInterval(d time.Duration) Option {
	return func(s *settings) { s.readinessPollInterval = d }
}

// WithDrainTimeout sets how long a shutdown waits for in-flight handlers and
// their results (default 30 s).
func WithDrainTimeout(d time.Duration) Option { return func(s *settings) { s.drainTimeout = d } }

// WithConfigRefreshInterval sets the interval between failsafe provider config
// refreshes (default 60 s).
func WithConfigRefreshInterval(d time.Duration) Option {
	return func(s *settings) { s.configRefreshInterval = d }
}

// WithReconnectBackoff sets the first reconnect delay and its ceiling
// (default 100 ms and 30 s).
func WithReconnectBackoff(base, maxDelay time.Duration) Option {
	return func(s *settings) { s.backoffBase, s.backoffMax = base, maxDelay }
}

// WithResultBufferCapacity sets how many results are kept for redelivery while
// disconnected, and how many sent results are kept until the broker
// acknowledges them (default 1024 each); on overflow the oldest is discarded.
func WithResultBufferCapacity(n int) Option {
	return func(s *settings) { s.resultBufferCapacity = n }
}

// WithHealthySessionAfter sets how long a session must last to count as
// healthy and reset the reconnect backoff (default 10 s; receiving a task also
// counts).
func WithHealthySessionAfter(d time.Duration) Option {
	return func(s *settings) { s.healthySession = d }
}

// WithRPCTimeout bounds each unary call and the opening of the stream
// (default 10 s).
func WithRPCTimeout(d time.Duration) Option { return func(s *settings) { s.rpcTimeout = d } }

// WithAgent sets the agent string sent in Subscribe (display only).
func WithAgent(agent string) Option { return func(s *settings) { s.agent = agent } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *settings) { s.logger = l } }

// TLSFiles names PEM files for a TLS connection to the broker.
//
// converge serves TLS when started with TLS_CERT_FILE and TLS_KEY_FILE, and
// mutual TLS with TLS_CLIENT_CA_FILE as well: a worker must then present a
// client certificate that chains to that CA (one without is refused at the
// handshake), and the certificate's SPIFFE ID (URI SAN) is the worker's
// identity, recorded as the actor "worker:<SPIFFE ID>" of its events and
// checked against ALLOWED_WORKER_IDENTITIES when set. The conformance
// suite's mtls scenario (conformance/README.md) runs this worker against
// such a server.
//
// New reads the files (an unusable one is an error), and they are read again
// at every connection the worker makes to the broker (the first one and each
// reconnect): after a rotation (a secret mount swapping the files, a
// certificate renewed in place) the next connection presents the new
// certificate and verifies the broker against the new CA bundle, while
// established connections keep what they were made with. Files that changed
// but do not make a usable set, as mid-rotation (a new key beside the old
// certificate, a half-written or briefly absent file), keep the last good
// material until they do, with a warning. This is the Rust SDK's behaviour;
// it polls its files instead of reading them at each connection.
type TLSFiles struct {
	// CAFile is the CA bundle that verifies the server; empty = the system
	// roots.
	CAFile string
	// CertFile and KeyFile are the client certificate and key for mutual TLS;
	// both or neither.
	CertFile, KeyFile string
	// ServerName overrides the name verified in the server certificate.
	ServerName string
}

// WithTLS connects to the broker over TLS (mutual TLS with a client
// certificate) with the given files. An "https://" address also selects TLS
// (with the system roots unless this option says otherwise). See TLSFiles
// for what the converge server does with the certificate.
func WithTLS(files TLSFiles) Option { return func(s *settings) { s.tlsFiles = &files } }

// WithTLSConfig connects to the broker over TLS with a ready-made config.
func WithTLSConfig(c *tls.Config) Option { return func(s *settings) { s.tlsConfig = c } }

// WithDialOptions adds gRPC dial options (applied after the worker's own, so
// they win).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(s *settings) { s.dialOptions = append(s.dialOptions, opts...) }
}

// WithConn uses an existing connection instead of dialing; the address given
// to New is then ignored and Run leaves the connection open.
func WithConn(cc grpc.ClientConnInterface) Option { return func(s *settings) { s.conn = cc } }
