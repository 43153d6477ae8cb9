package mounts

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/internal/testenv"
)

// roomy is a cap no test tree reaches.
var roomy = HarvestCap{Bytes: 1 << 20, Entries: 1 << 20}

// skipsOf indexes a report's skipped entries by path.
func skipsOf(rep Report) map[string]Skipped {
	out := map[string]Skipped{}
	for _, s := range rep.Skipped {
		out[s.Path] = s
	}
	return out
}

func wantMode(t *testing.T, p string, mode uint32) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != mode {
		t.Errorf("%s: mode %04o, want %04o", p, st.Mode&0o7777, mode)
	}
}

func wantContent(t *testing.T, p, want string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != want {
		t.Errorf("%s: %q, want %q", p, b, want)
	}
}

func TestHarvestCopiesTreeWithModes(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "record", "tmpfs")
	mkdirs(t, filepath.Join(src, "out", "deep", "er"), filepath.Join(src, "home", ".cache"))
	writeFile(t, filepath.Join(src, "out", "review.md"), "# ok\n", 0o644)
	writeFile(t, filepath.Join(src, "out", "deep", "er", "x.bin"), "xyz", 0o600)
	writeFile(t, filepath.Join(src, "out", "tool"), "#!/bin/sh\n", 0o755)
	writeFile(t, filepath.Join(src, "out", "suid"), "s", 0o4755)
	writeFile(t, filepath.Join(src, "out", "sgid"), "g", 0o2750)
	writeFile(t, filepath.Join(src, "home", "empty"), "", 0o640)
	if err := os.Chmod(filepath.Join(src, "out", "deep"), 0o2750); err != nil { // setgid dir
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(src, "home", ".cache"), 0o500); err != nil { // read-only dir, still filled
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(src, "home", "ro-inside"), "r", 0o400)

	rep, err := Harvest(src, dst, roomy)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Complete() || rep.CapReached {
		t.Errorf("report = %+v, want complete", rep)
	}
	if rep.Files != 7 || rep.Dirs != 5 || rep.Bytes != int64(len("# ok\n")+3+len("#!/bin/sh\n")+1+1+0+1) {
		t.Errorf("counted %d files, %d dirs, %d bytes", rep.Files, rep.Dirs, rep.Bytes)
	}
	wantContent(t, filepath.Join(dst, "out", "review.md"), "# ok\n")
	wantContent(t, filepath.Join(dst, "out", "deep", "er", "x.bin"), "xyz")
	wantMode(t, filepath.Join(dst, "out", "review.md"), 0o644)
	wantMode(t, filepath.Join(dst, "out", "deep", "er", "x.bin"), 0o600)
	wantMode(t, filepath.Join(dst, "out", "tool"), 0o755)
	wantMode(t, filepath.Join(dst, "out", "suid"), 0o755) // setuid stripped
	wantMode(t, filepath.Join(dst, "out", "sgid"), 0o750) // setgid stripped
	wantMode(t, filepath.Join(dst, "out", "deep"), 0o750)
	wantMode(t, filepath.Join(dst, "home", ".cache"), 0o500)
	wantMode(t, filepath.Join(dst, "home", "empty"), 0o640)
	wantMode(t, filepath.Join(dst, "home", "ro-inside"), 0o400)

	// A second harvest into the same place (a retry) succeeds.
	if _, err := Harvest(src, dst, roomy); err != nil {
		t.Errorf("second Harvest: %v", err)
	}
}

