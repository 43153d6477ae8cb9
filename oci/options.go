package oci

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/containerd/containerd/v2/core/containers"
	ctroci "github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"hookbox.dev/hookbox/internal/initsecrets"
	"hookbox.dev/hookbox/render"
)

// Each option below is one hardening decision, in containerd's SpecOpts form.

type specOpt = ctroci.SpecOpts

func ensureProcess(s *specs.Spec) {
	if s.Process == nil {
		s.Process = &specs.Process{}
	}
}

func ensureLinux(s *specs.Spec) {
	if s.Linux == nil {
		s.Linux = &specs.Linux{}
	}
}

// WithReadonlyRootfs sets the root filesystem and makes it read-only.
func WithReadonlyRootfs(path string) specOpt {
	return func(ctx context.Context, c ctroci.Client, ctr *containers.Container, s *specs.Spec) error {
		if path == "" {
			return fmt.Errorf("oci: rootfs path is empty")
		}
		if err := ctroci.WithRootFSPath(path)(ctx, c, ctr, s); err != nil {
			return err
		}
		return ctroci.WithRootFSReadonly()(ctx, c, ctr, s)
	}
}

// WithProcess sets argv, cwd and exactly the render's environment: no
// default variable of containerd's spec survives (docs/contracts.md §3).
// hostValues holds the launch-time values of host variables; nil means a
// plan view, where they show PlaceholderValue; at launch a host variable
// without a value is left out. No secret's value is ever in the spec,
// which containerd writes to disk: a secret's entry holds
// PlaceholderValue, and initsecrets.Variable lists the secrets for
// hookbox-init, which puts the values the launcher writes to its stdin in
// their entries' places (package internal/initsecrets).
func WithProcess(r *render.Render, hostValues map[string]string) specOpt {
	return func(_ context.Context, _ ctroci.Client, _ *containers.Container, s *specs.Spec) error {
		if len(r.Process.Argv) == 0 {
			return fmt.Errorf("oci: the render has no argv")
		}
		secrets := SecretNames(r)
		if len(secrets) > 0 && r.Init == nil {
			return fmt.Errorf("oci: secrets %s reach the engine only through hookbox-init, and this render has no init (it predates it): render the spawn again", strings.Join(secrets, ", "))
		}
		ensureProcess(s)
		s.Process.Args = slices.Clone(r.Process.Argv)
		s.Process.Cwd = r.Process.Cwd
		s.Process.Terminal = false
		env := make([]string, 0, len(r.Process.Env)+1)
		for _, e := range r.Process.Env {
			value := e.Value
			switch e.Source {
			case render.EnvSecret:
				value = PlaceholderValue
			case render.EnvHost:
				v, ok := hostValues[e.Name]
				switch {
				case hostValues == nil:
					v = PlaceholderValue
				case !ok:
					continue
				}
				value = v
			}
			env = append(env, e.Name+"="+value)
		}
		if len(secrets) > 0 {
			env = append(env, initsecrets.Variable(secrets))
		}
		s.Process.Env = env
		return nil
	}
}

// SecretNames are the render's secret variables (gateway secrets are not:
// they never enter the container), in the order of its environment: the
// order in which hookbox-init reads their values.
func SecretNames(r *render.Render) []string {
	var names []string
	for _, e := range r.Process.Env {
		if e.Source == render.EnvSecret {
			names = append(names, e.Name)
		}
	}
	return names
}

// WithHostname names the UTS namespace after the spawn.
func WithHostname(name string) specOpt { return ctroci.WithHostname(name) }

// WithUnprivilegedUser runs the process as uid:gid with no supplementary
// groups.
func WithUnprivilegedUser(uid, gid uint32) specOpt {
	return func(_ context.Context, _ ctroci.Client, _ *containers.Container, s *specs.Spec) error {
		if uid == 0 {
			return fmt.Errorf("oci: refusing to run the engine as root")
		}
		ensureProcess(s)
		s.Process.User = specs.User{UID: uid, GID: gid}
		return nil
	}
}

// WithNoCapabilities empties every capability set, ambient included.
func WithNoCapabilities() specOpt {
	return func(_ context.Context, _ ctroci.Client, _ *containers.Container, s *specs.Spec) error {
		ensureProcess(s)
		s.Process.Capabilities = &specs.LinuxCapabilities{
			Bounding: []string{}, Effective: []string{}, Permitted: []string{}, Inheritable: []string{}, Ambient: []string{},
		}
		return nil
	}
}

// isolatedNamespaces are the namespaces every run gets fresh. A new network
// namespace without configuration has only a loopback interface.
var isolatedNamespaces = []specs.LinuxNamespaceType{
	specs.PIDNamespace, specs.MountNamespace, specs.IPCNamespace,
	specs.UTSNamespace, specs.NetworkNamespace, specs.CgroupNamespace,
}

