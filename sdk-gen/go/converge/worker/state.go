package worker

import (
	"cmp"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	workerv1 "converge.dev/sdk/go/gen/converge/worker/v1"
)

// shared is the state of one Run, used by the sessions, the config refresher
// and the running tasks. It outlives any one stream, which is what lets
// handlers keep running across a reconnect.
type shared struct {
	providers map[KindVersion]*Provider
	// kinds is the served pairs, sorted (for stable Subscribe and Interest
	// order).
	kinds []KindVersion
	s     *settings
	log   *slog.Logger

	// slots holds one token per running handler.
	slots chan struct{}

	// mu guards running, results and unacked, so a task is always in exactly
	// one of them until the broker acknowledges its completion.
	mu sync.Mutex
	// running maps the lease_token of each accepted task whose handler has
	// not finished to its claim_epoch.
	running map[string]int64
	// results holds the completions not yet handed to a stream.
	results *resultBuffer
	// unacked holds the completions handed to a stream and not yet
	// acknowledged by the broker (ResultAck), oldest first: they are sent
	// again on the next stream.
	unacked *resultBuffer

	// configMu guards the config cache and serialises OnConfig calls.
	configMu sync.Mutex
	// configs: a missing key means "never applied", a nil value "no default".
	configs map[KindVersion]*ProviderConfig
	// pushes counts pushes received; pushedAt is, per pair, the value of
	// pushes when its last push arrived. A fetch that started before that
	// push may carry older data and must not overwrite it.
	pushes   uint64
	pushedAt map[KindVersion]uint64

	// Wake-ups, each a 1-buffered channel signalled without blocking.
	resultsReady   chan struct{} // a result landed in the buffer
	configRepull   chan struct{} // the refresher should fetch now
	configsChanged chan struct{} // a default config changed: re-check readiness

	completed, failed, bufferedDropped, reconnects, sessions atomic.Uint64
}

func newShared(s *settings, providers map[KindVersion]*Provider) *shared {
	kinds := make([]KindVersion, 0, len(providers))
	for k := range providers {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b KindVersion) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Version, b.Version))
	})
	return &shared{
		providers:      providers,
		kinds:          kinds,
		s:              s,
		log:            s.logger,
		slots:          make(chan struct{}, s.maxParallel),
		running:        make(map[string]int64),
		results:        newResultBuffer(s.resultBufferCapacity),
		unacked:        newResultBuffer(s.resultBufferCapacity),
		configs:        make(map[KindVersion]*ProviderConfig),
		pushedAt:       make(map[KindVersion]uint64),
		resultsReady:   make(chan struct{}, 1),
		configRepull:   make(chan struct{}, 1),
		configsChanged: make(chan struct{}, 1),
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// begin records an accepted task; false if the lease is already running (a
// duplicate delivery, which is ignored).
func (sh *shared) begin(leaseToken string, claimEpoch int64) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.running[leaseToken]; ok {
		return false
	}
	sh.running[leaseToken] = claimEpoch
	return true
}

// finish moves a task from running to the result buffer and wakes the
// session.
func (sh *shared) finish(c *workerv1.StageComplete) {
	sh.mu.Lock()
	delete(sh.running, c.GetLeaseToken())
	dropped := sh.results.push(c)
	sh.mu.Unlock()
	if c.GetError() != nil {
		sh.failed.Add(1)
	} else {
		sh.completed.Add(1)
	}
	if dropped != nil {
		sh.bufferedDropped.Add(1)
		sh.log.Warn("result buffer full; discarded the oldest result", "lease", dropped.GetLeaseToken())
	}
	signal(sh.resultsReady)
}

func (sh *shared) popResult() *workerv1.StageComplete {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.results.pop()
}

// unpopResult puts back a result that could not be sent.
func (sh *shared) unpopResult(c *workerv1.StageComplete) {
	sh.mu.Lock()
	dropped := sh.results.pushFront(c)
	sh.mu.Unlock()
	if dropped != nil {
		sh.bufferedDropped.Add(1)
		sh.log.Warn("result buffer full; discarded the oldest result", "lease", dropped.GetLeaseToken())
	}
}

