package runfiles

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"hookbox.dev/hookbox/render"
)

// Sentinel errors. Errors from this package start with "runfiles: " and
// wrap one of these, an *fs.PathError, or the context's error.
var (
	// ErrMissingLibrary: a shared library a program needs is nowhere the
	// loader would look.
	ErrMissingLibrary = errors.New("shared library not found")
	// ErrMissingPackage: a Node package a package depends on is nowhere
	// Node would look (NodeDependencies).
	ErrMissingPackage = errors.New("package not found")
	// ErrInvalidPackage: a package.json NodeDependencies cannot read.
	ErrInvalidPackage = errors.New("invalid package.json")
	// ErrEscapingSymlink: a symlink inside a declared directory resolves
	// outside it.
	ErrEscapingSymlink = errors.New("symlink escapes its directory")
	// ErrUnsupported: a path, file type or "#!" line runfiles cannot
	// reproduce in the container.
	ErrUnsupported = errors.New("unsupported")
	// ErrConflict: one path would need two different entries.
	ErrConflict = errors.New("conflicting entries")
	// ErrSourceChanged: a host file changed while it was being assembled;
	// Assemble retries a few times before returning it.
	ErrSourceChanged = errors.New("host file changed during assembly")
)

// DefaultPath is the PATH used for "#!/usr/bin/env NAME" when Options.Path
// is empty.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Verify says how much Assemble checks store objects before using them.
type Verify int

const (
	// VerifyQuick checks type, size, mode and the seal mtime of each
	// object, and compares its stat with its seal (inode and ctime among
	// them, see the package doc): an object whose seal differs is
	// re-hashed.
	VerifyQuick Verify = iota
	// VerifyFull re-hashes every object, whatever its seal says.
	VerifyFull
)

// Options configure Closure and Assemble.
type Options struct {
	// Path is the PATH on which "#!/usr/bin/env NAME" finds NAME. It must be
	// the container's PATH, so that env finds the same program there.
	// Empty means DefaultPath.
	Path string
	// Packages are directories of Node packages (render.RolePackage). Each
	// is taken with the packages it depends on (NodeDependencies), every
	// one as a directory tree without its top-level node_modules: the
	// members of a node_modules that some package needs are among those
	// listed, and the rest (devDependencies, packages hoisted there for
	// other programs, .bin links) stay out. Deeper node_modules belong to
	// the tree they are in.
	Packages []string
	// Dirs are extra directories the tree must hold (mount points such as
	// /grants/docs), with their parents. Paths the closure already has keep
	// their host entry; new ones get mode 0755.
	Dirs []string
	// TreeELF chases the shared libraries of ELF files inside declared
	// directories (only those built for this machine; others, such as the
	// arm64 builds npm packages ship beside x86-64 ones, are left alone).
	// Off by default: a package's prebuilt binaries for other libcs would
	// otherwise make the whole closure fail.
	TreeELF bool
	// ContainerPaths lays the manifest and tree out at container paths
	// (render.ContainerPath): entries a container mount would hide (under
	// /tmp, /run…) move below render.HostDir (Assemble only). Without it,
	// every entry is at its host path.
	ContainerPaths bool
	// Verify selects the check of store objects (Assemble only).
	Verify Verify
	// Progress, if set, is called after each file is stored or found in the
	// store (Assemble only). Calls are serialized.
	Progress func(Progress)
	// Placed are files put at a path of their own instead of their host
	// path: tree path → host file (hookbox's init, render.InitPath). Each
	// is taken alone, without a closure, so it must be a statically linked
	// ELF file; it is never relocated. Missing parents get mode 0755.
	Placed map[string]string
}

// maxSymlinks is the kernel's limit on symlinks followed in one lookup.
const maxSymlinks = 40

// maxInterpDepth is how many "#!" interpreters deep the kernel goes.
const maxInterpDepth = 4

// Closure returns every entry the container needs to run programs
// (absolute host paths of files or directories): sorted by path, without
// duplicates, the same for the same host state. See the package doc for
// what is followed. File entries carry Path, Type and Mode only: Size and
// SHA256 come from the read that stores them (Assemble), never from here.
func Closure(programs []string, opts Options) ([]render.Runfile, error) {
	p, err := closure(context.Background(), programs, opts, 0)
	if err != nil {
		return nil, fmt.Errorf("runfiles: %w", err)
	}
	return p.list(), nil
}

