// Package conformance is the Go conformance worker's behaviour: the handlers
// of conf-leaf v1 and conf-composite v1 as conformance/README.md specifies
// them, driven entirely by the resource's spec. cmd/conformance-worker runs
// them on the worker runtime.
package conformance

import (
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"time"

	"converge.dev/sdk/go/converge/worker"
)

// The served pairs.
var (
	LeafKind      = worker.KindVersion{Kind: "conf-leaf", Version: 1}
	CompositeKind = worker.KindVersion{Kind: "conf-composite", Version: 1}
)

// Providers returns the providers of both conformance kinds, logging to log
// (nil = no log).
func Providers(log *Log) []worker.Provider {
	h := &handlers{log: log}
	return []worker.Provider{
		{Kind: LeafKind, Handler: worker.Reactions{"work": h.work, "teardown": h.teardown}},
		{Kind: CompositeKind, Handler: worker.Reactions{"compose": h.compose, "rollup": h.rollup}},
	}
}

type handlers struct {
	log *Log
}

// leafSpec is the part of a conf-leaf spec the handlers read (value is read
// from the raw spec, to tell null from absent alike).
type leafSpec struct {
	SleepMs       int64 `json:"sleepMs"`
	Hang          bool  `json:"hang"`
	FailTransient int64 `json:"failTransient"`
	FailTerminal  bool  `json:"failTerminal"`
	Panic         bool  `json:"panic"`
	RequeueMs     int64 `json:"requeueMs"`
	TeardownMs    int64 `json:"teardownMs"`
	LivenessMs    int64 `json:"livenessMs"`
	Events        []struct {
		Category string `json:"category"`
		Type     string `json:"type"`
		Reason   string `json:"reason"`
		Message  string `json:"message"`
	} `json:"events"`
}

// logged writes the start line, runs body and writes the end line when body
// returns (success or failure, not on a panic).
func (h *handlers) logged(req *worker.ReactionRequest, body func() (*worker.Outcome, error)) (*worker.Outcome, error) {
	if err := h.log.Write(EventStart, req); err != nil {
		return nil, err
	}
	o, err := body()
	if logErr := h.log.Write(EventEnd, req); logErr != nil && err == nil {
		return nil, logErr
	}
	return o, err
}

