// Package notify owns the host-side notifier: the program hookbox runs once
// a run has reached its terminal result (CONTRACTS §4).
//
// It owns the notify configuration (its three layers and their precedence),
// the payload (the terminal envelope), and running the notifier: argv only,
// no shell, its own process group, a deadline, an allow-listed environment,
// and stderr kept raw in an owner-only file while every snippet shown is
// redacted. It never changes a run's outcome: whatever happens here ends up
// in an Outcome, never in the run's status or exit code, and a configuration
// error is an Outcome (failed, with a reason id), never an error that stops
// the run.
//
// What it does not do: it does not retry, and it does not read the
// notifier's stdout.
package notify

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"hookbox.dev/hookbox/internal/shellwords"
)

// Placeholders: an argv element that is exactly one of these is replaced by
// the value as one whole element; a placeholder inside a longer element is a
// configuration error.
const (
	PlaceholderPayload    = "{payload}"
	PlaceholderResultPath = "{result_path}"
	PlaceholderRunID      = "{run_id}"
)

var placeholders = []string{PlaceholderPayload, PlaceholderResultPath, PlaceholderRunID}

const (
	// DefaultTimeout is the notifier's deadline when the config sets none.
	DefaultTimeout = 30 * time.Second
	// MaxTimeout is the largest deadline a config may set.
	MaxTimeout = 10 * time.Minute
	// DefaultGrace is the time between SIGTERM and SIGKILL at the deadline.
	DefaultGrace  = 2 * time.Second
	maxConfigSize = 1 << 20
)

// Layers, highest precedence first.
const (
	SourceFlag    = "flag"
	SourceSpec    = "spec"
	SourceConfig  = "config"
	SourceDefault = "default"
)

// Reason ids of Outcome.Reason (stable strings).
const (
	ReasonConfigInvalid       = "config-invalid"       // malformed notify block or flag
	ReasonArgvRefused         = "argv-refused"         // string form needs a shell feature
	ReasonPlaceholderEmbedded = "placeholder-embedded" // {payload} etc. inside a longer element or as argv[0]
	ReasonEmptyArgv           = "empty-argv"           // enabled with no argv: disabled, with a warning
	ReasonNotEnabled          = "not-enabled"          // enabled: false
	ReasonNotConfigured       = "not-configured"       // no layer says anything
	ReasonStatusFiltered      = "status-not-selected"  // filter.statuses excludes the run's status
	ReasonSpawnFiltered       = "spawn-not-selected"   // filter.spawns excludes the spawn
	ReasonStartFailed         = "start-failed"         // the notifier could not be started
	ReasonExitNonZero         = "exit-nonzero"         // the notifier exited with a non-zero code
	ReasonSignaled            = "signaled"             // the notifier was killed by a signal it was not sent by us
	ReasonDeadline            = "deadline"             // timed_out: the deadline passed
	ReasonCancelled           = "cancelled"            // failed: hookbox was cancelled while it ran
	ReasonRecordFailed        = "record-failed"        // notify.stderr could not be created
	ReasonPayloadFailed       = "payload-failed"       // the envelope could not be encoded
)

// Filter selects the runs that are notified. An empty list selects all.
type Filter struct {
	Statuses []string `json:"statuses,omitempty"`
	Spawns   []string `json:"spawns,omitempty"`
}

// Setting is what one layer (flag, spec, global config) says. The zero
// Setting says nothing, and the next layer decides.
type Setting struct {
	Present bool   // the layer has a notify block (or flag)
	Source  string // SourceFlag, SourceSpec, SourceConfig
	Enabled *bool  // nil: not written, which means enabled when argv is given
	Argv    []string
	Timeout time.Duration // 0: DefaultTimeout
	Filter  Filter
	// Reason and Message are set when the layer is malformed; such a layer
	// still wins precedence, so that a broken flag is reported rather than
	// silently replaced by a lower layer. Message never repeats argv values.
	Reason  string
	Message string
}

// Plan is the resolved configuration for one run.
type Plan struct {
	Source  string // the layer that decided
	Enabled bool
	Argv    []string
	Timeout time.Duration
	Filter  Filter
	// Reason is why the plan is not enabled (not-configured, not-enabled,
	// empty-argv) or why it is invalid (a config reason); Invalid says which.
	Reason  string
	Invalid bool
	Message string
	// Warning is for the terminal (empty argv).
	Warning string
}

