//go:build linux

package notify

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"hookbox.dev/hookbox/internal/config/notifyconf"
	"hookbox.dev/hookbox/internal/procgroup"
	"hookbox.dev/hookbox/launcher/cgroup"
)

// DefaultEnvAllow is the notifier's environment by default: the names are
// copied from hookbox's environment when set; nothing else is inherited.
var DefaultEnvAllow = []string{"PATH", "HOME"}

// Options of Run.
type Options struct {
	// RecordDir is the run record; notify.stderr is written there.
	RecordDir string
	// Grace between SIGTERM and SIGKILL at the deadline (DefaultGrace if 0).
	Grace time.Duration
	// EnvAllow names the variables passed on (DefaultEnvAllow if nil).
	EnvAllow []string
	// LookupEnv is os.LookupEnv in production.
	LookupEnv func(string) (string, bool)
	// Cgroups is where the notifier gets a cgroup of its own (the
	// backend's); the zero value gives none, and the outcome says so.
	Cgroups cgroup.Helpers
}

// HelperRole names the notifier's cgroup and its degraded reasons.
const HelperRole = "notify"

// DegradedUncontained is the degraded reason of a notifier without a
// cgroup of its own.
const DegradedUncontained = procgroup.DegradedUncontained + ":" + HelperRole

// Run notifies about a terminal run according to plan and returns the
// outcome; it never returns an error. The notifier gets the payload on
// stdin and wherever argv holds {payload}; it runs without a shell in its
// own process group and, where opts.Cgroups gives one, in a cgroup of its
// own (internal/procgroup). At the deadline, or when ctx ends, all of it
// gets SIGTERM and, after the grace, SIGKILL; when the notifier exits on
// its own, whatever it left running is killed. The notifier is always
// reaped before Run returns. Without a cgroup, a process that left the
// group (setsid) is not tracked: the outcome says so in Degraded.
func Run(ctx context.Context, plan Plan, env Envelope, opts Options) *Outcome {
	if out := plan.skip(env.Status, env.Spawn); out != nil {
		return out
	}
	out := &Outcome{Source: plan.Source, Notifier: filepath.Base(plan.Argv[0])}
	payload, err := env.Payload()
	if err != nil {
		out.Status, out.Reason = StatusFailed, ReasonPayloadFailed
		return out
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	if opts.LookupEnv == nil {
		opts.LookupEnv = os.LookupEnv
	}
	allow := opts.EnvAllow
	if allow == nil {
		allow = DefaultEnvAllow
	}
	timeout := plan.Timeout
	if timeout <= 0 {
		timeout = notifyconf.DefaultTimeout
	}

	argv := Expand(plan.Argv, env, payload)
	stderrPath := filepath.Join(opts.RecordDir, StderrFile)
	stderrF, err := os.OpenFile(stderrPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		out.Status, out.Reason = StatusFailed, ReasonRecordFailed
		return out
	}
	out.StderrPath = stderrPath
	started := time.Now()
	defer func() { out.DurationMS = time.Since(started).Milliseconds() }()

	environ := []string{}
	for _, name := range allow {
		if v, ok := opts.LookupEnv(name); ok {
			environ = append(environ, name+"="+v)
		}
	}
	newCmd := func() *exec.Cmd {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = environ
		cmd.Stdin = bytes.NewReader(payload)
		cmd.Stderr = stderrF // stdout stays nil: /dev/null
		cmd.WaitDelay = time.Second
		return cmd
	}
	ran := procgroup.Run(ctx, newCmd, procgroup.Options{Timeout: timeout, Grace: opts.Grace,
		Cgroups: opts.Cgroups, RunID: env.RunID, Role: HelperRole})
	stderrF.Close()
	out.Degraded = ran.Degraded(HelperRole)
	if ran.StartErr != nil {
		out.Status, out.Reason = StatusFailed, ReasonStartFailed
		out.Message = procgroup.StartFailure(ran.StartErr)
		return out
	}
	cmd, stop, werr := ran.Cmd, ran.Stop, ran.WaitErr
	stopped := ""
	switch stop {
	case procgroup.TimedOut:
		stopped = ReasonDeadline
	case procgroup.Cancelled:
		stopped = ReasonCancelled
	}
	if ps := cmd.ProcessState; ps != nil && ps.Exited() {
		code := ps.ExitCode()
		out.ExitCode = &code
	}
	switch {
	case stopped == ReasonDeadline:
		out.Status, out.Reason = StatusTimedOut, ReasonDeadline
	case stopped == ReasonCancelled:
		out.Status, out.Reason = StatusFailed, ReasonCancelled
	case werr == nil || errors.Is(werr, exec.ErrWaitDelay) && out.ExitCode != nil && *out.ExitCode == 0:
		out.Status = StatusDelivered
	case out.ExitCode != nil:
		out.Status, out.Reason = StatusFailed, ReasonExitNonZero
	default:
		out.Status, out.Reason = StatusFailed, ReasonSignaled
	}
	out.StderrSnippet = snippet(stderrPath, argv)
	return out
}
