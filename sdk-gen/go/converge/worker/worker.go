package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	workerv1 "converge.dev/sdk/go/gen/converge/worker/v1"
)

// Worker serves its providers over one WorkStream at a time, reconnecting as
// needed, until its Run context is cancelled. See the package documentation
// for the behaviour.
type Worker struct {
	sh      *shared
	client  workerv1.WorkerServiceClient
	conn    *grpc.ClientConn // owned (dialed by New); nil with WithConn
	started atomic.Bool
}

// New validates the options and creates a worker for the broker at address:
// "http://host:port" (plaintext), "https://host:port" (TLS) or a gRPC target
// such as "host:port" (plaintext unless a TLS option is given). It does not
// connect; Run does.
func New(address string, opts ...Option) (*Worker, error) {
	s := defaultSettings()
	for _, o := range opts {
		o(&s)
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	if len(s.providers) == 0 {
		return nil, errors.New("worker: a worker needs at least one provider")
	}
	providers := make(map[KindVersion]*Provider, len(s.providers))
	for i := range s.providers {
		p := &s.providers[i]
		if p.Kind.Kind == "" || p.Kind.Version < 1 {
			return nil, fmt.Errorf("worker: invalid provider kind %q: the kind must be non-empty and the version >= 1", p.Kind)
		}
		if p.Handler == nil {
			return nil, fmt.Errorf("worker: the provider of %s has no handler", p.Kind)
		}
		if _, dup := providers[p.Kind]; dup {
			return nil, fmt.Errorf("worker: more than one provider for %s", p.Kind)
		}
		providers[p.Kind] = p
	}
	w := &Worker{}
	cc := s.conn
	if cc == nil {
		conn, err := dial(address, &s)
		if err != nil {
			return nil, err
		}
		w.conn, cc = conn, conn
	}
	w.client = workerv1.NewWorkerServiceClient(cc)
	w.sh = newShared(&s, providers)
	return w, nil
}

// Kinds returns the pairs the worker serves, sorted.
func (w *Worker) Kinds() []KindVersion { return append([]KindVersion(nil), w.sh.kinds...) }

// Stats returns a snapshot of the counters; safe to call while Run goes.
func (w *Worker) Stats() WorkerStats { return w.sh.stats() }

// Run serves until ctx is cancelled, then drains: announces every pair
// unready, fails tasks that still arrive (transiently), waits up to the drain
// timeout for in-flight handlers, sends their results (reconnecting if
// needed), closes the stream and returns. Broker failures never end it: they
// are retried with backoff. Cancelling ctx does not cancel the handlers; the
// drain timeout does.
//
// It returns nil after a clean drain and a *DrainIncompleteError (matching
// ErrDrainIncomplete) if the drain timed out with work left. A Worker runs
// once; the connection New dialed is closed when Run returns.
func (w *Worker) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("worker: Run called more than once")
	}
	if w.conn != nil {
		defer func() { _ = w.conn.Close() }()
	}
	sh := w.sh
	// Handlers and RPCs outlive ctx (its cancellation only starts the
	// drain); the drain timeout ends them.
	background, stop := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stop(nil)
	r := &run{
		sh:         sh,
		client:     w.client,
		background: background,
		handlerCtx: background,
		shutdown:   ctx.Done(),
		backoff:    newBackoff(sh.s.backoffBase, sh.s.backoffMax),
	}
	defer r.stopDrainTimer()
	if !r.prime(ctx) {
		return nil
	}
	refresherCtx, stopRefresher := context.WithCancel(background)
	var refresher sync.WaitGroup
	refresher.Go(func() { r.refreshConfigs(refresherCtx) })

	err := r.serve()

	stopRefresher()
	refresher.Wait()
	// Handlers still running past the drain are cancelled; their results
	// have nowhere to go.
	stop(errDrainTimeout)
	r.tasks.Wait()
	r.waitHandlers()
	return err
}

// run is the state of one Run, handed to each session.
type run struct {
	sh     *shared
	client workerv1.WorkerServiceClient
	// background carries the RPCs: it ends only when Run returns.
	background context.Context
	// handlerCtx is the parent of every handler's context: cancelled (with
	// errDrainTimeout) when Run gives up on them.
	handlerCtx context.Context
	// shutdown is the Run context's Done channel until the drain starts,
	// then nil (a nil channel never fires in a select).
	shutdown <-chan struct{}
	backoff  *backoff

	draining     bool
	drainExpired chan struct{} // closed when the drain timeout passes
	drainTimer   *time.Timer

	tasks    sync.WaitGroup // task goroutines (slot wait, handler wait, finish)
	handlers sync.WaitGroup // handler goroutines
}

