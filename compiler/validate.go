package compiler

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"hookbox.dev/hookbox/internal/config/secretsconf"
	"hookbox.dev/hookbox/internal/initsecrets"
	"hookbox.dev/hookbox/render"
)

var (
	dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	hookName     = dns1123Label
	mcpName      = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
)

// reservedEnv are set by hookbox for every container.
var reservedEnv = []string{"PATH", "HOME"}

// efforts is the effort vocabulary in increasing order
// (docs/contracts.md §6).
var efforts = []string{"none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra"}

// errf reports a problem at a field path of this spawn.
func (p *Parsed) errf(diags *diagnostics, field, hint, format string, args ...any) {
	diags.add(p.at(field), p.prefix+field, hint, format, args...)
}

func (p *Parsed) has(field string) bool {
	_, ok := p.pos[p.prefix+field]
	return ok
}

// resolvePath resolves a spec path against the spec file's directory.
func (p *Parsed) resolvePath(name string) string {
	if filepath.IsAbs(name) {
		return filepath.Clean(name)
	}
	return filepath.Join(p.Dir, name)
}

// hostPath resolves a spec path that the render keeps (a program, a
// directory). A relative one moves baseDir up far enough to hold it.
func (p *Parsed) hostPath(name string) string {
	resolved := p.resolvePath(name)
	if !filepath.IsAbs(name) && filepath.IsAbs(p.Dir) {
		if p.baseDir == "" {
			p.baseDir = filepath.Clean(p.Dir)
		}
		p.baseDir = commonDir(p.baseDir, resolved)
	}
	return resolved
}

// commonDir is the deepest directory holding both clean absolute paths.
func commonDir(a, b string) string {
	for !render.Within(b, a) {
		a = filepath.Dir(a)
	}
	return a
}

