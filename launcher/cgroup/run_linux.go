package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"syscall"

	"hookbox.dev/hookbox/internal/host"
)

// Run is the host view of one run's cgroup, given the cgroupsPath the spec
// used. Get one from Open. Its methods may be called concurrently; KillAll
// calls on one Run are serialized (see KillAll).
type Run struct {
	Path    string          // the cgroupsPath, e.g. /hookbox/<run-id>
	Layout  host.CgroupMode // the host's layout when the Run was opened
	Unified string          // absolute cgroup2 directory of Path, "" if none
	V1      []string        // absolute directories of Path in each v1 hierarchy that has it

	freezerV1 string // the V1 entry in the freezer hierarchy, if any
	memoryV1  string // the V1 entry in the memory hierarchy, if any
	killMu    sync.Mutex
}

// Open resolves cgroupsPath in every mounted hierarchy. A hierarchy where
// the directory is missing is left out, so a Run whose removal was
// interrupted can still be opened and finished; Open fails with
// ErrNotFound only when the directory is in none of them.
func Open(cgroupsPath string) (*Run, error) {
	if err := checkPath(cgroupsPath); err != nil {
		return nil, err
	}
	cgs, err := host.HostCgroups()
	if err != nil {
		return nil, err
	}
	r := &Run{Path: cgroupsPath, Layout: cgs.Mode}
	for _, h := range cgs.Hierarchies {
		dir := h.DirFor(cgroupsPath)
		if dir == "" {
			continue
		}
		ok, err := isDir(dir)
		if err != nil {
			return nil, fmt.Errorf("cgroup %s: %w", cgroupsPath, err)
		}
		switch {
		case !ok:
		case h.Unified:
			r.Unified = dir
		default:
			r.V1 = append(r.V1, dir)
			if h.Has("freezer") {
				r.freezerV1 = dir
			}
			if h.Has("memory") {
				r.memoryV1 = dir
			}
		}
	}
	if r.Unified == "" && len(r.V1) == 0 {
		return nil, fmt.Errorf("cgroup %s (layout %s): %w", cgroupsPath, r.Layout, ErrNotFound)
	}
	return r, nil
}

// Exists reports whether cgroupsPath exists in any mounted hierarchy.
func Exists(cgroupsPath string) (bool, error) {
	_, err := Open(cgroupsPath)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNotFound):
		return false, nil
	default:
		return false, err
	}
}

func isDir(p string) (bool, error) {
	fi, err := os.Stat(p)
	switch {
	case err == nil:
		return fi.IsDir(), nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, err
	}
}

// dirs returns every directory of the run, cgroup2 first.
func (r *Run) dirs() []string {
	var out []string
	if r.Unified != "" {
		out = append(out, r.Unified)
	}
	return append(out, r.V1...)
}

// ID returns the run's cgroup id as bpf_get_current_cgroup_id() returns it:
// the inode number of its cgroup2 directory (on 64-bit kernels the kernfs
// inode number is the whole 64-bit id, the same 8 bytes name_to_handle_at
// returns). Without a cgroup2 directory there is no such id and ID fails
// with ErrNotSupported.
func (r *Run) ID() (uint64, error) {
	if r.Unified == "" {
		return 0, fmt.Errorf("cgroup %s has no cgroup2 directory (layout %s), so no cgroup id: %w", r.Path, r.Layout, ErrNotSupported)
	}
	fi, err := os.Stat(r.Unified)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("cgroup %s: %w", r.Path, ErrNotFound)
		}
		return 0, fmt.Errorf("cgroup %s: %w", r.Path, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("cgroup %s: no inode in stat of %s", r.Path, r.Unified)
	}
	return st.Ino, nil
}

// walk calls fn for dir and every cgroup below it, parents first. A cgroup
// that disappears while being walked is skipped: it has no members.
func walk(dir string, fn func(dir string) error) error {
	if err := fn(dir); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := walk(filepath.Join(dir, e.Name()), fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// procsUnder returns the pids in cgroup.procs of dir and every cgroup below it.
func procsUnder(dir string) ([]int, error) {
	var out []int
	err := walk(dir, func(d string) error {
		data, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			// ENODEV: the cgroup was removed between open and read.
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV) {
				return nil
			}
			return err
		}
		pids, err := parsePids(string(data))
		if err != nil {
			return fmt.Errorf("%s/cgroup.procs: %w", d, err)
		}
		out = append(out, pids...)
		return nil
	})
	return out, err
}

// Members returns the processes (thread-group ids) in the run's cgroup or
// any cgroup below it, in any hierarchy: the union of every cgroup.procs,
// sorted, without duplicates. A process that has exited is not a member
// even before it is reaped. A directory removed meanwhile contributes
// nothing; any other read error fails the call, because "could not read"
// must not look like "empty".
func (r *Run) Members() ([]int, error) {
	var all []int
	for _, d := range r.dirs() {
		pids, err := procsUnder(d)
		if err != nil {
			return nil, fmt.Errorf("listing members of cgroup %s: %w", r.Path, err)
		}
		all = append(all, pids...)
	}
	sort.Ints(all)
	return slices.Compact(all), nil
}

// Empty reports whether the run's cgroup has no member in any hierarchy.
// On cgroup2 it also asks the kernel's own count ("populated" in
// cgroup.events), which covers descendants the walk might race with.
func (r *Run) Empty() (bool, error) {
	if r.Unified != "" {
		ev, err := readKeyed(filepath.Join(r.Unified, "cgroup.events"))
		switch {
		case err == nil:
			if ev["populated"] != 0 {
				return false, nil
			}
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV):
			// Removed, or a kernel before 4.19 without cgroup.events.
		default:
			return false, fmt.Errorf("cgroup %s: %w", r.Path, err)
		}
	}
	m, err := r.Members()
	if err != nil {
		return false, err
	}
	return len(m) == 0, nil
}

// Remove removes the run's directories in every hierarchy, deepest first.
// A directory already gone counts as removed, so Remove is retry-safe. It
// tries every directory even after a failure, and fails with ErrBusy for
// a cgroup that still has members. Read MemoryEvents before Remove: the
// counters go with the directory.
func (r *Run) Remove() error {
	var errs []error
	for _, root := range r.dirs() {
		var dirs []string
		if err := walk(root, func(d string) error { dirs = append(dirs, d); return nil }); err != nil {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", r.Path, err))
			continue
		}
		// walk lists parents before children: remove in reverse.
		for i := len(dirs) - 1; i >= 0; i-- {
			err := syscall.Rmdir(dirs[i])
			switch {
			case err == nil, errors.Is(err, syscall.ENOENT):
			case errors.Is(err, syscall.EBUSY), errors.Is(err, syscall.ENOTEMPTY):
				errs = append(errs, fmt.Errorf("removing cgroup %s: %s: %w (%v)", r.Path, dirs[i], ErrBusy, err))
			default:
				errs = append(errs, fmt.Errorf("removing cgroup %s: %s: %w", r.Path, dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

func readKeyed(p string) (map[string]uint64, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	m, err := parseKeyedCounters(string(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return m, nil
}
