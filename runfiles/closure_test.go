package runfiles

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"hookbox.dev/hookbox/render"
)

// requireTool fails (does not skip) when a tool the tests need is missing:
// it is installed on every machine these tests are meant to run on.
func requireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is required by this test (apt-get install -y %s): %v", name, name, err)
	}
	return p
}

// checkInvariants checks what every closure must satisfy: sorted, no
// duplicates, no "/", every parent present as a dir, files without hashes.
func checkInvariants(t *testing.T, entries []render.Runfile) map[string]render.Runfile {
	t.Helper()
	byPath := make(map[string]render.Runfile)
	for i, e := range entries {
		if i > 0 && entries[i-1].Path >= e.Path {
			t.Errorf("not sorted or duplicated: %s then %s", entries[i-1].Path, e.Path)
		}
		if e.Path == "/" || !filepath.IsAbs(e.Path) || filepath.Clean(e.Path) != e.Path {
			t.Errorf("bad path %q", e.Path)
		}
		byPath[e.Path] = e
	}
	for _, e := range entries {
		if parent := filepath.Dir(e.Path); parent != "/" {
			if p, ok := byPath[parent]; !ok || p.Type != render.RunfileDir {
				t.Errorf("%s: parent %s missing or not a dir (%+v)", e.Path, parent, p)
			}
		}
		switch e.Type {
		case render.RunfileSymlink:
			if e.Target == "" {
				t.Errorf("%s: symlink without target", e.Path)
			}
		case render.RunfileFile:
			if e.SHA256 != "" || e.Target != "" {
				t.Errorf("%s: closure file entry carries %+v", e.Path, e)
			}
		case render.RunfileDir:
		default:
			t.Errorf("%s: type %q", e.Path, e.Type)
		}
	}
	return byPath
}

// resolvesInside checks that path resolves, using only the closure's
// entries, to a file entry: what the container will do.
func resolvesInside(t *testing.T, byPath map[string]render.Runfile, path string) string {
	t.Helper()
	cur := resolveIn(t, byPath, path)
	if e := byPath[cur]; cur != "" && e.Type != render.RunfileFile {
		t.Errorf("%s resolves to %s, a %q", path, cur, e.Type)
	}
	return cur
}

// resolveIn resolves path using only the closure's entries.
func resolveIn(t *testing.T, byPath map[string]render.Runfile, path string) string {
	t.Helper()
	todo := splitPath(path)
	cur := "/"
	for hops := 0; len(todo) > 0; {
		name := todo[0]
		todo = todo[1:]
		if name == "." {
			continue
		}
		if name == ".." {
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		e, ok := byPath[next]
		if !ok {
			t.Errorf("%s: %s is not in the closure", path, next)
			return ""
		}
		if e.Type == render.RunfileSymlink {
			if hops++; hops > 40 {
				t.Fatalf("%s: symlink loop", path)
			}
			if filepath.IsAbs(e.Target) {
				cur = "/"
			}
			todo = append(splitPath(e.Target), todo...)
			continue
		}
		cur = next
	}
	return cur
}

func TestClosureBinShRecordsHops(t *testing.T) {
	entries, err := Closure([]string{"/bin/sh"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	byPath := checkInvariants(t, entries)
	binIsLink := false
	if fi, err := os.Lstat("/bin"); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		binIsLink = true
		target, _ := os.Readlink("/bin")
		if e := byPath["/bin"]; e.Type != render.RunfileSymlink || e.Target != target || e.Mode != 0o777 {
			t.Errorf("/bin: %+v, want symlink -> %s", e, target)
		}
	}
	real, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	if got := resolvesInside(t, byPath, "/bin/sh"); got != real {
		t.Errorf("/bin/sh resolves to %s in the closure, %s on the host", got, real)
	}
	if binIsLink {
		// Debian 12: /bin -> usr/bin, /usr/bin/sh -> dash, /usr/bin/dash.
		if target, err := os.Readlink("/usr/bin/sh"); err == nil {
			if e := byPath["/usr/bin/sh"]; e.Type != render.RunfileSymlink || e.Target != target {
				t.Errorf("/usr/bin/sh: %+v, want symlink -> %s", e, target)
			}
		}
	}
	fi, _ := os.Stat(real)
	if e := byPath[real]; e.Type != render.RunfileFile || e.Mode != uint32(fi.Mode().Perm()) {
		t.Errorf("%s: %+v, want file mode %o", real, e, fi.Mode().Perm())
	}
	// The interpreter is there, reachable through its hops.
	f, _ := elf.Open(real)
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			p.ReadAt(b, 0)
			resolvesInside(t, byPath, strings.TrimRight(string(b), "\x00"))
		}
	}
	again, err := Closure([]string{"/bin/sh", "/bin/sh"}, Options{})
	if err != nil || !slices.Equal(entries, again) {
		t.Errorf("a second closure differs (err %v)", err)
	}
}

