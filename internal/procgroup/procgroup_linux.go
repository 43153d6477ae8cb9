//go:build linux

// Package procgroup runs a host-side helper program (a secret lookup, a
// notifier) in its own process group, bounded in time, and guarantees that
// nothing of that group outlives the call: the group is signalled while the
// leader's pid — the group id — is still reserved, and the leader is always
// reaped. A descendant that calls setsid() leaves the group and is not
// covered; callers document that.
package procgroup

import (
	"context"
	"errors"
	"os/exec"
	"syscall"
	"time"
	"unsafe"
)

// Stop says why Run stopped the program early.
type Stop int

const (
	// Exited: the program ended on its own.
	Exited Stop = iota
	// TimedOut: the deadline passed.
	TimedOut
	// Cancelled: ctx ended.
	Cancelled
)

// Run starts cmd (its SysProcAttr is replaced to put it in a new process
// group) and waits until the leader exits, timeout passes or ctx ends. On a
// timeout or cancellation the group gets SIGTERM and, after grace (0: at
// once), SIGKILL. In every case what remains of the group is then killed
// with SIGKILL and the leader reaped. startErr is cmd.Start's error;
// waitErr is cmd.Wait's.
func Run(ctx context.Context, cmd *exec.Cmd, timeout, grace time.Duration) (stop Stop, startErr, waitErr error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return Exited, err, nil
	}
	pid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		waitExitedNoReap(pid)
		close(exited)
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-exited:
	case <-timer.C:
		stop = TimedOut
	case <-ctx.Done():
		stop = Cancelled
	}
	if stop != Exited && grace > 0 {
		// The leader is alive or an unreaped zombie: -pid is still its group.
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		graceTimer := time.NewTimer(grace)
		select {
		case <-exited:
		case <-graceTimer.C:
		}
		graceTimer.Stop()
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-exited
	return stop, nil, cmd.Wait()
}

// StartFailure names why Start failed with fixed texts only: the raw error
// repeats argv[0]'s full path, which is configuration a caller may not echo.
func StartFailure(err error) string {
	var errno syscall.Errno
	switch {
	case errors.Is(err, exec.ErrNotFound):
		return "executable file not found in $PATH"
	case errors.Is(err, exec.ErrDot):
		return "found relative to the current directory, which is refused"
	case errors.As(err, &errno):
		return errno.Error()
	}
	return "could not start"
}

const pPID = 1 // waitid's P_PID

// waitExitedNoReap blocks until pid has exited, leaving it a zombie
// (WNOWAIT) so that its pid, the group id, stays reserved until Wait.
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
