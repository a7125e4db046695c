package worker

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc/metadata"

	workerv1 "converge.dev/sdk/go/gen/converge/worker/v1"
)

// closeGrace is how long a closing worker waits for the broker to end the
// stream after the worker half-closed it, so the last completions are flushed
// rather than reset with the stream.
const closeGrace = 5 * time.Second

// errRefused: the broker ended a new stream without accepting it.
var errRefused = errors.New("the broker refused the stream")

// sessionEnd is how a session ended.
type sessionEnd int

const (
	// sessionNotOpened: the stream could not be opened.
	sessionNotOpened sessionEnd = iota
	// sessionLost: an open stream broke or was ended by the broker.
	sessionLost
	// sessionLostHealthy: like sessionLost, after a session that lasted
	// long enough or received a task (it resets the reconnect backoff).
	sessionLostHealthy
	// sessionClosed: the worker closed the stream at the end of a drain.
	sessionClosed
)

// session is one WorkStream.
type session struct {
	r         *run
	stream    workerv1.WorkerService_WorkStreamClient
	readiness map[KindVersion]bool
	inbound   chan *workerv1.WorkStreamResponse
	readErr   chan error
}

// session runs one stream until it ends or the drain completes.
func (r *run) session() sessionEnd {
	sh := r.sh
	ctx, cancel := context.WithCancel(r.background)
	defer cancel()

	// Opening is bounded by the RPC timeout: the stream's context is
	// cancelled unless the broker has answered the Subscribe by then.
	openTimer := time.AfterFunc(sh.s.rpcTimeout, cancel)
	stream, err := r.client.WorkStream(ctx)
	if err != nil {
		openTimer.Stop()
		sh.log.Warn("cannot open work stream", "error", err)
		return sessionNotOpened
	}
	s := &session{r: r, stream: stream, readiness: make(map[KindVersion]bool, len(sh.kinds))}
	// What the last stream did not acknowledge is sent again on this one
	// (and listed in Subscribe.resumed).
	sh.requeueUnacknowledged()
	err = s.subscribe()
	if err == nil {
		// The broker sends its headers once it accepted the Subscribe. A
		// stream it refused ends without any (trailers only): no headers
		// and no error, the status then comes from RecvMsg.
		var md metadata.MD
		if md, err = stream.Header(); err == nil && md == nil {
			err = errRefused
		}
	}
	if !openTimer.Stop() {
		sh.log.Warn("opening the work stream timed out")
		return sessionNotOpened
	}
	if err != nil {
		if recvErr := stream.RecvMsg(&workerv1.WorkStreamResponse{}); recvErr != nil && !errors.Is(recvErr, io.EOF) {
			err = recvErr // the status the broker ended the stream with
		}
		sh.log.Warn("cannot open work stream", "error", err)
		return sessionNotOpened
	}
	sh.sessions.Add(1)
	sh.log.Info("work stream open", "kinds", len(sh.kinds))
	opened := time.Now()
	gotTask := false
	lost := func() sessionEnd {
		if gotTask || time.Since(opened) >= sh.s.healthySession {
			return sessionLostHealthy
		}
		return sessionLost
	}
	signal(sh.configRepull)

	s.inbound = make(chan *workerv1.WorkStreamResponse)
	s.readErr = make(chan error, 1)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		s.read(ctx)
	}()
	// Stop the reader before returning: cancel ends its Recv.
	defer func() {
		cancel()
		<-readerDone
	}()

	// Redeliver what was computed while disconnected before anything else.
	if s.flush() != nil {
		return sessionLost
	}

	heartbeat := time.NewTicker(sh.s.heartbeatInterval)
	defer heartbeat.Stop()
	poll := time.NewTicker(sh.s.readinessPollInterval)
	defer poll.Stop()

	for {
		if r.draining && sh.idle() {
			s.close()
			return sessionClosed
		}
		// Readiness is not re-checked while draining: every pair stays
		// announced unready.
		var pollC <-chan time.Time
		var changedC <-chan struct{}
		if !r.draining {
			pollC, changedC = poll.C, sh.configsChanged
		}
		var err error
		select {
		case m := <-s.inbound:
			switch p := m.GetPayload().(type) {
			case *workerv1.WorkStreamResponse_Task:
				gotTask = true
				r.accept(p.Task, r.draining)
			case *workerv1.WorkStreamResponse_ProviderConfigUpdate:
				applyUpdate(sh, p.ProviderConfigUpdate)
			case *workerv1.WorkStreamResponse_ResultAck:
				sh.acknowledge(p.ResultAck.GetLeases())
			}
		case err := <-s.readErr:
			if errors.Is(err, io.EOF) {
				sh.log.Warn("broker ended the work stream")
			} else {
				sh.log.Warn("work stream failed", "error", err)
			}
			return lost()
		case <-sh.resultsReady:
			err = s.flush()
		case <-heartbeat.C:
			err = s.send(&workerv1.WorkStreamRequest{Payload: &workerv1.WorkStreamRequest_Heartbeat{
				Heartbeat: &workerv1.WorkHeartbeat{Leases: sh.attestedLeases()},
			}})
		case <-pollC:
			err = s.pollReadiness()
		case <-changedC:
			err = s.pollReadiness()
		case <-r.shutdown:
			r.startDrain()
			err = s.announceUnready()
		case <-r.drainExpired:
			running, undelivered := sh.outstanding()
			sh.log.Warn("drain timeout reached; closing the stream", "running", running, "undelivered", undelivered)
			s.close()
			return sessionClosed
		}
		if err != nil {
			// The call ended underneath us; Recv reports why, but there is
			// nothing more to do on this stream.
			sh.log.Debug("work stream send failed", "error", err)
			return lost()
		}
	}
}