// startDrain enters drain mode (idempotent).
func (r *run) startDrain() {
	if r.draining {
		return
	}
	r.draining = true
	r.shutdown = nil
	r.sh.log.Info("shutdown requested; draining", "timeout", r.sh.s.drainTimeout)
	expired := make(chan struct{})
	r.drainExpired = expired
	r.drainTimer = time.AfterFunc(r.sh.s.drainTimeout, func() { close(expired) })
}

func (r *run) stopDrainTimer() {
	if r.drainTimer != nil {
		r.drainTimer.Stop()
	}
}

func (r *run) drainTimedOut() bool {
	if r.drainExpired == nil {
		return false
	}
	select {
	case <-r.drainExpired:
		return true
	default:
		return false
	}
}

func (r *run) drainError() error {
	running, undelivered := r.sh.outstanding()
	if running == 0 && undelivered == 0 {
		return nil
	}
	return &DrainIncompleteError{Running: running, Undelivered: undelivered}
}

// prime fills the config cache, retrying until the broker answers; false if
// shutdown (ctx) came first. Nothing runs yet, so shutdown may abort a fetch.
func (r *run) prime(ctx context.Context) bool {
	b := newBackoff(r.sh.s.backoffBase, r.sh.s.backoffMax)
	for {
		err := r.fetchConfigs(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		r.sh.log.Warn("cannot fetch provider configs; retrying", "error", err)
		t := time.NewTimer(b.next())
		select {
		case <-t.C:
		case <-r.shutdown:
			t.Stop()
			return false
		}
	}
}

// serve is the reconnect loop.
func (r *run) serve() error {
	for {
		if r.draining {
			if r.sh.idle() {
				return nil
			}
			if r.drainTimedOut() {
				return r.drainError()
			}
		}
		switch end := r.session(); end {
		case sessionClosed:
			return r.drainError()
		case sessionLostHealthy, sessionLost:
			r.sh.reconnects.Add(1)
			if end == sessionLostHealthy {
				r.backoff.reset()
			}
		case sessionNotOpened:
		}
		// Nothing left to deliver: no reason to reconnect just to close.
		if r.draining && r.sh.idle() {
			return nil
		}
		delay := r.backoff.next()
		r.sh.log.Debug("reconnecting after backoff", "delay", delay)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.shutdown:
			r.startDrain()
		case <-r.drainExpired: // nil (never) until the drain starts
		}
		t.Stop()
	}
}

// fetchConfigs fetches the default config of every served pair and applies
// it. Pairs the broker omits have no default.
func (r *run) fetchConfigs(ctx context.Context) error {
	sh := r.sh
	req := &workerv1.GetProviderConfigRequest{}
	for _, k := range sh.kinds {
		req.Kinds = append(req.Kinds, kindToProto(k))
	}
	epoch := sh.configEpoch()
	ctx, cancel := context.WithTimeout(ctx, sh.s.rpcTimeout)
	defer cancel()
	resp, err := r.client.GetProviderConfig(ctx, req)
	if err != nil {
		return err
	}
	configs := make(map[KindVersion]*ProviderConfig, len(sh.kinds))
	for _, e := range resp.GetEntries() {
		k := KindVersion{Kind: e.GetKind(), Version: e.GetKindVersion()}
		if _, served := sh.providers[k]; served {
			configs[k] = providerConfig(e.GetSpec(), e.GetData())
		}
	}
	for _, k := range sh.kinds {
		sh.applyFetchedConfig(k, configs[k], epoch)
	}
	return nil
}

// refreshConfigs is the failsafe refresher: it re-pulls the configs
// periodically and whenever a session asks (on every (re)connect).
func (r *run) refreshConfigs(ctx context.Context) {
	t := time.NewTicker(r.sh.s.configRefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.sh.configRepull:
		}
		if err := r.fetchConfigs(ctx); err != nil && ctx.Err() == nil {
			r.sh.log.Debug("provider config refresh failed", "error", err)
		}
	}
}

// waitHandlers waits a bounded time for cancelled handlers to return. A
// handler that ignores its context cannot be stopped in Go; it is reported
// rather than waited for forever.
func (r *run) waitHandlers() {
	done := make(chan struct{})
	go func() {
		r.handlers.Wait()
		close(done)
	}()
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		r.sh.log.Error("handlers still running after cancellation; they ignore their context and are abandoned")
	}
}
