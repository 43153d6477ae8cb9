package nodeagent

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"hookbox.dev/hookbox/attest"
	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/render/k8s"
)

// Reason ids of a container the agent could not arm in time (the verdict
// is unchecked, tracer-unavailable:<id>).
const (
	// ReasonStartedBeforeAgent: the container was already running when the
	// agent connected (or reconnected: an agent restarted while it ran), so
	// its first execs may have gone unseen.
	ReasonStartedBeforeAgent = "started-before-agent"
	// ReasonRenderDigestDiffers: the ConfigMap's render.json does not
	// digest to the pod's hookbox.dev/render-sha256: the render was
	// altered after rendering, and is refused.
	ReasonRenderDigestDiffers = "render-digest-differs"
	// ReasonRenderUnavailable: the render could not be read (no ConfigMap,
	// no render.json, no annotation, not a render).
	ReasonRenderUnavailable = "render-unavailable"
	// ReasonCgroupUnknown: the container has no cgroup2 directory the
	// agent can name, or its init is not in it.
	ReasonCgroupUnknown = "cgroup-unknown"
	// ReasonArmFailed: the tracer would not watch the cgroup, or the
	// runfiles' identities could not be read in the container.
	ReasonArmFailed = "arm-failed"
	// ReasonArmLate: arming took longer than NRI waits for the reply, so
	// the container may have started first.
	ReasonArmLate = "arm-late"
	// ReasonTracerUnavailable: the agent has no BPF tracer.
	ReasonTracerUnavailable = "node-tracer-unavailable"
)

// VerdictPrefix names a Job's verdict ConfigMap: VerdictPrefix + Job name.
const VerdictPrefix = "hookbox-verdict-"

// LabelVerdictOf is the verdict ConfigMap's label naming its Job.
const LabelVerdictOf = "hookbox.dev/verdict-of"

// Job labels the Job controller puts on its pods (the first is the
// current one, the second its older form).
var jobNameLabels = []string{"batch.kubernetes.io/job-name", "job-name"}

// RecordFiles are the record files a verdict ConfigMap carries, by key.
var RecordFiles = []string{launcher.RenderFile, launcher.IdentitiesFile, launcher.TraceFile, launcher.ResultFile, attest.File}

// IsHookboxPod: the pod was rendered by hookbox (it names its render).
func IsHookboxPod(annotations map[string]string) bool {
	_, ok := annotations[k8s.AnnotationRenderSHA256]
	return ok
}

// JobName is the name of the Job a pod belongs to, from the labels the
// Job controller gives its pods; "" for a pod of no Job.
func JobName(labels map[string]string) string {
	for _, l := range jobNameLabels {
		if v := labels[l]; v != "" {
			return v
		}
	}
	return ""
}

// VerdictName is the name of job's verdict ConfigMap.
func VerdictName(job string) string { return VerdictPrefix + job }

// CheckRender checks the ConfigMap's render bytes against the pod's
// annotation (the render digest, lowercase hex): nil only when the bytes
// digest to it.
func CheckRender(data []byte, annotation string) error {
	sum := sha256.Sum256(data)
	got := hex.EncodeToString(sum[:])
	if want := strings.TrimPrefix(annotation, "sha256:"); got != want {
		return fmt.Errorf("the ConfigMap's %s digests to sha256:%s; the pod's %s says %s: the render was changed after it was rendered", k8s.RenderKey, got, k8s.AnnotationRenderSHA256, annotation)
	}
	return nil
}

// VerdictConfigMap is the ConfigMap holding the record in dir (the files
// of RecordFiles that exist) for job in namespace.
func VerdictConfigMap(namespace, job, dir string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: VerdictName(job), Namespace: namespace,
			Labels: map[string]string{k8s.LabelManagedBy: "hookbox"}},
		Data: map[string]string{},
	}
	if errs := validation.IsValidLabelValue(job); len(errs) == 0 {
		cm.Labels[LabelVerdictOf] = job
	}
	size := 0
	for _, name := range RecordFiles {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		cm.Data[name] = string(data)
		size += len(data)
	}
	if size > maxConfigMapBytes {
		return nil, fmt.Errorf("the record of job %s/%s is %d bytes, more than a ConfigMap holds (%d): it stays on the node in %s", namespace, job, size, maxConfigMapBytes, dir)
	}
	return cm, nil
}

// maxConfigMapBytes is the API server's limit on a ConfigMap's data.
const maxConfigMapBytes = 1 << 20

// WriteRecord writes a verdict ConfigMap's files into dir, which must
// exist, for CheckRecord. Only the keys of RecordFiles are written.
func WriteRecord(cm *corev1.ConfigMap, dir string) error {
	for _, name := range RecordFiles {
		data, ok := cm.Data[name]
		if !ok {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			return err
		}
	}
	return nil
}
