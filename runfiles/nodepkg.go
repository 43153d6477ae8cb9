package runfiles

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// nodeModules is the directory Node looks packages up in.
const nodeModules = "node_modules"

// NodeDependencies returns the directories of the Node packages the
// package at dir needs to run, sorted and without duplicates: dir itself
// and, transitively, every package named in "dependencies",
// "optionalDependencies", "peerDependencies" and "bundleDependencies" of
// each package.json, found the way Node finds a bare package name required
// from inside a package: <d>/node_modules/<name> for d the package's
// directory and then each parent up to "/", skipping parents that are
// themselves named node_modules (Node's Module._nodeModulePaths). Node
// resolves from a module's real path, so a symlinked package (npm link,
// pnpm) is searched from its target; it is listed at the path it was found
// at, symlink included, as the container mirrors the host's paths and
// links. A package reached at several paths is listed at each and read
// once; cycles end there.
//
// A missing optional or peer dependency is skipped (the package must cope
// without it, and npm leaves it out when the platform does not fit or peers
// are not installed); a missing other one is ErrMissingPackage. Not
// followed: devDependencies (not installed for running), NODE_PATH, the
// global folders and --preserve-symlinks (hookbox's environment sets
// none of them), and packages a module loads without declaring them:
// declare those as packages of their own.
//
// A package's own node_modules is not part of what it needs: the members
// that are needed are listed here themselves (Options.Packages takes each
// listed directory without its node_modules).
func NodeDependencies(dir string) ([]string, error) {
	dirs, err := nodeDependencies(dir)
	if err != nil {
		return nil, fmt.Errorf("runfiles: %w", err)
	}
	return dirs, nil
}

func nodeDependencies(dir string) ([]string, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("%w: package %q is not an absolute path", ErrUnsupported, dir)
	}
	dir = filepath.Clean(dir)
	root, err := findPackageDir(dir)
	if err != nil {
		return nil, fmt.Errorf("package %s: %w", dir, err)
	}
	if _, err := os.Stat(filepath.Join(root.real, "package.json")); err != nil {
		return nil, fmt.Errorf("package %s: %w (a package directory holds its package.json)", dir, err)
	}
	found := map[string]bool{dir: true}
	read := make(map[string]bool) // real directories whose package.json was read
	for queue := []packageDir{root}; len(queue) > 0; queue = queue[1:] {
		pkg := queue[0]
		if read[pkg.real] {
			continue
		}
		read[pkg.real] = true
		deps, err := readNodeManifest(pkg.real)
		if err != nil {
			return nil, err
		}
		for _, dep := range deps {
			at, tried, err := resolveNodePackage(pkg.real, dep.name)
			if err != nil {
				return nil, fmt.Errorf("package %s: dependency %q: %w", pkg.path, dep.name, err)
			}
			if at == "" {
				if dep.optional {
					continue
				}
				return nil, fmt.Errorf("%w: package %s needs %q (its %s), which is in none of %s; install it: npm install in %s",
					ErrMissingPackage, pkg.path, dep.name, dep.field, strings.Join(tried, ", "), npmPrefix(pkg.real))
			}
			if found[at] {
				continue
			}
			found[at] = true
			d, err := findPackageDir(at)
			if err != nil {
				return nil, fmt.Errorf("package %s: dependency %q: %w", pkg.path, dep.name, err)
			}
			queue = append(queue, d)
		}
	}
	out := make([]string, 0, len(found))
	for p := range found {
		out = append(out, p)
	}
	slices.Sort(out)
	return out, nil
}

// packageDir is a package directory at the path it was found at, and its
// physical path.
type packageDir struct{ path, real string }

func findPackageDir(path string) (packageDir, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return packageDir{}, err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return packageDir{}, err
	}
	if !fi.IsDir() {
		return packageDir{}, fmt.Errorf("%w: %s is not a directory", ErrUnsupported, path)
	}
	return packageDir{path: path, real: real}, nil
}

// resolveNodePackage finds the package name the way Node does from a
// module in the directory from: the first <d>/node_modules/<name> that is
// a directory, d from "from" up to "/". It returns "" and the candidates
// tried when there is none.
func resolveNodePackage(from, name string) (string, []string, error) {
	var tried []string
	for d := from; ; d = filepath.Dir(d) {
		if filepath.Base(d) != nodeModules {
			cand := filepath.Join(d, nodeModules, name)
			fi, err := os.Stat(cand)
			switch {
			case err == nil && fi.IsDir():
				return cand, nil, nil
			case err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
				return "", nil, err // unreadable: Node would not find it either, but say why
			}
			tried = append(tried, cand)
		}
		if d == "/" {
			return "", tried, nil
		}
	}
}