func TestHarvestNeverFollowsSymlinks(t *testing.T) {
	base := t.TempDir()
	src, dst, secret := filepath.Join(base, "src"), filepath.Join(base, "dst"), filepath.Join(base, "secret")
	mkdirs(t, filepath.Join(src, "out"), secret)
	writeFile(t, filepath.Join(secret, "key"), "TOPSECRET", 0o600)
	symlink(t, "/etc/passwd", filepath.Join(src, "out", "passwd"))
	symlink(t, secret, filepath.Join(src, "out", "dir-link"))
	symlink(t, "../../secret/key", filepath.Join(src, "out", "rel-link"))
	symlink(t, "review.md", filepath.Join(src, "out", "inside-link"))
	writeFile(t, filepath.Join(src, "out", "review.md"), "ok", 0o644)

	rep, err := Harvest(src, dst, roomy)
	if err != nil {
		t.Fatal(err)
	}
	links := map[string]string{}
	for _, l := range rep.Symlinks {
		links[l.Path] = l.Target
	}
	for name, target := range map[string]string{
		"out/passwd": "/etc/passwd", "out/dir-link": secret, "out/rel-link": "../../secret/key", "out/inside-link": "review.md",
	} {
		if got, ok := links[name]; !ok || got != target {
			t.Errorf("%s: recorded as %q (%v), want a symlink to %s", name, got, ok, target)
		}
		if _, err := os.Lstat(filepath.Join(dst, name)); !os.IsNotExist(err) {
			t.Errorf("%s exists in the harvest: %v", name, err)
		}
	}
	if rep.Files != 1 {
		t.Errorf("copied %d files, want only review.md", rep.Files)
	}
	if !rep.Complete() || len(rep.Skipped) != 0 {
		t.Errorf("symlinks are recorded, not a partial harvest: %+v", rep.Skipped)
	}
}

func TestHarvestRootSymlinkRefused(t *testing.T) {
	base := t.TempDir()
	mkdirs(t, filepath.Join(base, "real"))
	symlink(t, filepath.Join(base, "real"), filepath.Join(base, "link"))
	if _, err := Harvest(filepath.Join(base, "link"), filepath.Join(base, "dst"), roomy); err == nil || !strings.Contains(err.Error(), filepath.Join(base, "link")) {
		t.Errorf("Harvest of a symlinked root: %v, want an error naming it", err)
	}
	_, err := Harvest(filepath.Join(base, "real"), filepath.Join(base, "dst"), HarvestCap{Bytes: 0, Entries: 0})
	wantErr(t, err, ErrInvalid, "cap")
}

func TestHarvestSkipsSpecialFiles(t *testing.T) {
	testenv.RequireRoot(t)
	src := newTmpfs(t, testSize) // nodev, as in a real run: mknod works, open does not
	dst := filepath.Join(t.TempDir(), "dst")
	if err := unix.Mkfifo(filepath.Join(src, "out", "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(src, "out", "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(src, "out", "blk"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))); err != nil {
		t.Fatal(err)
	}
	sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sock)
	if err := unix.Bind(sock, &unix.SockaddrUnix{Name: filepath.Join(src, "out", "sock")}); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(src, "out", "result.json"), "{}", 0o644)

	rep, err := Harvest(src, dst, roomy)
	if err != nil {
		t.Fatal(err)
	}
	skips := skipsOf(rep)
	for name, why := range map[string]SkipReason{
		"out/fifo": SkipFIFO, "out/null": SkipDevice, "out/blk": SkipDevice, "out/sock": SkipSocket,
	} {
		if skips[name].Reason != why {
			t.Errorf("%s: skipped as %+v, want %s", name, skips[name], why)
		}
		if _, err := os.Lstat(filepath.Join(dst, name)); !os.IsNotExist(err) {
			t.Errorf("%s exists in the harvest: %v", name, err)
		}
	}
	if len(rep.Skipped) != 4 {
		t.Errorf("skipped %+v, want exactly the four special files", rep.Skipped)
	}
	wantContent(t, filepath.Join(dst, "out", "result.json"), "{}")
	wantMode(t, dst, 0o700)
}

