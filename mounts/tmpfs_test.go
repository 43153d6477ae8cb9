package mounts

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	hostfacts "hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/render"
)

const testUID, testGID = 65532, 65532

// testSize is the run tmpfs most tests make.
var testSize = TmpfsSize{Bytes: 1 << 20, Inodes: 4096}

// newTmpfs creates a run tmpfs under a temp dir and unmounts it at the end.
func newTmpfs(t *testing.T, size TmpfsSize) string {
	t.Helper()
	testenv.RequireRoot(t)
	p := filepath.Join(t.TempDir(), "run", "tmpfs")
	if err := Create(p, size, testUID, testGID); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Unmount(p); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return p
}

func TestCreate(t *testing.T) {
	size := testSize
	p := newTmpfs(t, size)

	var sfs unix.Statfs_t
	if err := unix.Statfs(p, &sfs); err != nil {
		t.Fatal(err)
	}
	if sfs.Type != unix.TMPFS_MAGIC {
		t.Errorf("filesystem type %#x, want tmpfs", sfs.Type)
	}
	if got := int64(sfs.Blocks) * sfs.Bsize; got != size.Bytes {
		t.Errorf("size %d, want %d", got, size.Bytes)
	}
	if int64(sfs.Files) != size.Inodes {
		t.Errorf("%d inodes, want %d", sfs.Files, size.Inodes)
	}
	for _, f := range []int64{unix.ST_NOSUID, unix.ST_NODEV, unix.ST_NOEXEC} {
		if sfs.Flags&f == 0 {
			t.Errorf("statfs flags %#x lack %#x", sfs.Flags, f)
		}
	}

	e, err := mountAt(p)
	if err != nil || e == nil {
		t.Fatalf("mountinfo has no entry at %s (err %v)", p, err)
	}
	for _, o := range []string{"nosuid", "nodev", "noexec"} {
		if !slices.Contains(e.Options, o) {
			t.Errorf("mount options %v lack %s", e.Options, o)
		}
	}
	for _, o := range []string{"size=1024k", "nr_inodes=4096", "mode=700", "uid=65532", "gid=65532"} {
		if !slices.Contains(e.SuperOptions, o) {
			t.Errorf("tmpfs options %v lack %s", e.SuperOptions, o)
		}
	}

	for _, d := range []string{p, filepath.Join(p, "home"), filepath.Join(p, "out")} {
		var st unix.Stat_t
		if err := unix.Lstat(d, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&0o7777 != 0o700 || st.Uid != testUID || st.Gid != testGID {
			t.Errorf("%s: mode %o owner %d:%d, want directory 0700 owned by %d:%d", d, st.Mode, st.Uid, st.Gid, testUID, testGID)
		}
	}
	if ok, err := IsMounted(p); err != nil || !ok {
		t.Errorf("IsMounted = %v, %v; want true", ok, err)
	}
}

func TestCreateIsIdempotent(t *testing.T) {
	p := newTmpfs(t, testSize)
	if err := os.Remove(filepath.Join(p, "out")); err != nil {
		t.Fatal(err)
	}
	if err := Create(p, testSize, testUID, testGID); err != nil {
		t.Fatalf("second Create with the same options: %v", err)
	}
	if _, err := os.Stat(filepath.Join(p, "out")); err != nil {
		t.Errorf("second Create did not restore out: %v", err)
	}
	entries, err := hostfacts.Mounts()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if e.MountPoint == p {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d mounts at %s, want 1", n, p)
	}
	err = Create(p, TmpfsSize{Bytes: 2 << 20, Inodes: testSize.Inodes}, testUID, testGID)
	wantErr(t, err, ErrMountConflict, p, "already mounted", "Unmount")
	err = Create(p, testSize, 1000, 1000)
	wantErr(t, err, ErrMountConflict, p, "owner")
	err = Create(p, TmpfsSize{Bytes: testSize.Bytes, Inodes: 2 * testSize.Inodes}, testUID, testGID)
	wantErr(t, err, ErrMountConflict, p, "nr_inodes 4096, want 8192")
}

func TestCreateRefuses(t *testing.T) {
	testenv.RequireRoot(t)
	base := t.TempDir()
	full := filepath.Join(base, "full")
	mkdirs(t, full)
	writeFile(t, filepath.Join(full, "left-over"), "x", 0o600)
	wantErr(t, Create(full, testSize, 0, 0), ErrMountConflict, full, "not empty")
	symlink(t, full, filepath.Join(base, "link"))
	wantErr(t, Create(filepath.Join(base, "link"), testSize, 0, 0), ErrEscapes, filepath.Join(base, "link"), "symlink")
	wantErr(t, Create(filepath.Join(base, "x"), TmpfsSize{}, 0, 0), ErrInvalid, "positive size")
	wantErr(t, Create(filepath.Join(base, "x"), TmpfsSize{Bytes: 1 << 20}, 0, 0), ErrInvalid, "inode limit")
	if ok, _ := IsMounted(full); ok {
		t.Error("a refused Create left a mount behind")
	}
}

func TestSeed(t *testing.T) {
	p := newTmpfs(t, testSize)
	files := []render.File{
		{Path: render.HomeDir + "/.claude/settings.json", Mode: 0o644, Content: `{"a":1}`},
		{Path: render.RunDir + "/hooks/run.sh", Mode: 0o4755, Content: "echo hi\n"},
		{Path: render.OutDir + "/empty-mode", Content: "x"},
		{Path: render.ConfigDir + "/not-mine.json", Mode: 0o644, Content: "{}"},
	}
	if err := Seed(p, files, testUID, testGID); err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]struct {
		mode    uint32
		content string
	}{
		"home/.claude/settings.json": {0o644, `{"a":1}`},
		"hooks/run.sh":               {0o755, "echo hi\n"}, // setuid dropped
		"out/empty-mode":             {0o600, "x"},
	} {
		fp := filepath.Join(p, rel)
		var st unix.Stat_t
		if err := unix.Lstat(fp, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o7777 != want.mode || st.Uid != testUID || st.Gid != testGID {
			t.Errorf("%s: mode %o owner %d:%d, want %o owned by %d:%d", rel, st.Mode, st.Uid, st.Gid, want.mode, testUID, testGID)
		}
		if b, _ := os.ReadFile(fp); string(b) != want.content {
			t.Errorf("%s: content %q, want %q", rel, b, want.content)
		}
	}
	for _, d := range []string{"home/.claude", "hooks"} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(p, d), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&0o7777 != 0o700 || st.Uid != testUID {
			t.Errorf("%s: mode %o owner %d, want 0700 owned by %d", d, st.Mode&0o7777, st.Uid, testUID)
		}
	}
	if _, err := os.Stat(filepath.Join(p, "not-mine.json")); err == nil {
		t.Error("Seed wrote a config dir file into the tmpfs")
	}
	// Seeding again overwrites.
	files[0].Content = "{}"
	if err := Seed(p, files, testUID, testGID); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(p, "home/.claude/settings.json")); string(b) != "{}" {
		t.Errorf("second Seed left %q", b)
	}
}