// WithIsolatedNamespaces gives the run new pid, mount, ipc, uts, network
// and cgroup namespaces (never a path to an existing one).
func WithIsolatedNamespaces() specOpt {
	return func(_ context.Context, _ ctroci.Client, _ *containers.Container, s *specs.Spec) error {
		ensureLinux(s)
		var ns []specs.LinuxNamespace
		for _, n := range s.Linux.Namespaces {
			if !slices.Contains(isolatedNamespaces, n.Type) {
				ns = append(ns, n)
			}
		}
		for _, t := range isolatedNamespaces {
			ns = append(ns, specs.LinuxNamespace{Type: t})
		}
		s.Linux.Namespaces = ns
		return nil
	}
}

// WithLimits applies memory (swap included, so no swap), pids and CPU limits.
func WithLimits(l render.Limits) specOpt {
	return func(_ context.Context, _ ctroci.Client, _ *containers.Container, s *specs.Spec) error {
		ensureLinux(s)
		if s.Linux.Resources == nil {
			s.Linux.Resources = &specs.LinuxResources{}
		}
		res := s.Linux.Resources
		if l.MemoryBytes > 0 {
			mem, swap := l.MemoryBytes, l.MemoryBytes
			res.Memory = &specs.LinuxMemory{Limit: &mem, Swap: &swap}
		}
		if l.Pids > 0 {
			res.Pids = &specs.LinuxPids{Limit: &l.Pids}
		}
		if l.MilliCPUs > 0 {
			quota, period := l.MilliCPUs*cpuPeriod/1000, uint64(cpuPeriod)
			if res.CPU == nil {
				res.CPU = &specs.LinuxCPU{}
			}
			res.CPU.Quota, res.CPU.Period = &quota, &period
		}
		return nil
	}
}

// WithNofile sets RLIMIT_NOFILE (soft and hard).
func WithNofile(n uint64) specOpt {
	return ctroci.WithRlimit(&specs.POSIXRlimit{Type: "RLIMIT_NOFILE", Hard: n, Soft: n})
}

// WithNoexecDev adds noexec to the /dev tmpfs of the default spec, so no
// writable place in the container can hold a program.
func WithNoexecDev() specOpt {
	return func(_ context.Context, _ ctroci.Client, _ *containers.Container, s *specs.Spec) error {
		for i := range s.Mounts {
			if s.Mounts[i].Destination == "/dev" && !slices.Contains(s.Mounts[i].Options, "noexec") {
				s.Mounts[i].Options = append(s.Mounts[i].Options, "noexec")
			}
		}
		return nil
	}
}

// ShmInodes is the inode limit of the container's /dev/shm: containerd's
// default makes it a 64 MiB tmpfs with the kernel's default inode count
// (half the host's RAM pages), so empty files, which take none of its
// size, could pile up in host kernel memory. 4096 is what the run dir gets
// for that size (one inode per 16 KiB, at least 4096).
const ShmInodes = 4096

// WithShmInodes adds nr_inodes=ShmInodes to the /dev/shm tmpfs of the
// default spec.
func WithShmInodes() specOpt {
	return func(_ context.Context, _ ctroci.Client, _ *containers.Container, s *specs.Spec) error {
		for i := range s.Mounts {
			if s.Mounts[i].Destination == "/dev/shm" && s.Mounts[i].Type == "tmpfs" {
				s.Mounts[i].Options = append(s.Mounts[i].Options, "nr_inodes="+strconv.Itoa(ShmInodes))
			}
		}
		return nil
	}
}

// WithPlannedMounts appends the run's planned mounts after the defaults,
// refusing any that would replace a default mount (/proc, /dev, /sys…).
func WithPlannedMounts(mounts []specs.Mount) specOpt {
	return func(_ context.Context, _ ctroci.Client, _ *containers.Container, s *specs.Spec) error {
		for _, m := range mounts {
			for _, d := range s.Mounts {
				if d.Destination == m.Destination {
					return fmt.Errorf("oci: mount at %s would replace a default mount", m.Destination)
				}
			}
			s.Mounts = append(s.Mounts, m)
		}
		return nil
	}
}

// processAccessSyscalls read or write another process's memory, take its
// file descriptors or compare its kernel objects: containerd's profile
// allows them only with CAP_SYS_PTRACE, except ptrace and process_vm_*,
// which it allows on every kernel since 4.8 (between processes of one
// uid, that is code injection into an already-verified engine or hook).
var processAccessSyscalls = []string{"kcmp", "pidfd_getfd", "process_madvise", "process_vm_readv", "process_vm_writev", "ptrace"}

