package runfiles

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestObjectModeNeverWidens: for every host mode, the object (and tree
// file) is read-only, its owner (the store's) can read it, and its group
// and others get no bit the host file does not give others (issue: a 0600
// host file became a 0444 object).
func TestObjectModeNeverWidens(t *testing.T) {
	for host := uint32(0); host <= 0o777; host++ {
		got := objectMode(host)
		others := fs.FileMode(host) & 0o005
		switch {
		case got&0o222 != 0:
			t.Errorf("host %04o: object %04o is writable", host, got)
		case got&0o400 == 0:
			t.Errorf("host %04o: object %04o is unreadable to the store's owner", host, got)
		case got&0o007 != others || got>>3&0o007 != others:
			t.Errorf("host %04o: object %04o gives group or others other than the host's others (%o)", host, got, others)
		case (got&0o100 != 0) != (host&0o111 != 0):
			t.Errorf("host %04o: object %04o: owner execute differs from the host's execute bits", host, got)
		}
		found := false
		for _, m := range objectModes {
			found = found || m == got
		}
		if !found {
			t.Errorf("host %04o: object mode %04o has no objects directory", host, got)
		}
	}
}

// storeDirs lists every directory of the store's layout.
func storeDirs(s *Store) []string {
	dirs := []string{filepath.Join(s.root, "runfiles"), s.statDir(), s.treesDir(), s.tmpDir()}
	for _, m := range objectModes {
		dirs = append(dirs, s.objectsDir(m))
	}
	return dirs
}

func checkPrivateDirs(t *testing.T, s *Store) {
	t.Helper()
	for _, d := range storeDirs(s) {
		fi, err := os.Lstat(d)
		if err != nil {
			t.Error(err)
			continue
		}
		if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, want a 0700 directory", d, fi.Mode())
		}
	}
}

// TestStoreIsPrivate: the store's directories are 0700 when created and
// stay so after an assembly (issue: they were 0755, so every host user
// could read every object and tree).
func TestStoreIsPrivate(t *testing.T) {
	s := openTestStore(t)
	checkPrivateDirs(t, s)
	assemble(t, s, []string{"/bin/sh"}, Options{})
	checkPrivateDirs(t, s)
}

// TestOpenStoreTightensOldStore: a store written with 0755 directories is
// made private when opened; something other than a directory where the
// layout has one is refused with its path.
func TestOpenStoreTightensOldStore(t *testing.T) {
	root := t.TempDir()
	old := &Store{root: root}
	for _, d := range []string{filepath.Join(root, "runfiles"), old.objectsDir(0o555), old.objectsDir(0o444), old.statDir(), old.treesDir(), old.tmpDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s, err := OpenStore(root)
	if err != nil {
		t.Fatal(err)
	}
	checkPrivateDirs(t, s)

	other := t.TempDir()
	if err := os.MkdirAll(filepath.Join(other, "runfiles"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/tmp", filepath.Join(other, "runfiles", "trees")); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(other); err == nil || !bytes.Contains([]byte(err.Error()), []byte(filepath.Join(other, "runfiles", "trees"))) {
		t.Errorf("a symlink in the store's layout: %v, want an error naming it", err)
	}
}

// privateFixture is a 0700 directory holding a 0600 key, and files of
// other modes beside it.
func privateFixture(t *testing.T) (dir string, key []byte) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "private")
	key = []byte("-----BEGIN TEST KEY----- root only\n")
	writeFile(t, filepath.Join(dir, "key"), string(key), 0o600)
	writeFile(t, filepath.Join(dir, "group-only"), "group\n", 0o640)
	writeFile(t, filepath.Join(dir, "public"), "public\n", 0o644)
	writeFile(t, filepath.Join(dir, "tool"), "#!/bin/sh\n", 0o750)
	writeFile(t, filepath.Join(dir, "sub", "nested-key"), "nested "+string(key), 0o600)
	if err := os.Chmod(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir, key
}

// TestPrivateHostFilesStayPrivate: a 0700 directory taken whole (what a
// package tree is) with a 0600 key inside: the key's object and tree file
// give nobody but the store's owner access, files keep their host
// restrictions, and no file anywhere in the store that holds the key is
// readable by group or others (issue: they became 0444 under 0755
// directories).
func TestPrivateHostFilesStayPrivate(t *testing.T) {
	dir, key := privateFixture(t)
	s := openTestStore(t)
	res := assemble(t, s, []string{dir}, Options{})
	checkTree(t, res)
	for name, want := range map[string]fs.FileMode{
		"key": 0o400, "group-only": 0o400, "public": 0o444, "tool": 0o500, "sub/nested-key": 0o400,
	} {
		fi, err := os.Lstat(filepath.Join(res.TreeDir, dir, name))
		if err != nil || fi.Mode() != want {
			t.Errorf("tree %s: %v %v, want %v", name, fi.Mode(), err, want)
		}
	}
	secrets := 0
	err := filepath.WalkDir(s.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, key) {
			secrets++
			if fi, _ := d.Info(); fi.Mode().Perm()&0o077 != 0 {
				t.Errorf("%s holds the key with mode %v", p, fi.Mode())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if secrets < 4 { // two objects, each linked into the tree
		t.Errorf("%d store files hold the key, want at least 4 (the walk missed them)", secrets)
	}
	checkPrivateDirs(t, s)
}

// TestOldTreeWithWiderModesIsRebuilt: a store from before (0755
// directories, a tree whose copy of a 0600 file is 0444) is tightened and
// its tree rebuilt with the host file's restrictions.
func TestOldTreeWithWiderModesIsRebuilt(t *testing.T) {
	dir, key := privateFixture(t)
	s := openTestStore(t)
	first := assemble(t, s, []string{dir}, Options{})
	// Make it what an older hookbox wrote: a 0444 key in the tree, every
	// store directory 0755.
	treeKey := filepath.Join(first.TreeDir, dir, "key")
	parent := filepath.Dir(treeKey)
	os.Chmod(parent, 0o700)
	os.Remove(treeKey)
	if err := os.WriteFile(treeKey, key, 0o444); err != nil {
		t.Fatal(err)
	}
	os.Chmod(treeKey, 0o444)
	os.Chtimes(treeKey, sealTime, sealTime)
	os.Chmod(parent, 0o555)
	for _, d := range storeDirs(s) {
		os.Chmod(d, 0o755)
	}

	s, err := OpenStore(s.root)
	if err != nil {
		t.Fatal(err)
	}
	checkPrivateDirs(t, s)
	res := assemble(t, s, []string{dir}, Options{})
	if !res.Stats.TreeReplaced || res.TreeDir != first.TreeDir {
		t.Errorf("the old tree was not replaced: %+v", res.Stats)
	}
	if fi, err := os.Lstat(treeKey); err != nil || fi.Mode() != 0o400 {
		t.Errorf("tree key after the repair: %v %v, want 0400", fi.Mode(), err)
	}
	checkTree(t, res)
}
