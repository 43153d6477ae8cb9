package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"hookbox.dev/hookbox/cluster"
)

// claudeEngine is the real Claude Code CLI where make real-engines puts it
// (internal/testapi/anthropic.ClaudeEngine; this module does not import
// hookbox's).
const claudeEngine = "/opt/engines/node_modules/@anthropic-ai/claude-code-linux-x64/claude"

// A turn of the scripted Anthropic API (internal/testapi/anthropic.Turn, as
// cmd/hookbox-scripted-api reads it).
type apiTurn struct {
	Text    string   `json:",omitempty"`
	ToolUse *apiTool `json:",omitempty"`
}

type apiTool struct {
	Name  string
	Input map[string]string
}

// apiRequest is the part of a request line of hookbox-scripted-api's log
// the tests read.
type apiRequest struct {
	Method, Path string
	HasAPIKey    bool
	Messages     json.RawMessage // the decoded body of a model request
}

// scriptedAPIPod runs hookbox-scripted-api as a bare pod in a namespace of
// its own, one container per script, container i listening on port
// 8081+i, and returns the pod's IP once every container has said it
// listens. The pods have no route out, but reach each other: this is the
// only model API a Job's engine can get to.
func scriptedAPIPod(ctx context.Context, t *testing.T, l cluster.Layout, client kubernetes.Interface, scripts map[string][]apiTurn, order []string) (ns, ip string) {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(repoBin(t, "hookbox-scripted-api"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "usr", "local", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "usr", "local", "bin", "hookbox-scripted-api"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	img, err := cluster.ImageFromDir(dir, "hookbox.dev/test/scripted-api@", ocispec.ImageConfig{User: "65532:65532"}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ImportImage(img); err != nil {
		t.Fatal(err)
	}

	ns = testNamespace(ctx, t, client, "hookbox-api-")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "scripts", Namespace: ns}, Data: map[string]string{}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "scripted-api", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr(false),
			EnableServiceLinks:           ptr(false),
			Volumes: []corev1.Volume{{Name: "scripts", VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "scripts"}}}}},
		},
	}
	for i, name := range order {
		data, err := json.Marshal(scripts[name])
		if err != nil {
			t.Fatal(err)
		}
		cm.Data[name+".json"] = string(data)
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
			Name: name, Image: img.Name,
			Command: []string{"/usr/local/bin/hookbox-scripted-api", "--listen", fmt.Sprintf("0.0.0.0:%d", 8081+i), "--script", "/scripts/" + name + ".json"},
			SecurityContext: &corev1.SecurityContext{
				RunAsNonRoot: ptr(true), ReadOnlyRootFilesystem: ptr(true), AllowPrivilegeEscalation: ptr(false),
				Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			VolumeMounts: []corev1.VolumeMount{{Name: "scripts", MountPath: "/scripts", ReadOnly: true}},
		})
	}
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No readiness probe: the kubelet probes from the node, which has no
	// route to the pods. Each container writes "listening on" to stderr.
	for deadline := time.Now().Add(2 * time.Minute); ; {
		p, err := client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			listening := 0
			for _, name := range order {
				log, _ := client.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: name}).DoRaw(ctx)
				if bytes.Contains(log, []byte("listening on")) {
					listening++
				}
			}
			if listening == len(order) {
				return ns, p.Status.PodIP
			}
		}
		if err == nil && (p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded) || time.Now().After(deadline) {
			t.Fatalf("the scripted API pod does not run and listen (last error %v)\n%s", err, describe(client, ns))
		}
		time.Sleep(time.Second)
	}
}

// testNamespace creates a namespace named prefix and a number, which the
// test's cleanup deletes (unless HOOKBOX_CLUSTER_KEEP=1).
func testNamespace(ctx context.Context, t *testing.T, client kubernetes.Interface, prefix string) string {
	t.Helper()
	ns := fmt.Sprintf("%s%d", prefix, time.Now().UnixNano()%1_000_000_000)
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if os.Getenv("HOOKBOX_CLUSTER_KEEP") == "1" {
			t.Logf("HOOKBOX_CLUSTER_KEEP=1: namespace %s is kept", ns)
			return
		}
		_ = client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	return ns
}

