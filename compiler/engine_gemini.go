package compiler

import (
	"path"

	"hookbox.dev/hookbox/render"
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
	{kind: flagRepeat, name: "--add-dir", value: grantArgs},
}

func init() {
	registerEngine(&engineDef{
		kind:        "gemini",
		prompt:      promptRequired,
		hooks:       &hookStyle{events: geminiEvents, toolEvents: geminiToolEvents, shell: "bash"},
		modelEffort: true,
		// With GEMINI_API_KEY the @google/genai client of 0.61.0 uses
		// https://generativelanguage.googleapis.com/ (measured: CONNECT
		// generativelanguage.googleapis.com:443, and play.googleapis.com:443
		// for usage statistics, which an allowlist without it refuses).
		// GOOGLE_GEMINI_BASE_URL (gateway auth) and GOOGLE_VERTEX_BASE_URL
		// (Vertex AI) replace that base URL.
		modelAPI:   fixedHosts("generativelanguage.googleapis.com:443"),
		baseURLEnv: []string{"GOOGLE_GEMINI_BASE_URL", "GOOGLE_VERTEX_BASE_URL"},
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
	if len(c.spec.Hooks) > 0 {
		return c.addGeminiSettings()
	}
	return nil
}

func (c *compilation) addGeminiSettings() error {
	type handler struct {
		Type    string `json:"type"`
		Name    string `json:"name"`
		Command string `json:"command"`
		Timeout int64  `json:"timeout,omitempty"` // milliseconds
	}
	content, err := c.hookSettings(func(h *Hook) any {
		_, command := c.hookChain(h)
		return handler{Type: "command", Name: h.Name, Command: command, Timeout: h.Timeout.Milliseconds()}
	})
	if err != nil {
		return err
	}
	c.addFile(geminiSettingsPath, 0o644, content)
	return nil
}
