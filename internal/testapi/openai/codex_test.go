package openai

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"hookbox.dev/hookbox/internal/testapi/clitest"
	"hookbox.dev/hookbox/internal/testenv"
)

const commitSubject = "the subject the agent reads"

// agentScript makes Codex read the last commit's subject with
// exec_command, write answer.md with apply_patch, and finish.
var agentScript = Script{
	{Call: &Call{Name: "exec_command", Arguments: map[string]any{"cmd": "git log -1 --format=%s", "tty": false}}},
	{Text: "Writing it down.", Custom: &CustomCall{Name: "apply_patch", Input: "*** Begin Patch\n*** Add File: answer.md\n+# Last commit\n*** End Patch\n"}},
	{Text: "The last commit is recorded in answer.md."},
}

// codexHome is a fresh CODEX_HOME outside /tmp: under /tmp Codex 0.171.0
// refuses to create its helper links (codex-linux-sandbox, apply_patch in
// CODEX_HOME/tmp/arg0-linux), warns on stderr, and carries on without them.
func codexHome(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "hookbox-codex-home-")
	if err != nil {
		t.Fatalf("making CODEX_HOME: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestRealCodexAgainstScriptedAPI runs the real Codex CLI on the host
// against the scripted API on loopback. HTTP(S)_PROXY points at a proxy
// that refuses and records everything, so any request the CLI makes beyond
// its model API (NO_PROXY) is seen and goes nowhere.
//
// codex exec's default sandbox is read-only, which rejects the
// apply_patch call; the task needs workspace-write (each tool call then
// runs under codex-linux-sandbox and the bundled bwrap, which need user
// namespaces) or no sandbox at all, as in a container that is itself the
// sandbox. Both are run.
func TestRealCodexAgainstScriptedAPI(t *testing.T) {
	testenv.Require(t, CodexInstalled, clitest.GitInstalled)
	for name, sandbox := range map[string]string{
		"workspace-write": "--sandbox=workspace-write",
		"no-sandbox":      "--dangerously-bypass-approvals-and-sandbox",
	} {
		t.Run(name, func(t *testing.T) { runCodexTask(t, sandbox) })
	}
}

// runCodexTask runs agentScript through the real CLI with the given
// sandbox flag and checks the agent loop and that nothing else was
// contacted.
func runCodexTask(t *testing.T, sandbox string) {
	dir := clitest.GitRepo(t, commitSubject)
	srv, base := StartLoopback(t, agentScript)
	proxy, proxied := clitest.RecordingProxy(t, "")
	env := append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "CODEX_HOME=" + codexHome(t), "OPENAI_API_KEY=test-key"},
		clitest.ProxyEnv(proxy)...)
	argv := append([]string{CodexEngine, "exec", "--json", "--skip-git-repo-check", "-C", dir, sandbox}, ProviderArgs(base)...)
	argv = append(argv, QuietArgs...)
	out := clitest.Run(t, dir, env, append(argv, "Write the last commit's subject to answer.md.")...)

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
	reqs := srv.ModelRequests()
	if len(reqs) != 3 {
		t.Fatalf("%d model requests, want one per scripted turn (3)", len(reqs))
	}
	if got, ok := reqs[1].CallOutput(CallID(0)); !ok || !strings.Contains(got, commitSubject) {
		t.Errorf("second request's output of the git log call: %q (found %v), want the commit subject", got, ok)
	}
	if got, ok := reqs[2].CallOutput(CallID(1)); !ok || !strings.Contains(got, "A answer.md") {
		t.Errorf("third request's output of the apply_patch call: %q (found %v), want the file added", got, ok)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "answer.md")); err != nil || string(b) != "# Last commit\n" {
		t.Errorf("answer.md: %q, %v", b, err)
	}
	for _, r := range srv.Requests() {
		if r.Responses != nil && !r.HasAPIKey {
			t.Errorf("model request without an API key")
		}
		if r.Responses == nil {
			t.Errorf("request beyond the model API: %s %s", r.Method, r.Path)
		}
	}
	if lines := proxied(); len(lines) != 0 {
		t.Errorf("Codex tried to reach other hosts:\n%s", strings.Join(lines, "\n"))
	}
}
