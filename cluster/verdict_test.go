package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"hookbox.dev/hookbox/cluster"
)

// The node agent runs here as a host process the test starts (hookbox
// tracer serve --node on the cluster's NRI socket), not as the DaemonSet
// hookbox k8s agent-manifest renders: the test cluster has no image for it
// and the same binary runs either way. Other tests may run Jobs on the
// cluster at the same time; the agent judges theirs too (every hookbox
// pod), and these tests look only at their own Jobs' verdicts.

// nodeAgent is one running agent.
type nodeAgent struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	pub    string
}

// agentKey is the node key pair the agents of one test sign with.
func agentKey(t *testing.T, hookbox string) (dir, pub string) {
	t.Helper()
	dir = t.TempDir()
	cmd := exec.Command(hookbox, "key", "generate")
	cmd.Env = append(os.Environ(), "HOOKBOX_KEY_DIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hookbox key generate: %v\n%s", err, out)
	}
	return dir, filepath.Join(dir, "attestation.pub")
}

// startAgent starts the node agent with a plugin name of this test's own
// (NRI refuses two connections of one name and index) and waits until it
// is connected.
func startAgent(t *testing.T, l cluster.Layout, keyDir, name string) *nodeAgent {
	t.Helper()
	hookbox := repoBin(t, "hookbox")
	a := &nodeAgent{stderr: &syncBuffer{}, pub: filepath.Join(keyDir, "attestation.pub")}
	a.cmd = exec.Command(hookbox, "tracer", "serve", "--node", "--nri-socket", l.NRISocket(),
		"--plugin-name", name, "--plugin-index", "90", "--kubeconfig", l.AdminKubeconfig(),
		"--signing-key", filepath.Join(keyDir, "attestation.key"), "--state-dir", t.TempDir())
	a.cmd.Stderr = a.stderr
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.stop(t) })
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if strings.Contains(a.stderr.String(), "hookbox node agent: synchronized") {
			return a
		}
		if a.exited() {
			t.Fatalf("the node agent exited: %s", a.stderr)
		}
	}
	t.Fatalf("the node agent did not start: %s", a.stderr)
	return nil
}

func (a *nodeAgent) exited() bool {
	return a.cmd.Process.Signal(syscall.Signal(0)) != nil || a.cmd.ProcessState != nil
}

// stop ends the agent with SIGTERM (it then delivers the verdicts of what
// it traces, incomplete) and logs its stderr.
func (a *nodeAgent) stop(t *testing.T) {
	if a.cmd.ProcessState != nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	_ = a.cmd.Wait()
	t.Logf("node agent log:\n%s", a.stderr)
}

// kill ends the agent with SIGKILL: it delivers nothing.
func (a *nodeAgent) kill(t *testing.T) {
	_ = a.cmd.Process.Kill()
	_ = a.cmd.Wait()
	t.Logf("node agent (killed) log:\n%s", a.stderr)
}

// verdictCheck is hookbox k8s verdict --json's output.
type verdictCheck struct {
	Status   string   `json:"status"`
	Reasons  []string `json:"reasons"`
	Problems []struct {
		Reason, Path, Detail string
	} `json:"problems"`
	Diffs []struct {
		Rule, Field, Want, Got string
	} `json:"diffs"`
	Attestation *struct {
		KeyID string `json:"keyid"`
	} `json:"attestation"`
}

// waitVerdict waits for the job's verdict ConfigMap, then checks it with
// hookbox k8s verdict and returns the check and the exit code.
func waitVerdict(ctx context.Context, t *testing.T, l cluster.Layout, client kubernetes.Interface, j specJob, pub string) (verdictCheck, int) {
	t.Helper()
	name := "hookbox-verdict-" + j.name
	for {
		_, err := client.CoreV1().ConfigMaps(j.ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no verdict ConfigMap %s/%s: %v\n%s", j.ns, name, err, describe(client, j.ns))
		case <-time.After(500 * time.Millisecond):
		}
	}
	out := filepath.Join(t.TempDir(), "verdict")
	cmd := exec.CommandContext(ctx, repoBin(t, "hookbox"), "k8s", "verdict", j.name, "-n", j.ns, "--kubeconfig", l.AdminKubeconfig(),
		"--key", pub, "--json", "--out", out)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	t.Logf("hookbox k8s verdict %s -n %s: exit %d\n%s%s", j.name, j.ns, code, stdout.String(), stderr.String())
	var c verdictCheck
	if err := json.Unmarshal(stdout.Bytes(), &c); err != nil {
		t.Fatalf("hookbox k8s verdict --json: %v", err)
	}
	if len(c.Problems) > 0 {
		t.Fatalf("the verdict record does not verify: %+v", c.Problems)
	}
	if c.Attestation == nil {
		t.Fatalf("the verdict has no checked attestation")
	}
	return c, code
}