// plan is a closure with the stat of every file as it was analysed, so
// Assemble can tell whether it still stores the same file.
type plan struct {
	// entries holds each entry with, for a regular file, its stat key:
	// one map, looked up once per file.
	entries map[string]planEntry
	// order is every path of entries, in the order they were recorded:
	// walks record them nearly sorted, which list sorts faster than the
	// map's order.
	order []string
	// sources maps a placed file's tree path to the host file read for it
	// (every other file is read at its own path).
	sources map[string]string
}

// source is the host file whose content the file entry at path holds.
func (p *plan) source(path string) string {
	if src, ok := p.sources[path]; ok {
		return src
	}
	return path
}

// planEntry is an entry of a plan: a file's has its stat key.
type planEntry struct {
	render.Runfile
	key statKey
}

func (p *plan) list() []render.Runfile {
	paths := slices.Clone(p.order)
	slices.Sort(paths) // strings, not whole entries: a third of the time
	out := make([]render.Runfile, len(paths))
	for i, path := range paths {
		out[i] = p.entries[path].Runfile
	}
	return out
}

// key is the stat key of the file entry at path.
func (p *plan) key(path string) statKey { return p.entries[path].key }

// add records a new entry.
func (p *plan) add(e planEntry) {
	p.entries[e.Path] = e
	p.order = append(p.order, e.Path)
}

// statKey identifies a file's content by what stat says about it.
type statKey struct {
	Dev, Ino         uint64
	Size             int64
	MtimeNS, CtimeNS int64
}

// usable reports whether the key has the fields that make it trustworthy
// (an inode and a ctime).
func (k statKey) usable() bool { return k.Ino != 0 && k.CtimeNS != 0 }

func (k statKey) String() string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", k.Dev, k.Ino, k.Size, k.MtimeNS, k.CtimeNS)
}

type closer struct {
	ctx      context.Context // checked between files of a directory
	opts     Options
	plan     *plan
	elfInfos map[string]*elfInfo // by physical path: ELF objects read
	// headers and libraries keep what one closure has looked up: a
	// library search opens every candidate, and hundreds of programs
	// search for the same few libraries (600 host tools: 2,400 searches).
	headers   map[string]elfHeader // candidate paths, as the loader's check read them
	libraries map[string]libraryAt // addLibrary's answers, by the path asked for
	programs  map[string]bool      // physical paths whose content was analysed
	packages  map[string]bool      // physical paths of package trees taken
	active    map[string]bool      // scripts whose interpreter chain is being followed
	cache     *ldCache
	cacheRd   bool
	// cacheFile replaces ldCachePath (tests).
	cacheFile string
	// needCache: some library is found only through ld.so.cache.
	needCache bool
}

// closure computes the closure of programs; sizeHint, the number of
// entries expected (the last assembly's), sizes its maps up front.
func closure(ctx context.Context, programs []string, opts Options, sizeHint int) (*plan, error) {
	c := newCloser(opts)
	c.ctx = ctx
	if sizeHint > 0 {
		c.plan.entries = make(map[string]planEntry, sizeHint)
		c.plan.order = make([]string, 0, sizeHint)
	}
	return c.run(programs)
}

func newCloser(opts Options) *closer {
	return &closer{
		ctx:       context.Background(),
		opts:      opts,
		plan:      &plan{entries: make(map[string]planEntry), sources: make(map[string]string)},
		elfInfos:  make(map[string]*elfInfo),
		headers:   make(map[string]elfHeader),
		libraries: make(map[string]libraryAt),
		programs:  make(map[string]bool),
		packages:  make(map[string]bool),
		active:    make(map[string]bool),
	}
}

