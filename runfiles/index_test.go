package runfiles

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"hookbox.dev/hookbox/render"
)

// indexedPackage is a package tree aged past the stat cache's racy window,
// assembled as AssembleRender assembles an engine's package (with /bin/sh,
// whose files are old, and at container paths: the test's directory is
// under /tmp, so relocation applies too).
type indexedPackage struct {
	dir      string
	programs []string
	opts     Options
}

// agedPackages are package trees written for the tests of the index in
// batches, each aged past the racy window at once: one wait per batch.
var agedPackages struct {
	dirs []string
	pkgs []indexedPackage
}

// agedBatch is how many package trees a batch holds: what one run of the
// index tests uses.
const agedBatch = 12

// newIndexedPackages returns n package trees of their own (no other test
// gets them) older than the racy window: only then can an assembly trust
// their digests from the index.
func newIndexedPackages(t *testing.T, n int) []indexedPackage {
	t.Helper()
	if len(agedPackages.pkgs) < n {
		dir, err := os.MkdirTemp("", "runfiles-aged-")
		if err != nil {
			t.Fatal(err)
		}
		agedPackages.dirs = append(agedPackages.dirs, dir)
		if dir, err = filepath.EvalSymlinks(dir); err != nil {
			t.Fatal(err)
		}
		for i := range max(n, agedBatch) {
			pkg := filepath.Join(dir, fmt.Sprint(i), "hbx-pkg")
			writePackage(t, pkg, map[string]any{"name": "hbx-pkg", "version": "1.0.0"})
			writeFile(t, filepath.Join(pkg, "lib", "a.js"), "module.exports = 'a'\n", 0o644)
			writeFile(t, filepath.Join(pkg, "lib", "b.js"), "module.exports = 'b'\n", 0o644)
			writeFile(t, filepath.Join(pkg, "bin", "tool"), "#!/bin/sh\necho tool\n", 0o755)
			symlink(t, "../lib/a.js", filepath.Join(pkg, "bin", "a.js"))
			agedPackages.pkgs = append(agedPackages.pkgs, indexedPackage{dir: pkg, programs: []string{"/bin/sh"},
				opts: Options{Packages: []string{pkg}, ContainerPaths: true}})
		}
		time.Sleep(RacyWindow + 100*time.Millisecond)
	}
	out := agedPackages.pkgs[:n:n]
	agedPackages.pkgs = agedPackages.pkgs[n:]
	return out
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, dir := range agedPackages.dirs {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// assembleIndexed assembles p twice and checks that the second assembly
// came from the index and is the first one exactly.
func assembleIndexed(t *testing.T, s *Store, p indexedPackage) *Result {
	t.Helper()
	first := assemble(t, s, p.programs, p.opts)
	second := assemble(t, s, p.programs, p.opts)
	if !second.Stats.Indexed || second.Stats.FilesHashed != 0 || second.Stats.ObjectsRehashed != 0 || second.Stats.TreeBuilt {
		t.Fatalf("an unchanged host was not assembled from the index: %+v", second.Stats)
	}
	if second.ManifestDigest != first.ManifestDigest || second.TreeDir != first.TreeDir || !slices.Equal(second.Manifest, first.Manifest) {
		t.Fatalf("the index gave %s, the assembly before it %s", second.ManifestDigest, first.ManifestDigest)
	}
	if second.Stats.Files != first.Stats.Files || second.Stats.Entries != first.Stats.Entries || second.Stats.BytesReused != sumSizes(first.Manifest) {
		t.Errorf("indexed stats %+v, first %+v", second.Stats, first.Stats)
	}
	checkTree(t, second)
	idx := s.loadIndex(indexKey(p.programs, p.opts))
	if idx == nil || !slices.Equal(idx.manifestOf(p.opts), first.Manifest) || len(idx.seals) != len(first.Manifest) {
		t.Fatalf("the index does not describe the manifest it was written for")
	}
	return second
}

// treePath is where host path p is in a tree assembled at container paths.
func treePath(res *Result, p string) string {
	return filepath.Join(res.TreeDir, render.ContainerPath(p))
}

// TestIndexNoticesHostChanges: the index never stands in for a host that
// changed since it was written. A file rewritten, added or removed, a file
// rewritten with its size and mtime put back (only its ctime tells), a
// file's or a directory's mode changed, and a symlink pointed elsewhere
// each give the manifest of the new host, not the indexed one.
func TestIndexNoticesHostChanges(t *testing.T) {
	pkgs := newIndexedPackages(t, 7)
	cases := []struct {
		name   string
		change func(t *testing.T, pkg string)
		check  func(t *testing.T, pkg string, res *Result)
	}{
		{"modified", func(t *testing.T, pkg string) {
			writeFile(t, filepath.Join(pkg, "lib", "a.js"), "module.exports = 'changed'\n", 0o644)
		}, func(t *testing.T, pkg string, res *Result) {
			if e := entry(res.Manifest, render.ContainerPath(filepath.Join(pkg, "lib", "a.js"))); e.SHA256 != sha256Hex(t, filepath.Join(pkg, "lib", "a.js")) {
				t.Errorf("a.js in the manifest is %+v", e)
			}
		}},
		{"added", func(t *testing.T, pkg string) {
			writeFile(t, filepath.Join(pkg, "lib", "c.js"), "module.exports = 'c'\n", 0o644)
		}, func(t *testing.T, pkg string, res *Result) {
			if e := entry(res.Manifest, render.ContainerPath(filepath.Join(pkg, "lib", "c.js"))); e.Type != render.RunfileFile {
				t.Errorf("the added file is not in the manifest: %+v", e)
			}
		}},
		{"removed", func(t *testing.T, pkg string) {
			if err := os.Remove(filepath.Join(pkg, "lib", "b.js")); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, pkg string, res *Result) {
			if e := entry(res.Manifest, render.ContainerPath(filepath.Join(pkg, "lib", "b.js"))); e.Type != "" {
				t.Errorf("the removed file is still in the manifest: %+v", e)
			}
		}},
		{"mtime-restored", func(t *testing.T, pkg string) {
			p := filepath.Join(pkg, "lib", "a.js")
			before, err := os.Lstat(p)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, p, "module.exports = 'A'\n", 0o644) // same size
			if err := os.Chtimes(p, before.ModTime(), before.ModTime()); err != nil {
				t.Fatal(err)
			}
			after, _ := os.Lstat(p)
			k0, k1 := statKeyOf(before), statKeyOf(after)
			if k0.Size != k1.Size || k0.MtimeNS != k1.MtimeNS || k0.Ino != k1.Ino || k0.CtimeNS == k1.CtimeNS {
				t.Fatalf("the change should show in the ctime only: %+v -> %+v", k0, k1)
			}
		}, func(t *testing.T, pkg string, res *Result) {
			p := filepath.Join(pkg, "lib", "a.js")
			if e := entry(res.Manifest, render.ContainerPath(p)); e.SHA256 != sha256Hex(t, p) {
				t.Errorf("a.js in the manifest is %+v, the host has %s", e, sha256Hex(t, p))
			}
		}},
		{"mode", func(t *testing.T, pkg string) {
			if err := os.Chmod(filepath.Join(pkg, "lib", "a.js"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, pkg string, res *Result) {
			if e := entry(res.Manifest, render.ContainerPath(filepath.Join(pkg, "lib", "a.js"))); e.Mode != 0o755 {
				t.Errorf("a.js in the manifest is %+v", e)
			}
		}},
		{"dir-mode", func(t *testing.T, pkg string) {
			if err := os.Chmod(filepath.Join(pkg, "lib"), 0o750); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, pkg string, res *Result) {
			if e := entry(res.Manifest, render.ContainerPath(filepath.Join(pkg, "lib"))); e.Mode != 0o750 {
				t.Errorf("lib in the manifest is %+v", e)
			}
		}},
		{"symlink-target", func(t *testing.T, pkg string) {
			link := filepath.Join(pkg, "bin", "a.js")
			if err := os.Remove(link); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("../lib/b.js", link); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, pkg string, res *Result) {
			if e := entry(res.Manifest, render.ContainerPath(filepath.Join(pkg, "bin", "a.js"))); e.Target != "../lib/b.js" {
				t.Errorf("bin/a.js in the manifest is %+v", e)
			}
		}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := openTestStore(t)
			p := pkgs[i]
			indexed := assembleIndexed(t, s, p)
			c.change(t, p.dir)
			res := assemble(t, s, p.programs, p.opts)
			if res.Stats.Indexed || res.ManifestDigest == indexed.ManifestDigest || res.TreeDir == indexed.TreeDir {
				t.Fatalf("the change went unnoticed: %s, %+v", res.ManifestDigest, res.Stats)
			}
			c.check(t, p.dir, res)
			checkTree(t, res)
		})
	}
}

// TestIndexNoticesTreeChanges: a tree entry whose inode changed since its
// seal is never accepted on the seal's word. A file edited in place (mtime
// put back) is re-hashed and repaired; an entry added to, removed from or
// replaced in a tree directory, or a directory's mode changed, makes the
// tree rebuilt.
func TestIndexNoticesTreeChanges(t *testing.T) {
	pkgs := newIndexedPackages(t, 1)
	p := pkgs[0]
	writable := func(t *testing.T, dir string) {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name    string
		change  func(t *testing.T, res *Result)
		repairs int
	}{
		{"file-edited-in-place", func(t *testing.T, res *Result) {
			tamperInPlace(t, treePath(res, filepath.Join(p.dir, "lib", "a.js")))
		}, 1},
		{"entry-added", func(t *testing.T, res *Result) {
			lib := treePath(res, filepath.Join(p.dir, "lib"))
			writable(t, lib)
			writeFile(t, filepath.Join(lib, "extra.js"), "extra\n", 0o444)
			os.Chmod(lib, 0o555)
		}, 0},
		{"entry-removed", func(t *testing.T, res *Result) {
			bin := treePath(res, filepath.Join(p.dir, "bin"))
			writable(t, bin)
			if err := os.Remove(filepath.Join(bin, "a.js")); err != nil {
				t.Fatal(err)
			}
			os.Chmod(bin, 0o555)
		}, 0},
		{"symlink-replaced", func(t *testing.T, res *Result) {
			bin := treePath(res, filepath.Join(p.dir, "bin"))
			writable(t, bin)
			link := filepath.Join(bin, "a.js")
			os.Remove(link)
			if err := os.Symlink("../lib/b.js", link); err != nil {
				t.Fatal(err)
			}
			os.Chmod(bin, 0o555)
		}, 0},
		{"dir-mode", func(t *testing.T, res *Result) {
			writable(t, treePath(res, filepath.Join(p.dir, "lib")))
		}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := openTestStore(t)
			indexed := assembleIndexed(t, s, p)
			c.change(t, indexed)
			res := assemble(t, s, p.programs, p.opts)
			if res.Stats.Indexed || !res.Stats.TreeReplaced || res.Stats.Repaired != c.repairs || res.ManifestDigest != indexed.ManifestDigest {
				t.Fatalf("the changed tree was accepted or not rebuilt: %+v", res.Stats)
			}
			checkTree(t, res)
			again := assemble(t, s, p.programs, p.opts)
			if !again.Stats.Indexed {
				t.Errorf("the rebuilt tree was not indexed: %+v", again.Stats)
			}
		})
	}
}

// TestIndexAfterAnotherTree: building another tree that links the same
// store objects moves their ctimes, and so their seals in this tree's
// index; the stat cache's seals, taken again after the links, vouch for
// them, so the index still serves the assembly (and is updated), with no
// re-hash. A tree removed by hand unlinks them too, which nothing sealed:
// then the store objects are checked again, once.
func TestIndexAfterAnotherTree(t *testing.T) {
	pkgs := newIndexedPackages(t, 2)
	s := openTestStore(t)
	a := assembleIndexed(t, s, pkgs[0])
	both := indexedPackage{programs: pkgs[0].programs, opts: Options{Packages: []string{pkgs[0].dir, pkgs[1].dir}, ContainerPaths: true}}
	if res := assemble(t, s, both.programs, both.opts); !res.Stats.TreeBuilt {
		t.Fatalf("the second tree was not built: %+v", res.Stats)
	}
	res := assemble(t, s, pkgs[0].programs, pkgs[0].opts)
	if !res.Stats.Indexed || res.ManifestDigest != a.ManifestDigest || res.Stats.ObjectsRehashed != 0 {
		t.Errorf("after another tree linked the objects: %+v", res.Stats)
	}
	// The index was written again with the new seals: read it back.
	idx := s.loadIndex(indexKey(pkgs[0].programs, pkgs[0].opts))
	if idx == nil {
		t.Fatal("no index")
	}
	changed, ok := changedSeals(context.Background(), a.TreeDir, idx.root, idx.manifestOf(pkgs[0].opts), idx.seals)
	if !ok || len(changed) != 0 {
		t.Errorf("after the update, %d entries differ from their seals (root %v)", len(changed), ok)
	}

	other := assemble(t, s, both.programs, both.opts)
	if err := removeTree(other.TreeDir); err != nil {
		t.Fatal(err)
	}
	res = assemble(t, s, pkgs[0].programs, pkgs[0].opts)
	if res.Stats.Indexed || res.Stats.ObjectsRehashed == 0 || res.Stats.Repaired != 0 || res.Stats.TreeBuilt {
		t.Errorf("after another tree was removed: %+v", res.Stats)
	}
	if res = assemble(t, s, pkgs[0].programs, pkgs[0].opts); !res.Stats.Indexed {
		t.Errorf("not indexed again: %+v", res.Stats)
	}
}

// TestIndexNotUsed: the index is only a shortcut for the quick check of an
// unchanged host. VerifyFull re-hashes every object whatever it says; a
// file inside the racy window is read again; an index that is damaged,
// truncated, of another format, or whose tree is gone is not used (and is
// rewritten).
func TestIndexNotUsed(t *testing.T) {
	pkgs := newIndexedPackages(t, 1)
	p := pkgs[0]
	s := openTestStore(t)
	indexed := assembleIndexed(t, s, p)

	full := assemble(t, s, p.programs, Options{Packages: p.opts.Packages, ContainerPaths: true, Verify: VerifyFull})
	if full.Stats.Indexed || full.Stats.ObjectsRehashed != full.Stats.Files {
		t.Errorf("VerifyFull: %+v", full.Stats)
	}

	indexFile := filepath.Join(s.indexDir(), indexKey(p.programs, p.opts))
	good, err := os.ReadFile(indexFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"truncated", good[:len(good)/2]},
		{"flipped", func() []byte { b := bytes.Clone(good); b[len(b)/2] ^= 1; return b }()},
		{"other-format", append([]byte("hookbox runfiles index 0\n"), good[len(indexMagic):]...)},
		{"empty", nil},
	} {
		if err := os.WriteFile(indexFile, c.data, 0o600); err != nil {
			t.Fatal(err)
		}
		res := assemble(t, s, p.programs, p.opts)
		if res.Stats.Indexed || res.ManifestDigest != indexed.ManifestDigest {
			t.Errorf("%s index: %+v", c.name, res.Stats)
		}
		if again := assemble(t, s, p.programs, p.opts); !again.Stats.Indexed {
			t.Errorf("%s index not rewritten: %+v", c.name, again.Stats)
		}
	}

	if err := removeTree(indexed.TreeDir); err != nil {
		t.Fatal(err)
	}
	res := assemble(t, s, p.programs, p.opts)
	if res.Stats.Indexed || !res.Stats.TreeBuilt {
		t.Errorf("tree removed: %+v", res.Stats)
	}
	checkTree(t, res)

	fresh := scriptFixture(t, p.dir, "fresh.sh", "echo fresh")
	assemble(t, s, p.programs, p.opts)
	res = assemble(t, s, p.programs, p.opts)
	if res.Stats.Indexed || res.Stats.FilesHashed == 0 {
		t.Errorf("a file written %s ago was trusted from the index: %+v", RacyWindow, res.Stats)
	}
	if e := entry(res.Manifest, render.ContainerPath(fresh)); e.SHA256 != sha256Hex(t, fresh) {
		t.Errorf("fresh file: %+v", e)
	}
}

