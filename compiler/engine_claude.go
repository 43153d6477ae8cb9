package compiler

import (
	"path"

	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/canonjson"
)

// Claude Code: `claude -p --output-format stream-json --verbose
// --include-hook-events … -- PROMPT`. Hooks go into a generated settings
// file in exec form (command + args), which Claude Code runs without a shell.
// The prompt follows `--` because --add-dir and --mcp-config are variadic.

var (
	claudeSettingsPath = path.Join(render.ConfigDir, "claude-settings.json")
	claudeMCPPath      = path.Join(render.ConfigDir, "claude-mcp.json")
)

// claudeEvents are the hook events of Claude Code 2.1.
var claudeEvents = []string{
	"Notification", "PermissionRequest", "PostToolUse", "PostToolUseFailure", "PreCompact", "PreToolUse",
	"SessionEnd", "SessionStart", "Stop", "StopFailure", "SubagentStart", "SubagentStop", "UserPromptSubmit",
}

var claudeToolEvents = []string{"PermissionRequest", "PostToolUse", "PostToolUseFailure", "PreToolUse"}

var claudeFlags = flagTable{
	{kind: flagBool, name: "-p", value: always},
	{kind: flagValue, name: "--output-format", value: constant("stream-json")},
	{kind: flagBool, name: "--verbose", value: always},
	{kind: flagBool, name: "--include-hook-events", value: always},
	{kind: flagValue, name: "--model", value: model},
	{kind: flagValue, name: "--effort", value: func(c *compilation) any { return c.r.Engine.Effort }},
	{kind: flagValue, name: "--settings", value: func(c *compilation) any {
		if len(c.spec.Hooks) == 0 {
			return ""
		}
		return claudeSettingsPath
	}},
	// Servers without credentials go inline; with env or headers they go to
	// a 0600 file, never on argv (docs/contracts.md §6).
	{kind: flagJSONValue, name: "--mcp-config", value: func(c *compilation) any {
		if c.spec.MCPServers == nil || mcpHasCredentials(*c.spec.MCPServers) {
			return nil
		}
		return claudeMCPConfig(*c.spec.MCPServers)
	}},
	{kind: flagValue, name: "--mcp-config", value: func(c *compilation) any {
		if c.spec.MCPServers == nil || !mcpHasCredentials(*c.spec.MCPServers) {
			return ""
		}
		return claudeMCPPath
	}},
	{kind: flagBool, name: "--strict-mcp-config", value: func(c *compilation) any { return c.spec.MCPServers != nil }},
	{kind: flagListArgs, name: "--add-dir", value: grantArgs},
}

func init() {
	registerEngine(&engineDef{
		kind:          "claude",
		streamsEarly:  true,
		prompt:        promptRequired,
		hooks:         &hookStyle{events: claudeEvents, toolEvents: claudeToolEvents},
		mcp:           true,
		modelEffort:   true,
		selfExecArgv0: []string{"rg"},
		reservedEnv:   []string{"SHELL"},
		profiles:      claudeProfiles,
		modelAPI:      fixedHosts("api.anthropic.com:443"),
		// The bundled SDK client defaults baseURL to ANTHROPIC_BASE_URL;
		// measured with 2.1.197: set, the first CONNECT goes to its host.
		baseURLEnv: []string{"ANTHROPIC_BASE_URL"},
		baseURL: func(c *compilation, url string) error {
			c.setEnv("ANTHROPIC_BASE_URL", render.EnvHookbox, url)
			return nil
		},
		build: buildClaude,
	})
}

// claudeProfiles: measured in a hookbox container (docs/engines.md). Its
// Bash tool looks for zsh, then bash, and starts the one it found as
// `bash -c env`, `bash -c -l <snapshot script>` and, per command,
// `bash -c "source <snapshot> … eval '<command>' …"`, with argv[0] the path
// it found; SHELL pins the choice to the shell the render plans. It runs
// itself as rg (selfExecArgv0) and runs git on its own when git is there
// (a tool like any other). Its IDE probe (/bin/sh -c "ps aux | grep …")
// fails unless /bin/sh is a declared tool.
var claudeProfiles = []*engineProfile{{
	version: "2.1.197",
	toolShell: &shellRule{name: "bash", argv0: argv0Path, env: "SHELL",
		forms: [][]string{{"-c", freeArg}, {"-c", "-l", freeArg}}},
}}

func buildClaude(c *compilation) error {
	if e := c.spec.Engine.Effort; e != "" {
		c.r.Engine.RequestedEffort = e
		c.r.Engine.Effort = claudeEffort(e)
		if c.r.Engine.Effort != e {
			c.note("effort %s mapped to %s: Claude Code accepts low, medium, high, xhigh, max", e, c.r.Engine.Effort)
		}
	}
	flags, err := claudeFlags.argv(c)
	if err != nil {
		return err
	}
	argv := append([]string{c.spec.Engine.Path}, flags...)
	argv = append(argv, c.userArgs()...)
	argv = append(argv, "--", c.p.Prompt)
	c.r.Process.Argv = argv
	if len(c.spec.Hooks) > 0 {
		if err := c.addClaudeSettings(); err != nil {
			return err
		}
	}
	if c.spec.MCPServers != nil && mcpHasCredentials(*c.spec.MCPServers) {
		data, err := canonjson.Marshal(claudeMCPConfig(*c.spec.MCPServers))
		if err != nil {
			return err
		}
		c.addFile(claudeMCPPath, 0o600, string(data))
	}
	return nil
}

// addClaudeSettings writes the hooks in Claude Code's exec form: a hook with
// an args array is exec'd directly (measured with Claude Code 2.1.197), so
// the argv that runs is exactly the spec's (docs/contracts.md §4).
func (c *compilation) addClaudeSettings() error {
	type handler struct {
		Type    string   `json:"type"`
		Command string   `json:"command"`
		Args    []string `json:"args"`
		Timeout int64    `json:"timeout,omitempty"` // seconds
	}
	return c.addHookSettings(claudeSettingsPath, func(h *Hook) hookHandler {
		return execFormHandler(h, handler{Type: "command", Command: h.Argv[0], Args: append([]string{}, h.Argv[1:]...), Timeout: int64(h.Timeout.Seconds())})
	})
}

func mcpHasCredentials(servers map[string]MCPServer) bool {
	for _, s := range servers {
		if len(s.Env) > 0 || len(s.Headers) > 0 {
			return true
		}
	}
	return false
}

// claudeMCPConfig is Claude Code's --mcp-config document. An explicit empty
// set gives {"mcpServers":{}}, which with --strict-mcp-config means no server.
func claudeMCPConfig(servers map[string]MCPServer) map[string]any {
	out := map[string]any{}
	for name, s := range servers {
		entry := map[string]any{}
		if len(s.Command) > 0 {
			entry["type"] = "stdio"
			entry["command"] = s.Command[0]
			entry["args"] = append([]string{}, s.Command[1:]...)
			if len(s.Env) > 0 {
				entry["env"] = s.Env
			}
		} else {
			entry["type"] = "http"
			entry["url"] = s.URL
			if len(s.Headers) > 0 {
				entry["headers"] = s.Headers
			}
		}
		out[name] = entry
	}
	return map[string]any{"mcpServers": out}
}
