// Package render owns the Render: the canonical, deterministic plan of one
// spawn that every later stage consumes (containers, tracer, Kubernetes).
//
// A Render holds no secret values and no host state beyond the host paths the
// spec declared: secrets and allow-listed host variables are references that
// the launcher resolves at launch. Its canonical JSON (sorted keys, no
// insignificant whitespace) is hashed with sha256 to name it (Digest; with
// the runfiles manifest, the content digest); the plan digest
// (PlanDigest) leaves out the manifest and the checkout's location, so the
// same spec gives the same plan digest on any machine.
//
// render judges; it never runs anything.
package render

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	"hookbox.dev/hookbox/render/canonjson"
)

// SchemaVersion is the version of the Render's JSON shape. Within a version,
// fields never change name, type or meaning; new optional fields may appear.
const SchemaVersion = 1

// ShadowedDirs are container directories that mounts (hookbox's or the
// runtime's) cover, so a program whose host path lies below one of them
// cannot appear there.
var ShadowedDirs = []string{"/dev", "/grants", "/hookbox", "/proc", "/run", "/sys", "/tmp", "/workspace"}

// HostDir is where such programs appear instead: HostDir + their host path.
const HostDir = "/hookbox/host"

// ContainerPath is where a host file appears in the container: at its host
// path, or under HostDir when a mount would hide that path. Paths in the
// render (argv, exec chains, runfiles) are container paths.
func ContainerPath(hostPath string) string {
	for _, d := range ShadowedDirs {
		// d or below it; d+"/" would allocate, for every entry of a
		// 20,000-file manifest.
		if strings.HasPrefix(hostPath, d) && (len(hostPath) == len(d) || hostPath[len(d)] == '/') {
			return HostDir + hostPath
		}
	}
	return hostPath
}

// Fixed container paths every backend uses.
const (
	WorkspaceDir = "/workspace"   // the run directory, read-only
	RunDir       = "/run/hookbox" // the tmpfs run dir, the only writable place
	HomeDir      = "/run/hookbox/home"
	OutDir       = "/run/hookbox/out" // where artifacts are expected
	ConfigDir    = "/hookbox/etc"     // generated files, read-only
	GrantsDir    = "/grants"          // addDirs, read-only
	TmpDir       = "/tmp"
	// InitPath is where hookbox-init, the container's PID 1, appears: a
	// runfile of its own directory (neither a mount nor HostDir), so an
	// image volume can carry it in Kubernetes too.
	InitPath = "/hookbox/bin/init"
)

// Render is the plan of one spawn.
type Render struct {
	SchemaVersion int               `json:"schema_version"`
	Spawn         string            `json:"spawn"`
	Labels        map[string]string `json:"labels,omitempty"`
	Engine        Engine            `json:"engine"`
	Init          *Exec             `json:"init,omitempty"` // PID 1: hookbox-init (InitPath), argv = Process.Argv; Engine.Exec is its child
	Process       Process           `json:"process"`
	Programs      []Program         `json:"programs"`
	Files         []File            `json:"files,omitempty"`
	Hooks         []Hook            `json:"hooks,omitempty"`
	Mounts        []Mount           `json:"mounts"`
	Limits        Limits            `json:"limits"`
	Network       string            `json:"network"`          // NetworkNone or NetworkAllowlist
	Egress        *Egress           `json:"egress,omitempty"` // exactly for NetworkAllowlist
	Gateways      []Gateway         `json:"gateways,omitempty"`
	Trace         TracePolicy       `json:"trace"`
	Artifacts     []string          `json:"artifacts,omitempty"`
	Notes         []string          `json:"notes,omitempty"`
	// Runfiles is the manifest of every file the programs need, filled by
	// the runfiles stage (empty in a plan-only render). A changed engine
	// binary changes it, and so the render digest.
	Runfiles []Runfile `json:"runfiles,omitempty"`
	// BaseDir is the host directory the spec's relative paths were written
	// against (the spec file's directory), moved up as far as their ".."
	// reach; "" when the spec wrote none. The plan digest writes every
	// path under it relative to it (PlanDigest), so it does not depend on
	// where the checkout lives.
	BaseDir string `json:"base_dir,omitempty"`
}

// Runfile types.
const (
	RunfileFile    = "file"
	RunfileSymlink = "symlink"
	RunfileDir     = "dir"
)