var lddLine = regexp.MustCompile(`^\s*(\S+)(?: => (\S+|not found))?(?: \(0x[0-9a-f]+\))?\s*$`)

// lddLibraries runs ldd and returns the physical paths of what it loads
// (linux-vdso excluded) and the names it could not find.
func lddLibraries(t *testing.T, program string) (found []string, missing []string) {
	t.Helper()
	out, err := exec.Command(requireTool(t, "ldd"), program).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "not found") {
		t.Fatalf("ldd %s: %v\n%s", program, err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		m := lddLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("ldd %s: unexpected line %q", program, line)
		}
		path := m[2]
		switch {
		case path == "not found":
			missing = append(missing, m[1])
			continue
		case path == "" && strings.HasPrefix(m[1], "/"):
			path = m[1] // the interpreter
		case path == "":
			continue // linux-vdso.so.1
		}
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			t.Fatal(err)
		}
		found = append(found, real)
	}
	slices.Sort(found)
	return slices.Compact(found), missing
}

// closureLibraries returns the physical paths of the closure's ELF files
// other than the programs themselves.
func closureLibraries(t *testing.T, entries []render.Runfile, programs ...string) []string {
	t.Helper()
	var libs []string
	for _, e := range entries {
		if e.Type != render.RunfileFile || slices.Contains(programs, e.Path) || e.Path == ldCachePath {
			continue
		}
		real, err := filepath.EvalSymlinks(e.Path)
		if err != nil {
			t.Fatal(err)
		}
		libs = append(libs, real)
	}
	slices.Sort(libs)
	return slices.Compact(libs)
}

