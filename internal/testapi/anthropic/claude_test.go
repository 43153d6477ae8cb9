package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/internal/testnet"
)

var gitInstalled = testenv.Requirement{Name: "git", Check: func() string {
	if _, err := exec.LookPath("git"); err != nil {
		return "no git on PATH (apt-get install git)"
	}
	return ""
}}

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

// gitRepo makes a repository with one commit.
func gitRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q"},
		{"-c", "user.name=test", "-c", "user.email=test@example.invalid", "commit", "-q", "--allow-empty", "-m", commitSubject},
	} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", args[0], err, out)
		}
	}
	return dir
}

// runClaude runs the real CLI in dir with env added to a fresh HOME and
// PATH, and returns its result event (the last line of stream-json).
func runClaude(t *testing.T, dir string, env ...string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ClaudeEngine, "-p", "Write the last commit's subject to out.md.",
		"--output-format", "stream-json", "--verbose", "--allowedTools", "Bash Write", "--max-turns", "5")
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "ANTHROPIC_API_KEY=test-key"}, QuietEnv...)
	cmd.Env = append(cmd.Env, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("claude: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.Bytes())
	}
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
	testenv.Require(t, ClaudeInstalled, gitInstalled)
	dir := gitRepo(t)
	srv, base := StartLoopback(t, agentScript(dir))
	proxy, proxied := recordingProxy(t, "")
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
	testenv.Require(t, ClaudeInstalled, gitInstalled)
	dir := gitRepo(t)
	host := testnet.NewHost(t)
	srv, base := Start(t, host.Listen(t, 0), agentScript(dir))
	apiHost := strings.TrimPrefix(base, "http://")
	proxy, proxied := recordingProxy(t, apiHost)
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

// recordingProxy is a forward proxy on loopback that records each request
// line and forwards absolute-form requests for allowed (host:port) only;
// it refuses CONNECT and every other host with 403. It returns the proxy's
// URL and the lines seen so far.
func recordingProxy(t *testing.T, allowed string) (string, func() []string) {
	var mu sync.Mutex
	var lines []string
	forward := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.Out.URL, pr.Out.Host = pr.In.URL, pr.In.Host },
		Transport: &http.Transport{}, // no proxy of its own, whatever the environment says
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		lines = append(lines, r.Method+" "+r.RequestURI+" "+r.Proto)
		mu.Unlock()
		if r.Method == http.MethodConnect || r.URL.Scheme != "http" || r.URL.Host != allowed || allowed == "" {
			http.Error(w, "refused by the test's proxy", http.StatusForbidden)
			return
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), lines...)
	}
}
