// Package host reads facts about the machine hookbox runs on: processes
// (the pids /proc lists; /proc/<pid>/stat, cmdline, cwd, exe, cgroup), the
// mount table, the cgroup layout, the user namespace, and writes files
// atomically. It is a leaf:
// it imports only the standard library, golang.org/x/sys and the libraries
// that already know these formats (moby/sys/mountinfo, moby/sys/userns,
// containerd/cgroups), never another hookbox package, so every hookbox
// package that needs a host fact asks here and they all read it the same
// way.
package host
