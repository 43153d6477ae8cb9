package cgroup

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/internal/host"
)

// Process is one process pinned by a pidfd, typically a run's init: a
// signal reaches the process that was opened and never a later holder of
// its pid, and its exit (and, on Linux ≥ 6.15, its exit status) is read
// from the kernel, so neither depends on the container runtime answering.
// It needs Linux ≥ 5.10 (pidfd_open with PIDFD_NONBLOCK); OpenProcess
// fails with ErrNotSupported before that.
type Process struct {
	PID int
	// StartTime is the process's start time (clock ticks after boot),
	// read once the pidfd pinned it: with PID, the identity a spawn
	// record holds (docs/contracts.md §1).
	StartTime uint64

	file *os.File      // the pidfd, non-blocking, in Go's poller
	done chan struct{} // closed once the process has exited
}

// OpenProcess pins pid with a pidfd. With startTime != 0 the process must
// still be the one recorded with that start time (ErrProcessGone
// otherwise); with 0 the caller learns it from Process.StartTime. A
// process that has exited (zombie or gone) is ErrProcessGone too.
func OpenProcess(pid int, startTime uint64) (*Process, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	switch {
	case errors.Is(err, unix.ESRCH):
		return nil, fmt.Errorf("pid %d: %w", pid, ErrProcessGone)
	case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EINVAL):
		return nil, fmt.Errorf("pidfd_open of pid %d (Linux ≥ 5.10): %w", pid, ErrNotSupported)
	case err != nil:
		return nil, fmt.Errorf("pidfd_open of pid %d: %w", pid, err)
	}
	p := &Process{PID: pid, file: os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", pid)), done: make(chan struct{})}
	// Read after pinning: while the pidfd is open, pid names this process
	// until it is reaped, so the start time is this process's.
	st, err := host.ReadStat(pid)
	if err == nil && st.Exited() {
		err = ErrProcessGone
	}
	if err == nil && startTime != 0 && st.StartTime != startTime {
		err = fmt.Errorf("start time %d, recorded %d: %w", st.StartTime, startTime, ErrProcessGone)
	}
	if err != nil {
		p.file.Close()
		if errors.Is(err, os.ErrNotExist) {
			err = ErrProcessGone
		}
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	p.StartTime = st.StartTime
	go p.watch()
	return p, nil
}

// ErrProcessGone: the process has exited, or its pid now names another.
var ErrProcessGone = errors.New("process is gone")

// watch closes done once the pidfd polls readable, which the kernel makes
// it when the process exits (zombie or reaped). Close ends it without
// closing done.
func (p *Process) watch() {
	rc, err := p.file.SyscallConn()
	if err != nil {
		return
	}
	exited := false
	err = rc.Read(func(fd uintptr) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, perr := unix.Poll(fds, 0)
		exited = perr == nil && n > 0
		// false: not yet; the poller waits for the fd to become readable.
		return exited || (perr != nil && !errors.Is(perr, unix.EINTR))
	})
	if err == nil && exited {
		close(p.done)
	}
}

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited, asking the kernel
// rather than waiting for Done's watcher to notice.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
	}
	rc, err := p.file.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	_ = rc.Control(func(fd uintptr) {
		n, _ = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
	})
	return n > 0
}

// Signal sends sig to the process. It reports whether the signal was sent:
// a process that has exited is not an error. Namespaces decide as for
// kill(2): a pid namespace's init gets only the signals it has a handler
// for, and SIGKILL, from an ancestor namespace; SIGKILL to it ends every
// process of its namespace.
func (p *Process) Signal(sig unix.Signal) (bool, error) {
	rc, err := p.file.SyscallConn()
	if err != nil {
		return false, err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.PidfdSendSignal(int(fd), sig, nil, 0) }); err != nil {
		return false, err
	}
	switch {
	case serr == nil:
		return true, nil
	case errors.Is(serr, unix.ESRCH):
		return false, nil
	default:
		return false, fmt.Errorf("%s to pid %d: %w", unix.SignalName(sig), p.PID, serr)
	}
}

// ExitCode returns the process's exit status as a shell reports it (the
// code, or 128+N for a death by signal N) once the kernel has it: the
// process exited and its parent reaped it. ok is false before that, and
// always on kernels before Linux 6.15 (no PIDFD_INFO_EXIT), where only
// the parent (for a container's init, the runtime's shim) learns it.
func (p *Process) ExitCode() (code int, ok bool) {
	rc, err := p.file.SyscallConn()
	if err != nil {
		return 0, false
	}
	info := unix.PidfdInfo{Mask: unix.PIDFD_INFO_EXIT}
	var ierr error
	if err := rc.Control(func(fd uintptr) { ierr = unix.IoctlPidfdInfo(int(fd), &info) }); err != nil || ierr != nil {
		return 0, false
	}
	if info.Mask&unix.PIDFD_INFO_EXIT == 0 {
		return 0, false
	}
	ws := syscall.WaitStatus(info.Exit_code)
	if ws.Signaled() {
		return 128 + int(ws.Signal()), true
	}
	return ws.ExitStatus(), true
}

// Close releases the pidfd; Done is then never closed if it was not yet.
func (p *Process) Close() error { return p.file.Close() }
