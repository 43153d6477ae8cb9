package anthropic

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"hookbox.dev/hookbox/internal/testapi/clitest"
	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/internal/testnet"
)

const commitSubject = "the subject the agent reads"

// agentScript makes Claude Code read the last commit's subject with Bash,
// write it to out.md with Write, and finish.
func agentScript(dir string) Script {
	return Script{
		{ToolUse: &ToolUse{Name: "Bash", Input: map[string]string{"command": "git log -1 --format=%s", "description": "show the last commit"}}},
		{Text: "Writing it down.", ToolUse: &ToolUse{Name: "Write", Input: map[string]string{"file_path": filepath.Join(dir, "out.md"), "content": "# Last commit\n"}}},
		{Text: "The last commit is recorded in out.md."},
	}
}

// runClaude runs the real CLI in dir with env added to a fresh HOME and
// PATH, and returns its result event (the last line of stream-json).
func runClaude(t *testing.T, dir string, env ...string) map[string]any {
	t.Helper()
	env = append(append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "ANTHROPIC_API_KEY=test-key"}, QuietEnv...), env...)
	out := clitest.Run(t, dir, env, ClaudeEngine, "-p", "Write the last commit's subject to out.md.",
		"--output-format", "stream-json", "--verbose", "--allowedTools", "Bash Write", "--max-turns", "5")
	var result map[string]any
	for line := range bytes.Lines(out) {
		var ev map[string]any
		if json.Unmarshal(line, &ev) == nil && ev["type"] == "result" {
			result = ev
		}
	}
	if result["subtype"] != "success" || result["is_error"] != false {
		t.Fatalf("claude's result: %v\nstdout:\n%s", result, out)
	}
	return result
}

// checkAgentLoop checks the server saw the script played to the end, with
// the commit subject coming back as the first call's tool_result, and that
// the file the agent wrote exists.
func checkAgentLoop(t *testing.T, srv *Server, dir string) {
	t.Helper()
	reqs := srv.ModelRequests()
	if len(reqs) != 3 {
		t.Fatalf("%d model requests, want one per scripted turn (3)", len(reqs))
	}
	result, ok := reqs[1].ToolResult(ToolUseID(0))
	if !ok || result.IsError || !strings.Contains(result.Content.Text(), commitSubject) {
		t.Errorf("second request's tool_result for the git log call: %+v (found %v), want the commit subject", result, ok)
	}
	if result, ok := reqs[2].ToolResult(ToolUseID(1)); !ok || result.IsError {
		t.Errorf("third request's tool_result for the Write call: %+v (found %v)", result, ok)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "out.md")); err != nil || string(b) != "# Last commit\n" {
		t.Errorf("out.md: %q, %v", b, err)
	}
	for _, r := range srv.Requests() {
		if r.Messages != nil && !r.HasAPIKey {
			t.Errorf("model request without an API key")
		}
		if r.Messages == nil && r.Path != "/" {
			t.Errorf("request beyond the model API: %s %s", r.Method, r.Path)
		}
	}
}

// TestRealClaudeAgainstScriptedAPI runs the real Claude Code CLI on the
// host against the scripted API on loopback. HTTP(S)_PROXY points at a
// proxy that refuses and records everything, so any request the CLI makes
// beyond its model API (NO_PROXY) is seen and goes nowhere.
func TestRealClaudeAgainstScriptedAPI(t *testing.T) {
	testenv.Require(t, ClaudeInstalled, clitest.GitInstalled)
	dir := clitest.GitRepo(t, commitSubject)
	srv, base := StartLoopback(t, agentScript(dir))
	proxy, proxied := clitest.RecordingProxy(t, "")
	runClaude(t, dir, "ANTHROPIC_BASE_URL="+base,
		"HTTP_PROXY="+proxy, "HTTPS_PROXY="+proxy, "NO_PROXY=127.0.0.1")
	checkAgentLoop(t, srv, dir)
	if lines := proxied(); len(lines) != 0 {
		t.Errorf("Claude Code tried to reach other hosts:\n%s", strings.Join(lines, "\n"))
	}
}

// TestRealClaudeThroughProxy runs the real CLI against the scripted API on
// a test host, reached only through a forward proxy on loopback: the CLI
// sends it absolute-form requests (no CONNECT for an http base URL) and
// nothing else.
func TestRealClaudeThroughProxy(t *testing.T) {
	testenv.Require(t, ClaudeInstalled, clitest.GitInstalled)
	dir := clitest.GitRepo(t, commitSubject)
	host := testnet.NewHost(t)
	srv, base := Start(t, host.Listen(t, 0), agentScript(dir))
	apiHost := strings.TrimPrefix(base, "http://")
	proxy, proxied := clitest.RecordingProxy(t, apiHost)
	runClaude(t, dir, "ANTHROPIC_BASE_URL="+base, "HTTP_PROXY="+proxy, "HTTPS_PROXY="+proxy)
	checkAgentLoop(t, srv, dir)
	lines := proxied()
	want := "POST http://" + apiHost + "/v1/messages?beta=true HTTP/1.1"
	if len(lines) != 3 {
		t.Errorf("proxy saw %d requests, want the 3 model requests:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if l != want {
			t.Errorf("proxy saw %q, want %q", l, want)
		}
	}
}
