package compiler

import (
	"bufio"
	"bytes"
	"path"
	"regexp"
	"slices"
	"strings"

	"hookbox.dev/hookbox/internal/toml"
	"hookbox.dev/hookbox/render"
)

// Codex CLI: `codex exec --json … -C /workspace -- PROMPT`. The workspace is
// given with -C and the working directory is NOT set to it (the CLI would
// resolve /workspace/workspace). CODEX_HOME lives in the tmpfs run dir (the
// CLI refuses one under /tmp and writes into it); hooks.json and, when MCP
// servers carry env or headers, a 0600 config.toml are seeded there. Codex
// runs hooks as `/bin/bash -c "<command>"`, so hookbox generates the command
// string with exact POSIX quoting.
//
// MCP servers: every server's transport (command and args, or url) is a -c
// override, the top layer, so a same-named server in a trusted workspace's
// .codex/config.toml cannot replace it. Env and headers never go on argv: a
// server that has them is also written whole (transport and its env or
// http_headers table) to config.toml. Codex 0.171.0 validates every config
// file on its own under --strict-config and the merged config always, so
// every mcp_servers entry, in the file and in the -c layer, names its
// transport: an env table alone fails with "invalid transport".

var codexHome = path.Join(render.RunDir, "codex")

var codexEvents = []string{
	"PermissionRequest", "PostCompact", "PostToolUse", "PreCompact", "PreToolUse",
	"SessionStart", "Stop", "SubagentStart", "SubagentStop", "UserPromptSubmit",
}

var codexToolEvents = []string{"PermissionRequest", "PostToolUse", "PreToolUse"}

var codexFlags = flagTable{
	{kind: flagBool, name: "--json", value: always},
	{kind: flagValue, name: "-m", value: model},
	{kind: flagValue, name: "-c", value: func(c *compilation) any {
		if c.r.Engine.Effort == "" {
			return ""
		}
		return "model_reasoning_effort=" + toml.Quote(c.r.Engine.Effort)
	}},
	{kind: flagValue, name: "-C", value: constant(render.WorkspaceDir)},
	{kind: flagRepeat, name: "-c", value: codexMCPOverrides},
	{kind: flagBool, name: "--dangerously-bypass-hook-trust", value: func(c *compilation) any {
		// hookbox generated and pinned these hooks in the render; Codex's
		// interactive trust prompt cannot be answered in a headless run.
		return len(c.spec.Hooks) > 0
	}},
}

func init() {
	registerEngine(&engineDef{
		kind:         "codex",
		streamsEarly: true,
		prompt:       promptRequired,
		hooks:        &hookStyle{events: codexEvents, toolEvents: codexToolEvents},
		profiles:     codexProfiles,
		mcp:          true,
		modelEffort:  true,
		reservedEnv:  []string{"CODEX_HOME"},
		// Measured with 0.171.0 and an API key: model traffic (Responses
		// over HTTPS and WebSocket) goes to api.openai.com only; chatgpt.com
		// is the ChatGPT-login base URL and, with an API key, only serves the
		// curated-plugins sync, which fails harmlessly. The binary ignores
		// OPENAI_BASE_URL (measured: still api.openai.com); its base URL is
		// the openai_base_url config key, so there is no variable to check.
		modelAPI: fixedHosts("api.openai.com:443"),
		baseURL:  codexBaseURL,
		build:    buildCodex,
	})
}

// codexProfiles: measured in a hookbox container (docs/engines.md). Codex
// finds bash on PATH and runs hooks as `<path> -c <command>`. Its shell tool
// re-execs Codex itself (/proc/self/exe --codex-run-as-process-setup …) to
// set up the process, which then execs `<bash> -lc <command>`. Its shell
// snapshot (a `bash -lc <script>` at start and a 38 KB wrapper script
// around every command, over the tracer's argv cap) is turned off, so every
// command's exec is visible whole. It runs git on its own (a tool like any
// other) and looks for codex-code-mode-host and codex-path/rg next to its
// binary; lsb_release and getconf are looked up and, absent, skipped.
var codexProfiles = []*engineProfile{{
	version:   "0.171.0",
	hookShell: &shellRule{name: "bash", argv0: argv0Path},
	toolShell: &shellRule{name: "bash", argv0: argv0Path, forms: [][]string{{"-lc", freeArg}, {"-c", freeArg}}},
	execs: []profileExec{{
		name: "process-setup", path: "/proc/self/exe",
		argv: []string{"/proc/self/exe", "--codex-run-as-process-setup"}, rest: true, engineBinary: true,
	}},
	siblings: []string{"codex-code-mode-host", "../codex-path/rg"},
	args:     []string{"--disable", "shell_snapshot"},
}}

