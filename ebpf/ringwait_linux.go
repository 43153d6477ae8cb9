//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ringWait waits for the ring buffer in Go's netpoller. cilium/ebpf's
// reader waits in a blocking epoll_wait, and a goroutine blocked in a
// syscall keeps Go's sysmon waking at its shortest interval to retake its
// P: about half of the tracer daemon's CPU on an exec storm or with many
// watches. The consumer waits here instead and reads the ring only once it
// has data (or a deadline passed, or it was kicked), with a read deadline
// in the past, so that the reader's own epoll_wait never blocks.
type ringWait struct {
	f       *os.File // a duplicate of the ring map's fd, in the netpoller
	rc      syscall.RawConn
	kicked  atomic.Bool // a drain, a new watch: return from the current or next wait
	closing atomic.Bool // every wait returns at once
}

func newRingWait(ringFD int) (*ringWait, error) {
	fd, err := unix.FcntlInt(uintptr(ringFD), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup ring buffer fd: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ring buffer fd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "ringbuf")
	// Only a file in the netpoller takes a deadline.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("ring buffer fd not pollable: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &ringWait{f: f, rc: rc}, nil
}

// wait returns once ready reports data, the deadline passes (zero: none),
// kick or close is called, or right away if kick was called since the last
// reset. The ring's fd is edge-triggered in the netpoller: a wakeup the BPF
// side sends while no one waits is kept for the next wait.
func (w *ringWait) wait(deadline time.Time, ready func() bool) {
	w.f.SetReadDeadline(deadline)
	// The callback's false makes the netpoller wait for readability; the
	// only error is the deadline (a kick sets one in the past).
	_ = w.rc.Read(func(uintptr) bool { return w.kicked.Load() || w.closing.Load() || ready() })
}

// reset forgets earlier kicks; the consumer calls it before it looks at
// what it has been asked (drains), so a kick after that is never lost.
func (w *ringWait) reset() { w.kicked.Store(false) }

// kick ends the current wait, or the next one.
func (w *ringWait) kick() {
	w.kicked.Store(true)
	w.f.SetReadDeadline(time.Now())
}

// close ends every wait from now on; the file is closed by done, once the
// consumer has stopped waiting.
func (w *ringWait) close() {
	w.closing.Store(true)
	w.f.SetReadDeadline(time.Now())
}

// closed reports whether close was called: the consumer returns, and only
// then is the ring's reader closed (its memory unmapped).
func (w *ringWait) closed() bool { return w.closing.Load() }

func (w *ringWait) done() { w.f.Close() }