// apiRequests reads the requests one container of the scripted API pod
// logged.
func apiRequests(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, container string) []apiRequest {
	t.Helper()
	log, err := client.CoreV1().Pods(ns).GetLogs("scripted-api", &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of the scripted API (%s): %v", container, err)
	}
	var out []apiRequest
	for _, line := range bytes.Split(log, []byte("\n")) {
		var r apiRequest
		if json.Unmarshal(line, &r) == nil && r.Method != "" {
			out = append(out, r)
		}
	}
	return out
}

// builtJobs is a spec rendered with --format k8s --build (images imported
// into the cluster's containerd) and applied in a namespace of its own.
type builtJobs struct {
	ns      string
	objects []byte
	jobs    []batchv1.Job
	stderr  string // hookbox's: the images it built
}

// applyBuilt renders spec for the cluster as the README's pipeline does,
// with --build (every image the Jobs use built by hookbox and imported
// into the cluster's containerd, a runfiles image per spawn), creates the
// namespace, workspace claim and Secret, and applies the objects.
func applyBuilt(ctx context.Context, t *testing.T, l cluster.Layout, client kubernetes.Interface, spec, workspaceDir string, secrets map[string]string, extra ...string) builtJobs {
	t.Helper()
	hookbox := repoBin(t, "hookbox")
	repoBin(t, "hookbox-init")
	repoBin(t, "hookbox-seed")
	ns := jobNamespace(ctx, t, client, workspaceDir, secrets)
	args := append([]string{"--address", l.ContainerdSocket(), "render", "--state-dir", t.TempDir(), "--format", "k8s", "--build",
		"--namespace", ns, spec}, extra...)
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, hookbox, args...)
	cmd.Stderr = &stderr
	objects, err := cmd.Output()
	if err != nil {
		t.Fatalf("hookbox %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	t.Logf("hookbox render --build:\n%s", stderr.String())
	kubectlApply(ctx, t, l, objects)
	b := builtJobs{ns: ns, objects: objects, stderr: stderr.String()}
	for _, doc := range strings.Split(string(objects), "\n---\n") {
		var job batchv1.Job
		if err := yaml.UnmarshalStrict([]byte(doc), &job); err == nil && job.Kind == "Job" {
			b.jobs = append(b.jobs, job)
		}
	}
	return b
}

// pipelineVariant writes the test's variant of examples/pipeline.yaml and
// returns its path. The example stays as a user writes it (each item's own
// engine at /usr/local/bin, the real model APIs); here every item keeps its
// name, prompt, workspace, hooks, tools, params, env, secrets' role and
// artifacts, and changes only what the cluster needs:
//   - the engine is the real Claude Code CLI (make real-engines) for all
//     three: the scripted model API the pods can reach speaks Anthropic's
//     Messages API; the security item keeps its model and effort;
//   - engine.baseURL is the scripted API's container for that item
//     (http://POD-IP:PORT) and network.allow is model-api, which the
//     compiler turns into exactly that IP:PORT entry (an explicit IP entry
//     may name a private address): the Job's egress proxy sidecar lets
//     that through and nothing else, and the bridge has no route out;
//   - --allowedTools Read,Write,Bash: in -p mode Claude Code refuses a Write
//     it has no permission for, so the review could not be written;
//   - CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 keeps Claude Code to its
//     model API (internal/testapi/anthropic.QuietEnv);
//   - the workspace and hook paths are absolute (the file is written
//     elsewhere), and memory is 2Gi rather than the default 4Gi so that
//     three pods fit beside the other tests on the shared node.
func pipelineVariant(t *testing.T, apiIP string, names []string) string {
	t.Helper()
	data, err := os.ReadFile("../examples/pipeline.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var list map[string]any
	if err := yaml.Unmarshal(data, &list); err != nil {
		t.Fatal(err)
	}
	examples, err := filepath.Abs("../examples")
	if err != nil {
		t.Fatal(err)
	}
	items := list["items"].([]any)
	if len(items) != len(names) {
		t.Fatalf("examples/pipeline.yaml has %d items, the test scripts %d", len(items), len(names))
	}
	for i, it := range items {
		item := it.(map[string]any)
		if got := item["metadata"].(map[string]any)["name"]; got != names[i] {
			t.Fatalf("examples/pipeline.yaml item %d is %v, the test scripts %s", i, got, names[i])
		}
		spec := item["spec"].(map[string]any)
		old := spec["engine"].(map[string]any)
		engine := map[string]any{"kind": "claude", "path": claudeEngine,
			"baseURL": fmt.Sprintf("http://%s:%d", apiIP, 8081+i),
			"args":    []string{"--allowedTools", "Read,Write,Bash", "--max-turns", "8"}}
		if old["kind"] == "claude" {
			engine["model"], engine["effort"] = old["model"], old["effort"]
		}
		spec["engine"] = engine
		spec["secrets"] = []string{"ANTHROPIC_API_KEY"}
		spec["network"] = map[string]any{"allow": []string{"model-api"}}
		spec["workspace"] = filepath.Join(examples, spec["workspace"].(string))
		env := spec["env"].(map[string]any)["set"].(map[string]any)
		env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"
		hooks, _ := spec["hooks"].([]any)
		for _, h := range hooks {
			argv := h.(map[string]any)["argv"].([]any)
			if p := argv[0].(string); !filepath.IsAbs(p) {
				argv[0] = filepath.Join(examples, p)
			}
		}
		limits, _ := spec["limits"].(map[string]any)
		if limits == nil {
			limits = map[string]any{}
			spec["limits"] = limits
		}
		limits["memory"] = "2Gi"
	}
	out, err := yaml.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "pipeline.yaml")
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("the test's variant of examples/pipeline.yaml:\n%s", out)
	return file
}

// reviewScript is what the scripted model answers one review Job with:
// read the workspace's README, (for the security review) run git through
// the Bash tool, which fires the PreToolUse hook, write the review, read
// it back (so its text is in the engine's log and in the next request),
// and end.
func reviewScript(name string, bash bool) []apiTurn {
	turns := []apiTurn{{ToolUse: &apiTool{Name: "Read", Input: map[string]string{"file_path": "/workspace/README.md"}}}}
	if bash {
		turns = append(turns, apiTurn{ToolUse: &apiTool{Name: "Bash", Input: map[string]string{"command": "git --version", "description": "git's version"}}})
	}
	return append(turns,
		apiTurn{Text: "Writing the review.", ToolUse: &apiTool{Name: "Write", Input: map[string]string{"file_path": "/run/hookbox/out/review.md", "content": reviewText(name)}}},
		apiTurn{ToolUse: &apiTool{Name: "Read", Input: map[string]string{"file_path": "/run/hookbox/out/review.md"}}},
		apiTurn{Text: "The review is in /run/hookbox/out/review.md."},
	)
}

// reviewText is one line: Claude Code's Read prefixes each line with its
// number, so the line itself is what the log shows.
func reviewText(name string) string { return name + ": no findings in this change.\n" }

// TestPipelineJobsWriteTheirReviews runs examples/pipeline.yaml's three
// Jobs (the test's variant: pipelineVariant) with the real Claude Code CLI
// against the scripted Anthropic API, which runs as a pod: each Job's
// engine reaches its model API only through the Job's egress proxy sidecar
// and its allowlist entry, does the scripted task (the security review
// also runs git through its Bash tool, and its PreToolUse hook fires), and
// writes /run/hookbox/out/review.md. The run dir ends with the pod, so the
// review is read back through the engine's Read tool: its text is in the
// engine's log (the stream-json tool result) and in the request the API got
// next. Each Job must end Complete; every attempt the proxies logged must
// be an allowed CONNECT to the Job's own API port.
func TestPipelineJobsWriteTheirReviews(t *testing.T) {
	l, client := requireCluster(t)
	if _, err := os.Stat(claudeEngine); err != nil {
		t.Fatalf("the real Claude Code CLI is missing (make real-engines): %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	names := []string{"review-security", "review-tests", "review-docs"}
	scripts := map[string][]apiTurn{}
	for _, n := range names {
		scripts[n] = reviewScript(n, n == "review-security")
	}
	apiNS, apiIP := scriptedAPIPod(ctx, t, l, client, scripts, names)
	t.Logf("scripted API pod at %s (namespace %s), ports 8081-8083", apiIP, apiNS)
	spec := pipelineVariant(t, apiIP, names)

	start := time.Now()
	b := applyBuilt(ctx, t, l, client, spec, exampleWorkspace(t),
		map[string]string{"ANTHROPIC_API_KEY": "sk-ant-hookbox-cluster-test"}, "--set", "pr=123", "--set", "ref=refs/pull/123/head")
	built := time.Since(start)
	if len(b.jobs) != len(names) {
		t.Fatalf("the render has %d Jobs, want %d", len(b.jobs), len(names))
	}
	applied := time.Now()
	type outcome struct {
		job      string
		complete time.Duration
	}
	var outcomes []outcome
	for _, job := range b.jobs {
		done := waitForJob(ctx, t, client, b.ns, job.Name)
		var took time.Duration
		if done.Status.StartTime != nil && done.Status.CompletionTime != nil {
			took = done.Status.CompletionTime.Sub(done.Status.StartTime.Time)
		}
		outcomes = append(outcomes, outcome{job.Name, took})
	}
	t.Logf("render --build and apply: %v; all three Complete %v after apply", built.Round(time.Millisecond), time.Since(applied).Round(time.Second))
	for _, o := range outcomes {
		t.Logf("job %s: Complete, %v from start to completion", o.job, o.complete.Round(time.Second))
	}

	for i, job := range b.jobs {
		name := job.Labels["hookbox.dev/spawn"]
		if name != names[i] {
			t.Fatalf("job %d is spawn %q, want %q", i, name, names[i])
		}
		j := specJob{ns: b.ns, name: job.Name, objects: b.objects}
		pod := j.pod(ctx, t, client)
		log := j.engineLog(ctx, t, client)
		t.Logf("%s engine log:\n%s", name, log)
		checkLog(t, log, false,
			map[string]any{"type": "system", "subtype": "init", "cwd": "/workspace"},
			map[string]any{"type": "result", "subtype": "success", "result": "The review is in /run/hookbox/out/review.md."},
		)
		line := strings.TrimSuffix(reviewText(name), "\n")
		if !bytes.Contains(log, []byte(line)) {
			t.Errorf("%s: the review's text is not in the engine's log (its Read of review.md)", name)
		}
		if name == "review-security" {
			checkHookRan(t, log)
		}

		// The API saw the scripted turns, and the review read back.
		reqs := apiRequests(ctx, t, client, apiNS, name)
		var model []apiRequest
		for _, r := range reqs {
			if len(r.Messages) > 0 && string(r.Messages) != "null" {
				model = append(model, r)
			}
			if !r.HasAPIKey {
				t.Errorf("%s: a request without the API key: %+v", name, r)
			}
		}
		if len(model) < len(scripts[name]) {
			t.Errorf("%s: the API saw %d model requests, want the %d scripted turns", name, len(model), len(scripts[name]))
		} else if !bytes.Contains(model[len(scripts[name])-1].Messages, []byte(line)) {
			t.Errorf("%s: the last model request does not carry the review's text", name)
		}

		// Every attempt went through the proxy, to this Job's API port only.
		proxyLog, err := client.CoreV1().Pods(b.ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: k8sProxyContainer}).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%s:%d", apiIP, 8081+i)
		attempts := 0
		for _, line := range bytes.Split(proxyLog, []byte("\n")) {
			var a struct {
				Host     string `json:"host"`
				Port     int    `json:"port"`
				Decision string `json:"decision"`
				Rule     string `json:"rule"`
			}
			if json.Unmarshal(line, &a) != nil || a.Host == "" {
				continue
			}
			attempts++
			if a.Decision != "allowed" || fmt.Sprintf("%s:%d", a.Host, a.Port) != want {
				t.Errorf("%s: proxy attempt %s", name, line)
			}
		}
		if attempts == 0 {
			t.Errorf("%s: the proxy logged no attempt:\n%s", name, proxyLog)
		}
		t.Logf("%s: %d proxy attempts, all allowed to %s; the API got %d requests (%d model requests)", name, attempts, want, len(reqs), len(model))
	}
}

// checkHookRan checks that the PreToolUse hook of the Bash call ran and let
// git run: Claude Code's stream-json has the tool's result with git's
// version.
func checkHookRan(t *testing.T, log []byte) {
	t.Helper()
	if !bytes.Contains(log, []byte("git version ")) {
		t.Errorf("git's output is not in the engine's log: the Bash call or its PreToolUse hook failed")
	}
}

func ptr[T any](v T) *T { return &v }