// validate checks everything that can be checked without the engine's
// argv builder, normalizes effort, resolves relative paths and loads the
// prompt file. Every problem goes to diags.
func (p *Parsed) validate(diags *diagnostics, readFile func(string) ([]byte, error)) {
	s := &p.Spawn.Spec

	switch name := p.Spawn.Metadata.Name; {
	case name == "":
		p.errf(diags, "metadata.name", "add metadata: {name: my-spawn}", "metadata.name is required")
	case len(name) > 63 || !dns1123Label.MatchString(name):
		p.errf(diags, "metadata.name", "use lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters", "%q is not a DNS-1123 label", name)
	}

	def, known := engines[s.Engine.Kind]
	switch {
	case s.Engine.Kind == "":
		p.errf(diags, "spec.engine.kind", "one of: "+strings.Join(engineKinds(), ", "), "spec.engine.kind is required")
	case !known:
		p.errf(diags, "spec.engine.kind", "one of: "+strings.Join(engineKinds(), ", "), "unknown engine kind %q", s.Engine.Kind)
	}
	if s.Engine.Path == "" {
		p.errf(diags, "spec.engine.path", "give the host path of the engine binary, e.g. /usr/local/bin/claude", "spec.engine.path is required")
	} else {
		s.Engine.Path = p.hostPath(s.Engine.Path)
		p.checkHostProgram(diags, "spec.engine.path", s.Engine.Path)
	}
	if s.Engine.Effort != "" {
		s.Engine.Effort = strings.ToLower(strings.TrimSpace(s.Engine.Effort))
		if !slices.Contains(efforts, s.Engine.Effort) {
			p.errf(diags, "spec.engine.effort", "one of: "+strings.Join(efforts, ", "), "unknown effort %q", s.Engine.Effort)
		}
	}

	p.validatePrompt(diags, readFile)

	switch {
	case s.Workspace.malformed: // decoding said what is wrong
	case s.Workspace.Path == "":
		p.errf(diags, "spec.workspace", "give the host directory the engine works on (mounted read-only at /workspace), e.g. workspace: .", "spec.workspace is required")
	default:
		s.Workspace.Path = p.hostPath(s.Workspace.Path)
		p.checkHostDir(diags, "spec.workspace", s.Workspace.Path)
	}
	seenDirs := map[string]bool{}
	for i, dir := range s.AddDirs {
		field := fmt.Sprintf("spec.addDirs[%d]", i)
		if dir == "" {
			p.errf(diags, field, "remove the entry or give a directory", "empty directory")
			continue
		}
		s.AddDirs[i] = p.hostPath(dir)
		p.checkHostDir(diags, field, s.AddDirs[i])
		if seenDirs[s.AddDirs[i]] {
			p.errf(diags, field, "remove the duplicate", "%s is granted twice", s.AddDirs[i])
		}
		seenDirs[s.AddDirs[i]] = true
	}

	p.validateMCP(diags)
	if s.Engine.Kind == "codex" && s.MCPServers != nil && s.Workspace.Path != "" {
		// A missing file simply declares no servers.
		if data, err := readFile(filepath.Join(s.Workspace.Path, ".codex", "config.toml")); err == nil {
			p.workspaceCodexServers = codexWorkspaceServers(data)
		}
	}
	p.validateTools(diags)
	p.validateHooks(diags)
	p.validateEnv(diags)
	p.validateLimits(diags, def)

	p.validateGateways(diags, def)
	p.validateNetwork(diags, def)

	seenArtifacts := map[string]bool{}
	for i, a := range s.Artifacts {
		field := fmt.Sprintf("spec.artifacts[%d]", i)
		clean := path.Clean(a)
		if strings.HasSuffix(a, "/") && clean != "/" {
			clean += "/"
		}
		switch {
		case a == "":
			p.errf(diags, field, "remove the entry or name a file", "empty artifact name")
		case path.IsAbs(a), a == "..", strings.HasPrefix(a, "../"), strings.Contains(a, "/../"), strings.HasSuffix(a, "/.."):
			p.errf(diags, field, "name a path relative to the run dir /run/hookbox, e.g. out/review.md", "artifact %q leaves the run dir", a)
		case seenArtifacts[clean]:
			p.errf(diags, field, "remove the duplicate", "artifact %q is declared twice", a)
		case (clean == render.WorkspacePatch || clean == render.WorkspaceChanges) && !s.Workspace.Overlay():
			p.errf(diags, field, "write workspace: {path: DIR, mode: overlay}, or remove the entry", "artifact %q is written by hookbox only for an overlay workspace", a)
		default:
			s.Artifacts[i] = clean
		}
		seenArtifacts[clean] = true
	}

	switch render.TraceMode(s.Trace.Mode) {
	case "", render.TraceOff, render.TraceObserve, render.TraceVerify, render.TraceEnforce:
	default:
		p.errf(diags, "spec.trace.mode", "one of: off, observe, verify, enforce", "unknown trace mode %q", s.Trace.Mode)
	}
	if s.Trace.Allow != nil {
		tools := map[string]bool{}
		for _, t := range s.Tools {
			tools[t] = true
		}
		for i, prog := range *s.Trace.Allow {
			field := fmt.Sprintf("spec.trace.allow[%d]", i)
			resolved := p.hostPath(prog)
			if !tools[resolved] {
				p.errf(diags, field, "add it to spec.tools too: only declared tools exist in the container", "%s is not a declared tool", prog)
			}
			(*s.Trace.Allow)[i] = resolved
		}
	}

	if known {
		p.validateScript(diags, def)
		checkEngineRules(p, diags, def)
		def.check(p, diags)
	}
}

