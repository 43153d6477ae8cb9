package compiler

import (
	"slices"
	"strings"
	"testing"

	"hookbox.dev/hookbox/render"
)

// compileSpec compiles one spawn from YAML text (paths absolute, so no
// files are needed) and fails the test on any error.
func compileSpec(t *testing.T, spec string) *render.Render {
	t.Helper()
	r, err := tryCompile(spec)
	if err != nil {
		t.Fatalf("compile:\n%s\n%v", spec, err)
	}
	return r
}

func tryCompile(spec string) (*render.Render, error) {
	parsed, err := Parse([]byte(spec), "test.yaml", "/specs", func(string) ([]byte, error) { return nil, errNoFiles })
	if err != nil {
		return nil, err
	}
	renders, err := CompileAll(parsed)
	if err != nil {
		return nil, err
	}
	return renders[0], nil
}

var errNoFiles = &SpecError{Diagnostics: []Diagnostic{{Message: "no files in this test"}}}

// spawnYAML builds a spec from an engine block and extra spec lines.
func spawnYAML(engine string, extra ...string) string {
	return "apiVersion: hookbox.dev/v1alpha1\nkind: Spawn\nmetadata: {name: t}\nspec:\n  engine: " + engine +
		"\n  workspace: /ws\n" + strings.Join(extra, "\n") + "\n"
}

