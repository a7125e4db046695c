package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"converge.dev/sdk/go/converge"
	convergev1 "converge.dev/sdk/go/gen/converge/v1"
	"converge.dev/sdk/go/internal/conformance"
	"converge.dev/sdk/go/internal/e2elock"
)

func TestConfigureReadsTheEnvironment(t *testing.T) {
	t.Setenv("CONVERGE_BROKER_ADDR", "http://127.0.0.1:1")
	t.Setenv("CONFORMANCE_MAX_PARALLEL", "3")
	t.Setenv("CONFORMANCE_HEARTBEAT_MS", "250")
	t.Setenv("CONFORMANCE_LOG", "/tmp/x.log")
	opts, logPath, addr, err := configure()
	if err != nil || addr != "http://127.0.0.1:1" || logPath != "/tmp/x.log" || len(opts) != 3 {
		t.Fatalf("configure = %d options, %q, %q, %v", len(opts), logPath, addr, err)
	}
	for name, value := range map[string]string{
		"CONFORMANCE_MAX_PARALLEL":     "0",
		"CONFORMANCE_DRAIN_TIMEOUT_MS": "soon",
		"CONFORMANCE_HEARTBEAT_MS":     "-1",
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, value)
			if _, _, _, err := configure(); err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s=%s: error %v", name, value, err)
			}
		})
	}
	t.Setenv("CONVERGE_BROKER_ADDR", "")
	if _, _, _, err := configure(); err == nil {
		t.Error("a missing CONVERGE_BROKER_ADDR was accepted")
	}
}

func TestConfigureReadsTheTLSEnvironment(t *testing.T) {
	t.Setenv("CONVERGE_BROKER_ADDR", "https://127.0.0.1:1")
	t.Setenv("CONFORMANCE_HEARTBEAT_MS", "")
	t.Setenv("CONVERGE_TLS_CERT_FILE", "")
	t.Setenv("CONVERGE_TLS_KEY_FILE", "")
	t.Setenv("CONVERGE_TLS_CA_FILE", "/tmp/ca.pem")
	if opts, _, _, err := configure(); err != nil || len(opts) != 3 {
		t.Fatalf("CA only: %d options, %v", len(opts), err)
	}
	t.Setenv("CONVERGE_TLS_CERT_FILE", "/tmp/worker.crt")
	if _, _, _, err := configure(); err == nil || !strings.Contains(err.Error(), "CONVERGE_TLS_KEY_FILE") {
		t.Errorf("a certificate without its key: error %v", err)
	}
	t.Setenv("CONVERGE_TLS_KEY_FILE", "/tmp/worker.key")
	if opts, _, _, err := configure(); err != nil || len(opts) != 3 {
		t.Fatalf("mTLS: %d options, %v", len(opts), err)
	}
	t.Setenv("CONVERGE_TLS_CA_FILE", "")
	if _, _, _, err := configure(); err == nil || !strings.Contains(err.Error(), "CONVERGE_TLS_CA_FILE") {
		t.Errorf("a certificate without a CA: error %v", err)
	}
}

// build compiles the worker into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "conformance-worker")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestBadConfigurationExitsWith2(t *testing.T) {
	bin := build(t)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "CONVERGE_BROKER_ADDR=", "CONFORMANCE_MAX_PARALLEL=4")
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("exit = %v, want status 2", err)
	}
}

// The process contract against a real server: SIGTERM during a running task
// drains it (its result arrives, its end line is written) and exits 0.
func TestSIGTERMDrainsTheRunningTaskAndExits0(t *testing.T) {
	addr := os.Getenv("CONVERGE_ADDR")
	if addr == "" {
		t.Skip("CONVERGE_ADDR is not set: start a converge server and set it (sdk-gen/test does)")
	}
	c, err := converge.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "conformance", "kinds", "leaf.json"))
	if err != nil {
		t.Fatal(err)
	}
	req := &convergev1.ApplyKindManifestRequest{}
	if err := protojson.Unmarshal(raw, req); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kind.ApplyKindManifest(ctx, req); err != nil {
		t.Fatal(err)
	}

	bin := build(t)
	// No other test's worker may take this task (cleanup runs after the
	// deferred kill below).
	e2elock.Acquire(t, e2elock.Conformance)
	logPath := filepath.Join(t.TempDir(), "events.log")
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "CONVERGE_BROKER_ADDR=http://"+addr, "CONFORMANCE_LOG="+logPath, "CONFORMANCE_DRAIN_TIMEOUT_MS=20000")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "go-drain-" + hex.EncodeToString(b)
	if _, err := c.ApplyResource(ctx, "conf-leaf", 1, name, map[string]any{"sleepMs": 1500}); err != nil {
		t.Fatal(err)
	}
	waitLine(t, logPath, conformance.EventStart, name)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit = %v, want 0; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit within 30 s of SIGTERM; stderr:\n%s", stderr.String())
	}
	waitLine(t, logPath, conformance.EventEnd, name)
	for {
		r, err := c.GetResource(ctx, "conf-leaf", name)
		if err != nil {
			t.Fatal(err)
		}
		if r.GetPhase() == convergev1.Phase_PHASE_READY {
			if a := r.GetStatus().AsMap()["attempt"]; a != 1.0 {
				t.Errorf("completed at attempt %v, want 1 (the drained run)", a)
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s not READY after the drain: %v", name, r)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitLine waits until the log has the event line for name.
func waitLine(t *testing.T, path, event, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if f, err := os.Open(path); err == nil {
			s := bufio.NewScanner(f)
			for s.Scan() {
				var l conformance.Line
				if json.Unmarshal(s.Bytes(), &l) == nil && l.Event == event && l.Name == name {
					_ = f.Close()
					if l.Language != "go" || l.Reaction != "work" || l.Attempt < 1 {
						t.Errorf("line %s", s.Text())
					}
					return
				}
			}
			_ = f.Close()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no %s line for %s", event, name)
}
