package worker

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// testCA is a throwaway CA that signs server and client certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a leaf certificate and returns it as PEM (certificate, key).
func (ca *testCA) issue(t *testing.T, name string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The TLS options reach the transport: a worker with the CA bundle and a
// client certificate serves a broker that requires mutual TLS.
func TestMutualTLSWithFiles(t *testing.T) {
	ca := newTestCA(t)
	serverCert, serverKey := ca.issue(t, "broker.test", x509.ExtKeyUsageServerAuth)
	clientCert, clientKey := ca.issue(t, "worker.test", x509.ExtKeyUsageClientAuth)
	pair, err := tls.X509KeyPair(serverCert, serverKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	serverTLS := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	})
	dir := t.TempDir()
	files := TLSFiles{
		CAFile:     writeFile(t, dir, "ca.pem", ca.pem),
		CertFile:   writeFile(t, dir, "client.pem", clientCert),
		KeyFile:    writeFile(t, dir, "client.key", clientKey),
		ServerName: "broker.test",
	}
	h := HandlerFunc(func(context.Context, *ReactionRequest) (*Outcome, error) { return nil, nil })
	r := newRigWithServer(t, []grpc.ServerOption{grpc.Creds(serverTLS)}, nil, WithHandler(testKind, h), WithTLS(files))
	s := r.session()
	s.task(t, workTask("tls", "work"))
	if c := s.completion(t); c.GetError() != nil {
		t.Fatalf("task over TLS failed: %v", c.GetError())
	}
}

// handshakeAs dials a TLS server that requires client certificates and
// returns the common name of the certificate the credentials presented.
func handshakeAs(t *testing.T, creds credentials.TransportCredentials, ln net.Listener) (string, error) {
	t.Helper()
	presented := make(chan string, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			presented <- ""
			return
		}
		defer func() { _ = conn.Close() }()
		tc := conn.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			presented <- ""
			return
		}
		certs := tc.ConnectionState().PeerCertificates
		if len(certs) == 0 {
			presented <- ""
			return
		}
		presented <- certs[0].Subject.CommonName
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn, _, err := creds.ClientHandshake(context.Background(), "broker.test:443", raw)
	if err != nil {
		_ = raw.Close()
		<-presented
		return "", err
	}
	defer func() { _ = conn.Close() }()
	return <-presented, nil
}

// The files are re-read at every handshake: a rotated keypair is presented
// by the next connection, a half-written or absent file keeps the last good
// material, and a replaced CA bundle is what the server is verified against.
func TestTLSFilesAreReReadAtEveryHandshake(t *testing.T) {
	ca := newTestCA(t)
	serverCert, serverKey := ca.issue(t, "broker.test", x509.ExtKeyUsageServerAuth)
	pair, err := tls.X509KeyPair(serverCert, serverKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()

	dir := t.TempDir()
	certA, keyA := ca.issue(t, "worker-a", x509.ExtKeyUsageClientAuth)
	files := TLSFiles{
		CAFile:   writeFile(t, dir, "ca.pem", ca.pem),
		CertFile: writeFile(t, dir, "client.pem", certA),
		KeyFile:  writeFile(t, dir, "client.key", keyA),
	}
	source, err := newTLSFilesSource(files, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	creds := &reloadingTLS{source: source}
	expect := func(step, want string) {
		t.Helper()
		got, err := handshakeAs(t, creds, ln)
		if err != nil || got != want {
			t.Fatalf("%s: presented %q (%v), want %q", step, got, err, want)
		}
	}
	expect("initial", "worker-a")

	// Mid-rotation states keep the last good keypair.
	certB, keyB := ca.issue(t, "worker-b", x509.ExtKeyUsageClientAuth)
	writeFile(t, dir, "client.key", keyB)
	expect("new key, old certificate", "worker-a")
	writeFile(t, dir, "client.pem", certB[:len(certB)/2])
	expect("half-written certificate", "worker-a")
	if err := os.Remove(files.CertFile); err != nil {
		t.Fatal(err)
	}
	expect("absent certificate", "worker-a")

	writeFile(t, dir, "client.pem", certB)
	expect("rotated", "worker-b")

	// A CA bundle that no longer names the server's CA refuses it.
	writeFile(t, dir, "ca.pem", newTestCA(t).pem)
	if got, err := handshakeAs(t, creds, ln); err == nil {
		t.Fatalf("the server was trusted after its CA left the bundle (presented %q)", got)
	}
}