// sent keeps a completion handed to a stream until the broker acknowledges
// it.
func (sh *shared) sent(c *workerv1.StageComplete) {
	sh.mu.Lock()
	dropped := sh.unacked.push(c)
	sh.mu.Unlock()
	if dropped != nil {
		sh.bufferedDropped.Add(1)
		sh.log.Warn("too many unacknowledged results; forgot the oldest", "lease", dropped.GetLeaseToken())
	}
}

// acknowledge forgets the completions the broker acknowledged.
func (sh *shared) acknowledge(leases []*workerv1.LeaseRef) {
	if len(leases) == 0 {
		return
	}
	tokens := make(map[string]struct{}, len(leases))
	for _, l := range leases {
		tokens[l.GetLeaseToken()] = struct{}{}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.unacked.retain(func(c *workerv1.StageComplete) bool {
		_, acked := tokens[c.GetLeaseToken()]
		return !acked
	})
}

// requeueUnacknowledged puts the unacknowledged completions back in front of
// the result buffer, keeping their order, to be sent again on a new stream
// (the fence drops a copy the broker had already written).
func (sh *shared) requeueUnacknowledged() {
	dropped := 0
	sh.mu.Lock()
	for c := sh.unacked.popBack(); c != nil; c = sh.unacked.popBack() {
		if sh.results.pushFront(c) != nil {
			dropped++
		}
	}
	sh.mu.Unlock()
	if dropped > 0 {
		sh.bufferedDropped.Add(uint64(dropped))
		sh.log.Warn("result buffer full; discarded the oldest unacknowledged results", "dropped", dropped)
	}
}

// attestedLeases lists the leases to attest in a heartbeat, sorted by lease
// token and without duplicates: those of accepted tasks whose handlers have
// not finished, and of completions not yet acknowledged (the broker may be
// waiting for the database to write them).
func (sh *shared) attestedLeases() []*workerv1.LeaseRef {
	sh.mu.Lock()
	leases := make([]*workerv1.LeaseRef, 0, len(sh.running)+sh.unacked.len())
	for token, epoch := range sh.running {
		leases = append(leases, &workerv1.LeaseRef{LeaseToken: token, ClaimEpoch: epoch})
	}
	sh.unacked.each(func(c *workerv1.StageComplete) {
		leases = append(leases, &workerv1.LeaseRef{LeaseToken: c.GetLeaseToken(), ClaimEpoch: c.GetClaimEpoch()})
	})
	sh.mu.Unlock()
	slices.SortFunc(leases, func(a, b *workerv1.LeaseRef) int {
		return cmp.Or(cmp.Compare(a.LeaseToken, b.LeaseToken), cmp.Compare(a.ClaimEpoch, b.ClaimEpoch))
	})
	return slices.CompactFunc(leases, func(a, b *workerv1.LeaseRef) bool {
		return a.LeaseToken == b.LeaseToken && a.ClaimEpoch == b.ClaimEpoch
	})
}

// resumed lists the tasks for Subscribe.resumed: running or result-buffered,
// sorted and without duplicates.
func (sh *shared) resumed() []*workerv1.ResumedTask {
	type lease struct {
		token string
		epoch int64
	}
	sh.mu.Lock()
	all := make([]lease, 0, len(sh.running)+sh.results.len())
	for token, epoch := range sh.running {
		all = append(all, lease{token, epoch})
	}
	sh.results.each(func(c *workerv1.StageComplete) {
		all = append(all, lease{c.GetLeaseToken(), c.GetClaimEpoch()})
	})
	sh.mu.Unlock()
	slices.SortFunc(all, func(a, b lease) int {
		return cmp.Or(cmp.Compare(a.token, b.token), cmp.Compare(a.epoch, b.epoch))
	})
	all = slices.Compact(all)
	out := make([]*workerv1.ResumedTask, len(all))
	for i, l := range all {
		out[i] = &workerv1.ResumedTask{LeaseToken: l.token, ClaimEpoch: l.epoch}
	}
	return out
}

// outstanding returns (running handlers, results not yet acknowledged:
// unsent or sent).
func (sh *shared) outstanding() (running, undelivered int) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return len(sh.running), sh.results.len() + sh.unacked.len()
}

func (sh *shared) idle() bool {
	r, u := sh.outstanding()
	return r == 0 && u == 0
}

