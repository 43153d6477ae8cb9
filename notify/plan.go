// Package notify runs the host-side notifier: the program hookbox runs once
// a run has reached its terminal result (docs/contracts.md).
//
// It resolves the notify layers (flag, spec, global config; their shape is
// package internal/config/notifyconf's) into a Plan, builds the payload
// (the terminal envelope), and runs the notifier: argv only, no shell, its
// own process group, a deadline, an allow-listed environment, and stderr
// kept raw in an owner-only file while every snippet shown is redacted. It
// never changes a run's outcome: whatever happens here ends up in an
// Outcome, never in the run's status or exit code, and a configuration
// error is an Outcome (failed, with a reason id), never an error that stops
// the run.
//
// What it does not do: it does not retry, and it does not read the
// notifier's stdout.
package notify

import (
	"fmt"
	"path/filepath"
	"time"

	"hookbox.dev/hookbox/internal/config/notifyconf"
)

// DefaultGrace is the time between SIGTERM and SIGKILL at the deadline.
const DefaultGrace = 2 * time.Second

// SourceDefault is the Plan's source when no layer says anything.
const SourceDefault = "default"

// Reason ids of Outcome.Reason (stable strings), besides the configuration
// reasons of a malformed layer (notifyconf.Reason*).
const (
	ReasonEmptyArgv      = "empty-argv"          // enabled with no argv: disabled, with a warning
	ReasonNotEnabled     = "not-enabled"         // enabled: false
	ReasonNotConfigured  = "not-configured"      // no layer says anything
	ReasonStatusFiltered = "status-not-selected" // filter.statuses excludes the run's status
	ReasonSpawnFiltered  = "spawn-not-selected"  // filter.spawns excludes the spawn
	ReasonStartFailed    = "start-failed"        // the notifier could not be started
	ReasonExitNonZero    = "exit-nonzero"        // the notifier exited with a non-zero code
	ReasonSignaled       = "signaled"            // the notifier was killed by a signal it was not sent by us
	ReasonDeadline       = "deadline"            // timed_out: the deadline passed
	ReasonCancelled      = "cancelled"           // failed: hookbox was cancelled while it ran
	ReasonRecordFailed   = "record-failed"       // notify.stderr could not be created
	ReasonPayloadFailed  = "payload-failed"      // the envelope could not be encoded
)

// Plan is the resolved configuration for one run.
type Plan struct {
	Source  string // the layer that decided
	Enabled bool
	Argv    []string
	Timeout time.Duration
	Filter  notifyconf.Filter
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
func Resolve(layers ...notifyconf.Setting) Plan {
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
			p.Timeout = notifyconf.DefaultTimeout
		}
		return p
	}
	return Plan{Source: SourceDefault, Reason: ReasonNotConfigured, Timeout: notifyconf.DefaultTimeout}
}

// skip is the outcome of a plan that starts no notifier for a run of this
// status and spawn (disabled, invalid, filtered out, a refused argv); nil
// when Run starts one.
func (p Plan) skip(status, spawn string) *Outcome {
	out := &Outcome{Source: p.Source}
	if len(p.Argv) > 0 {
		out.Notifier = filepath.Base(p.Argv[0])
	}
	switch {
	case p.Invalid:
		out.Status, out.Reason, out.Message = StatusFailed, p.Reason, p.Message
	case !p.Enabled:
		out.Status, out.Reason = StatusDisabled, p.Reason
	default:
		if ok, reason := selects(p.Filter, status, spawn); !ok {
			out.Status, out.Reason = StatusFiltered, reason
		} else if reason, msg := notifyconf.CheckArgv(p.Argv); reason != "" {
			out.Status, out.Reason, out.Message = StatusFailed, reason, msg
		} else {
			return nil
		}
	}
	return out
}

// Starts reports whether Run starts a notifier for a run of this status
// and spawn: the launcher says, before it seals the result, that one will
// run without a cgroup of its own.
func (p Plan) Starts(status, spawn string) bool { return p.skip(status, spawn) == nil }

// Skipped is the outcome of a run of this status and spawn for which Run
// starts no notifier (what Run would return), or nil when it starts one:
// the launcher records it with the result instead of rewriting the result
// after Run.
func (p Plan) Skipped(status, spawn string) *Outcome { return p.skip(status, spawn) }