func (p *Parsed) validatePrompt(diags *diagnostics, readFile func(string) ([]byte, error)) {
	s := &p.Spawn.Spec
	switch {
	case s.Prompt != nil && s.PromptFile != "":
		p.errf(diags, "spec.promptFile", "keep either prompt or promptFile", "prompt and promptFile are both set")
	case s.Prompt != nil:
		p.Prompt, p.HasPrompt = *s.Prompt, true
	case s.PromptFile != "":
		s.PromptFile = p.resolvePath(s.PromptFile) // read here; the render has its text, not its path
		data, err := readFile(s.PromptFile)
		if err != nil {
			p.errf(diags, "spec.promptFile", "check the path; it is relative to the spec file", "cannot read prompt file: %v", err)
			return
		}
		p.Prompt, p.HasPrompt = string(data), true
	}
	if p.HasPrompt {
		field := "spec.prompt"
		if s.PromptFile != "" {
			field = "spec.promptFile"
		}
		p.checkArgSize(diags, field, "the prompt", p.Prompt)
	}
	for i, a := range s.Engine.Args {
		p.checkArgSize(diags, fmt.Sprintf("spec.engine.args[%d]", i), "an engine argument", a)
	}
	for _, name := range sortedKeys(s.Env.Set) {
		p.checkArgSize(diags, "spec.env.set."+name, "the variable", name+"="+s.Env.Set[name])
	}
}

// Kernel limits on what execve takes (linux/binfmts.h, fs/exec.c).
const (
	// maxArgStrlen is MAX_ARG_STRLEN: one argv or environment string,
	// its NUL included, beyond which execve fails with E2BIG.
	maxArgStrlen = 32 * 4096
	// maxArgBytes is the total of argv and environment strings and their
	// pointers execve accepts with the default 8 MiB stack limit (a
	// quarter of it); a larger total fails with E2BIG.
	maxArgBytes = 2 << 20
)

// checkArgSize refuses a string that cannot be one argv or environment
// element: the engine would fail at exec with E2BIG, reported as its own
// failure.
func (p *Parsed) checkArgSize(diags *diagnostics, field, what, s string) {
	if len(s)+1 > maxArgStrlen {
		p.errf(diags, field, fmt.Sprintf("keep it under %d KiB (write long text to a file in the workspace and point the prompt at it)", maxArgStrlen>>10),
			"%s is %d bytes; the kernel refuses any single argument over %d bytes (E2BIG)", what, len(s), maxArgStrlen-1)
	}
}

func (p *Parsed) validateMCP(diags *diagnostics) {
	s := &p.Spawn.Spec
	if s.MCPServers == nil {
		return
	}
	for _, name := range sortedKeys(*s.MCPServers) {
		server := (*s.MCPServers)[name]
		field := "spec.mcpServers." + name
		if !mcpName.MatchString(name) {
			p.errf(diags, field, "use letters, digits, '_' and '-'", "MCP server name %q is not usable in a config key", name)
		}
		switch {
		case len(server.Command) == 0 && server.URL == "":
			p.errf(diags, field, "give command (an argv list) for a stdio server or url for a remote one", "MCP server %q has neither command nor url", name)
		case len(server.Command) > 0 && server.URL != "":
			p.errf(diags, field, "keep one of command and url", "MCP server %q has both command and url", name)
		}
		if len(server.Headers) > 0 && server.URL == "" {
			p.errf(diags, field+".headers", "headers apply to url servers only", "MCP server %q has headers but no url", name)
		}
		for _, key := range sortedKeys(server.Env) {
			if !secretsconf.ValidName(key) {
				p.errf(diags, field+".env."+key, "use letters, digits and '_', not starting with a digit", "%q is not an environment variable name", key)
			}
		}
	}
}

// isProgramPath reports whether a program reference names a file rather
// than a bare command name to search for on PATH.
func isProgramPath(name string) bool { return strings.Contains(name, "/") }

const programPathHint = "give an absolute path such as /usr/bin/NAME or a path relative to the spec file (./hooks/NAME); hookbox does not search PATH"

