package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/tracehelper"
)

// The managed tracer (docs/architecture.md "Exec tracer"): a root run
// with no tracer helper listening starts `hookbox tracer serve --managed`
// and traces through it. Each test has a runtime directory of its own, so
// its tracers are its own.

// managedEnv is newEnv whose runs use the runtime directory it returns.
func managedEnv(t *testing.T) (*env, string) {
	t.Helper()
	e := newEnv(t)
	// Short: the socket path must fit in sun_path.
	rt, err := os.MkdirTemp("", "hbx-mt-")
	if err != nil {
		t.Fatal(err)
	}
	e.extraEnv = append(e.extraEnv, "HOOKBOX_RUNTIME_DIR="+rt,
		"HOOKBOX_TRACER_SOCKET="+filepath.Join(rt, "no-helper.sock"))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := e.command(ctx, "daemon", "stop", "--state-dir", e.state).CombinedOutput(); err != nil {
			t.Errorf("daemon stop: %v\n%s", err, out)
		}
		os.RemoveAll(rt)
	})
	return e, rt
}

// managedTracer is the tracer of key under rt: its directory, its pid (0:
// none alive) and its log.
func managedTracer(t *testing.T, rt, key string) (dir string, pid int, log string) {
	t.Helper()
	dir = filepath.Join(rt, "tracer", key)
	if b, err := os.ReadFile(filepath.Join(dir, "pid")); err == nil {
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		if pid > 0 && syscall.Kill(pid, 0) != nil {
			pid = 0
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "log"))
	return dir, pid, string(b)
}

// waitLog waits until the tracer's log holds want n times.
func waitLog(t *testing.T, rt, key, want string, n int) string {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, _, log := managedTracer(t, rt, key)
		if strings.Count(log, want) >= n {
			return log
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tracer's log does not say %q %d times:\n%s", want, n, log)
		}
	}
}

func hookSpec(e *env, name string) string {
	return e.spec(name, "- hook: h\n- exit: 0", "  hooks: [{name: h, event: SessionStart, argv: [/usr/bin/true]}]")
}

// TestManagedTracerConcurrentRuns: concurrent first runs start one
// tracer (the loser of the start uses the winner's), and each run gets
// only its own events, confirmed.
func TestManagedTracerConcurrentRuns(t *testing.T) {
	e, rt := managedEnv(t)
	const n = 4
	assertOwnEvents(t, concurrentRuns(e, n))
	key := tracehelper.ManagedKey()
	_, pid, log := managedTracer(t, rt, key)
	if pid == 0 {
		t.Fatalf("no managed tracer runs in %s:\n%s", rt, log)
	}
	if got := strings.Count(log, "hookbox tracer: managed"); got != 1 {
		t.Errorf("%d tracers started, want 1:\n%s", got, log)
	}
	if got := strings.Count(log, "end=stop"); got != n {
		t.Errorf("the tracer served %d watches to their stop, want %d:\n%s", got, n, log)
	}
	entries, _ := os.ReadDir(filepath.Join(rt, "tracer"))
	if len(entries) != 1 {
		t.Errorf("%d tracer directories, want 1", len(entries))
	}
	// Root's only.
	for _, p := range []struct {
		path string
		mode os.FileMode
	}{{filepath.Join(rt, "tracer", key), 0o700}, {filepath.Join(rt, "tracer", key, "sock"), 0o600}} {
		fi, err := os.Stat(p.path)
		if err != nil || fi.Mode().Perm() != p.mode {
			t.Errorf("%s: %v, want mode %o", p.path, fi.Mode(), p.mode)
		}
	}
}

// TestManagedTracerUpgrade: a hookbox of another key (other BPF objects)
// starts a tracer of its own and never uses the running one.
func TestManagedTracerUpgrade(t *testing.T) {
	e, rt := managedEnv(t)
	old := tracehelper.ManagedKey()
	if res := e.run(hookSpec(e, "before")).mustResult(t); res.Trace.Status != "confirmed" {
		t.Fatalf("first run: %+v", res.Trace)
	}
	_, oldPID, _ := managedTracer(t, rt, old)
	if oldPID == 0 {
		t.Fatal("the first run started no managed tracer")
	}
	const upgraded = "upgradedkey"
	base := e.extraEnv
	e.extraEnv = append(base, tracehelper.KeyEnv+"="+upgraded)
	if res := e.run(hookSpec(e, "after")).mustResult(t); res.Trace.Status != "confirmed" {
		t.Fatalf("upgraded run: %+v", res.Trace)
	}
	_, newPID, newLog := managedTracer(t, rt, upgraded)
	_, stillPID, oldLog := managedTracer(t, rt, old)
	if newPID == 0 || newPID == oldPID {
		t.Fatalf("the upgraded hookbox started no tracer of its own (pid %d, old %d):\n%s", newPID, oldPID, newLog)
	}
	if stillPID != oldPID {
		t.Errorf("the old tracer (pid %d) should still run until idle or gc", oldPID)
	}
	if got := strings.Count(oldLog, "watch start"); got != 1 {
		t.Errorf("the old tracer served %d watches, want only the first run's:\n%s", got, oldLog)
	}
	if !strings.Contains(newLog, "key "+upgraded) || strings.Count(newLog, "end=stop events=3 lost=0") != 1 {
		t.Errorf("the new tracer did not serve the upgraded run:\n%s", newLog)
	}
	// And the old key's hookbox keeps using its own.
	e.extraEnv = base
	if res := e.run(hookSpec(e, "old-again")).mustResult(t); res.Trace.Status != "confirmed" {
		t.Fatalf("old run again: %+v", res.Trace)
	}
	if _, _, newLog = managedTracer(t, rt, upgraded); strings.Count(newLog, "watch start") != 1 {
		t.Errorf("a hookbox of the old key used the new tracer:\n%s", newLog)
	}
}