func (c *closer) run(programs []string) (*plan, error) {
	sorted := slices.Clone(programs)
	slices.Sort(sorted)
	for _, p := range slices.Compact(sorted) {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("%w: program %q is not an absolute path", ErrUnsupported, p)
		}
		if err := c.addProgram(filepath.Clean(p), 0); err != nil {
			return nil, err
		}
	}
	sortedPkgs := slices.Clone(c.opts.Packages)
	slices.Sort(sortedPkgs)
	for _, pkg := range slices.Compact(sortedPkgs) {
		if err := c.addPackage(pkg); err != nil {
			return nil, err
		}
	}
	if c.needCache {
		if _, err := c.addFileAt(c.cachePath()); err != nil {
			return nil, fmt.Errorf("adding %s: %w", c.cachePath(), err)
		}
	}
	for _, d := range c.opts.Dirs {
		if err := c.addExtraDir(d); err != nil {
			return nil, err
		}
	}
	placed := make([]string, 0, len(c.opts.Placed))
	for at := range c.opts.Placed {
		placed = append(placed, at)
	}
	slices.Sort(placed)
	for _, at := range placed {
		if err := c.addPlaced(at, c.opts.Placed[at]); err != nil {
			return nil, err
		}
	}
	return c.plan, nil
}

// addPlaced records the host file src at tree path at (Options.Placed).
func (c *closer) addPlaced(at, src string) error {
	if !filepath.IsAbs(at) || filepath.Clean(at) != at || !filepath.IsAbs(src) {
		return fmt.Errorf("%w: placed file %q from %q: both paths must be absolute and clean", ErrUnsupported, at, src)
	}
	real, err := filepath.EvalSymlinks(src)
	if err != nil {
		return fmt.Errorf("placed file %s: %w", at, err)
	}
	fi, err := os.Lstat(real)
	if err != nil {
		return fmt.Errorf("placed file %s: %w", at, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: placed file %s: %s is a %s, not a regular file", ErrUnsupported, at, src, fi.Mode().Type())
	}
	if err := RequireStatic(real); err != nil {
		return fmt.Errorf("placed file %s: %w", at, err)
	}
	if err := c.addExtraDir(filepath.Dir(at)); err != nil {
		return err
	}
	if err := c.recordKey(at, fi.Mode(), statKeyOf(fi)); err != nil {
		return err
	}
	c.plan.sources[at] = real
	return nil
}

// RequireStatic refuses a file that is not an ELF executable without an
// interpreter: a placed file (or a program image's one file) brings none
// of its libraries.
func RequireStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%w: %s is not an ELF executable: %v", ErrUnsupported, path, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("%w: %s is dynamically linked; build it with CGO_ENABLED=0", ErrUnsupported, path)
		}
	}
	return nil
}

// record adds e, or checks that an existing entry for its path is the same.
func (c *closer) record(e render.Runfile) error {
	if old, ok := c.plan.entries[e.Path]; ok {
		if old.Runfile != e {
			return fmt.Errorf("%w: %s is needed as %s %o %q and as %s %o %q (did the host change?)",
				ErrConflict, e.Path, old.Type, old.Mode, old.Target, e.Type, e.Mode, e.Target)
		}
		return nil
	}
	c.plan.add(planEntry{Runfile: e})
	return nil
}

// visit records a directory traversed or a symlink followed.
func (c *closer) visit(path string, fi fs.FileInfo, target string) error {
	if fi.Mode()&fs.ModeSymlink != 0 {
		return c.record(render.Runfile{Path: path, Type: render.RunfileSymlink, Mode: uint32(fi.Mode().Perm()), Target: target})
	}
	return c.record(render.Runfile{Path: path, Type: render.RunfileDir, Mode: uint32(fi.Mode().Perm())})
}

