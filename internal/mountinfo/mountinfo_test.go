package mountinfo

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	data := "36 35 98:0 /mnt1 /mnt\\040two rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n" +
		"\n" +
		"42 27 0:39 / /run/x rw,nosuid,nodev,noexec - tmpfs tmpfs rw,size=980k,mode=700\n" +
		"28 25 0:25 /docker /mnt/docker\\040memory rw,relatime shared:11 - cgroup cgroup rw,memory\n" +
		`1 1 0:1 / /mnt/with\040space\134x rw - tracefs tracefs rw` + "\n" +
		"50 1 0:50 / /srv\\011tab\\012nl rw shared:2 master:3 - fuse.sshfs u@h:/a\\040b rw,user_id=0,x=a\\054b\n" +
		"51 1 0:51 / /empty-source rw - tmpfs  rw\n" +
		"52 1 0:52 / /no-super rw - tmpfs tmpfs\n" +
		"53 1 0:53 net:[4026531840] /run/netns/a rw - nsfs nsfs rw\n" +
		"54 1 0:54 / /a\u00a0b\vc\rd rw - tmpfs tmpfs rw\n"
	got, err := Parse(strings.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	want := []Mount{
		{ID: 36, Parent: 35, Major: 98, Minor: 0, Root: "/mnt1", MountPoint: "/mnt two", Options: []string{"rw", "noatime"}, Optional: []string{"master:1"},
			FSType: "ext3", Source: "/dev/root", SuperOptions: []string{"rw", "errors=continue"}},
		{ID: 42, Parent: 27, Major: 0, Minor: 39, Root: "/", MountPoint: "/run/x", Options: []string{"rw", "nosuid", "nodev", "noexec"},
			FSType: "tmpfs", Source: "tmpfs", SuperOptions: []string{"rw", "size=980k", "mode=700"}},
		{ID: 28, Parent: 25, Major: 0, Minor: 25, Root: "/docker", MountPoint: "/mnt/docker memory", Options: []string{"rw", "relatime"}, Optional: []string{"shared:11"},
			FSType: "cgroup", Source: "cgroup", SuperOptions: []string{"rw", "memory"}},
		{ID: 1, Parent: 1, Major: 0, Minor: 1, Root: "/", MountPoint: `/mnt/with space\x`, Options: []string{"rw"},
			FSType: "tracefs", Source: "tracefs", SuperOptions: []string{"rw"}},
		{ID: 50, Parent: 1, Major: 0, Minor: 50, Root: "/", MountPoint: "/srv\ttab\nnl", Options: []string{"rw"}, Optional: []string{"shared:2", "master:3"},
			FSType: "fuse.sshfs", Source: "u@h:/a b", SuperOptions: []string{"rw", "user_id=0", "x=a,b"}},
		{ID: 51, Parent: 1, Major: 0, Minor: 51, Root: "/", MountPoint: "/empty-source", Options: []string{"rw"},
			FSType: "tmpfs", Source: "", SuperOptions: []string{"rw"}},
		{ID: 52, Parent: 1, Major: 0, Minor: 52, Root: "/", MountPoint: "/no-super", Options: []string{"rw"},
			FSType: "tmpfs", Source: "tmpfs"},
		{ID: 53, Parent: 1, Major: 0, Minor: 53, Root: "net:[4026531840]", MountPoint: "/run/netns/a", Options: []string{"rw"},
			FSType: "nsfs", Source: "nsfs", SuperOptions: []string{"rw"}},
		{ID: 54, Parent: 1, Major: 0, Minor: 54, Root: "/", MountPoint: "/a\u00a0b\vc\rd", Options: []string{"rw"},
			FSType: "tmpfs", Source: "tmpfs", SuperOptions: []string{"rw"}},
	}
	if len(got) != len(want) {
		t.Fatalf("parsed %d mounts, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("mount %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

func TestParseMalformed(t *testing.T) {
	for _, bad := range []string{
		"36 35 98:0 /mnt1 /mnt rw",                                   // no separator
		"31 23 0:28 / /sys/fs/cgroup rw,relatime tmpfs tmpfs rw",     // no separator
		"41 31 0:38 / /x rw - cgroup2",                               // no source
		"1 2 3 4 5 6 -",                                              // nothing after the separator
		"1 2 0:1 / - - tmpfs tmpfs rw",                               // the mount point is not the separator
		"x 2 0:1 / /a rw - tmpfs tmpfs rw",                           // id not a number
		"1 -2 0:1 / /a rw - tmpfs tmpfs rw",                          // signed parent
		"1 2 0-1 / /a rw - tmpfs tmpfs rw",                           // device without a colon
		"1 2 0:x / /a rw - tmpfs tmpfs rw",                           // minor not a number
		"1 2 0:1 /  /a rw - tmpfs tmpfs rw",                          // an empty field
		"1 2 0:1 / /a rw -  tmpfs rw",                                // an empty type
		" 1 2 0:1 / /a rw - tmpfs tmpfs rw",                          // a leading space
		"1 2 0:1 / /a rw - tmpfs tmpfs rw\n22 1 0:21 / /proc rw - x", // second line bad
	} {
		_, err := Parse(strings.NewReader(bad))
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) = %v, want ErrMalformed", bad, err)
			continue
		}
		line := strings.Count(bad, "\n") + 1
		if want := fmt.Sprintf("mountinfo line %d is malformed: ", line); !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Parse(%q) error %q, want it to start %q", bad, err, want)
		}
		if _, err := ParseLine(bad[strings.LastIndex(bad, "\n")+1:]); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseLine(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		"/plain":          "/plain",
		`/a\040b`:         "/a b",
		`\011\012\134`:    "\t\n\\",
		`/end\040`:        "/end ",
		`a\0`:             `a\0`, // too short
		`a\04`:            `a\04`,
		`\400`:            `\400`, // not a byte
		`\08`:             `\08`,
		`\`:               `\`,
		`\\134`:           `\\`,
		`/caf\303\251`:    "/café",
		`\000`:            "\x00",
		`/x\377`:          "/x\xff",
		`/already\ space`: `/already\ space`,
	} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRead(t *testing.T) {
	mounts, err := Read()
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	for _, m := range mounts {
		if m.MountPoint == "/" || m.MountPoint == "/proc" {
			return
		}
	}
	t.Errorf("no / or /proc among %d mounts of this process", len(mounts))
}

// escape is the kernel's escaping of a mountinfo field (mangle in
// fs/proc_namespace.c): space, tab, newline and backslash as \ooo.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ' ', '\t', '\n', '\\':
			fmt.Fprintf(&b, `\%03o`, c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// FuzzParse: no input panics; a line it accepts has a mount point and a
// type; and a mount point the kernel wrote (escaped) reads back as it was.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"42 27 0:39 / /tmp/exp1 rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,size=980k,mode=700,uid=65532,gid=65532\n",
		"36 35 98:0 /mnt1 /mnt\\0402 rw,noatime master:1 shared:2 - ext3 /dev/root rw,errors=continue\n",
		"1 2 0:1 /\\134 /a\\040b rw - cgroup c rw,name=\\n",
		"1 1 0:1 / /a\\040b rw - tracefs t rw",
		"1 2 3 4 5 6 -\n", "1 2 3 4 \\ - x", " - ", "-", "", "\\\\\\0\n\n",
	} {
		f.Add([]byte(seed), "/mnt/a b\\c")
	}
	f.Fuzz(func(t *testing.T, data []byte, mountPoint string) {
		if mounts, err := Parse(strings.NewReader(string(data))); err == nil {
			for _, m := range mounts {
				if m.FSType == "" || m.MountPoint == "" {
					t.Fatalf("accepted a mount without a type or mount point from %q: %+v", data, m)
				}
			}
		}
		if mountPoint == "" {
			return
		}
		line := "42 27 0:39 / " + escape(mountPoint) + " rw - tmpfs tmpfs rw"
		m, err := ParseLine(line)
		if err != nil || m.MountPoint != mountPoint {
			t.Fatalf("ParseLine(%q) = %+v, %v; want mount point %q", line, m, err, mountPoint)
		}
	})
}
