package runfiles

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"hookbox.dev/hookbox/render"
)

// Package names in these tests start with "hbx-" so that the lookup, which
// goes up to /node_modules as Node's does, finds nothing of the host's.

// nodeTree is a fake install: npm's hoisted layout under prefix, a nested
// conflicting version, a scoped package, a cycle, and an npm-linked
// package (a symlink into src) reached at two paths.
type nodeTree struct {
	root, prefix, app string
}

// writePackage writes dir/package.json with the given fields.
func writePackage(t *testing.T, dir string, fields map[string]any) {
	t.Helper()
	b, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "package.json"), string(b), 0o644)
	writeFile(t, filepath.Join(dir, "index.js"), "module.exports = 1\n", 0o644)
}

func deps(names ...string) map[string]string {
	m := make(map[string]string)
	for _, n := range names {
		m[n] = "^1.0.0"
	}
	return m
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func newNodeTree(t *testing.T) nodeTree {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	nm := filepath.Join(root, "prefix", "node_modules")
	tr := nodeTree{root: root, prefix: filepath.Join(root, "prefix"), app: filepath.Join(nm, "hbx-app")}
	writePackage(t, tr.app, map[string]any{
		"name":                 "hbx-app",
		"dependencies":         deps("hbx-a", "@hbx/scoped", "hbx-b", "hbx-opt-also-dep"),
		"optionalDependencies": deps("hbx-missing-opt", "hbx-opt-also-dep"),
		"peerDependencies":     deps("hbx-peer", "hbx-missing-peer"),
		"devDependencies":      deps("hbx-dev"),
	})
	writePackage(t, filepath.Join(tr.app, "node_modules", "hbx-b"), map[string]any{"version": "2.0.0"})
	writePackage(t, filepath.Join(tr.app, "node_modules", "hbx-unneeded"), nil)
	writeFile(t, filepath.Join(tr.app, "node_modules", ".package-lock.json"), "{}", 0o644)
	symlink(t, "../hbx-unneeded/index.js", filepath.Join(tr.app, "node_modules", ".bin", "unneeded"))
	writeFile(t, filepath.Join(tr.app, "lib", "node_modules", "vendored.js"), "1\n", 0o644) // not the top-level one: kept

	writePackage(t, filepath.Join(nm, "hbx-a"), map[string]any{"dependencies": deps("hbx-b", "hbx-cycle")})
	writePackage(t, filepath.Join(nm, "hbx-b"), map[string]any{"version": "1.0.0"})
	writePackage(t, filepath.Join(nm, "hbx-cycle"), map[string]any{"dependencies": deps("hbx-a", "hbx-cycle")})
	writePackage(t, filepath.Join(nm, "@hbx", "scoped"), map[string]any{"dependencies": deps("hbx-linked")})
	writePackage(t, filepath.Join(nm, "hbx-peer"), map[string]any{"dependencies": deps("hbx-alias")})
	writePackage(t, filepath.Join(nm, "hbx-dev"), nil)
	writePackage(t, filepath.Join(nm, "hbx-other"), nil)
	// npm link: the package lives in src; Node resolves its dependencies
	// from there (src/linked/node_modules, then src/node_modules).
	writePackage(t, filepath.Join(root, "src", "linked"), map[string]any{"dependencies": deps("hbx-linkdep")})
	writePackage(t, filepath.Join(root, "src", "node_modules", "hbx-linkdep"), nil)
	symlink(t, "../../src/linked", filepath.Join(nm, "hbx-linked"))
	symlink(t, filepath.Join(root, "src", "linked"), filepath.Join(nm, "hbx-alias"))
	return tr
}

func TestNodeDependencies(t *testing.T) {
	tr := newNodeTree(t)
	nm := filepath.Join(tr.prefix, "node_modules")
	got, err := NodeDependencies(tr.app)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		filepath.Join(nm, "@hbx", "scoped"),
		filepath.Join(nm, "hbx-a"),
		filepath.Join(nm, "hbx-alias"), // the linked package at its second path
		tr.app,
		filepath.Join(tr.app, "node_modules", "hbx-b"), // the app's own version
		filepath.Join(nm, "hbx-b"),                     // hbx-a's
		filepath.Join(nm, "hbx-cycle"),
		filepath.Join(nm, "hbx-linked"),
		filepath.Join(nm, "hbx-peer"), // hbx-missing-peer, hbx-missing-opt and hbx-opt-also-dep are skipped
		filepath.Join(tr.root, "src", "node_modules", "hbx-linkdep"),
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("NodeDependencies:\n got %q\nwant %q", got, want)
	}
	// A package given through a symlink is listed as given.
	got, err = NodeDependencies(filepath.Join(nm, "hbx-linked"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(nm, "hbx-linked"), filepath.Join(tr.root, "src", "node_modules", "hbx-linkdep")}; !slices.Equal(got, want) {
		t.Errorf("linked package: got %q, want %q", got, want)
	}
}

func TestNodeDependenciesErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		manifest string // the app's package.json
		sentinel error
		want     []string // in the message; "$APP" and "$PREFIX" are replaced
	}{{
		name:     "missing dependency",
		manifest: `{"dependencies": {"hbx-a": "1", "hbx-gone": "^2"}}`,
		sentinel: ErrMissingPackage,
		want:     []string{`"hbx-gone"`, "package $APP needs", "dependencies", "$APP/node_modules/hbx-gone", "$PREFIX/node_modules/hbx-gone", "/node_modules/hbx-gone", "npm install in $PREFIX"},
	}, {
		name:     "missing bundled dependency",
		manifest: `{"bundleDependencies": ["hbx-gone"]}`,
		sentinel: ErrMissingPackage,
		want:     []string{`"hbx-gone"`, "bundleDependencies"},
	}, {
		name:     "malformed",
		manifest: `{"dependencies": {"hbx-a": "1",}`,
		sentinel: ErrInvalidPackage,
		want:     []string{"$APP/package.json", "invalid character"},
	}, {
		name:     "wrong type",
		manifest: `{"dependencies": ["hbx-a"]}`,
		sentinel: ErrInvalidPackage,
		want:     []string{"$APP/package.json", "dependencies"},
	}, {
		name:     "bad bundleDependencies",
		manifest: `{"bundleDependencies": "hbx-a"}`,
		sentinel: ErrInvalidPackage,
		want:     []string{"$APP/package.json", "bundleDependencies"},
	}, {
		name:     "name leaving node_modules",
		manifest: `{"dependencies": {"../../src/linked": "1"}}`,
		sentinel: ErrInvalidPackage,
		want:     []string{"$APP/package.json", `"../../src/linked" is not a package name`},
	}, {
		name:     "scope without a name",
		manifest: `{"optionalDependencies": {"@hbx": "1"}}`,
		sentinel: ErrInvalidPackage,
		want:     []string{`"@hbx" is not a package name`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newNodeTree(t)
			writeFile(t, filepath.Join(tr.app, "package.json"), tc.manifest, 0o644)
			_, err := NodeDependencies(tr.app)
			if !errors.Is(err, tc.sentinel) {
				t.Fatalf("want %v, got %v", tc.sentinel, err)
			}
			if !strings.HasPrefix(err.Error(), "runfiles: ") {
				t.Errorf("error lacks the package prefix: %v", err)
			}
			for _, w := range tc.want {
				w = strings.NewReplacer("$APP", tr.app, "$PREFIX", tr.prefix).Replace(w)
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
		})
	}
}

