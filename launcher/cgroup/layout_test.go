package cgroup

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"hookbox.dev/hookbox/internal/mountinfo"
)

// parseHierarchies returns the cgroup hierarchies in mountinfo text.
func parseHierarchies(text string) ([]hierarchy, error) {
	mounts, err := mountinfo.Parse(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	return hierarchies(mounts)
}

// mountinfo of this project's hybrid host (Debian 12), with a few
// non-cgroup lines.
const hybridMountinfo = `22 1 259:0 / / rw,relatime - ext4 /dev/vda rw
23 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

// A systemd host in unified mode.
const v2Mountinfo = `24 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro
30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`

// An older systemd host: co-mounted cpu,cpuacct, a named hierarchy with
// xattr, no cgroup2; plus a bind mount of a memory subtree and a mount
// point with a space.
const v1Mountinfo = `24 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
26 25 0:23 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:9 - cgroup cgroup rw,xattr,release_agent=/lib/systemd/systemd-cgroups-agent,name=systemd
27 25 0:24 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup rw,cpu,cpuacct
28 25 0:25 /docker /mnt/docker\040memory rw,relatime shared:11 - cgroup cgroup rw,memory
29 25 0:25 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,memory
`

func TestParseHierarchies(t *testing.T) {
	hs, err := parseHierarchies(v1Mountinfo)
	if err != nil {
		t.Fatal(err)
	}
	want := []hierarchy{
		{Dev: "0:23", Name: "systemd", Mounts: []cgroupMount{{"/", "/sys/fs/cgroup/systemd"}}},
		{Dev: "0:24", Controllers: []string{"cpu", "cpuacct"}, Mounts: []cgroupMount{{"/", "/sys/fs/cgroup/cpu,cpuacct"}}},
		{Dev: "0:25", Controllers: []string{"memory"}, Mounts: []cgroupMount{{"/docker", "/mnt/docker memory"}, {"/", "/sys/fs/cgroup/memory"}}},
	}
	if !reflect.DeepEqual(hs, want) {
		t.Fatalf("parseHierarchies =\n%+v\nwant\n%+v", hs, want)
	}

	hs, err = parseHierarchies(hybridMountinfo)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 10 || !hs[9].Unified || hs[9].Mounts[0].MountPoint != "/sys/fs/cgroup/unified" {
		t.Fatalf("hybrid: %+v", hs)
	}
	if !hs[5].has("freezer") || hs[5].has("memory") {
		t.Errorf("hybrid freezer hierarchy: %+v", hs[5])
	}

	for _, bad := range []string{
		"31 23 0:28 / /sys/fs/cgroup rw,relatime tmpfs tmpfs rw", // no separator
		"41 31 0:38 / /x rw - cgroup2",                           // no source
		"41 31 0:38 relative /x rw - cgroup2 cgroup2 rw",         // root not absolute
	} {
		if _, err := parseHierarchies(bad); err == nil {
			t.Errorf("parseHierarchies(%q) succeeded", bad)
		}
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mountinfo string
		want      Layout
	}{
		{"hybrid", hybridMountinfo, Hybrid},
		{"v2", v2Mountinfo, V2},
		{"v1", v1Mountinfo, V1},
		{"none", "24 1 8:1 / / rw - ext4 /dev/sda1 rw\n", Unknown},
		{"cgroup2 elsewhere only", "41 31 0:38 / /run/cg2 rw - cgroup2 cgroup2 rw\n", V2},
		{"v2 plus a stray v1", v2Mountinfo + "50 30 0:40 / /run/netcls rw - cgroup cgroup rw,net_cls\n", V2},
	} {
		hs, err := parseHierarchies(tc.mountinfo)
		if err != nil {
			t.Fatal(err)
		}
		if got := classify(hs); got != tc.want {
			t.Errorf("%s: classify = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDirFor(t *testing.T) {
	hs, err := parseHierarchies(v1Mountinfo + "60 25 0:26 /kubepods /k rw - cgroup cgroup rw,pids\n")
	if err != nil {
		t.Fatal(err)
	}
	memory, pids := hs[2], hs[3]
	for _, tc := range []struct {
		h    hierarchy
		path string
		want string
	}{
		{memory, "/hookbox/r1", "/sys/fs/cgroup/memory/hookbox/r1"}, // the whole-hierarchy mount wins
		{pids, "/kubepods/hookbox/r1", "/k/hookbox/r1"},
		{pids, "/kubepods", "/k"},
		{pids, "/kubepodsX/r1", ""},
		{pids, "/hookbox/r1", ""},
	} {
		if got := tc.h.dirFor(tc.path); got != tc.want {
			t.Errorf("dirFor(%q) in %v = %q, want %q", tc.path, tc.h.Controllers, got, tc.want)
		}
	}
}

func TestCheckPath(t *testing.T) {
	for _, ok := range []string{"/hookbox/r1", "/a", "/hookbox/0123-abc_def.x"} {
		if err := checkPath(ok); err != nil {
			t.Errorf("checkPath(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "/", "hookbox/r1", "/hookbox/../r1", "/hookbox/", "//hookbox", "/a/./b", "/a\nb", "/a\x00b", "system.slice:hookbox:r1"} {
		if err := checkPath(bad); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("checkPath(%q) = %v, want ErrInvalidPath", bad, err)
		}
	}
}

func TestLayoutString(t *testing.T) {
	for l, want := range map[Layout]string{Unknown: "unknown", V1: "v1", Hybrid: "hybrid", V2: "v2", Layout(42): "unknown"} {
		if got := l.String(); got != want {
			t.Errorf("Layout(%d).String() = %q, want %q", int(l), got, want)
		}
	}
}
