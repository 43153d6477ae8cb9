package compiler

import (
	"path"
	"slices"

	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/canonjson"
)

// Antigravity (Gemini) CLI: headless `--output-format json` emits one JSON
// object at the end, so only the overall timeout applies. It resolves
// relative --add-dir against its working directory, so the working directory
// is the workspace (hookbox passes absolute grant paths anyway); stdin is
// /dev/null. It has no effort flag: effort is a tier suffix of the model name.
// Hooks run as `bash -c "<command>"`, configured in the user settings file
// under HOME, which lives in the tmpfs run dir.

var geminiSettingsPath = path.Join(render.HomeDir, ".gemini", "settings.json")

var geminiEvents = []string{
	"AfterAgent", "AfterModel", "AfterTool", "BeforeAgent", "BeforeModel", "BeforeTool",
	"BeforeToolSelection", "Notification", "PreCompress", "SessionEnd", "SessionStart",
}

var geminiToolEvents = []string{"AfterTool", "BeforeTool"}

var geminiFlags = flagTable{
	{kind: flagValue, name: "--output-format", value: constant("json")},
	// 0.61.0 exits 55 in a workspace it has not been told to trust, and a
	// headless run cannot answer its prompt. hookbox chose the workspace
	// and mounts it read-only, so the session trusts it.
	{kind: flagBool, name: "--skip-trust", value: always},
	{kind: flagValue, name: "-m", value: func(c *compilation) any { return c.r.Engine.Model }},
	// 0.61.0 has no --add-dir (yargs ignores it silently): its file tools
	// reach the workspace and --include-directories only, so the run dir's
	// out/ (where artifacts go) is included with the grants.
	{kind: flagRepeat, name: "--include-directories", value: func(c *compilation) any {
		return append([]string{render.OutDir}, c.grantPaths()...)
	}},
}

func init() {
	registerEngine(&engineDef{
		kind:        "gemini",
		prompt:      promptRequired,
		hooks:       &hookStyle{events: geminiEvents, toolEvents: geminiToolEvents},
		profiles:    geminiProfiles,
		reservedEnv: []string{"GEMINI_CLI_NO_RELAUNCH", "NODE_OPTIONS"},
		modelEffort: true,
		// With GEMINI_API_KEY the @google/genai client of 0.61.0 uses
		// https://generativelanguage.googleapis.com/ (measured: CONNECT
		// generativelanguage.googleapis.com:443, and play.googleapis.com:443
		// for usage statistics, which an allowlist without it refuses).
		// GOOGLE_GEMINI_BASE_URL (gateway auth) and GOOGLE_VERTEX_BASE_URL
		// (Vertex AI) replace that base URL.
		modelAPI:   fixedHosts("generativelanguage.googleapis.com:443"),
		baseURLEnv: []string{"GOOGLE_GEMINI_BASE_URL", "GOOGLE_VERTEX_BASE_URL"},
		baseURL: func(c *compilation, url string) error {
			c.setEnv("GOOGLE_GEMINI_BASE_URL", render.EnvHookbox, url)
			return nil
		},
		check: func(p *Parsed, diags *diagnostics) {
			// The prompt is the value of --prompt; a leading '-' would be read
			// as an option.
			refuseOptionLikePrompt(p, diags, "-")
			if s := p.Spawn.Spec.Engine; s.Effort != "" && s.Model == "" {
				p.errf(diags, "spec.engine.effort", "set engine.model (e.g. gemini-3.1-pro), or remove effort",
					"the gemini engine takes effort as a model-name suffix, and no model is set")
			}
		},
		build: buildGemini,
	})
}

// geminiProfiles: measured in a hookbox container (docs/engines.md).
// bundle/gemini.js is `#!/usr/bin/env node` and imports the bundle's
// chunk files, so its package is its runfiles tree. Left alone it relaunches
// itself as `node --max-old-space-size=<half the host's RAM>` (the host's,
// not the container's limit); GEMINI_CLI_NO_RELAUNCH stops that and
// NODE_OPTIONS sizes the heap from limits.memory instead. Hooks and its
// shell tool run through bash found on PATH, spawned by name.
var geminiProfiles = []*engineProfile{{
	version:     "0.61.0",
	hookShell:   &shellRule{name: "bash", argv0: argv0Name},
	toolShell:   &shellRule{name: "bash", argv0: argv0Path, forms: [][]string{{"-c", freeArg}}},
	nodePackage: true,
	env: func(c *compilation) map[string]string {
		return map[string]string{"GEMINI_CLI_NO_RELAUNCH": "true", "NODE_OPTIONS": nodeHeapOptions(c)}
	},
}}

func buildGemini(c *compilation) error {
	s := c.spec.Engine
	name, tier, qualified := geminiModel(s.Model, s.Effort)
	c.r.Engine.Model = name
	if s.Effort != "" {
		c.r.Engine.RequestedEffort = s.Effort
		if qualified {
			c.note("model %s names its tier; effort %s ignored", s.Model, s.Effort)
		} else {
			c.r.Engine.Effort = tier
			if s.Effort == "medium" && tier == "high" {
				c.note("effort medium raised to high: %s has no Medium tier", s.Model)
			}
		}
	}
	flags, err := geminiFlags.argv(c)
	if err != nil {
		return err
	}
	argv := append([]string{s.Path}, flags...)
	argv = append(argv, c.userArgs()...)
	argv = append(argv, "--prompt", c.p.Prompt)
	c.r.Process.Argv = argv
	c.r.Process.Cwd = render.WorkspaceDir
	return c.addGeminiSettings()
}

// geminiUsesAPIKey: the spawn gives the engine GEMINI_API_KEY.
func geminiUsesAPIKey(s *SpawnSpec) bool {
	_, set := s.Env.Set["GEMINI_API_KEY"]
	return set || slices.Contains(s.SecretNames(), "GEMINI_API_KEY") || slices.Contains(s.Env.Allow, "GEMINI_API_KEY")
}

// addGeminiSettings writes the user settings file: the hooks, the auth
// method, and usage statistics off. Headless, 0.61.0 exits 41 unless
// an auth method is selected, even with GEMINI_API_KEY set (and
// GOOGLE_GEMINI_BASE_URL alone selects "gateway", which headless mode
// refuses), so a spawn that gives it an API key selects gemini-api-key.
func (c *compilation) addGeminiSettings() error {
	type handler struct {
		Type    string `json:"type"`
		Name    string `json:"name"`
		Command string `json:"command"`
		Timeout int64  `json:"timeout,omitempty"` // milliseconds
	}
	settings := map[string]any{}
	var slots []render.FileSlot
	if len(c.spec.Hooks) > 0 {
		settings["hooks"], slots = c.hookEvents(render.JSONPointer("hooks"), func(h *Hook) hookHandler {
			_, command := c.hookChain(h)
			return shellFormHandler(h, handler{Type: "command", Name: h.Name, Command: command, Timeout: h.Timeout.Milliseconds()})
		})
	}
	if geminiUsesAPIKey(c.spec) {
		settings["security"] = map[string]any{"auth": map[string]string{"selectedType": "gemini-api-key"}}
	}
	// Usage statistics go to play.googleapis.com whatever the model API
	// is; no spawn asked for them, and an allowlist would refuse them.
	settings["privacy"] = map[string]bool{"usageStatisticsEnabled": false}
	content, err := canonjson.Marshal(settings)
	if err != nil {
		return err
	}
	c.addFile(geminiSettingsPath, 0o644, string(content), slots...)
	return nil
}
