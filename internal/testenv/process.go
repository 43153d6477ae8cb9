package testenv

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// WaitExited blocks until process pid (not necessarily a child of the
// test) has exited, watching a pidfd, which polls readable once its
// process has exited, zombie or reaped. It fails the test after timeout.
func WaitExited(t testing.TB, pid int, timeout time.Duration) {
	t.Helper()
	if !exitedWithin(t, pid, timeout, false) {
		t.Fatalf("process %d still runs after %v", pid, timeout)
	}
}

// exitedWithin watches a pidfd of pid, which polls readable once the
// process has exited (zombie or reaped), and reports whether it exited
// within timeout; a process still running then is SIGKILLed when kill.
func exitedWithin(t testing.TB, pid int, timeout time.Duration, kill bool) bool {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return true
	}
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v", pid, err)
	}
	defer unix.Close(fd)
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(timeout.Milliseconds()))
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			t.Fatalf("poll pidfd of %d: %v", pid, err)
		case n == 0:
			if kill {
				_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			}
			return false
		}
		return true
	}
}
