package host

import (
	"path"
	"reflect"
	"strings"
	"testing"

	"github.com/containerd/cgroups/v3"

	"hookbox.dev/hookbox/internal/host/hosttest"
)

// cgroupsOfText returns the cgroup layout in mountinfo text.
func cgroupsOfText(text string) (Cgroups, error) {
	mounts, err := ParseMounts(strings.NewReader(text))
	if err != nil {
		return Cgroups{}, err
	}
	return CgroupsOf(mounts)
}

// An older systemd host: co-mounted cpu,cpuacct, a named hierarchy with
// xattr, no cgroup2; plus a bind mount of a memory subtree and a mount
// point with a space.
const v1Mountinfo = `24 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
26 25 0:23 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:9 - cgroup cgroup rw,xattr,release_agent=/lib/systemd/systemd-cgroups-agent,name=systemd
27 25 0:24 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup rw,cpu,cpuacct
28 25 0:25 /docker /mnt/docker\040memory rw,relatime shared:11 - cgroup cgroup rw,memory
29 25 0:25 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,memory
`

func TestCgroupHierarchies(t *testing.T) {
	c, err := cgroupsOfText(v1Mountinfo)
	if err != nil {
		t.Fatal(err)
	}
	want := []CgroupHierarchy{
		{Dev: "0:23", Name: "systemd", Mounts: []CgroupMount{{"/", "/sys/fs/cgroup/systemd"}}},
		{Dev: "0:24", Controllers: []string{"cpu", "cpuacct"}, Mounts: []CgroupMount{{"/", "/sys/fs/cgroup/cpu,cpuacct"}}},
		{Dev: "0:25", Controllers: []string{"memory"}, Mounts: []CgroupMount{{"/docker", "/mnt/docker memory"}, {"/", "/sys/fs/cgroup/memory"}}},
	}
	if !reflect.DeepEqual(c.Hierarchies, want) {
		t.Fatalf("hierarchies =\n%+v\nwant\n%+v", c.Hierarchies, want)
	}
	wantV1 := map[string]string{"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct", "memory": "/mnt/docker memory"}
	if got := c.V1Controllers(); !reflect.DeepEqual(got, wantV1) {
		t.Errorf("V1Controllers = %v, want %v", got, wantV1)
	}

	c, err = cgroupsOfText(hosttest.MountinfoHybrid)
	if err != nil {
		t.Fatal(err)
	}
	hs := c.Hierarchies
	if len(hs) != 10 || !hs[9].Unified || hs[9].Mounts[0].MountPoint != "/sys/fs/cgroup/unified" {
		t.Fatalf("hybrid: %+v", hs)
	}
	if !hs[5].Has("freezer") || hs[5].Has("memory") {
		t.Errorf("hybrid freezer hierarchy: %+v", hs[5])
	}

	for _, bad := range []string{
		"31 23 0:28 / /sys/fs/cgroup rw,relatime tmpfs tmpfs rw", // no separator
		"41 31 0:38 / /x rw - cgroup2",                           // no source
		"41 31 0:38 relative /x rw - cgroup2 cgroup2 rw",         // root not absolute
	} {
		if _, err := cgroupsOfText(bad); err == nil {
			t.Errorf("CgroupsOf(%q) succeeded", bad)
		}
	}
}

func TestCgroupMode(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mountinfo string
		mode      CgroupMode
		unified   string
	}{
		{"hybrid", hosttest.MountinfoHybrid, CgroupHybrid, "/sys/fs/cgroup/unified"},
		{"v2", hosttest.MountinfoV2, CgroupUnified, "/sys/fs/cgroup"},
		{"v1", v1Mountinfo, CgroupLegacy, ""},
		{"none", "24 1 8:1 / / rw - ext4 /dev/sda1 rw\n", CgroupUnavailable, ""},
		{"cgroup2 elsewhere only", "41 31 0:38 / /run/cg2 rw - cgroup2 cgroup2 rw\n", CgroupUnified, "/run/cg2"},
		{"v2 plus a stray v1", hosttest.MountinfoV2 + "50 30 0:40 / /run/netcls rw - cgroup cgroup rw,net_cls\n", CgroupUnified, "/sys/fs/cgroup"},
		{"v1 controllers, cgroup2 elsewhere", v1Mountinfo + "41 31 0:38 / /run/cg2 rw - cgroup2 cgroup2 rw\n", CgroupHybrid, "/run/cg2"},
		{"named v1 only, cgroup2 elsewhere", "26 25 0:23 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n41 31 0:38 / /run/cg2 rw - cgroup2 cgroup2 rw\n", CgroupUnified, "/run/cg2"},
		{"cgroup2 elsewhere too", "1 1 0:26 / /run/x rw - cgroup2 none rw\n" + hosttest.MountinfoV2, CgroupUnified, "/sys/fs/cgroup"},
		{"a tmpfs over cgroup2", hosttest.MountinfoV2 + "31 30 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n", CgroupUnified, "/sys/fs/cgroup"},
		{"cgroup2 subtree only", "30 23 0:26 /a /sys/fs/cgroup/x rw - cgroup2 cgroup2 rw\n", CgroupUnified, ""},
	} {
		c, err := cgroupsOfText(tc.mountinfo)
		if err != nil {
			t.Fatal(err)
		}
		if c.Mode != tc.mode || c.Unified != tc.unified {
			t.Errorf("%s: mode %v, cgroup2 at %q; want %v at %q", tc.name, c.Mode, c.Unified, tc.mode, tc.unified)
		}
	}
}

