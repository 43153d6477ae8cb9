package cgroup

import (
	"fmt"
	"strconv"
	"strings"
)

// Limits are the resource limits a delegated run cgroup can carry; zero
// means none.
type Limits struct {
	MemoryBytes int64
	Pids        int64
	MilliCPUs   int64
}

// Reason ids for limits a delegated cgroup cannot apply, recorded in the
// run's result as degraded.
const (
	DegradedMemory = "limit-unavailable:memory"
	DegradedPids   = "limit-unavailable:pids"
	DegradedCPU    = "limit-unavailable:cpu"
)

// cpuPeriod is the cpu.max period hookbox writes (µs), as runc's default.
const cpuPeriod = 100000

// limitFiles returns the interface files to write for l given the
// controllers the run cgroup has (its cgroup.controllers), and the reason
// id of every limit it cannot apply for lack of a controller.
func limitFiles(l Limits, controllers []string) (files [][2]string, degraded []string) {
	has := map[string]bool{}
	for _, c := range controllers {
		has[c] = true
	}
	if l.MemoryBytes > 0 {
		if has["memory"] {
			m := strconv.FormatInt(l.MemoryBytes, 10)
			// swap.max 0: the memory limit is the whole limit, as with
			// runc's memory+swap equal to memory.
			files = append(files, [2]string{"memory.max", m}, [2]string{"memory.swap.max", "0"})
		} else {
			degraded = append(degraded, DegradedMemory)
		}
	}
	if l.Pids > 0 {
		if has["pids"] {
			files = append(files, [2]string{"pids.max", strconv.FormatInt(l.Pids, 10)})
		} else {
			degraded = append(degraded, DegradedPids)
		}
	}
	if l.MilliCPUs > 0 {
		if has["cpu"] {
			files = append(files, [2]string{"cpu.max", fmt.Sprintf("%d %d", l.MilliCPUs*cpuPeriod/1000, cpuPeriod)})
		} else {
			degraded = append(degraded, DegradedCPU)
		}
	}
	return files, degraded
}

// Unapplied is the reason id of every limit in l: what a run without a
// cgroup of its own cannot have.
func Unapplied(l Limits) []string {
	_, degraded := limitFiles(l, nil)
	return degraded
}

// wantedControllers are the controllers a run's limits need.
func wantedControllers(l Limits) []string {
	var out []string
	if l.MemoryBytes > 0 {
		out = append(out, "memory")
	}
	if l.Pids > 0 {
		out = append(out, "pids")
	}
	if l.MilliCPUs > 0 {
		out = append(out, "cpu")
	}
	return out
}

// DelegatedRoot returns the highest ancestor of cgroup path p (p included)
// that owned says this user owns, and "" if not even p is. Ownership must
// be unbroken: the walk stops at the first ancestor not owned.
func DelegatedRoot(p string, owned func(string) bool) string {
	root := ""
	for q := p; q != "/" && q != "" && owned(q); q = parentPath(q) {
		root = q
	}
	return root
}

func parentPath(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}
