//go:build linux

package ebpf

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	cebpf "github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

const vmlinuxBTF = "/sys/kernel/btf/vmlinux"

// tracefsPlaces are where cilium/ebpf looks for tracefs when nothing is
// listed in mountinfo; EnsureTracefs mounts at the first.
var tracefsPlaces = []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}

// TracefsPath is where tracefs is mounted, found the way cilium/ebpf finds
// it (a tracefs mount of its root in /proc/self/mountinfo, then statfs of
// the usual places), or "" when it is not mounted.
func TracefsPath() string {
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		defer f.Close()
		s := bufio.NewScanner(f)
		s.Buffer(make([]byte, 64<<10), 1<<20)
		for s.Scan() {
			if p := tracefsMountPoint(s.Text()); p != "" {
				return p
			}
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

// tracefsMountPoint returns the mount point of a mountinfo line that mounts
// the root of a tracefs, else "".
func tracefsMountPoint(line string) string {
	pre, post, ok := strings.Cut(line, " - ")
	if !ok {
		return ""
	}
	f, g := strings.Fields(pre), strings.Fields(post)
	if len(f) < 5 || len(g) < 1 || g[0] != "tracefs" || f[3] != "/" {
		return ""
	}
	return unescapeMountinfo(f[4])
}

func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

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