// isReady is a provider's readiness: its own Ready (a panic counts as not
// ready) and, if it requires one, a cached default config.
func (sh *shared) isReady(kind KindVersion) bool {
	p := sh.providers[kind]
	if p == nil {
		return false
	}
	if p.Ready != nil && !sh.callReady(kind, p.Ready) {
		return false
	}
	return !p.RequiresDefaultConfig || sh.defaultConfig(kind) != nil
}

func (sh *shared) callReady(kind KindVersion, ready func() bool) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			sh.log.Error("provider readiness check panicked", "kind", kind.String(), "panic", r)
			ok = false
		}
	}()
	return ready()
}

// defaultConfig is the cached default config of a pair (shared: callers that
// hand it out clone it).
func (sh *shared) defaultConfig(kind KindVersion) *ProviderConfig {
	sh.configMu.Lock()
	defer sh.configMu.Unlock()
	return sh.configs[kind]
}

// configEpoch marks the start of a config fetch; pass it to
// applyFetchedConfig.
func (sh *shared) configEpoch() uint64 {
	sh.configMu.Lock()
	defer sh.configMu.Unlock()
	return sh.pushes
}

// applyFetchedConfig applies a fetched config unless a push for the pair
// arrived after the fetch started (epoch): the fetched value may be older.
func (sh *shared) applyFetchedConfig(kind KindVersion, c *ProviderConfig, epoch uint64) {
	sh.configMu.Lock()
	defer sh.configMu.Unlock()
	if at, ok := sh.pushedAt[kind]; ok && at > epoch {
		sh.log.Debug("fetched provider config is older than a push; ignored", "kind", kind.String())
		return
	}
	sh.setConfig(kind, c)
}

// applyPushedConfig applies a pushed config.
func (sh *shared) applyPushedConfig(kind KindVersion, c *ProviderConfig) {
	sh.configMu.Lock()
	defer sh.configMu.Unlock()
	sh.pushes++
	sh.pushedAt[kind] = sh.pushes
	sh.setConfig(kind, c)
}

// setConfig stores a pair's default config and calls OnConfig if it changed
// (or was never set). configMu is held across the call so callbacks never
// overlap and are never reordered against the cache.
func (sh *shared) setConfig(kind KindVersion, c *ProviderConfig) {
	p := sh.providers[kind]
	if p == nil {
		sh.log.Debug("ignoring a provider config for a pair this worker does not serve", "kind", kind.String())
		return
	}
	if old, known := sh.configs[kind]; known && reflect.DeepEqual(old, c) {
		return
	}
	sh.configs[kind] = c
	sh.log.Debug("provider config changed", "kind", kind.String(), "present", c != nil)
	if p.OnConfig != nil {
		func() {
			defer func() {
				if r := recover(); r != nil {
					sh.log.Error("OnConfig panicked", "kind", kind.String(), "panic", r)
				}
			}()
			p.OnConfig(c.clone())
		}()
	}
	signal(sh.configsChanged)
}

// WorkerStats is a snapshot of a worker's counters.
type WorkerStats struct {
	// Completed counts tasks whose handler succeeded.
	Completed uint64
	// Failed counts tasks that failed for any reason (handler error, panic,
	// deadline, unknown or unready provider, shutting down).
	Failed uint64
	// BufferedDropped counts results discarded because the buffer (of unsent
	// or of unacknowledged results) was full.
	BufferedDropped uint64
	// Reconnects counts times an established stream was lost.
	Reconnects uint64
	// Sessions counts streams opened so far.
	Sessions uint64
	// Running is the number of accepted tasks whose handler has not finished.
	Running int
	// Buffered is the number of results not yet acknowledged by the broker:
	// waiting to be sent, or sent and kept until acknowledged.
	Buffered int
}

// Stats is the former name of WorkerStats.
//
// Deprecated: use WorkerStats, the name every converge SDK uses (0.1 called
// it Stats).
type Stats = WorkerStats

func (sh *shared) stats() WorkerStats {
	running, buffered := sh.outstanding()
	return WorkerStats{
		Completed:       sh.completed.Load(),
		Failed:          sh.failed.Load(),
		BufferedDropped: sh.bufferedDropped.Load(),
		Reconnects:      sh.reconnects.Load(),
		Sessions:        sh.sessions.Load(),
		Running:         running,
		Buffered:        buffered,
	}
}