// subscribe sends the opening burst: Subscribe, then Interest{ready: false}
// for every pair that cannot take tasks (all of them while draining).
func (s *session) subscribe() error {
	sh := s.r.sh
	sub := &workerv1.Subscribe{
		MaxInflight: int32(sh.s.maxParallel),
		Resumed:     sh.resumed(),
		Agent:       sh.s.agent,
	}
	for _, k := range sh.kinds {
		sub.Kinds = append(sub.Kinds, kindToProto(k))
	}
	sh.log.Debug("opening work stream", "resumed", len(sub.Resumed))
	if err := s.send(&workerv1.WorkStreamRequest{Payload: &workerv1.WorkStreamRequest_Subscribe{Subscribe: sub}}); err != nil {
		return err
	}
	for _, k := range sh.kinds {
		ready := !s.r.draining && sh.isReady(k)
		s.readiness[k] = ready
		if !ready {
			if err := s.interest(k, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// read forwards inbound messages until the stream ends or ctx is cancelled.
func (s *session) read(ctx context.Context) {
	for {
		m, err := s.stream.Recv()
		if err != nil {
			s.readErr <- err
			return
		}
		select {
		case s.inbound <- m:
		case <-ctx.Done():
			return
		}
	}
}

func (s *session) send(m *workerv1.WorkStreamRequest) error { return s.stream.Send(m) }

func (s *session) interest(k KindVersion, ready bool) error {
	s.r.sh.log.Debug("sending interest", "kind", k.String(), "ready", ready)
	return s.send(&workerv1.WorkStreamRequest{Payload: &workerv1.WorkStreamRequest_Interest{
		Interest: &workerv1.Interest{Kind: k.Kind, KindVersion: k.Version, Ready: ready},
	}})
}

// flush hands every buffered result to the stream, oldest first. A result
// that cannot be sent goes back to the buffer for the next stream; a sent
// one is kept until the broker acknowledges it.
func (s *session) flush() error {
	sh := s.r.sh
	for {
		c := sh.popResult()
		if c == nil {
			return nil
		}
		if err := s.send(&workerv1.WorkStreamRequest{Payload: &workerv1.WorkStreamRequest_Complete{Complete: c}}); err != nil {
			sh.unpopResult(c)
			return err
		}
		sh.sent(c)
	}
}

// pollReadiness sends an Interest for every pair whose readiness changed
// since the last one sent on this stream.
func (s *session) pollReadiness() error {
	sh := s.r.sh
	for _, k := range sh.kinds {
		ready := sh.isReady(k)
		if last, ok := s.readiness[k]; ok && last == ready {
			continue
		}
		s.readiness[k] = ready
		sh.log.Info("provider readiness changed", "kind", k.String(), "ready", ready)
		if err := s.interest(k, ready); err != nil {
			return err
		}
	}
	return nil
}

// announceUnready tells the broker to stop sending tasks for every pair.
func (s *session) announceUnready() error {
	for _, k := range s.r.sh.kinds {
		if s.readiness[k] {
			s.readiness[k] = false
			if err := s.interest(k, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// close half-closes the stream and waits (bounded) for the broker to end it,
// so queued completions are transmitted instead of being reset.
func (s *session) close() {
	_ = s.stream.CloseSend()
	grace := time.NewTimer(closeGrace)
	defer grace.Stop()
	for {
		select {
		case <-s.inbound:
			// A task sent after the half-close cannot be answered; the
			// broker releases its lease when the stream ends.
		case <-s.readErr:
			s.r.sh.log.Info("work stream closed")
			return
		case <-grace.C:
			s.r.sh.log.Debug("broker did not end the stream after the half-close")
			return
		}
	}
}

func applyUpdate(sh *shared, u *workerv1.ProviderConfigUpdate) {
	k := KindVersion{Kind: u.GetKind(), Version: u.GetKindVersion()}
	var c *ProviderConfig
	if !u.GetDeleted() {
		c = providerConfig(u.GetSpec(), u.GetData())
	}
	sh.applyPushedConfig(k, c)
}