// npmPrefix is the directory whose npm install put the package at real
// there: the parent of the outermost node_modules on its path, or the
// package itself when it is not installed in one.
func npmPrefix(real string) string {
	if i := strings.Index(real+"/", "/"+nodeModules+"/"); i >= 0 {
		if i == 0 {
			return "/"
		}
		return real[:i]
	}
	return real
}

// nodeDependency is one package a package.json names.
type nodeDependency struct {
	name     string
	field    string // the package.json field that names it
	optional bool   // missing is fine: optional and peer dependencies
}

// nodeManifest is what NodeDependencies reads of a package.json. Only the
// names matter: Node resolves by name, whatever version is installed.
type nodeManifest struct {
	Dependencies         map[string]json.RawMessage `json:"dependencies"`
	OptionalDependencies map[string]json.RawMessage `json:"optionalDependencies"`
	PeerDependencies     map[string]json.RawMessage `json:"peerDependencies"`
	// Both spellings are valid: a list of names, or true for all of
	// "dependencies".
	BundleDependencies  json.RawMessage `json:"bundleDependencies"`
	BundledDependencies json.RawMessage `json:"bundledDependencies"`
}

// readNodeManifest returns the dependencies named in dir/package.json,
// sorted by name, each once: a name in "optionalDependencies" is optional
// even when "dependencies" names it too (npm lets the former override the
// latter). A directory without package.json has none (Node loads its
// index.js).
func readNodeManifest(dir string) ([]nodeDependency, error) {
	file := filepath.Join(dir, "package.json")
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m nodeManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %w (reinstall the package)", ErrInvalidPackage, file, err)
	}
	var bundled []string
	for _, raw := range []json.RawMessage{m.BundleDependencies, m.BundledDependencies} {
		names, err := bundledNames(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalidPackage, file, err)
		}
		bundled = append(bundled, names...)
	}
	byName := make(map[string]nodeDependency)
	name := func(names []string, field string, optional, override bool) {
		for _, n := range names {
			if _, ok := byName[n]; !ok || override {
				byName[n] = nodeDependency{name: n, field: field, optional: optional}
			}
		}
	}
	name(slices.Collect(maps.Keys(m.Dependencies)), "dependencies", false, false)
	name(bundled, "bundleDependencies", false, false)
	name(slices.Collect(maps.Keys(m.PeerDependencies)), "peerDependencies", true, false) // a peer also in dependencies is installed as one
	name(slices.Collect(maps.Keys(m.OptionalDependencies)), "optionalDependencies", true, true)
	out := slices.SortedFunc(maps.Values(byName), func(a, b nodeDependency) int { return strings.Compare(a.name, b.name) })
	for _, d := range out {
		if err := checkPackageName(d.name); err != nil {
			return nil, fmt.Errorf("%w: %s: %s: %w", ErrInvalidPackage, file, d.field, err)
		}
	}
	return out, nil
}

// bundledNames decodes "bundleDependencies": a list of names, or a
// boolean (true bundles "dependencies", which are followed anyway).
func bundledNames(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var all bool
	if json.Unmarshal(raw, &all) == nil {
		return nil, nil
	}
	var names []string
	if err := json.Unmarshal(raw, &names); err != nil {
		return nil, fmt.Errorf("bundleDependencies is neither a list of names nor a boolean: %w", err)
	}
	return names, nil
}

// checkPackageName refuses names that are not a package name, "name" or
// "@scope/name": anything else would make the lookup leave node_modules.
func checkPackageName(name string) error {
	parts := strings.Split(name, "/")
	scoped := strings.HasPrefix(name, "@")
	ok := (len(parts) == 1 && !scoped) || (len(parts) == 2 && scoped && len(parts[0]) > 1)
	for _, p := range parts {
		ok = ok && p != "" && p != "." && p != ".." && !strings.ContainsAny(p, "\x00\\")
	}
	if !ok {
		return fmt.Errorf("%q is not a package name", name)
	}
	return nil
}
