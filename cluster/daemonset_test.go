package cluster_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"hookbox.dev/hookbox/cluster"
)

// TestVerdictFromTheDaemonSet deploys the node agent as a user would: the
// objects `hookbox k8s agent-manifest` prints (service account, role bound
// in the Job's namespace only, DaemonSet; not privileged), its image the
// proxy image `hookbox image build` makes (the static hookbox), the node
// key as a Secret. A hello Job then gets a verdict that `hookbox k8s
// verdict` verifies with the node's public key: confirmed.
func TestVerdictFromTheDaemonSet(t *testing.T) {
	l, client := requireCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	hookbox := repoBin(t, "hookbox")
	keyDir, pub := agentKey(t, hookbox)

	// The proxy image (the static hookbox) is the agent's image.
	stdout, _ := runOutput(t, hookbox, "--address", l.ContainerdSocket(), "image", "build", "--agent", "--namespace", cluster.Namespace)
	var proxy string
	for _, line := range strings.Split(string(stdout), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "proxy" {
			proxy = f[1]
		}
	}
	if !strings.Contains(proxy, "@sha256:") {
		t.Fatalf("hookbox image build printed no proxy image:\n%s", stdout)
	}
	agentNS := testNamespace(ctx, t, client, "hookbox-test-agent-")
	jobNS := jobNamespace(ctx, t, client, exampleWorkspace(t), nil)
	key, err := os.ReadFile(filepath.Join(keyDir, "attestation.key"))
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hookbox-node-agent-key", Namespace: agentNS}, Data: map[string][]byte{"attestation.key": key}}
	if _, err := client.CoreV1().Secrets(agentNS).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	manifest := run(t, hookbox, "k8s", "agent-manifest", "--image", proxy, "--namespace", agentNS,
		"--job-namespace", jobNS, "--nri-socket", l.NRISocket())
	// The ClusterRole is cluster-scoped: the namespaces' deletion leaves it.
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoles().Delete(context.Background(), "hookbox-node-agent", metav1.DeleteOptions{})
	})
	kubectlApply(ctx, t, l, withAPIServerOnTheNode(t, manifest))
	agentPod := waitAgentSynchronized(ctx, t, client, agentNS)
	t.Cleanup(func() {
		if log, err := client.CoreV1().Pods(agentNS).GetLogs(agentPod, &corev1.PodLogOptions{}).DoRaw(context.Background()); err == nil {
			t.Logf("the DaemonSet's agent log:\n%s", log)
		}
	})

	j := applySpec(ctx, t, l, client, jobSpec{spec: specPath(t, "../examples/hello.yaml"), workspace: exampleWorkspace(t), ns: jobNS})
	waitForJob(ctx, t, client, j.ns, j.name)
	c, code := waitVerdict(ctx, t, l, client, j, pub)
	if c.Status != "confirmed" || code != 0 || c.Attestation == nil {
		t.Fatalf("verdict %s %v (exit %d, attestation %v), want confirmed, signed, exit 0", c.Status, c.Reasons, code, c.Attestation)
	}
}

// withAPIServerOnTheNode gives the DaemonSet's pod the node's network and
// the API server's loopback address in place of the kubernetes service's:
// the test cluster has no kube-proxy, so no pod reaches a service address
// (docs/cluster.md). The rest of the manifest is applied as printed.
func withAPIServerOnTheNode(t *testing.T, manifest []byte) []byte {
	t.Helper()
	docs := strings.Split(string(manifest), "\n---\n")
	found := false
	for i, doc := range docs {
		if !strings.Contains(doc, "kind: DaemonSet") {
			continue
		}
		var ds appsv1.DaemonSet
		if err := yaml.Unmarshal([]byte(doc), &ds); err != nil {
			t.Fatal(err)
		}
		pod := &ds.Spec.Template.Spec
		pod.HostNetwork = true
		c := &pod.Containers[0]
		c.Env = append(c.Env, corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: cluster.Host},
			corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: strconv.Itoa(cluster.APIServerPort)})
		b, err := yaml.Marshal(&ds)
		if err != nil {
			t.Fatal(err)
		}
		docs[i], found = string(b), true
	}
	if !found {
		t.Fatalf("no DaemonSet in the agent's manifest:\n%s", manifest)
	}
	return []byte(strings.Join(docs, "\n---\n"))
}

// waitAgentSynchronized waits until the DaemonSet's pod runs and its agent
// has registered with NRI and synchronized, and returns the pod's name.
func waitAgentSynchronized(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string) string {
	t.Helper()
	for {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=hookbox-node-agent"})
		if err == nil && len(pods.Items) == 1 {
			for _, cs := range pods.Items[0].Status.ContainerStatuses {
				if cs.RestartCount > 0 {
					t.Fatalf("the DaemonSet's agent restarted\n%s", describe(client, ns))
				}
			}
		}
		if err == nil && len(pods.Items) == 1 && pods.Items[0].Status.Phase == corev1.PodRunning {
			name := pods.Items[0].Name
			log, err := client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err == nil && strings.Contains(string(log), "hookbox node agent: synchronized") {
				return name
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the DaemonSet's agent never synchronized\n%s", describe(client, ns))
		case <-time.After(500 * time.Millisecond):
		}
	}
}
