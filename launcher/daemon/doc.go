// Package daemon finds the containerd hookbox talks to, and owns the managed
// private containerd hookbox starts when none answers, and the process of
// the managed exec tracer (ManagedTracer: started, found through its pid
// file and command line, stopped).
//
// Address precedence (Resolve): the --address flag, then
// $HOOKBOX_CONTAINERD_ADDRESS, then /run/containerd/containerd.sock. An
// address named by the flag or the environment is final: if it does not
// answer, Resolve fails rather than silently using another daemon. Only when
// the system default does not answer, auto-start is allowed and a containerd
// binary exists does Resolve start the managed daemon; one already running
// is reused even without auto-start.
//
// The managed daemon is a containerd with its own generated config, its own
// root under hookbox's state directory, and its own state directory and
// sockets under hookbox's runtime directory (ManagedPaths), with the CRI
// plugin disabled. It shares no root, state, socket or metadata database
// with the system containerd. It is started detached (new session, stdin
// /dev/null, stdout and stderr appended to its log file, pid in a pid file)
// so it outlives the hookbox process that started it; later runs reuse it
// and `hookbox daemon status|stop` manage it (Managed.Status, Managed.Stop).
//
// What it does not guarantee: containerd 1.6 keeps two host-wide paths that
// no config setting moves, /run/containerd/s (shim sockets, named by a hash
// that includes the daemon's address, so they never collide) and the runc
// state root /run/containerd/runc/<namespace> (unless the task is created
// with runc options naming another Root: Managed.RuncRoot is the one to
// use).
//
// Stopping the managed daemon ends what it ran: containerd leaves its
// shims (and the tasks they serve) running when it exits, so Stop then ends
// every shim started with this daemon's address and removes the task
// bundles in its state directory (Managed.EndShims). That is done as root
// only: a rootless daemon's shims and tasks live in RootlessKit's user and
// mount namespaces, and the next start of that daemon finds them.
//
// Shims are found as processes (Shims: a containerd-shim command line with
// -namespace, -id and -address, working in the task's bundle), not through
// containerd, so that gc can end a shim containerd lost track of (a client
// killed while its task was created or deleted) and Stop can end them once
// the daemon is gone. Shim.End does what containerd does for a dead shim:
// the shim binary's own delete (runc delete --force, rootfs unmounted),
// then SIGKILL, and the bundle removed.
//
// A process found through the pid file is only trusted after its identity is
// checked (a containerd whose command line names this daemon's config file),
// and it is signalled through a pidfd, so a recycled pid is never signalled.
//
// This package does not choose a containerd namespace (callers set it) and
// does not read containerd's metadata (containers, snapshots, leases): which
// shim is abandoned is the caller's decision.
package daemon
