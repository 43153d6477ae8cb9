package integration

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"hookbox.dev/hookbox/egress"
	"hookbox.dev/hookbox/internal/testapi/anthropic"
	"hookbox.dev/hookbox/internal/testapi/gemini"
	"hookbox.dev/hookbox/internal/testapi/openai"
	"hookbox.dev/hookbox/internal/testapi/pi"
	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/internal/testnet"
	"hookbox.dev/hookbox/launcher"
)

// The real-engine tests: each of the four real CLIs, as make real-engines
// installs it, does the same small task in a hookbox container against a
// scripted model API on a test host, reached through the egress allowlist
// (model-api, pointed there by engine.baseURL): read the workspace's last
// commit with git through its shell tool, then write an answer (Codex
// edits the overlay workspace instead, and the answer comes out as
// workspace.patch). The spec declares no program beyond the task's own
// (git): the engine's shells, interpreters, helpers and package trees come
// from its profile. Each run must complete, harvest its artifacts, fire
// every hook, and be confirmed with the default trace policy.

const commitSubject = "the subject the agent reads"

// engineTask is one engine's example spec (examples/engines) and what its
// run must show.
type engineTask struct {
	example    string // file name under examples/engines
	spec       string // a spec file to run instead (the gateway variant)
	secretKey  string // the secret's value; "" means test-key
	baseURL    string
	secret     string
	wantRules  []string // verdict Matched rules the run must show
	requestsAt func() int
	// answer is the artifact that carries the result, and what it must hold.
	answer    string
	answerHas []string
	// modelTurns counts the API's model requests; toolOutput is what the
	// second one carried back from the first tool call (git's output).
	modelTurns func() int
	toolOutput func() (string, bool)
	// keys are the digests of the credential each request carried in the
	// provider's header (scripted.KeyDigest), and whether another
	// credential came too.
	keys func() (digests []string, other bool)
}

// runEngineTask runs the example against the scripted API at task.baseURL
// with the test's git workspace, and checks what every real-engine run
// must show.
func runEngineTask(t *testing.T, e *env, task engineTask, apiAddr string) *launcher.Result {
	t.Helper()
	file := task.spec
	if file == "" {
		file = filepath.Join("..", "examples", "engines", task.example)
	}
	e.extraEnv = append(e.extraEnv, task.secret+"="+task.key())
	r := e.run(file, "--set", "base_url="+task.baseURL, "--set", "workspace="+filepath.Join(e.specDir, "ws"))
	res := r.mustResult(t)
	if res.Status != launcher.StatusCompleted || r.code != 0 {
		t.Fatalf("status %s exit %d (%v), verdict %s %v %+v\n%s", res.Status, r.code, res.Reasons, res.Trace.Status, res.Trace.Reasons, res.Trace.Diffs, tail(r.stderr+readRecordFile(res, "stderr.log"), 3000))
	}
	if len(res.Artifacts) == 0 {
		t.Errorf("no artifacts declared: the example must declare its answer and hook markers")
	}
	for _, a := range res.Artifacts {
		if a.Status != "found" {
			t.Errorf("artifact %s: %s", a.Declared, a.Status)
		}
	}
	if res.Trace.Status != "confirmed" {
		t.Errorf("verdict %s %v\ndiffs %+v", res.Trace.Status, res.Trace.Reasons, res.Trace.Diffs)
	}
	var rules []string
	for _, m := range res.Trace.Matched {
		rules = append(rules, m.Rule)
	}
	for _, want := range task.wantRules {
		if !slices.Contains(rules, want) {
			t.Errorf("no exec matched rule %s; matched: %v", want, rules)
		}
	}
	attempts := readNetwork(t, res)
	if len(attempts) == 0 {
		t.Errorf("network.jsonl is empty: the engine never reached its API")
	}
	for _, a := range attempts {
		if a.Decision != egress.DecisionAllowed || fmt.Sprintf("%s:%d", a.Host, a.Port) != apiAddr {
			t.Errorf("unexpected network attempt %+v", a)
		}
	}
	if task.requestsAt != nil && len(attempts) > task.requestsAt() {
		t.Errorf("network.jsonl has %d attempts, the API saw %d requests", len(attempts), task.requestsAt())
	}
	got := artifactText(t, res, task.answer)
	for _, want := range task.answerHas {
		if !strings.Contains(got, want) {
			t.Errorf("%s lacks %q:\n%s", task.answer, want, got)
		}
	}
	if n := task.modelTurns(); n < 3 {
		t.Errorf("%d model requests, want the 3 scripted turns", n)
	} else if out, ok := task.toolOutput(); !ok || !strings.Contains(out, commitSubject) {
		t.Errorf("git's output did not reach the model: %q (found %v)", out, ok)
	}
	return res
}

