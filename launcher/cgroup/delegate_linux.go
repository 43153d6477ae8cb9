package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"

	"hookbox.dev/hookbox/internal/host"
)

// JobsDir is the directory, inside a delegated subtree, that holds one
// cgroup per rootless run, jobs/<run-id> (docs/architecture.md, "Backends").
const JobsDir = "jobs"

// Delegation is the cgroup2 subtree delegated to this (non-root) user:
// hookbox creates each run's cgroup below it and moves the task's init
// process there between create and start, which needs this process — and so
// the rootless containerd and its shims, started from it — inside the same
// subtree (moving a process needs write access to the common ancestor's
// cgroup.procs).
type Delegation struct {
	Root string // the delegated subtree, a cgroup path (e.g. /user.slice/user-1000.slice/user@1000.service)
	Jobs string // Root/jobs: the parent of run cgroups
}

// FindDelegation finds the subtree delegated to this user from this
// process's own cgroup2 path: its highest ancestor that the user owns, as
// systemd's user@.service (Delegate=yes) or hookbox rootless setup makes
// one. It fails with ErrNotSupported and a fix when there is none.
func FindDelegation() (Delegation, error) {
	member, err := host.ReadProcCgroup(0)
	if err != nil {
		return Delegation{}, err
	}
	self := member.Unified
	if self == "" {
		return Delegation{}, fmt.Errorf("no cgroup2 (0::) line in /proc/self/cgroup: %w", ErrNotSupported)
	}
	base, err := unifiedMount()
	if err != nil {
		return Delegation{}, err
	}
	uid := os.Geteuid()
	root := DelegatedRoot(self, func(p string) bool {
		fi, err := os.Stat(path.Join(base, p))
		if err != nil {
			return false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		return ok && int(st.Uid) == uid && writable(path.Join(base, p, "cgroup.procs"))
	})
	if root == "" {
		return Delegation{}, fmt.Errorf("this process's cgroup %s is not delegated to this user: run `sudo hookbox rootless setup --user $USER` and start your session in it, or use a systemd user session (user@.service, Delegate=yes): %w", self, ErrNotSupported)
	}
	return Delegation{Root: root, Jobs: path.Join(root, JobsDir)}, nil
}

func writable(p string) bool { return syscall.Access(p, 2 /* W_OK */) == nil }

// unifiedMount is the directory where the whole cgroup2 hierarchy is
// mounted.
func unifiedMount() (string, error) {
	cgs, err := host.HostCgroups()
	if err != nil {
		return "", err
	}
	if cgs.Unified == "" {
		return "", fmt.Errorf("no cgroup2 hierarchy mounted: %w", ErrNotSupported)
	}
	return cgs.Unified, nil
}

// UnifiedDir returns the cgroup2 directory of cgroup path p.
func UnifiedDir(p string) (string, error) {
	base, err := unifiedMount()
	if err != nil {
		return "", err
	}
	return path.Join(base, p), nil
}

// Place creates the run cgroup d.Jobs/<name>, applies the limits its
// controllers allow (enabling them in d.Jobs when the subtree offers them),
// and moves pid into it. It returns the run's cgroup path and the reason id
// of every limit it could not apply. A failure leaves no directory behind.
func (d Delegation) Place(name string, pid int, l Limits) (string, []string, error) {
	base, err := unifiedMount()
	if err != nil {
		return "", nil, err
	}
	return d.placeIn(base, name, pid, l)
}

// placeIn is Place with the cgroup2 hierarchy mounted at base.
func (d Delegation) placeIn(base, name string, pid int, l Limits) (string, []string, error) {
	jobs := path.Join(base, d.Jobs)
	if err := os.Mkdir(jobs, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", nil, fmt.Errorf("create %s: %w", jobs, err)
	}
	// Controllers are enabled in jobs (which holds no process, as cgroup2
	// requires); a missing one degrades its limit, it does not fail the run.
	enableControllers(jobs, wantedControllers(l))
	p := path.Join(d.Jobs, name)
	dir := path.Join(jobs, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("create run cgroup %s: %w", dir, err)
	}
	fail := func(err error) (string, []string, error) {
		_ = os.Remove(dir)
		return "", nil, err
	}
	// A child's controllers are its parent's subtree_control.
	ctrl, _ := os.ReadFile(path.Join(jobs, "cgroup.subtree_control"))
	files, degraded := limitFiles(l, strings.Fields(strings.ReplaceAll(string(ctrl), "+", "")))
	for _, f := range files {
		if err := os.WriteFile(path.Join(dir, f[0]), []byte(f[1]), 0); err != nil {
			return fail(fmt.Errorf("limit %s=%s on %s: %w", f[0], f[1], dir, err))
		}
	}
	if err := os.WriteFile(path.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fail(fmt.Errorf("move pid %d into %s: %w (a rootless containerd started outside the delegated subtree %s cannot hand its tasks over: hookbox daemon stop, and the next run starts it inside)", pid, dir, err, d.Root))
	}
	return p, degraded, nil
}

// Helpers are the helpers of a hookbox in delegation d: <jobs>/helpers,
// cgroup2 only.
func (d Delegation) Helpers() Helpers {
	return Helpers{Parent: path.Join(d.Jobs, "helpers"), UnifiedOnly: true, Limits: HelperLimits}
}
