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
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/testapi/anthropic"
	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/render"
)

// The tracer runs inside hookbox run: these tests judge whole runs.

func hasReason(res *launcher.Result, reason string) bool {
	for _, r := range res.Trace.Reasons {
		if r == reason {
			return true
		}
	}
	return false
}

func TestTraceTwoHooksConfirmed(t *testing.T) {
	e := newEnv(t)
	spec := e.spec("twohooks", `
		- hook: first
		- hook: second
		- exit: 0`,
		"  hooks:",
		"    - {name: first, event: SessionStart, argv: [/usr/bin/printf, '%s|', one, '', 'two words'], required: true}",
		"    - {name: second, event: Stop, argv: [/usr/bin/true, '{run_id}'], required: true}")
	r := e.run(spec)
	res := r.mustResult(t)
	if res.Trace.Status != "confirmed" || r.code != 0 {
		t.Fatalf("trace %+v exit %d\n%s", res.Trace, r.code, r.stderr)
	}
	seen := map[string]int{}
	for _, m := range res.Trace.Matched {
		seen[m.Rule] += m.Count
	}
	if seen["init"] != 1 || seen["engine"] != 1 || seen["hook:first"] != 1 || seen["hook:second"] != 1 {
		t.Errorf("each exec must map to its rule: %+v", res.Trace.Matched)
	}
	// The live --json stream carried the execs too.
	execs := 0
	for _, ev := range r.events {
		if ev.Type == launcher.EventExec {
			execs++
		}
	}
	if execs != 4 {
		t.Errorf("%d exec events streamed, want 4 (init, engine, two hooks)", execs)
	}
	// And hookbox verify recomputes the same verdict offline.
	out, err := e.command(t.Context(), "verify", res.RecordDir).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "confirmed") {
		t.Errorf("hookbox verify: %v\n%s", err, out)
	}
}

// TestTraceManyHooksConfirmed: issue item 8 at the cap. render.MaxHooks
// hooks on one event all run; the run completes, is confirmed with every
// hook matched under its own name, and its teardown (judged before the
// verdict now) leaves nothing behind.
func TestTraceManyHooksConfirmed(t *testing.T) {
	e := newEnv(t)
	hooks := []string{"  hooks:"}
	for i := range render.MaxHooks {
		hooks = append(hooks, fmt.Sprintf("    - {name: same-%d, event: Stop, argv: [/usr/bin/true, '{run_id}'], required: true}", i))
	}
	r := e.run(e.spec("manyhooks", `
		- hook: same-0
		- exit: 0`, hooks...))
	res := r.mustResult(t)
	if res.Status != launcher.StatusCompleted || r.code != 0 || res.Trace.Status != "confirmed" {
		t.Fatalf("status %s exit %d trace %s %q\n%s", res.Status, r.code, res.Trace.Status, res.Trace.Reasons, r.stderr)
	}
	hooksMatched := 0
	for _, m := range res.Trace.Matched {
		if strings.HasPrefix(m.Rule, "hook:same-") && !strings.Contains(m.Rule, "/chain[") && m.Count == render.MaxHooks {
			hooksMatched++
		}
	}
	if hooksMatched != render.MaxHooks {
		t.Errorf("%d hooks matched by all %d runs of their shared argv, want every one", hooksMatched, render.MaxHooks)
	}
	if res.Trace.Events != render.MaxHooks+2 {
		t.Errorf("%d events, want init, engine and %d hook runs", res.Trace.Events, render.MaxHooks)
	}
	t.Logf("timings (ms): %+v", res.Timings)
}

func TestTraceHookArgvTamper(t *testing.T) {
	e := newEnv(t)
	// The engine runs the hook program itself with one extra argument.
	spec := e.spec("tamper", `
		- hook: check
		- exec: [/usr/bin/printf, '%s', checked, extra]
		- exit: 0`,
		"  hooks: [{name: check, event: SessionStart, argv: [/usr/bin/printf, '%s', checked]}]",
		"  tools: [/usr/bin/printf]",
		"  trace: {allow: []}")
	r := e.run(spec)
	res := r.mustResult(t)
	if res.Trace.Status != "mismatch" || !hasReason(res, "hook-argv-differs") || r.code != 124 {
		t.Fatalf("trace %+v exit %d, want mismatch/hook-argv-differs and exit 124", res.Trace, r.code)
	}
	found := false
	for _, d := range res.Trace.Diffs {
		if d.Index == 3 && d.Got == "extra" {
			found = true
		}
	}
	if !found {
		t.Errorf("the diff must name argv[3] = extra: %+v", res.Trace.Diffs)
	}
}

