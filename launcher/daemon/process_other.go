//go:build !linux

package daemon

import (
	"context"
	"errors"
	"syscall"
	"time"
)

// The managed daemon is Linux-only (pidfds, /proc, SO_PEERCRED); elsewhere
// Resolve still works against an explicit address.

var errNotLinux = errors.New("managed containerd is supported on Linux only")

type process struct{ pid int }

func openProcess(int) (*process, error)               { return nil, errNotLinux }
func (p *process) close()                             {}
func (p *process) signal(syscall.Signal) error        { return errNotLinux }
func (p *process) exited(time.Duration) (bool, error) { return false, errNotLinux }
func (p *process) exitedOrDone(context.Context, time.Duration) (bool, error) {
	return false, errNotLinux
}
func processStartTime(int) (time.Time, error)          { return time.Time{}, errNotLinux }
func socketPeerPID(string) (int, error)                { return 0, errNotLinux }
func detachAttr() *syscall.SysProcAttr                 { return nil }
func lockPath(context.Context, string) (func(), error) { return nil, errNotLinux }