// Runfile is one entry of the runfiles manifest. Path is both the container
// path and the host path it was taken from: programs appear in the container
// where the host has them, symlink hops included, so the paths in the render
// are the paths an exec trace shows.
type Runfile struct {
	Path   string `json:"path"`
	Type   string `json:"type"`
	Mode   uint32 `json:"mode"`             // permission bits
	Size   int64  `json:"size,omitempty"`   // files
	SHA256 string `json:"sha256,omitempty"` // files: lowercase hex of the content
	Target string `json:"target,omitempty"` // symlinks: the link text
}

// Engine describes the engine program and how the launcher treats it.
type Engine struct {
	Kind string `json:"kind"`
	// Exec is the engine's exec, the init's child: path and exact argv.
	Exec Exec `json:"exec"`
	// SelfExecArgv0 lists argv[0] values under which the engine may re-exec
	// its own binary (Claude Code runs itself as "rg").
	SelfExecArgv0 []string `json:"self_exec_argv0,omitempty"`
	// Version is the engine's version as its package states it ("" when
	// hookbox could not read one); Profile the version of the engine
	// profile the compiler applied: equal to Version, or the nearest one
	// hookbox knows (a note then says so).
	Version string `json:"version,omitempty"`
	Profile string `json:"profile,omitempty"`
	// Execs are the engine's own execs beyond its argv, from its profile:
	// helper processes and shells it starts, each with the argv it may have.
	Execs []EngineExec `json:"execs,omitempty"`
	Model string       `json:"model,omitempty"`
	// Effort is the effort after clamping; RequestedEffort what the spec said.
	Effort          string `json:"effort,omitempty"`
	RequestedEffort string `json:"requested_effort,omitempty"`
	// StreamsEarly: the engine prints its first output shortly after start, so
	// first-output and idle watchdogs apply (claude, codex).
	StreamsEarly bool `json:"streams_early"`
}

// Exec is one expected execve: the path the tracer sees and the argv.
type Exec struct {
	Path string   `json:"path"`
	Argv []string `json:"argv"`
	// Slots are the indices of launch slots: elements that are "{NAME}"
	// for a name of LaunchSlots, filled with the run's value at launch
	// (SlotValues). Verify requires exactly the recorded value there.
	Slots []int `json:"slots,omitempty"`
}

// EngineExec is one exec an engine makes by itself: a self re-exec, an
// internal helper, the shell it runs its tool commands with. Argv is a
// pattern: each element exact, except slot indices (any single element);
// with Rest, any further elements may follow.
type EngineExec struct {
	Name string   `json:"name"`
	Path string   `json:"path"` // the filename the tracer sees
	Argv []string `json:"argv"`
	// Slots are free positions, not launch slots: the engine puts what it
	// likes there (a tool shell's model-chosen command), so any single
	// element matches and nothing is filled at launch.
	Slots []int `json:"slots,omitempty"`
	Rest  bool  `json:"rest,omitempty"`
	// Binary is whose identity the exec must have: BinaryEngine (the
	// engine's own program, whatever the filename, e.g. /proc/self/exe) or
	// BinaryPath (the runfile at Path).
	Binary string `json:"binary"`
}

// EngineExec binaries.
const (
	BinaryEngine = "engine"
	BinaryPath   = "path"
)

// Process is the container's init process (Argv: hookbox-init, then the
// engine's argv).
type Process struct {
	Argv  []string `json:"argv"`
	Cwd   string   `json:"cwd"`
	Env   []EnvVar `json:"env"`
	Stdin string   `json:"stdin"` // "/dev/null": no engine reads a terminal
	UID   int      `json:"uid"`
	GID   int      `json:"gid"`
}

// Environment variable sources.
const (
	EnvHookbox = "hookbox" // set by hookbox (PATH, HOME, engine homes)
	EnvSet     = "set"     // explicit value from the spec
	EnvHost    = "host"    // copied from the host environment at launch
	EnvSecret  = "secret"  // resolved at launch; the value is never stored
)

// EnvVar is one variable of the container environment. Value is present only
// for sources hookbox and set.
type EnvVar struct {
	Name   string `json:"name"`
	Source string `json:"source"`
	Value  string `json:"value,omitempty"`
}

// Program roles.
const (
	RoleEngine = "engine"
	RoleHook   = "hook"
	RoleTool   = "tool"
	RoleShell  = "shell" // a shell an engine runs hooks or tool commands with
	// RolePackage: a directory that is a package tree (a Node package: a
	// directory with package.json). Its runfiles are the tree plus the
	// trees of its dependencies as Node resolves them
	// (runfiles.NodeDependencies); nothing in it is run by this role.
	RolePackage = "package"
	// RoleInterpreter: a "#!" interpreter, or the program an env "#!"
	// line finds on PATH.
	RoleInterpreter = "interpreter"
)