func TestTraceUnexpectedExecThroughShell(t *testing.T) {
	e := newEnv(t)
	script := "- exec: [/bin/sh, -c, 'git --version']\n- exit: 0"
	tools := "  tools: [/bin/sh, /usr/bin/git]"
	bad := e.run(e.spec("shell-git", script, tools, "  trace: {allow: [/bin/sh]}")).mustResult(t)
	if bad.Trace.Status != "mismatch" || !hasReason(bad, "unexpected-exec") {
		t.Fatalf("git outside trace.allow: %+v", bad.Trace)
	}
	good := e.run(e.spec("shell-git-allowed", script, tools, "  trace: {allow: [/bin/sh, /usr/bin/git]}")).mustResult(t)
	if good.Trace.Status != "confirmed" {
		t.Fatalf("git in trace.allow: %+v", good.Trace)
	}
}

// TestTraceRingOverflowIsUnchecked: a ring with room for one event, and a
// reader that cannot read during the burst: hookbox, whose own tracer
// reads the ring, is stopped while the engine forks (the ring wakes a
// reader that keeps up, so without the stop nothing would be lost).
func TestTraceRingOverflowIsUnchecked(t *testing.T) {
	e := newEnv(t)
	spec := e.spec("overflow", "- print: ready\n- sleep: 1s\n- fork: {count: 40, sleep: 10ms}\n- sleep: 500ms\n- exit: 0", "  limits: {pids: 256}")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lr := e.startRun(ctx, spec, "ready", "--trace-ring-size", "16384")
	if err := lr.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // the 1 s sleep and the forks' 0.4 s
	if err := lr.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if !lr.waitExit(time.Minute) {
		t.Fatal("hookbox still runs a minute after the burst")
	}
	res := lr.result(t)
	if res.Trace.Status == "confirmed" || !hasReason(res, "events-lost") {
		t.Fatalf("a ring too small for the burst must give unchecked/events-lost: %+v", res.Trace)
	}
	// The stats line counts the loss.
	data, err := os.ReadFile(filepath.Join(res.RecordDir, launcher.TraceFile))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	var last struct {
		Kind  string `json:"kind"`
		Stats struct{ Lost, Matched, Delivered uint64 }
	}
	json.Unmarshal([]byte(lines[len(lines)-1]), &last)
	if last.Kind != "stats" || last.Stats.Lost == 0 || last.Stats.Delivered+last.Stats.Lost != last.Stats.Matched {
		t.Errorf("stats line %+v: received + lost must equal matched, lost > 0", last)
	}
}

func TestTraceTruncatedArgvIsUnchecked(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("p", 6000) // beyond the 4 KiB argv cap
	spec := e.spec("long", "- exit: 0", "  prompt: "+long)
	res := e.run(spec).mustResult(t)
	if res.Trace.Status != "unchecked" || !hasReason(res, "argv-truncated") {
		t.Fatalf("an engine argv beyond the cap: %+v", res.Trace)
	}
}

// lsmDenied reports whether a traced run had the tracer's BPF LSM
// programs: where the host has the BPF LSM and its kernel loads them,
// enforce refuses instead of killing.
func lsmDenied(res *launcher.Result) bool {
	for _, d := range res.Degraded {
		if d == launcher.ReasonPtraceDenialUnavailable {
			return false
		}
	}
	return true
}

// Enforce stops an unplanned exec before it runs: with the BPF LSM the
// exec fails with EPERM and the engine sees the error (denied-exec);
// without it the program is killed before its first instruction
// (killed-exec). Either way the engine goes on and the verdict is a
// mismatch.
func TestTraceEnforceKills(t *testing.T) {
	e := newEnv(t)
	marker := "/run/hookbox/out/should-not-exist"
	spec := e.spec("enforce", "- exec: [/usr/bin/touch, "+marker+"]\n- print: after\n- exit: 0",
		"  tools: [/usr/bin/touch]", "  trace: {mode: enforce, allow: []}")
	r := e.run(spec)
	res := r.mustResult(t)
	reason, other := "killed-exec", "denied-exec"
	if lsmDenied(res) {
		reason, other = other, reason
		if !strings.Contains(r.output(), "operation not permitted") {
			t.Errorf("the engine must see the refused exec fail with EPERM:\n%s", r.output())
		}
	}
	t.Logf("BPF LSM programs attached: %v", lsmDenied(res))
	if res.Trace.Status != "mismatch" || !hasReason(res, reason) || hasReason(res, other) {
		t.Fatalf("enforce: want %s: %+v", reason, res.Trace)
	}
	if _, err := os.Stat(filepath.Join(res.RecordDir, launcher.ArtifactDir, "out", "should-not-exist")); err == nil {
		t.Fatal("the stopped program ran: its marker file exists")
	}
	if !strings.Contains(r.output(), "after") {
		t.Errorf("the engine itself must go on after the kill:\n%s", r.output())
	}
}

