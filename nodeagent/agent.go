package nodeagent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	corev1 "k8s.io/api/core/v1"

	"hookbox.dev/hookbox/attest"
	"hookbox.dev/hookbox/ebpf"
	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/launcher/cgroup"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/k8s"
	"hookbox.dev/hookbox/tracehelper"
)

// DefaultSocket is NRI's default socket.
const DefaultSocket = "/var/run/nri/nri.sock"

// DefaultPluginName and DefaultPluginIndex register the agent with NRI.
const (
	DefaultPluginName  = "hookbox"
	DefaultPluginIndex = "90"
)

// armShare is the part of NRI's request timeout (2 s by default,
// api.DefaultPluginRequestTimeout; the runtime says its own at
// registration) the agent may take to arm before it replies to
// StartContainer: past the timeout the runtime starts the container
// without the reply. Past the budget the container is judged unchecked
// (arm-late) whether or not the watch came up.
const armShare = 0.75

// emptyWait bounds the wait for a container's cgroup to empty once its
// init has exited (its pid namespace ends with it).
const emptyWait = 30 * time.Second

// Kube is what the agent asks of the API server.
type Kube interface {
	// ConfigMap returns namespace/name.
	ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	// PutConfigMap creates cm, or replaces the one of its name.
	PutConfigMap(ctx context.Context, cm *corev1.ConfigMap) error
}

// Config configures an Agent.
type Config struct {
	Socket, PluginName, PluginIndex string
	// Tracer watches cgroups; its Watch errors make a container unchecked.
	Tracer tracehelper.Tracer
	Kube   Kube
	// Signer signs the attestations (nil: unsigned, Unsigned says why).
	Signer   *attest.Signer
	Unsigned string
	Version  string
	// StateDir holds one record directory per judged container.
	StateDir string
	Log      io.Writer
}

// Agent is the node agent: one NRI plugin connection.
type Agent struct {
	cfg Config

	stub stub.Stub
	// budget is how long StartContainer may take to arm (armShare of the
	// runtime's request timeout).
	budget time.Duration

	mu     sync.Mutex
	active map[string]*job // by container id
	wg     sync.WaitGroup
	// stopping is closed when Run's context ends: every active job is
	// then ended without its stats line (trace-incomplete).
	stopping chan struct{}
}

// New returns an agent for cfg.
func New(cfg Config) *Agent {
	if cfg.Socket == "" {
		cfg.Socket = DefaultSocket
	}
	if cfg.PluginName == "" {
		cfg.PluginName = DefaultPluginName
	}
	if cfg.PluginIndex == "" {
		cfg.PluginIndex = DefaultPluginIndex
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	return &Agent{cfg: cfg, active: map[string]*job{}, stopping: make(chan struct{}),
		budget: time.Duration(armShare * float64(api.DefaultPluginRequestTimeout))}
}

// Run connects to NRI and serves until ctx ends or the runtime closes the
// connection; then every container still traced gets its verdict
// (unchecked: the trace is incomplete) before Run returns.
func (a *Agent) Run(ctx context.Context) error {
	s, err := stub.New(a, stub.WithSocketPath(a.cfg.Socket), stub.WithPluginName(a.cfg.PluginName), stub.WithPluginIdx(a.cfg.PluginIndex))
	if err != nil {
		return fmt.Errorf("NRI plugin %s-%s: %w", a.cfg.PluginIndex, a.cfg.PluginName, err)
	}
	a.stub = s
	err = s.Run(ctx)
	close(a.stopping)
	a.wg.Wait()
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("NRI plugin on %s: %w (is containerd's NRI enabled, with its socket there?)", a.cfg.Socket, err)
	}
	return nil
}

func (a *Agent) logf(format string, args ...any) {
	fmt.Fprintf(a.cfg.Log, "hookbox node agent: "+format+"\n", args...)
}

// Configure learns the runtime's request timeout at registration.
func (a *Agent) Configure(_ context.Context, _, runtime, version string) (api.EventMask, error) {
	if t := a.stub.RequestTimeout(); t > 0 {
		a.budget = time.Duration(armShare * float64(t))
	}
	a.logf("registered with %s %s; arming budget %s", runtime, version, a.budget)
	return 0, nil
}