// walkPath resolves the absolute path p component by component, as the
// kernel does, and returns the physical path (no symlink in it) and the
// lstat of what it names. visit, if not nil, sees every directory traversed
// on the way (not the final one) and every symlink followed.
func walkPath(p string, visit func(path string, fi fs.FileInfo, target string) error) (string, fs.FileInfo, error) {
	if !filepath.IsAbs(p) {
		return "", nil, fmt.Errorf("%w: %q is not an absolute path", ErrUnsupported, p)
	}
	todo := splitPath(p)
	cur := "/"
	var curInfo fs.FileInfo
	links := 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case ".":
			continue
		case "..":
			cur, curInfo = filepath.Dir(cur), nil
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", nil, err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if links++; links > maxSymlinks {
				return "", nil, &fs.PathError{Op: "resolve", Path: p, Err: syscall.ELOOP}
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", nil, err
			}
			if target == "" {
				return "", nil, &fs.PathError{Op: "resolve", Path: next, Err: syscall.ENOENT}
			}
			if visit != nil {
				if err := visit(next, fi, target); err != nil {
					return "", nil, err
				}
			}
			if filepath.IsAbs(target) {
				cur, curInfo = "/", nil
			}
			todo = append(splitPath(target), todo...)
			continue
		}
		if len(todo) > 0 {
			if !fi.IsDir() {
				return "", nil, &fs.PathError{Op: "resolve", Path: next, Err: syscall.ENOTDIR}
			}
			if visit != nil {
				if err := visit(next, fi, ""); err != nil {
					return "", nil, err
				}
			}
		}
		cur, curInfo = next, fi
	}
	if curInfo == nil {
		fi, err := os.Lstat(cur)
		if err != nil {
			return "", nil, err
		}
		curInfo = fi
	}
	return cur, curInfo, nil
}

