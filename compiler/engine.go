package compiler

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
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
	// profiles are what each known version of the real CLI does beyond
	// its argv (profile.go), oldest first.
	profiles []*engineProfile
	// modelAPI returns the HOST:PORT entries the allow entry model-api
	// stands for: where the engine sends model traffic by default. nil or
	// empty: no known provider, and modelAPIHint says what to write instead.
	modelAPI     func(s *SpawnSpec) []string
	modelAPIHint string
	// baseURLEnv are the variables the engine reads to send its model
	// traffic elsewhere; under an allowlist, their host must be allowed.
	baseURLEnv []string
	// baseURL points the engine at engine.baseURL; nil: the engine takes
	// none.
	baseURL func(c *compilation, url string) error
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
// Whether it uses a shell, and which, is its profile's hookShell.
type hookStyle struct {
	events     []string
	toolEvents []string // events that take a matcher
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
	direct := render.Exec{Path: argv[0], Argv: slices.Clone(argv), Slots: launchSlots(argv)}
	if c.hookShell == "" {
		return []render.Exec{direct}, ""
	}
	command = shellwords.Join(argv)
	shell := render.Exec{Path: c.hookShell, Argv: []string{c.profile.hookShell.argv0Of(c.hookShell), "-c", command}}
	return []render.Exec{shell, direct}, command
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
	if s.Engine.BaseURL != "" {
		if def.baseURL == nil {
			p.errf(diags, "spec.engine.baseURL", "remove it, or pass the program's own setting in engine.args or env.set", "engine %s takes no baseURL", def.kind)
		} else if name, ok := baseURLEnvGiven(s, def); ok {
			p.errf(diags, "spec.engine.baseURL", "give the URL in one place: remove "+name+" from env, or remove engine.baseURL", "engine.baseURL and %s both say where the model API is", name)
		} else if _, _, err := urlDestination(s.Engine.BaseURL); err != nil {
			var refused *entryError
			if errors.As(err, &refused) {
				p.errf(diags, "spec.engine.baseURL", refused.hint, "%s", refused.problem)
			}
		}
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

// userArgs are the profile's flags, then the spec's extra engine args.
func (c *compilation) userArgs() []string {
	var args []string
	if c.profile != nil {
		args = append(args, c.profile.args...)
	}
	return append(args, c.spec.Engine.Args...)
}

// grantArgs are the container paths of addDirs.
func grantArgs(c *compilation) any { return c.grantPaths() }

func model(c *compilation) any { return c.spec.Engine.Model }

// note records a decision the compiler made for the user to see.
func (c *compilation) note(format string, args ...any) {
	c.r.Notes = append(c.r.Notes, fmt.Sprintf(format, args...))
}

// launchSlots are the indices of the launch slot elements of argv.
func launchSlots(argv []string) []int {
	var slots []int
	for i, arg := range argv {
		if name, ok := render.SlotName(arg); ok && slices.Contains(render.LaunchSlots, name) {
			slots = append(slots, i)
		}
	}
	return slots
}

// hookHandler is one hook's entry in an engine's hooks table, and the
// strings in it that hold launch slots (pointers relative to the entry).
type hookHandler struct {
	entry any
	slots []render.FileSlot
}

// execFormHandler: the hook's args array (Claude Code's exec form); each
// slot element is a slot string.
func execFormHandler(h *Hook, entry any) hookHandler {
	out := hookHandler{entry: entry}
	for _, i := range launchSlots(h.Argv) {
		out.slots = append(out.slots, render.FileSlot{Pointer: render.JSONPointer("args", strconv.Itoa(i-1))})
	}
	return out
}

// shellFormHandler: the hook's command string (Codex, Gemini), a slot
// string of shell form when the argv has slots.
func shellFormHandler(h *Hook, entry any) hookHandler {
	out := hookHandler{entry: entry}
	if len(launchSlots(h.Argv)) > 0 {
		out.slots = []render.FileSlot{{Pointer: render.JSONPointer("command"), Shell: true}}
	}
	return out
}

// hookEvents builds the hooks table Claude Code, Codex and Gemini share:
// {Event: [{"matcher": M, "hooks": [handler]}]}, one group per hook in
// declaration order, and the slot strings in it under prefix, the
// pointer of the table in its file. handler gives the engine-specific
// entry for one hook.
func (c *compilation) hookEvents(prefix string, handler func(h *Hook) hookHandler) (any, []render.FileSlot) {
	type group struct {
		Matcher string `json:"matcher,omitempty"`
		Hooks   []any  `json:"hooks"`
	}
	events := map[string][]group{}
	var slots []render.FileSlot
	for i := range c.spec.Hooks {
		h := &c.spec.Hooks[i]
		hh := handler(h)
		at := prefix + render.JSONPointer(h.Event, strconv.Itoa(len(events[h.Event])), "hooks", "0")
		for _, s := range hh.slots {
			slots = append(slots, render.FileSlot{Pointer: at + s.Pointer, Shell: s.Shell})
		}
		events[h.Event] = append(events[h.Event], group{Matcher: h.Matcher, Hooks: []any{hh.entry}})
	}
	return events, slots
}

// addHookSettings writes the document {"hooks": hookEvents(handler)} at p.
func (c *compilation) addHookSettings(p string, handler func(h *Hook) hookHandler) error {
	events, slots := c.hookEvents(render.JSONPointer("hooks"), handler)
	data, err := canonjson.Marshal(map[string]any{"hooks": events})
	if err != nil {
		return err
	}
	c.addFile(p, 0o644, string(data), slots...)
	return nil
}

// baseURLEnvGiven reports a base-URL variable of the engine that the spec
// also gives (env.set, env.allow or secrets).
func baseURLEnvGiven(s *SpawnSpec, def *engineDef) (string, bool) {
	for _, name := range def.baseURLEnv {
		if _, set := s.Env.Set[name]; set || slices.Contains(s.Env.Allow, name) || slices.Contains(s.SecretNames(), name) {
			return name, true
		}
	}
	return "", false
}
