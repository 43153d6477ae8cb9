//go:build linux

package secrets

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"
	"unsafe"
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
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = waitDelay
	if err := cmd.Start(); err != nil {
		return nil, runResult{reason: ReasonLookupStartFailed, status: -1, detail: startFailure(err)}
	}
	pid := cmd.Process.Pid

	exited := make(chan struct{})
	go func() {
		waitExitedNoReap(pid)
		close(exited)
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var stopped runResult
	select {
	case <-exited:
	case <-timer.C:
		stopped = runResult{reason: ReasonLookupTimeout, status: -1}
	case <-ctx.Done():
		stopped = runResult{reason: ReasonLookupCanceled, status: -1, err: ctx.Err()}
	}
	// The leader is alive or a zombie but not reaped, so its pid — the
	// group's id — cannot have been reissued: this kill reaches only what
	// the lookup left in its group.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-exited
	err := cmd.Wait()

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

// startFailure names why Start failed using only fixed texts: the raw error
// would repeat argv[0]'s full path.
func startFailure(err error) string {
	var errno syscall.Errno
	switch {
	case errors.Is(err, exec.ErrNotFound):
		return "executable file not found in $PATH"
	case errors.Is(err, exec.ErrDot):
		return "it was found relative to the current directory, which is refused"
	case errors.As(err, &errno):
		return errno.Error()
	}
	return ""
}

// pPID is waitid's P_PID id type on Linux.
const pPID = 1

// waitExitedNoReap blocks until pid has exited, leaving it a zombie
// (WNOWAIT) so that its pid stays reserved until cmd.Wait reaps it.
func waitExitedNoReap(pid int) {
	var info [16]uint64 // siginfo_t, unused
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info)), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		if errno != syscall.EINTR {
			return
		}
	}
}
