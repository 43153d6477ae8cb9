package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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

// countingServer is a plain HTTP server on a test host that counts the
// connections it accepted.
type countingServer struct {
	mu    sync.Mutex
	conns int
}

func (c *countingServer) start(t *testing.T, l net.Listener) {
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "test host\n") }),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				c.mu.Lock()
				c.conns++
				c.mu.Unlock()
			}
		},
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
}

func (c *countingServer) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conns
}

// TestEgressAdversarial: attempts to get around the allowlist from inside
// the container. Each ends with no byte reaching a destination that is not
// allowed, and every attempt that reached the proxy is recorded with its
// reason. The only allowed destination is the test host's HTTP server.
func TestEgressAdversarial(t *testing.T) {
	e := newEnv(t)
	h := testnet.NewHost(t)
	srv := &countingServer{}
	srv.start(t, h.Listen(t, apiPort))
	allowed := fmt.Sprintf("%s:%d", h.Addr(), apiPort)
	hostSide := h.Addr().Prev() // the host's own end of the veth
	type refusal struct{ host, reason string }
	for _, tc := range []struct {
		name    string
		argv    []string
		refused []refusal // in order; nil: the proxy must see nothing
		reached int       // connections the test host may see
	}{
		{"no proxy: curl --noproxy", []string{"/usr/bin/curl", "--noproxy", "*", "-sS", "-m", "5", "http://" + allowed + "/"}, nil, 0},
		{"no proxy: raw TCP socket", []string{"/usr/bin/bash", "-c", "exec 3<>/dev/tcp/" + h.Addr().String() + "/" + fmt.Sprint(apiPort)}, nil, 0},
		{"no proxy: UDP", []string{"/usr/bin/bash", "-c", "echo x > /dev/udp/" + h.Addr().String() + "/53"}, nil, 0},
		{"no resolver: DNS", []string{"/usr/bin/curl", "--noproxy", "*", "-sS", "-m", "5", "http://example.com/"}, nil, 0},
		{"loopback literal through the proxy", []string{"/usr/bin/curl", "--noproxy", "", "-x", "http://127.0.0.1:3128", "-fsS", "-m", "5", "http://127.0.0.1:8080/"}, []refusal{{"127.0.0.1", egress.ReasonIPLiteralNotAllowed}}, 0},
		{"cloud metadata", []string{"/usr/bin/curl", "-fsS", "-m", "5", "http://169.254.169.254/latest/meta-data/"}, []refusal{{"169.254.169.254", egress.ReasonIPLiteralNotAllowed}}, 0},
		{"IPv6 literal", []string{"/usr/bin/curl", "-sS", "-m", "5", "https://[fd00::1]:443/"}, []refusal{{"fd00::1", egress.ReasonIPLiteralNotAllowed}}, 0},
		{"the host's own address", []string{"/usr/bin/curl", "-fsS", "-m", "5", "http://" + hostSide.String() + ":8080/"}, []refusal{{hostSide.String(), egress.ReasonIPLiteralNotAllowed}}, 0},
		{"keep-alive: allowed, then not", []string{"/usr/bin/curl", "-fsS", "-m", "5", "http://" + allowed + "/", "http://example.com/"}, []refusal{{"example.com", egress.ReasonNotAllowed}}, 1},
		{"a relay in the container speaking to the proxy itself", []string{"/usr/bin/bash", "-c", `exec 3<>/dev/tcp/127.0.0.1/3128; printf 'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n' >&3; read -r status <&3; [[ $status == *" 200 "* ]]`}, []refusal{{"example.com", egress.ReasonNotAllowed}}, 0},
		{"TLS to an allowed address with another name", []string{"/usr/bin/curl", "-sS", "-m", "5", "-k", "--connect-to", "evil.example:8080:" + allowed, "https://evil.example:8080/"}, []refusal{{h.Addr().String(), egress.ReasonSNIMismatch}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := srv.count()
			spec := writeEgressExec(t, e, tc.argv, allowed)
			r := e.run(spec)
			res := r.mustResult(t)
			if res.Status == launcher.StatusInfraError {
				t.Fatalf("infra error: %s", res.Error)
			}
			if res.ExitCode == nil || (*res.ExitCode == 0 && tc.reached == 0) {
				t.Errorf("the attempt should have failed inside the container, exit %v\n%s", res.ExitCode, r.output())
			}
			var got []refusal
			for _, a := range readNetwork(t, res) {
				if a.Decision == egress.DecisionRefused {
					got = append(got, refusal{a.Host, a.Reason})
					// Only an allowed destination is ever dialled (the SNI
					// check comes after the tunnel to it is open); no byte
					// of a refused attempt goes anywhere.
					if (a.Resolved != "" && a.Reason != egress.ReasonSNIMismatch) || a.BytesUp != 0 {
						t.Errorf("a refused attempt was dialled or sent bytes: %+v", a)
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.refused) {
				t.Errorf("refused %v, want %v", got, tc.refused)
			}
			if n := srv.count() - before; n != tc.reached {
				t.Errorf("the test host saw %d connections, want %d", n, tc.reached)
			}
		})
	}
}

// writeEgressExec writes an exec-engine spec running argv with one
// allowed destination.
func writeEgressExec(t *testing.T, e *env, argv []string, allow string) string {
	t.Helper()
	quoted := make([]string, len(argv)-1)
	for i, a := range argv[1:] {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	name := fmt.Sprintf("adv-%d", len(e.specs))
	e.specs = append(e.specs, name)
	spec := fmt.Sprintf(`apiVersion: hookbox.dev/v1alpha1
kind: Spawn
metadata: {name: %s}
spec:
  engine: {kind: exec, path: %s, args: [%s]}
  workspace: ./ws
  tools: [/usr/bin/curl, /usr/bin/bash]
  network:
    allow: [%q]
  limits: {timeout: 30s}
`, name, argv[0], strings.Join(quoted, ", "), allow)
	file := filepath.Join(e.specDir, name+".yaml")
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}