// WithNoProcessAccess makes the seccomp profile (containerd's default,
// applied before it) fail processAccessSyscalls with EPERM: it takes them
// out of every rule and adds an explicit denial, so the profile denies them
// whatever its default action. The BPF LSM denies the rest of ptrace-class
// access (/proc/<pid>/mem) where the host has it (docs/threat-model.md).
func WithNoProcessAccess() specOpt {
	return func(_ context.Context, _ ctroci.Client, _ *containers.Container, s *specs.Spec) error {
		sc, err := seccompProfile(s, "deny ptrace in")
		if err != nil {
			return err
		}
		rules := make([]specs.LinuxSyscall, 0, len(sc.Syscalls)+1)
		for _, r := range sc.Syscalls {
			r.Names = slices.DeleteFunc(slices.Clone(r.Names), func(n string) bool {
				return slices.Contains(processAccessSyscalls, n)
			})
			if len(r.Names) > 0 {
				rules = append(rules, r)
			}
		}
		eperm := uint(syscall.EPERM)
		rules = append(rules, specs.LinuxSyscall{
			Names:    slices.Clone(processAccessSyscalls),
			Action:   specs.ActErrno,
			ErrnoRet: &eperm,
		})
		sc.Syscalls = rules
		return nil
	}
}

// nativeArch is the seccomp architecture of the programs hookbox runs
// (the host's own ABI).
var nativeArch = map[string]specs.Arch{
	"amd64":   specs.ArchX86_64,
	"arm64":   specs.ArchAARCH64,
	"riscv64": specs.ArchRISCV64,
	"s390x":   specs.ArchS390X,
	"loong64": specs.ArchLOONGARCH64,
}

// WithNativeArchOnly limits the seccomp profile to the host's own ABI:
// containerd's default also admits the compat ABIs (x86 and x32 on amd64,
// arm on arm64), whose syscall entry points are a separate kernel attack
// surface no engine needs. A syscall through another ABI meets the filter's
// bad-architecture action and the calling thread is killed
// (docs/threat-model.md). One ABI is also one section of program instead
// of three (SeccompFilter compiles it), and the profile drops the names
// only other architectures have (nativeNames).
func WithNativeArchOnly() specOpt {
	return func(_ context.Context, _ ctroci.Client, _ *containers.Container, s *specs.Spec) error {
		sc, err := seccompProfile(s, "limit to the native ABI")
		if err != nil {
			return err
		}
		if a, ok := nativeArch[runtime.GOARCH]; ok {
			sc.Architectures = []specs.Arch{a}
			sc.Syscalls = nativeNames(sc.Syscalls, runtime.GOARCH)
		}
		return nil
	}
}

// nativeNames leaves out of rules the syscall names that exist on other
// Linux architectures but not on arch (stat64, chown32, socketcall,
// _llseek, … on amd64: a fifth of containerd's default profile), and the
// rules left with no name. A filter for arch alone cannot match them
// (SeccompFilter, like libseccomp, skips a name its architecture lacks);
// where runc builds the profile, each was a name it resolved and logged at
// every start: without them, runc run of hookbox's spec took 21.7 ms
// instead of 24.1 (60 runs each, 2026-12-02). A name no architecture's
// table has (newer than golang.org/x/sys, or misspelt) is kept: the
// compiler decides.
func nativeNames(rules []specs.LinuxSyscall, arch string) []specs.LinuxSyscall {
	kept := make([]specs.LinuxSyscall, 0, len(rules))
	for _, r := range rules {
		r.Names = slices.DeleteFunc(slices.Clone(r.Names), func(n string) bool {
			arches, known := syscallArches(n)
			return known && !slices.Contains(arches, arch)
		})
		if len(r.Names) > 0 {
			kept = append(kept, r)
		}
	}
	return kept
}

// syscallArchSet is one name of syscallArchTable (zsyscalls.go) and the
// architectures that have it.
type syscallArchSet struct {
	Name   string
	Arches []string
}

// syscallArches is the architectures whose table has the syscall name, and
// whether any has it.
func syscallArches(name string) ([]string, bool) {
	i, found := slices.BinarySearchFunc(syscallArchTable, name, func(e syscallArchSet, n string) int { return strings.Compare(e.Name, n) })
	if !found {
		return nil, false
	}
	return syscallArchTable[i].Arches, true
}

// seccompProfile is the spec's profile, which the options that narrow it
// need applied before them.
func seccompProfile(s *specs.Spec, purpose string) (*specs.LinuxSeccomp, error) {
	if s.Linux == nil || s.Linux.Seccomp == nil {
		return nil, fmt.Errorf("oci: no seccomp profile to %s (apply the default profile first)", purpose)
	}
	return s.Linux.Seccomp, nil
}

//go:generate go run ./gensyscalls