func TestSeedRefusesEscapes(t *testing.T) {
	p := newTmpfs(t, testSize)
	outside := t.TempDir()
	symlink(t, outside, filepath.Join(p, "home", "link"))
	symlink(t, filepath.Join(outside, "f"), filepath.Join(p, "out", "f"))
	for _, tt := range []struct {
		path    string
		mention string
	}{
		{render.RunDir + "/../../etc/passwd", "not an absolute, clean path"},
		{"run/hookbox/x", "not an absolute, clean path"},
		{render.RunDir, "run dir itself"},
		{render.HomeDir + "/link/x", "home/link"},
		{render.OutDir + "/f", "out/f"},
	} {
		err := Seed(p, []render.File{{Path: tt.path, Mode: 0o644, Content: "pwned"}}, testUID, testGID)
		wantErr(t, err, ErrEscapes, tt.mention)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("Seed wrote outside the tmpfs: %v", entries)
	}
}

func TestTmpfsIsFull(t *testing.T) {
	p := newTmpfs(t, TmpfsSize{Bytes: 64 << 10, Inodes: 4096})
	err := os.WriteFile(filepath.Join(p, "out", "big"), make([]byte, 128<<10), 0o600)
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("writing 128 KiB into a 64 KiB tmpfs: %v, want ENOSPC", err)
	}
}

