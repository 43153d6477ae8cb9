package gemini

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"hookbox.dev/hookbox/internal/testapi/clitest"
	"hookbox.dev/hookbox/internal/testenv"
)

const commitSubject = "the subject the agent reads"

// agentScript makes Gemini CLI read the last commit's subject with
// run_shell_command, write answer.md with write_file, and finish.
func agentScript(dir string) Script {
	return Script{
		{Call: &Call{Name: "run_shell_command", Args: map[string]string{"command": "git log -1 --format=%s"}}},
		{Text: "Writing it down.", Call: &Call{Name: "write_file", Args: map[string]string{"file_path": filepath.Join(dir, "answer.md"), "content": "# Last commit\n"}}},
		{Text: "The last commit is recorded in answer.md."},
	}
}

// TestRealGeminiAgainstScriptedAPI runs the real Gemini CLI on the host
// against the scripted API on loopback. HTTP(S)_PROXY points at a proxy
// that refuses and records everything, so any request the CLI makes beyond
// its model API (NO_PROXY) is seen and goes nowhere.
func TestRealGeminiAgainstScriptedAPI(t *testing.T) {
	testenv.Require(t, GeminiInstalled, clitest.GitInstalled)
	dir := clitest.GitRepo(t, commitSubject)
	srv, base := StartLoopback(t, agentScript(dir))
	proxy, proxied := clitest.RecordingProxy(t, "")
	home := t.TempDir()
	if err := os.Mkdir(filepath.Join(home, ".gemini"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".gemini", "settings.json"), []byte(QuietSettings), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "GEMINI_API_KEY=test-key", "GOOGLE_GEMINI_BASE_URL=" + base},
		clitest.ProxyEnv(proxy)...)
	argv := append([]string{GeminiEngine, "-p", "Write the last commit's subject to answer.md."}, QuietArgs...)
	out := clitest.Run(t, dir, env, argv...)

	var result struct {
		Response string
		Error    any
	}
	if err := json.Unmarshal(out, &result); err != nil || result.Error != nil || result.Response != "The last commit is recorded in answer.md." {
		t.Errorf("gemini's result %+v (%v):\n%s", result, err, out)
	}
	reqs := srv.ModelRequests()
	if len(reqs) != 3 {
		t.Fatalf("%d model requests, want one per scripted turn (3)", len(reqs))
	}
	if got, ok := reqs[1].FunctionResponse(CallID(0)); !ok || got.Name != "run_shell_command" || !strings.Contains(string(got.Response), commitSubject) {
		t.Errorf("second request's response to the shell call: %+v (found %v), want the commit subject", got, ok)
	}
	if got, ok := reqs[2].FunctionResponse(CallID(1)); !ok || got.Name != "write_file" {
		t.Errorf("third request's response to the write_file call: %+v (found %v)", got, ok)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "answer.md")); err != nil || string(b) != "# Last commit\n" {
		t.Errorf("answer.md: %q, %v", b, err)
	}
	for _, r := range srv.Requests() {
		if r.Generate == nil {
			t.Errorf("request beyond the model API: %s %s", r.Method, r.Path)
			continue
		}
		if !r.HasAPIKey || r.Model != GeminiModel || r.Action != "streamGenerateContent" || r.RawQuery != "alt=sse" {
			t.Errorf("model request %s %s?%s (API key sent: %v), want a streamed one for %s with a key", r.Method, r.Path, r.RawQuery, r.HasAPIKey, GeminiModel)
		}
	}
	if lines := proxied(); len(lines) != 0 {
		t.Errorf("Gemini CLI tried to reach other hosts:\n%s", strings.Join(lines, "\n"))
	}
}
