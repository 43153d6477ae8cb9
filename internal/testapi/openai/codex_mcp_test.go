package openai

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"hookbox.dev/hookbox/compiler"
	"hookbox.dev/hookbox/internal/testapi/clitest"
	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/render"
)

// mcpToken is the MCP server's env value: a quotation mark, a backslash and
// a dollar sign, so that a TOML quoting slip would show.
const mcpToken = `tok"en\ $HOME`

// TestRealCodexLoadsCompiledMCPConfig runs the real Codex CLI with what
// hookbox compiles for an explicit MCP set: the render's argv (only
// -C /workspace pointed at a host repository) and its files, seeded into
// CODEX_HOME as the container has them under /run/hookbox/codex.
//
// The spec's server has env, so config.toml holds it; --strict-config makes
// Codex validate that file on its own, where an env table without its
// server's transport fails to load ("invalid transport"). The server is a
// shell that writes its env value down and exits without speaking MCP;
// Codex carries on without it and runs the one scripted turn.
//
// The workspace's own .codex/config.toml declares a stdio and a remote
// server, which the render disables by name. Codex reads that file only
// for a trusted project, so each case runs once untrusted (the default:
// the disables stand alone and must still be complete servers) and once
// with --trust (they merge with the workspace's servers, of the same kind).
// The workspace's stdio server would leave a file behind if it started.
func TestRealCodexLoadsCompiledMCPConfig(t *testing.T) {
	testenv.Require(t, CodexInstalled, clitest.GitInstalled)
	for name, trust := range map[string][]string{"untrusted workspace": nil, "trusted workspace": {"--trust"}} {
		t.Run(name, func(t *testing.T) { runCodexMCPConfig(t, trust) })
	}
}

func runCodexMCPConfig(t *testing.T, extraArgs []string) {
	dir := clitest.GitRepo(t, commitSubject)
	srv, base := StartLoopback(t, Script{{Text: "Done."}})
	marker := filepath.Join(t.TempDir(), "mcp-token")
	started := filepath.Join(t.TempDir(), "workspace-server-started")
	if err := os.Mkdir(filepath.Join(dir, ".codex"), 0o755); err != nil {
		t.Fatal(err)
	}
	workspaceConfig := "[mcp_servers.theirs]\ncommand = \"/usr/bin/touch\"\nargs = [" + strconv.Quote(started) + "]\n" +
		"[mcp_servers.remote]\nurl = \"http://127.0.0.1:9/mcp\"\n"
	if err := os.WriteFile(filepath.Join(dir, ".codex", "config.toml"), []byte(workspaceConfig), 0o644); err != nil {
		t.Fatal(err)
	}

	args := append([]string{"--strict-config"}, QuietArgs...)
	r := compileCodexSpec(t, map[string]any{
		"engine": map[string]any{
			"kind": "codex", "path": CodexEngine, "baseURL": base + "/v1", "model": CodexModel,
			"args": append(args, extraArgs...),
		},
		"prompt":    "Say done.",
		"workspace": dir,
		"mcpServers": map[string]any{
			"recorder": map[string]any{
				"command": []string{"/bin/sh", "-c", `printf '%s' "$MCP_TOKEN" > "$1"`, "sh", marker},
				"env":     map[string]string{"MCP_TOKEN": mcpToken},
			},
		},
	})
	home := codexHome(t)
	seedCodexHome(t, r, home)
	argv := slices.Clone(r.Engine.Exec.Argv)
	i := slices.Index(argv, "-C")
	if i < 0 || argv[i+1] != render.WorkspaceDir {
		t.Fatalf("the render's argv has no -C %s: %q", render.WorkspaceDir, argv)
	}
	argv[i+1] = dir
	for _, disabled := range []string{"mcp_servers.theirs.enabled=false", "mcp_servers.remote.enabled=false"} {
		if !slices.Contains(argv, disabled) {
			t.Fatalf("the render does not disable the workspace's server (%s): %q", disabled, argv)
		}
	}

	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "CODEX_HOME=" + home, "OPENAI_API_KEY=test-key"}
	out := clitest.Run(t, dir, env, argv...)

	var completed bool
	for line := range bytes.Lines(out) {
		var ev struct{ Type string }
		if json.Unmarshal(line, &ev) == nil && ev.Type == "turn.completed" {
			completed = true
		}
	}
	if !completed {
		t.Errorf("no turn.completed event in codex's output:\n%s", out)
	}
	if n := len(srv.ModelRequests()); n != 1 {
		t.Errorf("%d model requests, want 1", n)
	}
	if got, err := os.ReadFile(marker); err != nil || string(got) != mcpToken {
		t.Errorf("the MCP server's env value from config.toml: %q, %v; want %q", got, err, mcpToken)
	}
	if _, err := os.Stat(started); err == nil {
		t.Error("the workspace's own MCP server started; the render disables it")
	}
}

// compileCodexSpec compiles one spawn whose spec is spec (as JSON, which
// is YAML) through the compiler, reading workspace files from the host.
func compileCodexSpec(t *testing.T, spec map[string]any) *render.Render {
	t.Helper()
	data, err := json.Marshal(map[string]any{
		"apiVersion": "hookbox.dev/v1alpha1", "kind": "Spawn", "metadata": map[string]string{"name": "mcp"}, "spec": spec,
	})
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := compiler.Parse(data, "mcp.yaml", t.TempDir(), os.ReadFile)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	renders, err := compiler.CompileAll(parsed)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return renders[0]
}

// seedCodexHome writes the render's files, all under the container's
// CODEX_HOME, into home with their modes.
func seedCodexHome(t *testing.T, r *render.Render, home string) {
	t.Helper()
	containerHome := render.RunDir + "/codex/"
	if got := envOf(r, "CODEX_HOME"); got+"/" != containerHome {
		t.Fatalf("the render's CODEX_HOME is %q, want %s", got, containerHome)
	}
	for _, f := range r.Files {
		rel, ok := strings.CutPrefix(f.Path, containerHome)
		if !ok {
			t.Fatalf("render file %s is outside CODEX_HOME", f.Path)
		}
		if err := os.WriteFile(filepath.Join(home, rel), []byte(f.Content), os.FileMode(f.Mode)); err != nil {
			t.Fatalf("seeding CODEX_HOME: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(home, "config.toml")); err != nil {
		t.Fatalf("the render seeds no config.toml for a server with env: %v", err)
	}
}

func envOf(r *render.Render, name string) string {
	for _, e := range r.Process.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}
