// Package cgroup owns reading and signalling a run's cgroups on the host. It
// never creates containers. As root it never creates a run's cgroup: runc
// does that from the spec's linux.cgroupsPath (cgroupfs driver, e.g.
// /hookbox/<run-id>). Rootless, runc cannot, and Delegation.Place creates it
// inside the cgroup2 subtree delegated to the user (see Delegation). This
// package finds a run's path in every mounted hierarchy, lists and signals
// its members, waits for it to empty, reads its memory events and removes
// it.
//
// # Layouts
//
// The layout comes from internal/host (the mount table); nothing about
// where a hierarchy lives is assumed. On a hybrid host (v1 controllers,
// cgroup2 at /sys/fs/cgroup/unified) runc puts the init process into every v1
// hierarchy and into the cgroup2 hierarchy, so a run has one directory per
// hierarchy: Run.Unified for cgroup2 and Run.V1 for the others. On a pure v2
// host there is only Run.Unified. Membership is the union over all of them:
// a process that is in the run's cgroup in any hierarchy is a member.
//
// # Identity
//
// Run.ID is the cgroup id that bpf_get_current_cgroup_id() returns, the
// inode number of the cgroup2 directory. A cgroup removed and created again
// at the same path gets a new id, so comparing a live ID against the spawn
// record (docs/contracts.md §1) tells a reused path from the original, as
// host.StartTime and host.ProcessAlive do for a pid.
//
// # Teardown
//
// A process group is not a containment boundary; the cgroup is
// (docs/contracts.md §2). KillAll signals every member, WaitEmpty waits
// until there is none, Remove removes the directories. See KillAll for
// exactly what it guarantees on each layout. A teardown that must not
// leave anything running loops:
//
//	for {
//		r.KillAll(unix.SIGKILL)
//		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
//		err := r.WaitEmpty(ctx, 0)
//		cancel()
//		if err == nil {
//			break
//		}
//	}
//	r.Remove()
//
// Only a process in uninterruptible sleep can keep that loop going, and no
// signal can end such a process sooner.
//
// Process pins one process (a run's init) with a pidfd: it is signalled,
// and its exit and exit status read, through the kernel, so teardown and
// the watchdogs need no answer from the container runtime
// (docs/architecture.md "Teardown when containerd fails").
//
// Paths are interpreted in the caller's cgroup namespace (the host's, for
// hookbox), as are the pids it reads and signals.
package cgroup
