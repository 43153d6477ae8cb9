package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/containerd/nri/pkg/api"
	corev1 "k8s.io/api/core/v1"

	"hookbox.dev/hookbox/ebpf"
	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/k8s"
	"hookbox.dev/hookbox/tracehelper"
)

// TestStartContainerArmsBeforeTheFirstExec plays containerd's part on this
// host: a process blocked before its exec in a cgroup2 directory of its own
// (as runc init waits on its exec FIFO), the StartContainer call with its
// pid and cgroups path, then the release. The agent's verdict for it is
// confirmed: its first exec, the engine, was seen. It needs root and BPF
// (HOOKBOX_INTEGRATION=1), and fails rather than skips when asked for.
func TestStartContainerArmsBeforeTheFirstExec(t *testing.T) {
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
	// engine waits for a line on stdin.
	cmd := exec.Command("/bin/sh", "-c", "read x; exec "+engine)
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
	if err := a.StartContainer(context.Background(), pod, ctr); err != nil {
		t.Fatal(err)
	}
	release.Write([]byte("go\n"))
	release.Close()
	if err := cmd.Wait(); err != nil {
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
	if res.Trace.Status != "confirmed" || res.Trace.Events != 1 {
		t.Fatalf("verdict %s %v with %d events, want confirmed with the engine's exec\n%s", res.Trace.Status, res.Trace.Reasons, res.Trace.Events, kube.puts[0].Data[launcher.TraceFile])
	}
}
