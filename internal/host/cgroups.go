package host

import (
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/containerd/cgroups/v3"
)

// CgroupMode is how the host mounts its cgroup hierarchies, in the terms
// of containerd's cgroups.Mode.
type CgroupMode int

// Cgroup modes. cgroups.Mode asks statfs of /sys/fs/cgroup and
// /sys/fs/cgroup/unified; CgroupsOf decides the same from the mount table,
// which also serves a fixture and a cgroup2 mounted elsewhere:
//
//   - the filesystem at /sys/fs/cgroup is cgroup2: Unified;
//   - else a v1 hierarchy carries a controller and cgroup2 is mounted
//     anywhere (conventionally /sys/fs/cgroup/unified): Hybrid;
//   - else cgroup2 mounted elsewhere with no v1 controller: Unified;
//   - else a v1 hierarchy: Legacy; else Unavailable.
const (
	CgroupUnavailable CgroupMode = iota // no cgroup filesystem mounted
	CgroupLegacy                        // v1 hierarchies only, no cgroup2
	CgroupHybrid                        // v1 controller hierarchies plus cgroup2
	CgroupUnified                       // cgroup2 is the hierarchy
)

// String names the mode as hookbox reports it: v1, hybrid, v2, unknown.
func (m CgroupMode) String() string {
	switch m {
	case CgroupLegacy:
		return "v1"
	case CgroupHybrid:
		return "hybrid"
	case CgroupUnified:
		return "v2"
	default:
		return "unknown"
	}
}

// CgroupRoot is where a pure cgroup v2 host mounts cgroup2, and a v1 or
// hybrid host the tmpfs that holds its hierarchies.
const CgroupRoot = "/sys/fs/cgroup"

// v1Controllers are the controllers a v1 hierarchy can carry; any other
// super option (rw, xattr, name=…, release_agent=…) is not a controller.
var v1Controllers = map[string]bool{
	"blkio": true, "cpu": true, "cpuacct": true, "cpuset": true, "debug": true,
	"devices": true, "freezer": true, "hugetlb": true, "memory": true,
	"misc": true, "net_cls": true, "net_prio": true, "perf_event": true,
	"pids": true, "rdma": true,
}

// CgroupMount is one mount of a cgroup hierarchy.
type CgroupMount struct {
	Root       string // the directory of the hierarchy that is mounted ("/" usually)
	MountPoint string
}

// CgroupHierarchy is one cgroup hierarchy and every place it is mounted.
type CgroupHierarchy struct {
	Unified     bool     // cgroup2
	Dev         string   // major:minor of its superblock, the hierarchy's identity
	Controllers []string // v1 only: cpu, memory… (empty for a named hierarchy)
	Name        string   // v1 only: name=… of a named hierarchy (systemd)
	Mounts      []CgroupMount
}

// Has reports whether a v1 hierarchy carries controller c.
func (h CgroupHierarchy) Has(c string) bool { return slices.Contains(h.Controllers, c) }