func TestFlagKinds(t *testing.T) {
	yes, no := true, false
	table := flagTable{
		{kind: flagValue, name: "--value", value: constant("v")},
		{kind: flagValue, name: "--empty-value", value: constant("")},
		{kind: flagBool, name: "--on", value: always},
		{kind: flagBool, name: "--off", value: func(*compilation) any { return false }},
		{kind: flagBoolPair, name: "--pair-true", negated: "--no-pair-true", value: func(*compilation) any { return &yes }},
		{kind: flagBoolPair, name: "--pair-false", negated: "--no-pair-false", value: func(*compilation) any { return &no }},
		{kind: flagBoolPair, name: "--pair-unset", negated: "--no-pair-unset", value: func(*compilation) any { return (*bool)(nil) }},
		{kind: flagListArgs, name: "--list", value: func(*compilation) any { return []string{"a", "b"} }},
		{kind: flagListArgs, name: "--empty-list", value: func(*compilation) any { return []string(nil) }},
		{kind: flagJSONValue, name: "--json", value: func(*compilation) any { return map[string]any{"b": 1, "a": []string{"x"}} }},
		{kind: flagJSONValue, name: "--no-json", value: func(*compilation) any { return nil }},
		{kind: flagRepeat, name: "--rep", value: func(*compilation) any { return []string{"1", "2"} }},
		{kind: flagRepeat, name: "--empty-rep", value: func(*compilation) any { return []string{} }},
	}
	got, err := table.argv(&compilation{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--value", "v", "--on", "--pair-true", "--no-pair-false", "--list", "a", "b",
		"--json", `{"a":["x"],"b":1}`, "--rep", "1", "--rep", "2"}
	if !slices.Equal(got, want) {
		t.Errorf("argv\n got %q\nwant %q", got, want)
	}
	bad := flagTable{{kind: flagValue, name: "--x", value: func(*compilation) any { return 3 }}}
	if _, err := bad.argv(&compilation{}); err == nil {
		t.Error("a value flag with a non-string value must be an error")
	}
}

func TestEngineArgv(t *testing.T) {
	cases := []struct {
		name  string
		spec  string
		argv  []string
		cwd   string
		stdin string
	}{
		{
			name: "claude minimal",
			spec: spawnYAML("{kind: claude, path: /opt/claude}", "  prompt: hi"),
			argv: []string{"/opt/claude", "-p", "--output-format", "stream-json", "--verbose", "--include-hook-events", "--", "hi"},
			cwd:  "/workspace",
		},
		{
			name: "claude full",
			spec: spawnYAML("{kind: claude, path: /opt/claude, model: claude-opus-4-7, effort: xhigh, args: [--permission-mode, plan]}",
				"  prompt: \"-rf everything\"", "  addDirs: [/a/docs, /b/docs]",
				"  hooks: [{name: h, event: Stop, argv: [/opt/h]}]",
				"  mcpServers: {gh: {url: 'https://example.invalid/mcp'}}"),
			argv: []string{"/opt/claude", "-p", "--output-format", "stream-json", "--verbose", "--include-hook-events",
				"--model", "claude-opus-4-7", "--effort", "xhigh", "--settings", "/hookbox/etc/claude-settings.json",
				"--mcp-config", `{"mcpServers":{"gh":{"type":"http","url":"https://example.invalid/mcp"}}}`, "--strict-mcp-config",
				"--add-dir", "/grants/docs", "/grants/docs-2", "--permission-mode", "plan", "--", "-rf everything"},
			cwd: "/workspace",
		},
		{
			name: "claude mcp explicit empty",
			spec: spawnYAML("{kind: claude, path: /opt/claude}", "  prompt: hi", "  mcpServers: {}"),
			argv: []string{"/opt/claude", "-p", "--output-format", "stream-json", "--verbose", "--include-hook-events",
				"--mcp-config", `{"mcpServers":{}}`, "--strict-mcp-config", "--", "hi"},
			cwd: "/workspace",
		},
		{
			name: "claude mcp with credentials goes to a file",
			spec: spawnYAML("{kind: claude, path: /opt/claude}", "  prompt: hi", "  mcpServers: {gh: {command: [/opt/gh-mcp], env: {TOKEN_FILE: /run/t}}}"),
			argv: []string{"/opt/claude", "-p", "--output-format", "stream-json", "--verbose", "--include-hook-events",
				"--mcp-config", "/hookbox/etc/claude-mcp.json", "--strict-mcp-config", "--", "hi"},
			cwd: "/workspace",
		},
		{
			name: "codex",
			spec: spawnYAML("{kind: codex, path: /opt/codex, model: gpt-5.2, effort: max, args: [--skip-git-repo-check]}", "  prompt: fix it"),
			argv: []string{"/opt/codex", "exec", "--json", "-m", "gpt-5.2", "-c", `model_reasoning_effort="xhigh"`, "-C", "/workspace",
				"--disable", "shell_snapshot", "--skip-git-repo-check", "--", "fix it"},
			cwd: "/run/hookbox/home",
		},
		{
			name: "codex mcp and hooks",
			spec: spawnYAML("{kind: codex, path: /opt/codex}", "  prompt: fix it",
				"  mcpServers: {docs: {command: [/opt/docs, --stdio, 'a \"q\"']}, web: {url: 'https://x.invalid', headers: {Authorization: Bearer-x}}}",
				"  hooks: [{name: h, event: PreToolUse, matcher: shell, argv: [/opt/h, two words]}]"),
			argv: []string{"/opt/codex", "exec", "--json", "-C", "/workspace",
				"-c", `mcp_servers.docs.command="/opt/docs"`, "-c", `mcp_servers.docs.args=["--stdio", "a \"q\""]`,
				"-c", `mcp_servers.web.url="https://x.invalid"`, "--dangerously-bypass-hook-trust", "--disable", "shell_snapshot", "--", "fix it"},
			cwd: "/run/hookbox/home",
		},
		{
			name:  "gemini",
			spec:  spawnYAML("{kind: gemini, path: /opt/gemini, model: gemini-3-pro, effort: low}", "  prompt: look", "  addDirs: [/d/x]"),
			argv:  []string{"/opt/gemini", "--output-format", "json", "--skip-trust", "-m", "gemini-3-pro-low", "--include-directories", "/run/hookbox/out", "--include-directories", "/grants/x", "--prompt", "look"},
			cwd:   "/workspace",
			stdin: "/dev/null",
		},
		{
			name: "pi",
			spec: spawnYAML("{kind: pi, path: /opt/pi, model: claude-sonnet-4-6, effort: ultra}", "  prompt: summarize"),
			argv: []string{"/opt/pi", "-p", "--mode", "json", "--provider", "anthropic", "--model", "claude-sonnet-4-6", "--thinking", "xhigh", "summarize"},
			cwd:  "/workspace",
		},
		{
			name: "pi ambiguous model has no provider",
			spec: spawnYAML("{kind: pi, path: /opt/pi, model: llama-4-maverick}", "  prompt: summarize"),
			argv: []string{"/opt/pi", "-p", "--mode", "json", "--model", "llama-4-maverick", "summarize"},
			cwd:  "/workspace",
		},
		{
			name: "exec verbatim",
			spec: spawnYAML("{kind: exec, path: /usr/bin/env, args: ['', -u, 'a b', '$HOME', '*']}"),
			argv: []string{"/usr/bin/env", "", "-u", "a b", "$HOME", "*"},
			cwd:  "/workspace",
		},
		{
			name: "scripted",
			spec: spawnYAML("{kind: scripted, path: /opt/scripted, script: [{print: hi}, {exit: 3}]}"),
			argv: []string{"/opt/scripted", "--script", "/hookbox/etc/script.json"},
			cwd:  "/workspace",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := compileSpec(t, tc.spec)
			if !slices.Equal(r.Engine.Exec.Argv, tc.argv) || r.Engine.Exec.Path != tc.argv[0] {
				t.Errorf("engine exec\n got %+v\nwant argv %q", r.Engine.Exec, tc.argv)
			}
			// The process is hookbox-init running that argv.
			initArgv := append([]string{render.InitPath}, tc.argv...)
			if !slices.Equal(r.Process.Argv, initArgv) || r.Init == nil || r.Init.Path != render.InitPath || !slices.Equal(r.Init.Argv, initArgv) {
				t.Errorf("process argv %q, init %+v: want the init, then the engine's argv", r.Process.Argv, r.Init)
			}
			if r.Process.Cwd != tc.cwd {
				t.Errorf("cwd %q, want %q", r.Process.Cwd, tc.cwd)
			}
			if r.Process.Stdin != "/dev/null" {
				t.Errorf("stdin %q, want /dev/null", r.Process.Stdin)
			}
		})
	}
}