// TestIndexEncoding: an index reads back as written, and any shorter or
// altered file is refused rather than read as a smaller index.
func TestIndexEncoding(t *testing.T) {
	idx := &assemblyIndex{
		digest: strings.Repeat("ab", 32),
		root:   treeSeal{Dev: 1, Ino: 2, Mode: 0o40555, Size: 4096, MtimeNS: 3, CtimeNS: 4},
		plan: []plannedEntry{
			{path: "/opt", typ: 1, mode: 0o755},
			{path: "/opt/a", mode: 0o644, key: statKey{Dev: 7, Ino: 8, Size: 10, MtimeNS: 9, CtimeNS: 10}, readNS: 11, sha: strings.Repeat("0f", 32)},
			{path: "/opt/ab", key: statKey{Size: -5}, readNS: -1, sha: strings.Repeat("e", 64)},
			{path: "/opt/l", typ: 2, mode: 0o777, target: "../x/\x00y"},
			{path: "/opt/l2", typ: 2, mode: 0o777, target: ""},
			{path: "/optx", typ: 1, mode: ^uint32(0)},
		},
		seals: []treeSeal{
			{Dev: 1, Ino: 5, Mode: 0o40555, MtimeNS: -1, CtimeNS: 1 << 62},
			{Dev: 1, Ino: 6, Mode: 0o100444, Size: 10},
			{},
			{Dev: ^uint64(0), Ino: ^uint64(0), Mode: ^uint32(0), Size: -1},
		},
	}
	b := idx.encode()
	got, err := decodeIndex(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.digest != idx.digest || got.root != idx.root || !slices.Equal(got.plan, idx.plan) || !slices.Equal(got.seals, idx.seals) {
		t.Errorf("decoded %+v, want %+v", got, idx)
	}
	for n := range len(b) {
		if _, err := decodeIndex(b[:n]); err == nil {
			t.Fatalf("the first %d of %d bytes decode", n, len(b))
		}
	}
}
