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
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/launcher"
)

// These tests break the containerd a run uses while the engine runs: a
// private managed containerd that hookbox starts under the test's own
// state and runtime directories (never the shared system daemon), which
// the test then SIGKILLs or SIGSTOPs. Teardown and the watchdogs must work
// from the kernel (the init's pidfd, the run's cgroup), so that nothing of
// the run outlives hookbox and a hung daemon cannot hold it
// (docs/architecture.md "Teardown when containerd fails").

const faultGrace = 2 * time.Second

// newManagedEnv is a test env whose runs use a managed containerd of its
// own: the system address is pointed at a socket nobody serves.
func newManagedEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	runtimeDir := filepath.Join(t.TempDir(), "rt")
	e.extraEnv = append(e.extraEnv, "HOOKBOX_CONTAINERD_ADDRESS=", // CI exports it; it would win over the managed daemon
		"HOOKBOX_SYSTEM_CONTAINERD_ADDRESS=/run/hookbox-test-no-containerd.sock", "HOOKBOX_RUNTIME_DIR="+runtimeDir)
	e.address = filepath.Join(runtimeDir, "containerd", "containerd.sock")
	// Cleanups run last first: gc through the managed daemon, then stop it.
	t.Cleanup(func() { e.command(context.Background(), "daemon", "stop", "--state-dir", e.state).Run() })
	t.Cleanup(func() { e.command(context.Background(), "gc", "--state-dir", e.state).Run() })
	return e
}