func (h *handlers) work(ctx context.Context, req *worker.ReactionRequest) (*worker.Outcome, error) {
	return h.logged(req, func() (*worker.Outcome, error) {
		var spec leafSpec
		if err := req.Resource.DecodeSpec(&spec); err != nil {
			return nil, worker.Terminal(err)
		}
		if spec.Panic {
			panic("conformance: panic requested by the spec")
		}
		if spec.Hang {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		if err := sleep(ctx, spec.SleepMs); err != nil {
			return nil, err
		}
		if int64(req.Attempt) <= spec.FailTransient {
			return nil, worker.Transientf("ConformanceTransient", "conformance: transient failure at attempt %d", req.Attempt)
		}
		if spec.FailTerminal {
			return nil, worker.Terminalf("ConformanceTerminal", "conformance: terminal failure")
		}
		status := map[string]any{
			"observedGeneration": req.Generation,
			"attempt":            req.Attempt,
			"language":           Language,
			"value":              req.Resource.Spec["value"],
			"config":             nil,
			"bundle":             nil,
			"trigger":            req.Trigger.String(),
		}
		if c := req.EffectiveConfig(); c != nil {
			status["config"] = c
		}
		if b := req.EffectiveBundle(); len(b) > 0 {
			status["bundle"] = base64.StdEncoding.EncodeToString(b)
		}
		stored, hasStored := req.Resource.Status["requeuedGeneration"]
		if hasStored {
			status["requeuedGeneration"] = stored
		}
		outcome := &worker.Outcome{
			Status:     status,
			Conditions: []worker.Condition{{Type: "Ready", Status: worker.ConditionTrue, Reason: "Conformed"}},
		}
		if spec.RequeueMs > 0 && !(hasStored && sameNumber(stored, req.Generation)) {
			status["requeuedGeneration"] = req.Generation
			outcome.RequeueAfter = time.Duration(spec.RequeueMs) * time.Millisecond
			return outcome, nil
		}
		if spec.LivenessMs > 0 {
			outcome.Conditions = append(outcome.Conditions, worker.Condition{
				Type: "Reachable", Status: worker.ConditionTrue, Reason: "Probed",
				Liveness: time.Duration(spec.LivenessMs) * time.Millisecond,
			})
		}
		for _, e := range spec.Events {
			event := worker.Event{Category: e.Category, Reason: e.Reason, Message: e.Message}
			if e.Type == "Warning" {
				event.Type = worker.EventWarning
			}
			outcome.Events = append(outcome.Events, event)
		}
		return outcome, nil
	})
}

func (h *handlers) teardown(ctx context.Context, req *worker.ReactionRequest) (*worker.Outcome, error) {
	var spec leafSpec
	if err := req.Resource.DecodeSpec(&spec); err != nil {
		return nil, worker.Terminal(err)
	}
	if err := sleep(ctx, spec.TeardownMs); err != nil {
		return nil, err
	}
	if err := h.log.Write(EventTeardown, req); err != nil {
		return nil, err
	}
	return &worker.Outcome{}, nil
}

// compositeSpec is a conf-composite spec.
type compositeSpec struct {
	Hang     bool `json:"hang"`
	Children []struct {
		Name      string         `json:"name"`
		Spec      map[string]any `json:"spec"`
		DependsOn []string       `json:"dependsOn"`
		Flows     []struct {
			From   string `json:"from"`
			Source string `json:"source"`
			Field  string `json:"field"`
		} `json:"flows"`
	} `json:"children"`
}

func (h *handlers) compose(ctx context.Context, req *worker.ReactionRequest) (*worker.Outcome, error) {
	return h.logged(req, func() (*worker.Outcome, error) {
		var spec compositeSpec
		if err := req.Resource.DecodeSpec(&spec); err != nil {
			return nil, worker.Terminal(err)
		}
		if spec.Hang {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		// What a real composer does to the world (say, reserving a name),
		// skipped when only planning.
		if !req.Plan {
			if err := h.log.Write(EventSideEffect, req); err != nil {
				return nil, err
			}
		}
		outcome := &worker.Outcome{}
		for _, c := range spec.Children {
			childSpec := c.Spec
			if childSpec == nil {
				childSpec = map[string]any{}
			}
			outcome.Children = append(outcome.Children, worker.ChildSpec{
				Kind: LeafKind.Kind, KindVersion: LeafKind.Version, Name: c.Name, Spec: childSpec,
			})
			deps := slices.Clone(c.DependsOn)
			for _, f := range c.Flows {
				deps = append(deps, f.From)
			}
			var seen []string
			for _, d := range deps {
				if slices.Contains(seen, d) {
					continue
				}
				seen = append(seen, d)
				edge := worker.DepEdge{
					Dependent:  worker.ResourceRef{Kind: LeafKind.Kind, Name: c.Name},
					Dependency: worker.ResourceRef{Kind: LeafKind.Kind, Name: d},
				}
				for _, f := range c.Flows {
					if f.From == d {
						edge.ValueFlows = append(edge.ValueFlows, worker.ValueFlow{DependentField: f.Field, SourceField: f.Source})
					}
				}
				outcome.Edges = append(outcome.Edges, edge)
			}
		}
		outcome.Status = map[string]any{"phase": "composed", "children": len(spec.Children), "language": Language}
		return outcome, nil
	})
}

func (h *handlers) rollup(_ context.Context, req *worker.ReactionRequest) (*worker.Outcome, error) {
	return h.logged(req, func() (*worker.Outcome, error) {
		if req.Rollup == nil {
			return nil, worker.Terminal(errors.New("rollup task without rollup input"))
		}
		children, ready := 0, 0
		for _, d := range req.Rollup.Descendants {
			if d.Owner == nil || d.Owner.Kind != req.Resource.Kind || d.Owner.Name != req.Resource.Name {
				continue // a grandchild
			}
			children++
			if d.Ready {
				ready++
			}
		}
		healthy := ready == children
		phase, reason := "degraded", "ChildrenNotReady"
		if healthy {
			phase, reason = "ready", "ChildrenReady"
		}
		return &worker.Outcome{
			Status:     map[string]any{"phase": phase, "children": children, "ready": ready, "language": Language},
			Conditions: []worker.Condition{{Type: "Ready", Status: worker.ConditionStatusOf(healthy), Reason: reason}},
			Healthy:    worker.Bool(healthy),
		}, nil
	})
}

// sleep waits ms milliseconds or until ctx ends (returning ctx.Err()).
func sleep(ctx context.Context, ms int64) error {
	if ms <= 0 {
		return nil
	}
	t := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sameNumber reports whether a decoded JSON number equals n.
func sameNumber(v any, n int64) bool {
	f, ok := v.(float64)
	return ok && f == float64(n)
}
