//go:build linux

package ebpf

import (
	"errors"
	"fmt"
	"os"

	cebpf "github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/internal/host"
)

const vmlinuxBTF = "/sys/kernel/btf/vmlinux"

// tracefsPlaces are where cilium/ebpf looks for tracefs when nothing is
// listed in mountinfo; EnsureTracefs mounts at the first.
var tracefsPlaces = []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}

// TracefsPath is where tracefs is mounted, found the way cilium/ebpf finds
// it (a tracefs mount of its root in the mount table, then statfs of the
// usual places), or "" when it is not mounted.
func TracefsPath() string {
	if mounts, err := host.Mounts(); err == nil {
		if p := host.TracefsMount(mounts); p != "" {
			return p
		}
	}
	for _, p := range tracefsPlaces {
		var st unix.Statfs_t
		if unix.Statfs(p, &st) == nil && st.Type == unix.TRACEFS_MAGIC {
			return p
		}
	}
	return ""
}

// EnsureTracefs mounts tracefs at /sys/kernel/tracing when it is not
// mounted anywhere cilium/ebpf looks (attaching a tracepoint needs it to
// read the event id). It needs CAP_SYS_ADMIN in the initial mount
// namespace's view of /sys; the mount is left in place (as systemd would
// have made it: nosuid, nodev, noexec).
//
// Call it before the first Load in a process: cilium/ebpf remembers a
// missing tracefs for the life of the process.
func EnsureTracefs() error {
	if TracefsPath() != "" {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(tracefsPlaces[0], &st); err != nil {
		return fmt.Errorf("%w: tracefs is not mounted and %s is missing: %v", ErrNotSupported, tracefsPlaces[0], err)
	}
	err := unix.Mount("tracefs", tracefsPlaces[0], "tracefs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_RELATIME, "")
	if err != nil {
		if errors.Is(err, unix.ENODEV) {
			return fmt.Errorf("%w: the kernel has no tracefs (CONFIG_FTRACE)", ErrNotSupported)
		}
		return fmt.Errorf("%w: mount -t tracefs tracefs %s: %v", ErrNotSupported, tracefsPlaces[0], err)
	}
	if TracefsPath() == "" {
		return fmt.Errorf("%w: mounted tracefs at %s but cannot find it again", ErrNotSupported, tracefsPlaces[0])
	}
	return nil
}

// checkHost reports the first missing requirement Load can detect
// without loading anything.
func checkHost() error {
	if fi, err := os.Stat(vmlinuxBTF); err != nil || fi.Size() == 0 {
		return fmt.Errorf("%w: no kernel BTF at %s (CONFIG_DEBUG_INFO_BTF)", ErrNotSupported, vmlinuxBTF)
	}
	if TracefsPath() == "" {
		return fmt.Errorf("%w: tracefs is not mounted (EnsureTracefs, or mount -t tracefs tracefs /sys/kernel/tracing)", ErrNotSupported)
	}
	return nil
}

// unsupported wraps a load or attach error in ErrNotSupported when it
// means the host cannot do it (privilege, kernel feature), keeping the
// cause inspectable.
func unsupported(what string, err error) error {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w: %s: %w (needs root, or CAP_BPF and CAP_PERFMON)", ErrNotSupported, what, err)
	case errors.Is(err, cebpf.ErrNotSupported):
		return fmt.Errorf("%w: %s: %w", ErrNotSupported, what, err)
	case errors.Is(err, os.ErrNotExist):
		// A tracepoint the kernel does not have (syscall tracepoints
		// need CONFIG_FTRACE_SYSCALLS).
		return fmt.Errorf("%w: %s: %w", ErrNotSupported, what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// EnsureSecurityfs mounts securityfs at /sys/kernel/security when it is not
// mounted, so Load can read which LSMs are active (host.LSMFile). It needs
// root; the mount is left in place (nosuid, nodev, noexec, as systemd
// makes it). Without it, Load works and leaves the BPF LSM programs out.
func EnsureSecurityfs() error {
	if _, err := host.ReadLSMs(host.LSMFile); !errors.Is(err, host.ErrNoSecurityfs) {
		return nil
	}
	err := unix.Mount("securityfs", host.SecurityfsDir, "securityfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_RELATIME, "")
	if err != nil {
		return fmt.Errorf("%w: mount -t securityfs securityfs %s: %v", ErrNotSupported, host.SecurityfsDir, err)
	}
	return nil
}

// removeMemlock lifts RLIMIT_MEMLOCK, which kernels before 5.11 charge BPF
// maps and programs to (later ones charge the memory cgroup). It is ours,
// not cilium/ebpf's rlimit.RemoveMemlock, because that package's init
// creates a BPF map to detect the accounting in every process that links
// it: ~0.4 ms of every hookbox command, most of which never trace. Without
// CAP_SYS_RESOURCE the limit stays: 5.11 and later do not consult it, and
// an older kernel refuses the first map with EPERM, which unsupported
// reports as a missing privilege.
func removeMemlock() error {
	unlimited := unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
	err := unix.Prlimit(0, unix.RLIMIT_MEMLOCK, &unlimited, nil)
	if errors.Is(err, unix.EPERM) {
		return nil
	}
	return err
}