// A memory file run with execveat: no noexec mount stops it, enforce does
// (refused with EPERM, or killed), and the engine goes on.
func TestTraceEnforceStopsMemfdExec(t *testing.T) {
	e := newEnv(t)
	probe := buildStatic(t, "hookbox.dev/hookbox/integration/probe", programDir(t))
	file := filepath.Join(e.specDir, "memfd.yaml")
	os.WriteFile(file, []byte(`apiVersion: hookbox.dev/v1alpha1
kind: Spawn
metadata: {name: memfd}
spec:
  engine: {kind: exec, path: `+probe+`, args: [memfd-exec]}
  workspace: ./ws
  trace: {mode: enforce}
`), 0o644)
	r := e.run(file)
	res := r.mustResult(t)
	if res.Status != launcher.StatusCompleted {
		t.Fatalf("the probe must go on and exit 0: %s %s\n%s", res.Status, res.Error, r.stderr)
	}
	var got probeResult
	for _, line := range strings.Split(r.output(), "\n") {
		if json.Unmarshal([]byte(line), &got) == nil && got.Check == "memfd-exec" {
			break
		}
	}
	want, reason := "signal 9", "killed-exec"
	if lsmDenied(res) {
		want, reason = "EPERM", "denied-exec"
	}
	if got.Check != "memfd-exec" || got.OK || got.Errno != want {
		t.Errorf("memfd exec: %+v, want refused with %s", got, want)
	}
	if res.Trace.Status != "mismatch" || !hasReason(res, reason) {
		t.Errorf("verdict: want mismatch with %s: %+v", reason, res.Trace)
	}
}

func TestTraceOffIsUnchecked(t *testing.T) {
	e := newEnv(t)
	res := e.run(e.spec("off", "- exit: 0", "  trace: {mode: off}")).mustResult(t)
	if res.Trace.Status != "unchecked" || !hasReason(res, "tracer-off") {
		t.Fatalf("trace off: %+v", res.Trace)
	}
	if _, err := os.Stat(filepath.Join(res.RecordDir, launcher.TraceFile)); err == nil {
		t.Error("trace off must not write a trace")
	}
}

func TestTraceConcurrentRunsKeepTheirEvents(t *testing.T) {
	e := newEnv(t)
	assertOwnEvents(t, concurrentRuns(e, 20))
}

// concurrentRuns runs n traced spawns at once, run i with argv marked
// run-i and hook-i.
func concurrentRuns(e *env, n int) []*launcher.Result {
	results := make([]*launcher.Result, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		spec := e.spec(fmt.Sprintf("conc-%d", i), "- hook: h\n- sleep: 200ms\n- exit: 0",
			fmt.Sprintf("  prompt: run-%d", i),
			fmt.Sprintf("  hooks: [{name: h, event: SessionStart, argv: [/usr/bin/printf, 'hook-%d']}]", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = e.run(spec).result
		}()
	}
	wg.Wait()
	return results
}

// assertOwnEvents: each of concurrentRuns' results is confirmed and its
// trace holds only its own cgroup's events and none of the others' argv.
func assertOwnEvents(t *testing.T, results []*launcher.Result) {
	t.Helper()
	n := len(results)
	for i, res := range results {
		if res == nil || res.Trace.Status != "confirmed" {
			t.Errorf("run %d: %+v", i, res)
			continue
		}
		var spawned launcher.Spawned
		data, _ := os.ReadFile(filepath.Join(res.RecordDir, launcher.SpawnedFile))
		json.Unmarshal(data, &spawned)
		f, err := os.Open(filepath.Join(res.RecordDir, launcher.TraceFile))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev struct {
				Kind     string   `json:"kind"`
				CgroupID uint64   `json:"cgroup_id"`
				Argv     []string `json:"argv"`
			}
			json.Unmarshal(sc.Bytes(), &ev)
			if ev.Kind == "stats" {
				continue
			}
			if ev.CgroupID != spawned.CgroupID {
				t.Errorf("run %d: event of cgroup %d in a run of cgroup %d", i, ev.CgroupID, spawned.CgroupID)
			}
			for _, arg := range ev.Argv {
				for j := 0; j < n; j++ {
					if j != i && (arg == fmt.Sprintf("run-%d", j) || arg == fmt.Sprintf("hook-%d", j)) {
						t.Errorf("run %d recorded an exec of run %d: %q", i, j, ev.Argv)
					}
				}
			}
		}
		f.Close()
	}
}