// TestManagedTracerKilledClient: hookbox SIGKILLed mid-run leaves no
// watch in the tracer (it stops the watch of a connection that dies,
// which disarms the cgroup), gc leaves a tracer that serves a run alone,
// and the next run is confirmed.
func TestManagedTracerKilledClient(t *testing.T) {
	e, rt := managedEnv(t)
	key := tracehelper.ManagedKey()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd, runID, _ := e.startUntil(ctx, e.spec("killed", "- print: ready\n- sleep: 1h"), "ready")
	waitLog(t, rt, key, "watch start", 1)
	_, pid, _ := managedTracer(t, rt, key)
	// A gc while the tracer serves a run leaves it.
	if out, err := e.command(ctx, "gc", "--state-dir", e.state).CombinedOutput(); err != nil {
		t.Fatalf("gc: %v\n%s", err, out)
	}
	if _, still, log := managedTracer(t, rt, key); still != pid || pid == 0 {
		t.Fatalf("gc stopped a tracer serving a run (pid %d, now %d):\n%s", pid, still, log)
	}
	cmd.Process.Kill()
	cmd.Wait()
	waitLog(t, rt, key, "end=disconnect", 1)
	// The next run (which collects the killed one's leftovers first) uses
	// the same tracer.
	res := e.run(hookSpec(e, "next")).mustResult(t)
	if res.Trace.Status != "confirmed" || res.Trace.Events != 3 {
		t.Errorf("the run after the killed one: %+v", res.Trace)
	}
	_, after, log := managedTracer(t, rt, key)
	if after != pid {
		t.Errorf("the next run used another tracer (pid %d, was %d)", after, pid)
	}
	if strings.Count(log, "watch start") != 2 || strings.Count(log, "watch end") != 2 {
		t.Errorf("the tracer holds a watch no run uses:\n%s", log)
	}
	if runID == "" {
		t.Error("no event before the kill")
	}
}

// TestManagedTracerGCAndDaemonStop: gc stops an idle tracer and removes
// its directory; daemon stop does so too.
func TestManagedTracerGCAndDaemonStop(t *testing.T) {
	e, rt := managedEnv(t)
	key := tracehelper.ManagedKey()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, stop := range [][]string{{"gc", "--state-dir", e.state}, {"daemon", "stop", "--state-dir", e.state}} {
		if res := e.run(hookSpec(e, "warm")).mustResult(t); res.Trace.Status != "confirmed" {
			t.Fatalf("run: %+v", res.Trace)
		}
		dir, pid, log := managedTracer(t, rt, key)
		if pid == 0 {
			t.Fatalf("no managed tracer:\n%s", log)
		}
		out, err := e.command(ctx, stop...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", stop[0], err, out)
		}
		if stop[0] == "gc" && !strings.Contains(string(out), "tracer "+dir) {
			t.Errorf("gc did not report the tracer:\n%s", out)
		}
		if testenv.Survived(t, pid, 0) {
			t.Errorf("%s: the tracer (pid %d) still runs", stop[0], pid)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s: the tracer's directory is still there: %v", stop[0], err)
		}
	}
}

// TestRunTimingsAddUp: a run's timings count from the process's start,
// and the phases add up to the total, in result.json and in the printed
// summary.
func TestRunTimingsAddUp(t *testing.T) {
	e, _ := managedEnv(t)
	spec := hookSpec(e, "timed")
	res := e.run(spec).mustResult(t)
	tm := res.Timings
	if tm.Startup <= 0 || tm.Sum() != tm.Total {
		t.Errorf("result timings %+v: startup must count, and the phases (sum %d) add up to total", tm, tm.Sum())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := e.command(ctx, "run", "--state-dir", e.state, spec).CombinedOutput()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	var line string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "hookbox: timings") {
			line = l
		}
	}
	var p [8]int64
	if _, err := fmt.Sscanf(line, "hookbox: timings  startup %dms  prepare %dms  create %dms  run %dms  teardown %dms  verify %dms  finish %dms  total %dms",
		&p[0], &p[1], &p[2], &p[3], &p[4], &p[5], &p[6], &p[7]); err != nil {
		t.Fatalf("summary timings %q: %v\n%s", line, err, out)
	}
	if sum := p[0] + p[1] + p[2] + p[3] + p[4] + p[5] + p[6]; sum != p[7] || p[0] <= 0 {
		t.Errorf("summary %q: phases sum to %d", line, sum)
	}
}

// TestManagedTracerCannotStart: where the managed tracer cannot start,
// the run loads the tracer itself and is still confirmed.
func TestManagedTracerCannotStart(t *testing.T) {
	e, rt := managedEnv(t)
	// A file where the tracers' directory would be.
	if err := os.WriteFile(filepath.Join(rt, "tracer"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	res := e.run(hookSpec(e, "fallback")).mustResult(t)
	if res.Trace.Status != "confirmed" || res.Trace.Events != 3 {
		t.Errorf("fallback run: %+v", res.Trace)
	}
	if pids := markerProcesses(filepath.Join(rt, "tracer")); len(pids) > 0 {
		t.Errorf("a managed tracer runs: %v", pids)
	}
}