func splitPath(p string) []string {
	parts := strings.Split(p, "/")
	out := parts[:0]
	for _, s := range parts {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// within reports whether p is root or below it.
func within(p, root string) bool {
	return p == root || root == "/" || strings.HasPrefix(p, root+"/")
}

// addProgram adds a program (file or directory) and what it needs to run.
func (c *closer) addProgram(p string, depth int) error {
	real, fi, err := walkPath(p, c.visit)
	if err != nil {
		return fmt.Errorf("program %s: %w", p, err)
	}
	switch {
	case real == "/":
		return fmt.Errorf("%w: program %s is the root directory", ErrUnsupported, p)
	case fi.IsDir():
		return c.addTree(real, fi, "")
	case fi.Mode().IsRegular():
		return c.addExecutable(p, real, depth)
	default:
		return fmt.Errorf("%w: program %s is a %s, not a file or directory", ErrUnsupported, p, fi.Mode().Type())
	}
}

// addFileAt adds the regular file at p (symlink hops included) without
// looking at its content, and returns its physical path.
func (c *closer) addFileAt(p string) (string, error) {
	real, fi, err := walkPath(p, c.visit)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %s is a %s, not a regular file", ErrUnsupported, p, fi.Mode().Type())
	}
	return real, c.recordFile(real, fi)
}

func (c *closer) recordFile(real string, fi fs.FileInfo) error {
	return c.recordKey(real, fi.Mode(), statKeyOf(fi))
}

// recordKey records the regular file real, of mode and stat key key.
func (c *closer) recordKey(real string, mode fs.FileMode, key statKey) error {
	e := render.Runfile{Path: real, Type: render.RunfileFile, Mode: uint32(mode.Perm())}
	old, ok := c.plan.entries[real]
	switch {
	case !ok:
		c.plan.add(planEntry{Runfile: e, key: key})
	case old.Runfile != e:
		return c.record(e) // the conflict
	case old.key != key:
		return fmt.Errorf("%w: %s changed while its closure was computed", ErrSourceChanged, real)
	}
	return nil
}

// openRecorded opens the regular file real, records it with the stat of the
// open file, and returns it with its first bytes.
func (c *closer) openRecorded(real string) (*os.File, []byte, error) {
	f, err := os.OpenFile(real, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%w: %s is a %s, not a regular file", ErrUnsupported, real, fi.Mode().Type())
	}
	if err == nil {
		err = c.recordFile(real, fi)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	head := make([]byte, shebangBufSize)
	n, _ := f.ReadAt(head, 0)
	return f, head[:n], nil
}

// addExecutable adds the program file at its physical path real (asked for
// as p) and follows its interpreter or shared libraries.
func (c *closer) addExecutable(p, real string, depth int) error {
	if c.active[real] {
		return &fs.PathError{Op: "exec", Path: p, Err: syscall.ELOOP} // a script interpreting itself
	}
	if c.programs[real] {
		return nil
	}
	c.programs[real] = true
	c.active[real] = true
	defer delete(c.active, real)
	f, head, err := c.openRecorded(real)
	if err != nil {
		return fmt.Errorf("program %s: %w", p, err)
	}
	defer f.Close()
	switch {
	case isELF(head):
		info, err := c.readELFCached(real, f)
		if err != nil {
			return fmt.Errorf("%w: program %s: ELF: %w", ErrUnsupported, p, err)
		}
		return c.elfClosure(p, real, info)
	case len(head) >= 2 && head[0] == '#' && head[1] == '!':
		interp, arg, _, err := parseShebang(head)
		if err != nil {
			return fmt.Errorf("script %s: %w", p, err)
		}
		return c.addInterpreter(p, interp, arg, depth)
	}
	return nil // data, or a format the kernel hands to binfmt_misc: just the file
}

// addInterpreter adds the "#!" interpreter of script (and, for env, the
// program env runs).
func (c *closer) addInterpreter(script, interp, arg string, depth int) error {
	if depth >= maxInterpDepth {
		return fmt.Errorf("%w: script %s: more than %d nested \"#!\" interpreters", ErrUnsupported, script, maxInterpDepth)
	}
	if !filepath.IsAbs(interp) {
		return fmt.Errorf("%w: script %s: relative interpreter %q depends on the working directory", ErrUnsupported, script, interp)
	}
	if err := c.addProgram(filepath.Clean(interp), depth+1); err != nil {
		return fmt.Errorf("interpreter of %s: %w", script, err)
	}
	if filepath.Base(interp) != "env" {
		return nil
	}
	name, err := envCommand(arg)
	if err != nil {
		return fmt.Errorf("script %s: %w", script, err)
	}
	found, err := c.lookPath(name)
	if err != nil {
		return fmt.Errorf("script %s: %w", script, err)
	}
	if err := c.addProgram(found, depth+1); err != nil {
		return fmt.Errorf("interpreter of %s (via env): %w", script, err)
	}
	return nil
}

// lookPath finds name on the container's PATH (LookPath).
func (c *closer) lookPath(name string) (string, error) {
	path := c.opts.Path
	if path == "" {
		path = DefaultPath
	}
	return LookPath(name, path)
}

func (c *closer) readELFCached(real string, f *os.File) (*elfInfo, error) {
	if info, ok := c.elfInfos[real]; ok {
		return info, nil
	}
	info, err := readELF(f)
	if err != nil {
		return nil, err
	}
	c.elfInfos[real] = info
	return info, nil
}

// object is one ELF object in a program's load order.
type object struct {
	path   string // the path it was found at
	origin string // $ORIGIN
	info   *elfInfo
	loader *object // the object whose DT_NEEDED loaded it; nil for the program
}

// elfClosure adds the interpreter and shared libraries of the ELF program
// p (physical path real), in the loader's breadth-first order.
func (c *closer) elfClosure(p, real string, info *elfInfo) error {
	if !info.dynamic() {
		return nil // static: the file alone
	}
	loaded := make(map[string]bool) // names the loader considers loaded
	seen := map[string]bool{real: true}
	if info.soname != "" {
		loaded[info.soname] = true
	}
	if info.interp != "" {
		if !filepath.IsAbs(info.interp) {
			return fmt.Errorf("%w: program %s: relative interpreter %q", ErrUnsupported, p, info.interp)
		}
		ireal, iinfo, err := c.addLibrary(info.interp)
		if err != nil {
			return fmt.Errorf("program %s: interpreter %s: %w", p, info.interp, err)
		}
		seen[ireal] = true
		loaded[info.interp] = true
		if iinfo.soname != "" {
			loaded[iinfo.soname] = true
		}
		if len(iinfo.needed) > 0 {
			return fmt.Errorf("%w: program %s: interpreter %s needs libraries itself", ErrUnsupported, p, info.interp)
		}
	}
	// The program's $ORIGIN is the directory of its physical path: the
	// loader reads it from /proc/self/exe.
	queue := []*object{{path: real, origin: filepath.Dir(real), info: info}}
	for i := 0; i < len(queue); i++ {
		obj := queue[i]
		for _, name := range obj.info.needed {
			if loaded[name] {
				continue
			}
			found, err := c.searchLibrary(name, obj)
			if err != nil {
				via := ""
				if obj.loader != nil {
					via = " (needed by " + obj.path + ")"
				}
				return fmt.Errorf("%w: program %s needs %s%s: %w", ErrMissingLibrary, p, name, via, err)
			}
			lreal, linfo, err := c.addLibrary(found)
			if err != nil {
				return fmt.Errorf("program %s: library %s: %w", p, found, err)
			}
			loaded[name] = true
			if linfo.soname != "" {
				loaded[linfo.soname] = true
			}
			if seen[lreal] {
				continue
			}
			seen[lreal] = true
			queue = append(queue, &object{path: found, origin: filepath.Dir(found), info: linfo, loader: obj})
		}
	}
	return nil
}

// addLibrary adds the ELF object at path (symlink hops included) and
// returns its physical path and what it needs. A path already added
// answers from the closure's record: its hops and file are recorded, and
// a file that changed since is found by the stat keys the assembly checks.
func (c *closer) addLibrary(path string) (string, *elfInfo, error) {
	if lib, ok := c.libraries[path]; ok {
		return lib.real, lib.info, nil
	}
	real, fi, err := walkPath(path, c.visit)
	if err != nil {
		return "", nil, err
	}
	if !fi.Mode().IsRegular() {
		return "", nil, fmt.Errorf("%w: %s is a %s", ErrUnsupported, path, fi.Mode().Type())
	}
	info, ok := c.elfInfos[real]
	if !ok {
		f, _, err := c.openRecorded(real)
		if err != nil {
			return "", nil, err
		}
		defer f.Close()
		if info, err = c.readELFCached(real, f); err != nil {
			return "", nil, fmt.Errorf("%w: %s: ELF: %w", ErrUnsupported, path, err)
		}
	}
	c.libraries[path] = libraryAt{real: real, info: info}
	return real, info, nil
}

// libraryAt is a library added: its physical path and what it needs.
type libraryAt struct {
	real string
	info *elfInfo
}

// searchLibrary finds DT_NEEDED name of obj the way glibc's loader does
// (elf/dl-load.c _dl_map_object): RPATH of obj and its loaders unless obj
// has RUNPATH, then RUNPATH, then ld.so.cache, then the default
// directories; candidates of the wrong class or machine are skipped.
func (c *closer) searchLibrary(name string, obj *object) (string, error) {
	class, machine := obj.info.class, obj.info.machine
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			return "", fmt.Errorf("%w: relative library path %q depends on the working directory", ErrUnsupported, name)
		}
		if c.candidate(name, class, machine) {
			return name, nil
		}
		return "", fs.ErrNotExist
	}
	var tried []string
	try := func(dirs []string) string {
		for _, d := range dirs {
			cand := filepath.Join(d, name)
			if c.candidate(cand, class, machine) {
				return cand
			}
			tried = append(tried, d)
		}
		return ""
	}
	if !obj.info.hasRunpath {
		for l := obj; l != nil; l = l.loader {
			if l.info.hasRunpath || l.info.rpath == "" {
				continue
			}
			if f := try(expandSearchPath(l.info.rpath, l.origin)); f != "" {
				return f, nil
			}
		}
	} else if f := try(expandSearchPath(obj.info.runpath, obj.origin)); f != "" {
		return f, nil
	}
	if obj.info.nodeflib {
		return "", fmt.Errorf("not in %s (DF_1_NODEFLIB)", strings.Join(tried, ", "))
	}
	defaults := defaultLibDirs(class, machine)
	if cached := c.ldCache().lookup(name, class, machine); cached != "" && c.candidate(cached, class, machine) {
		// Without the cache the container's loader would search the
		// default directories: include the cache when that finds another
		// path (or nothing).
		if try(defaults) != cached {
			c.needCache = true
		}
		return cached, nil
	}
	if f := try(defaults); f != "" {
		return f, nil
	}
	return "", fmt.Errorf("not in %s, %s or %s", strings.Join(uniq(tried), ", "), c.cachePath(), strings.Join(defaults, ", "))
}

