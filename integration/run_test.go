package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/launcher/shimfront"
)

func containerdAddress() string {
	if a := os.Getenv("HOOKBOX_CONTAINERD_ADDRESS"); a != "" {
		return a
	}
	return "/run/containerd/containerd.sock"
}

// tools are built once per test binary.
var (
	buildOnce             sync.Once
	hookboxBin, engineBin string
	initBin               string // hookbox-init, next to hookboxBin where hookbox finds it
	seedBin               string // hookbox-seed, likewise
	frontBin              string // the shim front, likewise
	buildErr              error
)

func buildTools(t *testing.T) {
	t.Helper()
	buildOnce.Do(func() {
		// The rootless pass runs prebuilt tools: its user has no Go
		// toolchain cache to build with.
		if dir := os.Getenv("HOOKBOX_TEST_BIN_DIR"); dir != "" {
			hookboxBin, engineBin = filepath.Join(dir, "hookbox"), filepath.Join(dir, "hookbox-scripted-engine")
			initBin, seedBin = filepath.Join(dir, "hookbox-init"), filepath.Join(dir, "hookbox-seed")
			frontBin = filepath.Join(dir, shimfront.Binary)
			return
		}
		dir, err := os.MkdirTemp("/var/tmp", "hookbox-it-bin-")
		if err != nil {
			buildErr = err
			return
		}
		os.Chmod(dir, 0o755)
		for pkg, out := range map[string]*string{
			"hookbox.dev/hookbox/cmd/hookbox":                 &hookboxBin,
			"hookbox.dev/hookbox/cmd/hookbox-scripted-engine": &engineBin,
			"hookbox.dev/hookbox/cmd/hookbox-init":            &initBin,
			"hookbox.dev/hookbox/cmd/hookbox-seed":            &seedBin,
			"hookbox.dev/hookbox/cmd/" + shimfront.Binary:     &frontBin,
		} {
			*out = filepath.Join(dir, filepath.Base(pkg))
			if buildErr = goBuild(*out, pkg); buildErr != nil {
				return
			}
		}
		// bin/hookbox is the lite build, which hands the Kubernetes and
		// image commands to the full one beside it: the tests run both as
		// make build installs them.
		if buildErr = goBuild(filepath.Join(dir, "hookbox-kube"), "hookbox.dev/hookbox/cmd/hookbox"); buildErr == nil {
			buildErr = goBuild(hookboxBin, "hookbox.dev/hookbox/cmd/hookbox", "-tags", "hookbox_lite")
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// goBuild builds pkg (static) into out.
func goBuild(out, pkg string, flags ...string) error {
	cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", out, pkg)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// env is one test's hookbox world: a state dir and a spec dir.
type env struct {
	t        *testing.T
	state    string
	specDir  string
	keyDir   string // $HOOKBOX_KEY_DIR of the hookbox it runs
	extraEnv []string
	specs    []string // names of specs written by helpers that number them
	// address is the containerd the test's runs use when it is not the
	// system one (a managed daemon of the test's own).
	address string
}

// containerd is the address of the containerd the test's runs use.
func (e *env) containerd() string {
	if e.address != "" {
		return e.address
	}
	return containerdAddress()
}

func newEnv(t *testing.T) *env {
	t.Helper()
	testenv.RequireIntegration(t, testenv.Root, testenv.Runc, containerdUp)
	buildTools(t)
	dir := t.TempDir()
	e := &env{t: t, state: filepath.Join(dir, "state"), specDir: filepath.Join(dir, "spec"), keyDir: filepath.Join(dir, "keys")}
	// The test's own attestation key directory (empty: runs are unsigned),
	// never the host's.
	e.extraEnv = []string{"HOOKBOX_KEY_DIR=" + e.keyDir}
	if err := os.MkdirAll(filepath.Join(e.specDir, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(e.specDir, "ws", "README.md"), []byte("workspace\n"), 0o644)
	t.Cleanup(func() {
		// Whatever a test left, gc removes; a test that leaves something
		// fails in assertNothingLeft instead.
		exec.Command(hookboxBin, "gc", "--state-dir", e.state).Run()
	})
	return e
}

// spec writes a scripted-engine spawn with the given script and extra lines.
func (e *env) spec(name, script string, extra ...string) string {
	e.t.Helper()
	content := fmt.Sprintf(`apiVersion: hookbox.dev/v1alpha1
kind: Spawn
metadata: {name: %s}
spec:
  engine:
    kind: scripted
    path: %s
    script:
%s
  workspace: ./ws
%s
`, name, engineBin, indent(script, "      "), strings.Join(extra, "\n"))
	file := filepath.Join(e.specDir, name+".yaml")
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return file
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i, l := range lines {
		lines[i] = prefix + strings.TrimSpace(l)
	}
	return strings.Join(lines, "\n")
}

// run is one `hookbox run --json` and what it printed.
type run struct {
	code           int
	stdout, stderr string
	events         []launcher.Event
	result         *launcher.Result
}

func (e *env) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, hookboxBin, args...)
	cmd.Env = append(os.Environ(), e.extraEnv...)
	return cmd
}

func (e *env) run(spec string, args ...string) *run {
	e.t.Helper()
	return e.runGrace(spec, "2s", args...)
}

// runGrace is run with another --grace.
func (e *env) runGrace(spec, grace string, args ...string) *run {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := e.command(ctx, append([]string{"run", "--json", "--state-dir", e.state, "--grace", grace, spec}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := &run{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("hookbox run: %v", err)
	}
	r.parse(e.t)
	return r
}

func (r *run) parse(t *testing.T) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev launcher.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("--json printed a non-event line %q: %v", sc.Text(), err)
		}
		r.events = append(r.events, ev)
		if ev.Type == launcher.EventResult {
			r.result = ev.Result
		}
	}
}

func (r *run) output() string {
	var b strings.Builder
	for _, ev := range r.events {
		if ev.Type == launcher.EventOutput {
			b.WriteString(ev.Data)
		}
	}
	return b.String()
}

func (r *run) mustResult(t *testing.T) *launcher.Result {
	t.Helper()
	if r.result == nil {
		t.Fatalf("no result event (exit %d)\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	return r.result
}

// markerProcesses lists pids whose command line contains marker.
func markerProcesses(marker string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(data, []byte(marker)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// assertNothingLeft checks that a run left no container, task, snapshot,
// tmpfs or cgroup, and that gc finds nothing to do.
func (e *env) assertNothingLeft(runID string) {
	e.t.Helper()
	out, err := exec.Command("ctr", "--address", e.containerd(), "-n", "hookbox", "containers", "ls", "-q").CombinedOutput()
	if err != nil {
		e.t.Fatalf("ctr: %v %s", err, out)
	}
	if strings.Contains(string(out), runID) {
		e.t.Errorf("container %s is still there", runID)
	}
	out, _ = exec.Command("ctr", "--address", e.containerd(), "-n", "hookbox", "snapshots", "--snapshotter", "overlayfs", "ls").CombinedOutput()
	if strings.Contains(string(out), runID) {
		e.t.Errorf("snapshot %s is still there", runID)
	}
	mountinfo, _ := os.ReadFile("/proc/self/mountinfo")
	if bytes.Contains(mountinfo, []byte(runID)) {
		e.t.Errorf("a mount of run %s is still there", runID)
	}
	for _, root := range []string{"/sys/fs/cgroup/unified/hookbox", "/sys/fs/cgroup/hookbox", "/sys/fs/cgroup/pids/hookbox", "/sys/fs/cgroup/memory/hookbox"} {
		if _, err := os.Stat(filepath.Join(root, runID)); err == nil {
			e.t.Errorf("cgroup %s/%s is still there", root, runID)
		}
	}
	gc := e.command(context.Background(), "gc", "--json", "--state-dir", e.state)
	gcOut, err := gc.Output()
	if err != nil {
		e.t.Fatalf("gc: %v", err)
	}
	var report launcher.GCReport
	if err := json.Unmarshal(gcOut, &report); err != nil {
		e.t.Fatalf("gc --json: %v: %s", err, gcOut)
	}
	for _, a := range report.Actions {
		if a.RunID == runID {
			e.t.Errorf("gc still found %s of run %s", a.What, runID)
		}
	}
}

func TestRunHello(t *testing.T) {
	e := newEnv(t)
	spec := e.spec("hello", `
		- print: {type: system, subtype: init}
		- hook: greet
		- write: {path: /run/hookbox/out/hello.txt, content: "hello\n"}
		- print: {type: result, subtype: success}
		- exit: 0`,
		"  hooks: [{name: greet, event: SessionStart, argv: [/usr/bin/printf, '%s', hook-ran]}]",
		"  artifacts: [hello.txt]")
	r := e.run(spec)
	res := r.mustResult(t)
	if r.code != 0 || res.Status != launcher.StatusCompleted || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("exit %d, result %+v\nstderr:\n%s", r.code, res, r.stderr)
	}
	out := r.output()
	for _, want := range []string{`{"subtype":"init","type":"system"}`, `"stdout":"hook-ran"`, `{"subtype":"success","type":"result"}`} {
		if !strings.Contains(out, want) {
			t.Errorf("streamed output lacks %s:\n%s", want, out)
		}
	}
	// The spawn record comes before any output.
	sawSpawned := false
	for _, ev := range r.events {
		if ev.Type == launcher.EventOutput && !sawSpawned {
			t.Fatal("an output event came before the spawned event")
		}
		sawSpawned = sawSpawned || ev.Type == launcher.EventSpawned
	}
	if !sawSpawned {
		t.Fatal("no spawned event")
	}
	if len(res.Artifacts) != 1 || res.Artifacts[0].Status != "found" {
		t.Fatalf("artifacts %+v", res.Artifacts)
	}
	got, err := os.ReadFile(filepath.Join(res.RecordDir, launcher.ArtifactDir, "out", "hello.txt"))
	if err != nil || string(got) != "hello\n" {
		t.Errorf("harvested artifact %q %v", got, err)
	}
	if stdout, _ := os.ReadFile(filepath.Join(res.RecordDir, launcher.StdoutFile)); string(stdout) != out {
		t.Errorf("recorded stdout differs from the streamed output")
	}
	if fi, err := os.Stat(filepath.Join(res.RecordDir, launcher.StderrFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("stderr.log must be 0600: %v %v", fi, err)
	}
	if res.Trace.Status != "confirmed" || res.Trace.Events != 3 {
		t.Errorf("trace %+v, want confirmed with 3 execs (init, engine, hook)", res.Trace)
	}
	rules := map[string]bool{}
	for _, m := range res.Trace.Matched {
		rules[m.Rule] = true
	}
	if !rules["init"] || !rules["engine"] || !rules["hook:greet"] {
		t.Errorf("result.json must map each exec to its rule: %+v", res.Trace.Matched)
	}
	e.assertNothingLeft(res.RunID)
}

func TestDaemonizedGrandchildIsGone(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name, tail string
		status     launcher.Status
		extra      string
	}{
		{"normal exit", "- exit: 0", launcher.StatusCompleted, "  limits: {timeout: 1m}"},
		{"timeout", "- sleep: 1h", launcher.StatusTimedOut, "  limits: {timeout: 3s}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marker := fmt.Sprintf("hbx-daemon-%d", time.Now().UnixNano())
			spec := e.spec("daemon", "- daemonize: {marker: "+marker+"}\n- sleep: 500ms\n- print: started\n"+tc.tail, tc.extra)
			r := e.run(spec)
			res := r.mustResult(t)
			if res.Status != tc.status {
				t.Fatalf("status %s, want %s (%+v)\nstderr: %s", res.Status, tc.status, res, r.stderr)
			}
			if pids := markerProcesses(marker); len(pids) > 0 {
				t.Fatalf("daemonized processes survived teardown: %v", pids)
			}
			e.assertNothingLeft(res.RunID)
		})
	}
}

func TestCtrlCTearsDown(t *testing.T) {
	e := newEnv(t)
	marker := fmt.Sprintf("hbx-ctrlc-%d", time.Now().UnixNano())
	spec := e.spec("ctrlc", "- daemonize: {marker: "+marker+"}\n- print: ready\n- sleep: 1h")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := e.command(ctx, "run", "--json", "--state-dir", e.state, "--grace", "2s", spec)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines bytes.Buffer
	sc := bufio.NewScanner(stdout)
	initPID, signalled := 0, false
	for sc.Scan() {
		lines.Write(append(sc.Bytes(), '\n'))
		var ev launcher.Event
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Type == launcher.EventSpawned {
			initPID = ev.Spawned.InitPID
		}
		if !signalled && strings.Contains(sc.Text(), `"ready`) {
			if initPID == 0 {
				t.Fatal("no spawned event before the engine's output")
			}
			cmd.Process.Signal(syscall.SIGINT)
			// The engine dies of teardown's SIGTERM: from then on hookbox is
			// tearing down, and a second signal must not interrupt it.
			testenv.WaitExited(t, initPID, time.Minute)
			cmd.Process.Signal(syscall.SIGINT)
			signalled = true
		}
	}
	err = cmd.Wait()
	r := &run{stdout: lines.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	}
	r.parse(t)
	res := r.mustResult(t)
	if res.Status != launcher.StatusCancelled || r.code != 122 {
		t.Fatalf("status %s exit %d, want cancelled and 122 (error %q, reasons %v)\nstderr: %s", res.Status, r.code, res.Error, res.Reasons, r.stderr)
	}
	if pids := markerProcesses(marker); len(pids) > 0 {
		t.Fatalf("processes survived Ctrl-C: %v", pids)
	}
	e.assertNothingLeft(res.RunID)
}

func TestTimeoutHarvestsWhatWasWritten(t *testing.T) {
	e := newEnv(t)
	spec := e.spec("slow", `
		- write: {path: /run/hookbox/out/partial.txt, content: "before the timeout\n"}
		- print: working
		- sleep: 1h`, "  limits: {timeout: 2s}", "  artifacts: [partial.txt]")
	r := e.run(spec)
	res := r.mustResult(t)
	if res.Status != launcher.StatusTimedOut || r.code != 121 {
		t.Fatalf("status %s exit %d, want timed_out/121", res.Status, r.code)
	}
	if got, err := os.ReadFile(filepath.Join(res.RecordDir, launcher.ArtifactDir, "out", "partial.txt")); err != nil || string(got) != "before the timeout\n" {
		t.Errorf("files written before the timeout must be harvested: %q %v", got, err)
	}
	if res.Timings.Run > 30_000 {
		t.Errorf("the run lasted %d ms; the timeout is 2 s", res.Timings.Run)
	}
	e.assertNothingLeft(res.RunID)
}

func TestFirstOutputWatchdog(t *testing.T) {
	e := newEnv(t)
	// The scripted engine streams early: silence past firstOutput is fatal.
	spec := e.spec("silent", "- sleep: 1h", "  limits: {timeout: 1m, firstOutput: 2s}")
	res := e.run(spec).mustResult(t)
	if res.Status != launcher.StatusTimedOut || !contains(res.Reasons, launcher.ReasonFirstOutput) {
		t.Fatalf("status %s reasons %v, want timed_out with %s", res.Status, res.Reasons, launcher.ReasonFirstOutput)
	}
	// A late-printing engine (exec, like gemini) has no first-output
	// watchdog: a silent 4 s is a healthy run.
	file := filepath.Join(e.specDir, "late.yaml")
	os.WriteFile(file, []byte(`apiVersion: hookbox.dev/v1alpha1
kind: Spawn
metadata: {name: late}
spec:
  engine: {kind: exec, path: /usr/bin/sleep, args: ["4"]}
  workspace: ./ws
  limits: {timeout: 1m}
`), 0o644)
	late := e.run(file).mustResult(t)
	if late.Status != launcher.StatusCompleted {
		t.Fatalf("late engine: %s %v %s", late.Status, late.Reasons, late.Error)
	}
}

func TestMemoryAndPidsLimits(t *testing.T) {
	e := newEnv(t)
	oom := e.run(e.spec("oom", "- allocate: 512Mi\n- print: survived", "  limits: {memory: 64Mi}")).mustResult(t)
	if oom.Status != launcher.StatusOOMKilled {
		t.Errorf("allocating past the memory limit: status %s %v, want oom_killed", oom.Status, oom.Reasons)
	}
	// A child ended by the OOM killer while the engine exits 0 with its
	// artifact: the status is the engine's, the kill a reason.
	child := e.run(e.spec("child-oom", `- fork: {count: 1, allocate: 512Mi, sleep: 1ms, wait: true}
- write: {path: /run/hookbox/out/done.txt, content: done}`, "  limits: {memory: 64Mi}", "  artifacts: [done.txt]"))
	res := child.mustResult(t)
	if res.Status != launcher.StatusCompleted || !slices.Contains(res.Reasons, launcher.ReasonOOM) {
		t.Errorf("a child OOM-killed while the engine exits 0: status %s %v, want completed with reason %s", res.Status, res.Reasons, launcher.ReasonOOM)
	}
	if !strings.Contains(child.output(), `"how":"signal: killed"`) {
		t.Errorf("the child was not killed: %s", child.output())
	}
	bomb := e.run(e.spec("forkbomb", "- fork: {count: 2000}\n- print: after", "  limits: {pids: 32}"))
	res = bomb.mustResult(t)
	out := bomb.output()
	var started struct {
		Started int `json:"started"`
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, `"type":"fork"`) {
			json.Unmarshal([]byte(line), &started)
		}
	}
	if started.Started <= 0 || started.Started >= 32 {
		t.Errorf("the pids limit 32 must stop the fork bomb: started %d (%s)", started.Started, out)
	}
	if exec.Command("/bin/true").Run() != nil {
		t.Error("the host can no longer fork")
	}
	e.assertNothingLeft(res.RunID)
}

func TestSandboxUnderHookboxRun(t *testing.T) {
	e := newEnv(t)
	checkProbeRun(t, e.run(e.probeSpec(buildStatic(t, "hookbox.dev/hookbox/integration/probe", programDir(t)))))
}

// probeSpec writes a spawn whose engine is the probe program.
func (e *env) probeSpec(probe string) string {
	file := filepath.Join(e.specDir, "probe.yaml")
	os.WriteFile(file, []byte(`apiVersion: hookbox.dev/v1alpha1
kind: Spawn
metadata: {name: probe}
spec:
  engine: {kind: exec, path: `+probe+`}
  workspace: ./ws
`), 0o644)
	return file
}

// checkProbeRun checks what the probe engine found in its sandbox: every
// write outside the run dir and every exec from a writable place failed,
// it saw only lo, ran as 65532 with no capabilities.
func checkProbeRun(t *testing.T, r *run) {
	t.Helper()
	res := r.mustResult(t)
	if res.Status != launcher.StatusCompleted {
		t.Fatalf("%s %s\n%s", res.Status, res.Error, r.stderr)
	}
	results := map[string]probeResult{}
	for _, line := range strings.Split(r.output(), "\n") {
		var p probeResult
		if json.Unmarshal([]byte(line), &p) == nil && p.Check != "" {
			results[p.Check] = p
		}
	}
	for check, want := range map[string]bool{"write-root": false, "write-workspace": false, "write-runfiles": false,
		"exec-run-dir": false, "exec-tmp": false, "write-run-dir": true, "read-workspace": true} {
		if got, ok := results[check]; !ok || got.OK != want {
			t.Errorf("%s: %+v, want ok=%v", check, got, want)
		}
	}
	if results["interfaces"].Detail != "lo" || results["uid"].Detail != "65532:65532" || results["cap-eff"].Detail != "0000000000000000" {
		t.Errorf("identity/network: %+v %+v %+v", results["interfaces"], results["uid"], results["cap-eff"])
	}
	// No process of the run may change another's code: seccomp denies the
	// syscalls, the tracer's BPF LSM program /proc/<pid>/mem.
	denied := map[string][]string{"ptrace-attach": {"EPERM"}, "process-vm-writev": {"EPERM"}, "pidfd-getfd": {"EPERM"},
		"compat-syscall": compatDenied}
	if lsmDenied(res) {
		denied["proc-mem-write"] = []string{"EACCES"}
	} else {
		t.Logf("no BPF LSM programs in this run (%v): /proc/<pid>/mem is not denied (%+v)", res.Degraded, results["proc-mem-write"])
	}
	if got := results["inject-sibling"]; !got.OK {
		t.Errorf("the probe could not start its sibling: %+v", got)
	}
	for check, errnos := range denied {
		if got, ok := results[check]; !ok || got.OK || !slices.Contains(errnos, got.Errno) {
			t.Errorf("%s: %+v, want denied with %v", check, got, errnos)
		}
	}
}

// compatDenied is how the probe's syscall through the compat ABI may end
// under the native-only seccomp profile: the filter's bad-architecture
// action kills the thread (or the process, by SIGSYS).
var compatDenied = []string{"thread killed", syscall.SIGSYS.String()}

// startUntil starts `hookbox run --json` in the background and returns once
// the engine's output contains marker: the command, its run id, and the
// scanner over the rest of its events (the caller drains or abandons it).
func (e *env) startUntil(ctx context.Context, spec, marker string, args ...string) (*exec.Cmd, string, *bufio.Scanner) {
	e.t.Helper()
	cmd := e.command(ctx, append([]string{"run", "--json", "--state-dir", e.state, spec}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	var runID string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var ev launcher.Event
		json.Unmarshal(sc.Bytes(), &ev)
		runID = ev.RunID
		if strings.Contains(sc.Text(), marker) {
			return cmd, runID, sc
		}
	}
	e.t.Fatalf("the run ended before printing %q", marker)
	return nil, "", nil
}

func TestKill9ThenGC(t *testing.T) {
	e := newEnv(t)
	marker := fmt.Sprintf("hbx-kill9-%d", time.Now().UnixNano())
	spec := e.spec("kill9", "- daemonize: {marker: "+marker+"}\n- sleep: 300ms\n- print: ready\n- sleep: 1h")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd, runID, _ := e.startUntil(ctx, spec, "ready")
	cmd.Process.Kill()
	cmd.Wait()
	if runID == "" {
		t.Fatal("no event before the kill")
	}
	// The daemon's second fork may still be on its way under load.
	for deadline := time.Now().Add(10 * time.Second); len(markerProcesses(marker)) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("test setup: the daemon should still run after hookbox was killed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, err := exec.Command(hookboxBin, "gc", "--state-dir", e.state).CombinedOutput()
	if err != nil {
		t.Fatalf("gc: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), runID) {
		t.Errorf("gc did not report the abandoned run:\n%s", out)
	}
	if pids := markerProcesses(marker); len(pids) > 0 {
		t.Errorf("gc left processes: %v", pids)
	}
	e.assertNothingLeft(runID)
	again, _ := exec.Command(hookboxBin, "gc", "--state-dir", e.state).CombinedOutput()
	if !strings.Contains(string(again), "nothing to collect") {
		t.Errorf("a second gc must do nothing:\n%s", again)
	}
}

func TestConcurrentRuns(t *testing.T) {
	e := newEnv(t)
	spec := e.spec("many", "- write: {path: /run/hookbox/out/id.txt, content: x}\n- sleep: 500ms\n- exit: 0", "  artifacts: [id.txt]")
	var wg sync.WaitGroup
	results := make([]*run, 10)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = e.run(spec)
		}()
	}
	wg.Wait()
	ids := map[string]bool{}
	for i, r := range results {
		if r.result == nil || r.result.Status != launcher.StatusCompleted {
			t.Errorf("run %d: exit %d %+v\n%s", i, r.code, r.result, r.stderr)
			continue
		}
		if ids[r.result.RunID] {
			t.Errorf("duplicate run id %s", r.result.RunID)
		}
		ids[r.result.RunID] = true
	}
	for id := range ids {
		e.assertNothingLeft(id)
	}
}

func TestBadInputLeavesNothing(t *testing.T) {
	e := newEnv(t)
	// A spec error: exit 2, no run record.
	bad := filepath.Join(e.specDir, "bad.yaml")
	os.WriteFile(bad, []byte("apiVersion: hookbox.dev/v1alpha1\nkind: Spawn\nmetadata: {name: Bad}\n"), 0o644)
	if r := e.run(bad); r.code != 2 {
		t.Errorf("spec error: exit %d, want 2", r.code)
	}
	// A missing engine binary: an infrastructure error with a clear message.
	file := filepath.Join(e.specDir, "missing.yaml")
	os.WriteFile(file, []byte(`apiVersion: hookbox.dev/v1alpha1
kind: Spawn
metadata: {name: missing}
spec:
  engine: {kind: exec, path: /opt/hookbox-no-such-engine}
  workspace: ./ws
`), 0o644)
	r := e.run(file)
	res := r.mustResult(t)
	if r.code != 120 || res.Status != launcher.StatusInfraError || !strings.Contains(res.Error, "/opt/hookbox-no-such-engine") {
		t.Errorf("missing engine: exit %d %s %q", r.code, res.Status, res.Error)
	}
	e.assertNothingLeft(res.RunID)
	// An unreachable daemon named explicitly: no auto-start, a clear error.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := e.command(ctx, "run", "--state-dir", e.state, "--address", "/run/hookbox-no-such.sock", file).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 120 || !strings.Contains(string(out), "/run/hookbox-no-such.sock") {
		t.Errorf("unreachable daemon: %v\n%s", err, out)
	}
	// A full tmpfs: the engine's write fails, the run says so.
	full := e.run(e.spec("full", "- write: {path: /run/hookbox/big.bin, content: \""+strings.Repeat("x", 3<<20)+"\"}\n- exit: 0", "  limits: {tmpfs: 1Mi}"))
	fres := full.mustResult(t)
	if fres.Status != launcher.StatusFailed {
		t.Errorf("full tmpfs: status %s, want failed", fres.Status)
	}
	if data, _ := os.ReadFile(filepath.Join(fres.RecordDir, launcher.StderrFile)); !bytes.Contains(data, []byte("no space left")) {
		t.Errorf("stderr.log should say the tmpfs is full: %s", data)
	}
	e.assertNothingLeft(fres.RunID)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestProgramUnderTmp: a program whose host path the container's /tmp
// would hide appears under /hookbox/host and runs.
func TestProgramUnderTmp(t *testing.T) {
	e := newEnv(t)
	data, err := os.ReadFile(engineBin)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir() // under /tmp
	os.Chmod(dir, 0o755)
	engine := filepath.Join(dir, "engine")
	if err := os.WriteFile(engine, data, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(e.specDir, "tmp-engine.yaml")
	os.WriteFile(file, []byte(`apiVersion: hookbox.dev/v1alpha1
kind: Spawn
metadata: {name: tmp-engine}
spec:
  engine:
    kind: scripted
    path: `+engine+`
    script: [{print: from-tmp}, {exit: 0}]
  workspace: ./ws
`), 0o644)
	r := e.run(file)
	res := r.mustResult(t)
	if res.Status != launcher.StatusCompleted || !strings.Contains(r.output(), "from-tmp") {
		t.Fatalf("%s %s\n%s", res.Status, res.Error, r.stderr)
	}
}

// TestManagedContainerd: with no containerd at the system address, hookbox
// starts its own and the next run reuses it.
func TestManagedContainerd(t *testing.T) {
	e := newEnv(t)
	runtimeDir := filepath.Join(t.TempDir(), "rt")
	e.extraEnv = []string{"HOOKBOX_CONTAINERD_ADDRESS=", // CI exports it; it would win over the managed daemon
		"HOOKBOX_SYSTEM_CONTAINERD_ADDRESS=/run/hookbox-test-no-containerd.sock", "HOOKBOX_RUNTIME_DIR=" + runtimeDir}
	status := func() (running bool, pid int) {
		t.Helper()
		out, err := e.command(context.Background(), "daemon", "status", "--json", "--state-dir", e.state).Output()
		if err != nil {
			t.Fatalf("daemon status: %v", err)
		}
		var st struct {
			Running bool `json:"running"`
			PID     int  `json:"pid"`
		}
		if err := json.Unmarshal(out, &st); err != nil {
			t.Fatalf("daemon status: %v: %s", err, out)
		}
		return st.Running, st.PID
	}
	t.Cleanup(func() { e.command(context.Background(), "daemon", "stop", "--state-dir", e.state).Run() })
	if running, _ := status(); running {
		t.Fatal("test setup: a managed daemon already runs in a fresh state dir")
	}
	spec := e.spec("managed", "- print: on-managed\n- exit: 0")
	first := e.run(spec).mustResult(t)
	if first.Status != launcher.StatusCompleted {
		t.Fatalf("first run: %s %s", first.Status, first.Error)
	}
	running, pid := status()
	if !running || pid == 0 {
		t.Fatal("hookbox run did not start a managed containerd")
	}
	second := e.run(spec).mustResult(t)
	if second.Status != launcher.StatusCompleted {
		t.Fatalf("second run: %s %s", second.Status, second.Error)
	}
	if _, again := status(); again != pid {
		t.Errorf("the second run must reuse the managed containerd (pid %d), got pid %d", pid, again)
	}
	if err := e.command(context.Background(), "daemon", "stop", "--state-dir", e.state).Run(); err != nil {
		t.Errorf("daemon stop: %v", err)
	}
	if running, _ := status(); running {
		t.Error("daemon stop left it running")
	}
}

// TestGCSparesOtherStateDirs: a gc over one state dir never touches a live
// run recorded in another (both share containerd's namespace).
func TestGCSparesOtherStateDirs(t *testing.T) {
	e := newEnv(t)
	spec := e.spec("other", "- print: ready\n- sleep: 1h")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd, runID, sc := e.startUntil(ctx, spec, "ready", "--grace", "1s")
	other := filepath.Join(t.TempDir(), "other-state")
	out, err := exec.Command(hookboxBin, "gc", "--state-dir", other).CombinedOutput()
	if err != nil {
		t.Fatalf("gc: %v\n%s", err, out)
	}
	if strings.Contains(string(out), runID) {
		t.Errorf("gc over another state dir touched live run %s:\n%s", runID, out)
	}
	ls, _ := exec.Command("ctr", "--address", containerdAddress(), "-n", "hookbox", "tasks", "ls").CombinedOutput()
	if !strings.Contains(string(ls), runID) || !strings.Contains(string(ls), "RUNNING") {
		t.Errorf("the live run's task is gone:\n%s", ls)
	}
	cmd.Process.Signal(syscall.SIGINT)
	go func() {
		for sc.Scan() {
		}
	}()
	cmd.Wait()
	e.assertNothingLeft(runID)
}
