//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// FileIdentity must equal what the kernel reports for an exec of the same
// file, also where stat(2) disagrees with the inode's superblock: an
// overlay whose layers are on different filesystems (a tmpfs layer under
// an ext4 one), as the run's rootfs overlay may be on other hosts.
func TestOverlayIdentity(t *testing.T) {
	tr := requireTracer(t, Options{})
	prog, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	for _, layout := range []string{"overlay-same-fs", "overlay-mixed-fs", "bind"} {
		t.Run(layout, func(t *testing.T) {
			base := t.TempDir()
			upper, lower, mnt := filepath.Join(base, "upper"), filepath.Join(base, "lower"), filepath.Join(base, "mnt")
			for _, d := range []string{upper, lower, mnt} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if layout == "overlay-mixed-fs" {
				mount(t, "tmpfs", lower, "tmpfs", 0, "")
			}
			for _, f := range []string{filepath.Join(upper, "a"), filepath.Join(lower, "b")} {
				if err := os.WriteFile(f, prog, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			names := []string{"a", "b"}
			if layout == "bind" {
				mount(t, lower, mnt, "", unix.MS_BIND, "")
				names = []string{"b"}
			} else {
				mount(t, "overlay", mnt, "overlay", unix.MS_RDONLY, "lowerdir="+upper+":"+lower)
			}
			cg := newTestCgroup(t)
			w, err := tr.Watch(cg.ID, Policy{})
			if err != nil {
				t.Fatal(err)
			}
			col := collect(w)
			for _, n := range names {
				if err := cg.command(filepath.Join(mnt, n)).Run(); err != nil {
					t.Fatal(err)
				}
			}
			events, st := col.stop(t, w)
			requireComplete(t, st)
			if len(events) != len(names) {
				t.Fatalf("%d events, want %d", len(events), len(names))
			}
			for i, n := range names {
				p := filepath.Join(mnt, n)
				id := mustIdentity(t, p)
				var sta unix.Stat_t
				if err := unix.Stat(p, &sta); err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: exec %s, FileIdentity %s, stat %s", p, events[i].File(), id, FileID{Dev: sta.Dev, Ino: sta.Ino})
				if events[i].File() != id {
					t.Errorf("%s: exec reports %s, FileIdentity %s", p, events[i].File(), id)
				}
				in, err := FileIdentityIn(mnt, "/"+n)
				if err != nil || in != id {
					t.Errorf("FileIdentityIn(%s, /%s) = %s, %v; want %s", mnt, n, in, err, id)
				}
			}
		})
	}
}

func mount(t *testing.T, src, dst, fstype string, flags uintptr, data string) {
	t.Helper()
	if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
		missing(t, "mount "+fstype+" at "+dst+": "+err.Error())
	}
	t.Cleanup(func() { _ = unix.Unmount(dst, unix.MNT_DETACH) })
}

// FileIdentityIn resolves absolute symlinks inside the root, where a stat
// of root+path would escape to the host's file.
func TestFileIdentityIn(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"bin", "usr/bin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin/tool"), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/bin/tool", filepath.Join(root, "bin/tool")); err != nil {
		t.Fatal(err)
	}
	want := mustIdentity(t, filepath.Join(root, "usr/bin/tool"))
	got, err := FileIdentityIn(root, "/bin/tool")
	if err != nil || got != want {
		t.Errorf("FileIdentityIn = %s, %v; want %s", got, err, want)
	}
	// /proc/<pid>/root: the pid's mountinfo is consulted too.
	self := "/proc/" + strconv.Itoa(os.Getpid()) + "/root"
	got, err = FileIdentityIn(self, filepath.Join(root, "usr/bin/tool"))
	if err != nil || got != want {
		t.Errorf("FileIdentityIn(%s) = %s, %v; want %s", self, got, err, want)
	}
	if _, err := FileIdentityIn(root, "/missing"); err == nil {
		t.Error("FileIdentityIn of a missing file succeeded")
	}
	if _, err := FileIdentity(filepath.Join(root, "missing")); !os.IsNotExist(err) {
		t.Errorf("FileIdentity of a missing file: %v", err)
	}
}

func TestProcRootPID(t *testing.T) {
	for root, want := range map[string]string{
		"/proc/42/root": "42", "/proc/42/root/": "42", "/proc/self/root": "self",
		"/proc/42/cwd": "", "/proc/x/root": "", "/srv/root": "", "/proc/42/root/x": "",
	} {
		got, ok := procRootPID(root)
		if got != want || ok != (want != "") {
			t.Errorf("procRootPID(%q) = %q, %v", root, got, ok)
		}
	}
}