func TestHarvestCap(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	mkdirs(t, filepath.Join(src, "a"), filepath.Join(src, "c", "sub"))
	writeFile(t, filepath.Join(src, "a", "1"), strings.Repeat("x", 40), 0o644)
	writeFile(t, filepath.Join(src, "a", "2"), strings.Repeat("x", 40), 0o644)
	writeFile(t, filepath.Join(src, "b"), strings.Repeat("x", 40), 0o644) // does not fit: 80+40 > 100
	writeFile(t, filepath.Join(src, "b2"), "", 0o644)                     // would fit, but the copy stopped
	writeFile(t, filepath.Join(src, "c", "sub", "f"), "x", 0o644)
	symlink(t, "/etc", filepath.Join(src, "d-link"))

	rep, err := Harvest(src, dst, HarvestCap{Bytes: 100, Entries: roomy.Entries})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.CapReached || rep.Complete() {
		t.Fatalf("report %+v, want the cap reached and a partial harvest", rep)
	}
	if rep.Bytes != 80 || rep.Files != 2 || rep.CapBytes != 100 {
		t.Errorf("copied %d files, %d bytes (cap %d); want 2 files, 80 bytes, cap 100", rep.Files, rep.Bytes, rep.CapBytes)
	}
	want := []Skipped{
		{Path: "b", Reason: SkipOverCap},
		{Path: "b2", Reason: SkipOverCap},
		{Path: "c", Reason: SkipOverCap},
	}
	if len(rep.Skipped) != len(want) {
		t.Fatalf("skipped %+v, want %+v", rep.Skipped, want)
	}
	for i, w := range want {
		if got := rep.Skipped[i]; got.Path != w.Path || got.Reason != w.Reason {
			t.Errorf("skipped[%d] = %+v, want %s %s", i, got, w.Path, w.Reason)
		}
	}
	if !strings.Contains(rep.Skipped[0].Detail, "40 bytes") {
		t.Errorf("over-cap detail %q does not give the size", rep.Skipped[0].Detail)
	}
	for _, name := range []string{"b", "b2", "c"} {
		if _, err := os.Lstat(filepath.Join(dst, name)); !os.IsNotExist(err) {
			t.Errorf("%s exists past the cap: %v", name, err)
		}
	}
	// The report goes into the run record as JSON; the partial state shows.
	b, _ := json.Marshal(rep)
	for _, s := range []string{`"cap_reached":true`, `"reason":"over-cap"`, `"cap_bytes":100`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("report JSON %s lacks %s", b, s)
		}
	}
}