// Synchronize: containers already running started before the agent could
// arm, whatever ran in them before: their verdict is unchecked.
func (a *Agent) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	byID := map[string]*api.PodSandbox{}
	for _, p := range pods {
		byID[p.Id] = p
	}
	for _, c := range ctrs {
		p := byID[c.PodSandboxId]
		if p == nil || !a.judges(p, c) || c.State != api.ContainerState_CONTAINER_RUNNING {
			continue
		}
		j := a.newJob(p, c)
		j.unarmed(ReasonStartedBeforeAgent, "the container was running when the agent connected to NRI: its execs before that were not seen")
		// Its record still gets the container's exit, and the render when
		// it is delivered (not here: NRI waits on Synchronize), so that the
		// Job gets an unchecked verdict rather than none.
		a.prepare(j)
		a.start(j)
	}
	a.logf("synchronized: %d pods, %d containers; judging hookbox pods' engine containers from now on", len(pods), len(ctrs))
	return nil, nil
}

// StartContainer arms the tracer before the container starts. It never
// fails the start: a container the agent cannot arm runs, unchecked.
func (a *Agent) StartContainer(ctx context.Context, p *api.PodSandbox, c *api.Container) error {
	if !a.judges(p, c) {
		return nil
	}
	began := time.Now()
	actx, cancel := context.WithTimeout(ctx, a.budget)
	defer cancel()
	j := a.newJob(p, c)
	a.arm(actx, j)
	if j.watch != nil && time.Since(began) > a.budget {
		j.abandonWatch()
		j.unarmed(ReasonArmLate, fmt.Sprintf("arming took %s, more than the %s the agent allows itself before NRI's request timeout", time.Since(began).Round(time.Millisecond), a.budget))
	}
	a.start(j)
	return nil
}

// judges: c is the engine container of a hookbox pod.
func (a *Agent) judges(p *api.PodSandbox, c *api.Container) bool {
	return IsHookboxPod(p.Annotations) && c.Name == k8s.EngineContainer
}

// job is one judged container.
type job struct {
	a                    *Agent
	namespace, pod, uid  string
	job, container, cgid string
	annotation           string
	pid                  int
	cgroupsPath          string
	dir                  string
	started              time.Time

	r        *render.Render
	proc     *cgroup.Process
	run      *cgroup.Run
	watch    tracehelper.TracerWatch
	file     *os.File
	out      *bufio.Writer
	written  int
	consumed sync.WaitGroup

	reason, detail string // why it was not armed ("" when armed)
}

func (a *Agent) newJob(p *api.PodSandbox, c *api.Container) *job {
	j := &job{a: a, namespace: p.Namespace, pod: p.Name, uid: p.Uid, job: JobName(p.Labels), container: c.Id,
		annotation: p.Annotations[k8s.AnnotationRenderSHA256], pid: int(c.Pid), started: time.Now()}
	if j.job == "" {
		j.job = p.Name // a bare pod: its verdict is named after it
	}
	if c.Linux != nil {
		j.cgroupsPath = c.Linux.CgroupsPath
	}
	j.dir = filepath.Join(a.cfg.StateDir, p.Namespace, p.Name+"-"+shortID(c.Id))
	return j
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func (j *job) unarmed(reason, detail string) {
	if j.reason == "" {
		j.reason, j.detail = reason, detail
	}
}

// arm reads the render, checks it, and watches the container's cgroup.
// Whatever fails leaves j unarmed with the reason.
func (a *Agent) arm(ctx context.Context, j *job) {
	if !a.prepare(j) || !a.readRender(ctx, j) {
		return
	}
	if a.cfg.Tracer == nil {
		j.unarmed(ReasonTracerUnavailable, "the agent has no BPF tracer")
		return
	}
	if j.proc == nil {
		j.unarmed(ReasonCgroupUnknown, fmt.Sprintf("NRI gave no live process for the container (pid %d)", j.pid))
		return
	}
	run, err := cgroup.Open(j.cgroupsPath)
	if err != nil {
		j.unarmed(ReasonCgroupUnknown, fmt.Sprintf("the container's cgroup %q: %v", j.cgroupsPath, err))
		return
	}
	id, err := run.ID()
	if err != nil {
		j.unarmed(ReasonCgroupUnknown, err.Error())
		return
	}
	// The watch is on the cgroup: the container's init must be in it, not
	// in a parent another container shares.
	if pc, err := host.ReadProcCgroup(j.pid); err != nil || pc.Unified != j.cgroupsPath {
		j.unarmed(ReasonCgroupUnknown, fmt.Sprintf("the container's init (pid %d) is not in its cgroup2 directory %s (%+v, %v)", j.pid, j.cgroupsPath, pc.Unified, err))
		return
	}
	j.run, j.cgid = run, strconv.FormatUint(id, 10)
	ids, allowed, err := launcher.ProgramIdentities("/proc/"+strconv.Itoa(j.pid)+"/root", j.r)
	if err != nil {
		j.unarmed(ReasonArmFailed, err.Error())
		return
	}
	if err := writeJSON(filepath.Join(j.dir, launcher.IdentitiesFile), ids); err != nil {
		j.unarmed(ReasonArmFailed, err.Error())
		return
	}
	f, err := os.OpenFile(filepath.Join(j.dir, launcher.TraceFile), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		j.unarmed(ReasonArmFailed, err.Error())
		return
	}
	w, err := a.cfg.Tracer.Watch(id, ebpf.Policy{Enforce: j.r.Trace.Mode == render.TraceEnforce, Allowed: allowed})
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		j.unarmed(ReasonArmFailed, "the tracer would not watch the container's cgroup: "+err.Error())
		return
	}
	if ctx.Err() != nil {
		w.Stop()
		f.Close()
		os.Remove(f.Name())
		j.unarmed(ReasonArmLate, "the watch came up after NRI's deadline for the reply")
		return
	}
	j.watch, j.file, j.out = w, f, bufio.NewWriterSize(f, 256<<10)
	j.consumed.Add(1)
	go j.consume()
}

