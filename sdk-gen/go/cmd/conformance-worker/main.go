// Command conformance-worker is the Go SDK's conformance worker: it serves
// conf-leaf v1 and conf-composite v1 with the worker runtime, as
// conformance/README.md specifies.
//
// Environment: CONVERGE_BROKER_ADDR (required), CONFORMANCE_MAX_PARALLEL
// (default 4), CONFORMANCE_DRAIN_TIMEOUT_MS (default 10000),
// CONFORMANCE_HEARTBEAT_MS (default the SDK's), CONFORMANCE_LOG (event log
// path; unset = none), CONVERGE_TLS_CA_FILE (enables TLS, with an https://
// broker address) and CONVERGE_TLS_CERT_FILE + CONVERGE_TLS_KEY_FILE (the
// client certificate for mutual TLS; the files are re-read at every
// connection), OTEL_EXPORTER_OTLP_ENDPOINT (set = export the handler spans
// over OTLP/gRPC, with the OpenTelemetry SDK this module adds). SIGTERM or
// SIGINT starts the graceful drain. Exit status: 0 after a clean drain, 1 if
// the drain timed out (or the worker failed), 2 for bad configuration.
//
// It is a module of its own so that the OpenTelemetry SDK and exporter are
// not requirements of converge.dev/sdk/go.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"converge.dev/sdk/go/converge/worker"
	"converge.dev/sdk/go/internal/conformance"
)

func main() {
	os.Exit(run())
}

func run() int {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	opts, logPath, addr, err := configure()
	if err != nil {
		logger.Error("bad configuration", "error", err)
		return 2
	}
	var log *conformance.Log
	if logPath != "" {
		if log, err = conformance.OpenLog(logPath); err != nil {
			logger.Error("bad configuration: cannot open CONFORMANCE_LOG", "error", err)
			return 2
		}
		defer func() { _ = log.Close() }()
	}
	for _, p := range conformance.Providers(log) {
		opts = append(opts, worker.WithProvider(p))
	}
	opts = append(opts, worker.WithLogger(logger), worker.WithAgent("converge-conformance-go/"+worker.Version))
	w, err := worker.New(addr, opts...)
	if err != nil {
		logger.Error("bad configuration", "error", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	stopTracing, err := setupTracing(ctx)
	if err != nil {
		logger.Error("bad configuration: cannot set up tracing", "error", err)
		return 2
	}
	defer func() {
		// The spans of the last handlers are exported before exit; Run's ctx
		// is done by now, hence a fresh one.
		flush, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stopTracing(flush); err != nil {
			logger.Warn("cannot flush spans", "error", err)
		}
	}()
	logger.Info("conformance worker starting", "broker", addr, "kinds", fmt.Sprint(w.Kinds()))
	if err := w.Run(ctx); err != nil {
		if errors.Is(err, worker.ErrDrainIncomplete) {
			logger.Error("drain incomplete", "error", err)
		} else {
			logger.Error("worker failed", "error", err)
		}
		return 1
	}
	logger.Info("drained cleanly")
	return 0
}

// configure reads the environment.
func configure() (opts []worker.Option, logPath, addr string, err error) {
	addr = os.Getenv("CONVERGE_BROKER_ADDR")
	if addr == "" {
		return nil, "", "", errors.New("CONVERGE_BROKER_ADDR is required")
	}
	maxParallel, err := intEnv("CONFORMANCE_MAX_PARALLEL", 4, 1)
	if err != nil {
		return nil, "", "", err
	}
	opts = append(opts, worker.WithMaxParallel(maxParallel))
	drainMs, err := intEnv("CONFORMANCE_DRAIN_TIMEOUT_MS", 10000, 0)
	if err != nil {
		return nil, "", "", err
	}
	opts = append(opts, worker.WithDrainTimeout(time.Duration(drainMs)*time.Millisecond))
	if os.Getenv("CONFORMANCE_HEARTBEAT_MS") != "" {
		hbMs, err := intEnv("CONFORMANCE_HEARTBEAT_MS", 0, 1)
		if err != nil {
			return nil, "", "", err
		}
		opts = append(opts, worker.WithHeartbeatInterval(time.Duration(hbMs)*time.Millisecond))
	}
	tlsOpt, err := tlsFromEnv()
	if err != nil {
		return nil, "", "", err
	}
	if tlsOpt != nil {
		opts = append(opts, tlsOpt)
	}
	return opts, os.Getenv("CONFORMANCE_LOG"), addr, nil
}

// tlsFromEnv is the TLS option the environment asks for, nil for plaintext.
func tlsFromEnv() (worker.Option, error) {
	files := worker.TLSFiles{
		CAFile:   os.Getenv("CONVERGE_TLS_CA_FILE"),
		CertFile: os.Getenv("CONVERGE_TLS_CERT_FILE"),
		KeyFile:  os.Getenv("CONVERGE_TLS_KEY_FILE"),
	}
	switch {
	case (files.CertFile == "") != (files.KeyFile == ""):
		return nil, errors.New("CONVERGE_TLS_CERT_FILE and CONVERGE_TLS_KEY_FILE go together")
	case files.CAFile == "" && files.CertFile != "":
		return nil, errors.New("CONVERGE_TLS_CERT_FILE needs CONVERGE_TLS_CA_FILE")
	case files.CAFile == "":
		return nil, nil
	}
	return worker.WithTLS(files), nil
}

// intEnv reads an integer variable (def when unset) that must be >= least.
func intEnv(name string, def, least int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		return 0, fmt.Errorf("%s=%q: want an integer >= %d", name, v, least)
	}
	return n, nil
}