func (p *Parsed) validateTools(diags *diagnostics) {
	s := &p.Spawn.Spec
	seen := map[string]bool{}
	for i, tool := range s.Tools {
		field := fmt.Sprintf("spec.tools[%d]", i)
		if !isProgramPath(tool) {
			p.errf(diags, field, strings.ReplaceAll(programPathHint, "NAME", tool), "tool %q is not a path", tool)
			continue
		}
		s.Tools[i] = p.hostPath(tool)
		p.checkHostProgram(diags, field, s.Tools[i])
		if seen[s.Tools[i]] {
			p.errf(diags, field, "remove the duplicate", "tool %s is declared twice", s.Tools[i])
		}
		seen[s.Tools[i]] = true
	}
}

func (p *Parsed) validateHooks(diags *diagnostics) {
	s := &p.Spawn.Spec
	def := engines[s.Engine.Kind]
	if len(s.Hooks) > 0 && def != nil && def.hooks == nil {
		p.errf(diags, "spec.hooks", def.noHooks, "engine %s does not run hooks", s.Engine.Kind)
		return
	}
	if len(s.Hooks) > render.MaxHooks {
		// The verdict compares each exec with every hook of its path.
		p.errf(diags, fmt.Sprintf("spec.hooks[%d]", render.MaxHooks),
			"give each program one hook per event (one hook can do several checks), or split the work over several spawns",
			"at most %d hooks per spawn; this one has %d: verifying a run compares every exec with the hooks, so its cost grows with both", render.MaxHooks, len(s.Hooks))
	}
	names := map[string]bool{}
	for i := range s.Hooks {
		h := &s.Hooks[i]
		field := fmt.Sprintf("spec.hooks[%d]", i)
		switch {
		case h.Name == "":
			p.errf(diags, field+".name", "name every hook, e.g. name: lint", "hook name is required")
		case len(h.Name) > 63 || !hookName.MatchString(h.Name):
			p.errf(diags, field+".name", "use lowercase letters, digits and '-'", "hook name %q is not a DNS-1123 label", h.Name)
		case names[h.Name]:
			p.errf(diags, field+".name", "give each hook its own name", "hook name %q is used twice", h.Name)
		}
		names[h.Name] = true
		if h.Event == "" {
			p.errf(diags, field+".event", "name the engine event that runs the hook, e.g. PreToolUse", "hook event is required")
		} else if def != nil && def.hooks != nil && !slices.Contains(def.hooks.events, h.Event) {
			p.errf(diags, field+".event", "one of: "+strings.Join(def.hooks.events, ", "), "engine %s has no hook event %q", s.Engine.Kind, h.Event)
		}
		if h.Matcher != "" && def != nil && def.hooks != nil && !slices.Contains(def.hooks.toolEvents, h.Event) {
			p.errf(diags, field+".matcher", "matchers apply to tool events only ("+strings.Join(def.hooks.toolEvents, ", ")+"); remove it", "event %s takes no matcher", h.Event)
		}
		if !p.has(field + ".argv") {
			p.errf(diags, field+".argv", "give the program and its arguments as a list, e.g. argv: [/usr/bin/true]", "hook argv is required")
			continue
		}
		if len(h.Argv) == 0 {
			// nil: the argv did not decode and was reported already.
			if h.Argv != nil {
				p.errf(diags, field+".argv", "give at least the program, e.g. argv: [/usr/bin/true]", "hook argv is empty")
			}
			continue
		}
		if !isProgramPath(h.Argv[0]) {
			p.errf(diags, field+".argv[0]", strings.ReplaceAll(programPathHint, "NAME", h.Argv[0]), "hook program %q is not a path", h.Argv[0])
			continue
		}
		h.Argv[0] = p.hostPath(h.Argv[0])
		p.checkHostProgram(diags, field+".argv[0]", h.Argv[0])
		for j, arg := range h.Argv[1:] {
			if slot, ok := render.SlotName(arg); ok {
				if !slices.Contains(render.LaunchSlots, slot) {
					p.errf(diags, fmt.Sprintf("%s.argv[%d]", field, j+1), "known slots: {"+strings.Join(render.LaunchSlots, "}, {")+"}", "unknown slot {%s}", slot)
				}
			} else if embedsLaunchSlot(arg) {
				p.errf(diags, fmt.Sprintf("%s.argv[%d]", field, j+1), "a slot must be a whole argument: split it into its own argv element", "slot embedded in a longer argument")
			}
		}
	}
}