// codexProvider is the model provider hookbox defines for engine.baseURL.
const codexProvider = "hookbox"

// codexBaseURL defines a Responses API provider at url whose key is
// OPENAI_API_KEY, and selects it (config overrides, so CODEX_HOME stays
// hookbox's).
func codexBaseURL(c *compilation, url string) error {
	key := "model_providers." + codexProvider + "."
	c.baseURLArgs = append(c.baseURLArgs,
		"-c", key+"name="+toml.Quote(codexProvider),
		"-c", key+"base_url="+toml.Quote(url),
		"-c", key+"wire_api="+toml.Quote("responses"),
		"-c", key+"env_key="+toml.Quote("OPENAI_API_KEY"),
		"-c", "model_provider="+toml.Quote(codexProvider))
	return nil
}

func buildCodex(c *compilation) error {
	if e := c.spec.Engine.Effort; e != "" {
		clamped, changed := codexEffort(c.spec.Engine.Model, e)
		c.r.Engine.RequestedEffort = e
		c.r.Engine.Effort = clamped
		if changed {
			c.note("effort %s clamped to %s: the ceiling of model %s", e, clamped, c.spec.Engine.Model)
		}
	}
	flags, err := codexFlags.argv(c)
	if err != nil {
		return err
	}
	argv := append([]string{c.spec.Engine.Path, "exec"}, flags...)
	argv = append(argv, c.baseURLArgs...)
	argv = append(argv, c.userArgs()...)
	argv = append(argv, "--", c.p.Prompt)
	c.r.Process.Argv = argv
	c.r.Process.Cwd = render.HomeDir
	c.setEnv("CODEX_HOME", render.EnvHookbox, codexHome)

	if len(c.spec.Hooks) > 0 {
		if err := c.addCodexHooks(); err != nil {
			return err
		}
	}
	if c.spec.MCPServers != nil {
		if toml := codexCredentialsTOML(*c.spec.MCPServers); toml != "" {
			c.addFile(path.Join(codexHome, "config.toml"), 0o600, toml)
		}
		if len(*c.spec.MCPServers) == 0 {
			c.note("mcpServers is explicitly empty: no MCP server is configured, and the workspace's own servers are disabled by name")
		}
	}
	return nil
}

// codexMCPOverrides are the -c overrides for an explicit MCP set. An empty
// override merges rather than replaces, so exclusivity means disabling by
// name every server the workspace's .codex/config.toml declares
// (CODEX_HOME is hookbox's own, so it declares none of its own). Codex
// loads that file only for a trusted project (never by default; `--trust`
// among the args), and a disable with no transport under it fails the
// whole config, so each disable carries a placeholder transport of the
// server's own kind: a command for a stdio server, a url for a remote one
// (a mismatch is also an error once the workspace's file loads).
func codexMCPOverrides(c *compilation) any {
	servers := c.spec.MCPServers
	if servers == nil {
		return []string(nil)
	}
	var out []string
	for _, name := range sortedKeys(*servers) {
		for _, kv := range codexTransport((*servers)[name]) {
			out = append(out, "mcp_servers."+name+"."+kv[0]+"="+kv[1])
		}
	}
	for _, ws := range c.p.workspaceCodexServers {
		if _, ours := (*servers)[ws.name]; ours {
			continue
		}
		key := "mcp_servers." + ws.name + "."
		placeholder := key + "command=" + toml.Quote(codexDisabledCommand)
		if ws.remote {
			placeholder = key + "url=" + toml.Quote(codexDisabledURL)
		}
		out = append(out, key+"enabled=false", placeholder)
	}
	return out
}

