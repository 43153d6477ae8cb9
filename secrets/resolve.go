package secrets

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"hookbox.dev/hookbox/internal/config/secretsconf"
	"hookbox.dev/hookbox/launcher/cgroup"
)

// MaxOutput is the most a lookup may print to stdout, in bytes, before the
// lookup fails.
const MaxOutput = 64 << 10

// ResolveReason is a stable machine-readable reason a secret could not be
// resolved. Its string values are part of hookbox's interface: never rename
// them.
type ResolveReason string

const (
	// ReasonNotSet: absent from the host environment, and lookup is not
	// configured or is disabled.
	ReasonNotSet ResolveReason = "not-set"
	// ReasonLookupRefused: absent from the host environment, and the lookup
	// configuration was refused (ResolveError.Refusal says why).
	ReasonLookupRefused ResolveReason = "lookup-refused"
	// ReasonLookupStartFailed: the lookup program could not be started.
	ReasonLookupStartFailed ResolveReason = "lookup-start-failed"
	// ReasonLookupFailed: the lookup exited non-zero or was killed by a signal.
	ReasonLookupFailed ResolveReason = "lookup-failed"
	// ReasonLookupTimeout: the lookup did not finish within its timeout.
	ReasonLookupTimeout ResolveReason = "lookup-timeout"
	// ReasonLookupCanceled: the context ended while the lookup ran (or
	// before it started).
	ReasonLookupCanceled ResolveReason = "lookup-canceled"
	// ReasonLookupEmpty: the lookup succeeded but printed nothing (after
	// trimming one trailing newline).
	ReasonLookupEmpty ResolveReason = "lookup-empty"
	// ReasonLookupOutputTooLarge: the lookup printed more than MaxOutput bytes.
	ReasonLookupOutputTooLarge ResolveReason = "lookup-output-too-large"
	// ReasonLookupOutputInvalid: the lookup printed a NUL byte, which no
	// environment variable can hold.
	ReasonLookupOutputInvalid ResolveReason = "lookup-output-invalid"
)

// ResolveError reports a secret that could not be resolved. It carries the
// variable name, the lookup program's basename and its exit status — never
// the lookup's output, its other arguments, or a value.
type ResolveError struct {
	Name   string
	Reason ResolveReason
	// Program is the basename of the lookup's argv[0], when a lookup was
	// attempted.
	Program string
	// ExitStatus is the lookup's exit status when it exited on its own
	// (lookup-failed, lookup-empty, lookup-output-invalid), else -1.
	ExitStatus int
	// State is the lookup state that applied (for not-set and lookup-refused).
	State secretsconf.LookupState
	// Refusal is the configuration refusal, for lookup-refused.
	Refusal secretsconf.Refusal
	// Source is the global config file path, for messages.
	Source string

	detail string // fixed wording chosen by this package; never program output
	err    error  // the context's error, for lookup-canceled
}

func (e *ResolveError) Error() string {
	prog := fmt.Sprintf("lookup program %q", e.Program)
	var b strings.Builder
	fmt.Fprintf(&b, "secret %s: ", e.Name)
	switch e.Reason {
	case ReasonNotSet, ReasonLookupRefused:
		b.WriteString("not set in the host environment and ")
		switch e.State {
		case secretsconf.Disabled:
			b.WriteString("secret lookup is disabled" + e.in() + "; export " + e.Name + " or set secrets.lookup.enabled: true")
		case secretsconf.Refused:
			fmt.Fprintf(&b, "the secret lookup configuration%s was refused (%s)", e.in(), e.Refusal)
			if e.detail != "" {
				b.WriteString(": " + e.detail)
			}
			b.WriteString("; fix secrets.lookup or export " + e.Name)
		default:
			b.WriteString("no secret lookup is configured" + e.in() + "; export " + e.Name + " or configure secrets.lookup")
		}
	case ReasonLookupStartFailed:
		b.WriteString("could not start " + prog)
		if e.detail != "" {
			b.WriteString(": " + e.detail)
		}
	case ReasonLookupFailed:
		if e.detail != "" {
			b.WriteString(prog + " " + e.detail)
		} else {
			fmt.Fprintf(&b, "%s exited with status %d", prog, e.ExitStatus)
		}
	case ReasonLookupTimeout:
		b.WriteString(prog + " did not finish within the configured timeout and was killed; raise secrets.lookup.timeout" + e.in() + " if it needs longer")
	case ReasonLookupCanceled:
		b.WriteString(prog + " was stopped because the launch was canceled")
	case ReasonLookupEmpty:
		b.WriteString(prog + " exited successfully but printed nothing on stdout")
	case ReasonLookupOutputTooLarge:
		fmt.Fprintf(&b, "%s printed more than %d bytes on stdout; it must print only the secret value", prog, MaxOutput)
	case ReasonLookupOutputInvalid:
		b.WriteString(prog + " printed a NUL byte, which an environment variable cannot hold")
	default:
		b.WriteString(string(e.Reason))
	}
	return b.String()
}

// Unwrap returns the context's error for lookup-canceled, so errors.Is(err,
// context.Canceled) works.
func (e *ResolveError) Unwrap() error { return e.err }

func (e *ResolveError) in() string {
	if e.Source == "" {
		return ""
	}
	return " in " + e.Source
}

// Resolver resolves secret values at launch time.
type Resolver struct {
	Lookup secretsconf.Lookup
	// LookupEnv reads the host environment; nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Environ is the lookup process's environment. The lookup is the user's
	// own program, so it may inherit the host environment; nil means the
	// current process's environment (as in os/exec).
	Environ []string
	// Cgroups is where each lookup gets a cgroup of its own, named after
	// RunID (the backend's); the zero value gives none.
	Cgroups cgroup.Helpers
	RunID   string
	// Degraded, if set, is told of every lookup that ran without what
	// Cgroups should have given it: the reason id
	// (helper-cgroup-unavailable:lookup, helper-cleanup-incomplete:lookup)
	// and why, in words that hold no configured value.
	Degraded func(reason, why string)
}