// prepare makes j's record directory, empty, and holds the container's
// init so that its end and exit status are seen; false when the directory
// cannot be made.
func (a *Agent) prepare(j *job) bool {
	if err := os.RemoveAll(j.dir); err != nil {
		j.unarmed(ReasonArmFailed, err.Error())
		return false
	}
	if err := os.MkdirAll(j.dir, 0o755); err != nil {
		j.unarmed(ReasonArmFailed, err.Error())
		return false
	}
	if j.pid > 0 {
		if proc, err := cgroup.OpenProcess(j.pid, 0); err == nil {
			j.proc = proc
		}
	}
	return true
}

// readRender reads the Job's render from its ConfigMap into the record and
// j.r; false when it is refused or unreadable.
func (a *Agent) readRender(ctx context.Context, j *job) bool {
	if j.annotation == "" {
		j.unarmed(ReasonRenderUnavailable, "the pod has no "+k8s.AnnotationRenderSHA256+" annotation")
		return false
	}
	if a.cfg.Kube == nil {
		j.unarmed(ReasonRenderUnavailable, "the agent has no API server to read the render from")
		return false
	}
	cm, err := a.cfg.Kube.ConfigMap(ctx, j.namespace, j.job)
	if err != nil {
		j.unarmed(ReasonRenderUnavailable, fmt.Sprintf("the render's ConfigMap %s/%s: %v", j.namespace, j.job, err))
		return false
	}
	data, ok := cm.Data[k8s.RenderKey]
	if !ok {
		j.unarmed(ReasonRenderUnavailable, fmt.Sprintf("the ConfigMap %s/%s has no %s", j.namespace, j.job, k8s.RenderKey))
		return false
	}
	var r render.Render
	if err := json.Unmarshal([]byte(data), &r); err != nil {
		j.unarmed(ReasonRenderUnavailable, fmt.Sprintf("the ConfigMap %s/%s's %s: %v", j.namespace, j.job, k8s.RenderKey, err))
		return false
	}
	// The record keeps the render as the ConfigMap has it, refused or not,
	// so the verdict names what was refused.
	if err := os.WriteFile(filepath.Join(j.dir, launcher.RenderFile), []byte(data), 0o644); err != nil {
		j.unarmed(ReasonArmFailed, err.Error())
		return false
	}
	j.r = &r
	if err := CheckRender([]byte(data), j.annotation); err != nil {
		j.unarmed(ReasonRenderDigestDiffers, err.Error())
		return false
	}
	return true
}

// consume writes every event to trace.jsonl as it comes.
func (j *job) consume() {
	defer j.consumed.Done()
	var line []byte // reused: the writer copies it
	for ev := range j.watch.Events() {
		line = ev.AppendJSON(line[:0])
		j.out.Write(line)
		j.out.WriteByte('\n')
		j.written++
	}
}