func TestNodeDependenciesBundled(t *testing.T) {
	tr := newNodeTree(t)
	writeFile(t, filepath.Join(tr.app, "package.json"), `{"bundledDependencies": ["hbx-b"], "bundleDependencies": true}`, 0o644)
	got, err := NodeDependencies(tr.app)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{tr.app, filepath.Join(tr.app, "node_modules", "hbx-b")}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestNodeDependenciesNotAPackage(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{dir, "relative/pkg", filepath.Join(dir, "missing")} {
		if _, err := NodeDependencies(p); err == nil {
			t.Errorf("%s: want an error, got none", p)
		}
	}
	writeFile(t, filepath.Join(dir, "file"), "", 0o644)
	if _, err := NodeDependencies(filepath.Join(dir, "file")); !errors.Is(err, ErrUnsupported) {
		t.Errorf("a file: want ErrUnsupported, got %v", err)
	}
}

func TestClosurePackages(t *testing.T) {
	tr := newNodeTree(t)
	nm := filepath.Join(tr.prefix, "node_modules")
	entries, err := Closure(nil, Options{Packages: []string{tr.app}})
	if err != nil {
		t.Fatal(err)
	}
	byPath := checkInvariants(t, entries)
	for path, typ := range map[string]string{
		tr.app + "/package.json":                           render.RunfileFile,
		tr.app + "/lib/node_modules/vendored.js":           render.RunfileFile,
		tr.app + "/node_modules":                           render.RunfileDir,
		tr.app + "/node_modules/hbx-b/index.js":            render.RunfileFile,
		nm + "/hbx-b/package.json":                         render.RunfileFile,
		nm + "/@hbx/scoped/index.js":                       render.RunfileFile,
		nm + "/hbx-linked":                                 render.RunfileSymlink,
		nm + "/hbx-alias":                                  render.RunfileSymlink,
		tr.root + "/src/linked/index.js":                   render.RunfileFile,
		tr.root + "/src/node_modules/hbx-linkdep":          render.RunfileDir,
		tr.root + "/src/node_modules/hbx-linkdep/index.js": render.RunfileFile,
	} {
		if byPath[path].Type != typ {
			t.Errorf("%s: %+v, want a %s", path, byPath[path], typ)
		}
	}
	resolvesInside(t, byPath, nm+"/hbx-linked/index.js")
	resolvesInside(t, byPath, nm+"/hbx-alias/package.json")
	// Left out: what no package needs, from node_modules at any level.
	for _, e := range entries {
		for _, out := range []string{
			tr.app + "/node_modules/hbx-unneeded", tr.app + "/node_modules/.bin", tr.app + "/node_modules/.package-lock.json",
			nm + "/hbx-other", nm + "/hbx-dev",
		} {
			if within(e.Path, out) {
				t.Errorf("unneeded entry %s", e.Path)
			}
		}
		if !within(e.Path, tr.root) && !strings.HasPrefix(tr.root, e.Path+"/") {
			t.Errorf("entry outside the install: %s", e.Path)
		}
	}
	// The same package as a plain directory program is taken whole.
	whole, err := Closure([]string{tr.app}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(whole, func(e render.Runfile) bool { return e.Path == tr.app+"/node_modules/hbx-unneeded/index.js" }) {
		t.Errorf("a directory program lost its node_modules")
	}
	// A missing dependency fails the closure.
	os.RemoveAll(filepath.Join(nm, "hbx-cycle"))
	if _, err := Closure(nil, Options{Packages: []string{tr.app}}); !errors.Is(err, ErrMissingPackage) || !strings.Contains(err.Error(), "hbx-cycle") {
		t.Errorf("want ErrMissingPackage naming hbx-cycle, got %v", err)
	}
}

// A prebuilt addon (.node, an ELF shared object) in a package is a file
// like any other; its libraries are chased only with TreeELF, as in any
// directory.
func TestClosurePackageAddonTreeELF(t *testing.T) {
	requireTool(t, "git")
	tr := newNodeTree(t)
	b, err := os.ReadFile("/usr/bin/git")
	if err != nil {
		t.Fatal(err)
	}
	addon := filepath.Join(tr.prefix, "node_modules", "hbx-a", "build", "Release", "addon.node")
	writeFile(t, addon, string(b), 0o755)
	plain, err := Closure(nil, Options{Packages: []string{tr.app}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range plain {
		if !within(e.Path, tr.root) && !strings.HasPrefix(tr.root, e.Path+"/") {
			t.Errorf("without TreeELF, unexpected entry %s", e.Path)
		}
	}
	chased, err := Closure(nil, Options{Packages: []string{tr.app}, TreeELF: true})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := lddLibraries(t, "/usr/bin/git")
	outside := slices.DeleteFunc(chased, func(e render.Runfile) bool { return within(e.Path, tr.root) })
	if got := closureLibraries(t, outside); !slices.Equal(got, want) {
		t.Errorf("with TreeELF, libraries %v, want %v", got, want)
	}
}

// AssembleRender takes a program with render.RolePackage as a package
// tree: its dependencies, without what its node_modules holds besides.
func TestAssembleRenderPackage(t *testing.T) {
	tr := newNodeTree(t)
	s := openTestStore(t)
	r := &render.Render{Programs: []render.Program{
		{Path: "/bin/sh", HostPath: "/bin/sh", Roles: []string{render.RoleEngine}},
		{Path: render.ContainerPath(tr.app), HostPath: tr.app, Roles: []string{render.RolePackage, render.RoleTool}},
	}}
	if _, err := AssembleRender(context.Background(), s, r, nil, nil, RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	has := func(host string) bool {
		return slices.ContainsFunc(r.Runfiles, func(e render.Runfile) bool { return e.Path == render.ContainerPath(host) })
	}
	for _, p := range []string{tr.app + "/index.js", tr.prefix + "/node_modules/hbx-cycle/index.js", tr.root + "/src/node_modules/hbx-linkdep/index.js"} {
		if !has(p) {
			t.Errorf("manifest lacks %s", p)
		}
	}
	if has(tr.app + "/node_modules/hbx-unneeded/index.js") {
		t.Errorf("manifest holds a package nothing needs")
	}
}

// pnpm's layout: every package is a symlink into node_modules/.pnpm, its
// dependencies symlinks beside its real directory.
func TestNodeDependenciesPnpm(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	proj := filepath.Join(root, "proj")
	store := filepath.Join(proj, "node_modules", ".pnpm")
	writePackage(t, proj, map[string]any{"dependencies": deps("hbx-foo")})
	writePackage(t, filepath.Join(store, "hbx-foo@1.0.0", "node_modules", "hbx-foo"), map[string]any{"dependencies": deps("hbx-bar")})
	writePackage(t, filepath.Join(store, "hbx-bar@2.0.0", "node_modules", "hbx-bar"), nil)
	writePackage(t, filepath.Join(store, "hbx-unrelated@1.0.0", "node_modules", "hbx-unrelated"), nil)
	symlink(t, ".pnpm/hbx-foo@1.0.0/node_modules/hbx-foo", filepath.Join(proj, "node_modules", "hbx-foo"))
	symlink(t, "../../hbx-bar@2.0.0/node_modules/hbx-bar", filepath.Join(store, "hbx-foo@1.0.0", "node_modules", "hbx-bar"))

	got, err := NodeDependencies(proj)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{proj, filepath.Join(store, "hbx-foo@1.0.0", "node_modules", "hbx-bar"), filepath.Join(proj, "node_modules", "hbx-foo")}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	entries, err := Closure(nil, Options{Packages: []string{proj}})
	if err != nil {
		t.Fatal(err)
	}
	byPath := checkInvariants(t, entries)
	resolvesInside(t, byPath, proj+"/node_modules/hbx-foo/index.js")
	resolvesInside(t, byPath, store+"/hbx-foo@1.0.0/node_modules/hbx-bar/package.json")
	for _, e := range entries {
		if strings.Contains(e.Path, "hbx-unrelated") {
			t.Errorf("unneeded entry %s", e.Path)
		}
	}
}
