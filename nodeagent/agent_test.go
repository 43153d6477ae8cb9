package nodeagent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/containerd/nri/pkg/api"
	corev1 "k8s.io/api/core/v1"

	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/k8s"
)

type fakeKube struct {
	mu   sync.Mutex
	cms  map[string]*corev1.ConfigMap
	puts []*corev1.ConfigMap
}

func (k *fakeKube) ConfigMap(_ context.Context, ns, name string) (*corev1.ConfigMap, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if cm, ok := k.cms[ns+"/"+name]; ok {
		return cm, nil
	}
	return nil, errors.New("not found")
}

func (k *fakeKube) PutConfigMap(_ context.Context, cm *corev1.ConfigMap) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.puts = append(k.puts, cm)
	return nil
}

func testRender(t *testing.T) (string, string) {
	t.Helper()
	r := &render.Render{SchemaVersion: 1, Spawn: "hello",
		Engine: render.Engine{Kind: "exec", Exec: render.Exec{Path: "/usr/bin/engine", Argv: []string{"/usr/bin/engine"}}},
		Trace:  render.TracePolicy{Mode: render.TraceVerify}}
	r.SortLists()
	_, canonical, err := r.Digest()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(canonical)
	return string(canonical), hex.EncodeToString(sum[:])
}

func TestCheckRender(t *testing.T) {
	data, digest := testRender(t)
	if err := CheckRender([]byte(data), digest); err != nil {
		t.Fatal(err)
	}
	if err := CheckRender([]byte(data+" "), digest); err == nil {
		t.Fatal("an altered render passed")
	}
}

func TestJobName(t *testing.T) {
	if got := JobName(map[string]string{"job-name": "old", "batch.kubernetes.io/job-name": "new"}); got != "new" {
		t.Fatalf("JobName = %q", got)
	}
	if got := JobName(map[string]string{"job-name": "old"}); got != "old" {
		t.Fatalf("JobName = %q", got)
	}
	if got := JobName(nil); got != "" {
		t.Fatalf("JobName = %q", got)
	}
}

// A container the agent cannot arm gets its unchecked verdict with the
// reason; never a confirmed one.
func TestStartContainerUnarmed(t *testing.T) {
	data, digest := testRender(t)
	for _, tc := range []struct {
		name, configMap, annotation, reason string
		engine                              bool
	}{
		{"render-altered", data + " ", digest, ReasonRenderDigestDiffers, true},
		{"no-tracer", data, digest, ReasonTracerUnavailable, true},
		{"not-engine", data, digest, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := &fakeKube{cms: map[string]*corev1.ConfigMap{"ns/job-1": {Data: map[string]string{k8s.RenderKey: tc.configMap}}}}
			a := New(Config{Kube: kube, StateDir: t.TempDir()})
			pod := &api.PodSandbox{Id: "p", Name: "job-1-abcde", Uid: "uid", Namespace: "ns",
				Labels: map[string]string{"batch.kubernetes.io/job-name": "job-1"}, Annotations: map[string]string{k8s.AnnotationRenderSHA256: tc.annotation}}
			name := k8s.EngineContainer
			if !tc.engine {
				name = "seed-dirs"
			}
			if err := a.StartContainer(context.Background(), pod, &api.Container{Id: "c0123456789abcdef", Name: name}); err != nil {
				t.Fatal(err)
			}
			a.wg.Wait()
			if !tc.engine {
				if len(kube.puts) != 0 {
					t.Fatalf("a verdict for a container the agent does not judge: %v", kube.puts)
				}
				return
			}
			if len(kube.puts) != 1 || kube.puts[0].Name != "hookbox-verdict-job-1" || kube.puts[0].Namespace != "ns" {
				t.Fatalf("puts: %v", kube.puts)
			}
			var res launcher.Result
			if err := json.Unmarshal([]byte(kube.puts[0].Data[launcher.ResultFile]), &res); err != nil {
				t.Fatal(err)
			}
			if res.Trace.Status != "unchecked" || !slices.Contains(res.Trace.Reasons, "tracer-unavailable:"+tc.reason) {
				t.Fatalf("verdict %s %v, want unchecked with %s", res.Trace.Status, res.Trace.Reasons, tc.reason)
			}
			// The fetched record checks as it was sealed.
			dir := t.TempDir()
			if err := WriteRecord(kube.puts[0], dir); err != nil {
				t.Fatal(err)
			}
			c, err := launcher.CheckRecord(context.Background(), dir, launcher.CheckOptions{})
			if err != nil || len(c.Problems) > 0 || c.Status != "unchecked" {
				t.Fatalf("check: %+v %v", c, err)
			}
			if _, err := os.Stat(filepath.Join(dir, launcher.TraceFile)); err == nil {
				t.Fatal("an unarmed container has a trace")
			}
		})
	}
}
