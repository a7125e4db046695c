// Command noop serves the noop kind (examples/noop/manifest.json) v1: its work
// reaction reports the generation it saw. SIGTERM or SIGINT drains and exits.
// WORKER_MAX_PARALLEL, if set, bounds the handlers running at once.
//
//	go build -o /tmp/noop-worker ./examples/noop && CONVERGE_BROKER_ADDR=http://127.0.0.1:50051 /tmp/noop-worker
package main

import (
	"cmp"
	"context"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"converge.dev/sdk/go/converge/worker"
)

func main() {
	work := func(_ context.Context, req *worker.ReactionRequest) (*worker.Outcome, error) {
		return &worker.Outcome{Status: map[string]any{"observed_generation": req.Generation}}, nil
	}
	options := []worker.Option{worker.WithHandler(worker.KindVersion{Kind: "noop", Version: 1}, worker.Reactions{"work": work})}
	if n, err := strconv.Atoi(os.Getenv("WORKER_MAX_PARALLEL")); err == nil {
		options = append(options, worker.WithMaxParallel(n))
	}
	w, err := worker.New(cmp.Or(os.Getenv("CONVERGE_BROKER_ADDR"), "http://127.0.0.1:50051"), options...)
	if err != nil {
		slog.Error("bad configuration", "err", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := w.Run(ctx); err != nil { // returns once the drain is over
		slog.Error("worker stopped", "err", err)
		os.Exit(1)
	}
}