// embedsLaunchSlot reports a launch slot inside a longer argument.
func embedsLaunchSlot(arg string) bool {
	for _, name := range render.LaunchSlots {
		if strings.Contains(arg, "{"+name+"}") {
			return true
		}
	}
	return false
}

func (p *Parsed) validateEnv(diags *diagnostics) {
	s := &p.Spawn.Spec
	def := engines[s.Engine.Kind]
	owner := map[string]string{}
	claim := func(name, field string) {
		if slices.Contains(reservedEnv, name) {
			p.errf(diags, field, "hookbox sets PATH and HOME for the container; remove it", "%s is reserved", name)
			return
		}
		if name == initsecrets.EnvName {
			p.errf(diags, field, "hookbox-init reads it to put the secrets in the engine's environment; remove it", "%s is reserved", name)
			return
		}
		if s.Network.Allow != nil && slices.Contains(proxyEnvNames, name) {
			p.errf(diags, field, "remove it: with network.allow, hookbox points the proxy variables at its own proxy", "%s is reserved for an allowlist network", name)
			return
		}
		if def != nil && slices.Contains(def.reservedEnv, name) {
			p.errf(diags, field, "hookbox sets it for this engine; remove it", "%s is reserved for engine %s", name, s.Engine.Kind)
			return
		}
		if first, dup := owner[name]; dup {
			p.errf(diags, field, "name each variable once, in one of env.allow, env.set and secrets", "%s is already declared at %s", name, first)
			return
		}
		owner[name] = p.prefix + field
	}
	for i, name := range s.Env.Allow {
		field := fmt.Sprintf("spec.env.allow[%d]", i)
		if !secretsconf.ValidName(name) {
			p.errf(diags, field, "use letters, digits and '_', not starting with a digit", "%q is not an environment variable name", name)
			continue
		}
		claim(name, field)
	}
	for _, name := range sortedKeys(s.Env.Set) {
		field := "spec.env.set." + name
		if !secretsconf.ValidName(name) {
			p.errf(diags, field, "use letters, digits and '_', not starting with a digit", "%q is not an environment variable name", name)
			continue
		}
		claim(name, field)
	}
	if len(s.Secrets) > 0 {
		if err := secretsconf.CheckNames(s.SecretNames()); err != nil {
			// Refusal is total (docs/contracts.md §3): the whole block is rejected.
			field := "spec.secrets"
			var refused *secretsconf.RefusedError
			if errors.As(err, &refused) {
				if refused.Index >= 0 {
					field = fmt.Sprintf("spec.secrets[%d]", refused.Index)
				}
				p.errf(diags, field, "", "%s (refused: %s)", refused.Message, refused.Reason)
			} else {
				p.errf(diags, field, "", "%v", err)
			}
			return
		}
		for i, name := range s.SecretNames() {
			claim(name, fmt.Sprintf("spec.secrets[%d]", i))
		}
	}
}

// The smallest limits.tmpfsInodes and limits.output a spec may give.
const (
	minTmpfsInodes = 64
	minOutputBytes = 4 << 10
)