func TestClosureMatchesLdd(t *testing.T) {
	requireTool(t, "git")
	programs := []string{"/usr/bin/git"}
	// More programs with larger closures, where this host has them.
	for _, p := range []string{"/usr/bin/ssh", "/usr/bin/curl", "/usr/bin/python3", "/usr/bin/perl",
		"/usr/bin/gpg", "/usr/bin/tar", "/usr/bin/ls", "/usr/lib/git-core/git-remote-https", largeEngine} {
		if _, err := os.Stat(p); err == nil {
			programs = append(programs, p)
		}
	}
	for _, prog := range programs {
		t.Run(filepath.Base(prog), func(t *testing.T) {
			entries, err := Closure([]string{prog}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			byPath := checkInvariants(t, entries)
			real, _ := filepath.EvalSymlinks(prog)
			want, missing := lddLibraries(t, prog)
			if len(missing) > 0 {
				t.Fatalf("ldd finds no %v for %s", missing, prog)
			}
			got := closureLibraries(t, entries, real)
			if !slices.Equal(got, want) {
				t.Errorf("closure libraries differ from ldd:\n got %v\nwant %v", got, want)
			}
			// Every library is reachable by the name its loader uses.
			for _, e := range entries {
				if e.Type == render.RunfileSymlink {
					resolveIn(t, byPath, e.Path)
				}
			}
		})
	}
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func TestClosureShebang(t *testing.T) {
	dir := t.TempDir()
	dash, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	env, err := filepath.EvalSymlinks("/usr/bin/env")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, script string
		opts         Options
		want         []string // physical files the closure must hold
		reach        []string // paths that must resolve within the closure
	}{
		{"sh", "#!/bin/sh\necho hi\n", Options{}, []string{dash}, []string{"/bin/sh"}},
		{"env-sh", "#!/usr/bin/env sh\necho hi\n", Options{}, []string{dash, env}, []string{"/usr/bin/env", "/usr/bin/sh"}},
		{"env-path", "#! /usr/bin/env  sh \n", Options{Path: "/nonexistent:/bin"}, []string{dash, env}, []string{"/bin/sh"}},
		{"env-split", "#!/usr/bin/env -S A=1 sh -e\n", Options{}, []string{dash, env}, []string{"/usr/bin/sh"}},
		{"nested", "#!" + filepath.Join(dir, "sh") + "\n", Options{}, []string{dash, filepath.Join(dir, "sh")}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			script := filepath.Join(dir, c.name)
			writeFile(t, script, c.script, 0o755)
			entries, err := Closure([]string{script}, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			byPath := checkInvariants(t, entries)
			for _, w := range append(c.want, script) {
				if byPath[w].Type != render.RunfileFile {
					t.Errorf("closure lacks file %s", w)
				}
			}
			for _, r := range c.reach {
				resolvesInside(t, byPath, r)
			}
			// The interpreter's own closure (libc) is there too.
			shClosure, err := Closure([]string{dash}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range shClosure {
				if _, ok := byPath[e.Path]; !ok {
					t.Errorf("closure lacks %s from the interpreter's closure", e.Path)
				}
			}
		})
	}
	t.Run("errors", func(t *testing.T) {
		for name, script := range map[string]string{
			"relative":     "#!sh\n",
			"missing":      "#!/nonexistent/interp\n",
			"env-missing":  "#!/usr/bin/env no-such-program-hookbox\n",
			"env-no-cmd":   "#!/usr/bin/env\n",
			"empty":        "#!\n",
			"self-nesting": "#!" + filepath.Join(dir, "self-nesting") + "\n",
		} {
			p := filepath.Join(dir, name)
			writeFile(t, p, script, 0o755)
			if _, err := Closure([]string{p}, Options{}); err == nil || !strings.Contains(err.Error(), p) {
				t.Errorf("%s: want an error naming the script, got %v", name, err)
			}
		}
	})
}

func TestClosureStaticBinary(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "main.go"), "package main\n\nfunc main() {}\n", 0o644)
	writeFile(t, filepath.Join(dir, "go.mod"), "module static\n\ngo 1.21\n", 0o644)
	bin := filepath.Join(dir, "static")
	cmd := exec.Command(goTool(t), "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Fatalf("test binary is not static (%v)", p.Type)
		}
	}
	f.Close()
	entries, err := Closure([]string{bin}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, entries)
	var files []string
	for _, e := range entries {
		switch e.Type {
		case render.RunfileFile:
			files = append(files, e.Path)
		case render.RunfileDir:
			if !strings.HasPrefix(dir+"/", e.Path+"/") {
				t.Errorf("unexpected dir %s", e.Path)
			}
		}
	}
	real, _ := filepath.EvalSymlinks(bin)
	if !slices.Equal(files, []string{real}) {
		t.Errorf("static binary closure has files %v, want just %s", files, real)
	}
}

func goTool(t *testing.T) string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/local/go/bin/go"); err == nil {
		return "/usr/local/go/bin/go"
	}
	t.Fatal("no go tool on PATH or in /usr/local/go")
	return ""
}

// buildC compiles C source with gcc; extra are gcc arguments.
func buildC(t *testing.T, out, src string, extra ...string) {
	t.Helper()
	gcc := requireTool(t, "gcc")
	srcFile := out + ".c"
	writeFile(t, srcFile, src, 0o644)
	args := append([]string{"-o", out, srcFile}, extra...)
	if b, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, b)
	}
	os.Remove(srcFile)
}

// originFixture builds, under dir:
//
//	lib/libhbb.so.1.0 (soname libhbb.so.1)   and  lib/libhbb.so.1 -> libhbb.so.1.0
//	lib2/libhbc.so.1
//	lib/libhba.so.1 (needs libhbc.so.1, no search path of its own)
//	bin/prog  (needs libhba.so.1 and libhbb.so.1; search path $ORIGIN/../lib:$ORIGIN/../lib2)
//
// libhbc.so.1 is found only through the program's path, which the loader
// uses for libhba's needs only when it is a DT_RPATH (inherited), not a
// DT_RUNPATH.
func originFixture(t *testing.T, dir string, runpath bool) string {
	lib, lib2, bin := filepath.Join(dir, "lib"), filepath.Join(dir, "lib2"), filepath.Join(dir, "bin")
	for _, d := range []string{lib, lib2, bin} {
		os.MkdirAll(d, 0o755)
	}
	buildC(t, filepath.Join(lib2, "libhbc.so.1"), "int hbc(void) { return 3; }\n",
		"-shared", "-fPIC", "-Wl,-soname,libhbc.so.1")
	buildC(t, filepath.Join(lib, "libhbb.so.1.0"), "int hbb(void) { return 2; }\n",
		"-shared", "-fPIC", "-Wl,-soname,libhbb.so.1")
	if err := os.Symlink("libhbb.so.1.0", filepath.Join(lib, "libhbb.so.1")); err != nil {
		t.Fatal(err)
	}
	buildC(t, filepath.Join(lib, "libhba.so.1"), "int hbc(void);\nint hba(void) { return hbc() + 1; }\n",
		"-shared", "-fPIC", "-Wl,-soname,libhba.so.1", filepath.Join(lib2, "libhbc.so.1"))
	dtags := "-Wl,--disable-new-dtags"
	if runpath {
		dtags = "-Wl,--enable-new-dtags"
	}
	prog := filepath.Join(bin, "prog")
	buildC(t, prog, "int hba(void); int hbb(void);\nint main(void) { return hba() + hbb() == 6 ? 0 : 1; }\n",
		filepath.Join(lib, "libhba.so.1"), filepath.Join(lib, "libhbb.so.1"),
		dtags, "-Wl,-rpath,$ORIGIN/../lib:$ORIGIN/../lib2")
	info, err := readELFFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	if info.hasRunpath != runpath || (info.rpath != "") == runpath {
		t.Fatalf("gcc did not produce the wanted tags: %+v", info)
	}
	return prog
}

