package compiler

import (
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/runfiles"
)

// An engine profile says what one version of a real engine CLI does beyond
// the argv hookbox gives it, measured on that version in a hookbox
// container (docs/engines.md has the evidence): the shells it starts and how
// it finds them, its own helper execs, the sibling programs it needs as
// runfiles, and the flags and variables that make its execs verifiable.
// The compiler reads the engine's version from its package once, applies the
// profile of that version (or the nearest one, and says so) and writes the
// resulting exec rules into the render, so verify never guesses.
type engineProfile struct {
	version string
	// hookShell and toolShell say which shell the engine runs hook
	// commands and its shell tool's commands with. nil: none.
	hookShell *shellRule
	toolShell *shellRule
	// execs are the engine's other own execs.
	execs []profileExec
	// siblings are programs next to the engine binary (paths relative to
	// its directory) it runs by itself; they become runfiles and engine
	// execs with any argv.
	siblings []string
	// args are flags placed before the user's args; env are variables the
	// engine gets (hookbox's, not overridable).
	args []string
	env  func(c *compilation) map[string]string
	// nodePackage: the engine is a script of a Node package, whose whole
	// package (with its dependencies) is its runfiles tree.
	nodePackage bool
}

// shellRule is how an engine finds and calls a shell.
type shellRule struct {
	// name is a bare name the engine finds on the container's PATH, or an
	// absolute path it uses as is.
	name string
	// argv0: how the engine spells argv[0]: argv0Path (the path it found)
	// or argv0Name (the bare name, as execvp callers do).
	argv0 string
	// forms are the argv after argv[0] the engine uses for tool commands;
	// the command string is a free position. Unused for hook shells, whose command
	// hookbox generates: [-c, COMMAND].
	forms [][]string
	// env, if set, is a variable the engine reads its shell from; hookbox
	// sets it to the resolved path so the engine cannot pick another.
	env string
}

const (
	argv0Path = "path"
	argv0Name = "name"
)

// freeArg marks a free position in a profile argv pattern: any one
// element, chosen by the engine (render.EngineExec.Slots), never a launch
// slot.
const freeArg = "\x00free"

// profileExec is one exec rule before its paths are resolved.
type profileExec struct {
	name string
	// path: "/proc/self/exe", or an absolute path.
	path string
	argv []string // freeArg elements are free positions
	rest bool
	// engineBinary: the exec's identity is the engine's own binary.
	engineBinary bool
}

// applyProfile selects and applies the engine's profile: version, notes,
// shells, siblings, exec rules. It runs after collectPrograms (it adds
// programs) and before the engine's build (which reads the hook shell).
func (c *compilation) applyProfile() {
	profiles := c.def.profiles
	if len(profiles) == 0 {
		return
	}
	engineHost := c.host(c.spec.Engine.Path)
	version := engineVersion(engineHost)
	prof := nearestProfile(profiles, version)
	c.profile = prof
	c.r.Engine.Version = version
	c.r.Engine.Profile = prof.version
	_, statErr := os.Stat(engineHost)
	switch {
	case version == "" && statErr == nil:
		// A file that is not there is reported by the runfiles stage.
		c.note("engine version unknown (no package.json or codex-package.json above %s): profile %s %s applied", c.spec.Engine.Path, c.def.kind, prof.version)
	case version != "" && version != prof.version:
		c.note("no profile for %s %s: the nearest, %s, applied", c.def.kind, version, prof.version)
	}
	if prof.nodePackage {
		if dir := packageDir(engineHost); dir != "" {
			c.addHostProgram(dir, render.RolePackage)
		}
	}
	for _, rel := range prof.siblings {
		host := filepath.Join(filepath.Dir(engineHost), rel)
		if _, err := os.Stat(host); err != nil {
			continue // not shipped on this platform: the engine does without
		}
		p := c.addHostProgram(host, render.RoleEngine)
		c.r.Engine.Execs = append(c.r.Engine.Execs, render.EngineExec{Name: "sibling:" + path.Base(p), Path: p, Argv: []string{}, Rest: true, Binary: render.BinaryPath})
	}
	for _, x := range prof.execs {
		c.r.Engine.Execs = append(c.r.Engine.Execs, x.render(c))
	}
	if sh := prof.toolShell; sh != nil {
		shellPath := c.resolveShell(sh)
		for _, form := range sh.forms {
			argv := append([]string{sh.argv0Of(shellPath)}, form...)
			x := profileExec{name: "tool-shell", path: shellPath, argv: argv}
			c.r.Engine.Execs = append(c.r.Engine.Execs, x.render(c))
		}
		if sh.env != "" {
			c.profileShellEnv = [2]string{sh.env, shellPath}
		}
	}
	if sh := prof.hookShell; sh != nil && len(c.spec.Hooks) > 0 {
		c.hookShell = c.resolveShell(sh)
	}
}

// profileEnv sets the profile's variables (after the base environment and
// the limits, which they may derive from).
func (c *compilation) profileEnv() {
	if c.profile == nil {
		return
	}
	if name := c.profileShellEnv[0]; name != "" {
		c.setEnv(name, render.EnvHookbox, c.profileShellEnv[1])
	}
	if c.profile.env != nil {
		env := c.profile.env(c)
		for _, name := range sortedKeys(env) {
			c.setEnv(name, render.EnvHookbox, env[name])
		}
	}
}

