package pi

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"hookbox.dev/hookbox/internal/testapi/anthropic"
	"hookbox.dev/hookbox/internal/testapi/clitest"
	"hookbox.dev/hookbox/internal/testenv"
)

const commitSubject = "the subject the agent reads"

// agentScript makes pi read the last commit's subject with bash, write
// answer.md with write, and finish.
func agentScript(dir string) anthropic.Script {
	return anthropic.Script{
		{ToolUse: &anthropic.ToolUse{Name: "bash", Input: map[string]string{"command": "git log -1 --format=%s"}}},
		{Text: "Writing it down.", ToolUse: &anthropic.ToolUse{Name: "write", Input: map[string]string{"path": filepath.Join(dir, "answer.md"), "content": "# Last commit\n"}}},
		{Text: "The last commit is recorded in answer.md."},
	}
}

// TestRealPiAgainstScriptedAPI runs the real pi CLI on the host against
// the scripted Anthropic API on loopback. HTTP(S)_PROXY points at a proxy
// that refuses and records everything, so any request the CLI makes beyond
// its model API (NO_PROXY) is seen and goes nowhere.
func TestRealPiAgainstScriptedAPI(t *testing.T) {
	testenv.Require(t, PiInstalled, clitest.GitInstalled)
	dir := clitest.GitRepo(t, commitSubject)
	srv, base := anthropic.StartLoopback(t, agentScript(dir))
	proxy, proxied := clitest.RecordingProxy(t, "")
	agentDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(agentDir, "models.json"), ModelsJSON(base), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "PI_CODING_AGENT_DIR=" + agentDir, "ANTHROPIC_API_KEY=test-key"},
		QuietEnv...)
	env = append(env, clitest.ProxyEnv(proxy)...)
	argv := append(append([]string{PiEngine}, Args...), "Write the last commit's subject to answer.md.")
	out := clitest.Run(t, dir, env, argv...)

	var ended bool
	for line := range bytes.Lines(out) {
		var ev struct{ Type string }
		if json.Unmarshal(line, &ev) == nil && ev.Type == "agent_end" {
			ended = true
		}
	}
	if !ended {
		t.Errorf("no agent_end event in pi's output:\n%s", out)
	}
	reqs := srv.ModelRequests()
	if len(reqs) != 3 {
		t.Fatalf("%d model requests, want one per scripted turn (3)", len(reqs))
	}
	result, ok := reqs[1].ToolResult(anthropic.ToolUseID(0))
	if !ok || result.IsError || !strings.Contains(result.Content.Text(), commitSubject) {
		t.Errorf("second request's tool_result for the bash call: %+v (found %v), want the commit subject", result, ok)
	}
	if result, ok := reqs[2].ToolResult(anthropic.ToolUseID(1)); !ok || result.IsError {
		t.Errorf("third request's tool_result for the write call: %+v (found %v)", result, ok)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "answer.md")); err != nil || string(b) != "# Last commit\n" {
		t.Errorf("answer.md: %q, %v", b, err)
	}
	for _, r := range srv.Requests() {
		if r.Messages == nil {
			t.Errorf("request beyond the model API: %s %s", r.Method, r.Path)
		} else if !r.HasAPIKey || r.Messages.Model != PiModel {
			t.Errorf("model request for %q (API key sent: %v), want %s with a key", r.Messages.Model, r.HasAPIKey, PiModel)
		}
	}
	if lines := proxied(); len(lines) != 0 {
		t.Errorf("pi tried to reach other hosts:\n%s", strings.Join(lines, "\n"))
	}
}

func TestModelsJSONOverridesTheAnthropicBaseURL(t *testing.T) {
	var got struct {
		Providers map[string]struct{ BaseURL string }
	}
	if err := json.Unmarshal(ModelsJSON("http://127.0.0.1:1"), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Providers) != 1 || got.Providers["anthropic"].BaseURL != "http://127.0.0.1:1" {
		t.Errorf("models.json %+v", got)
	}
}
