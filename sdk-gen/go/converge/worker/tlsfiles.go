package worker

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"

	"google.golang.org/grpc/credentials"
)

// tlsFilesSource holds the TLS material of a TLSFiles and re-reads the files
// whenever it is asked for, which is at every handshake: a connection made
// after a rotation presents the new certificate and trusts the new CA bundle.
// Changed files that do not build a usable configuration (one written but not
// the other yet, a half-written file, a file briefly absent while a secret
// mount swaps it) keep the last good material until they do, as in the Rust
// SDK; each such state is logged once, not at every handshake.
type tlsFilesSource struct {
	files TLSFiles
	log   *slog.Logger

	mu sync.Mutex
	// current is the configuration built from applied.
	current *tls.Config
	applied [][]byte
	// seen is the content last read; nil after a failed read. A refused
	// content is reported when it first appears, not again.
	seen [][]byte
}

// newTLSFilesSource reads and checks the files now: at construction a file
// that cannot be used is an error, since there is no earlier material to
// fall back on.
func newTLSFilesSource(files TLSFiles, log *slog.Logger) (*tlsFilesSource, error) {
	if (files.CertFile == "") != (files.KeyFile == "") {
		return nil, errors.New("worker: a client certificate needs both CertFile and KeyFile")
	}
	contents, err := readTLSFiles(files)
	if err != nil {
		return nil, err
	}
	c, err := buildTLSConfig(files, contents)
	if err != nil {
		return nil, err
	}
	return &tlsFilesSource{files: files, log: log, current: c, applied: contents, seen: contents}, nil
}

// config re-reads the files and returns the configuration a new connection
// should use.
func (s *tlsFilesSource) config() *tls.Config {
	contents, readErr := readTLSFiles(s.files)
	s.mu.Lock()
	defer s.mu.Unlock()
	if readErr != nil {
		if s.seen != nil {
			s.log.Warn("TLS files unreadable; keeping the current material", "error", readErr)
			s.seen = nil
		}
		return s.current
	}
	if sameContents(contents, s.applied) || sameContents(contents, s.seen) {
		return s.current
	}
	s.seen = contents
	c, err := buildTLSConfig(s.files, contents)
	if err != nil {
		s.log.Warn("changed TLS files refused; keeping the current material", "error", err)
		return s.current
	}
	s.current, s.applied = c, contents
	s.log.Info("TLS material reloaded")
	return c
}

// readTLSFiles reads the files that are set, in the order CA, certificate,
// key (an unset one reads as nil).
func readTLSFiles(f TLSFiles) ([][]byte, error) {
	contents := make([][]byte, 3)
	for i, path := range []string{f.CAFile, f.CertFile, f.KeyFile} {
		if path == "" {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("worker: read TLS file: %w", err)
		}
		contents[i] = b
	}
	return contents, nil
}

func sameContents(a, b [][]byte) bool {
	if a == nil || b == nil || len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// buildTLSConfig builds the client configuration from the files' contents
// (as readTLSFiles returns them).
func buildTLSConfig(f TLSFiles, contents [][]byte) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CAFile != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(contents[0]) {
			return nil, fmt.Errorf("worker: no PEM certificates in %s", f.CAFile)
		}
		c.RootCAs = pool
	}
	if f.CertFile != "" {
		pair, err := tls.X509KeyPair(contents[1], contents[2])
		if err != nil {
			return nil, fmt.Errorf("worker: load client certificate %s with key %s: %w", f.CertFile, f.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// reloadingTLS is gRPC transport credentials whose TLS configuration comes
// from a tlsFilesSource at each handshake. gRPC calls ClientHandshake for
// every new connection (the first one and each reconnect), so that is where
// the files are re-read; an established connection keeps the material it was
// made with.
type reloadingTLS struct {
	source *tlsFilesSource
	// serverName overrides the name verified (and the channel's authority),
	// as credentials.NewTLS does with tls.Config.ServerName.
	serverName string
}

func (r *reloadingTLS) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return credentials.NewTLS(r.source.config()).ClientHandshake(ctx, authority, conn)
}

func (r *reloadingTLS) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("worker: the worker's TLS credentials are for clients only")
}

func (r *reloadingTLS) Info() credentials.ProtocolInfo {
	return credentials.NewTLS(&tls.Config{ServerName: r.serverName}).Info()
}

func (r *reloadingTLS) Clone() credentials.TransportCredentials {
	return &reloadingTLS{source: r.source, serverName: r.serverName}
}

// OverrideServerName is part of credentials.TransportCredentials (deprecated
// there, still called by older gRPC code paths).
func (r *reloadingTLS) OverrideServerName(name string) error {
	r.serverName = name
	return nil
}
