package cgroup

import (
	"fmt"
	"strconv"
	"strings"
)

// Helpers is where this hookbox process makes the transient cgroups of the
// programs it runs on the host, a secret lookup and a notifier: one cgroup
// per program, made before it starts and removed when it ends, through the
// same freeze, kill and wait as a run's teardown (docs/architecture.md,
// "Host-side helpers"). The zero value gives no cgroup (Unavailable says
// why).
type Helpers struct {
	// Parent is the cgroup path under which each helper gets one of its
	// own (HelperName); "" when helpers get none.
	Parent string
	// UnifiedOnly: only the cgroup2 hierarchy (a delegated subtree: v1
	// hierarchies are never delegated to a user).
	UnifiedOnly bool
	// Unavailable says why helpers get no cgroup, when Parent is "".
	Unavailable string
	// Limits are written where the helper's cgroup has the controller.
	Limits Limits
}

// HelperParent is the parent of the helpers' cgroups as root, beside the
// runs' /hookbox/<run-id>; a delegated subtree has it under its jobs
// directory (Delegation.Helpers).
const HelperParent = "/hookbox/helpers"

// HelperLimits are the limits of a helper's cgroup: a lookup or a notifier
// is a small program (a CLI, curl, a script), never a build.
var HelperLimits = Limits{MemoryBytes: 256 << 20, Pids: 128}

// RootHelpers are the helpers of a root hookbox: HelperParent in the
// cgroup2 hierarchy and in the v1 hierarchies of v1Helper.
func RootHelpers() Helpers { return Helpers{Parent: HelperParent, Limits: HelperLimits} }

// NoHelpers are the helpers of a hookbox that cannot give them a cgroup,
// for the reason why.
func NoHelpers(why string) Helpers { return Helpers{Unavailable: why} }

// v1Helper are the v1 controllers a helper's cgroup is made in: the two
// whose limits it carries, and the freezer KillAll uses where there is no
// cgroup2 (a v1-only host).
var v1Helper = []string{"memory", "pids", "freezer"}

// HelperName is the cgroup name of one helper: the run it serves, its role
// (notify, lookup-1, …) and its owner, this hookbox, by pid and start time
// (host.StartTime), so gc can tell a helper of a live hookbox from one a
// killed hookbox left: <run-id>.<role>@<pid>-<start>.
func HelperName(runID, role string, pid int, start uint64) (string, error) {
	switch {
	case runID == "" || strings.ContainsAny(runID, "/@\x00\n") || runID == "." || runID == "..":
		return "", fmt.Errorf("%w: helper cgroup for run id %q: it must be a cgroup name without @", ErrInvalidPath, runID)
	case role == "" || strings.ContainsAny(role, "/@.\x00\n"):
		return "", fmt.Errorf("%w: helper role %q: it must be a name without /, @ or a dot", ErrInvalidPath, role)
	case pid <= 0:
		return "", fmt.Errorf("%w: helper owner pid %d", ErrInvalidPath, pid)
	}
	return fmt.Sprintf("%s.%s@%d-%d", runID, role, pid, start), nil
}

// HelperOwner is what a helper cgroup's name says.
type HelperOwner struct {
	RunID, Role string
	PID         int
	Start       uint64
}

// ParseHelperName reads a name HelperName made; ok is false for any other
// name (a cgroup hookbox did not make there is not touched).
func ParseHelperName(name string) (HelperOwner, bool) {
	i := strings.LastIndexByte(name, '@')
	if i < 0 {
		return HelperOwner{}, false
	}
	pidText, startText, ok := strings.Cut(name[i+1:], "-")
	if !ok {
		return HelperOwner{}, false
	}
	pid, err1 := strconv.Atoi(pidText)
	start, err2 := strconv.ParseUint(startText, 10, 64)
	j := strings.LastIndexByte(name[:i], '.')
	if err1 != nil || err2 != nil || j < 0 {
		return HelperOwner{}, false
	}
	o := HelperOwner{RunID: name[:j], Role: name[j+1 : i], PID: pid, Start: start}
	if again, err := HelperName(o.RunID, o.Role, o.PID, o.Start); err != nil || again != name {
		return HelperOwner{}, false
	}
	return o, true
}

// v1LimitFiles are the interface files of l in a v1 hierarchy with the
// given controllers. memsw: the hierarchy has swap accounting
// (memory.memsw.limit_in_bytes), which then gets the same value, as runc
// does for a memory limit without swap.
func v1LimitFiles(l Limits, controllers []string, memsw bool) [][2]string {
	var files [][2]string
	for _, c := range controllers {
		switch {
		case c == "memory" && l.MemoryBytes > 0:
			m := strconv.FormatInt(l.MemoryBytes, 10)
			files = append(files, [2]string{"memory.limit_in_bytes", m})
			if memsw {
				files = append(files, [2]string{"memory.memsw.limit_in_bytes", m})
			}
		case c == "pids" && l.Pids > 0:
			files = append(files, [2]string{"pids.max", strconv.FormatInt(l.Pids, 10)})
		}
	}
	return files
}
