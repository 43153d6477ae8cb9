// Package compiler turns spawn specs into renders.
//
// It owns the spec format (types, parsing with file:line:column errors,
// validation), the engines (one file per engine, each with a declarative
// flag table), effort clamps, and the rules for hooks, environment and
// secrets. Compiling is pure: no containers, no network, no clock, no host
// environment. The only file reads are the spec itself and its promptFile.
//
// compiler decides what should run; it never runs anything.
package compiler

import (
	"errors"
	"path"
	"slices"
	"strconv"
	"strings"

	"hookbox.dev/hookbox/render"
)

// Defaults applied when the spec leaves a limit out.
const (
	DefaultTimeoutMS     = 30 * 60 * 1000
	DefaultFirstOutputMS = 5 * 60 * 1000
	DefaultIdleMS        = 10 * 60 * 1000
	DefaultMemoryBytes   = 4 << 30
	DefaultPids          = 1024
	DefaultTmpfsBytes    = 1 << 30
	// DefaultOutputBytes caps stdout and, separately, stderr: generous for
	// a long session's NDJSON stream, small enough that a runaway engine
	// cannot fill the host's disk with its record.
	DefaultOutputBytes = 64 << 20
	// Without limits.tmpfsInodes a tmpfs gets one inode per
	// TmpfsBytesPerInode of its size (mke2fs's default ratio), and at
	// least MinDefaultTmpfsInodes: an inode costs host kernel memory and
	// a harvested entry, but nothing of the tmpfs's size.
	TmpfsBytesPerInode    = 16 << 10
	MinDefaultTmpfsInodes = 4096
	// ContainerUID and ContainerGID are the unprivileged user of the base image.
	ContainerUID = 65532
	ContainerGID = 65532
)

// standardPath is searched after the directories of declared tools.
var standardPath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// compilation is the state of compiling one spawn.
type compilation struct {
	p        *Parsed
	spec     *SpawnSpec
	def      *engineDef
	r        *render.Render
	programs map[string]*render.Program
	// hostPaths maps the container path of each program to its host path.
	hostPaths map[string]string
	pathDirs  []string
	diags     *diagnostics
	// profile is the engine profile applied (nil for engines without one);
	// hookShell the resolved path of its hook shell.
	profile         *engineProfile
	hookShell       string
	profileShellEnv [2]string // a variable the engine reads its shell from, and its value
	baseURLArgs     []string  // engine flags engine.baseURL calls for
}

// CompileAll compiles parsed spawns, collecting every problem.
func CompileAll(parsed []*Parsed) ([]*render.Render, error) {
	var renders []*render.Render
	var all []Diagnostic
	for _, p := range parsed {
		r, err := Compile(p)
		var specErr *SpecError
		switch {
		case errors.As(err, &specErr):
			all = append(all, specErr.Diagnostics...)
		case err != nil:
			return nil, err
		default:
			renders = append(renders, r)
		}
	}
	if len(all) > 0 {
		return nil, &SpecError{Diagnostics: all}
	}
	return renders, nil
}