// daemonPID is the pid of the env's managed containerd (0: none runs).
func (e *env) daemonPID() int {
	e.t.Helper()
	out, err := e.command(context.Background(), "daemon", "status", "--json", "--state-dir", e.state).Output()
	if err != nil {
		e.t.Fatalf("daemon status: %v", err)
	}
	var st struct {
		Running bool `json:"running"`
		PID     int  `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		e.t.Fatalf("daemon status: %v: %s", err, out)
	}
	if !st.Running {
		return 0
	}
	return st.PID
}

// shellSpec is an exec spawn of /usr/bin/sh -c script: an engine that
// prints only at its end, so only the overall timeout watches it.
// marker is the shell's $0, so its command line names it.
func (e *env) shellSpec(name, script, marker, timeout string) string {
	e.t.Helper()
	file := filepath.Join(e.specDir, name+".yaml")
	content := fmt.Sprintf(`apiVersion: hookbox.dev/v1alpha1
kind: Spawn
metadata: {name: %s}
spec:
  engine: {kind: exec, path: /usr/bin/sh, args: ["-c", %q, %q]}
  tools: [/usr/bin/sleep]
  workspace: ./ws
  limits: {timeout: %s}
`, name, script, marker, timeout)
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return file
}

// liveRun is a `hookbox run --json` in the background.
type liveRun struct {
	cmd     *exec.Cmd
	spawned *launcher.Spawned
	lines   bytes.Buffer // every line it printed until exit
	stderr  bytes.Buffer
	exited  chan struct{}
	exitAt  time.Time
	code    int
}

// startRun starts spec and returns once its stdout carried marker; the
// rest of its output is collected until it exits (liveRun.exited).
func (e *env) startRun(ctx context.Context, spec, marker string, args ...string) *liveRun {
	e.t.Helper()
	lr := &liveRun{exited: make(chan struct{})}
	args = append([]string{"run", "--json", "--state-dir", e.state, "--grace", faultGrace.String()}, append(args, spec)...)
	lr.cmd = e.command(ctx, args...)
	lr.cmd.Stderr = &lr.stderr
	stdout, err := lr.cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := lr.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	seen := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		found := false
		for sc.Scan() {
			lr.lines.Write(append(sc.Bytes(), '\n'))
			var ev launcher.Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Type == launcher.EventSpawned {
				lr.spawned = ev.Spawned
			}
			if !found && strings.Contains(sc.Text(), marker) {
				found = true
				close(seen)
			}
		}
		err := lr.cmd.Wait()
		lr.exitAt = time.Now()
		if ee, ok := err.(*exec.ExitError); ok {
			lr.code = ee.ExitCode()
		}
		if !found {
			close(seen)
		}
		close(lr.exited)
	}()
	<-seen
	if lr.spawned == nil {
		<-lr.exited
		e.t.Fatalf("the run ended before printing %q (exit %d)\n%s\nstderr:\n%s", marker, lr.code, lr.lines.String(), lr.stderr.String())
	}
	return lr
}

// waitExit waits up to limit for the run to exit and reports whether it did.
func (lr *liveRun) waitExit(limit time.Duration) bool {
	select {
	case <-lr.exited:
		return true
	case <-time.After(limit):
		return false
	}
}

func (lr *liveRun) result(t *testing.T) *launcher.Result {
	t.Helper()
	r := &run{code: lr.code, stdout: lr.lines.String(), stderr: lr.stderr.String()}
	r.parse(t)
	return r.mustResult(t)
}

// member is one process of a run's cgroup, by pid and start time.
type member struct {
	pid   int
	start uint64
}

// cgroupMembers lists the processes of the run's cgroup2 directory and
// every cgroup below it.
func cgroupMembers(t *testing.T, cgroupsPath string) []member {
	t.Helper()
	var out []member
	root := filepath.Join("/sys/fs/cgroup/unified", cgroupsPath)
	if _, err := os.Stat(root); err != nil {
		root = filepath.Join("/sys/fs/cgroup", cgroupsPath) // pure cgroup2
	}
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		data, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, f := range strings.Fields(string(data)) {
			pid, _ := strconv.Atoi(f)
			if start, err := host.StartTime(pid); err == nil {
				out = append(out, member{pid, start})
			}
		}
		return nil
	})
	return out
}

// engineMembers waits until the run's cgroup holds init, the shell and
// its sleep, and returns them.
func engineMembers(t *testing.T, cgroupsPath string) []member {
	t.Helper()
	var ms []member
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ms = cgroupMembers(t, cgroupsPath); len(ms) >= 3 {
			return ms
		}
	}
	t.Fatalf("test setup: the run's cgroup %s has %v, want init, sh and sleep", cgroupsPath, ms)
	return nil
}

// alive lists the members still running (same pid, same start time, not
// a zombie).
func alive(ms []member) []int {
	var pids []int
	for _, m := range ms {
		if host.ProcessAlive(m.pid, m.start) {
			pids = append(pids, m.pid)
		}
	}
	return pids
}

// waitGone polls until no member runs, up to limit, and returns when the
// last one was seen gone (zero time if some still run).
func waitGone(ms []member, limit time.Duration) time.Time {
	for deadline := time.Now().Add(limit); ; {
		if len(alive(ms)) == 0 {
			return time.Now()
		}
		if time.Now().After(deadline) {
			return time.Time{}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// assertNoneSurvives: nothing of the run runs once hookbox has exited,
// and its cgroup is gone or empty.
func assertNoneSurvives(t *testing.T, ms []member, marker, cgroupsPath string) {
	t.Helper()
	if pids := alive(ms); len(pids) > 0 {
		t.Errorf("processes of the run outlived hookbox: %v (of %v)", pids, ms)
	}
	if pids := markerProcesses(marker); len(pids) > 0 {
		t.Errorf("the engine (%s) outlived hookbox: %v", marker, pids)
	}
	if left := cgroupMembers(t, cgroupsPath); len(left) > 0 {
		t.Errorf("cgroup %s still has members after hookbox exited: %v", cgroupsPath, left)
	}
}

// kernelKnowsExitCodes: this kernel tells a pidfd's holder the exit status
// of a process it did not create (PIDFD_INFO_EXIT, Linux 6.15).
func kernelKnowsExitCodes(t *testing.T) bool {
	t.Helper()
	cmd := exec.Command("/usr/bin/true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	cmd.Wait()
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	info := unix.PidfdInfo{Mask: unix.PIDFD_INFO_EXIT}
	return unix.IoctlPidfdInfo(fd, &info) == nil && info.Mask&unix.PIDFD_INFO_EXIT != 0
}

// assertNextRunWorks: a run after the fault gets a daemon that answers (the
// managed one, restarted or resumed), is confirmed, and the faulted run's
// leftovers are collected (by that run's gc) so nothing of it is left.
func assertNextRunWorks(t *testing.T, e *env, faulted string) {
	t.Helper()
	spec := e.spec("after", "- print: {type: system, subtype: init}\n- print: after-the-fault\n- exit: 0")
	r := e.run(spec)
	res := r.mustResult(t)
	if r.code != 0 || res.Status != launcher.StatusCompleted || res.Trace.Status != "confirmed" {
		t.Fatalf("the run after the fault: exit %d, %s, verdict %s %v, error %q\nstderr:\n%s", r.code, res.Status, res.Trace.Status, res.Trace.Reasons, res.Error, r.stderr)
	}
	if e.daemonPID() == 0 {
		t.Error("no managed containerd runs after the next run")
	}
	e.assertNothingLeft(res.RunID)
	e.assertNothingLeft(faulted)
}

// startManaged makes the env's first run, which starts its managed
// containerd, and returns that daemon's pid.
func (e *env) startManaged() int {
	e.t.Helper()
	warm := e.run(e.spec("warm", "- print: warm\n- exit: 0")).mustResult(e.t)
	if warm.Status != launcher.StatusCompleted {
		e.t.Fatalf("warm-up run: %s %s", warm.Status, warm.Error)
	}
	pid := e.daemonPID()
	if pid == 0 {
		e.t.Fatal("test setup: hookbox run started no managed containerd")
	}
	return pid
}

// stallDaemon SIGSTOPs pid for stall, then SIGCONTs it; the channel is
// closed once it runs again. A test that ends sooner resumes it at once.
func stallDaemon(t *testing.T, pid int, stall time.Duration) <-chan struct{} {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP containerd %d: %v", pid, err)
	}
	resumed := make(chan struct{})
	resume := time.AfterFunc(stall, func() { syscall.Kill(pid, syscall.SIGCONT); close(resumed) })
	t.Cleanup(func() {
		if resume.Stop() {
			syscall.Kill(pid, syscall.SIGCONT)
			close(resumed)
		}
	})
	return resumed
}

// engineGoneWithin waits for the engine's processes to be gone and fails
// the test if that took longer than bound after since.
func engineGoneWithin(t *testing.T, ms []member, since time.Time, what string, bound time.Duration) time.Duration {
	t.Helper()
	gone := waitGone(ms, time.Minute)
	if gone.IsZero() {
		t.Fatalf("the engine still runs a minute after %s: %v", what, alive(ms))
	}
	took := gone.Sub(since)
	t.Logf("engine gone %s after %s; bound %s", took.Round(time.Millisecond), what, bound)
	if took > bound {
		t.Errorf("the engine ran %s after %s, over %s", took.Round(time.Millisecond), what, bound)
	}
	return took
}

// exitWithin waits for hookbox to exit and fails the test if it exited
// later than bound after since.
func (lr *liveRun) exitWithin(t *testing.T, since time.Time, what string, bound time.Duration) {
	t.Helper()
	if !lr.waitExit(2 * time.Minute) {
		t.Fatalf("hookbox still runs two minutes after %s", what)
	}
	took := lr.exitAt.Sub(since)
	t.Logf("hookbox exited %s after %s (exit %d); bound %s", took.Round(time.Millisecond), what, lr.code, bound)
	if took > bound {
		t.Errorf("hookbox took %s after %s to exit, over %s", took.Round(time.Millisecond), what, bound)
	}
}

// assertFaultResult: exit 120, infra_error with the given reasons and
// containerd-unreachable, the engine's exit code known when the kernel
// tells it, and a record that says containerd still holds the run's
// resources.
func assertFaultResult(t *testing.T, lr *liveRun, reasons ...string) *launcher.Result {
	t.Helper()
	res := lr.result(t)
	t.Logf("result: status %s, exit code %s, reasons %v, leftovers %v, error %q", res.Status, fmtCode(res.ExitCode), res.Reasons, res.Leftovers, res.Error)
	reasons = append(reasons, launcher.ReasonContainerdUnreachable, launcher.ReasonTeardownIncomplete)
	for _, want := range reasons {
		if !contains(res.Reasons, want) {
			t.Errorf("reasons %v lack %s", res.Reasons, want)
		}
	}
	if lr.code != 120 || res.Status != launcher.StatusInfraError {
		t.Errorf("exit %d, status %s: want 120, infra_error", lr.code, res.Status)
	}
	if kernelKnowsExitCodes(t) && res.ExitCode == nil {
		t.Error("the engine's exit code is not recorded, though the kernel tells it through the init's pidfd")
	}
	// What gc reads: the record must not claim a clean teardown.
	onDisk := readResult(t, res.RecordDir)
	if !contains(onDisk.Reasons, launcher.ReasonTeardownIncomplete) || !contains(onDisk.Leftovers, "task") {
		t.Errorf("result.json must say containerd still holds the run's task (teardown-incomplete, leftovers): %v %v", onDisk.Reasons, onDisk.Leftovers)
	}
	return res
}

// TestContainerdKilledMidRun: containerd is SIGKILLed while the engine
// runs. hookbox must end the engine itself (the daemon cannot), exit
// within the grace plus a small bound, say the daemon failed, and the next
// run must work on a restarted daemon.
func TestContainerdKilledMidRun(t *testing.T) {
	e := newManagedEnv(t)
	daemonPID := e.startManaged()
	marker := fmt.Sprintf("hbx-ctrd-kill-%d", time.Now().UnixNano())
	spec := e.shellSpec("victim", "echo ready; /usr/bin/sleep 30; echo done", marker, "1m")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lr := e.startRun(ctx, spec, "ready")
	ms := engineMembers(t, lr.spawned.CgroupsPath)

	killed := time.Now()
	if err := syscall.Kill(daemonPID, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL containerd %d: %v", daemonPID, err)
	}
	lr.exitWithin(t, killed, "containerd was SIGKILLed", faultGrace+8*time.Second)
	assertNoneSurvives(t, ms, marker, lr.spawned.CgroupsPath)
	res := assertFaultResult(t, lr)

	assertNextRunWorks(t, e, res.RunID)
	if again := e.daemonPID(); again == daemonPID {
		t.Errorf("the managed containerd pid %d did not change after it was killed", again)
	}
}

// TestContainerdStoppedPastTimeout: containerd is SIGSTOPped for 30 s
// while an engine with a 3 s timeout runs. The timeout must fire on time,
// the engine die within timeout+grace (plus a small bound) of its start,
// and hookbox exit long before the daemon resumes.
func TestContainerdStoppedPastTimeout(t *testing.T) {
	e := newManagedEnv(t)
	daemonPID := e.startManaged()
	res, resumed := runStalledPastTimeout(t, e, daemonPID, "stalled")

	// The daemon resumes after its 30 s; the next run reuses it.
	<-resumed
	assertNextRunWorks(t, e, res.RunID)
	if again := e.daemonPID(); again != daemonPID {
		t.Errorf("the resumed managed containerd (pid %d) was not reused: pid %d", daemonPID, again)
	}
}

// TestContainerdStoppedDuringStart: the engine runs, but Start's reply
// does not come (runc start is held for 30 s after it exec'd the engine,
// and containerd is stopped for 30 s): the engine still ends at its 3 s
// timeout, because a run does not wait for a reply past its deadline once
// its engine runs.
func TestContainerdStoppedDuringStart(t *testing.T) {
	e := newManagedEnv(t)
	hold := holdRuncStart(t, e)
	daemonPID := e.startManaged()
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res, resumed := runStalledPastTimeout(t, e, daemonPID, "stalled-start")

	os.Remove(hold)
	<-resumed
	assertNextRunWorks(t, e, res.RunID)
}

// runStalledPastTimeout runs an engine with a 3 s timeout that would run
// 30 s, SIGSTOPs containerd for 30 s once the engine printed, and checks
// that the engine ended at its timeout and hookbox soon after, with the
// fault's result. It returns that result and a channel closed once
// containerd runs again.
func runStalledPastTimeout(t *testing.T, e *env, daemonPID int, name string) (*launcher.Result, <-chan struct{}) {
	t.Helper()
	const timeout = 3 * time.Second
	marker := fmt.Sprintf("hbx-ctrd-%s-%d", name, time.Now().UnixNano())
	spec := e.shellSpec(name, "echo ready; /usr/bin/sleep 30; echo done", marker, "3s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lr := e.startRun(ctx, spec, "ready")
	// Recorded before Start, so the timeout counts from a little later:
	// what is measured from here is an upper bound of the overrun.
	started := lr.spawned.StartedAt
	ms := engineMembers(t, lr.spawned.CgroupsPath)

	resumed := stallDaemon(t, daemonPID, 30*time.Second)
	life := engineGoneWithin(t, ms, started, "its start with a 3s timeout", timeout+faultGrace+3*time.Second)
	t.Logf("engine overrun past its timeout: %s", (life - timeout).Round(time.Millisecond))
	lr.exitWithin(t, started, "the engine's start", timeout+faultGrace+12*time.Second)
	assertNoneSurvives(t, ms, marker, lr.spawned.CgroupsPath)
	return assertFaultResult(t, lr, launcher.ReasonTimeout), resumed
}

// holdRuncStart puts a runc first on the PATH of e's managed containerd
// (and so of its shims) that, while the returned file exists, keeps
// `runc start` from returning for 30 s after the real one did: the
// engine runs, and the shim's reply to Start waits.
func holdRuncStart(t *testing.T, e *env) string {
	t.Helper()
	real, err := exec.LookPath("runc")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	hold := filepath.Join(dir, "hold-start")
	script := fmt.Sprintf(`#!/bin/sh
for a in "$@"; do
	if [ "$a" = start ] && [ -e %[1]q ]; then
		%[2]q "$@"; rc=$?
		sleep 30
		exit $rc
	fi
done
exec %[2]q "$@"
`, hold, real)
	if err := os.WriteFile(filepath.Join(dir, "runc"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	e.extraEnv = append(e.extraEnv, "PATH="+dir+":"+os.Getenv("PATH"))
	return hold
}

// TestContainerdStoppedCtrlC: a cancellation while containerd is stopped
// ends the engine within the grace and hookbox soon after.
func TestContainerdStoppedCtrlC(t *testing.T) {
	e := newManagedEnv(t)
	daemonPID := e.startManaged()
	marker := fmt.Sprintf("hbx-ctrd-int-%d", time.Now().UnixNano())
	spec := e.shellSpec("cancelled", "echo ready; /usr/bin/sleep 30; echo done", marker, "1m")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lr := e.startRun(ctx, spec, "ready")
	ms := engineMembers(t, lr.spawned.CgroupsPath)

	resumed := stallDaemon(t, daemonPID, 20*time.Second)
	interrupted := time.Now()
	if err := lr.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	engineGoneWithin(t, ms, interrupted, "SIGINT to hookbox", faultGrace+3*time.Second)
	lr.exitWithin(t, interrupted, "SIGINT to hookbox", faultGrace+12*time.Second)
	assertNoneSurvives(t, ms, marker, lr.spawned.CgroupsPath)
	res := assertFaultResult(t, lr, launcher.ReasonSignal)

	<-resumed
	assertNextRunWorks(t, e, res.RunID)
}

func readResult(t *testing.T, dir string) *launcher.Result {
	t.Helper()
	var res launcher.Result
	readJSONFile(t, filepath.Join(dir, launcher.ResultFile), &res)
	return &res
}

// readJSONFile decodes the JSON file at path into v.
func readJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func fmtCode(code *int) string {
	if code == nil {
		return "none"
	}
	return strconv.Itoa(*code)
}
