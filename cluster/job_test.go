package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"hookbox.dev/hookbox/cluster"
)

// requireCluster gates the test: without HOOKBOX_CLUSTER=1 it skips; with
// it, a cluster that does not answer is a failure, never a skip.
func requireCluster(t *testing.T) (cluster.Layout, *kubernetes.Clientset) {
	t.Helper()
	if os.Getenv("HOOKBOX_CLUSTER") != "1" {
		t.Skip("needs the test cluster: make cluster-up, then HOOKBOX_CLUSTER=1 (make cluster-test)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("HOOKBOX_CLUSTER=1 needs root (the test imports images into the cluster's containerd)")
	}
	bin, err := filepath.Abs("../bin/cluster")
	if err != nil {
		t.Fatal(err)
	}
	l := cluster.Layout{Bin: bin, State: cluster.DefaultState, Run: cluster.DefaultRun}
	running, err := cluster.Running(l)
	if err != nil {
		t.Fatal(err)
	}
	if len(running) != len(cluster.Components) {
		t.Fatalf("HOOKBOX_CLUSTER=1 but the cluster is not up (running: %v of %v): make cluster-up", running, cluster.Components)
	}
	client, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	node, err := client.CoreV1().Nodes().Get(t.Context(), cluster.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("HOOKBOX_CLUSTER=1 but the API server does not answer: %v", err)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			t.Fatalf("node %s is not Ready: %s", cluster.NodeName, c.Message)
		}
	}
	return l, client
}

// repoBin is a binary of `make build`.
func repoBin(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "bin", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing: run make build first", p)
	}
	return p
}

func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	out, _ := runOutput(t, name, args...)
	return out
}

// runOutput runs name and returns its stdout and stderr; a failure fails
// the test with both.
func runOutput(t *testing.T, name string, args ...string) (stdout, stderr []byte) {
	t.Helper()
	var errBuf bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &errBuf
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, errBuf.String())
	}
	return out, errBuf.Bytes()
}

// builtImages are the images `hookbox render --build` printed on stderr
// ("hookbox: image KIND REFERENCE [spawn NAME]"), by kind.
func builtImages(t *testing.T, stderr []byte) map[string][]string {
	t.Helper()
	refs := map[string][]string{}
	for _, line := range strings.Split(string(stderr), "\n") {
		f := strings.Fields(strings.TrimPrefix(line, "hookbox: image "))
		if !strings.HasPrefix(line, "hookbox: image ") || len(f) < 2 || !strings.Contains(f[1], "@sha256:") {
			continue
		}
		refs[f[0]] = append(refs[f[0]], f[1])
	}
	return refs
}

func exampleWorkspace(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../examples/workspace")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// workspace makes the PersistentVolumeClaim the Job mounts at /workspace: a
// hostPath volume of dir, bound to the claim up front.
func workspace(t *testing.T, client kubernetes.Interface, ns, dir string) {
	t.Helper()
	ctx := t.Context()
	pvName := ns + "-workspace"
	size := resource.MustParse("1Mi")
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: "hookbox-workspace"},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
		},
	}
	if _, err := client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().PersistentVolumes().Delete(context.Background(), pvName, metav1.DeleteOptions{})
	})
	empty := ""
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "hookbox-workspace", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany},
			StorageClassName: &empty,
			VolumeName:       pvName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A specJob is a spawn spec rendered with --format k8s and applied, in a
// namespace of its own that the test's cleanup deletes.
type specJob struct {
	ns      string
	name    string // the Job's
	objects []byte // what was applied
}

// A jobSpec says what applySpec renders and what the objects need.
type jobSpec struct {
	spec      string // the spawn spec
	workspace string // the directory the workspace claim's volume holds
	// secrets, when not nil, become the Secret hookbox-secrets.
	secrets map[string]string
	// proxy says the spec has an allowlist: render --build must have
	// built the proxy image (the hookbox binary) for its sidecar.
	proxy bool
	// edit, when set, changes the rendered objects before they are applied.
	edit func([]byte) []byte
	// ns, when set, is the namespace to use, made by jobNamespace (with
	// the workspace claim); else applySpec makes one.
	ns string
}

