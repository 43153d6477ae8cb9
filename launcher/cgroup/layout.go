package cgroup

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// Errors of this package, checked with errors.Is.
var (
	// ErrNotFound: the run's cgroup exists in no mounted hierarchy.
	ErrNotFound = errors.New("cgroup not found")
	// ErrInvalidPath: a cgroupsPath that is not a clean absolute path below
	// the root cgroup. The root is refused: signalling it would signal
	// every process on the host.
	ErrInvalidPath = errors.New("invalid cgroups path")
	// ErrNotSupported: the host lacks what the operation needs (no cgroup
	// filesystem, no cgroup2 for an id, no memory controller, a kernel
	// without the oom_kill counter). The error names what is missing.
	ErrNotSupported = errors.New("not supported on this host")
	// ErrBusy: a cgroup could not be removed because it still has members
	// or child cgroups that could not be removed.
	ErrBusy = errors.New("cgroup busy")
)

// Layout is how the host mounts its cgroup hierarchies.
type Layout int

// Layouts. runc (cgroupfs driver) decides the same way: cgroup2 at
// /sys/fs/cgroup means pure v2; otherwise v1, plus the cgroup2 hierarchy
// when one is mounted (conventionally /sys/fs/cgroup/unified).
const (
	Unknown Layout = iota // no cgroup filesystem mounted
	V1                    // v1 hierarchies only, no cgroup2 at all
	Hybrid                // v1 controller hierarchies plus cgroup2 (at /sys/fs/cgroup/unified)
	V2                    // cgroup2 is the hierarchy (at /sys/fs/cgroup)
)

func (l Layout) String() string {
	switch l {
	case V1:
		return "v1"
	case Hybrid:
		return "hybrid"
	case V2:
		return "v2"
	default:
		return "unknown"
	}
}

// v2Root is where a pure cgroup v2 host mounts cgroup2.
const v2Root = "/sys/fs/cgroup"

// v1Controllers are the controllers a v1 hierarchy can carry; any other
// super option (rw, xattr, name=…, release_agent=…) is not a controller.
var v1Controllers = map[string]bool{
	"blkio": true, "cpu": true, "cpuacct": true, "cpuset": true, "debug": true,
	"devices": true, "freezer": true, "hugetlb": true, "memory": true,
	"misc": true, "net_cls": true, "net_prio": true, "perf_event": true,
	"pids": true, "rdma": true,
}

// cgroupMount is one mount of a cgroup hierarchy.
type cgroupMount struct {
	Root       string // the directory of the hierarchy that is mounted ("/" usually)
	MountPoint string
}

// hierarchy is one cgroup hierarchy and every place it is mounted.
type hierarchy struct {
	Unified     bool     // cgroup2
	Dev         string   // major:minor of its superblock, the hierarchy's identity
	Controllers []string // v1 only: cpu, memory… (empty for a named hierarchy)
	Name        string   // v1 only: name=… of a named hierarchy (systemd)
	Mounts      []cgroupMount
}

// has reports whether a v1 hierarchy carries controller c.
func (h hierarchy) has(c string) bool {
	for _, x := range h.Controllers {
		if x == c {
			return true
		}
	}
	return false
}

// dirFor returns the directory of cgroup p (a clean absolute path) in this
// hierarchy, or "" when no mount of it shows p. A mount of the whole
// hierarchy is preferred; a mount of a subtree serves paths inside it.
func (h hierarchy) dirFor(p string) string {
	for _, m := range h.Mounts {
		if m.Root == "/" {
			return path.Join(m.MountPoint, p)
		}
	}
	for _, m := range h.Mounts {
		if p == m.Root {
			return m.MountPoint
		}
		if strings.HasPrefix(p, m.Root+"/") {
			return path.Join(m.MountPoint, strings.TrimPrefix(p, m.Root))
		}
	}
	return ""
}

// parseHierarchies returns the cgroup hierarchies in mountinfo text
// (proc(5)), in order of first mount, each with all its mounts. A malformed
// line is an error rather than skipped: a hierarchy we could not read must
// not look like one that is not there.
func parseHierarchies(mountinfo string) ([]hierarchy, error) {
	var out []hierarchy
	index := map[string]int{}
	for n, line := range strings.Split(mountinfo, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		fields := strings.Fields(line)
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || len(fields) < sep+3 {
			return nil, fmt.Errorf("mountinfo line %d is malformed: %q", n+1, line)
		}
		fstype := fields[sep+1]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		dev := fields[2]
		m := cgroupMount{Root: unescapeOctal(fields[3]), MountPoint: unescapeOctal(fields[4])}
		if !path.IsAbs(m.Root) || !path.IsAbs(m.MountPoint) {
			return nil, fmt.Errorf("mountinfo line %d: cgroup mount with a relative path: %q", n+1, line)
		}
		m.Root, m.MountPoint = path.Clean(m.Root), path.Clean(m.MountPoint)
		if i, ok := index[dev]; ok {
			out[i].Mounts = append(out[i].Mounts, m)
			continue
		}
		h := hierarchy{Unified: fstype == "cgroup2", Dev: dev, Mounts: []cgroupMount{m}}
		if !h.Unified && len(fields) > sep+3 {
			for _, opt := range strings.Split(fields[sep+3], ",") {
				switch {
				case v1Controllers[opt]:
					h.Controllers = append(h.Controllers, opt)
				case strings.HasPrefix(opt, "name="):
					h.Name = strings.TrimPrefix(opt, "name=")
				}
			}
		}
		index[dev] = len(out)
		out = append(out, h)
	}
	return out, nil
}

// unescapeOctal undoes the kernel's octal escapes (\040 for a space, \011,
// \012, \134) in a mountinfo field.
func unescapeOctal(s string) string {
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

// classify names the layout of a set of hierarchies.
func classify(hs []hierarchy) Layout {
	var unified, v1 bool
	for _, h := range hs {
		if !h.Unified {
			v1 = true
			continue
		}
		unified = true
		for _, m := range h.Mounts {
			if m.MountPoint == v2Root && m.Root == "/" {
				return V2
			}
		}
	}
	switch {
	case unified && v1:
		return Hybrid
	case unified:
		return V2 // cgroup2 alone, mounted somewhere unusual
	case v1:
		return V1
	default:
		return Unknown
	}
}

// checkPath validates a cgroupsPath as the spec gives it to runc.
func checkPath(p string) error {
	switch {
	case p == "" || !path.IsAbs(p):
		return fmt.Errorf("%w %q: must be absolute (cgroupfs driver, e.g. /hookbox/<run-id>)", ErrInvalidPath, p)
	case path.Clean(p) != p:
		return fmt.Errorf("%w %q: not clean (want %q)", ErrInvalidPath, p, path.Clean(p))
	case p == "/":
		return fmt.Errorf("%w %q: the root cgroup holds every process on the host", ErrInvalidPath, p)
	case strings.ContainsAny(p, "\x00\n"):
		return fmt.Errorf("%w %q: contains a NUL or newline", ErrInvalidPath, p)
	}
	return nil
}