func TestCodexWorkspaceNotWorkingDirectory(t *testing.T) {
	r := compileSpec(t, spawnYAML("{kind: codex, path: /opt/codex}", "  prompt: x"))
	if r.Process.Cwd == render.WorkspaceDir {
		t.Fatal("codex gets -C /workspace; its working directory must not also be /workspace")
	}
	if i := slices.Index(r.Process.Argv, "-C"); i < 0 || r.Process.Argv[i+1] != "/workspace" {
		t.Fatalf("codex needs -C /workspace: %q", r.Process.Argv)
	}
	home := envValue(r, "CODEX_HOME")
	if !strings.HasPrefix(home, render.RunDir+"/") || strings.HasPrefix(home, "/tmp") {
		t.Errorf("CODEX_HOME %q must be under /run/hookbox and never /tmp", home)
	}
}

func envValue(r *render.Render, name string) string {
	for _, e := range r.Process.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func fileContent(r *render.Render, path string) (render.File, bool) {
	for _, f := range r.Files {
		if f.Path == path {
			return f, true
		}
	}
	return render.File{}, false
}

func TestMCPUnsetVersusEmpty(t *testing.T) {
	for _, engine := range []string{"claude", "codex"} {
		unset := compileSpec(t, spawnYAML("{kind: "+engine+", path: /opt/e}", "  prompt: x"))
		empty := compileSpec(t, spawnYAML("{kind: "+engine+", path: /opt/e}", "  prompt: x", "  mcpServers: {}"))
		if slices.Equal(unset.Process.Argv, empty.Process.Argv) && engine == "claude" {
			t.Errorf("%s: unset and explicit-empty MCP give the same argv %q", engine, unset.Process.Argv)
		}
		for _, arg := range unset.Process.Argv {
			if strings.Contains(arg, "mcp") {
				t.Errorf("%s: unset MCP must leave the engine to its own discovery, got %q", engine, arg)
			}
		}
	}
	// Codex: exclusivity disables the workspace's own servers by name.
	parsed, err := Parse([]byte(spawnYAML("{kind: codex, path: /opt/codex}", "  prompt: x", "  mcpServers: {mine: {url: 'https://m.invalid'}}")),
		"t.yaml", "/specs", func(name string) ([]byte, error) {
			if name == "/ws/.codex/config.toml" {
				return []byte("[mcp_servers.github]\ncommand = \"gh\"\n[mcp_servers.github.env]\nX = \"1\"\n[mcp_servers.\"mine\"]\nurl = \"x\"\n[mcp_servers.remote]\nurl = \"https://r\"\n[other]\n"), nil
			}
			return nil, errNoFiles
		})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Compile(parsed[0])
	if err != nil {
		t.Fatal(err)
	}
	// A disable stands alone when Codex does not load the workspace's file
	// (an untrusted project), so it carries a placeholder transport.
	for _, want := range []string{"mcp_servers.github.enabled=false", `mcp_servers.github.command="disabled-by-hookbox"`,
		"mcp_servers.remote.enabled=false", `mcp_servers.remote.url="http://disabled-by-hookbox.invalid"`} {
		if !slices.Contains(r.Process.Argv, want) {
			t.Errorf("codex must disable the workspace's own servers with %s: %q", want, r.Process.Argv)
		}
	}
	if slices.Contains(r.Process.Argv, "mcp_servers.mine.enabled=false") {
		t.Errorf("codex must not disable a server the spec declares: %q", r.Process.Argv)
	}
}

func TestCodexMCPConfig(t *testing.T) {
	cases := []struct {
		name    string
		servers string
		argv    []string // the MCP overrides, each after a -c
		config  string   // config.toml; "" for no file
	}{
		{
			name:    "no credentials: overrides only",
			servers: "{docs: {command: [/opt/docs]}, web: {url: 'https://w.invalid/mcp'}}",
			argv:    []string{`mcp_servers.docs.command="/opt/docs"`, `mcp_servers.docs.args=[]`, `mcp_servers.web.url="https://w.invalid/mcp"`},
		},
		{
			name:    "env: the server whole in the file, its transport also an override",
			servers: "{docs: {command: [/opt/docs, --stdio], env: {LEVEL: '2'}}}",
			argv:    []string{`mcp_servers.docs.command="/opt/docs"`, `mcp_servers.docs.args=["--stdio"]`},
			config:  "[mcp_servers.docs]\ncommand = \"/opt/docs\"\nargs = [\"--stdio\"]\n[mcp_servers.docs.env]\n\"LEVEL\" = \"2\"\n",
		},
		{
			name:    "headers, quoted",
			servers: `{web: {url: 'https://w.invalid/"q"', headers: {X-Key: 'a"b\c'}}, plain: {url: 'https://p.invalid'}}`,
			argv:    []string{`mcp_servers.plain.url="https://p.invalid"`, `mcp_servers.web.url="https://w.invalid/\"q\""`},
			config:  "[mcp_servers.web]\nurl = \"https://w.invalid/\\\"q\\\"\"\n[mcp_servers.web.http_headers]\n\"X-Key\" = \"a\\\"b\\\\c\"\n",
		},
		{
			name:    "env with a newline",
			servers: `{s: {command: [/opt/s, 'two words'], env: {B: "x\ny", A: '1'}}}`,
			argv:    []string{`mcp_servers.s.command="/opt/s"`, `mcp_servers.s.args=["two words"]`},
			config:  "[mcp_servers.s]\ncommand = \"/opt/s\"\nargs = [\"two words\"]\n[mcp_servers.s.env]\n\"A\" = \"1\"\n\"B\" = \"x\\ny\"\n",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := compileSpec(t, spawnYAML("{kind: codex, path: /opt/codex}", "  prompt: x", "  mcpServers: "+tc.servers))
			var got []string
			for i, arg := range r.Engine.Exec.Argv {
				if arg == "-c" && strings.HasPrefix(r.Engine.Exec.Argv[i+1], "mcp_servers.") {
					got = append(got, r.Engine.Exec.Argv[i+1])
				}
			}
			if !slices.Equal(got, tc.argv) {
				t.Errorf("MCP overrides\n got %q\nwant %q", got, tc.argv)
			}
			f, ok := fileContent(r, "/run/hookbox/codex/config.toml")
			if ok != (tc.config != "") || f.Content != tc.config {
				t.Errorf("config.toml (present %v)\n got %q\nwant %q", ok, f.Content, tc.config)
			}
			if ok && f.Mode != 0o600 {
				t.Errorf("config.toml mode %o, want 0600", f.Mode)
			}
		})
	}
}

