package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"hookbox.dev/hookbox/egress"
	"hookbox.dev/hookbox/internal/testapi/anthropic"
	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/internal/testnet"
	"hookbox.dev/hookbox/launcher"
)

// apiPort is where the scripted model API listens on its test host.
const apiPort = 8080

// readNetwork reads a run record's network.jsonl.
func readNetwork(t *testing.T, res *launcher.Result) []egress.Attempt {
	t.Helper()
	f, err := os.Open(filepath.Join(res.RecordDir, launcher.NetworkFile))
	if err != nil {
		t.Fatalf("network record: %v", err)
	}
	defer f.Close()
	var out []egress.Attempt
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var a egress.Attempt
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatalf("network.jsonl line %q: %v", sc.Text(), err)
		}
		out = append(out, a)
	}
	return out
}

// gitWorkspace makes a workspace that is a git repository with one commit.
func gitWorkspace(t *testing.T, dir, subject string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("A small project under review.\n"), 0o644)
	for _, args := range [][]string{
		{"init", "-q"},
		{"-c", "user.name=t", "-c", "user.email=t@example.invalid", "add", "README.md"},
		{"-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", subject},
	} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
}

// claudeEgressSpec writes a spec for the real Claude Code against the
// scripted API at base, allowed by its IP entry and nothing else.
func (e *env) claudeEgressSpec(t *testing.T, name, base, allow string, tools ...string) string {
	t.Helper()
	var env strings.Builder
	for _, kv := range anthropic.QuietEnv {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&env, "      %s: %q\n", k, v)
	}
	spec := fmt.Sprintf(`apiVersion: hookbox.dev/v1alpha1
kind: Spawn
metadata: {name: %s}
spec:
  engine:
    kind: claude
    path: %s
    args: [--allowedTools, "Bash,Write,Read", --max-turns, "8"]
  prompt: Read README.md, show the last commit with git, and write a review to /run/hookbox/out/review.md.
  workspace: ./ws
  tools: [%s]
  hooks:
    - {name: pre-bash, event: PreToolUse, matcher: Bash, argv: [/usr/bin/touch, /run/hookbox/out/pre-bash], required: true}
  env:
    set:
      ANTHROPIC_BASE_URL: %q
      GIT_CONFIG_COUNT: "1"
      GIT_CONFIG_KEY_0: safe.directory
      GIT_CONFIG_VALUE_0: "*"
%s  secrets: [ANTHROPIC_API_KEY]
  network:
    allow: [%q]
  limits: {timeout: 2m, memory: 2Gi}
  artifacts: [review.md, pre-bash]
`, name, anthropic.ClaudeEngine, strings.Join(tools, ", "), base, env.String(), allow)
	file := filepath.Join(e.specDir, name+".yaml")
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestEgressRealClaude: the real Claude Code in a hookbox container reaches
// a scripted Anthropic API on a test host through the egress proxy and
// nothing else. The model reads a workspace file, runs git through its
// Bash tool (a PreToolUse hook fires), and writes a review; the run
// completes with a confirmed verdict and network.jsonl holds exactly the
// API's requests.
func TestEgressRealClaude(t *testing.T) {
	testenv.RequireIntegration(t, anthropic.ClaudeInstalled)
	e := newEnv(t)
	gitWorkspace(t, filepath.Join(e.specDir, "ws"), "Add the review pipeline")
	h := testnet.NewHost(t)
	api, base := anthropic.Start(t, h.Listen(t, apiPort), anthropic.Script{
		{ToolUse: &anthropic.ToolUse{Name: "Read", Input: map[string]string{"file_path": "/workspace/README.md"}}},
		{ToolUse: &anthropic.ToolUse{Name: "Bash", Input: map[string]string{"command": "git -C /workspace log -1 --format=%s", "description": "show the last commit"}}},
		{Text: "Writing the review.", ToolUse: &anthropic.ToolUse{Name: "Write", Input: map[string]string{"file_path": "/run/hookbox/out/review.md", "content": "# Review\n\nLooks fine.\n"}}},
		{Text: "The review is in /run/hookbox/out/review.md."},
	})
	addr := fmt.Sprintf("%s:%d", h.Addr(), apiPort)
	spec := e.claudeEgressSpec(t, "egress-claude", base, addr, "/usr/bin/git", "/usr/bin/bash")
	e.extraEnv = append(e.extraEnv, "ANTHROPIC_API_KEY=test-key")
	r := e.run(spec)
	res := r.mustResult(t)
	if res.Status != launcher.StatusCompleted || r.code != 0 {
		t.Fatalf("status %s exit %d (%v)\n%s", res.Status, r.code, res.Reasons, r.stderr)
	}
	for _, a := range res.Artifacts {
		if a.Status != "found" {
			t.Errorf("artifact %s: %s", a.Declared, a.Status)
		}
	}
	if res.Trace.Status != "confirmed" {
		t.Errorf("verdict %s %v %+v", res.Trace.Status, res.Trace.Reasons, res.Trace.Diffs)
	}
	reqs := api.ModelRequests()
	if len(reqs) < 4 {
		t.Fatalf("the API saw %d model requests, want the 4 scripted turns", len(reqs))
	}
	if got, ok := reqs[2].ToolResult(anthropic.ToolUseID(1)); !ok || !strings.Contains(got.Content.Text(), "Add the review pipeline") {
		t.Errorf("git's output did not reach the model: %+v %v", got, ok)
	}
	attempts := readNetwork(t, res)
	if len(attempts) != len(api.Requests()) {
		t.Errorf("network.jsonl has %d attempts, the API saw %d requests", len(attempts), len(api.Requests()))
	}
	for _, a := range attempts {
		if a.Decision != egress.DecisionAllowed || fmt.Sprintf("%s:%d", a.Host, a.Port) != addr {
			t.Errorf("unexpected attempt %+v", a)
		}
	}
	if n := res.Network; n == nil || n.Mode != "allowlist" || n.Refused != 0 || n.Allowed != int64(len(attempts)) {
		t.Errorf("result network section %+v", n)
	}
}