// abandonWatch stops a watch whose trace will not be judged.
func (j *job) abandonWatch() {
	j.watch.Stop()
	j.consumed.Wait()
	j.file.Close()
	os.Remove(j.file.Name())
	os.Remove(filepath.Join(j.dir, launcher.IdentitiesFile))
	j.watch = nil
}

// start follows j until its container ends (or the agent stops), then
// seals and delivers its verdict.
func (a *Agent) start(j *job) {
	a.mu.Lock()
	a.active[j.container] = j
	a.mu.Unlock()
	a.logf("%s/%s container %s: %s", j.namespace, j.pod, shortID(j.container), j.state())
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer func() {
			a.mu.Lock()
			delete(a.active, j.container)
			a.mu.Unlock()
		}()
		complete := j.wait(a.stopping)
		j.finish(complete)
		a.deliver(j)
	}()
}

func (j *job) state() string {
	if j.reason != "" {
		return "unchecked (" + j.reason + "): " + j.detail
	}
	return "armed on cgroup " + j.cgroupsPath + " (id " + j.cgid + ")"
}

// wait returns once the container's processes are gone (true), or the
// agent is stopping (false).
func (j *job) wait(stopping <-chan struct{}) bool {
	if j.proc == nil {
		return true
	}
	select {
	case <-j.proc.Done():
	case <-stopping:
		return false
	}
	if j.run == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), emptyWait)
	defer cancel()
	go func() {
		select {
		case <-stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	return j.run.WaitEmpty(ctx, 10*time.Millisecond) == nil
}

// finish stops the watch and ends trace.jsonl: with the stats line only
// when the container's processes are all gone, else the trace is
// incomplete (the agent stopped while they ran).
func (j *job) finish(complete bool) {
	if j.watch == nil {
		return
	}
	stats, err := j.watch.Stop()
	j.consumed.Wait()
	if complete {
		j.out.Write(launcher.TraceStatsLine(stats, err))
	}
	if werr := errors.Join(j.out.Flush(), j.file.Close()); werr != nil {
		j.detail = "the trace record could not be written whole: " + werr.Error()
	}
}

// deliver seals the record and writes the verdict ConfigMap.
func (a *Agent) deliver(j *job) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if j.r == nil && j.reason == ReasonStartedBeforeAgent {
		a.readRender(ctx, j) // Synchronize left it for now
	}
	if j.r == nil {
		a.logf("%s/%s container %s: no verdict: %s", j.namespace, j.pod, shortID(j.container), j.detail)
		return
	}
	e := launcher.External{RunID: j.uid + "/" + shortID(j.container), Spawn: j.r.Spawn, Status: launcher.StatusInfraError,
		Unarmed: j.reason, Detail: j.detail, StartedAt: j.started, EndedAt: time.Now()}
	if j.proc != nil {
		if code, ok := j.exitCode(); ok {
			e.ExitCode, e.Status = &code, launcher.StatusCompleted
			if code != 0 {
				e.Status = launcher.StatusFailed
			}
		}
		j.proc.Close()
	}
	res, err := launcher.SealExternal(ctx, j.dir, e, a.cfg.Signer, a.cfg.Unsigned, a.cfg.Version)
	if err != nil {
		a.logf("%s/%s container %s: cannot seal the record in %s: %v", j.namespace, j.pod, shortID(j.container), j.dir, err)
		return
	}
	cm, err := VerdictConfigMap(j.namespace, j.job, j.dir)
	if err == nil {
		err = a.cfg.Kube.PutConfigMap(ctx, cm)
	}
	if err != nil {
		a.logf("%s/%s container %s: verdict %s not delivered: %v", j.namespace, j.pod, shortID(j.container), res.Trace.Status, err)
		return
	}
	a.logf("%s/%s container %s: verdict %s %v in configmap %s/%s", j.namespace, j.pod, shortID(j.container), res.Trace.Status, res.Trace.Reasons, j.namespace, cm.Name)
}

// exitCode waits briefly for the shim to reap the init (the kernel has the
// status only then).
func (j *job) exitCode() (int, bool) {
	if !j.proc.Exited() {
		return 0, false
	}
	for i := 0; i < 50; i++ {
		if code, ok := j.proc.ExitCode(); ok {
			return code, true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, false
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
