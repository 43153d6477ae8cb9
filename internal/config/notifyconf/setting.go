// Package notifyconf owns the shape of hookbox's notify configuration,
// below the compiler and free of any process execution: one layer's
// Setting as the --notify flags (FlagSetting), a spec's notify block or the
// global config's notify block (ParseNode) write it, and the checks on its
// argv (CheckArgv). Resolving the layers and running the notifier are
// package notify's.
//
// A malformed layer is a Setting with a Reason id, never an error: a notify
// configuration error must not fail the run it describes. A Message never
// repeats argv values.
package notifyconf

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"hookbox.dev/hookbox/internal/shellwords"
	"hookbox.dev/hookbox/internal/yamlnode"
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
)

// Layers, highest precedence first (a Setting's Source).
const (
	SourceFlag   = "flag"
	SourceSpec   = "spec"
	SourceConfig = "config"
)

// Reason ids of a malformed layer (stable strings; they become the
// notify outcome's reason).
const (
	ReasonConfigInvalid       = "config-invalid"       // malformed notify block or flag
	ReasonArgvRefused         = "argv-refused"         // string form needs a shell feature
	ReasonPlaceholderEmbedded = "placeholder-embedded" // {payload} etc. inside a longer element or as argv[0]
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

// SplitString turns the string form of an argv into words
// (docs/contracts.md §4): refused, with the shellwords migration
// diagnostic, when it needs a shell.
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

// setArgv fills s.Argv from a list or a string and checks it.
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
	n = yamlnode.Deref(n)
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
		key, v := n.Content[i].Value, yamlnode.Deref(n.Content[i+1])
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
					item = yamlnode.Deref(item)
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
					return bad("unknown field filter.%s at line %d, column %d (known: statuses, spawns)", fk, v.Content[j].Line, v.Content[j].Column)
				}
			}
		default:
			return bad("unknown field %s at line %d, column %d (known: enabled, argv, timeout, filter)", key, n.Content[i].Line, n.Content[i].Column)
		}
	}
	if s.Argv != nil {
		s.setArgv(s.Argv)
	}
	return s
}

func stringList(n *yaml.Node) ([]string, bool) {
	n = yamlnode.Deref(n)
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil, false
	}
	var out []string
	for _, item := range n.Content {
		item = yamlnode.Deref(item)
		if item == nil || item.Kind != yaml.ScalarNode || item.Tag != "!!str" {
			return nil, false
		}
		out = append(out, item.Value)
	}
	return out, true
}