// TestRealClaudeOffline runs the real Claude Code engine without network or
// credentials: it exits 1, its four exec-form hooks run with exactly the
// rendered argv, and the verdict is confirmed.
func TestRealClaudeOffline(t *testing.T) {
	testenv.RequireIntegration(t, anthropic.ClaudeInstalled)
	e := newEnv(t)
	r := e.run("../examples/claude-offline.yaml")
	res := r.mustResult(t)
	if res.ExitCode == nil || *res.ExitCode != 1 || res.Status != launcher.StatusFailed {
		t.Fatalf("Claude Code offline should exit 1 (not logged in): %+v\n%s", res, r.stderr)
	}
	if !strings.Contains(r.output(), "Not logged in") {
		t.Errorf("expected the not-logged-in result in the stream")
	}
	for _, a := range res.Artifacts {
		if a.Status != "found" {
			t.Errorf("hook marker %s: %s", a.Declared, a.Status)
		}
	}
	if res.Trace.Status != "confirmed" {
		t.Fatalf("verdict %+v", res.Trace)
	}
	hooks := map[string]bool{}
	for _, m := range res.Trace.Matched {
		hooks[m.Rule] = true
	}
	for _, h := range []string{"init", "engine", "hook:session-start", "hook:prompt-submit", "hook:stop-failure", "hook:session-end"} {
		if !hooks[h] {
			t.Errorf("rule %s not matched: %+v", h, res.Trace.Matched)
		}
	}
}

// TestSwappedEngineNeverRuns: a fixture replaces the engine inside the
// assembled runfiles tree after a first run. The next run re-checks the
// tree against the store before mounting it, rebuilds it, and the engine
// that runs is the rendered one: same render digest, verdict confirmed.
func TestSwappedEngineNeverRuns(t *testing.T) {
	e := newEnv(t)
	spec := e.spec("swap", "- print: genuine\n- exit: 0")
	first := e.run(spec).mustResult(t)
	if first.Trace.Status != "confirmed" {
		t.Fatalf("first run: %+v", first.Trace)
	}
	trees, _ := filepath.Glob(filepath.Join(e.state, "runfiles", "trees", "*"))
	if len(trees) != 1 {
		t.Fatalf("expected one runfiles tree, found %v", trees)
	}
	inTree := filepath.Join(trees[0], engineBin)
	impostor, err := os.ReadFile("/usr/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	tmp := inTree + ".swap"
	if err := os.WriteFile(tmp, impostor, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, inTree); err != nil {
		t.Fatal(err)
	}
	r := e.run(spec)
	second := r.mustResult(t)
	if second.RenderDigest != first.RenderDigest || second.Trace.Status != "confirmed" || !strings.Contains(r.output(), "genuine") {
		t.Fatalf("after the swap: digest %s (was %s), trace %+v, output %q", second.RenderDigest, first.RenderDigest, second.Trace, r.output())
	}
	genuine, _ := os.ReadFile(engineBin)
	now, _ := os.ReadFile(filepath.Join(trees[0], engineBin))
	if string(now) != string(genuine) {
		t.Error("the tree still holds the impostor")
	}
}

// TestTraceThroughHelperAsRoot: a root hookbox uses a tracer helper that
// answers at its socket instead of loading BPF itself, with the same
// verdict.
func TestTraceThroughHelperAsRoot(t *testing.T) {
	e := newEnv(t)
	socket := filepath.Join(t.TempDir(), "tracer.sock")
	var log bytes.Buffer
	helper := exec.Command(hookboxBin, "tracer", "serve", "--socket", socket)
	helper.Stderr = &log
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { helper.Process.Signal(syscall.SIGTERM); helper.Wait() }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(socket); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the helper did not listen: %s", log.String())
		}
	}
	e.extraEnv = append(e.extraEnv, "HOOKBOX_TRACER_SOCKET="+socket)
	res := e.run(e.spec("helper", "- hook: h\n- exit: 0", "  hooks: [{name: h, event: SessionStart, argv: [/usr/bin/true]}]")).mustResult(t)
	if res.Trace.Status != "confirmed" || res.Trace.Events != 3 {
		t.Errorf("trace through the helper: %+v", res.Trace)
	}
	helper.Process.Signal(syscall.SIGTERM)
	helper.Wait()
	if !strings.Contains(log.String(), "watch start uid=0") || !strings.Contains(log.String(), "events=3 lost=0") {
		t.Errorf("the helper did not serve the run:\n%s", log.String())
	}
}