// TestHarvestEntryCap: the harvest counts entries as well as bytes, so a
// tree of empty files (no bytes at all) stops at the entry cap, reported.
func TestHarvestEntryCap(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	mkdirs(t, filepath.Join(src, "a"), filepath.Join(src, "c", "sub"))
	writeFile(t, filepath.Join(src, "a", "1"), "", 0o644)
	symlink(t, "/etc", filepath.Join(src, "b-link"))
	writeFile(t, filepath.Join(src, "b0"), "", 0o644) // the fourth entry: over the cap of 3
	writeFile(t, filepath.Join(src, "c", "sub", "f"), "", 0o644)

	rep, err := Harvest(src, dst, HarvestCap{Bytes: roomy.Bytes, Entries: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.EntryCapReached || rep.CapReached || rep.Complete() {
		t.Fatalf("report %+v, want the entry cap reached and a partial harvest", rep)
	}
	if rep.Dirs != 1 || rep.Files != 1 || len(rep.Symlinks) != 1 || rep.CapEntries != 3 {
		t.Errorf("recorded %d dirs, %d files, %d symlinks (cap %d); want a, a/1 and b-link", rep.Dirs, rep.Files, len(rep.Symlinks), rep.CapEntries)
	}
	want := []Skipped{{Path: "b0", Reason: SkipOverEntryCap}, {Path: "c", Reason: SkipOverEntryCap}}
	if len(rep.Skipped) != len(want) || rep.Skipped[0].Path != "b0" || rep.Skipped[1].Path != "c" ||
		rep.Skipped[0].Reason != SkipOverEntryCap || rep.Skipped[1].Reason != SkipOverEntryCap {
		t.Fatalf("skipped %+v, want %+v (a directory once, not visited)", rep.Skipped, want)
	}
	if !strings.Contains(rep.Skipped[0].Detail, "cap of 3 entries") {
		t.Errorf("over-entry-cap detail %q does not give the cap", rep.Skipped[0].Detail)
	}
	for _, name := range []string{"b0", "c"} {
		if _, err := os.Lstat(filepath.Join(dst, name)); !os.IsNotExist(err) {
			t.Errorf("%s exists past the entry cap: %v", name, err)
		}
	}
	b, _ := json.Marshal(rep)
	for _, s := range []string{`"entry_cap_reached":true`, `"reason":"over-entry-cap"`, `"cap_entries":3`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("report JSON %s lacks %s", b, s)
		}
	}
}

// TestHarvestSkippedListIsBounded: past a cap, entries are listed up to
// MaxSkippedListed and counted after that, so the report stays small.
func TestHarvestSkippedListIsBounded(t *testing.T) {
	src := t.TempDir()
	const n = MaxSkippedListed + 500
	for i := range n {
		writeFile(t, filepath.Join(src, fmt.Sprintf("f%05d", i)), "", 0o644)
	}
	rep, err := Harvest(src, t.TempDir(), HarvestCap{Bytes: roomy.Bytes, Entries: 10})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Files != 10 || len(rep.Skipped) != MaxSkippedListed || rep.SkippedUnlisted != n-10-MaxSkippedListed {
		t.Errorf("%d files, %d skipped listed, %d unlisted; want 10, %d, %d", rep.Files, len(rep.Skipped), rep.SkippedUnlisted, MaxSkippedListed, n-10-MaxSkippedListed)
	}
	if rep.Skipped[0].Path != "f00010" {
		t.Errorf("first skipped %q, want f00010 (sorted walk)", rep.Skipped[0].Path)
	}
}

func TestHarvestUnreadableIsReported(t *testing.T) {
	testenv.RequireRoot(t)
	src := newTmpfs(t, testSize)
	dst := t.TempDir()
	// A mount inside the harvested tree is not crossed (RESOLVE_NO_XDEV).
	inner := filepath.Join(src, "out", "inner")
	mkdirs(t, inner)
	if err := unix.Mount("tmpfs", inner, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(inner, unix.MNT_DETACH)
	writeFile(t, filepath.Join(inner, "other-fs"), "x", 0o644)
	rep, err := Harvest(src, dst, roomy)
	if err != nil {
		t.Fatal(err)
	}
	if s := skipsOf(rep)["out/inner"]; s.Reason != SkipUnreadable {
		t.Errorf("a mount inside the tmpfs was %+v, want reported unreadable", s)
	}
	if _, err := os.Lstat(filepath.Join(dst, "out", "inner", "other-fs")); !os.IsNotExist(err) {
		t.Errorf("harvest crossed into another mount: %v", err)
	}
}

func TestHarvestDepthLimit(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	deep := src
	for range MaxHarvestDepth + 2 {
		deep = filepath.Join(deep, "d")
	}
	mkdirs(t, deep)
	rep, err := Harvest(src, dst, roomy)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0].Reason != SkipTooDeep || strings.Count(rep.Skipped[0].Path, "d") != MaxHarvestDepth+1 {
		t.Errorf("skipped %+v, want the directory below the depth limit reported", rep.Skipped)
	}
	if rep.Dirs != MaxHarvestDepth {
		t.Errorf("copied %d directories, want %d", rep.Dirs, MaxHarvestDepth)
	}
}

func TestHarvestIsDeterministic(t *testing.T) {
	src := t.TempDir()
	for _, n := range []string{"z", "a", "m", "b"} {
		writeFile(t, filepath.Join(src, n), strings.Repeat("x", 10), 0o644)
	}
	var first []Skipped
	for i := range 3 {
		rep, err := Harvest(src, t.TempDir(), HarvestCap{Bytes: 25, Entries: roomy.Entries})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = rep.Skipped
			if len(first) != 2 || first[0].Path != "m" || first[1].Path != "z" {
				t.Fatalf("skipped %+v, want m and z (sorted walk)", first)
			}
		} else if !slices.Equal(first, rep.Skipped) {
			t.Errorf("run %d skipped %+v, first run %+v", i, rep.Skipped, first)
		}
	}
}