func TestUnmountIsRetrySafe(t *testing.T) {
	testenv.RequireRoot(t)
	p := filepath.Join(t.TempDir(), "tmpfs")
	if err := Create(p, testSize, testUID, testGID); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(p, "out", "f"), "x", 0o600)
	if err := Unmount(p); err != nil {
		t.Fatal(err)
	}
	if ok, err := IsMounted(p); ok || err != nil {
		t.Errorf("IsMounted after Unmount = %v, %v", ok, err)
	}
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Errorf("mountpoint still there: %v", err)
	}
	if err := Unmount(p); err != nil {
		t.Errorf("second Unmount: %v, want nil (already gone counts as cleaned)", err)
	}
}

func TestUnmountNeverMounted(t *testing.T) {
	testenv.RequireRoot(t)
	base := t.TempDir()
	if err := Unmount(filepath.Join(base, "missing", "tmpfs")); err != nil {
		t.Errorf("Unmount of a missing path: %v", err)
	}
	empty := filepath.Join(base, "empty")
	mkdirs(t, empty)
	if err := Unmount(empty); err != nil {
		t.Errorf("Unmount of an unmounted directory: %v", err)
	}
	if _, err := os.Lstat(empty); !os.IsNotExist(err) {
		t.Errorf("the empty directory is still there: %v", err)
	}
	full := filepath.Join(base, "full")
	mkdirs(t, full)
	writeFile(t, filepath.Join(full, "keep"), "x", 0o600)
	wantErr(t, Unmount(full), ErrMountConflict, full, "not empty")
	if _, err := os.Stat(filepath.Join(full, "keep")); err != nil {
		t.Errorf("Unmount removed a file it did not own: %v", err)
	}
}

func TestUnmountBusyIsLazy(t *testing.T) {
	testenv.RequireRoot(t)
	p := filepath.Join(t.TempDir(), "tmpfs")
	if err := Create(p, testSize, testUID, testGID); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(p, "out", "open"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := Unmount(p); err != nil {
		t.Fatalf("Unmount of a busy tmpfs: %v", err)
	}
	if ok, _ := IsMounted(p); ok {
		t.Error("still mounted")
	}
	if _, err := f.WriteString("still writable through the open fd"); err != nil {
		t.Errorf("the open file broke: %v", err)
	}
}

func TestUnmountRefusesOtherFilesystems(t *testing.T) {
	testenv.RequireRoot(t)
	p := filepath.Join(t.TempDir(), "ramfs")
	mkdirs(t, p)
	if err := unix.Mount("ramfs", p, "ramfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(p, unix.MNT_DETACH)
	wantErr(t, Unmount(p), ErrMountConflict, p, "ramfs")
	if ok, _ := IsMounted(p); !ok {
		t.Error("Unmount removed a mount that was not a tmpfs")
	}
}

func TestIsMountedResolvesParentSymlinks(t *testing.T) {
	p := newTmpfs(t, testSize)
	link := filepath.Join(t.TempDir(), "link")
	symlink(t, filepath.Dir(p), link)
	if ok, err := IsMounted(filepath.Join(link, filepath.Base(p))); err != nil || !ok {
		t.Errorf("IsMounted through a parent symlink = %v, %v; want true", ok, err)
	}
	if ok, err := IsMounted(filepath.Join(p, "home")); err != nil || ok {
		t.Errorf("IsMounted(home) = %v, %v; want false", ok, err)
	}
}
