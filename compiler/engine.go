package compiler

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"hookbox.dev/hookbox/internal/shellwords"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/canonjson"
)

// engineDef is everything hookbox knows about one engine kind. One file per
// engine defines one of these with its flag table.
type engineDef struct {
	kind string
	// streamsEarly: the engine prints its first output shortly after start,
	// so first-output and idle watchdogs apply (docs/contracts.md §6).
	streamsEarly bool
	// prompt: whether the engine takes a prompt.
	prompt promptRule
	// hooks is nil when the engine runs no hooks hookbox can configure;
	// noHooks then says why and what to do instead.
	hooks   *hookStyle
	noHooks string
	// mcp: the engine takes MCP servers from hookbox.
	mcp bool
	// modelEffort: the engine takes model and effort.
	modelEffort bool
	// reservedEnv are variables hookbox sets for this engine.
	reservedEnv []string
	// selfExecArgv0: argv[0] values under which the engine re-execs itself.
	selfExecArgv0 []string
	// modelAPI returns the HOST:PORT entries the allow entry model-api
	// stands for: where the engine sends model traffic by default. nil or
	// empty: no known provider, and modelAPIHint says what to write instead.
	modelAPI     func(s *SpawnSpec) []string
	modelAPIHint string
	// baseURLEnv are the variables the engine reads to send its model
	// traffic elsewhere; under an allowlist, their host must be allowed.
	baseURLEnv []string
	// check reports engine-specific spec problems (with positions).
	check func(p *Parsed, diags *diagnostics)
	// build fills the render's process (argv, cwd, env) and generated files.
	build func(c *compilation) error
}

type promptRule int

const (
	promptRequired promptRule = iota
	promptOptional
	promptNone
)

// hookStyle says how an engine runs a hook.
type hookStyle struct {
	events     []string
	toolEvents []string // events that take a matcher
	// shell is "" when the engine execs the hook argv directly; otherwise
	// the shell's name (how the engine invokes it: "/bin/bash" or "bash").
	shell string
}

var engines = map[string]*engineDef{}

func registerEngine(def *engineDef) {
	if def.check == nil {
		def.check = func(*Parsed, *diagnostics) {}
	}
	engines[def.kind] = def
}

func engineKinds() []string {
	kinds := sortedKeys(engines)
	return kinds
}

// fixedHosts is a modelAPI that does not depend on the spec.
func fixedHosts(hosts ...string) func(*SpawnSpec) []string {
	return func(*SpawnSpec) []string { return hosts }
}

// hookChain returns the exec chain a hook produces under this engine and,
// for shell engines, the command string hookbox generated.
func (c *compilation) hookChain(h *Hook) (chain []render.Exec, command string) {
	argv := []string(h.Argv)
	var slots []int
	for i, arg := range argv {
		if _, ok := slotName(arg); ok {
			slots = append(slots, i)
		}
	}
	direct := render.Exec{Path: argv[0], Argv: slices.Clone(argv), Slots: slots}
	style := c.def.hooks
	if style.shell == "" {
		return []render.Exec{direct}, ""
	}
	command = shellwords.Join(argv)
	shellPath := c.shellPath(style.shell)
	shell := render.Exec{Path: shellPath, Argv: []string{style.shell, "-c", command}}
	return []render.Exec{shell, direct}, command
}

// shellPath is where the engine's hook shell is in the container: an
// absolute shell name is exec'd as is; a bare name is found on the
// container's PATH among the declared programs.
func (c *compilation) shellPath(name string) string {
	if path.IsAbs(name) {
		return name
	}
	for _, dir := range c.pathDirs {
		candidate := path.Join(dir, name)
		if _, ok := c.programs[candidate]; ok {
			return candidate
		}
	}
	return path.Join("/bin", name)
}

// checkEngineRules applies the rules every engine declares through its
// engineDef (prompt, MCP, model and effort support).
func checkEngineRules(p *Parsed, diags *diagnostics, def *engineDef) {
	s := &p.Spawn.Spec
	switch def.prompt {
	case promptRequired:
		if !p.HasPrompt && !p.has("spec.prompt") && !p.has("spec.promptFile") {
			p.errf(diags, "spec.prompt", "add prompt: \"...\" or promptFile: task.md", "engine %s needs a prompt", def.kind)
		}
	case promptNone:
		if p.has("spec.prompt") || p.has("spec.promptFile") {
			p.errf(diags, "spec.prompt", "remove it and pass what the program needs in engine.args", "engine %s takes no prompt", def.kind)
		}
	}
	if !def.mcp && s.MCPServers != nil {
		p.errf(diags, "spec.mcpServers", "remove mcpServers for this engine", "hookbox does not configure MCP servers for engine %s", def.kind)
	}
	if !def.modelEffort {
		if s.Engine.Model != "" {
			p.errf(diags, "spec.engine.model", "remove it, or pass the program's own flag in engine.args", "engine %s takes no model", def.kind)
		}
		if s.Engine.Effort != "" {
			p.errf(diags, "spec.engine.effort", "remove it, or pass the program's own flag in engine.args", "engine %s takes no effort", def.kind)
		}
	}
}

// refuseOptionLikePrompt refuses prompts an engine would misparse as an
// option (engines without a -- terminator, or with a value flag for the prompt).
func refuseOptionLikePrompt(p *Parsed, diags *diagnostics, leading string) {
	if !p.HasPrompt {
		return
	}
	trimmed := p.Prompt
	if trimmed != "" && strings.ContainsRune(leading, rune(trimmed[0])) {
		field := "spec.prompt"
		if p.Spawn.Spec.PromptFile != "" {
			field = "spec.promptFile"
		}
		p.errf(diags, field, "start the prompt with a word (e.g. \"Task: "+string(trimmed[0])+"...\")",
			"engine %s would read a prompt starting with %q as an option or file reference", p.Spawn.Spec.Engine.Kind, string(trimmed[0]))
	}
}

// userArgs are the spec's extra engine args.
func (c *compilation) userArgs() []string { return slices.Clone(c.spec.Engine.Args) }

// grantArgs are the container paths of addDirs.
func grantArgs(c *compilation) any { return c.grantPaths() }

func model(c *compilation) any { return c.spec.Engine.Model }

// note records a decision the compiler made for the user to see.
func (c *compilation) note(format string, args ...any) {
	c.r.Notes = append(c.r.Notes, fmt.Sprintf(format, args...))
}

// hookSettings builds the hooks document Claude Code, Codex and Gemini
// share: {"hooks": {Event: [{"matcher": M, "hooks": [handler]}]}}, one
// group per hook in declaration order. handler gives the engine-specific
// entry for one hook.
func (c *compilation) hookSettings(handler func(h *Hook) any) (string, error) {
	type group struct {
		Matcher string `json:"matcher,omitempty"`
		Hooks   []any  `json:"hooks"`
	}
	events := map[string][]group{}
	for i := range c.spec.Hooks {
		h := &c.spec.Hooks[i]
		events[h.Event] = append(events[h.Event], group{Matcher: h.Matcher, Hooks: []any{handler(h)}})
	}
	data, err := canonjson.Marshal(map[string]any{"hooks": events})
	return string(data), err
}
