package runfiles

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/canonjson"
)

func openTestStore(t testing.TB) *Store {
	t.Helper()
	root := t.TempDir()
	s, err := OpenStore(root)
	if err != nil {
		t.Fatal(err)
	}
	// The tree is read-only: let the test cleanup remove it.
	t.Cleanup(func() { removeTree(root) })
	return s
}

func assemble(t testing.TB, s *Store, programs []string, opts Options) *Result {
	t.Helper()
	res, err := Assemble(context.Background(), s, programs, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func sha256Hex(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// checkTree walks the tree and compares it with the manifest: exactly the
// manifest's entries, types, tree modes, link texts, sizes and content.
// It also checks the manifest against the host it was taken from.
func checkTree(t *testing.T, res *Result) {
	t.Helper()
	want := make(map[string]render.Runfile)
	for _, e := range res.Manifest {
		want[e.Path] = e
	}
	digest, _, err := canonjson.Digest(res.Manifest)
	if err != nil || digest != res.ManifestDigest {
		t.Errorf("manifest digest %s, recomputed %s (%v)", res.ManifestDigest, digest, err)
	}
	if !strings.HasSuffix(res.TreeDir, strings.TrimPrefix(digest, "sha256:")) {
		t.Errorf("tree %s is not named by the manifest digest %s", res.TreeDir, digest)
	}
	seen := 0
	err = filepath.WalkDir(res.TreeDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink == 0 && fi.Mode().Perm()&0o222 != 0 {
			t.Errorf("%s is writable: %v", p, fi.Mode())
		}
		if p == res.TreeDir {
			return nil
		}
		rel := strings.TrimPrefix(p, res.TreeDir)
		e, ok := want[rel]
		if !ok {
			t.Errorf("tree has %s, not in the manifest", rel)
			return nil
		}
		seen++
		if fi.Mode() != TreeMode(e) {
			t.Errorf("%s: mode %v, want %v", rel, fi.Mode(), TreeMode(e))
		}
		switch e.Type {
		case render.RunfileFile:
			hostPath := rel
			if moved, ok := strings.CutPrefix(rel, render.HostDir+"/"); ok { // relocated (ContainerPaths)
				hostPath = "/" + moved
			}
			host, err := os.Lstat(hostPath)
			if err != nil {
				t.Errorf("host %s: %v", hostPath, err)
				return nil
			}
			if got := sha256Hex(t, p); got != e.SHA256 || fi.Size() != e.Size {
				t.Errorf("%s: sha256 %s size %d, manifest %s %d", rel, got, fi.Size(), e.SHA256, e.Size)
			}
			if host := sha256Hex(t, hostPath); host != e.SHA256 {
				t.Errorf("%s: host content %s, manifest %s", rel, host, e.SHA256)
			}
			if e.Mode != uint32(host.Mode().Perm()) {
				t.Errorf("%s: manifest mode %o, host %o", rel, e.Mode, host.Mode().Perm())
			}
		case render.RunfileSymlink:
			if got, _ := os.Readlink(p); got != e.Target {
				t.Errorf("%s: link %q, want %q", rel, got, e.Target)
			}
		case render.RunfileDir:
		default:
			t.Errorf("%s: type %s", rel, e.Type)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != len(res.Manifest) {
		t.Errorf("tree has %d entries, manifest %d", seen, len(res.Manifest))
	}
}

// scriptFixture writes a "#!/bin/sh" script into dir. Being new, it stays
// within the stat cache's racy window for the whole test.
func scriptFixture(t testing.TB, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAssembleIdempotent(t *testing.T) {
	s := openTestStore(t)
	script := scriptFixture(t, t.TempDir(), "hook", "echo hook")
	programs := []string{"/bin/sh", "/usr/bin/env", script}
	opts := Options{Dirs: []string{"/grants/docs"}}

	var events []Progress
	first := assemble(t, s, programs, Options{Dirs: opts.Dirs, Progress: func(p Progress) { events = append(events, p) }})
	checkTree(t, first)
	if first.Stats.BytesCopied == 0 || !first.Stats.TreeBuilt || first.Stats.Files == 0 {
		t.Errorf("first assembly: %+v", first.Stats)
	}
	if len(events) != first.Stats.Files || events[len(events)-1].Done != first.Stats.Files {
		t.Errorf("progress: %d events for %d files", len(events), first.Stats.Files)
	}
	if first.Stats.BytesCopied+first.Stats.BytesReused != sumSizes(first.Manifest) {
		t.Errorf("copied %d + reused %d != %d bytes of files", first.Stats.BytesCopied, first.Stats.BytesReused, sumSizes(first.Manifest))
	}

	second := assemble(t, s, programs, opts)
	if second.ManifestDigest != first.ManifestDigest || second.TreeDir != first.TreeDir || !slices.Equal(second.Manifest, first.Manifest) {
		t.Fatalf("second assembly differs: %s vs %s", second.ManifestDigest, first.ManifestDigest)
	}
	if second.Stats.BytesCopied != 0 || second.Stats.TreeBuilt || second.Stats.Repaired != 0 || second.Stats.ObjectsRehashed != 0 {
		t.Errorf("second assembly did work: %+v", second.Stats)
	}
	// Host files written long ago come from the stat cache: not even read.
	// The script was just written, so it is read again (racily clean) but
	// nothing is copied.
	if second.Stats.FilesHashed > 1 {
		t.Errorf("second assembly hashed %d files, want at most the fresh script", second.Stats.FilesHashed)
	}
	if second.Stats.BytesReused != sumSizes(second.Manifest) {
		t.Errorf("reused %d of %d bytes", second.Stats.BytesReused, sumSizes(second.Manifest))
	}
	checkTree(t, second)

	full := assemble(t, s, programs, Options{Dirs: opts.Dirs, Verify: VerifyFull})
	if full.TreeDir != first.TreeDir || full.Stats.BytesCopied != 0 || full.Stats.Repaired != 0 ||
		full.Stats.ObjectsRehashed != full.Stats.Files || full.Stats.BytesRehashed != sumSizes(full.Manifest) {
		t.Errorf("full verification of an intact store: %+v", full.Stats)
	}
}

func sumSizes(m []render.Runfile) int64 {
	var n int64
	for _, e := range m {
		n += e.Size
	}
	return n
}

func TestAssembleChangedSource(t *testing.T) {
	s := openTestStore(t)
	dir := t.TempDir()
	script := scriptFixture(t, dir, "hook", "echo AAAA")
	first := assemble(t, s, []string{script}, Options{})
	// Same size, different bytes, at once: within the racy window.
	scriptFixture(t, dir, "hook", "echo BBBB")
	second := assemble(t, s, []string{script}, Options{})
	if second.ManifestDigest == first.ManifestDigest || second.TreeDir == first.TreeDir {
		t.Fatalf("a rewritten script kept digest %s", first.ManifestDigest)
	}
	e1, e2 := entry(first.Manifest, script), entry(second.Manifest, script)
	if e1.SHA256 == e2.SHA256 || e2.SHA256 != sha256Hex(t, script) {
		t.Errorf("script digest %s -> %s, host %s", e1.SHA256, e2.SHA256, sha256Hex(t, script))
	}
	checkTree(t, second)
	// The first tree is untouched.
	if got := sha256Hex(t, first.TreeDir+script); got != e1.SHA256 {
		t.Errorf("old tree changed: %s", got)
	}
}

func entry(m []render.Runfile, path string) render.Runfile {
	for _, e := range m {
		if e.Path == path {
			return e
		}
	}
	return render.Runfile{}
}

func TestAssembleTamperedObject(t *testing.T) {
	s := openTestStore(t)
	script := scriptFixture(t, t.TempDir(), "hook", "echo original")
	programs := []string{"/bin/sh", script}
	first := assemble(t, s, programs, Options{})
	dash := resolvedFile(t, first.Manifest, "/bin/sh")

	tamper := func(path string, keepSeal bool) {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(path)
		b[len(b)-2] ^= 0xff // same size, different content
		os.Chmod(path, 0o644)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if keepSeal {
			os.Chmod(path, fi.Mode())
			os.Chtimes(path, sealTime, sealTime)
		}
	}
	for _, c := range []struct {
		name     string
		path     string // the file whose store object is tampered with
		keepSeal bool
		verify   Verify
	}{
		{"write", dash.Path, false, VerifyQuick},
		{"write-script", script, false, VerifyQuick},
		{"stealthy-full", dash.Path, true, VerifyFull},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := entry(first.Manifest, c.path)
			obj := s.ObjectPath(e.SHA256, e.Mode)
			tamper(obj, c.keepSeal)
			if sha256Hex(t, first.TreeDir+c.path) == e.SHA256 {
				t.Fatal("the tree shares the object's inode: tampering should show there too")
			}
			res := assemble(t, s, programs, Options{Verify: c.verify})
			if res.Stats.Repaired != 1 || !res.Stats.TreeReplaced || res.ManifestDigest != first.ManifestDigest {
				t.Errorf("tampering not repaired: %+v", res.Stats)
			}
			if got := sha256Hex(t, obj); got != e.SHA256 {
				t.Errorf("object still has %s", got)
			}
			checkTree(t, res)
			again := assemble(t, s, programs, Options{Verify: VerifyFull})
			if again.Stats.Repaired != 0 || again.Stats.TreeBuilt || again.Stats.BytesCopied != 0 {
				t.Errorf("after repair: %+v", again.Stats)
			}
		})
	}
	t.Run("removed-object", func(t *testing.T) {
		e := entry(first.Manifest, dash.Path)
		obj := s.ObjectPath(e.SHA256, e.Mode)
		if err := os.Remove(obj); err != nil {
			t.Fatal(err)
		}
		res := assemble(t, s, programs, Options{})
		if res.Stats.BytesCopied != e.Size || res.Stats.Repaired != 0 {
			t.Errorf("missing object: %+v", res.Stats)
		}
		checkTree(t, res)
	})
	t.Run("tree-entry", func(t *testing.T) {
		// Something added to a tree makes it rebuilt.
		res := assemble(t, s, programs, Options{})
		extra := filepath.Join(res.TreeDir, "usr", "extra")
		os.Chmod(filepath.Dir(extra), 0o755)
		os.WriteFile(extra, nil, 0o444)
		res = assemble(t, s, programs, Options{})
		if !res.Stats.TreeReplaced {
			t.Errorf("an extra tree entry went unnoticed: %+v", res.Stats)
		}
		checkTree(t, res)
	})
}

// resolvedFile is the manifest's file entry that path resolves to.
func resolvedFile(t *testing.T, m []render.Runfile, path string) render.Runfile {
	t.Helper()
	byPath := make(map[string]render.Runfile)
	for _, e := range m {
		byPath[e.Path] = e
	}
	return byPath[resolvesInside(t, byPath, path)]
}

func TestAssembleConcurrent(t *testing.T) {
	s := openTestStore(t)
	dir := t.TempDir()
	a := scriptFixture(t, dir, "a", "echo a")
	b := scriptFixture(t, dir, "b", "echo b")
	sets := []struct {
		programs []string
		opts     Options
	}{
		{[]string{"/bin/sh", a}, Options{}},
		{[]string{"/usr/bin/env", b}, Options{}},
		{[]string{"/bin/sh", a, b}, Options{Dirs: []string{"/grants/x"}}},
		{[]string{"/bin/sh"}, Options{Verify: VerifyFull}},
	}
	const goroutines = 16
	results := make([]*Result, goroutines)
	errs := make([]error, goroutines)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			set := sets[i%len(sets)]
			results[i], errs[i] = Assemble(context.Background(), s, set.programs, set.opts)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("goroutine %d: %v", i, err)
		}
	}
	for i, r := range results {
		ref := results[i%len(sets)]
		if r.ManifestDigest != ref.ManifestDigest || r.TreeDir != ref.TreeDir {
			t.Errorf("goroutine %d: %s, same set gave %s", i, r.ManifestDigest, ref.ManifestDigest)
		}
		if r.Stats.Repaired != 0 {
			t.Errorf("goroutine %d repaired objects in an untampered store: %+v", i, r.Stats)
		}
	}
	for i := range sets {
		checkTree(t, results[i])
	}
	if left, _ := os.ReadDir(s.tmpDir()); len(left) != 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}

func TestStoreStatCacheRules(t *testing.T) {
	s := openTestStore(t)
	key := statKey{Dev: 1, Ino: 2, Size: 3, MtimeNS: 4, CtimeNS: time.Now().UnixNano()}
	sha := strings.Repeat("ab", 32)
	if err := s.recordStat(key, statRecord{SHA256: sha, Size: 3, ReadNS: key.CtimeNS + int64(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if r, found, trusted := s.lookupStat(key); trusted || !found || r.SHA256 != sha {
		t.Errorf("an entry read within the racy window: %+v found %v trusted %v, want found, untrusted", r, found, trusted)
	}
	s.recordStat(key, statRecord{SHA256: sha, Size: 3, ReadNS: key.CtimeNS + int64(3*time.Second)})
	if r, _, trusted := s.lookupStat(key); !trusted || r.SHA256 != sha {
		t.Errorf("an aged entry is not trusted: %+v %v", r, trusted)
	}
	for _, bad := range []statRecord{{SHA256: "zz", Size: 3}, {SHA256: sha, Size: 4}} {
		bad.ReadNS = key.CtimeNS + int64(time.Hour)
		s.recordStat(key, bad)
		if _, found, _ := s.lookupStat(key); found {
			t.Errorf("bad record %+v used", bad)
		}
	}
	os.WriteFile(filepath.Join(s.statDir(), key.String()), []byte("{garbage"), 0o644)
	if _, found, _ := s.lookupStat(key); found {
		t.Error("garbage record used")
	}
	// The longest entry there can be fits the read of a record.
	const maxI, maxU = int64(^uint64(0) >> 1), ^uint64(0)
	longest, _ := json.Marshal(statRecord{SHA256: sha, Size: maxI, ReadNS: -maxI, Object: objectSeal{
		Dev: maxU, Ino: maxU, Size: maxI, Mode: fs.FileMode(^uint32(0)), MtimeNS: -maxI, CtimeNS: -maxI}})
	if len(longest) > maxRecord {
		t.Errorf("a stat-cache entry can be %d bytes, more than maxRecord %d", len(longest), maxRecord)
	}
}

func TestStorePutDetectsChangedSource(t *testing.T) {
	s := openTestStore(t)
	p := scriptFixture(t, t.TempDir(), "x", "echo 1")
	fi, _ := os.Lstat(p)
	key := statKeyOf(fi)
	key.MtimeNS-- // what a closure computed before the file changed
	_, _, err := s.put(context.Background(), p, key, 0o755, VerifyQuick)
	if !errors.Is(err, ErrSourceChanged) {
		t.Errorf("want ErrSourceChanged, got %v", err)
	}
}

func TestAssembleCancelled(t *testing.T) {
	s := openTestStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Assemble(ctx, s, []string{"/bin/sh"}, Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("want context.Canceled, got %v", err)
	}
}

func TestObjectNames(t *testing.T) {
	s := &Store{root: "/r"}
	for mode, want := range map[uint32]string{
		0o755: "/r/runfiles/sha256/ab", 0o644: "/r/runfiles/sha256-0444/ab",
		0o700: "/r/runfiles/sha256-0500/ab", 0o100: "/r/runfiles/sha256-0500/ab", 0o711: "/r/runfiles/sha256-0511/ab",
		0o744: "/r/runfiles/sha256-0544/ab", 0o600: "/r/runfiles/sha256-0400/ab", 0o640: "/r/runfiles/sha256-0400/ab",
	} {
		if got := s.ObjectPath("ab", mode); got != want {
			t.Errorf("ObjectPath(%o) = %s, want %s", mode, got, want)
		}
	}
	if got := s.TreePath("sha256:cd"); got != "/r/runfiles/trees/cd" {
		t.Errorf("TreePath = %s", got)
	}
}

// checkStore checks every object in the store: named by the sha256 of its
// content, read-only with its directory's mode, sealed.
func checkStore(t *testing.T, s *Store) int {
	t.Helper()
	n := 0
	for _, mode := range objectModes {
		dir := s.objectsDir(mode)
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ents {
			p := filepath.Join(dir, d.Name())
			fi, err := os.Lstat(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := sha256Hex(t, p); got != d.Name() || fi.Mode() != mode || !fi.ModTime().Equal(sealTime) {
				t.Errorf("object %s: content %s, mode %v, mtime %v", p, got, fi.Mode(), fi.ModTime())
			}
			n++
		}
	}
	return n
}

// TestAssembleRepairsAnyTamperedObject tampers with every object of the
// store in turn, found by listing the store rather than from the manifest.
func TestAssembleRepairsAnyTamperedObject(t *testing.T) {
	s := openTestStore(t)
	programs := []string{"/bin/sh", "/usr/bin/env"}
	first := assemble(t, s, programs, Options{})
	if n := checkStore(t, s); n == 0 {
		t.Fatal("no objects in the store")
	}
	for _, mode := range objectModes {
		ents, _ := os.ReadDir(s.objectsDir(mode))
		for _, d := range ents {
			p := filepath.Join(s.objectsDir(mode), d.Name())
			os.Chmod(p, 0o644)
			if err := os.WriteFile(p, []byte("tampered\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			res := assemble(t, s, programs, Options{})
			if res.Stats.Repaired != 1 || res.ManifestDigest != first.ManifestDigest {
				t.Errorf("%s: %+v", p, res.Stats)
			}
			checkStore(t, s)
			checkTree(t, res)
		}
	}
}

// A placed file appears at its own tree path (under /hookbox, which
// relocation would otherwise move), with the host file's content, and
// needs a static ELF file.
func TestAssemblePlaced(t *testing.T) {
	static := testenv.StaticELF(t) // Go's tools are static
	if err := RequireStatic(static); err != nil {
		t.Fatalf("no static ELF file to place: %v", err)
	}
	s := openTestStore(t)
	at := "/hookbox/bin/init"
	res := assemble(t, s, []string{"/bin/sh"}, Options{ContainerPaths: true, Placed: map[string]string{at: static}})
	checkTreeContent := func(p string) string { return sha256Hex(t, filepath.Join(res.TreeDir, p)) }
	byPath := map[string]render.Runfile{}
	for _, e := range res.Manifest {
		byPath[e.Path] = e
	}
	e, ok := byPath[at]
	if !ok || e.Type != render.RunfileFile || e.SHA256 != sha256Hex(t, static) || checkTreeContent(at) != e.SHA256 {
		t.Fatalf("placed entry %+v (in manifest %v), want the content of %s", e, ok, static)
	}
	for _, dir := range []string{"/hookbox", "/hookbox/bin"} {
		if byPath[dir].Type != render.RunfileDir {
			t.Errorf("parent %s missing: %+v", dir, byPath[dir])
		}
	}
	if _, moved := byPath[render.HostDir+at]; moved {
		t.Errorf("the placed file was relocated below %s", render.HostDir)
	}
	if _, err := Assemble(context.Background(), s, nil, Options{Placed: map[string]string{at: "/bin/sh"}}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("placing a dynamically linked file: %v, want ErrUnsupported", err)
	}
	if _, err := Assemble(context.Background(), s, nil, Options{Placed: map[string]string{at: "/nonexistent/init"}}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("placing a missing file: %v, want fs.ErrNotExist", err)
	}
}

// tamperInPlace rewrites one byte of the file at path where it is, as
// stealthily as user space can: same inode, same size, mode restored and
// the mtime set back to the seal. Only the ctime (and the content) moves.
func tamperInPlace(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil { // writable even when not root
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{old[len(old)-2] ^ 0xff}, int64(len(old)-2)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, fi.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, sealTime, sealTime); err != nil {
		t.Fatal(err)
	}
	after, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(fi, after) || after.Size() != fi.Size() || after.Mode() != fi.Mode() || !after.ModTime().Equal(fi.ModTime()) {
		t.Fatalf("tampering changed more than the content and ctime: %v %d %v -> %v %d %v",
			fi.Mode(), fi.Size(), fi.ModTime(), after.Mode(), after.Size(), after.ModTime())
	}
}

// TestQuickCheckDetectsInPlaceTamper: a store object edited in place,
// with its size, mode and seal mtime kept, is found by the default quick
// check and replaced, whether its host file comes from the stat cache
// (/bin/sh's target, written long ago) or is read again (a fresh script,
// whose object already exists).
func TestQuickCheckDetectsInPlaceTamper(t *testing.T) {
	for _, c := range []struct {
		name    string
		program string // "" = the script
	}{
		{"stat-cache-hit", "/bin/sh"},
		{"source-read-again", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openTestStore(t)
			script := scriptFixture(t, t.TempDir(), "hook", "echo original")
			programs := []string{"/bin/sh", script}
			first := assemble(t, s, programs, Options{})
			target := script
			if c.program != "" {
				target = resolvedFile(t, first.Manifest, c.program).Path
			}
			e := entry(first.Manifest, target)
			obj := s.ObjectPath(e.SHA256, e.Mode)
			tamperInPlace(t, obj)
			tampered := sha256Hex(t, obj)
			if sha256Hex(t, first.TreeDir+target) != tampered {
				t.Fatal("the tree shares the object's inode: tampering should show there too")
			}

			res := assemble(t, s, programs, Options{})
			if res.Stats.Repaired != 1 || !res.Stats.TreeReplaced || res.ManifestDigest != first.ManifestDigest {
				t.Errorf("the quick check accepted an object edited in place: %+v", res.Stats)
			}
			if got := sha256Hex(t, obj); got != e.SHA256 {
				t.Errorf("object %s still holds %s", obj, got)
			}
			checkTree(t, res)
			want := Repair{Path: target, Object: obj, Reason: "content hashes to " + tampered}
			if len(res.Repairs) != 1 || res.Repairs[0] != want {
				t.Errorf("repairs %+v, want [%+v]", res.Repairs, want)
			}
			if res.Stats.ObjectsRehashed != 1 {
				t.Errorf("%d objects re-hashed, want the tampered one only", res.Stats.ObjectsRehashed)
			}
			// The repaired object and the rebuilt tree are sealed: the
			// next quick check reads nothing.
			again := assemble(t, s, programs, Options{})
			if again.Stats.ObjectsRehashed != 0 || again.Stats.Repaired != 0 || again.Stats.TreeBuilt {
				t.Errorf("after the repair: %+v", again.Stats)
			}
		})
	}
}

// TestSealSurvivesTreeLinks: the store's own operations that change an
// object's ctime (hard links from a new tree, a tree removed) cost at most
// one re-hash of the objects concerned, never a re-hash on every run.
func TestSealSurvivesTreeLinks(t *testing.T) {
	s := openTestStore(t)
	a := []string{"/bin/sh"}
	b := []string{"/bin/sh", "/usr/bin/env"}
	first := assemble(t, s, a, Options{})
	for _, step := range []struct {
		name     string
		programs []string
		rebuilt  bool
	}{
		{"same tree", a, false},
		{"another tree linking the same objects", b, true},
		{"the first tree again", a, false},
		{"the second tree again", b, false},
	} {
		res := assemble(t, s, step.programs, Options{})
		if res.Stats.ObjectsRehashed != 0 || res.Stats.Repaired != 0 || res.Stats.TreeBuilt != step.rebuilt {
			t.Errorf("%s: %+v", step.name, res.Stats)
		}
	}

	// A tree removed by hand (or by a future gc) unlinks its files: the
	// objects it shared are hashed once, found intact and sealed again.
	second := assemble(t, s, b, Options{})
	if err := removeTree(second.TreeDir); err != nil {
		t.Fatal(err)
	}
	res := assemble(t, s, a, Options{})
	if res.Stats.ObjectsRehashed != first.Stats.Files || res.Stats.Repaired != 0 || res.Stats.TreeBuilt {
		t.Errorf("after removing a tree sharing all %d files: %+v", first.Stats.Files, res.Stats)
	}
	if res = assemble(t, s, a, Options{}); res.Stats.ObjectsRehashed != 0 {
		t.Errorf("the re-hash did not seal again: %+v", res.Stats)
	}
}

// TestSealLimits: what the seal cannot tell, and how the store copes.
func TestSealLimits(t *testing.T) {
	programs := []string{"/bin/sh"}
	t.Run("forged-seal", func(t *testing.T) {
		// Whoever can write the store can also rewrite the seal after
		// tampering: the quick check then believes it; VerifyFull does not.
		s := openTestStore(t)
		first := assemble(t, s, programs, Options{})
		e := resolvedFile(t, first.Manifest, "/bin/sh")
		obj := s.ObjectPath(e.SHA256, e.Mode)
		tamperInPlace(t, obj)
		fi, err := os.Lstat(obj)
		if err != nil {
			t.Fatal(err)
		}
		if n := rewriteSeals(t, s, func(r *statRecord) {
			if r.SHA256 == e.SHA256 {
				r.Object = sealOf(fi)
			}
		}); n == 0 {
			t.Fatal("no stat-cache entry names the object")
		}
		if res := assemble(t, s, programs, Options{}); res.Stats.Repaired != 0 {
			t.Fatalf("a forged seal was seen by the quick check? %+v", res.Stats)
		}
		res := assemble(t, s, programs, Options{Verify: VerifyFull})
		if res.Stats.Repaired != 1 || !res.Stats.TreeReplaced || res.Stats.ObjectsRehashed != first.Stats.Files {
			t.Errorf("VerifyFull missed a tamper under a forged seal: %+v", res.Stats)
		}
		if len(res.Repairs) != 1 || res.Repairs[0].Object != obj || !strings.Contains(res.Repairs[0].Reason, "seal matches") {
			t.Errorf("repairs: %+v", res.Repairs)
		}
		checkTree(t, res)
	})
	t.Run("no-seals", func(t *testing.T) {
		// A store written before seals existed (and so before assembly
		// indexes): every object is hashed once and sealed, none replaced.
		s := openTestStore(t)
		first := assemble(t, s, programs, Options{})
		rewriteSeals(t, s, func(r *statRecord) { r.Object = objectSeal{} })
		dropIndexes(t, s)
		res := assemble(t, s, programs, Options{})
		if res.Stats.ObjectsRehashed != first.Stats.Files || res.Stats.Repaired != 0 || res.Stats.TreeBuilt {
			t.Errorf("without seals: %+v", res.Stats)
		}
		if res := assemble(t, s, programs, Options{}); res.Stats.ObjectsRehashed != 0 {
			t.Errorf("not sealed after the re-hash: %+v", res.Stats)
		}
	})
	t.Run("stat-mismatch", func(t *testing.T) {
		// What no intact object has is damage without reading it.
		s := openTestStore(t)
		first := assemble(t, s, programs, Options{})
		e := resolvedFile(t, first.Manifest, "/bin/sh")
		o := s.object(e.SHA256, e.Size, e.Mode)
		for _, c := range []struct {
			change func() error
			reason string
		}{
			{func() error { return os.Chtimes(o.path, time.Now(), time.Now()) }, "mtime "},
			{func() error { return os.Chmod(o.path, 0o755) }, "mode -rwxr-xr-x, want -r-xr-xr-x"},
			{func() error { return os.Truncate(o.path, 1) }, fmt.Sprintf("size 1, want %d", e.Size)},
		} {
			if err := c.change(); err != nil {
				t.Fatal(err)
			}
			res := assemble(t, s, programs, Options{})
			if len(res.Repairs) != 1 || !strings.HasPrefix(res.Repairs[0].Reason, c.reason) || res.Stats.ObjectsRehashed != 0 {
				t.Errorf("want a repair for %q without a re-hash: %+v %+v", c.reason, res.Repairs, res.Stats)
			}
			checkTree(t, res)
		}
	})
}

// rewriteSeals applies edit to every stat-cache entry of s and returns how
// many it changed.
func rewriteSeals(t *testing.T, s *Store, edit func(*statRecord)) int {
	t.Helper()
	ents, err := os.ReadDir(s.statDir())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range ents {
		p := filepath.Join(s.statDir(), d.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var r statRecord
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		was := r
		if edit(&r); r == was {
			continue
		}
		if b, err = json.Marshal(r); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

// dropIndexes removes every assembly index of s, as a store written before
// indexes existed has none.
func dropIndexes(t *testing.T, s *Store) {
	t.Helper()
	ents, err := os.ReadDir(s.indexDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ents {
		if err := os.Remove(filepath.Join(s.indexDir(), d.Name())); err != nil {
			t.Fatal(err)
		}
	}
}