// HelperKind names the lookups' cgroups (lookup-1, lookup-2, … in the
// order they run) and their degraded reasons.
const HelperKind = "lookup"

// helper is how one lookup is contained.
type helper struct {
	cgroups     cgroup.Helpers
	runID, role string
}

// Resolve returns name → value for every name, resolved in order. A name
// present in the host environment, even with an empty value, is used as-is
// and never looked up. Otherwise the lookup runs when Enabled; in any other
// state the name is an error.
//
// The names are checked with CheckNames first (a duplicate is a programming
// error); that is also what makes substituting a name into argv safe.
// Resolve stops at the first failure and then returns a nil map: a launch
// never proceeds with some of its secrets.
func (r Resolver) Resolve(ctx context.Context, names []string) (map[string]string, error) {
	if err := secretsconf.CheckNames(names); err != nil {
		return nil, fmt.Errorf("resolve secrets: %w", err)
	}
	lookupEnv := r.LookupEnv
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	values := make(map[string]string, len(names))
	lookups := 0
	for _, name := range names {
		if v, ok := lookupEnv(name); ok {
			values[name] = v
			continue
		}
		lookups++
		v, err := r.lookup(ctx, name, helper{r.Cgroups, r.RunID, fmt.Sprintf("%s-%d", HelperKind, lookups)})
		if err != nil {
			return nil, err
		}
		values[name] = v
	}
	return values, nil
}

func (r Resolver) lookup(ctx context.Context, name string, h helper) (string, error) {
	l := r.Lookup
	e := &ResolveError{Name: name, ExitStatus: -1, State: l.State, Source: l.Source}
	switch l.State {
	case secretsconf.Enabled:
	case secretsconf.NotConfigured, secretsconf.Disabled:
		e.Reason = ReasonNotSet
		return "", e
	case secretsconf.Refused:
		e.Reason, e.Refusal, e.detail = ReasonLookupRefused, l.Reason, l.Message
		return "", e
	default:
		e.Reason, e.Refusal, e.detail = ReasonLookupRefused, secretsconf.RefusalConfigInvalid, "unknown lookup state"
		e.State = secretsconf.Refused
		return "", e
	}

	// A Lookup can be built in code, so it is checked again here: refusal
	// is total whatever the Lookup's origin.
	if reason, _, msg := secretsconf.CheckArgv(l.Argv); reason != "" {
		e.Reason, e.State, e.Refusal, e.detail = ReasonLookupRefused, secretsconf.Refused, reason, msg
		return "", e
	}
	timeout := l.Timeout
	if timeout == 0 {
		timeout = secretsconf.DefaultTimeout
	}
	if timeout < 0 || timeout > secretsconf.MaxTimeout {
		e.Reason, e.State, e.Refusal, e.detail = ReasonLookupRefused, secretsconf.Refused, secretsconf.RefusalTimeoutInvalid, "the timeout is out of range (greater than 0, at most 10m)"
		return "", e
	}

	e.Program = filepath.Base(l.Argv[0])
	if err := ctx.Err(); err != nil {
		e.Reason, e.err = ReasonLookupCanceled, err
		return "", e
	}
	argv := make([]string, len(l.Argv))
	argv[0] = l.Argv[0]
	for i, a := range l.Argv[1:] {
		argv[i+1] = strings.ReplaceAll(a, secretsconf.Placeholder, name)
	}

	out, res := runLookup(ctx, argv, r.Environ, timeout, h)
	defer clear(out)
	if r.Degraded != nil {
		for _, d := range res.degraded {
			r.Degraded(d, res.uncontained)
		}
	}
	if res.reason != "" {
		e.Reason, e.ExitStatus, e.detail, e.err = res.reason, res.status, res.detail, res.err
		return "", e
	}
	value := trimNewline(out)
	switch {
	case len(value) == 0:
		e.Reason, e.ExitStatus = ReasonLookupEmpty, 0
		return "", e
	case bytes.IndexByte(value, 0) >= 0:
		e.Reason, e.ExitStatus = ReasonLookupOutputInvalid, 0
		return "", e
	}
	return string(value), nil
}

// runResult is how a lookup process ended when it did not succeed.
type runResult struct {
	reason ResolveReason // empty on success
	status int           // exit status, or -1
	detail string        // fixed wording, never program output
	err    error         // context error for lookup-canceled
	// degraded are the lookup's degraded reason ids, uncontained why it
	// had no cgroup (procgroup.Result), whether it succeeded or not.
	degraded    []string
	uncontained string
}

// trimNewline removes one trailing "\n" or "\r\n", as printed by most
// secret stores after the value.
func trimNewline(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
		if n := len(b); n > 0 && b[n-1] == '\r' {
			b = b[:n-1]
		}
	}
	return b
}

// cappedBuffer collects stdout up to MaxOutput bytes. Past the cap it fails
// the write, which makes os/exec stop reading and close the pipe, so a
// runaway lookup gets EPIPE instead of being read forever. Its storage is
// allocated once at full size so that no stale copy of a value is left
// behind by growth, and the caller can wipe it.
type cappedBuffer struct {
	buf      []byte
	overflow bool
}

func newCappedBuffer() *cappedBuffer {
	return &cappedBuffer{buf: make([]byte, 0, MaxOutput)}
}

var errOutputTooLarge = fmt.Errorf("lookup output exceeds %d bytes", MaxOutput)

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if len(c.buf)+len(p) > MaxOutput {
		c.overflow = true
		return 0, errOutputTooLarge
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}