func specPath(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(rel)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestVerdictHelloConfirmed runs examples/hello.yaml with the node agent
// on: its verdict, fetched and verified with hookbox k8s verdict, is
// confirmed, signed by the agent's key.
func TestVerdictHelloConfirmed(t *testing.T) {
	l, client := requireCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	keyDir, pub := agentKey(t, repoBin(t, "hookbox"))
	startAgent(t, l, keyDir, fmt.Sprintf("hookbox-test-hello-%d", os.Getpid()))

	j := applySpec(ctx, t, l, client, jobSpec{spec: specPath(t, "../examples/hello.yaml"), workspace: exampleWorkspace(t)})
	waitForJob(ctx, t, client, j.ns, j.name)
	c, code := waitVerdict(ctx, t, l, client, j, pub)
	if c.Status != "confirmed" || code != 0 {
		t.Errorf("hello: verdict %s %v (exit %d), want confirmed (exit 0)", c.Status, c.Reasons, code)
	}
}

// TestVerdictTwoJobsAtOnce runs testdata/slow.yaml (its engine sleeps 45 s)
// and, while it runs, testdata/undeclared.yaml: slow's verdict is
// confirmed, undeclared's is mismatch with the diff naming the undeclared
// /usr/bin/touch, and neither trace holds the other's execs.
func TestVerdictTwoJobsAtOnce(t *testing.T) {
	l, client := requireCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	keyDir, pub := agentKey(t, repoBin(t, "hookbox"))
	startAgent(t, l, keyDir, fmt.Sprintf("hookbox-test-two-%d", os.Getpid()))

	slow := applySpec(ctx, t, l, client, jobSpec{spec: specPath(t, "testdata/slow.yaml"), workspace: exampleWorkspace(t)})
	waitEngineRunning(ctx, t, client, slow)
	undeclared := applySpec(ctx, t, l, client, jobSpec{spec: specPath(t, "testdata/undeclared.yaml"), workspace: exampleWorkspace(t)})
	waitForJob(ctx, t, client, undeclared.ns, undeclared.name)
	waitForJob(ctx, t, client, slow.ns, slow.name)
	// The two engines ran at the same time on the node.
	slowEngine, undeclaredEngine := engineState(ctx, t, client, slow), engineState(ctx, t, client, undeclared)
	if !slowEngine.FinishedAt.After(undeclaredEngine.StartedAt.Time) || !undeclaredEngine.FinishedAt.After(slowEngine.StartedAt.Time) {
		t.Fatalf("the engines did not overlap: slow %s-%s, undeclared %s-%s", slowEngine.StartedAt, slowEngine.FinishedAt, undeclaredEngine.StartedAt, undeclaredEngine.FinishedAt)
	}

	c, code := waitVerdict(ctx, t, l, client, slow, pub)
	if c.Status != "confirmed" || code != 0 {
		t.Errorf("slow: verdict %s %v (exit %d), want confirmed (exit 0)", c.Status, c.Reasons, code)
	}
	c, code = waitVerdict(ctx, t, l, client, undeclared, pub)
	if c.Status != "mismatch" || code != 124 || !slices.Contains(c.Reasons, "unexpected-exec") {
		t.Errorf("undeclared: verdict %s %v (exit %d), want mismatch with unexpected-exec (exit 124)", c.Status, c.Reasons, code)
	}
	found := false
	for _, d := range c.Diffs {
		found = found || strings.Contains(d.Got, "/usr/bin/touch")
	}
	if !found {
		t.Errorf("undeclared: no diff names /usr/bin/touch: %+v", c.Diffs)
	}
	// No cross-attribution: each trace holds its own engine's prompt and
	// not the other's, and only undeclared's has the touch.
	for _, tc := range []struct {
		j             specJob
		own, other    string
		touchExpected bool
	}{{slow, `"Sleep."`, `"Touch a file."`, false}, {undeclared, `"Touch a file."`, `"Sleep."`, true}} {
		cm, err := client.CoreV1().ConfigMaps(tc.j.ns).Get(ctx, "hookbox-verdict-"+tc.j.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		trace := cm.Data["trace.jsonl"]
		if !strings.Contains(trace, tc.own) || strings.Contains(trace, tc.other) || strings.Contains(trace, "/usr/bin/touch") != tc.touchExpected {
			t.Errorf("%s's trace is not its own alone:\n%s", tc.j.name, trace)
		}
	}
}

// engineState is the terminated state of the Job's engine container.
func engineState(ctx context.Context, t *testing.T, client kubernetes.Interface, j specJob) *corev1.ContainerStateTerminated {
	t.Helper()
	for _, s := range j.pod(ctx, t, client).Status.ContainerStatuses {
		if s.Name == "engine" && s.State.Terminated != nil {
			return s.State.Terminated
		}
	}
	t.Fatalf("the engine of %s has not terminated", j.name)
	return nil
}

// TestVerdictAlteredRenderIsRefused changes the ConfigMap's render.json
// after rendering (its digest no longer the pod's hookbox.dev/render-sha256):
// the agent refuses it, and the verdict is unchecked with the reason.
func TestVerdictAlteredRenderIsRefused(t *testing.T) {
	l, client := requireCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	keyDir, pub := agentKey(t, repoBin(t, "hookbox"))
	startAgent(t, l, keyDir, fmt.Sprintf("hookbox-test-altered-%d", os.Getpid()))

	j := applySpec(ctx, t, l, client, jobSpec{spec: specPath(t, "../examples/hello.yaml"), workspace: exampleWorkspace(t),
		edit: func(objects []byte) []byte {
			// A space after the canonical JSON: still a render, another digest.
			const key = "\n  render.json: '"
			i := bytes.Index(objects, []byte(key))
			if i < 0 {
				t.Fatalf("no render.json in the ConfigMap:\n%s", objects)
			}
			return slices.Concat(objects[:i+len(key)], []byte(" "), objects[i+len(key):])
		}})
	waitForJob(ctx, t, client, j.ns, j.name)
	c, code := waitVerdict(ctx, t, l, client, j, pub)
	if c.Status != "unchecked" || code != 119 || !slices.Contains(c.Reasons, "tracer-unavailable:render-digest-differs") {
		t.Errorf("verdict %s %v (exit %d), want unchecked with tracer-unavailable:render-digest-differs (exit 119)", c.Status, c.Reasons, code)
	}
}

// TestVerdictAgentRestartedWhileAJobRuns kills the agent while
// testdata/slow.yaml's engine runs and starts another: the Job's verdict
// is unchecked (its execs while no agent ran may be missing), never
// confirmed.
func TestVerdictAgentRestartedWhileAJobRuns(t *testing.T) {
	l, client := requireCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	keyDir, pub := agentKey(t, repoBin(t, "hookbox"))
	name := fmt.Sprintf("hookbox-test-restart-%d", os.Getpid())
	first := startAgent(t, l, keyDir, name)

	j := applySpec(ctx, t, l, client, jobSpec{spec: specPath(t, "testdata/slow.yaml"), workspace: exampleWorkspace(t)})
	waitEngineRunning(ctx, t, client, j)
	first.kill(t)
	startAgent(t, l, keyDir, name)
	waitForJob(ctx, t, client, j.ns, j.name)
	c, code := waitVerdict(ctx, t, l, client, j, pub)
	if c.Status != "unchecked" || code != 119 || !slices.Contains(c.Reasons, "tracer-unavailable:started-before-agent") {
		t.Errorf("verdict %s %v (exit %d), want unchecked with tracer-unavailable:started-before-agent (exit 119)", c.Status, c.Reasons, code)
	}
}

// waitEngineRunning waits until the Job's engine container runs.
func waitEngineRunning(ctx context.Context, t *testing.T, client kubernetes.Interface, j specJob) {
	t.Helper()
	for {
		pods, err := client.CoreV1().Pods(j.ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + j.name})
		if err == nil && len(pods.Items) == 1 {
			for _, s := range pods.Items[0].Status.ContainerStatuses {
				if s.Name == "engine" && s.State.Running != nil {
					return
				}
				if s.Name == "engine" && s.State.Terminated != nil {
					t.Fatalf("the engine ended before the agent could be restarted: %+v", s.State.Terminated)
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the engine of %s never ran\n%s", j.name, describe(client, j.ns))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// syncBuffer is the agent's stderr, read while the agent writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
