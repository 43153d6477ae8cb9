package doctor

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"hookbox.dev/hookbox/launcher/cgroup"
)

// Checks a non-root user's report adds (rootless backend).
const (
	CheckCgroupDelegation = "cgroup-delegation"
	CheckTracerHelper     = "tracer-helper"
)

// helperFacts: does the privileged tracer helper answer?
type helperFacts struct {
	Socket string
	Err    error // nil when it accepted a connection
}

func gatherHelper(socket string) helperFacts {
	f := helperFacts{Socket: socket}
	if socket == "" {
		f.Err = fmt.Errorf("no socket path")
		return f
	}
	conn, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		f.Err = err
		return f
	}
	conn.Close()
	return f
}

// tracerHelperCheck: a rootless run's verdict can be confirmed only through
// `hookbox tracer serve` (BPF needs root: kernel.unprivileged_bpf_disabled).
func tracerHelperCheck(h host, f helperFacts) (bool, Check) {
	c := Check{Name: CheckTracerHelper}
	switch {
	case h.euid == 0:
		c.Status, c.Detail = OK, "not needed: root traces through the managed tracer it starts itself (or loads the tracer in the run)"
		return false, c
	case f.Err == nil:
		c.Status, c.Detail = OK, "the tracer helper answers at "+f.Socket+": rootless runs are traced and can be confirmed"
		return true, c
	default:
		c.Status = Warn
		c.Detail = fmt.Sprintf("no tracer helper at %s (%v): rootless verdicts are unchecked (tracer-unavailable:rootless)", f.Socket, f.Err)
		c.Fix = "as root: hookbox tracer serve (or install contrib/systemd/hookbox-tracer.service)"
		return false, c
	}
}

// delegationFacts: the cgroup2 subtree delegated to this user, as
// cgroup.FindDelegation finds it: the highest owned ancestor of this
// process's cgroup.
type delegationFacts struct {
	Self, Root  string // cgroup paths; Root "" when nothing is delegated
	Controllers []string
}

func gatherDelegation(h host, v2Mount string) delegationFacts {
	var f delegationFacts
	if v2Mount == "" {
		return f
	}
	f.Self = strings.TrimPrefix(ownCgroupDir(h, v2Mount), v2Mount)
	f.Root = cgroup.DelegatedRoot(f.Self, func(p string) bool {
		fi, err := os.Stat(h.path(filepath.Join(v2Mount, p)))
		return err == nil && ownedBy(fi, h.euid)
	})
	if f.Root != "" {
		for n := range readControllers(h.path(filepath.Join(v2Mount, f.Root))) {
			f.Controllers = append(f.Controllers, n)
		}
	}
	return f
}

// cgroupDelegationCheck: a rootless run gets a cgroup of its own (its
// trace scope and kill-all boundary) only inside a delegated subtree, and
// limits only for controllers that reach it.
func cgroupDelegationCheck(h host, f delegationFacts) (delegated, limits bool, c Check) {
	c = Check{Name: CheckCgroupDelegation}
	if h.euid == 0 {
		c.Status, c.Detail = OK, "not needed: root's runs get cgroups from runc"
		return false, false, c
	}
	if f.Root == "" {
		c.Status = Warn
		c.Detail = fmt.Sprintf("cgroup %s is not delegated to euid %d: rootless runs get no cgroup of their own (run-cgroup-unavailable: no limits, no trace; teardown relies on the pid namespace)", f.Self, h.euid)
		c.Fix = fmt.Sprintf("sudo hookbox rootless setup --user %s -- $SHELL -l (or log in through systemd, whose user@.service is delegated)", h.user)
		return false, false, c
	}
	have := map[string]bool{}
	for _, n := range f.Controllers {
		have[n] = true
	}
	if missing := missingLimitControllers(have); len(missing) > 0 {
		c.Status = Warn
		c.Detail = fmt.Sprintf("runs get their own cgroup under %s/jobs (traceable, killed as a whole), but no %s controller reaches it: limit-unavailable:%s", f.Root, strings.Join(missing, ", "), strings.Join(missing, ", limit-unavailable:"))
		c.Fix = "on a hybrid host v1 controllers are never delegated: use a cgroup v2 host (systemd.unified_cgroup_hierarchy=1), or run as root"
		return true, false, c
	}
	c.Status, c.Detail = OK, fmt.Sprintf("runs get their own cgroup under %s/jobs with cpu, memory and pids limits", f.Root)
	return true, true, c
}

// rootlessContainerdCheck replaces the rootful containerd check for a
// non-root user: hookbox run uses (or starts) a rootless containerd.
func rootlessContainerdCheck(f rootlessDaemonFacts, prerequisites bool) Check {
	c := Check{Name: CheckContainerd}
	switch {
	case f.Version != "":
		c.Status, c.Detail = OK, fmt.Sprintf("rootless containerd %s answers at %s (%s)", f.Version, f.Address, f.Kind)
	case prerequisites:
		c.Status, c.Detail = OK, fmt.Sprintf("no rootless containerd runs yet; hookbox run will start one under rootlesskit at %s", f.Address)
	default:
		c.Status, c.Detail = Fail, "no rootless containerd runs, and rootlesskit, newuidmap/newgidmap or subordinate ids are missing (see below)"
		c.Fix = "apt-get install containerd runc rootlesskit uidmap, and give the user subordinate ids (see the subuid check)"
	}
	return c
}

// rootlessDaemonFacts: the rootless containerd hookbox would use.
type rootlessDaemonFacts struct {
	Address, Kind, Version string
	// Cgroup is the running managed daemon's cgroup2 path ("" if unknown).
	Cgroup string
}

// daemonOutsideCheck: a rootless containerd running outside the delegated
// subtree cannot hand its tasks to run cgroups (moving a process needs the
// common ancestor's cgroup.procs), whatever the subtree offers.
func daemonOutsideCheck(c Check, f delegationFacts, daemonCgroup string) (bool, Check) {
	if f.Root == "" || daemonCgroup == "" || daemonCgroup == f.Root || strings.HasPrefix(daemonCgroup, f.Root+"/") {
		return true, c
	}
	c.Status = Warn
	c.Detail = fmt.Sprintf("%s is delegated, but the running rootless containerd is in cgroup %s, outside it: runs get no cgroup of their own (run-cgroup-unavailable)", f.Root, daemonCgroup)
	c.Fix = "hookbox daemon stop (the next run starts it inside the subtree)"
	return false, c
}
