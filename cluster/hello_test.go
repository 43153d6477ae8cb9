package cluster_test

import (
	"bufio"
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
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// images builds and imports the three images a hookbox Job needs and
// returns their digest references: hookbox's base image (hookbox image
// build), the runfiles image (the tree hookbox render --runfiles
// assembled, as one layer) and a seed image (busybox's mkdir and install).
//
// Until hookbox has commands of its own for the runfiles and seed images,
// the test makes them with cluster.ImageFromDir.
func images(t *testing.T, l cluster.Layout, hookbox, spec, stateDir string) (base, runfiles, seed string) {
	t.Helper()
	layoutFile := filepath.Join(t.TempDir(), "base.tar")
	out := strings.Fields(string(run(t, hookbox, "image", "build", "--oci-layout", layoutFile)))
	if len(out) < 2 {
		t.Fatalf("hookbox image build printed %q, want NAME DIGEST", out)
	}
	name, digest := out[0], out[1]
	if _, err := l.Ctr("images", "import", "--local", "--snapshotter", "overlayfs", layoutFile); err != nil {
		t.Fatal(err)
	}
	repo := name[:strings.LastIndex(name, ":")]
	base = repo + "@" + digest
	// The CRI finds NAME@sha256:… by that very name.
	if _, err := l.Ctr("images", "tag", "--local", "--force", name, base); err != nil {
		t.Fatal(err)
	}

	run(t, hookbox, "render", "--state-dir", stateDir, "--runfiles", "--format", "digests", spec)
	trees, err := filepath.Glob(filepath.Join(stateDir, "runfiles", "trees", "*"))
	if err != nil || len(trees) != 1 {
		t.Fatalf("want one runfiles tree in %s, got %v (%v)", stateDir, trees, err)
	}
	img, err := cluster.ImageFromDir(trees[0], "hookbox.dev/test/runfiles@", ocispec.ImageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ImportImage(img); err != nil {
		t.Fatal(err)
	}
	runfiles = img.Name

	const busybox = "/bin/busybox"
	bb, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatalf("the seed image needs a static busybox at %s (apt-get install busybox-static): %v", busybox, err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range []string{"mkdir", "install"} {
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	img, err = cluster.ImageFromDir(dir, "hookbox.dev/test/seed@", ocispec.ImageConfig{Env: []string{"PATH=/bin"}, User: "65532:65532"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ImportImage(img); err != nil {
		t.Fatal(err)
	}
	return base, runfiles, img.Name
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

// TestHelloJobCompletes renders examples/hello.yaml as Kubernetes objects,
// applies them with the cluster's kubectl and checks that the Job completes
// and its log is the scripted engine's NDJSON: the init event, the
// SessionStart hook's output (a dynamically linked /usr/bin/printf from the
// runfiles image volume), the result.
func TestHelloJobCompletes(t *testing.T) {
	l, client := requireCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	hookbox := repoBin(t, "hookbox")
	repoBin(t, "hookbox-init")
	repoBin(t, "hookbox-scripted-engine")
	spec, err := filepath.Abs("../examples/hello.yaml")
	if err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	base, runfiles, seed := images(t, l, hookbox, spec, stateDir)

	ns := fmt.Sprintf("hookbox-test-%d", time.Now().UnixNano()%1_000_000_000)
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	workspace(t, client, ns, filepath.Join(filepath.Dir(spec), "workspace"))

	objects := run(t, hookbox, "render", "--state-dir", stateDir, "--runfiles", "--format", "k8s", spec,
		"--image", base, "--runfiles-image", runfiles, "--seed-image", seed, "--namespace", ns)
	objectsFile := filepath.Join(t.TempDir(), "hello.yaml")
	if err := os.WriteFile(objectsFile, objects, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("applying %d bytes of objects (%s)", len(objects), objectsFile)
	kubectl := exec.CommandContext(ctx, l.BinPath("kubectl"), "--kubeconfig", l.AdminKubeconfig(), "apply", "-f", objectsFile)
	if out, err := kubectl.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	} else {
		t.Logf("kubectl apply:\n%s", out)
	}
	job := waitForJob(ctx, t, client, ns, jobName(t, objects))

	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job.Name})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("want one pod of job %s, got %v (%v)", job.Name, len(pods.Items), err)
	}
	log, err := client.CoreV1().Pods(ns).GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{Container: "engine"}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of the engine container: %v", err)
	}
	t.Logf("engine log:\n%s", log)
	checkHelloLog(t, log)
}

// jobName is the name of the one Job among the rendered documents.
func jobName(t *testing.T, objects []byte) string {
	t.Helper()
	var names []string
	for _, doc := range strings.Split(string(objects), "\n---\n") {
		var obj metav1.PartialObjectMetadata
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("rendered document does not decode: %v\n%s", err, doc)
		}
		if obj.Kind == "Job" {
			names = append(names, obj.Name)
		}
	}
	if len(names) != 1 {
		t.Fatalf("want one Job in the rendered objects, got %v", names)
	}
	return names[0]
}

// waitForJob waits until the Job is Complete; a Failed Job, or a pod stuck
// before it runs, fails the test with the pod's status and events.
func waitForJob(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name string) *batchv1.Job {
	t.Helper()
	for {
		job, err := client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			for _, c := range job.Status.Conditions {
				if c.Status != corev1.ConditionTrue {
					continue
				}
				switch c.Type {
				case batchv1.JobComplete:
					return job
				case batchv1.JobFailed:
					t.Fatalf("job %s failed: %s: %s\n%s", name, c.Reason, c.Message, describe(client, ns))
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("job %s did not complete: %v (last error %v)\n%s", name, ctx.Err(), err, describe(client, ns))
		case <-time.After(time.Second):
		}
	}
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

// checkHelloLog checks the engine's log line by line: every line is a JSON
// object, and the script's events come in order.
func checkHelloLog(t *testing.T, log []byte) {
	t.Helper()
	var events []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(log))
	for sc.Scan() {
		var e map[string]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Errorf("log line %q is not a JSON object: %v", sc.Text(), err)
			continue
		}
		events = append(events, e)
	}
	want := []map[string]any{
		{"type": "system", "subtype": "init", "engine": "scripted"},
		{"type": "system", "subtype": "hook_response", "hook_event": "SessionStart", "command": "/usr/bin/printf", "exit_code": float64(0), "stdout": "hook says hello\n"},
		{"type": "result", "subtype": "success", "result": "wrote out/hello.txt"},
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

// matchesEvent reports whether e has every field of want with its value.
func matchesEvent(e, want map[string]any) bool {
	for k, v := range want {
		if e[k] != v {
			return false
		}
	}
	return true
}
