package verify

import (
	"fmt"
	"slices"
	"testing"

	"hookbox.dev/hookbox/internal/shellwords"
	"hookbox.dev/hookbox/render"
)

// The scale of issue item 8: a run with many hooks and a long trace.
const (
	runnerPath = "/usr/local/bin/hook-runner"
	scaleRunID = "run-42"
)

var runnerID = FileID{Dev: 64, Ino: 120}

func scaleIDs() FileIdentities {
	ids := testIDs()
	ids[runnerPath] = runnerID
	return ids
}

// runnerArgv is hook i's argv: one program for every hook, so the hooks
// differ only in their arguments (the worst case for an index by path).
func runnerArgv(i int) []string {
	return []string{runnerPath, "--rule", fmt.Sprintf("rule-%d", i), "{run_id}"}
}

// manyHooksRender: Claude with n exec-form hooks of one program; every
// tenth is required.
func manyHooksRender(n int) *render.Render {
	r := claudeRender()
	r.Programs = append(r.Programs, render.Program{Path: runnerPath, Roles: []string{render.RoleHook}})
	r.Hooks = nil
	for i := range n {
		argv := runnerArgv(i)
		r.Hooks = append(r.Hooks, render.Hook{Name: fmt.Sprintf("rule-%d", i), Event: "PostToolUse", Required: i%10 == 0, Argv: argv,
			Chain: []render.Exec{{Path: runnerPath, Argv: slices.Clone(argv), Slots: []int{3}}}})
	}
	return r
}

// manyShellHooksRender: Codex with n hooks through bash -c: every hook's
// first chain element has the same path and the same argv[1].
func manyShellHooksRender(n int) *render.Render {
	r := codexRender()
	r.Programs = append(r.Programs, render.Program{Path: runnerPath, Roles: []string{render.RoleHook}})
	r.Hooks = nil
	for i := range n {
		argv := runnerArgv(i)
		command := shellwords.Join(argv)
		r.Hooks = append(r.Hooks, render.Hook{Name: fmt.Sprintf("rule-%d", i), Event: "PostToolUse", Required: i%10 == 0, Argv: argv, Command: command,
			Chain: []render.Exec{
				{Path: bashPath, Argv: []string{bashPath, "-c", command}},
				{Path: runnerPath, Argv: slices.Clone(argv), Slots: []int{3}},
			}})
	}
	return r
}

// identicalHooksRender: Claude with n hooks that are the same program with
// the same argv on the same event (the 10,000 identical hooks).
func identicalHooksRender(n int) *render.Render {
	r := claudeRender()
	r.Hooks = nil
	for i := range n {
		r.Hooks = append(r.Hooks, render.Hook{Name: fmt.Sprintf("same-%d", i), Event: "Stop", Required: true, Argv: slices.Clone(auditArgv),
			Chain: []render.Exec{{Path: auditPath, Argv: slices.Clone(auditArgv), Slots: []int{3}}}})
	}
	return r
}

// runnerRun is the engine, then hook runs cycling through the hooks (one
// pid each), allowed git and the engine's self-exec as rg. With wrong,
// every hook run has another run id: each is then hook-argv-differs
// against the nearest hook, found among all of them.
func runnerRun(events, hooks int, wrong bool) []Event {
	out := []Event{claudeEngine()}
	for i := range events - 1 {
		pid := i + 2
		var e Event
		switch i % 4 {
		case 0, 1:
			runID := scaleRunID
			if wrong {
				runID = fmt.Sprintf("run-%d", i)
			}
			e = ev(pid, 1, runnerPath, runnerID, with(runnerArgv(i/2%hooks), 3, runID)...)
		case 2:
			e = gitStatus(pid)
		default:
			e = ev(pid, 1, "/proc/self/exe", claudeID, "rg", "--files")
		}
		e.Time = int64(i+2) * 1000
		out = append(out, e)
	}
	out[0].Time = 1000
	return out
}

// shellRun is the Codex engine, then bash -c and the hook it execs in the
// same pid, cycling through the hooks, with allowed bash and git between.
func shellRun(events, hooks int) []Event {
	out := []Event{codexEngine()}
	for i := 0; len(out) < events; i++ {
		pid := i + 2
		argv := with(runnerArgv(i%hooks), 3, scaleRunID)
		out = append(out,
			bashHook(pid, 1, shellwords.Join(argv)),
			ev(pid, 1, runnerPath, runnerID, argv...),
			ev(pid+1_000_000, 1, bashPath, bashID, "bash", "-c", "ls"),
			gitStatus(pid+2_000_000))
	}
	out = out[:events]
	for i := range out {
		out[i].Time = int64(i+1) * 1000
	}
	return out
}

// identicalRun is the engine, then one exec of the shared hook argv per
// hook, each in its own pid (one Stop event that runs them all).
func identicalRun(hooks int) []Event {
	out := []Event{claudeEngine()}
	for i := range hooks {
		out = append(out, auditHook(i+2))
	}
	for i := range out {
		out[i].Time = int64(i+1) * 1000
	}
	return out
}

// differingStorm is the engine, then execs of the hooks' program that
// differ from every hook in two arguments, each exec in its own way: the
// most work a verdict has per event (every hook of the path compared in
// full, nothing to reuse).
func differingStorm(events int) []Event {
	out := []Event{claudeEngine()}
	for i := range events - 1 {
		out = append(out, ev(i+2, 1, runnerPath, runnerID, runnerPath, "--rule", fmt.Sprintf("other-%d", i), fmt.Sprintf("run-%d", i)))
	}
	for i := range out {
		out[i].Time = int64(i+1) * 1000
	}
	return out
}

type scaleCase struct {
	name   string
	render *render.Render
	events []Event
	status Status
}

func scaleCases(tb testing.TB) []scaleCase {
	tb.Helper()
	return []scaleCase{
		{"exec-hooks/100k-events/1000-hooks", manyHooksRender(1000), runnerRun(100_000, 1000, false), StatusConfirmed},
		{"exec-hooks/100k-events/1000-hooks/hook-runs-differ", manyHooksRender(1000), runnerRun(100_000, 1000, true), StatusMismatch},
		{"shell-hooks/100k-events/1000-hooks", manyShellHooksRender(1000), shellRun(100_000, 1000), StatusConfirmed},
		{"identical-hooks/10k-events/10k-hooks", identicalHooksRender(10_000), identicalRun(10_000), StatusConfirmed},
		// The worst case at the cap on hooks per spawn (render.MaxHooks).
		{fmt.Sprintf("exec-hooks/100k-events/%d-hooks/every-event-differs", render.MaxHooks), manyHooksRender(render.MaxHooks), differingStorm(100_000), StatusMismatch},
	}
}

// BenchmarkVerifyScale: the judge's time and memory for long traces and
// many hooks.
func BenchmarkVerifyScale(b *testing.B) {
	ids := scaleIDs()
	for _, c := range scaleCases(b) {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				v := Verify(c.render, "", c.events, fullStats, ids, testSlots)
				if v.Status != c.status {
					b.Fatalf("status %s %q, want %s", v.Status, v.Reasons, c.status)
				}
			}
		})
	}
}
