// Package daemon finds the containerd hookbox talks to, and owns the managed
// private containerd hookbox starts when none answers.
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
// use). Stopping the daemon does not stop containers it started: their
// shims keep running and the next start of the daemon reconnects to them.
//
// A process found through the pid file is only trusted after its identity is
// checked (a containerd whose command line names this daemon's config file),
// and it is signalled through a pidfd, so a recycled pid is never signalled.
//
// This package does not choose a containerd namespace (callers set it) and
// does not inspect what the daemon runs.
package daemon