// TestEgressRefusesWhatIsNotAllowed: the model runs curl to a host that is
// not on the list. The proxy refuses and records it; the run ends normally.
func TestEgressRefusesWhatIsNotAllowed(t *testing.T) {
	testenv.RequireIntegration(t, anthropic.ClaudeInstalled)
	e := newEnv(t)
	gitWorkspace(t, filepath.Join(e.specDir, "ws"), "initial")
	h := testnet.NewHost(t)
	_, base := anthropic.Start(t, h.Listen(t, apiPort), anthropic.Script{
		{ToolUse: &anthropic.ToolUse{Name: "Bash", Input: map[string]string{"command": "curl -sS -m 10 https://example.com/ || echo refused", "description": "fetch a page"}}},
		{Text: "Done.", ToolUse: &anthropic.ToolUse{Name: "Write", Input: map[string]string{"file_path": "/run/hookbox/out/review.md", "content": "no network\n"}}},
		{Text: "Finished."},
	})
	addr := fmt.Sprintf("%s:%d", h.Addr(), apiPort)
	spec := e.claudeEgressSpec(t, "egress-refused", base, addr, "/usr/bin/curl", "/usr/bin/bash")
	e.extraEnv = append(e.extraEnv, "ANTHROPIC_API_KEY=test-key")
	r := e.run(spec)
	res := r.mustResult(t)
	if res.Status != launcher.StatusCompleted {
		t.Fatalf("status %s (%v)\n%s", res.Status, res.Reasons, r.stderr)
	}
	var refused []egress.Attempt
	for _, a := range readNetwork(t, res) {
		if a.Decision == egress.DecisionRefused {
			refused = append(refused, a)
		}
	}
	if len(refused) != 1 || refused[0].Host != "example.com" || refused[0].Port != 443 || refused[0].Reason != egress.ReasonNotAllowed || refused[0].Resolved != "" {
		t.Errorf("want one refused CONNECT example.com:443 (not-allowed, never resolved), got %+v", refused)
	}
	if res.Network == nil || res.Network.Refused != 1 {
		t.Errorf("result network section %+v", res.Network)
	}
}