// The placeholder transports of disabled workspace servers: never started,
// named so that the render says why they are there.
const (
	codexDisabledCommand = "disabled-by-hookbox"
	codexDisabledURL     = "http://disabled-by-hookbox.invalid"
)

// codexTransport is a server's transport keys with their TOML values:
// command and args for a stdio server, url for a remote one.
func codexTransport(s MCPServer) [][2]string {
	if len(s.Command) > 0 {
		return [][2]string{{"command", toml.Quote(s.Command[0])}, {"args", toml.QuoteArray(s.Command[1:])}}
	}
	return [][2]string{{"url", toml.Quote(s.URL)}}
}

// codexCredentialsTOML defines in full every server that has env or
// headers, which never go on argv; "" when none has.
func codexCredentialsTOML(servers map[string]MCPServer) string {
	var b strings.Builder
	for _, name := range sortedKeys(servers) {
		s := servers[name]
		if len(s.Env) == 0 && len(s.Headers) == 0 {
			continue
		}
		b.WriteString("[mcp_servers." + name + "]\n")
		for _, kv := range codexTransport(s) {
			b.WriteString(kv[0] + " = " + kv[1] + "\n")
		}
		for _, table := range []struct {
			suffix string
			values map[string]string
		}{{"env", s.Env}, {"http_headers", s.Headers}} {
			if len(table.values) == 0 {
				continue
			}
			b.WriteString("[mcp_servers." + name + "." + table.suffix + "]\n")
			for _, k := range sortedKeys(table.values) {
				b.WriteString(toml.Quote(k) + " = " + toml.Quote(table.values[k]) + "\n")
			}
		}
	}
	return b.String()
}

func (c *compilation) addCodexHooks() error {
	type handler struct {
		Type    string `json:"type"`
		Command string `json:"command"`
		Timeout int64  `json:"timeout,omitempty"` // seconds
	}
	return c.addHookSettings(path.Join(codexHome, "hooks.json"), func(h *Hook) hookHandler {
		_, command := c.hookChain(h)
		return shellFormHandler(h, handler{Type: "command", Command: command, Timeout: int64(h.Timeout.Seconds())})
	})
}

// codexWorkspaceServer is an MCP server a workspace's .codex/config.toml
// declares: its name, and whether it is remote (a url in its table).
type codexWorkspaceServer struct {
	name   string
	remote bool
}

var (
	codexServerTable = regexp.MustCompile(`^\s*\[\s*mcp_servers\.("?)([A-Za-z0-9_-]+)("?)\s*([\].])`)
	codexTableHeader = regexp.MustCompile(`^\s*\[`)
	codexURLKey      = regexp.MustCompile(`^\s*("?)url("?)\s*=`)
)

// codexWorkspaceServers lists the MCP servers a workspace's
// .codex/config.toml declares, from its table headers, sorted by name. A
// server is remote when its own [mcp_servers.NAME] table sets url.
func codexWorkspaceServers(data []byte) []codexWorkspaceServer {
	var servers []codexWorkspaceServer
	current := -1 // index of the server whose own table the line is in
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if codexTableHeader.MatchString(line) {
			current = -1
			m := codexServerTable.FindStringSubmatch(line)
			if m == nil || m[1] != m[3] {
				continue
			}
			i := slices.IndexFunc(servers, func(s codexWorkspaceServer) bool { return s.name == m[2] })
			if i < 0 {
				servers = append(servers, codexWorkspaceServer{name: m[2]})
				i = len(servers) - 1
			}
			if m[4] == "]" {
				current = i
			}
			continue
		}
		if m := codexURLKey.FindStringSubmatch(line); current >= 0 && m != nil && m[1] == m[2] {
			servers[current].remote = true
		}
	}
	slices.SortFunc(servers, func(a, b codexWorkspaceServer) int { return strings.Compare(a.name, b.name) })
	return servers
}