func readELFFile(path string) (*elfInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readELF(f)
}

func TestClosureOriginRPATH(t *testing.T) {
	dir := t.TempDir()
	prog := originFixture(t, dir, false)
	if err := exec.Command(prog).Run(); err != nil {
		t.Fatalf("fixture does not run: %v", err)
	}
	// Run through a symlink elsewhere: $ORIGIN is the physical directory.
	link := filepath.Join(t.TempDir(), "prog-link")
	if err := os.Symlink(prog, link); err != nil {
		t.Fatal(err)
	}
	entries, err := Closure([]string{link}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	byPath := checkInvariants(t, entries)
	want, _ := lddLibraries(t, prog)
	if got := closureLibraries(t, entries, prog); !slices.Equal(got, want) {
		t.Errorf("closure libraries differ from ldd:\n got %v\nwant %v", got, want)
	}
	for _, p := range []string{
		filepath.Join(dir, "lib/libhba.so.1"), filepath.Join(dir, "lib/libhbb.so.1"), filepath.Join(dir, "lib2/libhbc.so.1"), link,
	} {
		resolvesInside(t, byPath, p)
	}
	if e := byPath[filepath.Join(dir, "lib/libhbb.so.1")]; e.Type != render.RunfileSymlink || e.Target != "libhbb.so.1.0" {
		t.Errorf("libhbb.so.1 hop: %+v", e)
	}
}

func TestClosureOriginRUNPATH(t *testing.T) {
	dir := t.TempDir()
	prog := originFixture(t, dir, true)
	// RUNPATH is not inherited: libhba's need for libhbc is not found, and
	// ldd agrees.
	_, missing := lddLibraries(t, prog)
	if !slices.Equal(missing, []string{"libhbc.so.1"}) {
		t.Fatalf("ldd: missing %v, want libhbc.so.1", missing)
	}
	_, err := Closure([]string{prog}, Options{})
	if !errors.Is(err, ErrMissingLibrary) || !strings.Contains(err.Error(), prog) || !strings.Contains(err.Error(), "libhbc.so.1") {
		t.Fatalf("want ErrMissingLibrary naming %s and libhbc.so.1, got %v", prog, err)
	}
	// Give libhba a RUNPATH of its own and everything resolves like ldd.
	lib := filepath.Join(dir, "lib")
	buildC(t, filepath.Join(lib, "libhba.so.1"), "int hbc(void);\nint hba(void) { return hbc() + 1; }\n",
		"-shared", "-fPIC", "-Wl,-soname,libhba.so.1", filepath.Join(dir, "lib2", "libhbc.so.1"),
		"-Wl,--enable-new-dtags", "-Wl,-rpath,${ORIGIN}/../lib2")
	entries, err := Closure([]string{prog}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, entries)
	want, missing := lddLibraries(t, prog)
	if len(missing) > 0 {
		t.Fatalf("ldd still misses %v", missing)
	}
	if got := closureLibraries(t, entries, prog); !slices.Equal(got, want) {
		t.Errorf("closure libraries differ from ldd:\n got %v\nwant %v", got, want)
	}
	// A library removed: the error names the program and the library.
	os.Remove(filepath.Join(lib, "libhbb.so.1.0"))
	_, err = Closure([]string{prog}, Options{})
	if !errors.Is(err, ErrMissingLibrary) || !strings.Contains(err.Error(), prog) || !strings.Contains(err.Error(), "libhbb.so.1") {
		t.Fatalf("want ErrMissingLibrary naming %s and libhbb.so.1, got %v", prog, err)
	}
}

func TestClosureDirectory(t *testing.T) {
	root := filepath.Join(t.TempDir(), "pkg")
	writeFile(t, filepath.Join(root, "package.json"), "{}\n", 0o644)
	writeFile(t, filepath.Join(root, "bin", "cli.js"), "console.log(1)\n", 0o755)
	writeFile(t, filepath.Join(root, "lib", "a", "b", "x.js"), "1\n", 0o600)
	for link, target := range map[string]string{
		"node_modules/.bin/cli": "../../bin/cli.js",         // relative, inside
		"abs":                   filepath.Join(root, "lib"), // absolute, inside
		"deep":                  "lib/a/b",
		"up":                    "deep/../..", // physically lib, lexically outside
		"dangling":              "lib/not-there",
		"self":                  ".",
	} {
		p := filepath.Join(root, link)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := Closure([]string{root}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	byPath := checkInvariants(t, entries)
	for path, typ := range map[string]string{
		root: render.RunfileDir, root + "/package.json": render.RunfileFile, root + "/bin/cli.js": render.RunfileFile,
		root + "/lib/a/b/x.js": render.RunfileFile, root + "/node_modules/.bin/cli": render.RunfileSymlink,
		root + "/abs": render.RunfileSymlink, root + "/up": render.RunfileSymlink, root + "/dangling": render.RunfileSymlink,
	} {
		if byPath[path].Type != typ {
			t.Errorf("%s: %+v, want a %s", path, byPath[path], typ)
		}
	}
	if m := byPath[root+"/lib/a/b/x.js"].Mode; m != 0o600 {
		t.Errorf("mode %o, want the host's 0600", m)
	}
	resolvesInside(t, byPath, root+"/node_modules/.bin/cli")
	// Nothing else: a directory's files are not programs (no interpreter).
	for _, e := range entries {
		if !within(e.Path, root) && !strings.HasPrefix(root, e.Path+"/") {
			t.Errorf("unexpected entry %s", e.Path)
		}
	}

	for name, target := range map[string]string{
		"escape-rel":  "../../etc/passwd",
		"escape-abs":  "/etc/passwd",
		"escape-hop":  "deep/../../../..",
		"escape-dang": "../nowhere",
	} {
		link := filepath.Join(root, name)
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		_, err := Closure([]string{root}, Options{})
		if !errors.Is(err, ErrEscapingSymlink) || !strings.Contains(err.Error(), link) || !strings.Contains(err.Error(), target) {
			t.Errorf("%s: want ErrEscapingSymlink naming %s and %s, got %v", name, link, target, err)
		}
		os.Remove(link)
	}
}

func TestClosureDirectoryTreeELF(t *testing.T) {
	requireTool(t, "git")
	root := filepath.Join(t.TempDir(), "tools")
	b, err := os.ReadFile("/usr/bin/git")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "git"), string(b), 0o755)
	plain, err := Closure([]string{root}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range plain {
		if !within(e.Path, root) && !strings.HasPrefix(root, e.Path+"/") {
			t.Errorf("without TreeELF, unexpected entry %s", e.Path)
		}
	}
	chased, err := Closure([]string{root}, Options{TreeELF: true})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := lddLibraries(t, "/usr/bin/git")
	if got := closureLibraries(t, chased, filepath.Join(root, "git")); !slices.Equal(got, want) {
		t.Errorf("with TreeELF, libraries %v, want %v", got, want)
	}
}

func TestClosureExtraDirs(t *testing.T) {
	entries, err := Closure([]string{"/bin/sh"}, Options{Dirs: []string{"/grants/docs", "/usr/bin", "/hookbox/etc"}})
	if err != nil {
		t.Fatal(err)
	}
	byPath := checkInvariants(t, entries)
	for _, d := range []string{"/grants", "/grants/docs", "/hookbox", "/hookbox/etc"} {
		if e := byPath[d]; e.Type != render.RunfileDir || e.Mode != 0o755 {
			t.Errorf("%s: %+v", d, e)
		}
	}
	if fi, err := os.Lstat("/bin"); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		_, err := Closure([]string{"/bin/sh"}, Options{Dirs: []string{"/bin/x"}})
		if !errors.Is(err, ErrConflict) {
			t.Errorf("a dir under the /bin symlink: want ErrConflict, got %v", err)
		}
	}
	if _, err := Closure([]string{"relative/prog"}, Options{}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("relative program: want ErrUnsupported, got %v", err)
	}
	if _, err := Closure([]string{"/nonexistent/prog"}, Options{}); err == nil || !strings.Contains(err.Error(), "/nonexistent/prog") {
		t.Errorf("missing program: want an error naming it, got %v", err)
	}
}

func TestExpandSearchPath(t *testing.T) {
	got := expandSearchPath("$ORIGIN/../lib:${ORIGIN}/x::rel:/abs/$LIB:/p/$PLATFORM/q:/a$ORIGINx:/usr/lib", "/o")
	want := []string{"/o/../lib", "/o/x", "/a$ORIGINx", "/usr/lib"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestClosureIncludesLdCacheWhenNeeded(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "lib", "libhbb.so.1")
	os.MkdirAll(filepath.Dir(lib), 0o755)
	buildC(t, lib, "int hbb(void) { return 2; }\n", "-shared", "-fPIC", "-Wl,-soname,libhbb.so.1")
	prog := filepath.Join(dir, "bin", "prog")
	os.MkdirAll(filepath.Dir(prog), 0o755)
	buildC(t, prog, "int hbb(void);\nint main(void) { return hbb() == 2 ? 0 : 1; }\n", lib) // no search path

	host, err := os.ReadFile(ldCachePath)
	if err != nil {
		t.Fatal(err)
	}
	hostCache, err := parseLdCache(host)
	if err != nil {
		t.Fatal(err)
	}
	// The host's cache plus one library in a directory only the cache knows.
	entries := append([]ldCacheEntry{{Flags: 0x0303, Name: "libhbb.so.1", Path: lib}}, hostCache.entries...)
	cacheFile := filepath.Join(dir, "etc", "ld.so.cache")
	writeFile(t, cacheFile, string(buildLdCache(entries, false, binary.LittleEndian)), 0o644)

	run := func(programs ...string) map[string]render.Runfile {
		t.Helper()
		c := newCloser(Options{})
		c.cacheFile = cacheFile
		p, err := c.run(programs)
		if err != nil {
			t.Fatal(err)
		}
		return checkInvariants(t, p.list())
	}
	if byPath := run(prog); byPath[lib].Type != render.RunfileFile || byPath[cacheFile].Type != render.RunfileFile {
		t.Errorf("a library found only through the cache: want it and the cache in the closure")
	}
	if byPath := run("/bin/sh"); byPath[cacheFile].Type != "" {
		t.Errorf("libraries in default directories do not need the cache, yet it is in the closure")
	}
	// Without the cache entry the library is missing, and the error says where it looked.
	_, err = Closure([]string{prog}, Options{})
	if !errors.Is(err, ErrMissingLibrary) || !strings.Contains(err.Error(), "libhbb.so.1") || !strings.Contains(err.Error(), ldCachePath) {
		t.Errorf("want ErrMissingLibrary for libhbb.so.1, got %v", err)
	}
}

func TestClosureSameContentDifferentModes(t *testing.T) {
	root := filepath.Join(t.TempDir(), "pkg")
	writeFile(t, filepath.Join(root, "exec"), "same\n", 0o755)
	writeFile(t, filepath.Join(root, "data"), "same\n", 0o644)
	writeFile(t, filepath.Join(root, "empty-exec"), "", 0o700)
	writeFile(t, filepath.Join(root, "empty"), "", 0o600)
	s := openTestStore(t)
	res := assemble(t, s, []string{root}, Options{})
	checkTree(t, res)
	// Owner-only host files stay owner-only (the store's owner) in the tree.
	for name, mode := range map[string]os.FileMode{"exec": 0o555, "data": 0o444, "empty-exec": 0o500, "empty": 0o400} {
		fi, err := os.Lstat(filepath.Join(res.TreeDir, root, name))
		if err != nil || fi.Mode() != mode {
			t.Errorf("%s: %v %v, want %v", name, fi.Mode(), err, mode)
		}
	}
	a, _ := os.Lstat(filepath.Join(res.TreeDir, root, "exec"))
	b, _ := os.Lstat(filepath.Join(res.TreeDir, root, "data"))
	if os.SameFile(a, b) {
		t.Error("files of different modes share an inode")
	}
}