// DirFor returns the directory of cgroup p (a clean absolute path) in this
// hierarchy, or "" when no mount of it shows p. A mount of the whole
// hierarchy is preferred; a mount of a subtree serves paths inside it.
func (h CgroupHierarchy) DirFor(p string) string {
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

// Cgroups is the host's cgroup layout: its mode, where cgroup2 is, and
// every hierarchy.
type Cgroups struct {
	Mode CgroupMode
	// Unified is where the whole cgroup2 hierarchy is mounted: CgroupRoot,
	// else /sys/fs/cgroup/unified, else the first mount of its root; ""
	// when cgroup2 is not mounted.
	Unified     string
	Hierarchies []CgroupHierarchy // in order of first mount
}

// V1Controllers maps every v1 controller to where its hierarchy is mounted.
func (c Cgroups) V1Controllers() map[string]string {
	out := map[string]string{}
	for _, h := range c.Hierarchies {
		for _, name := range h.Controllers {
			out[name] = h.Mounts[0].MountPoint
		}
	}
	return out
}

// HostCgroups reads the cgroup layout from this process's mount table.
func HostCgroups() (Cgroups, error) {
	mounts, err := Mounts()
	if err != nil {
		return Cgroups{}, err
	}
	c, err := CgroupsOf(mounts)
	if err != nil {
		return Cgroups{}, fmt.Errorf("reading this process's cgroup mounts: %w", err)
	}
	return c, nil
}

// CgroupsOf finds the cgroup layout in a mount table. A cgroup mount with
// a relative root or mount point is an error rather than skipped: a
// hierarchy that could not be placed must not look like one that is not
// there.
func CgroupsOf(mounts []Mount) (Cgroups, error) {
	var c Cgroups
	index := map[string]int{}
	for _, mi := range mounts {
		if mi.FSType != "cgroup" && mi.FSType != "cgroup2" {
			continue
		}
		m := CgroupMount{Root: mi.Root, MountPoint: mi.MountPoint}
		if !path.IsAbs(m.Root) || !path.IsAbs(m.MountPoint) {
			return Cgroups{}, fmt.Errorf("mount %d: cgroup mount with a relative path: root %q, mount point %q", mi.ID, m.Root, m.MountPoint)
		}
		m.Root, m.MountPoint = path.Clean(m.Root), path.Clean(m.MountPoint)
		dev := fmt.Sprintf("%d:%d", mi.Major, mi.Minor)
		if i, ok := index[dev]; ok {
			c.Hierarchies[i].Mounts = append(c.Hierarchies[i].Mounts, m)
			continue
		}
		h := CgroupHierarchy{Unified: mi.FSType == "cgroup2", Dev: dev, Mounts: []CgroupMount{m}}
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
		index[dev] = len(c.Hierarchies)
		c.Hierarchies = append(c.Hierarchies, h)
	}
	c.Unified = unifiedMount(c.Hierarchies)
	c.Mode = classify(c.Hierarchies, TopmostAt(mounts, CgroupRoot))
	return c, nil
}

// unifiedMount is where the root of the cgroup2 hierarchy is mounted.
func unifiedMount(hs []CgroupHierarchy) string {
	var roots []string
	for _, h := range hs {
		for _, m := range h.Mounts {
			if h.Unified && m.Root == "/" {
				roots = append(roots, m.MountPoint)
			}
		}
	}
	for _, want := range []string{CgroupRoot, path.Join(CgroupRoot, "unified")} {
		if slices.Contains(roots, want) {
			return want
		}
	}
	if len(roots) > 0 {
		return roots[0]
	}
	return ""
}

// classify names the mode of hierarchies, given the mount that statfs of
// CgroupRoot would see (nil: nothing is mounted there).
func classify(hs []CgroupHierarchy, atRoot *Mount) CgroupMode {
	if atRoot != nil && atRoot.FSType == "cgroup2" {
		return CgroupUnified
	}
	var unified, v1, v1Controller bool
	for _, h := range hs {
		switch {
		case h.Unified:
			unified = true
		default:
			v1 = true
			v1Controller = v1Controller || len(h.Controllers) > 0
		}
	}
	switch {
	case unified && v1Controller:
		return CgroupHybrid
	case unified:
		return CgroupUnified
	case v1:
		return CgroupLegacy
	default:
		return CgroupUnavailable
	}
}

// ProcCgroup is a process's cgroup membership, /proc/<pid>/cgroup.
type ProcCgroup struct {
	Unified string            // cgroup2 path (the "0::" line); "" when there is none
	V1      map[string]string // v1 controller, or name=… of a named hierarchy → path
}

// ParseProcCgroup parses the text of /proc/<pid>/cgroup.
func ParseProcCgroup(data string) (ProcCgroup, error) {
	v1, unified, err := cgroups.ParseCgroupFromReaderUnified(strings.NewReader(data))
	if err != nil {
		return ProcCgroup{}, fmt.Errorf("parsing /proc/<pid>/cgroup: %w", err)
	}
	return ProcCgroup{Unified: unified, V1: v1}, nil
}

// ReadProcCgroup reads the cgroup membership of pid (0: this process).
func ReadProcCgroup(pid int) (ProcCgroup, error) {
	file := "/proc/self/cgroup"
	if pid != 0 {
		file = fmt.Sprintf("/proc/%d/cgroup", pid)
	}
	v1, unified, err := cgroups.ParseCgroupFileUnified(file)
	if err != nil {
		return ProcCgroup{}, fmt.Errorf("reading %s: %w", file, err)
	}
	return ProcCgroup{Unified: unified, V1: v1}, nil
}

// Within reports whether the process is in cgroup p or below it in at
// least one hierarchy.
func (c ProcCgroup) Within(p string) bool {
	within := func(q string) bool { return q == p || strings.HasPrefix(q, p+"/") }
	if c.Unified != "" && within(c.Unified) {
		return true
	}
	for _, q := range c.V1 {
		if within(q) {
			return true
		}
	}
	return false
}

// ReadCgroupControllers returns the controllers a cgroup2 directory
// offers (its cgroup.controllers).
func ReadCgroupControllers(dir string) ([]string, error) {
	b, err := os.ReadFile(path.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}