// applySpec renders js.spec for the cluster with `hookbox render --format
// k8s --build`, which builds the images the Job references (base, runfiles,
// seed, and proxy for an allowlist) and imports them into the cluster's
// containerd (namespace k8s.io, where the kubelet finds them without a
// pull); then it creates the namespace, workspace claim and Secret, and
// applies the objects with the cluster's kubectl.
// jobNamespace creates a test namespace (removed at the end unless
// HOOKBOX_CLUSTER_KEEP=1) holding the workspace claim for dir and, when
// secrets is not nil, the Secret hookbox-secrets.
func jobNamespace(ctx context.Context, t *testing.T, client kubernetes.Interface, dir string, secrets map[string]string) string {
	t.Helper()
	ns := testNamespace(ctx, t, client, "hookbox-test-")
	workspace(t, client, ns, dir)
	if secrets != nil {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hookbox-secrets", Namespace: ns}, StringData: secrets}
		if _, err := client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return ns
}

// kubectlApply applies rendered objects with the cluster's kubectl.
func kubectlApply(ctx context.Context, t *testing.T, l cluster.Layout, objects []byte) {
	t.Helper()
	objectsFile := filepath.Join(t.TempDir(), "objects.yaml")
	if err := os.WriteFile(objectsFile, objects, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, l.BinPath("kubectl"), "--kubeconfig", l.AdminKubeconfig(), "apply", "-f", objectsFile).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	t.Logf("kubectl apply -f %s (%d bytes):\n%s", objectsFile, len(objects), out)
}

func applySpec(ctx context.Context, t *testing.T, l cluster.Layout, client kubernetes.Interface, js jobSpec) specJob {
	t.Helper()
	hookbox := repoBin(t, "hookbox")
	repoBin(t, "hookbox-init")
	repoBin(t, "hookbox-seed")
	repoBin(t, "hookbox-scripted-engine")
	stateDir := t.TempDir()

	ns := js.ns
	if ns == "" {
		ns = jobNamespace(ctx, t, client, js.workspace, js.secrets)
	}

	objects, stderr := runOutput(t, hookbox, "render", "--state-dir", stateDir, "--address", l.ContainerdSocket(),
		"--runfiles", "--format", "k8s", "--build", "--build-namespace", cluster.Namespace, "--namespace", ns, js.spec)
	t.Logf("hookbox render --build:\n%s", stderr)
	built := builtImages(t, stderr)
	for _, kind := range []string{"base", "runfiles", "seed"} {
		if len(built[kind]) == 0 {
			t.Fatalf("hookbox render --build printed no %s image:\n%s", kind, stderr)
		}
	}
	if js.proxy != (len(built["proxy"]) > 0) {
		t.Fatalf("jobSpec.proxy is %v but hookbox render --build built proxy images %v", js.proxy, built["proxy"])
	}
	if js.edit != nil {
		objects = js.edit(objects)
	}
	kubectlApply(ctx, t, l, objects)
	j := specJob{ns: ns, objects: objects}
	j.name = j.job(t).Name
	return j
}

// TestClaudeJobGoesThroughTheProxySidecar runs the real Claude Code CLI as
// a Job with an egress allowlist (testdata/claude-egress.yaml): hookbox's
// proxy runs as a native sidecar (an init container with restartPolicy
// Always) whose startup probe (hookbox egress probe, exec) must pass before
// the engine starts. The pods here have no route out, so no request can
// succeed; the test checks that the engine's requests to the model API
// reached the sidecar, which logged each attempt as one JSON line, and that
// the engine printed its stream-json init event.
func TestClaudeJobGoesThroughTheProxySidecar(t *testing.T) {
	l, client := requireCluster(t)
	const claude = "/opt/engines/node_modules/@anthropic-ai/claude-code-linux-x64/claude"
	if _, err := os.Stat(claude); err != nil {
		t.Fatalf("the real Claude Code CLI is missing (make real-engines): %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	spec, err := filepath.Abs("testdata/claude-egress.yaml")
	if err != nil {
		t.Fatal(err)
	}
	j := applySpec(ctx, t, l, client, jobSpec{spec: spec, workspace: exampleWorkspace(t), proxy: true,
		secrets: map[string]string{"ANTHROPIC_API_KEY": "sk-ant-hookbox-cluster-test"}})

	var proxyLog, log []byte
	for deadline := time.Now().Add(2 * time.Minute); ; {
		pod := j.pod(ctx, t, client)
		for _, s := range pod.Status.InitContainerStatuses {
			if term := s.State.Terminated; term != nil && term.ExitCode != 0 {
				t.Fatalf("init container %s exited %d\n%s", s.Name, term.ExitCode, describe(client, j.ns))
			}
		}
		logs := client.CoreV1().Pods(j.ns)
		proxyLog, _ = logs.GetLogs(pod.Name, &corev1.PodLogOptions{Container: k8sProxyContainer}).DoRaw(ctx)
		log, _ = logs.GetLogs(pod.Name, &corev1.PodLogOptions{Container: "engine"}).DoRaw(ctx)
		if bytes.Contains(proxyLog, []byte(`"host":"api.anthropic.com"`)) && bytes.Contains(log, []byte(`"subtype":"init"`)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 2 minutes, no attempt to api.anthropic.com in the proxy's log or no init event in the engine's:\n%s\n%s\n%s", proxyLog, log, describe(client, j.ns))
		}
		time.Sleep(time.Second)
	}
	t.Logf("proxy log:\n%s", proxyLog)
	// hookbox egress serve writes a "listening on" line to stderr.
	checkLog(t, proxyLog, false, map[string]any{"method": "CONNECT", "host": "api.anthropic.com", "port": float64(443), "rule": "api.anthropic.com:443"})

	pod := j.pod(ctx, t, client)
	for _, s := range pod.Status.InitContainerStatuses {
		if s.Name == k8sProxyContainer && (s.Started == nil || !*s.Started || !s.Ready) {
			t.Errorf("the proxy sidecar is not started and ready: %+v", s)
		}
	}
	t.Logf("engine log so far:\n%s", log)
	checkLog(t, log, true, map[string]any{"type": "system", "subtype": "init", "cwd": "/workspace"})
}

// k8sProxyContainer is the sidecar's name in the rendered Job
// (render/k8s.ProxyContainer; this module does not import hookbox's).
const k8sProxyContainer = "egress-proxy"

// job is the rendered Job.
func (j specJob) job(t *testing.T) *batchv1.Job {
	t.Helper()
	for _, doc := range strings.Split(string(j.objects), "\n---\n") {
		var job batchv1.Job
		if err := yaml.UnmarshalStrict([]byte(doc), &job); err == nil && job.Kind == "Job" {
			return &job
		}
	}
	t.Fatalf("no Job among the rendered objects")
	return nil
}

// pod is the one pod of the Job.
// pod is the Job's one pod, waited for: right after the apply, the Job
// controller may not have made it yet.
func (j specJob) pod(ctx context.Context, t *testing.T, client kubernetes.Interface) corev1.Pod {
	t.Helper()
	for {
		pods, err := client.CoreV1().Pods(j.ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + j.name})
		if err == nil && len(pods.Items) == 1 {
			return pods.Items[0]
		}
		if err != nil || len(pods.Items) > 1 || ctx.Err() != nil {
			t.Fatalf("want one pod of job %s, got %d (%v)\n%s", j.name, len(pods.Items), err, describe(client, j.ns))
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (j specJob) engineLog(ctx context.Context, t *testing.T, client kubernetes.Interface) []byte {
	t.Helper()
	log, err := client.CoreV1().Pods(j.ns).GetLogs(j.pod(ctx, t, client).Name, &corev1.PodLogOptions{Container: "engine"}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of the engine container: %v", err)
	}
	return log
}

// TestHelloJobCompletes renders examples/hello.yaml as Kubernetes objects,
// applies them with the cluster's kubectl and checks that the Job completes
// and its log is the scripted engine's NDJSON: the init event, the
// SessionStart hook's output (a dynamically linked /usr/bin/printf from the
// runfiles image volume), the result. On the way it exercises the seed-dirs
// init container, the ConfigMap-mounted settings and script, the
// memory-backed run dir (the engine writes out/hello.txt), user 65532 and
// the exact argv.
func TestHelloJobCompletes(t *testing.T) {
	l, client := requireCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	spec, err := filepath.Abs("../examples/hello.yaml")
	if err != nil {
		t.Fatal(err)
	}
	j := applySpec(ctx, t, l, client, jobSpec{spec: spec, workspace: filepath.Join(filepath.Dir(spec), "workspace")})
	waitForJob(ctx, t, client, j.ns, j.name)
	log := j.engineLog(ctx, t, client)
	t.Logf("engine log:\n%s", log)
	checkLog(t, log, true,
		map[string]any{"type": "system", "subtype": "init", "engine": "scripted"},
		map[string]any{"type": "system", "subtype": "hook_response", "hook_event": "SessionStart", "command": "/usr/bin/printf", "exit_code": float64(0), "stdout": "hook says hello\n"},
		map[string]any{"type": "result", "subtype": "success", "result": "wrote out/hello.txt"},
	)
}

// TestDollarsReachTheEngineExactly runs testdata/dollars.yaml: on the
// kubelet, the prompt (an argv element) and an env value full of $(VAR),
// $$ and $ reach the engine as the spec wrote them.
func TestDollarsReachTheEngineExactly(t *testing.T) {
	l, client := requireCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	spec, err := filepath.Abs("testdata/dollars.yaml")
	if err != nil {
		t.Fatal(err)
	}
	j := applySpec(ctx, t, l, client, jobSpec{spec: spec, workspace: exampleWorkspace(t)})
	waitForJob(ctx, t, client, j.ns, j.name)
	log := j.engineLog(ctx, t, client)
	t.Logf("engine log:\n%s", log)

	const prompt = "costs $(HOME), $$(HOME), $HOME and $5"
	const value = "$(PATH) $$(PATH) $PATH $"
	sum := sha256.Sum256([]byte(value))
	checkLog(t, log, true,
		map[string]any{"type": "system", "subtype": "hook_response", "command": "/usr/bin/cat", "exit_code": float64(0)},
		map[string]any{"type": "env_hash", "name": "DOLLARS", "sha256": hex.EncodeToString(sum[:])},
	)
	// The hook printed the payload the engine sent it: the prompt it got.
	sc := bufio.NewScanner(bytes.NewReader(log))
	for sc.Scan() {
		var e struct {
			Subtype, Stdout string
		}
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Subtype != "hook_response" {
			continue
		}
		var payload struct{ Prompt string }
		if err := json.Unmarshal([]byte(e.Stdout), &payload); err != nil {
			t.Fatalf("the hook's stdout is not the event's JSON: %v: %q", err, e.Stdout)
		}
		if payload.Prompt != prompt {
			t.Errorf("the engine got the prompt %q, want %q", payload.Prompt, prompt)
		}
		return
	}
	t.Error("no hook_response in the engine's log")
}

// TestCodexJobSeedsItsHome runs the real Codex CLI as a Job with no
// network (testdata/codex-offline.yaml). It cannot finish (offline it
// retries until the deadline), so the test checks what comes first: both
// init containers exit 0, the engine prints JSON events, and, through
// kubectl exec (the API server reaching the kubelet on loopback), that
// the files the seed containers installed (CODEX_HOME/hooks.json) are
// there, owned by the container user.
func TestCodexJobSeedsItsHome(t *testing.T) {
	l, client := requireCluster(t)
	const codex = "/opt/engines/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
	if _, err := os.Stat(codex); err != nil {
		t.Fatalf("the real Codex CLI is missing (make real-engines): %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	spec, err := filepath.Abs("testdata/codex-offline.yaml")
	if err != nil {
		t.Fatal(err)
	}
	j := applySpec(ctx, t, l, client, jobSpec{spec: spec, workspace: exampleWorkspace(t), secrets: map[string]string{"OPENAI_API_KEY": "sk-hookbox-cluster-test"}})

	// The engine runs once both init containers are done; its first events
	// come within seconds.
	var log []byte
	for deadline := time.Now().Add(90 * time.Second); ; {
		if pods, err := client.CoreV1().Pods(j.ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + j.name}); err == nil && len(pods.Items) == 1 {
			p := pods.Items[0]
			for _, s := range p.Status.InitContainerStatuses {
				if term := s.State.Terminated; term != nil && term.ExitCode != 0 {
					t.Fatalf("init container %s exited %d: %s\n%s", s.Name, term.ExitCode, term.Message, describe(client, j.ns))
				}
			}
			if len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil {
				log, _ = client.CoreV1().Pods(j.ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: "engine"}).DoRaw(ctx)
				if bytes.Count(log, []byte("\n")) >= 2 {
					break
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the engine did not start and print within 90 s (log %q)\n%s", log, describe(client, j.ns))
		}
		time.Sleep(time.Second)
	}
	t.Logf("engine log so far:\n%s", log)
	// Codex writes "Reading additional input from stdin..." to stderr.
	checkLog(t, log, false, map[string]any{"type": "thread.started"}, map[string]any{"type": "turn.started"})

	pod := j.pod(ctx, t, client)
	for _, s := range pod.Status.InitContainerStatuses {
		if term := s.State.Terminated; term == nil || term.ExitCode != 0 {
			t.Errorf("init container %s: %+v, want exit 0", s.Name, s.State)
		}
	}
	// The files the seed containers installed, each owned by the container
	// user and readable, checked by the engine container's bash builtins.
	var seeded []string
	for _, c := range j.job(t).Spec.Template.Spec.InitContainers {
		if strings.HasPrefix(c.Name, "seed-file-") {
			seeded = append(seeded, c.Command[len(c.Command)-1])
		}
	}
	if len(seeded) == 0 {
		t.Fatal("the rendered Job has no seed-file init container")
	}
	check := `for f; do [[ -f $f && -O $f && -r $f ]] && echo "owned: $f"; done`
	args := append([]string{"--kubeconfig", l.AdminKubeconfig(), "-n", j.ns, "exec", pod.Name, "-c", "engine", "--", "/usr/bin/bash", "-c", check, "bash"}, seeded...)
	out, err := exec.CommandContext(ctx, l.BinPath("kubectl"), args...).CombinedOutput()
	if err != nil {
		t.Errorf("kubectl exec: %v\n%s", err, out)
	}
	for _, f := range seeded {
		if !strings.Contains(string(out), "owned: "+f+"\n") {
			t.Errorf("seeded file %s is not a readable file owned by the container user (kubectl exec printed %q)", f, out)
		}
	}
}

// waitForJob waits until the Job is Complete; a Failed Job, or a pod stuck
// before it runs, fails the test with the pod's status and events.
func waitForJob(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name string) *batchv1.Job {
	t.Helper()
	job, c := waitForJobEnd(ctx, t, client, ns, name)
	if c.Type == batchv1.JobFailed {
		t.Fatalf("job %s failed: %s: %s\n%s", name, c.Reason, c.Message, describe(client, ns))
	}
	return job
}

// waitForJobEnd waits until the Job has the condition Complete or Failed
// and returns it with that condition; the context's end fails the test.
func waitForJobEnd(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name string) (*batchv1.Job, batchv1.JobCondition) {
	t.Helper()
	for {
		job, err := client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			if c, ok := jobEnd(job); ok {
				return job, c
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("job %s did not end: %v (last error %v)\n%s", name, ctx.Err(), err, describe(client, ns))
		case <-time.After(time.Second):
		}
	}
}

// jobEnd is the Job's final condition, Complete or Failed, if it has one.
func jobEnd(job *batchv1.Job) (batchv1.JobCondition, bool) {
	for _, c := range job.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			return c, true
		}
	}
	return batchv1.JobCondition{}, false
}

// describe is what a person would look at: each pod's container states and
// the namespace's events.
func describe(client kubernetes.Interface, ns string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	pods, _ := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s: %s\n", p.Name, p.Status.Phase)
		for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			state, _ := json.Marshal(s.State)
			fmt.Fprintf(&b, "  container %s: %s\n", s.Name, state)
		}
	}
	events, _ := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	for _, e := range events.Items {
		fmt.Fprintf(&b, "event %s %s/%s: %s: %s\n", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
	}
	return b.String()
}

// checkLog checks the engine's log: the wanted events come in this order
// (each with at least these fields) and, with strict, every line is a JSON
// object. The API's log interleaves the container's stderr with its stdout
// (splitting them, PodLogsQuerySplitStreams, is alpha and off in 1.37), so
// an engine that writes to stderr cannot be checked strictly.
func checkLog(t *testing.T, log []byte, strict bool, want ...map[string]any) {
	t.Helper()
	events, bad := logEvents(log)
	if strict {
		for _, line := range bad {
			t.Errorf("log line %q is not a JSON object", line)
		}
	}
	i := 0
	for _, e := range events {
		if i < len(want) && matchesEvent(e, want[i]) {
			i++
		}
	}
	if i < len(want) {
		t.Errorf("engine log lacks, in order, the event %v (events: %v)", want[i], events)
	}
}

// logEvents are the log's lines that are JSON objects, in order, and the
// lines that are not.
func logEvents(log []byte) (events []map[string]any, bad []string) {
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e map[string]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			bad = append(bad, sc.Text())
			continue
		}
		events = append(events, e)
	}
	return events, bad
}

// matchesEvent reports whether e has every field of want with its value.
func matchesEvent(e, want map[string]any) bool {
	for k, v := range want {
		if e[k] != v {
			return false
		}
	}
	return true
}