// candidate reports whether path is an ELF object the loader would accept
// for an object of this class and machine. Each path is read once per
// closure.
func (c *closer) candidate(path string, class elf.Class, machine elf.Machine) bool {
	h, ok := c.headers[path]
	if !ok {
		if f, err := os.Open(path); err == nil {
			h = elfHeaderOf(f)
			f.Close()
		}
		c.headers[path] = h
	}
	return h.matches(class, machine)
}

// ldCache reads /etc/ld.so.cache once. A missing or unreadable cache is an
// empty one, as it is for the loader.
func (c *closer) ldCache() *ldCache {
	if !c.cacheRd {
		c.cacheRd = true
		if b, err := os.ReadFile(c.cachePath()); err == nil {
			c.cache, _ = parseLdCache(b) // an unparsable cache is ignored, as glibc does
		}
	}
	return c.cache
}

func (c *closer) cachePath() string {
	if c.cacheFile != "" {
		return c.cacheFile
	}
	return ldCachePath
}

func uniq(s []string) []string {
	var out []string
	seen := make(map[string]bool)
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// addPackage adds the Node package at pkg and the packages it needs, each
// at the path it was found at and without its own node_modules
// (Options.Packages).
func (c *closer) addPackage(pkg string) error {
	dirs, err := nodeDependencies(pkg)
	if err != nil {
		return err
	}
	var trees []takenTree
	for _, d := range dirs {
		real, fi, err := walkPath(d, c.visit)
		if err != nil {
			return fmt.Errorf("package %s: %w", d, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%w: package %s is not a directory", ErrUnsupported, d)
		}
		if real == "/" {
			return fmt.Errorf("%w: package %s is the root directory", ErrUnsupported, d)
		}
		if c.packages[real] {
			continue // reached at another path too: its links are recorded, its tree is
		}
		c.packages[real] = true
		trees = append(trees, takenTree{root: real, fi: fi, skip: filepath.Join(real, nodeModules)})
	}
	return c.addTrees(trees)
}

// addTree adds the directory root (a physical path) and everything below
// it except the entry at skip (none when empty). Symlinks must resolve
// inside root.
func (c *closer) addTree(root string, fi fs.FileInfo, skip string) error {
	return c.addTrees([]takenTree{{root: root, fi: fi, skip: skip}})
}

// takenTree is a directory addTree takes whole, but for skip.
type takenTree struct {
	root string
	fi   fs.FileInfo
	skip string
}

// addTrees adds each tree as addTree does. The trees are walked in
// parallel (a walk is a stat per entry: most of the time of a large
// package closure) and what each walk found is recorded in order, each
// tree as soon as its walk is done, so the result, and the first error,
// are those of one walk after the other.
func (c *closer) addTrees(trees []takenTree) error {
	type walked struct {
		entries []walkedEntry
		err     error
		done    chan struct{}
	}
	found := make([]walked, len(trees))
	for i := range found {
		found[i].done = make(chan struct{})
	}
	ctx, cancel := context.WithCancel(c.ctx)
	walks := make(chan error, 1)
	go func() {
		walks <- parallel(ctx, len(trees), func(ctx context.Context, i int) error {
			defer close(found[i].done)
			t := trees[i]
			found[i].err = walkTree(t.root, t.skip, func(p string, e walkEntry) error {
				found[i].entries = append(found[i].entries, walkedEntry{p, e})
				return ctx.Err()
			})
			return nil
		})
	}()
	defer func() { cancel(); <-walks }()
	hostClass, hostMach := hostMachine()
	for i, t := range trees {
		select {
		case <-found[i].done:
		case <-ctx.Done(): // c.ctx: trees not walked yet are skipped
			return c.ctx.Err()
		}
		if err := c.visit(t.root, t.fi, ""); err != nil {
			return err
		}
		for _, w := range found[i].entries {
			if err := c.addTreeEntry(t.root, w.path, w.entry, hostClass, hostMach); err != nil {
				return err
			}
		}
		if found[i].err != nil {
			return found[i].err
		}
	}
	return nil
}

type walkedEntry struct {
	path  string
	entry walkEntry
}

// addTreeEntry records the entry at p found walking the tree root.
func (c *closer) addTreeEntry(root, p string, e walkEntry, hostClass elf.Class, hostMach elf.Machine) error {
	switch {
	case e.mode.IsDir():
		return c.record(render.Runfile{Path: p, Type: render.RunfileDir, Mode: uint32(e.mode.Perm())})
	case e.mode&fs.ModeSymlink != 0:
		if err := checkInside(p, e.target, root); err != nil {
			return err
		}
		return c.record(render.Runfile{Path: p, Type: render.RunfileSymlink, Mode: uint32(e.mode.Perm()), Target: e.target})
	case e.mode.IsRegular():
		if err := c.recordKey(p, e.mode, e.key); err != nil {
			return err
		}
		if c.opts.TreeELF {
			return c.treeELF(p, hostClass, hostMach)
		}
		return nil
	default:
		return fmt.Errorf("%w: %s in directory %s is a %s", ErrUnsupported, p, root, e.mode.Type())
	}
}

// walkEntry is what walkTree tells of an entry: its lstat's mode (as
// fs.FileMode and as st_mode) and stat key, and a symlink's link text.
type walkEntry struct {
	mode   fs.FileMode
	stMode uint32
	key    statKey
	target string
}

// seal is the entry's lstat as the seal of a tree entry (zero where stat
// keys have no inode).
func (e walkEntry) seal() treeSeal {
	if e.key.Ino == 0 {
		return treeSeal{}
	}
	return treeSeal{Dev: e.key.Dev, Ino: e.key.Ino, Mode: e.stMode, Size: e.key.Size, MtimeNS: e.key.MtimeNS, CtimeNS: e.key.CtimeNS}
}

// objectSeal is the entry's lstat as the seal of a store object.
func (e walkEntry) objectSeal() objectSeal {
	return objectSeal{Dev: e.key.Dev, Ino: e.key.Ino, Size: e.key.Size, Mode: e.mode, MtimeNS: e.key.MtimeNS, CtimeNS: e.key.CtimeNS}
}

// checkInside reports an error unless the symlink link (inside root, with
// link text target) resolves inside root the way the kernel resolves it:
// every further symlink followed must be inside root too, and so must the
// final path. A dangling link is accepted when its text, read lexically,
// points inside root (there is nothing outside for it to reach).
func checkInside(link, target, root string) error {
	escape := fmt.Errorf("%w: %s -> %s leaves %s", ErrEscapingSymlink, link, target, root)
	start := target
	if !filepath.IsAbs(start) {
		start = filepath.Dir(link) + "/" + target
	}
	outside := false
	final, _, err := walkPath(start, func(path string, fi fs.FileInfo, _ string) error {
		if fi.Mode()&fs.ModeSymlink != 0 && !within(path, root) {
			outside = true
		}
		return nil
	})
	switch {
	case err != nil && errors.Is(err, fs.ErrNotExist):
		if !within(filepath.Clean(start), root) {
			return escape
		}
		return nil
	case err != nil:
		return fmt.Errorf("symlink %s -> %s: %w", link, target, err)
	case outside || !within(final, root):
		return escape
	}
	return nil
}

// treeELF chases the libraries of an ELF file found inside a declared
// directory, when it is built for this machine.
func (c *closer) treeELF(p string, class elf.Class, machine elf.Machine) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	head := make([]byte, 64)
	n, _ := f.ReadAt(head, 0)
	if !isELF(head[:n]) || !elfHeaderMatches(f, class, machine) {
		return nil
	}
	info, err := c.readELFCached(p, f)
	if err != nil {
		return fmt.Errorf("%w: %s: ELF: %w", ErrUnsupported, p, err)
	}
	return c.elfClosure(p, p, info)
}

// addExtraDir adds the directory d and its missing parents, mode 0755.
func (c *closer) addExtraDir(d string) error {
	if !filepath.IsAbs(d) {
		return fmt.Errorf("%w: directory %q is not an absolute path", ErrUnsupported, d)
	}
	parts := splitPath(filepath.Clean(d))
	cur := ""
	for _, name := range parts {
		cur += "/" + name
		if e, ok := c.plan.entries[cur]; ok {
			if e.Type != render.RunfileDir {
				return fmt.Errorf("%w: directory %s: %s is a %s in the tree", ErrConflict, d, cur, e.Type)
			}
			continue
		}
		c.plan.add(planEntry{Runfile: render.Runfile{Path: cur, Type: render.RunfileDir, Mode: 0o755}})
	}
	return nil
}
