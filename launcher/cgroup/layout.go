package cgroup

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"hookbox.dev/hookbox/internal/mountinfo"
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

// hierarchies returns the cgroup hierarchies among mounts, in order of
// first mount, each with all its mounts. A cgroup mount with a relative
// root or mount point is an error rather than skipped: a hierarchy we could
// not place must not look like one that is not there.
func hierarchies(mounts []mountinfo.Mount) ([]hierarchy, error) {
	var out []hierarchy
	index := map[string]int{}
	for _, mi := range mounts {
		if mi.FSType != "cgroup" && mi.FSType != "cgroup2" {
			continue
		}
		m := cgroupMount{Root: mi.Root, MountPoint: mi.MountPoint}
		if !path.IsAbs(m.Root) || !path.IsAbs(m.MountPoint) {
			return nil, fmt.Errorf("mountinfo mount %d: cgroup mount with a relative path: root %q, mount point %q", mi.ID, m.Root, m.MountPoint)
		}
		m.Root, m.MountPoint = path.Clean(m.Root), path.Clean(m.MountPoint)
		dev := fmt.Sprintf("%d:%d", mi.Major, mi.Minor)
		if i, ok := index[dev]; ok {
			out[i].Mounts = append(out[i].Mounts, m)
			continue
		}
		h := hierarchy{Unified: mi.FSType == "cgroup2", Dev: dev, Mounts: []cgroupMount{m}}
		if !h.Unified {
			for _, opt := range mi.SuperOptions {
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
