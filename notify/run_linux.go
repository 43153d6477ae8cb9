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
}

// Run notifies about a terminal run according to plan and returns the
// outcome; it never returns an error. The notifier gets the payload on
// stdin and wherever argv holds {payload}; it runs without a shell in its
// own process group. At the deadline, or when ctx ends, the group gets
// SIGTERM and, after the grace (ended early when the notifier itself
// exits), SIGKILL; when the notifier exits on its own, whatever it left in
// its group is killed. The notifier is always reaped before Run returns.
// A process that left the group (setsid) is not tracked: that is the one
// escape Run does not close.
func Run(ctx context.Context, plan Plan, env Envelope, opts Options) *Outcome {
	out := &Outcome{Source: plan.Source}
	if len(plan.Argv) > 0 {
		out.Notifier = filepath.Base(plan.Argv[0])
	}
	switch {
	case plan.Invalid:
		out.Status, out.Reason, out.Message = StatusFailed, plan.Reason, plan.Message
		return out
	case !plan.Enabled:
		out.Status, out.Reason = StatusDisabled, plan.Reason
		return out
	}
	if ok, reason := selects(plan.Filter, env.Status, env.Spawn); !ok {
		out.Status, out.Reason = StatusFiltered, reason
		return out
	}
	if reason, msg := notifyconf.CheckArgv(plan.Argv); reason != "" {
		out.Status, out.Reason, out.Message = StatusFailed, reason, msg
		return out
	}
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

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{}
	for _, name := range allow {
		if v, ok := opts.LookupEnv(name); ok {
			cmd.Env = append(cmd.Env, name+"="+v)
		}
	}
	cmd.Stdin = bytes.NewReader(payload)
	cmd.Stderr = stderrF // stdout stays nil: /dev/null
	cmd.WaitDelay = time.Second
	stop, startErr, werr := procgroup.Run(ctx, cmd, timeout, opts.Grace)
	stderrF.Close()
	if startErr != nil {
		out.Status, out.Reason = StatusFailed, ReasonStartFailed
		out.Message = procgroup.StartFailure(startErr)
		return out
	}
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