// Resolve picks the first present layer, in the order given (flag, spec,
// global config): precedence is per layer, not per field, so a spec's
// notify block replaces the global one whole. Absent everywhere and
// enabled: false both resolve to disabled; an enabled layer with no argv
// resolves to disabled with a warning.
func Resolve(layers ...Setting) Plan {
	for _, s := range layers {
		if !s.Present {
			continue
		}
		p := Plan{Source: s.Source, Argv: s.Argv, Timeout: s.Timeout, Filter: s.Filter}
		switch {
		case s.Reason != "":
			p.Invalid, p.Reason, p.Message = true, s.Reason, s.Message
		case s.Enabled != nil && !*s.Enabled:
			p.Reason = ReasonNotEnabled
		case len(s.Argv) == 0:
			p.Reason = ReasonEmptyArgv
			p.Warning = fmt.Sprintf("notify (%s): enabled but argv is empty; notification is disabled", s.Source)
		default:
			p.Enabled = true
		}
		if p.Timeout <= 0 {
			p.Timeout = DefaultTimeout
		}
		return p
	}
	return Plan{Source: SourceDefault, Reason: ReasonNotConfigured, Timeout: DefaultTimeout}
}

// CheckArgv checks an argv's placeholders: each must be a whole element,
// and argv[0] must be a program, not a placeholder.
func CheckArgv(argv []string) (reason, msg string) {
	for i, a := range argv {
		for _, ph := range placeholders {
			if !strings.Contains(a, ph) {
				continue
			}
			if i == 0 {
				return ReasonPlaceholderEmbedded, fmt.Sprintf("argv[0] must name the notifier program, not the placeholder %s", ph)
			}
			if a != ph {
				return ReasonPlaceholderEmbedded, fmt.Sprintf("argv[%d] embeds %s in a longer argument; a placeholder must be a whole argv element (write it as its own list item)", i, ph)
			}
		}
	}
	return "", ""
}

// SplitString turns the string form of an argv into words (CONTRACTS §4):
// refused, with the shellwords migration diagnostic, when it needs a shell.
func SplitString(s string) ([]string, string, string) {
	words, err := shellwords.Split(s)
	if err != nil {
		var re *shellwords.RefusedError
		if errors.As(err, &re) && re.Feature == "empty" {
			return nil, "", ""
		}
		return nil, ReasonArgvRefused, err.Error()
	}
	return words, "", ""
}

// argvSetting fills s.Argv from a list or a string and checks it.
func (s *Setting) setArgv(argv []string) {
	if reason, msg := CheckArgv(argv); reason != "" {
		s.Reason, s.Message = reason, msg
		return
	}
	s.Argv = argv
}

// FlagSetting is the per-run flag layer: value is an argv as a JSON (or
// YAML flow) list, e.g. '["/usr/local/bin/notify", "{payload}"]', or a
// string split as POSIX words; disable turns notification off for the run.
// set says whether any notify flag was given.
func FlagSetting(set bool, value string, timeout time.Duration, disable bool) Setting {
	if !set {
		return Setting{}
	}
	s := Setting{Present: true, Source: SourceFlag, Timeout: timeout}
	if disable {
		f := false
		s.Enabled = &f
		return s
	}
	if timeout < 0 || timeout > MaxTimeout {
		s.Reason, s.Message = ReasonConfigInvalid, fmt.Sprintf("--notify-timeout must be positive and at most %s", MaxTimeout)
		return s
	}
	trimmed := strings.TrimSpace(value)
	if strings.HasPrefix(trimmed, "[") {
		var argv []string
		if err := json.Unmarshal([]byte(trimmed), &argv); err != nil {
			if yerr := yaml.Unmarshal([]byte(trimmed), &argv); yerr != nil {
				s.Reason, s.Message = ReasonConfigInvalid, "--notify: a value starting with [ must be a list of strings"
				return s
			}
		}
		s.setArgv(argv)
		return s
	}
	argv, reason, msg := SplitString(value)
	if reason != "" {
		s.Reason, s.Message = reason, "--notify: "+msg
		return s
	}
	s.setArgv(argv)
	return s
}