// On this host, the mount table and containerd's statfs reading agree.
func TestHostCgroupsAgreeWithContainerd(t *testing.T) {
	c, err := HostCgroups()
	if err != nil {
		t.Fatal(err)
	}
	if c.Unified != "" && c.Unified != CgroupRoot && c.Unified != CgroupRoot+"/unified" {
		t.Skipf("cgroup2 at %s, where cgroups.Mode does not look", c.Unified)
	}
	var want CgroupMode
	switch cgroups.Mode() {
	case cgroups.Legacy:
		want = CgroupLegacy
	case cgroups.Hybrid:
		want = CgroupHybrid
	case cgroups.Unified:
		want = CgroupUnified
	}
	if c.Mode != want {
		t.Errorf("HostCgroups mode %v, cgroups.Mode says %v", c.Mode, want)
	}
	if (c.Mode == CgroupUnified || c.Mode == CgroupHybrid) != (c.Unified != "") {
		t.Errorf("mode %v with cgroup2 at %q", c.Mode, c.Unified)
	}
}

func TestDirFor(t *testing.T) {
	c, err := cgroupsOfText(v1Mountinfo + "60 25 0:26 /kubepods /k rw - cgroup cgroup rw,pids\n")
	if err != nil {
		t.Fatal(err)
	}
	memory, pids := c.Hierarchies[2], c.Hierarchies[3]
	for _, tc := range []struct {
		h    CgroupHierarchy
		path string
		want string
	}{
		{memory, "/hookbox/r1", "/sys/fs/cgroup/memory/hookbox/r1"}, // the whole-hierarchy mount wins
		{pids, "/kubepods/hookbox/r1", "/k/hookbox/r1"},
		{pids, "/kubepods", "/k"},
		{pids, "/kubepodsX/r1", ""},
		{pids, "/hookbox/r1", ""},
	} {
		if got := tc.h.DirFor(tc.path); got != tc.want {
			t.Errorf("DirFor(%q) in %v = %q, want %q", tc.path, tc.h.Controllers, got, tc.want)
		}
	}
}

func TestCgroupModeString(t *testing.T) {
	for m, want := range map[CgroupMode]string{CgroupUnavailable: "unknown", CgroupLegacy: "v1", CgroupHybrid: "hybrid", CgroupUnified: "v2", CgroupMode(42): "unknown"} {
		if got := m.String(); got != want {
			t.Errorf("CgroupMode(%d).String() = %q, want %q", int(m), got, want)
		}
	}
}

// FuzzCgroupsOf: no input panics, and every accepted cgroup mount has
// clean absolute paths, so DirFor joins only clean paths.
func FuzzCgroupsOf(f *testing.F) {
	for _, seed := range []string{hosttest.MountinfoHybrid, hosttest.MountinfoV2, v1Mountinfo, "", "-", "1 2 3 4 5 6 - cgroup2 x y", "1 2 0:1 /\\134 /a\\040b rw - cgroup c rw,name=\\n"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, mountinfo string) {
		c, err := cgroupsOfText(mountinfo)
		if err != nil {
			return
		}
		for _, h := range c.Hierarchies {
			for _, m := range h.Mounts {
				for _, p := range []string{m.Root, m.MountPoint} {
					if !path.IsAbs(p) || path.Clean(p) != p {
						t.Fatalf("mount %+v has a path that is not clean and absolute", m)
					}
				}
				if d := h.DirFor("/hookbox/r1"); d != "" && path.Clean(d) != d {
					t.Fatalf("DirFor gave unclean %q", d)
				}
			}
		}
		if c.Mode == CgroupHybrid && !hasUnified(c) {
			t.Fatalf("hybrid without cgroup2: %+v", c)
		}
	})
}

func hasUnified(c Cgroups) bool {
	for _, h := range c.Hierarchies {
		if h.Unified {
			return true
		}
	}
	return false
}

func TestProcCgroup(t *testing.T) {
	hybrid, err := ParseProcCgroup("9:name=systemd:/hookbox/r1\n4:memory:/hookbox/r1/sub\n1:cpu,cpuacct:/\n0::/hookbox/r1\n")
	if err != nil {
		t.Fatal(err)
	}
	want := ProcCgroup{Unified: "/hookbox/r1", V1: map[string]string{"name=systemd": "/hookbox/r1", "memory": "/hookbox/r1/sub", "cpu": "/", "cpuacct": "/"}}
	if !reflect.DeepEqual(hybrid, want) {
		t.Errorf("ParseProcCgroup = %+v, want %+v", hybrid, want)
	}
	parse := func(s string) ProcCgroup {
		c, err := ParseProcCgroup(s)
		if err != nil {
			t.Fatalf("ParseProcCgroup(%q): %v", s, err)
		}
		return c
	}
	for _, tc := range []struct {
		c    ProcCgroup
		path string
		want bool
	}{
		{hybrid, "/hookbox/r1", true},
		{hybrid, "/hookbox/r1/sub", true},
		{hybrid, "/hookbox/r", false}, // a prefix of a name is not an ancestor
		{hybrid, "/hookbox/r1/su", false},
		{parse("0::/hookbox/r12\n"), "/hookbox/r1", false},
		{parse("0::/\n"), "/hookbox/r1", false},
		{parse(""), "/hookbox/r1", false},
	} {
		if got := tc.c.Within(tc.path); got != tc.want {
			t.Errorf("%+v.Within(%q) = %v, want %v", tc.c, tc.path, got, tc.want)
		}
	}
	if _, err := ParseProcCgroup("garbage\n"); err == nil {
		t.Error("ParseProcCgroup(garbage) succeeded")
	}
	self, err := ReadProcCgroup(0)
	if err != nil || (self.Unified == "" && len(self.V1) == 0) {
		t.Errorf("ReadProcCgroup(self) = %+v, %v", self, err)
	}
}