// Compile turns one parsed spawn into its render.
func Compile(p *Parsed) (*render.Render, error) {
	s := &p.Spawn.Spec
	c := &compilation{
		p:         p,
		spec:      s,
		def:       engines[s.Engine.Kind],
		programs:  map[string]*render.Program{},
		hostPaths: map[string]string{},
		diags:     &diagnostics{file: p.File},
	}
	if c.def == nil {
		c.diags.add(p.at("spec.engine.kind"), p.prefix+"spec.engine.kind", "", "unknown engine kind %q", s.Engine.Kind)
		return nil, c.diags.err()
	}
	c.r = &render.Render{
		SchemaVersion: render.SchemaVersion,
		Spawn:         p.Spawn.Metadata.Name,
		Network:       render.NetworkNone,
		Engine: render.Engine{
			Kind:          s.Engine.Kind,
			StreamsEarly:  c.def.streamsEarly,
			SelfExecArgv0: c.def.selfExecArgv0,
			Model:         s.Engine.Model,
		},
		Process: render.Process{
			Cwd:   render.WorkspaceDir,
			Stdin: "/dev/null",
			UID:   ContainerUID,
			GID:   ContainerGID,
		},
	}
	c.spec = c.containerView(s)
	c.collectPrograms()
	c.applyProfile()
	c.limits()
	c.mounts()
	c.baseEnv()
	c.profileEnv()
	c.egress()
	if err := c.gateways(); err != nil {
		return nil, err
	}
	if base := s.Engine.BaseURL; base != "" && c.def.baseURL != nil {
		if err := c.def.baseURL(c, base); err != nil {
			return nil, err
		}
	}
	if err := c.def.build(c); err != nil {
		return nil, err
	}
	c.checkExecSize()
	if err := c.diags.err(); err != nil {
		return nil, err
	}
	c.hooks()
	c.trace()
	c.scriptShebangs()
	c.finish()
	return c.r, nil
}

// containerView returns a copy of the spec whose program paths (engine,
// tools, hook programs, trace allow, script execs) are container paths:
// the host path, or render.HostDir + it where a mount would hide it.
// Everything downstream of this writes container paths.
func (c *compilation) containerView(s *SpawnSpec) *SpawnSpec {
	view := *s
	move := func(host string) string {
		container := render.ContainerPath(host)
		c.hostPaths[container] = host
		return container
	}
	view.Engine.Path = move(s.Engine.Path)
	view.Tools = make([]string, len(s.Tools))
	for i, t := range s.Tools {
		view.Tools[i] = move(t)
	}
	view.Hooks = make([]Hook, len(s.Hooks))
	for i, h := range s.Hooks {
		h.Argv = slices.Clone(h.Argv)
		h.Argv[0] = move(h.Argv[0])
		view.Hooks[i] = h
	}
	if s.Trace.Allow != nil {
		allow := make([]string, len(*s.Trace.Allow))
		for i, a := range *s.Trace.Allow {
			allow[i] = render.ContainerPath(a)
		}
		view.Trace.Allow = &allow
	}
	view.Engine.Script = make([]ScriptStep, len(s.Engine.Script))
	for i, step := range s.Engine.Script {
		if len(step.Exec) > 0 {
			step.Exec = slices.Clone(step.Exec)
			step.Exec[0] = move(c.p.hostPath(step.Exec[0]))
		}
		view.Engine.Script[i] = step
	}
	return &view
}

// addProgram records a program by its container path (docs/architecture.md,
// "Words": programs appear where the host has them, unless a mount would
// hide them).
func (c *compilation) addProgram(path, role string) {
	prog, ok := c.programs[path]
	if !ok {
		host, known := c.hostPaths[path]
		if !known {
			host = path
		}
		prog = &render.Program{Path: path, HostPath: host}
		c.programs[path] = prog
	}
	if !slices.Contains(prog.Roles, role) {
		prog.Roles = append(prog.Roles, role)
		slices.Sort(prog.Roles)
	}
}