func TestCodexWorkspaceServers(t *testing.T) {
	cases := []struct {
		name, config string
		want         []codexWorkspaceServer
	}{
		{"none", "model = \"x\"\n[other]\nurl = \"u\"\n", nil},
		{"stdio and remote, sorted", "[mcp_servers.web]\nurl = \"https://w\"\n[mcp_servers.gh]\ncommand = \"gh\"\n",
			[]codexWorkspaceServer{{name: "gh"}, {name: "web", remote: true}}},
		{"quoted header and key", "[mcp_servers.\"q\"]\n  \"url\" = \"x\"\n", []codexWorkspaceServer{{name: "q", remote: true}}},
		{"url in a sub-table is not the transport", "[mcp_servers.s]\ncommand = \"s\"\n[mcp_servers.s.env]\nurl = \"not a transport\"\n",
			[]codexWorkspaceServer{{name: "s"}}},
		{"sub-table first, then the server's own", "[mcp_servers.r.http_headers]\nA = \"1\"\n[mcp_servers.r]\nurl = \"x\"\n",
			[]codexWorkspaceServer{{name: "r", remote: true}}},
		{"url after the table ends", "[mcp_servers.s]\ncommand = \"s\"\n[profiles.p]\nurl = \"x\"\n", []codexWorkspaceServer{{name: "s"}}},
		{"mismatched quotes ignored", "[mcp_servers.\"bad]\nurl = \"x\"\n", nil},
		{"url_like key is not url", "[mcp_servers.s]\nurl_extra = 1\ncommand = \"s\"\n", []codexWorkspaceServer{{name: "s"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := codexWorkspaceServers([]byte(tc.config)); !slices.Equal(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func FuzzCodexWorkspaceServers(f *testing.F) {
	f.Add([]byte("[mcp_servers.a]\nurl = \"x\"\n[mcp_servers.b.env]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		servers := codexWorkspaceServers(data)
		for i, s := range servers {
			if !mcpName.MatchString(s.name) || (i > 0 && servers[i-1].name >= s.name) {
				t.Fatalf("servers %+v: names must be usable config keys, sorted and unique", servers)
			}
		}
	})
}

func TestMCPCredentialsNeverOnArgv(t *testing.T) {
	const token = "Bearer-hbx-header-value"
	for _, engine := range []string{"claude", "codex"} {
		r := compileSpec(t, spawnYAML("{kind: "+engine+", path: /opt/e}", "  prompt: x",
			"  mcpServers: {web: {url: 'https://w.invalid', headers: {Authorization: "+token+"}}, local: {command: [/opt/l], env: {LEVEL: hbx-env-value}}}"))
		for _, arg := range r.Process.Argv {
			if strings.Contains(arg, token) || strings.Contains(arg, "hbx-env-value") {
				t.Errorf("%s: MCP credentials on argv: %q", engine, arg)
			}
		}
		found := false
		for _, f := range r.Files {
			if strings.Contains(f.Content, token) {
				found = true
				if f.Mode != 0o600 {
					t.Errorf("%s: credentials file %s has mode %o, want 0600", engine, f.Path, f.Mode)
				}
			}
		}
		if !found {
			t.Errorf("%s: the server headers must be in a 0600 file", engine)
		}
	}
}

func TestPromptRefusals(t *testing.T) {
	for _, tc := range []struct {
		engine, prompt string
		refused        bool
	}{
		{"pi", "-v please", true},
		{"pi", "@file.md summarize", true},
		{"pi", "summarize -v", false},
		{"gemini", "-x", true},
		{"gemini", "@ mention is fine for gemini", false},
		{"claude", "-rf is fine after --", false},
		{"codex", "-rf is fine after --", false},
	} {
		_, err := tryCompile(spawnYAML("{kind: "+tc.engine+", path: /opt/e}", "  prompt: '"+tc.prompt+"'"))
		if (err != nil) != tc.refused {
			t.Errorf("%s with prompt %q: refused=%v, want %v (%v)", tc.engine, tc.prompt, err != nil, tc.refused, err)
		}
		if err != nil && !strings.Contains(err.Error(), "test.yaml:") {
			t.Errorf("refusal must carry file:line:col: %v", err)
		}
	}
}

func TestGeminiWorkingDirectoryAndStdin(t *testing.T) {
	r := compileSpec(t, spawnYAML("{kind: gemini, path: /opt/gemini}", "  prompt: x", "  addDirs: [/data]"))
	if r.Process.Cwd != render.WorkspaceDir || r.Process.Stdin != "/dev/null" {
		t.Errorf("gemini: cwd %q stdin %q, want /workspace and /dev/null", r.Process.Cwd, r.Process.Stdin)
	}
	for i, arg := range r.Process.Argv {
		if arg == "--include-directories" && !strings.HasPrefix(r.Process.Argv[i+1], "/") {
			t.Errorf("gemini resolves relative --include-directories against its cwd; hookbox must pass absolute paths: %q", r.Process.Argv)
		}
	}
	if r.Engine.StreamsEarly || r.Limits.FirstOutputMS != 0 || r.Limits.IdleMS != 0 {
		t.Errorf("gemini prints only at the end: no first-output or idle watchdog, got %+v", r.Limits)
	}
}

func TestStreamsEarly(t *testing.T) {
	for engine, want := range map[string]bool{"claude": true, "codex": true, "gemini": false, "pi": false, "exec": false} {
		extra := "  prompt: x"
		if engine == "exec" {
			extra = ""
		}
		r := compileSpec(t, spawnYAML("{kind: "+engine+", path: /opt/e}", extra))
		if r.Engine.StreamsEarly != want {
			t.Errorf("%s: streams_early %v, want %v", engine, r.Engine.StreamsEarly, want)
		}
		if want && (r.Limits.FirstOutputMS == 0 || r.Limits.IdleMS == 0) {
			t.Errorf("%s streams early: watchdogs need defaults, got %+v", engine, r.Limits)
		}
	}
}
