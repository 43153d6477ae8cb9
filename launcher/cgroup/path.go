package cgroup

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// Errors of this package, checked with errors.Is.
var (
	// ErrNotFound: the run's cgroup exists in no mounted hierarchy.
	ErrNotFound = errors.New("cgroup not found")
	// ErrInvalidPath: a cgroupsPath that is not a clean absolute path below
	// the root cgroup. The root is refused: signalling it would signal
	// every process on the host.
	ErrInvalidPath = errors.New("invalid cgroups path")
	// ErrNotSupported: the host lacks what the operation needs (no cgroup
	// filesystem, no cgroup2 for an id, no memory controller, a kernel
	// without the oom_kill counter). The error names what is missing.
	ErrNotSupported = errors.New("not supported on this host")
	// ErrBusy: a cgroup could not be removed because it still has members
	// or child cgroups that could not be removed.
	ErrBusy = errors.New("cgroup busy")
)

// checkPath validates a cgroupsPath as the spec gives it to runc.
func checkPath(p string) error {
	switch {
	case p == "" || !path.IsAbs(p):
		return fmt.Errorf("%w %q: must be absolute (cgroupfs driver, e.g. /hookbox/<run-id>)", ErrInvalidPath, p)
	case path.Clean(p) != p:
		return fmt.Errorf("%w %q: not clean (want %q)", ErrInvalidPath, p, path.Clean(p))
	case p == "/":
		return fmt.Errorf("%w %q: the root cgroup holds every process on the host", ErrInvalidPath, p)
	case strings.ContainsAny(p, "\x00\n"):
		return fmt.Errorf("%w %q: contains a NUL or newline", ErrInvalidPath, p)
	}
	return nil
}