// newEngineEnv is a test's hookbox world with a git workspace whose last
// commit is commitSubject, and a test host for the scripted API.
func newEngineEnv(t *testing.T) (*env, *testnet.Host) {
	t.Helper()
	e := newEnv(t)
	gitWorkspace(t, filepath.Join(e.specDir, "ws"), commitSubject)
	return e, testnet.NewHost(t)
}

// holdConnections accepts every connection on l and never answers: a model
// API that hangs.
func holdConnections(t *testing.T, l net.Listener) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
}

func (task engineTask) key() string {
	if task.secretKey != "" {
		return task.secretKey
	}
	return "test-key"
}

func readRecordFile(res *launcher.Result, name string) string {
	b, _ := os.ReadFile(filepath.Join(res.RecordDir, name))
	return string(b)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func artifactText(t *testing.T, res *launcher.Result, name string) string {
	t.Helper()
	for _, a := range res.Artifacts {
		if a.Declared == name && a.Status == "found" {
			b, err := os.ReadFile(filepath.Join(res.RecordDir, launcher.ArtifactDir, a.Path))
			if err != nil {
				t.Fatalf("artifact %s: %v", name, err)
			}
			return string(b)
		}
	}
	t.Fatalf("artifact %s not harvested: %+v", name, res.Artifacts)
	return ""
}

// realEngine is one real engine: its example, its secret and gateway kind,
// and how to start its scripted API (with the task's script) on a listener,
// giving the task the run must do.
type realEngine struct {
	name, gatewayKind string
	installed         testenv.Requirement
	start             func(t *testing.T, l net.Listener) engineTask
}

var realEngines = []realEngine{
	{"claude", "anthropic", anthropic.ClaudeInstalled, func(t *testing.T, l net.Listener) engineTask {
		api, base := anthropic.Start(t, l, anthropic.Script{
			{ToolUse: &anthropic.ToolUse{Name: "Bash", Input: map[string]string{"command": "git -C /workspace log -1 --format=%s", "description": "read the last commit"}}},
			{Text: "Writing it down.", ToolUse: &anthropic.ToolUse{Name: "Write", Input: map[string]string{"file_path": "/run/hookbox/out/answer.md", "content": "# Last commit\n"}}},
			{Text: "Done."},
		})
		return anthropicTask(api, base, "claude.yaml", "engine-exec:tool-shell", "hook:pre-bash", "hook:stop")
	}},
	{"codex", "openai", openai.CodexInstalled, func(t *testing.T, l net.Listener) engineTask {
		api, base := openai.Start(t, l, openai.Script{
			{Call: &openai.Call{Name: "exec_command", Arguments: map[string]any{"cmd": "git log -1 --format=%s", "tty": false}}},
			{Text: "Writing it down.", Custom: &openai.CustomCall{Name: "apply_patch", Input: "*** Begin Patch\n*** Add File: answer.md\n+# Last commit\n*** End Patch\n"}},
			{Text: "Done."},
		})
		return engineTask{
			example: "codex.yaml", baseURL: base + "/v1", secret: "OPENAI_API_KEY",
			wantRules:  []string{"init", "engine", "engine-exec:process-setup", "engine-exec:tool-shell", "allow:/usr/bin/git", "hook:pre-tool", "hook:stop"},
			requestsAt: func() int { return len(api.Requests()) },
			answer:     "workspace.patch", answerHas: []string{"+++ b/answer.md", "+# Last commit"},
			modelTurns: func() int { return len(api.ModelRequests()) },
			toolOutput: func() (string, bool) { return api.ModelRequests()[1].CallOutput(openai.CallID(0)) },
			keys: func() (digests []string, other bool) {
				for _, r := range api.Requests() {
					digests = append(digests, r.KeySHA256)
				}
				return digests, false
			},
		}
	}},
	{"gemini", "gemini", gemini.GeminiInstalled, func(t *testing.T, l net.Listener) engineTask {
		api, base := gemini.Start(t, l, gemini.Script{
			{Call: &gemini.Call{Name: "run_shell_command", Args: map[string]string{"command": "git log -1 --format=%s"}}},
			{Text: "Writing it down.", Call: &gemini.Call{Name: "write_file", Args: map[string]string{"file_path": "/run/hookbox/out/answer.md", "content": "# Last commit\n"}}},
			{Text: "Done."},
		})
		return engineTask{
			example: "gemini.yaml", baseURL: base, secret: "GEMINI_API_KEY",
			wantRules:  []string{"init", "engine", "hop:" + gemini.GeminiEngine, "engine-exec:tool-shell", "allow:/usr/bin/git", "hook:before-shell", "hook:after-agent"},
			requestsAt: func() int { return len(api.Requests()) },
			answer:     "answer.md", answerHas: []string{"# Last commit\n"},
			modelTurns: func() int { return len(api.ModelRequests()) },
			toolOutput: func() (string, bool) {
				got, ok := api.ModelRequests()[1].FunctionResponse(gemini.CallID(0))
				return string(got.Response), ok
			},
			keys: func() (digests []string, other bool) {
				for _, r := range api.Requests() {
					digests, other = append(digests, r.KeySHA256), other || r.OtherCredential
				}
				return digests, other
			},
		}
	}},
	{"pi", "anthropic", pi.PiInstalled, func(t *testing.T, l net.Listener) engineTask {
		api, base := anthropic.Start(t, l, anthropic.Script{
			{ToolUse: &anthropic.ToolUse{Name: "bash", Input: map[string]string{"command": "git -C /workspace log -1 --format=%s"}}},
			{Text: "Writing it down.", ToolUse: &anthropic.ToolUse{Name: "write", Input: map[string]string{"path": "/run/hookbox/out/answer.md", "content": "# Last commit\n"}}},
			{Text: "Done."},
		})
		return anthropicTask(api, base, "pi.yaml", "hop:"+pi.PiEngine, "engine-exec:tool-shell")
	}},
}

// anthropicTask is the task of an engine on the scripted Anthropic API.
func anthropicTask(api *anthropic.Server, base, example string, rules ...string) engineTask {
	return engineTask{
		example: example, baseURL: base, secret: "ANTHROPIC_API_KEY",
		wantRules:  append([]string{"init", "engine", "allow:/usr/bin/git"}, rules...),
		requestsAt: func() int { return len(api.Requests()) },
		answer:     "answer.md", answerHas: []string{"# Last commit\n"},
		modelTurns: func() int { return len(api.ModelRequests()) },
		toolOutput: func() (string, bool) {
			got, ok := api.ModelRequests()[1].ToolResult(anthropic.ToolUseID(0))
			return got.Content.Text(), ok
		},
		keys: func() (digests []string, other bool) {
			for _, r := range api.Requests() {
				digests, other = append(digests, r.APIKeySHA256), other || r.Authorization
			}
			return digests, other
		},
	}
}

func TestRealEngines(t *testing.T) {
	for _, eng := range realEngines {
		t.Run(eng.name, func(t *testing.T) {
			testenv.RequireIntegration(t, eng.installed)
			e, h := newEngineEnv(t)
			task := eng.start(t, h.Listen(t, apiPort))
			runEngineTask(t, e, task, fmt.Sprintf("%s:%d", h.Addr(), apiPort))
		})
	}
}

// TestRealEngineTimeout: each real engine waits on a model API that
// accepts and never answers; at the timeout the init forwards SIGTERM to it
// (as PID 1 Node and Codex would have ignored it), the engine ends within
// the grace without SIGKILL, and its shutdown hook runs where it has one.
func TestRealEngineTimeout(t *testing.T) {
	for _, tc := range []struct {
		example, secret, baseSuffix string
		installed                   testenv.Requirement
		shutdownHook                string // artifact the engine's shutdown hook writes; "" for none
	}{
		{"claude.yaml", "ANTHROPIC_API_KEY", "", anthropic.ClaudeInstalled, "session-end"},
		{"codex.yaml", "OPENAI_API_KEY", "/v1", openai.CodexInstalled, ""}, // 0.171.0 runs Stop only when a turn ends, not on SIGTERM
		{"gemini.yaml", "GEMINI_API_KEY", "", gemini.GeminiInstalled, "session-end"},
		{"pi.yaml", "ANTHROPIC_API_KEY", "", pi.PiInstalled, ""},
	} {
		t.Run(strings.TrimSuffix(tc.example, ".yaml"), func(t *testing.T) {
			testenv.RequireIntegration(t, tc.installed)
			e, h := newEngineEnv(t)
			holdConnections(t, h.Listen(t, apiPort))
			e.extraEnv = append(e.extraEnv, tc.secret+"=test-key")
			base := fmt.Sprintf("http://%s:%d%s", h.Addr(), apiPort, tc.baseSuffix)
			r := e.runGrace(filepath.Join("..", "examples", "engines", tc.example), "20s",
				"--set", "base_url="+base, "--set", "workspace="+filepath.Join(e.specDir, "ws"), "--set", "timeout=8s")
			res := r.mustResult(t)
			if res.Status != launcher.StatusTimedOut {
				t.Fatalf("status %s, want timed_out\n%s", res.Status, tail(r.stderr, 2000))
			}
			if res.Signal == "killed" {
				t.Errorf("the engine was SIGKILLed after the grace: SIGTERM did not end it")
			}
			if tc.shutdownHook != "" {
				found := false
				for _, a := range res.Artifacts {
					found = found || a.Declared == tc.shutdownHook && a.Status == "found"
				}
				if !found {
					t.Errorf("the %s hook did not run on SIGTERM: %+v (signal %s)", tc.shutdownHook, res.Artifacts, res.Signal)
				}
			}
		})
	}
}