// Program is a host program that may run in the container. It appears in
// the container at Path (the runfiles stage mounts it there).
type Program struct {
	Path     string   `json:"path"`
	HostPath string   `json:"host_path"`
	Roles    []string `json:"roles"`
	// Shebang is set when the program is a "#!" script.
	Shebang *Shebang `json:"shebang,omitempty"`
}

// Shebang is how the kernel runs a "#!" script: it execs Interpreter (with
// Arg, when the line has one) on the script. With an env interpreter
// (#!/usr/bin/env node), env then execs Hop, the program it finds on the
// container's PATH, in the same process: argv [Arg, script, args...].
type Shebang struct {
	Interpreter string `json:"interpreter"`
	Arg         string `json:"arg,omitempty"`
	Hop         string `json:"hop,omitempty"`
}

// File is a file hookbox generates for the run (engine settings, hook
// config, scripts). Files under ConfigDir are mounted read-only; files under
// RunDir are seeded into the tmpfs before start because the engine insists
// on writing next to them.
type File struct {
	Path    string `json:"path"`
	Mode    uint32 `json:"mode"`
	Content string `json:"content"`
	// Slots are the strings of Content (a JSON document) that hold launch
	// slots; the launcher fills them with the run's values before the
	// engine sees the file (FillFiles).
	Slots []FileSlot `json:"slots,omitempty"`
}

// MaxHooks is the most hooks a spawn may declare (the compiler refuses
// more). Judging a trace compares an exec that matches no hook with every
// hook of its path, so a verdict's cost grows with execs × hooks: at this
// many hooks, 100,000 execs that each differ from every hook are judged in
// about half a second on a 2-vCPU VM (BenchmarkVerifyScale in
// render/verify; 256 took 1.1 s).
const MaxHooks = 128