func (p *Parsed) validateLimits(diags *diagnostics, def *engineDef) {
	l := &p.Spawn.Spec.Limits
	if def != nil && !def.streamsEarly {
		for _, f := range []struct {
			name string
			set  bool
		}{{"firstOutput", l.FirstOutput.Set}, {"idle", l.Idle.Set}} {
			if f.set {
				p.errf(diags, "spec.limits."+f.name, "remove it: only limits.timeout applies to this engine",
					"engine %s prints only when it finishes, so a slow healthy run looks like a dead one; %s watchdogs do not apply", p.Spawn.Spec.Engine.Kind, f.name)
			}
		}
	}
	if p.has("spec.limits.pids") && l.Pids <= 0 {
		p.errf(diags, "spec.limits.pids", "give a positive number, or omit it for the default 1024", "pids must be positive")
	}
	if l.Memory.Set && l.Memory.Value() < 16<<20 {
		p.errf(diags, "spec.limits.memory", "give at least 16Mi", "memory limit %s is too small", l.Memory.String())
	}
	if l.Tmpfs.Set && l.Tmpfs.Value() < 1<<20 {
		p.errf(diags, "spec.limits.tmpfs", "give at least 1Mi", "tmpfs size %s is too small", l.Tmpfs.String())
	}
	if p.has("spec.limits.tmpfsInodes") && l.TmpfsInodes < minTmpfsInodes {
		p.errf(diags, "spec.limits.tmpfsInodes", fmt.Sprintf("give at least %d, or omit it for one per 16Ki of limits.tmpfs", minTmpfsInodes),
			"tmpfsInodes %d is too small: the run dir needs inodes for HOME, out and the files hookbox writes there", l.TmpfsInodes)
	}
	if l.Output.Set && l.Output.Value() < minOutputBytes {
		p.errf(diags, "spec.limits.output", "give at least 4Ki, or omit it for the default 64Mi", "output cap %s is too small", l.Output.String())
	}
	if l.CPUs.Set && l.CPUs.MilliValue() < 10 {
		p.errf(diags, "spec.limits.cpus", "give at least 10m", "cpu limit %s is too small", l.CPUs.String())
	}
}

func (p *Parsed) validateScript(diags *diagnostics, def *engineDef) {
	s := &p.Spawn.Spec
	if s.Engine.Kind != "scripted" {
		if len(s.Engine.Script) > 0 || p.has("spec.engine.script") {
			p.errf(diags, "spec.engine.script", "remove it, or use engine kind scripted", "only the scripted engine takes a script")
		}
		return
	}
	if len(s.Engine.Script) == 0 {
		p.errf(diags, "spec.engine.script", "add steps, e.g. script: [{print: hello}, {exit: 0}]", "the scripted engine needs a script")
	}
	hooks := map[string]bool{}
	for _, h := range s.Hooks {
		hooks[h.Name] = true
	}
	tools := map[string]bool{}
	for _, t := range s.Tools {
		tools[t] = true
	}
	envNames := map[string]bool{}
	for _, n := range s.Env.Allow {
		envNames[n] = true
	}
	for n := range s.Env.Set {
		envNames[n] = true
	}
	for _, n := range s.SecretNames() {
		envNames[n] = true
	}
	for i, step := range s.Engine.Script {
		field := fmt.Sprintf("spec.engine.script[%d]", i)
		if n := step.fieldsSet(); n != 1 {
			p.errf(diags, field, "give exactly one of: print, stderr, sleep, write, hook, daemonize, allocate, fork, envHash, exec, probe, exit", "a script step sets %d actions", n)
			continue
		}
		switch {
		case step.Write != nil:
			clean := path.Clean(step.Write.Path)
			inOverlay := s.Workspace.Overlay() && render.Within(clean, render.WorkspaceDir) && clean != render.WorkspaceDir
			if !inOverlay && (!render.Within(clean, render.RunDir) || clean == render.RunDir) {
				p.errf(diags, field+".write.path", "write under /run/hookbox, e.g. /run/hookbox/out/result.txt (or under /workspace with workspace mode overlay)", "%q is outside the writable run dir", step.Write.Path)
			}
		case step.Hook != "":
			if !hooks[step.Hook] {
				p.errf(diags, field+".hook", "declare the hook under spec.hooks", "no hook named %q", step.Hook)
			}
		case len(step.Exec) > 0:
			if !tools[p.hostPath(step.Exec[0])] {
				p.errf(diags, field+".exec[0]", "add it to spec.tools: only declared programs exist in the container", "%s is not a declared tool", step.Exec[0])
			}
		case step.EnvHash != "":
			if !envNames[step.EnvHash] {
				p.errf(diags, field+".envHash", "declare it in env.allow, env.set or secrets", "%s is not in the container environment", step.EnvHash)
			}
		case step.Probe != nil:
			for j, pp := range step.Probe.Paths {
				if !path.IsAbs(pp) {
					p.errf(diags, fmt.Sprintf("%s.probe.paths[%d]", field, j), "give an absolute container path, e.g. /run/hookbox", "%q is not absolute", pp)
				}
			}
		case step.Fork != nil:
			if step.Fork.Count <= 0 {
				p.errf(diags, field+".fork.count", "give a positive count", "fork count must be positive")
			}
		}
	}
}

