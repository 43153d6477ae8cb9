package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/gofrs/flock"
	"golang.org/x/sys/unix"
)

// process is a handle on one process through a pidfd: signals and waits
// reach the process that was opened even if its pid is later reused.
type process struct {
	pid int
	fd  int
}

func openProcess(pid int) (*process, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("opening pid %d: %w", pid, err)
	}
	return &process{pid: pid, fd: fd}, nil
}

func (p *process) close() { _ = unix.Close(p.fd) }

func (p *process) signal(sig syscall.Signal) error {
	return unix.PidfdSendSignal(p.fd, sig, nil, 0)
}

// exited waits up to timeout (0: just looks) and reports whether the
// process has exited.
func (p *process) exited(timeout time.Duration) (bool, error) {
	deadline := time.Now().Add(timeout)
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms < 0 {
			ms = 0
		}
		fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, err
		}
		return n > 0, nil
	}
}

// exitedOrDone waits up to timeout for the process to exit, returning
// early (false, nil) when ctx is done.
func (p *process) exitedOrDone(ctx context.Context, timeout time.Duration) (bool, error) {
	deadline := time.Now().Add(timeout)
	for {
		step := min(time.Until(deadline), 50*time.Millisecond)
		gone, err := p.exited(max(step, 0))
		if gone || err != nil || ctx.Err() != nil || time.Now().After(deadline) {
			return gone, err
		}
	}
}

// socketPeerPID is the pid of the process listening on the unix socket at
// path (SO_PEERCRED of a connection to it).
func socketPeerPID(path string) (int, error) {
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, credErr
	}
	return int(cred.Pid), nil
}

// detachAttr makes the daemon the leader of a new session (and so of a new
// process group) with no controlling terminal: the terminal's signals and
// the exit of hookbox do not reach it.
func detachAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true}
}

// lockPath takes an exclusive flock on path (created if needed), retrying
// until ctx is done, and returns the function that releases it.
func lockPath(ctx context.Context, path string) (func(), error) {
	l := flock.New(path)
	if _, err := l.TryLockContext(ctx, 25*time.Millisecond); err != nil {
		l.Close()
		return nil, err
	}
	return func() { _ = l.Close() }, nil
}
