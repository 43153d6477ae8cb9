//go:build linux

package secrets

import (
	"context"
	"errors"
	"fmt"
	"hookbox.dev/hookbox/internal/procgroup"
	"os/exec"
	"syscall"
	"time"
)

// waitDelay bounds how long Wait keeps reading stdout after the lookup and
// its process group are gone: only a descendant that left the group (setsid)
// can still hold the pipe open.
const waitDelay = time.Second

// runLookup runs argv in its own process group with stdin and stderr on
// /dev/null and stdout captured up to MaxOutput. The whole group is killed
// with SIGKILL when the leader exits, at the timeout, or when ctx ends; the
// leader is always reaped. On failure the output is wiped and not returned.
func runLookup(ctx context.Context, argv, env []string, timeout time.Duration) ([]byte, runResult) {
	out := newCappedBuffer()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	// Stdin and Stderr stay nil, which os/exec connects to /dev/null: the
	// lookup cannot prompt, and its stderr (which may echo the secret) is
	// never read.
	cmd.Stdout = out
	cmd.WaitDelay = waitDelay
	stop, startErr, err := procgroup.Run(ctx, cmd, timeout, 0)
	if startErr != nil {
		return nil, runResult{reason: ReasonLookupStartFailed, status: -1, detail: procgroup.StartFailure(startErr)}
	}
	var stopped runResult
	switch stop {
	case procgroup.TimedOut:
		stopped = runResult{reason: ReasonLookupTimeout, status: -1}
	case procgroup.Cancelled:
		stopped = runResult{reason: ReasonLookupCanceled, status: -1, err: ctx.Err()}
	}
	switch {
	case stopped.reason != "":
		clear(out.buf)
		return nil, stopped
	case out.overflow:
		clear(out.buf)
		return nil, runResult{reason: ReasonLookupOutputTooLarge, status: -1}
	case err != nil:
		clear(out.buf)
		return nil, exitFailure(err)
	}
	return out.buf, runResult{}
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
			detail: "exited, but a process it started outside its process group kept stdout open"}
	}
	return runResult{reason: ReasonLookupFailed, status: -1, detail: "failed while its output was read"}
}