// fieldsSet counts the actions a script step sets.
func (s ScriptStep) fieldsSet() int {
	n := 0
	for _, set := range []bool{s.Print != nil, s.Stderr != "", s.Sleep.Set, s.Write != nil, s.Hook != "",
		s.Daemonize != nil, s.Allocate.Set, s.Fork != nil, s.EnvHash != "", len(s.Exec) > 0, s.Probe != nil, s.Exit != nil} {
		if set {
			n++
		}
	}
	return n
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// checkHostDir refuses, at compile time, a directory to mount that is
// missing, a file, or a symlink (a mount follows a link to wherever it
// points when the run starts, not where the spec says).
func (p *Parsed) checkHostDir(diags *diagnostics, field, dir string) {
	if p.lstat == nil {
		return
	}
	fi, err := p.lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		p.errf(diags, field, "create the directory, or fix the path (a relative path is relative to the spec file)", "%s does not exist", dir)
	case err != nil:
		p.errf(diags, field, "check the path and its permissions", "%s: %v", dir, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		p.errf(diags, field, "give the directory the link points to", "%s is a symlink; hookbox mounts directories, not links", dir)
	case !fi.IsDir():
		p.errf(diags, field, "give a directory: a file cannot be the workspace or a grant", "%s is a file, not a directory", dir)
	}
}

// checkHostProgram refuses, at compile time, a program the spec names that
// is not one: a directory, a device or socket, or a file other users may not
// both read and execute. Programs are copied into the runfiles store and
// run in the container as ContainerUID, which is never the store's owner:
// it gets what other users of the host get (runfiles keeps a file's
// restrictions, see the runfiles package doc), so a private program could
// not run there, and hookbox never makes one readable to others. Package
// trees an engine profile adds are directories resolved by hookbox, not
// named here. A program missing on this host is left to the runfiles
// stage: a plan-only render (for Kubernetes) may name another host's.
func (p *Parsed) checkHostProgram(diags *diagnostics, field, prog string) {
	if p.stat == nil {
		return
	}
	fi, err := p.stat(prog)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		p.errf(diags, field, "check the path and its permissions", "%s: %v", prog, err)
	case fi.IsDir():
		p.errf(diags, field, "name the executable file itself, not a directory: hookbox copies programs and what they need",
			"%s is a directory, not a program", prog)
	case !fi.Mode().IsRegular():
		p.errf(diags, field, "name an executable regular file", "%s is a %v, not a program", prog, fi.Mode().Type())
	case fi.Mode().Perm()&0o005 != 0o005:
		p.errf(diags, field, "name a program every user of this host may read and run (mode o+rx, e.g. 0755): hookbox never carries into a container a file whose mode keeps other users out",
			"%s (mode %04o) is not readable and executable by other users; the container runs it as uid %d, which gets only what other users get", prog, fi.Mode().Perm(), ContainerUID)
	}
}