func (c *compilation) collectPrograms() {
	s := c.spec
	c.addProgram(s.Engine.Path, render.RoleEngine)
	for _, tool := range s.Tools {
		c.addProgram(tool, render.RoleTool)
	}
	for _, h := range s.Hooks {
		c.addProgram(h.Argv[0], render.RoleHook)
	}
	// PATH: directories of declared tools outside the standard ones (sorted,
	// so declaration order does not matter, as the plan form writes them, so
	// the checkout's location does not either), then the standard ones.
	var dirs []string
	for _, tool := range s.Tools {
		if d := path.Dir(tool); !slices.Contains(standardPath, d) && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	base := c.p.baseDir // final: every relative path is resolved in validate
	slices.SortFunc(dirs, func(a, b string) int {
		return strings.Compare(render.PlanString(a, base), render.PlanString(b, base))
	})
	dirs = append(dirs, standardPath...)
	c.pathDirs = dirs
}

func (c *compilation) limits() {
	l := c.spec.Limits
	out := render.Limits{
		TimeoutMS:   DefaultTimeoutMS,
		MemoryBytes: DefaultMemoryBytes,
		Pids:        DefaultPids,
		TmpfsBytes:  DefaultTmpfsBytes,
	}
	if l.Timeout.Set {
		out.TimeoutMS = l.Timeout.Milliseconds()
	}
	if c.def.streamsEarly {
		out.FirstOutputMS, out.IdleMS = DefaultFirstOutputMS, DefaultIdleMS
		if l.FirstOutput.Set {
			out.FirstOutputMS = l.FirstOutput.Milliseconds()
		}
		if l.Idle.Set {
			out.IdleMS = l.Idle.Milliseconds()
		}
	}
	if l.Memory.Set {
		out.MemoryBytes = l.Memory.Value()
	}
	if l.Pids > 0 {
		out.Pids = l.Pids
	}
	if l.CPUs.Set {
		out.MilliCPUs = l.CPUs.MilliValue()
	}
	if l.Tmpfs.Set {
		out.TmpfsBytes = l.Tmpfs.Value()
	}
	out.TmpfsInodes = max(out.TmpfsBytes/TmpfsBytesPerInode, MinDefaultTmpfsInodes)
	if l.TmpfsInodes > 0 {
		out.TmpfsInodes = l.TmpfsInodes
	}
	out.OutputBytes = DefaultOutputBytes
	if l.Output.Set {
		out.OutputBytes = l.Output.Value()
	}
	c.r.Limits = out
}

// grantPaths maps each addDir to its container path /grants/<basename>,
// with -2, -3… appended to repeated basenames in declaration order.
func (c *compilation) grantPaths() []string {
	taken := map[string]bool{}
	out := make([]string, len(c.spec.AddDirs))
	for i, dir := range c.spec.AddDirs {
		base := path.Base(dir)
		if base == "/" || base == "." {
			base = "root"
		}
		name := base
		for n := 2; taken[name]; n++ {
			name = base + "-" + strconv.Itoa(n)
		}
		taken[name] = true
		out[i] = path.Join(render.GrantsDir, name)
	}
	return out
}

func (c *compilation) mounts() {
	s := c.spec
	workspace := render.Mount{Destination: render.WorkspaceDir, Kind: render.MountBind, Source: s.Workspace.Path, ReadOnly: true}
	if s.Workspace.Overlay() {
		workspace = render.Mount{Destination: render.WorkspaceDir, Kind: render.MountOverlay, Source: s.Workspace.Path}
	}
	ms := []render.Mount{workspace}
	for i, dest := range c.grantPaths() {
		ms = append(ms, render.Mount{Destination: dest, Kind: render.MountBind, Source: s.AddDirs[i], ReadOnly: true})
	}
	tmpfsOpts := []string{"nosuid", "nodev", "noexec", "mode=0700"}
	ms = append(ms,
		render.Mount{Destination: render.RunDir, Kind: render.MountTmpfs, Options: tmpfsOpts, SizeBytes: c.r.Limits.TmpfsBytes, Inodes: c.r.Limits.TmpfsInodes},
		render.Mount{Destination: render.TmpDir, Kind: render.MountTmpfs, Options: []string{"nosuid", "nodev", "noexec", "mode=1777"}, SizeBytes: c.r.Limits.TmpfsBytes, Inodes: c.r.Limits.TmpfsInodes},
	)
	c.r.Mounts = ms
}

// baseEnv builds the container environment (docs/contracts.md §3): PATH
// and HOME from hookbox, explicit values, and references for allow-listed
// host variables and secrets. No host value is read here.
func (c *compilation) baseEnv() {
	s := c.spec
	c.setEnv("PATH", render.EnvHookbox, strings.Join(c.pathDirs, ":"))
	c.setEnv("HOME", render.EnvHookbox, render.HomeDir)
	for _, name := range s.Env.Allow {
		c.setEnv(name, render.EnvHost, "")
	}
	for name, value := range s.Env.Set {
		c.setEnv(name, render.EnvSet, value)
	}
	for _, sec := range s.Secrets {
		if sec.Gateway == "" { // a gateway secret's variable holds a placeholder (gateways)
			c.setEnv(sec.Name, render.EnvSecret, "")
		}
	}
}

func (c *compilation) setEnv(name, source, value string) {
	c.r.Process.Env = append(c.r.Process.Env, render.EnvVar{Name: name, Source: source, Value: value})
}

// addFile adds a generated file; slots are the strings of its JSON content
// that hold launch slots.
func (c *compilation) addFile(p string, mode uint32, content string, slots ...render.FileSlot) {
	c.r.Files = append(c.r.Files, render.File{Path: p, Mode: mode, Content: content, Slots: slots})
}

func (c *compilation) hooks() {
	for i := range c.spec.Hooks {
		h := &c.spec.Hooks[i]
		chain, command := c.hookChain(h)
		c.r.Hooks = append(c.r.Hooks, render.Hook{
			Name:      h.Name,
			Event:     h.Event,
			Matcher:   h.Matcher,
			Required:  h.Required,
			TimeoutMS: h.Timeout.Milliseconds(),
			Argv:      slices.Clone([]string(h.Argv)),
			Command:   command,
			Chain:     chain,
		})
	}
}

func (c *compilation) trace() {
	t := c.spec.Trace
	mode := render.TraceMode(t.Mode)
	if mode == "" {
		mode = render.TraceVerify
	}
	allow := []string{}
	if t.Allow != nil {
		allow = append(allow, *t.Allow...)
	} else {
		allow = append(allow, c.spec.Tools...)
	}
	slices.Sort(allow)
	c.r.Trace = render.TracePolicy{Mode: mode, Allow: slices.Compact(allow)}
}

// finish assembles the collected parts into their canonical order.
func (c *compilation) finish() {
	for _, prog := range c.programs {
		c.r.Programs = append(c.r.Programs, *prog)
	}
	if len(c.spec.Artifacts) > 0 {
		c.r.Artifacts = slices.Clone(c.spec.Artifacts)
	}
	c.r.Engine.Exec = render.Exec{Path: c.spec.Engine.Path, Argv: slices.Clone(c.r.Process.Argv)}
	// hookbox-init is PID 1 and runs the engine as its child, so the
	// engine gets the signals of a timeout (cmd/hookbox-init).
	c.r.Process.Argv = append([]string{render.InitPath}, c.r.Process.Argv...)
	c.r.Init = &render.Exec{Path: render.InitPath, Argv: slices.Clone(c.r.Process.Argv)}
	c.r.BaseDir = c.p.baseDir // every relative path is resolved by now
	c.r.SortLists()
}

// checkExecSize refuses an engine exec whose argv and environment (the
// values known at compile time) exceed what execve accepts: the engine
// would fail with E2BIG. Values resolved at launch (host variables,
// secrets) are not counted.
func (c *compilation) checkExecSize() {
	total := 0
	for _, a := range c.r.Process.Argv {
		total += len(a) + 1 + 8 // the string, its NUL, its pointer
	}
	for _, e := range c.r.Process.Env {
		total += len(e.Name) + 1 + len(e.Value) + 1 + 8
	}
	if total > maxArgBytes {
		field := "spec.prompt"
		if c.spec.PromptFile != "" {
			field = "spec.promptFile"
		}
		c.p.errf(c.diags, field, "shorten the prompt or the arguments: write long text to a file in the workspace",
			"the engine's argv and environment are %d bytes; execve accepts at most %d (E2BIG)", total, maxArgBytes)
	}
}
