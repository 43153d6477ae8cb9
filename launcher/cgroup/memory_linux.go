package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// MemoryEvents are the memory counters of a run's cgroup.
type MemoryEvents struct {
	// OOMKills counts processes in the cgroup or below it that the OOM
	// killer killed, whether for the cgroup's limit or the host's.
	OOMKills uint64
}

// MemoryEvents reads the run's memory counters from whichever hierarchy
// has the memory controller for it: memory.events in the cgroup2
// directory, which the kernel already sums over descendants, or on v1
// (the memory controller of a hybrid host) the oom_kill line of
// memory.oom_control, which counts only kills in that cgroup itself and is
// therefore summed over the run's cgroup and every cgroup below it. It
// fails with ErrNotSupported when no hierarchy has the memory controller
// for the run or the kernel has no oom_kill counter (before Linux 4.13).
// Read it before Remove: the counters go with the directory.
//
// v1 memory.failcnt is deliberately not used: it also counts limit hits
// that reclaim resolved, and on Linux 6.x it is not counted at all when
// the memory+swap limit is the one hit (runc sets both), so a run killed
// for memory can show failcnt 0.
func (r *Run) MemoryEvents() (MemoryEvents, error) {
	if r.Unified != "" {
		ev, err := readKeyed(filepath.Join(r.Unified, "memory.events"))
		switch {
		case err == nil:
			n, ok := ev["oom_kill"]
			if !ok {
				return MemoryEvents{}, fmt.Errorf("%s/memory.events has no oom_kill counter: %w", r.Unified, ErrNotSupported)
			}
			return MemoryEvents{OOMKills: n}, nil
		case !errors.Is(err, fs.ErrNotExist):
			return MemoryEvents{}, fmt.Errorf("memory events of cgroup %s: %w", r.Path, err)
		}
	}
	if r.memoryV1 == "" {
		return MemoryEvents{}, fmt.Errorf("cgroup %s: no memory controller in any of its hierarchies: %w", r.Path, ErrNotSupported)
	}
	var out MemoryEvents
	err := walk(r.memoryV1, func(d string) error {
		ev, err := readKeyed(filepath.Join(d, "memory.oom_control"))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && d != r.memoryV1 {
				return nil // a child removed meanwhile
			}
			return err
		}
		n, ok := ev["oom_kill"]
		if !ok {
			return fmt.Errorf("%s/memory.oom_control has no oom_kill counter (Linux < 4.13): %w", d, ErrNotSupported)
		}
		out.OOMKills += n
		return nil
	})
	if err != nil {
		return MemoryEvents{}, fmt.Errorf("memory events of cgroup %s: %w", r.Path, err)
	}
	return out, nil
}

// OOMKilled reports whether the OOM killer killed any process of the run.
// The launcher maps true to the status oom_killed. An error means the
// answer is unknown, never "no".
func (r *Run) OOMKilled() (bool, error) {
	ev, err := r.MemoryEvents()
	if err != nil {
		return false, err
	}
	return ev.OOMKills > 0, nil
}