// nodeHeapOptions sizes Node's heap from the memory limit (three quarters
// of it; Node would size it from the host's RAM, which the container may
// not have).
func nodeHeapOptions(c *compilation) string {
	return "--max-old-space-size=" + strconv.FormatInt(c.r.Limits.MemoryBytes/(1<<20)*3/4, 10)
}

func (x profileExec) render(c *compilation) render.EngineExec {
	out := render.EngineExec{Name: x.name, Path: x.path, Rest: x.rest, Binary: render.BinaryPath}
	if x.engineBinary {
		out.Binary = render.BinaryEngine
	}
	for i, a := range x.argv {
		if a == freeArg {
			out.Slots = append(out.Slots, i)
			a = ""
		}
		out.Argv = append(out.Argv, a)
	}
	if out.Argv == nil {
		out.Argv = []string{}
	}
	return out
}

func (sh *shellRule) argv0Of(resolved string) string {
	if sh.argv0 == argv0Name {
		return path.Base(sh.name)
	}
	return resolved
}

// resolveShell finds the shell the way the engine does and makes it a
// program: an absolute name as is; a bare name on the container's PATH
// (onPath). A shell that is nowhere is still planned at the first PATH
// directory, and the runfiles stage reports it missing.
func (c *compilation) resolveShell(sh *shellRule) string {
	shellPath := sh.name
	if !path.IsAbs(shellPath) {
		shellPath = c.onPath(sh.name)
		if shellPath == "" {
			shellPath = path.Join(c.pathDirs[0], sh.name)
		}
	}
	return c.addHostProgram(shellPath, render.RoleShell)
}

// onPath is where a PATH search in the container finds name: the first
// PATH directory holding a declared program of that name or, on the host,
// an executable of that name (every program appears in the container at
// its host path, so that is where the search finds it once it is a
// runfile). "" when none does.
func (c *compilation) onPath(name string) string {
	for _, dir := range c.pathDirs {
		cand := path.Join(dir, name)
		if _, declared := c.programs[cand]; declared {
			return cand
		}
		if found, err := runfiles.LookPath(name, dir); err == nil {
			return found
		}
	}
	return ""
}

// host is the host path of the program at container path p.
func (c *compilation) host(p string) string {
	if h, ok := c.hostPaths[p]; ok {
		return h
	}
	return p
}

// addHostProgram adds the program at a host path and returns its
// container path.
func (c *compilation) addHostProgram(host, role string) string {
	p := render.ContainerPath(host)
	c.hostPaths[p] = host
	c.addProgram(p, role)
	return p
}

// scriptShebangs records, for every program that is a "#!" script, how the
// kernel runs it; an env interpreter's command is found on the container's
// PATH and becomes a program too (the render then says which node runs
// gemini.js).
func (c *compilation) scriptShebangs() {
	for _, p := range sortedKeys(c.programs) {
		prog := c.programs[p]
		if slices.Contains(prog.Roles, render.RolePackage) {
			continue
		}
		info, ok, err := runfiles.ReadShebang(prog.HostPath)
		if !ok || err != nil {
			continue // not a script, or one the runfiles stage refuses with context
		}
		sb := &render.Shebang{Interpreter: info.Interpreter, Arg: info.Arg}
		c.addHostProgram(info.Interpreter, render.RoleInterpreter)
		if info.EnvCommand != "" {
			if found := c.onPath(info.EnvCommand); found != "" {
				sb.Hop = found
				c.addHostProgram(found, render.RoleInterpreter)
			}
		}
		prog.Shebang = sb
	}
}

// engineVersion reads the engine's version from the nearest package
// manifest above its entry file: codex-package.json (Codex's platform
// bundle) or package.json. "" when there is none.
func engineVersion(entry string) string {
	for dir := filepath.Dir(entry); ; dir = filepath.Dir(dir) {
		for _, name := range []string{"codex-package.json", "package.json"} {
			data, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				continue
			}
			var m struct{ Version string }
			if json.Unmarshal(data, &m) == nil && m.Version != "" {
				// "0.171.0-linux-x64": a platform package's suffix.
				v, _, _ := strings.Cut(m.Version, "-")
				return v
			}
		}
		if parent := filepath.Dir(dir); parent == dir {
			return ""
		}
	}
}

// packageDir is the directory of the nearest package.json above entry.
func packageDir(entry string) string {
	for dir := filepath.Dir(entry); ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "package.json")); err == nil {
			return dir
		}
		if parent := filepath.Dir(dir); parent == dir {
			return ""
		}
	}
}

// nearestProfile is the profile of version, else the newest one older
// than it, else the oldest (profiles are sorted, oldest first). An unknown
// version gets the newest.
func nearestProfile(profiles []*engineProfile, version string) *engineProfile {
	if version == "" {
		return profiles[len(profiles)-1]
	}
	best := profiles[0]
	for _, p := range profiles {
		if compareVersions(p.version, version) <= 0 {
			best = p
		}
	}
	return best
}

// compareVersions compares dotted numeric versions ("2.1.197");
// non-numeric parts compare as 0.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}
