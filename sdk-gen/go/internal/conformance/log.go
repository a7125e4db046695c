package conformance

import (
	"encoding/json"
	"os"

	"converge.dev/sdk/go/converge/worker"
)

// Language is the value of the "language" field of log lines and statuses.
const Language = "go"

// Event log line kinds.
const (
	EventStart    = "start"
	EventEnd      = "end"
	EventTeardown = "teardown"
	// EventSideEffect stands for what a real composer does to the world;
	// written by a compose that is not a plan.
	EventSideEffect = "side-effect"
)

// Line is one line of the conformance log; the field order is the contract's.
type Line struct {
	Event      string `json:"event"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Reaction   string `json:"reaction"`
	Generation int64  `json:"generation"`
	Attempt    int32  `json:"attempt"`
	Plan       bool   `json:"plan"`
	Language   string `json:"language"`
}

// Log appends one JSON line per handler start, end and teardown to a file. A
// nil *Log writes nothing.
type Log struct {
	f *os.File
}

// OpenLog opens path for appending (creating it if needed).
func OpenLog(path string) (*Log, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Log{f: f}, nil
}

// Close closes the file.
func (l *Log) Close() error {
	if l == nil {
		return nil
	}
	return l.f.Close()
}

// Write appends the line for event about req. Each line is one write call on
// an O_APPEND file, so lines of concurrent handlers (and processes) never
// interleave. A write error is returned to the handler, which fails its task:
// a missing line would make the runner's checks lie.
func (l *Log) Write(event string, req *worker.ReactionRequest) error {
	if l == nil {
		return nil
	}
	b, err := json.Marshal(Line{
		Event:      event,
		Kind:       req.Kind.Kind,
		Name:       req.Resource.Name,
		Reaction:   req.Reaction,
		Generation: req.Generation,
		Attempt:    req.Attempt,
		Plan:       req.Plan,
		Language:   Language,
	})
	if err != nil {
		return err
	}
	_, err = l.f.Write(append(b, '\n'))
	return err
}