// ParseNode reads a notify block (a YAML mapping) written in source. It
// never fails: a malformed block is a Setting with Reason set.
func ParseNode(n *yaml.Node, source string) Setting {
	s := Setting{Present: true, Source: source}
	n = deref(n)
	if n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
		return Setting{}
	}
	bad := func(format string, args ...any) Setting {
		s.Reason, s.Message = ReasonConfigInvalid, "notify: "+fmt.Sprintf(format, args...)
		s.Argv = nil
		return s
	}
	if n.Kind != yaml.MappingNode {
		return bad("must be a mapping with enabled, argv, timeout and filter")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, v := n.Content[i].Value, deref(n.Content[i+1])
		if v == nil {
			return bad("%s: unreadable value", key)
		}
		switch key {
		case "enabled":
			if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" {
				return bad("enabled must be true or false")
			}
			b := v.Value == "true" || v.Value == "True" || v.Value == "TRUE"
			s.Enabled = &b
		case "argv":
			switch {
			case v.Kind == yaml.SequenceNode:
				argv := make([]string, 0, len(v.Content))
				for j, item := range v.Content {
					item = deref(item)
					if item == nil || item.Kind != yaml.ScalarNode || item.Tag != "!!str" {
						return bad("argv[%d] must be a string", j)
					}
					argv = append(argv, item.Value)
				}
				s.Argv = argv
			case v.Kind == yaml.ScalarNode && v.Tag == "!!str":
				argv, reason, msg := SplitString(v.Value)
				if reason != "" {
					s.Reason, s.Message = reason, "notify.argv: "+msg
					return s
				}
				s.Argv = argv
			case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
			default:
				return bad("argv must be a list of strings")
			}
		case "timeout":
			if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
				return bad("timeout must be a duration with a unit, e.g. 30s")
			}
			d, err := time.ParseDuration(v.Value)
			if err != nil || d <= 0 || d > MaxTimeout {
				return bad("timeout %q must be a positive duration of at most %s", v.Value, MaxTimeout)
			}
			s.Timeout = d
		case "filter":
			if v.Kind != yaml.MappingNode {
				return bad("filter must be a mapping with statuses and spawns")
			}
			for j := 0; j+1 < len(v.Content); j += 2 {
				fk := v.Content[j].Value
				list, ok := stringList(v.Content[j+1])
				if !ok {
					return bad("filter.%s must be a list of strings", fk)
				}
				switch fk {
				case "statuses":
					s.Filter.Statuses = list
				case "spawns":
					s.Filter.Spawns = list
				default:
					return bad("unknown field filter.%s (known: statuses, spawns)", fk)
				}
			}
		default:
			return bad("unknown field %s (known: enabled, argv, timeout, filter)", key)
		}
	}
	if s.Argv != nil {
		s.setArgv(s.Argv)
	}
	return s
}

func stringList(n *yaml.Node) ([]string, bool) {
	n = deref(n)
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil, false
	}
	var out []string
	for _, item := range n.Content {
		item = deref(item)
		if item == nil || item.Kind != yaml.ScalarNode || item.Tag != "!!str" {
			return nil, false
		}
		out = append(out, item.Value)
	}
	return out, true
}

func deref(n *yaml.Node) *yaml.Node {
	for depth := 0; n != nil && n.Kind == yaml.AliasNode && depth < 16; depth++ {
		n = n.Alias
	}
	if n != nil && n.Kind == yaml.AliasNode {
		return nil
	}
	return n
}

// LoadGlobal reads the top-level notify block of the user's global config
// file (the file secrets reads its lookup from; other keys are ignored
// here). A missing file or a file without notify says nothing. A file that
// cannot be read or parsed is an invalid layer, not an error: it must not
// stop the run.
func LoadGlobal(path string) Setting {
	if path == "" {
		return Setting{}
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Setting{}
	}
	if err != nil {
		return Setting{Present: true, Source: SourceConfig, Reason: ReasonConfigInvalid, Message: "global config: cannot be read: " + errText(err)}
	}
	defer f.Close()
	data := make([]byte, maxConfigSize+1)
	n, _ := readFull(f, data)
	if n > maxConfigSize {
		return Setting{Present: true, Source: SourceConfig, Reason: ReasonConfigInvalid, Message: "global config: larger than 1 MiB"}
	}
	return ParseGlobal(data[:n])
}

// ParseGlobal reads the notify block of global config bytes.
func ParseGlobal(data []byte) Setting {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return Setting{Present: true, Source: SourceConfig, Reason: ReasonConfigInvalid, Message: "global config: not valid YAML"}
	}
	if len(doc.Content) == 0 {
		return Setting{}
	}
	root := deref(doc.Content[0])
	if root == nil || root.Kind != yaml.MappingNode {
		return Setting{}
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "notify" {
			return ParseNode(root.Content[i+1], SourceConfig)
		}
	}
	return Setting{}
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

func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