// Hook is one hook and the exec chain it is expected to produce.
type Hook struct {
	Name      string `json:"name"`
	Event     string `json:"event"`
	Matcher   string `json:"matcher,omitempty"`
	Required  bool   `json:"required"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
	// Argv is the hook's own argv as it finally runs.
	Argv []string `json:"argv"`
	// Command is the shell command string hookbox generated, when the engine
	// runs hooks through a shell.
	Command string `json:"command,omitempty"`
	// Chain is every exec the hook produces, in order: the shell (if any)
	// with the exact command string, then the hook program itself.
	Chain []Exec `json:"chain"`
}

// Mount kinds.
const (
	MountBind  = "bind"
	MountTmpfs = "tmpfs"
	// MountOverlay is the writable workspace: Source is the host directory,
	// the overlay's read-only lower layer; the upper layer is a per-run
	// tmpfs the launcher creates, so the host directory is never written.
	MountOverlay = "overlay"
)

// Artifacts hookbox itself writes into a run's harvested run dir when the
// workspace is an overlay: the changes as a patch, and as lists.
const (
	WorkspacePatch   = "workspace.patch"
	WorkspaceChanges = "workspace.changes.json"
)

// Mount is one filesystem the container sees besides the base image and
// runfiles (those are added by the runfiles stage).
type Mount struct {
	Destination string   `json:"destination"`
	Kind        string   `json:"kind"`
	Source      string   `json:"source,omitempty"` // host path for binds; the lower layer of an overlay
	ReadOnly    bool     `json:"read_only"`
	Options     []string `json:"options,omitempty"`
	SizeBytes   int64    `json:"size_bytes,omitempty"`
	// Inodes is a tmpfs's nr_inodes: how many files, directories and
	// symlinks it holds (its root included). 0 in renders from before it
	// existed: the kernel's default.
	Inodes int64 `json:"inodes,omitempty"`
}

// Limits are resource limits and watchdog timeouts. Zero means "none".
type Limits struct {
	TimeoutMS     int64 `json:"timeout_ms"`
	FirstOutputMS int64 `json:"first_output_ms,omitempty"`
	IdleMS        int64 `json:"idle_ms,omitempty"`
	MemoryBytes   int64 `json:"memory_bytes"`
	Pids          int64 `json:"pids"`
	MilliCPUs     int64 `json:"milli_cpus,omitempty"`
	TmpfsBytes    int64 `json:"tmpfs_bytes"`
	// TmpfsInodes is the inode limit of each tmpfs (the mounts' Inodes) and
	// the entry cap of the run dir's harvest.
	TmpfsInodes int64 `json:"tmpfs_inodes,omitempty"`
	// OutputBytes caps the engine's stdout and, separately, its stderr as
	// recorded and streamed; the rest is read and dropped.
	OutputBytes int64 `json:"output_bytes,omitempty"`
}

// TraceMode is what the exec tracer does during a run.
type TraceMode string

// Trace modes.
const (
	TraceOff     TraceMode = "off"
	TraceObserve TraceMode = "observe" // record only
	TraceVerify  TraceMode = "verify"  // judge; a mismatch fails the run
	TraceEnforce TraceMode = "enforce" // judge, and kill unplanned execs in the kernel
)

// Judged: a mismatch in this mode fails the run (hookbox run exits 124).
func (m TraceMode) Judged() bool { return m == TraceVerify || m == TraceEnforce }

// TracePolicy says what the exec tracer does and which programs the engine
// may exec besides itself and its hooks' chains.
type TracePolicy struct {
	Mode  TraceMode `json:"mode"`
	Allow []string  `json:"allow"`
}

// SortLists puts every list whose order carries no meaning (programs, env,
// files, mounts, artifacts, trace allow, egress) into canonical order, so the digest
// changes only when something execution-relevant does.
func (r *Render) SortLists() {
	slices.SortFunc(r.Programs, func(a, b Program) int { return strings.Compare(a.Path, b.Path) })
	slices.SortFunc(r.Process.Env, func(a, b EnvVar) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(r.Files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	for i := range r.Files {
		slices.SortFunc(r.Files[i].Slots, func(a, b FileSlot) int { return strings.Compare(a.Pointer, b.Pointer) })
	}
	slices.SortFunc(r.Mounts, func(a, b Mount) int { return strings.Compare(a.Destination, b.Destination) })
	slices.Sort(r.Artifacts)
	slices.Sort(r.Trace.Allow)
	slices.SortFunc(r.Runfiles, func(a, b Runfile) int { return strings.Compare(a.Path, b.Path) })
	if r.Egress != nil {
		r.Egress.sort()
	}
}

// ProgramPaths are the host paths of every program except package trees,
// for the runfiles stage, which takes each with its closure.
func (r *Render) ProgramPaths() []string {
	var out []string
	for _, p := range r.Programs {
		if !p.IsPackage() {
			out = append(out, p.HostPath)
		}
	}
	return out
}

// PackagePaths are the host paths of the package trees (RolePackage), for
// the runfiles stage, which adds the packages each depends on.
func (r *Render) PackagePaths() []string {
	var out []string
	for _, p := range r.Programs {
		if p.IsPackage() {
			out = append(out, p.HostPath)
		}
	}
	return out
}

// IsPackage: p is a package tree. Its other roles do not make it a plain
// program: taking a package's directory whole would take every package
// installed below it, needed or not.
func (p Program) IsPackage() bool { return slices.Contains(p.Roles, RolePackage) }

// ExtraMountPoints are the mount destinations that the base image (whose
// mount points are given) does not have: the runfiles tree provides them.
func (r *Render) ExtraMountPoints(imageMountPoints []string) []string {
	var out []string
	for _, m := range r.Mounts {
		if !slices.Contains(imageMountPoints, m.Destination) {
			out = append(out, m.Destination)
		}
	}
	return out
}

// Canonical returns the canonical JSON bytes of r. The runfiles manifest,
// most of a render with a large engine, is encoded directly
// (CanonicalRunfiles) and inserted into the canonical JSON of the rest:
// the same bytes as canonjson.Marshal(r).
func (r *Render) Canonical() ([]byte, error) {
	if len(r.Runfiles) == 0 {
		return canonjson.Marshal(r)
	}
	rest := *r
	rest.Runfiles = nil
	head, err := canonjson.Marshal(&rest)
	if err != nil {
		return nil, err
	}
	manifest, err := CanonicalRunfiles(r.Runfiles)
	if err != nil {
		return nil, err
	}
	return canonjson.InsertMember(head, "runfiles", manifest)
}

// Digest returns "sha256:<hex>" over the canonical bytes, and those bytes.
func (r *Render) Digest() (string, []byte, error) {
	data, err := r.Canonical()
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:]), data, nil
}
