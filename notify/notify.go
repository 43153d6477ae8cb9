package notify

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"hookbox.dev/hookbox/internal/config/notifyconf"
)

// Outcome statuses.
const (
	StatusDelivered = "delivered"
	StatusFailed    = "failed"
	StatusTimedOut  = "timed_out"
	StatusFiltered  = "filtered"
	StatusDisabled  = "disabled"
)

// StderrFile is the raw stderr of the notifier in the run record (0600).
const StderrFile = "notify.stderr"

// maxSnippet bounds the stderr snippet shown or stored outside notify.stderr.
const maxSnippet = 2048

// EnvelopeSchemaVersion is the version of the payload.
const EnvelopeSchemaVersion = 1

// Envelope is the payload: the terminal result in brief. Within a schema
// version, fields never change name, type or meaning.
type Envelope struct {
	SchemaVersion int    `json:"schema_version"`
	RunID         string `json:"run_id"`
	Spawn         string `json:"spawn"`
	RenderDigest  string `json:"render_digest"`
	Status        string `json:"status"`
	ExitCode      *int   `json:"exit_code"` // null when the engine never exited on its own
	VerdictStatus string `json:"verdict_status"`
	ResultPath    string `json:"result_path"`
}

// Outcome is the notify section of result.json.
type Outcome struct {
	Status string `json:"status"`           // delivered, failed, timed_out, filtered, disabled
	Reason string `json:"reason,omitempty"` // a Reason* id
	Source string `json:"source,omitempty"` // the layer that decided: flag, spec, config, default
	// Notifier is argv[0]'s basename (never its full path or arguments).
	Notifier string `json:"notifier,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	// Message explains a configuration error; it never repeats argv values.
	Message string `json:"message,omitempty"`
	// StderrPath is the raw stderr (0600); StderrSnippet its redacted start.
	StderrPath    string `json:"stderr_path,omitempty"`
	StderrSnippet string `json:"stderr_snippet,omitempty"`
	DurationMS    int64  `json:"duration_ms,omitempty"`
	// Degraded lists what the notifier ran without, as reason ids:
	// helper-cgroup-unavailable:notify (only its process group bounded it),
	// helper-cleanup-incomplete:notify (its cgroup outlived it; gc removes
	// it).
	Degraded []string `json:"degraded,omitempty"`
}

// Payload encodes the envelope as the notifier receives it.
func (e Envelope) Payload() ([]byte, error) { return json.Marshal(e) }

// selects says whether the filter selects a run, or why not.
func selects(f notifyconf.Filter, status, spawn string) (bool, string) {
	if len(f.Statuses) > 0 && !slices.Contains(f.Statuses, status) {
		return false, ReasonStatusFiltered
	}
	if len(f.Spawns) > 0 && !slices.Contains(f.Spawns, spawn) {
		return false, ReasonSpawnFiltered
	}
	return true, ""
}

// Expand replaces whole-element placeholders.
func Expand(argv []string, env Envelope, payload []byte) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		switch {
		case i == 0:
			out[i] = a
		case a == notifyconf.PlaceholderPayload:
			out[i] = string(payload)
		case a == notifyconf.PlaceholderResultPath:
			out[i] = env.ResultPath
		case a == notifyconf.PlaceholderRunID:
			out[i] = env.RunID
		default:
			out[i] = a
		}
	}
	return out
}

// Redact replaces, longest first, every argv value of at least 4
// characters in text: argv[0] by its basename, argument i by "<arg i>".
func Redact(text string, argv []string) string {
	type pair struct{ old, new string }
	var pairs []pair
	for i, a := range argv {
		if len([]rune(a)) < 4 {
			continue
		}
		repl := fmt.Sprintf("<arg %d>", i)
		if i == 0 {
			repl = "<" + filepath.Base(a) + ">"
		}
		pairs = append(pairs, pair{a, repl})
	}
	sort.SliceStable(pairs, func(i, j int) bool { return len(pairs[i].old) > len(pairs[j].old) })
	var args []string
	for _, p := range pairs {
		args = append(args, p.old, p.new)
	}
	if len(args) == 0 {
		return text
	}
	return strings.NewReplacer(args...).Replace(text)
}

func readFull(f *os.File, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := f.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// snippet reads the start of the raw stderr file and redacts it.
func snippet(path string, argv []string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	// Read more than shown, so that a value straddling the cut is still
	// replaced whole before the cut.
	buf := make([]byte, maxSnippet*4)
	n, _ := readFull(f, buf)
	text := Redact(string(buf[:n]), argv)
	if len(text) > maxSnippet {
		text = text[:maxSnippet] + "…"
	}
	return strings.ToValidUTF8(strings.TrimSpace(text), "?")
}

// Describe is a one-line human summary of an outcome (already redacted).
func (o *Outcome) Describe() string {
	s := o.Status
	if o.Reason != "" {
		s += " (" + o.Reason + ")"
	}
	if o.Notifier != "" {
		s += " by " + o.Notifier
	}
	if o.Message != "" {
		s += ": " + o.Message
	}
	if o.StderrSnippet != "" {
		first, _, _ := strings.Cut(o.StderrSnippet, "\n")
		s += fmt.Sprintf(" — %s: %s", o.Notifier, first)
	}
	if len(o.Degraded) > 0 {
		s += " [degraded " + strings.Join(o.Degraded, ", ") + "]"
	}
	if o.StderrPath != "" {
		s += " [stderr " + o.StderrPath + "]"
	}
	return s
}
