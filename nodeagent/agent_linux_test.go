package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	corev1 "k8s.io/api/core/v1"

	"hookbox.dev/hookbox/ebpf"
	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/k8s"
	"hookbox.dev/hookbox/render/verify"
	"hookbox.dev/hookbox/tracehelper"
)

// TestStartContainerArmsBeforeTheFirstExec plays containerd's part on this
// host: a process blocked before its exec in a cgroup2 directory of its own
// (as runc init waits on its exec FIFO), the StartContainer call with its
// pid and cgroups path, then the release. The agent's verdict for it is
// confirmed: its first exec, the engine, was seen. It needs root and BPF
// (HOOKBOX_INTEGRATION=1), and fails rather than skips when asked for.
func TestStartContainerArmsBeforeTheFirstExec(t *testing.T) {
	res, trace := hostContainer(t, hostCase{})
	if res.Trace.Status != "confirmed" || res.Trace.Events != 1 {
		t.Fatalf("verdict %s %v with %d events, want confirmed with the engine's exec\n%s", res.Trace.Status, res.Trace.Reasons, res.Trace.Events, trace)
	}
}

// TestAgentStoppedWhileAContainerRuns: an agent that stops while the
// container it traces still runs delivers its verdict without the trace's
// stats line: unchecked (trace-incomplete), although every exec it saw was
// planned.
func TestAgentStoppedWhileAContainerRuns(t *testing.T) {
	res, trace := hostContainer(t, hostCase{stop: true})
	if res.Trace.Status != "unchecked" || !slices.Contains(res.Trace.Reasons, verify.ReasonTraceIncomplete) {
		t.Fatalf("verdict %s %v, want unchecked with %s\n%s", res.Trace.Status, res.Trace.Reasons, verify.ReasonTraceIncomplete, trace)
	}
}

// TestContainerRunningWhenTheAgentConnects: a container already running
// when the agent registers (an agent restarted while a Job runs) gets a
// verdict when it ends — unchecked, started-before-agent, with its exit
// code — not none.
func TestContainerRunningWhenTheAgentConnects(t *testing.T) {
	res, trace := hostContainer(t, hostCase{late: true})
	want := "tracer-unavailable:" + ReasonStartedBeforeAgent
	if res.Trace.Status != "unchecked" || !slices.Contains(res.Trace.Reasons, want) || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("verdict %s %v (exit %v), want unchecked with %s and exit 0\n%s", res.Trace.Status, res.Trace.Reasons, res.ExitCode, want, trace)
	}
	if res.Spawn != "host" {
		t.Errorf("spawn %q, want the render's (host)", res.Spawn)
	}
}

// hostCase: stop, the agent stops once the engine has run but before the
// process exits; late, the agent learns of the container from
// Synchronize while it runs, not from StartContainer.
type hostCase struct{ stop, late bool }

// hostContainer runs the engine as a container of a hookbox pod would and
// returns the verdict the agent delivered and its trace.
func hostContainer(t *testing.T, hc hostCase) (launcher.Result, string) {
	t.Helper()
	if os.Getenv("HOOKBOX_INTEGRATION") != "1" {
		t.Skip("needs root and BPF: HOOKBOX_INTEGRATION=1")
	}
	cgs, err := host.HostCgroups()
	if err != nil || cgs.Unified == "" {
		t.Fatalf("no cgroup2 hierarchy here: %v", err)
	}
	cgPath := fmt.Sprintf("/hookbox-nodeagent-test-%d", os.Getpid())
	dir := filepath.Join(cgs.Unified, cgPath)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	cg, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()

	engine := "/usr/bin/true"
	r := &render.Render{SchemaVersion: 1, Spawn: "host",
		Engine:   render.Engine{Kind: "exec", Exec: render.Exec{Path: engine, Argv: []string{engine}}},
		Programs: []render.Program{{Path: engine, HostPath: engine, Roles: []string{render.RoleEngine}}},
		Trace:    render.TracePolicy{Mode: render.TraceVerify}}
	r.SortLists()
	digest, canonical, err := r.Digest()
	if err != nil {
		t.Fatal(err)
	}

	// sh was exec'd before the watch, as runc init is; its exec of the
	// engine waits for a line on stdin. With stop the engine is sh itself
	// (its exec of sh is the first event) and it waits for a second line.
	script := "read x; exec " + engine
	if hc.stop {
		engine = "/bin/sh"
		r.Engine.Exec = render.Exec{Path: engine, Argv: []string{engine, "-c", "read y"}}
		r.Programs = []render.Program{{Path: engine, HostPath: engine, Roles: []string{render.RoleEngine}}}
		if digest, canonical, err = r.Digest(); err != nil {
			t.Fatal(err)
		}
		script = "read x; exec /bin/sh -c 'read y'"
	}
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	release, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	tracer := tracehelper.NewBPFTracer(ebpf.Options{})
	defer tracer.Close()
	if err := tracer.Load(); err != nil {
		t.Fatal(err)
	}
	kube := &fakeKube{cms: map[string]*corev1.ConfigMap{"ns/job": {Data: map[string]string{k8s.RenderKey: string(canonical)}}}}
	a := New(Config{Kube: kube, Tracer: tracer, StateDir: t.TempDir()})
	pod := &api.PodSandbox{Id: "p", Name: "job-x", Uid: "uid", Namespace: "ns",
		Labels: map[string]string{"batch.kubernetes.io/job-name": "job"}, Annotations: map[string]string{k8s.AnnotationRenderSHA256: digest[len("sha256:"):]}}
	ctr := &api.Container{Id: "c0123456789abcdef", Name: k8s.EngineContainer, Pid: uint32(cmd.Process.Pid), Linux: &api.LinuxContainer{CgroupsPath: cgPath}}
	if hc.late {
		ctr.State, ctr.PodSandboxId = api.ContainerState_CONTAINER_RUNNING, pod.Id
		if _, err := a.Synchronize(context.Background(), []*api.PodSandbox{pod}, []*api.Container{ctr}); err != nil {
			t.Fatal(err)
		}
	} else if err := a.StartContainer(context.Background(), pod, ctr); err != nil {
		t.Fatal(err)
	}
	release.Write([]byte("go\n"))
	if hc.stop {
		// The engine's exec is in the ring once its process reads again.
		for !strings.Contains(readFile(t, fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid)), "read y") {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		close(a.stopping)
		a.wg.Wait()
	}
	release.Close()
	// With stop, read y meets the end of its input: exit 1.
	if err := cmd.Wait(); err != nil && !hc.stop {
		t.Fatal(err)
	}
	a.wg.Wait()
	if len(kube.puts) != 1 {
		t.Fatalf("puts: %v", kube.puts)
	}
	var res launcher.Result
	if err := json.Unmarshal([]byte(kube.puts[0].Data[launcher.ResultFile]), &res); err != nil {
		t.Fatal(err)
	}
	return res, kube.puts[0].Data[launcher.TraceFile]
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
