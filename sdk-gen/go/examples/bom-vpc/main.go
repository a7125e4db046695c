// Command bom-vpc serves the BOM demo's vpc kind (examples/bom/vpc.json) v1 in
// Go: the same behaviour and ids as the Rust leaf (examples/src/bom/leaves.rs,
// examples/src/sim.rs), for `converge dev --external-kinds vpc,...`. Its work
// reaction waits for spec.accountId (a value flow from the team's account),
// sleeps a random 0.5-1.5 x DEMO_DELAY_MS (default 400, 0 = none) and reports
// the VPC's id. SIGTERM or SIGINT drains and exits.
//
//	cd sdk-gen/go && CONVERGE_BROKER_ADDR=http://127.0.0.1:50051 go run ./examples/bom-vpc
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"converge.dev/sdk/go/converge/worker"
)

// vpcSpec is the spec of a vpc; AccountID flows in from the account.
type vpcSpec struct {
	Team      *string `json:"team"`
	CIDR      *string `json:"cidr"`
	AccountID *string `json:"accountId"`
}

// fingerprint is 64-bit FNV-1a over kind, '/' and name (as sim::fingerprint).
func fingerprint(kind, name string) uint64 {
	hash := uint64(0xcbf29ce484222325)
	for _, b := range []byte(kind + "/" + name) {
		hash = (hash ^ uint64(b)) * 0x100000001b3
	}
	return hash
}

func vpcID(name string) string {
	return fmt.Sprintf("vpc-%012x", fingerprint("vpc", name)&0xffffffffffff)
}

// latency sleeps a uniformly random 0.5-1.5 x base; it fails when ctx ends first.
func latency(ctx context.Context, baseMS int) error {
	if baseMS <= 0 {
		return nil
	}
	low := baseMS / 2
	delay := time.Duration(low+rand.IntN(baseMS+baseMS/2-low+1)) * time.Millisecond
	select {
	case <-time.After(delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// decodeSpec decodes the spec strictly: unknown, missing or mistyped fields
// are terminal (retrying the same spec cannot help).
func decodeSpec(spec map[string]any) (vpcSpec, error) {
	var s vpcSpec
	raw, err := json.Marshal(spec)
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		err = dec.Decode(&s)
	}
	if err == nil && (s.Team == nil || s.CIDR == nil) {
		err = fmt.Errorf("team and cidr are required")
	}
	if err != nil {
		return s, worker.Terminalf("InvalidSpec", "invalid vpc spec: %v", err)
	}
	return s, nil
}

func work(baseMS int) func(context.Context, *worker.ReactionRequest) (*worker.Outcome, error) {
	return func(ctx context.Context, req *worker.ReactionRequest) (*worker.Outcome, error) {
		spec, err := decodeSpec(req.Resource.Spec)
		if err != nil {
			return nil, err
		}
		if spec.AccountID == nil || *spec.AccountID == "" {
			return nil, worker.Transientf("WaitingForUpstream", "spec.accountId is not set yet (it flows from the account)")
		}
		if err := latency(ctx, baseMS); err != nil {
			return nil, err
		}
		id, accountID := vpcID(req.Resource.Name), *spec.AccountID
		return &worker.Outcome{
			Status: map[string]any{"vpcId": id, "accountId": accountID, "cidr": *spec.CIDR},
			Conditions: []worker.Condition{{
				Type:    "Ready",
				Status:  worker.ConditionTrue,
				Reason:  "Provisioned",
				Message: fmt.Sprintf("vpc %s (%s) for team %s in account %s", id, *spec.CIDR, *spec.Team, accountID),
			}},
		}, nil
	}
}

func main() {
	baseMS := 400
	if v := os.Getenv("DEMO_DELAY_MS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			slog.Error("bad configuration", "DEMO_DELAY_MS", v)
			os.Exit(2)
		}
		baseMS = n
	}
	w, err := worker.New(cmp.Or(os.Getenv("CONVERGE_BROKER_ADDR"), "http://127.0.0.1:50051"),
		worker.WithHandler(worker.KindVersion{Kind: "vpc", Version: 1}, worker.Reactions{"work": work(baseMS)}))
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
