//go:build linux

package secrets

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"hookbox.dev/hookbox/internal/procgroup"
)

// waitDelay bounds how long Wait keeps reading stdout after the lookup is
// gone: only a descendant outside its process group, when it has no cgroup
// of its own (setsid), can still hold the pipe open.
const waitDelay = time.Second

// runLookup runs argv in its own process group and, where h.cgroups gives
// one, its own cgroup, with stdin and stderr on /dev/null and stdout
// captured up to MaxOutput. Everything it started is killed with SIGKILL
// when the leader exits, at the timeout, or when ctx ends; the leader is
// always reaped. On failure the output is wiped and not returned.
func runLookup(ctx context.Context, argv, env []string, timeout time.Duration, h helper) ([]byte, runResult) {
	out := newCappedBuffer()
	newCmd := func() *exec.Cmd {
		clear(out.buf)
		out.buf, out.overflow = out.buf[:0], false
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		// Stdin and Stderr stay nil, which os/exec connects to /dev/null:
		// the lookup cannot prompt, and its stderr (which may echo the
		// secret) is never read.
		cmd.Stdout = out
		cmd.WaitDelay = waitDelay
		return cmd
	}
	ran := procgroup.Run(ctx, newCmd, procgroup.Options{Timeout: timeout, Cgroups: h.cgroups, RunID: h.runID, Role: h.role})
	contained := runResult{degraded: ran.Degraded(HelperKind), uncontained: ran.Uncontained}
	if ran.StartErr != nil {
		return nil, runResult{reason: ReasonLookupStartFailed, status: -1, detail: procgroup.StartFailure(ran.StartErr)}
	}
	var stopped runResult
	switch ran.Stop {
	case procgroup.TimedOut:
		stopped = runResult{reason: ReasonLookupTimeout, status: -1}
	case procgroup.Cancelled:
		stopped = runResult{reason: ReasonLookupCanceled, status: -1, err: ctx.Err()}
	}
	var res runResult
	switch {
	case stopped.reason != "":
		res = stopped
	case out.overflow:
		res = runResult{reason: ReasonLookupOutputTooLarge, status: -1}
	case ran.WaitErr != nil:
		res = exitFailure(ran.WaitErr)
	default:
		contained.reason = ""
		return out.buf, contained
	}
	clear(out.buf)
	res.degraded, res.uncontained = contained.degraded, contained.uncontained
	return nil, res
}

// exitFailure describes a failed Wait by exit status or signal only.
func exitFailure(err error) runResult {
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return runResult{reason: ReasonLookupFailed, status: -1,
				detail: fmt.Sprintf("was terminated by signal %d (%s)", int(ws.Signal()), ws.Signal())}
		}
		return runResult{reason: ReasonLookupFailed, status: ee.ExitCode()}
	case errors.Is(err, exec.ErrWaitDelay):
		// The output may be incomplete, so it is not used.
		return runResult{reason: ReasonLookupFailed, status: 0,
			detail: "exited, but a process it started outside its process group (it had no cgroup of its own) kept stdout open"}
	}
	return runResult{reason: ReasonLookupFailed, status: -1, detail: "failed while its output was read"}
}
