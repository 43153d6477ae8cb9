package cluster_test

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestFailingEngineFailsTheJobOnce runs testdata/fails.yaml, whose engine
// exits 3: the Job's podFailurePolicy (FailJob on a non-zero exit of the
// engine container) ends it Failed with reason PodFailurePolicy, and no
// second pod is made.
func TestFailingEngineFailsTheJobOnce(t *testing.T) {
	l, client := requireCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	spec, err := filepath.Abs("testdata/fails.yaml")
	if err != nil {
		t.Fatal(err)
	}
	j := applySpec(ctx, t, l, client, jobSpec{spec: spec, workspace: exampleWorkspace(t)})
	job, c := waitForJobEnd(ctx, t, client, j.ns, j.name)
	if c.Type != batchv1.JobFailed || c.Reason != batchv1.JobReasonPodFailurePolicy {
		t.Fatalf("job %s ended %s (%s: %s), want Failed by %s\n%s", j.name, c.Type, c.Reason, c.Message, batchv1.JobReasonPodFailurePolicy, describe(client, j.ns))
	}
	t.Logf("job %s: %s: %s: %s", j.name, c.Type, c.Reason, c.Message)
	if job.Status.Failed != 1 || job.Status.Succeeded != 0 {
		t.Errorf("job status: %d failed, %d succeeded pods; want 1 failed, 0 succeeded", job.Status.Failed, job.Status.Succeeded)
	}
	pod := j.pod(ctx, t, client) // exactly one: no retry
	if code := engineExitCode(pod); code != 3 {
		t.Errorf("engine container: exit code %d, want the script's 3\n%s", code, describe(client, j.ns))
	}
	checkLog(t, j.engineLog(ctx, t, client), false, map[string]any{"type": "failing"})
}

// TestDeadlineEndsTheJob runs testdata/deadline.yaml, whose engine sleeps
// past limits.timeout (30s, the Job's activeDeadlineSeconds): the engine
// starts and prints, then the Job ends Failed with reason DeadlineExceeded.
func TestDeadlineEndsTheJob(t *testing.T) {
	l, client := requireCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	spec, err := filepath.Abs("testdata/deadline.yaml")
	if err != nil {
		t.Fatal(err)
	}
	j := applySpec(ctx, t, l, client, jobSpec{spec: spec, workspace: exampleWorkspace(t)})
	if d := j.job(t).Spec.ActiveDeadlineSeconds; d == nil || *d != 30 {
		t.Fatalf("the rendered Job's activeDeadlineSeconds is %v, want 30 (limits.timeout)", d)
	}
	// The controller deletes the pod when the deadline passes, so its log
	// is read while the engine runs.
	started := false
	var c batchv1.JobCondition
	for {
		if !started {
			pods, err := client.CoreV1().Pods(j.ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + j.name})
			if err == nil && len(pods.Items) == 1 {
				log, _ := client.CoreV1().Pods(j.ns).GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{Container: "engine"}).DoRaw(ctx)
				events, _ := logEvents(log)
				started = slices.ContainsFunc(events, func(e map[string]any) bool { return e["type"] == "sleeping" })
			}
		}
		job, err := client.BatchV1().Jobs(j.ns).Get(ctx, j.name, metav1.GetOptions{})
		var ended bool
		if err == nil {
			c, ended = jobEnd(job)
		}
		if ended {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("job %s did not end: %v\n%s", j.name, ctx.Err(), describe(client, j.ns))
		case <-time.After(500 * time.Millisecond):
		}
	}
	t.Logf("job %s: %s: %s: %s", j.name, c.Type, c.Reason, c.Message)
	if c.Type != batchv1.JobFailed || c.Reason != batchv1.JobReasonDeadlineExceeded {
		t.Errorf("job %s ended %s (%s: %s), want Failed by %s\n%s", j.name, c.Type, c.Reason, c.Message, batchv1.JobReasonDeadlineExceeded, describe(client, j.ns))
	}
	if !started {
		t.Errorf("the engine never printed its first event before the Job ended\n%s", describe(client, j.ns))
	}
}

// TestNotAllowedHostGetsNothing runs testdata/not-allowed.yaml: the
// engine's curl asks the proxy sidecar for denied.example:443, which the
// allowlist (allowed.example:443) does not name. The proxy refuses it,
// logging one line (refused, not-allowed, never resolved, no byte moved),
// and curl gets the refusal (403 to its CONNECT) and nothing else.
func TestNotAllowedHostGetsNothing(t *testing.T) {
	l, client := requireCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	spec, err := filepath.Abs("testdata/not-allowed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	j := applySpec(ctx, t, l, client, jobSpec{spec: spec, workspace: exampleWorkspace(t), proxy: true})
	waitForJob(ctx, t, client, j.ns, j.name)
	pod := j.pod(ctx, t, client)
	proxyLog, err := client.CoreV1().Pods(j.ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: k8sProxyContainer}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of the proxy sidecar: %v", err)
	}
	t.Logf("proxy log:\n%s", proxyLog)
	// Every attempt the proxy logged (hookbox egress serve also writes a
	// "listening on" line): only the one refusal.
	attempts, _ := logEvents(proxyLog)
	want := map[string]any{"method": "CONNECT", "host": "denied.example", "port": float64(443), "decision": "refused",
		"reason": "not-allowed", "resolved": "", "rule": "", "bytes_up": float64(0), "bytes_down": float64(0)}
	if len(attempts) != 1 || !matchesEvent(attempts[0], want) {
		t.Errorf("the proxy logged %v, want exactly one attempt with %v", attempts, want)
	}
	log := j.engineLog(ctx, t, client)
	t.Logf("engine log:\n%s", log)
	// curl's 56: the proxy answered the CONNECT with a refusal.
	checkLog(t, log, false, map[string]any{"type": "exec", "exit_code": float64(56)})
	if !bytes.Contains(log, []byte("CONNECT tunnel failed, response 403")) {
		t.Errorf("curl did not report the proxy's 403 (log above)")
	}
}

// engineExitCode is the engine container's exit code, -1 if it has not
// terminated.
func engineExitCode(pod corev1.Pod) int32 {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == "engine" && s.State.Terminated != nil {
			return s.State.Terminated.ExitCode
		}
	}
	return -1
}
