package launcher

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Event types of the --json stream. Every event carries type, time and
// run_id; the other fields depend on the type. The set may grow; the
// fields of a type never change meaning.
const (
	EventProgress = "progress" // phase, detail
	EventSpawned  = "spawned"  // spawned: the spawn record
	EventOutput   = "output"   // stream, data
	EventResult   = "result"   // result: result.json
	EventExec     = "exec"     // exec: one traced exec (the trace.jsonl line)
	EventNotify   = "notify"   // notify: the notifier's outcome, after result
	EventNetwork  = "network"  // network: one connection attempt through the egress proxy (the network.jsonl line)
)

// Event is one line of the --json stream.
type Event struct {
	Type    string          `json:"type"`
	Time    time.Time       `json:"time"`
	RunID   string          `json:"run_id"`
	Phase   string          `json:"phase,omitempty"`
	Detail  string          `json:"detail,omitempty"`
	Stream  string          `json:"stream,omitempty"`
	Data    string          `json:"data,omitempty"`
	Spawned *Spawned        `json:"spawned,omitempty"`
	Result  *Result         `json:"result,omitempty"`
	Exec    json.RawMessage `json:"exec,omitempty"`
	Notify  *NotifyResult   `json:"notify,omitempty"`
	Network json.RawMessage `json:"network,omitempty"`
}

// Sink receives a run's events in order.
type Sink interface {
	Emit(Event)
}

// JSONSink writes one JSON object per line.
type JSONSink struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func NewJSONSink(w io.Writer) *JSONSink {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return &JSONSink{enc: enc}
}

func (s *JSONSink) Emit(e Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.enc.Encode(e)
}

// SinkFunc adapts a function to a Sink.
type SinkFunc func(Event)

func (f SinkFunc) Emit(e Event) { f(e) }
