package host

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseMounts(t *testing.T) {
	data := "36 35 98:0 /mnt1 /mnt\\040two rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n" +
		"42 27 0:39 / /run/x rw,nosuid,nodev,noexec - tmpfs tmpfs rw,size=980k,mode=700\n" +
		`1 1 0:1 / /mnt/with\040space\134x rw - tracefs tracefs rw` + "\n" +
		"50 1 0:50 / /srv\\011tab\\012nl rw shared:2 master:3 - fuse.sshfs u@h:/a\\040b rw,user_id=0\n" +
		"53 1 0:53 net:[4026531840] /run/netns/a rw - nsfs nsfs rw\n"
	got, err := ParseMounts(strings.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	want := []Mount{
		{ID: 36, Parent: 35, Major: 98, Minor: 0, Root: "/mnt1", MountPoint: "/mnt two", Options: []string{"rw", "noatime"},
			FSType: "ext3", Source: "/dev/root", SuperOptions: []string{"rw", "errors=continue"}},
		{ID: 42, Parent: 27, Major: 0, Minor: 39, Root: "/", MountPoint: "/run/x", Options: []string{"rw", "nosuid", "nodev", "noexec"},
			FSType: "tmpfs", Source: "tmpfs", SuperOptions: []string{"rw", "size=980k", "mode=700"}},
		{ID: 1, Parent: 1, Major: 0, Minor: 1, Root: "/", MountPoint: `/mnt/with space\x`, Options: []string{"rw"},
			FSType: "tracefs", Source: "tracefs", SuperOptions: []string{"rw"}},
		{ID: 50, Parent: 1, Major: 0, Minor: 50, Root: "/", MountPoint: "/srv\ttab\nnl", Options: []string{"rw"},
			FSType: "fuse.sshfs", Source: "u@h:/a b", SuperOptions: []string{"rw", "user_id=0"}},
		{ID: 53, Parent: 1, Major: 0, Minor: 53, Root: "net:[4026531840]", MountPoint: "/run/netns/a", Options: []string{"rw"},
			FSType: "nsfs", Source: "nsfs", SuperOptions: []string{"rw"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseMounts =\n%+v\nwant\n%+v", got, want)
	}
	for _, bad := range []string{
		"36 35 98:0 /mnt1 /mnt rw",                               // too few fields
		"31 23 0:28 / /sys/fs/cgroup rw,relatime tmpfs tmpfs rw", // no separator
		"1 2 0-1 / /a rw - tmpfs tmpfs rw",                       // device without a colon
		"1 2 0:1 / /a\\04 rw - tmpfs tmpfs rw",                   // a cut escape
	} {
		if _, err := ParseMounts(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseMounts(%q) succeeded", bad)
		}
	}
}

func TestQueries(t *testing.T) {
	mounts := []Mount{
		{ID: 36, Root: "/", MountPoint: "/mnt two", FSType: "ext3"},
		{ID: 42, Root: "/", MountPoint: "/run/x", FSType: "tmpfs", SuperOptions: []string{"rw", "size=980k"}},
		{ID: 43, Root: "/", MountPoint: "/run/x", FSType: "tmpfs", SuperOptions: []string{"rw", "size=4k"}},
		{ID: 44, Root: "/x", MountPoint: "/t", FSType: "tracefs"},
		{ID: 45, Root: "/", MountPoint: "/sys/kernel/tracing", FSType: "tracefs"},
	}
	if top := TopmostAt(mounts, "/run/x"); top == nil || top.ID != 43 {
		t.Errorf("topmost mount at /run/x = %+v, want the later one", top)
	}
	if m := TopmostAt(mounts, "/run"); m != nil {
		t.Errorf("TopmostAt(/run) = %+v, want nil", m)
	}
	if m := MountByID(mounts, 42); m == nil || m.SuperOptions[1] != "size=980k" {
		t.Errorf("MountByID(42) = %+v", m)
	}
	if m := MountByID(mounts, 7); m != nil {
		t.Errorf("MountByID(7) = %+v, want nil", m)
	}
	if p := TracefsMount(mounts); p != "/sys/kernel/tracing" {
		t.Errorf("TracefsMount = %q (a subtree mount does not count)", p)
	}
	if p := TracefsMount(mounts[:4]); p != "" {
		t.Errorf("TracefsMount without a tracefs root = %q", p)
	}
}

func TestMountsOfThisProcess(t *testing.T) {
	mounts, err := Mounts()
	if err != nil {
		t.Fatal(err)
	}
	if TopmostAt(mounts, "/") == nil || TopmostAt(mounts, "/proc") == nil {
		t.Errorf("no / or /proc among %d mounts of this process", len(mounts))
	}
	fromFile, err := ReadMounts("/proc/self/mountinfo")
	if err != nil || len(fromFile) != len(mounts) {
		t.Errorf("ReadMounts(/proc/self/mountinfo): %d mounts, %v; Mounts: %d", len(fromFile), err, len(mounts))
	}
	if _, err := ReadMounts(filepath.Join(t.TempDir(), "none")); !os.IsNotExist(err) {
		t.Errorf("ReadMounts(missing) = %v, want not-exist", err)
	}
}
