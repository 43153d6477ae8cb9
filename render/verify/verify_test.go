package verify

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"hookbox.dev/hookbox/internal/shellwords"
	"hookbox.dev/hookbox/render"
)

// Paths of the test renders.
const (
	claudePath = "/usr/local/bin/claude"
	codexPath  = "/usr/local/bin/codex"
	auditPath  = "/usr/local/bin/audit-hook"
	lintPath   = "/usr/local/bin/lint-hook" // a python script
	python     = "/usr/bin/python3"
	gitPath    = "/usr/bin/git"
	bashPath   = "/bin/bash"
)

// Identities the launcher would have computed.
var (
	claudeID = FileID{Dev: 64, Ino: 100}
	codexID  = FileID{Dev: 64, Ino: 106}
	auditID  = FileID{Dev: 64, Ino: 101}
	gitID    = FileID{Dev: 64, Ino: 102}
	pythonID = FileID{Dev: 64, Ino: 103}
	lintID   = FileID{Dev: 64, Ino: 104}
	bashID   = FileID{Dev: 64, Ino: 105}
	otherID  = FileID{Dev: 64, Ino: 999}
	noID     = FileID{}
)

// testSlots are the launch values of the test run.
var testSlots = render.SlotValues{render.SlotRunID: "run-42", render.SlotRunDir: render.RunDir}

func testIDs() FileIdentities {
	return FileIdentities{
		claudePath: claudeID, codexPath: codexID, auditPath: auditID, gitPath: gitID,
		python: pythonID, lintPath: lintID, bashPath: bashID,
	}
}

func without(ids FileIdentities, path string) FileIdentities {
	out := maps.Clone(ids)
	delete(out, path)
	return out
}

var (
	claudeArgv = []string{claudePath, "-p", "--output-format", "stream-json", "--settings", "/hookbox/etc/claude-settings.json", "--", "do it"}
	auditArgv  = []string{auditPath, "--tag", "x y", "{run_id}"}
	lintArgv   = []string{lintPath, "--check"}
)

// claudeRender: exec-form hooks (a required binary, an optional script),
// git allowed, Claude's self-exec as rg.
func claudeRender() *render.Render {
	return &render.Render{
		Engine: render.Engine{
			Kind:          "claude",
			Exec:          render.Exec{Path: claudePath, Argv: slices.Clone(claudeArgv)},
			SelfExecArgv0: []string{"rg"},
		},
		Programs: []render.Program{
			{Path: bashPath, Roles: []string{render.RoleShell}},
			{Path: python, Roles: []string{render.RoleHook}},
			{Path: gitPath, Roles: []string{render.RoleTool}},
			{Path: auditPath, Roles: []string{render.RoleHook}},
			{Path: claudePath, Roles: []string{render.RoleEngine}},
			{Path: lintPath, Roles: []string{render.RoleHook}},
		},
		Hooks: []render.Hook{
			{Name: "audit", Event: "Stop", Required: true, Argv: slices.Clone(auditArgv),
				Chain: []render.Exec{{Path: auditPath, Argv: slices.Clone(auditArgv), Slots: []int{3}}}},
			{Name: "lint", Event: "PostToolUse", Argv: slices.Clone(lintArgv),
				Chain: []render.Exec{{Path: lintPath, Argv: slices.Clone(lintArgv)}}},
		},
		Trace: render.TracePolicy{Mode: render.TraceVerify, Allow: []string{gitPath}},
	}
}

var codexArgv = []string{codexPath, "exec", "--json", "-C", "/workspace", "--", "fix it"}

// codexRender: the hook runs through /bin/bash -c, as Codex insists; bash is
// also an allowed tool (the compiler allows it), as in the codex golden.
func codexRender() *render.Render {
	command := shellwords.Join(auditArgv)
	return &render.Render{
		Engine: render.Engine{Kind: "codex", Exec: render.Exec{Path: codexPath, Argv: slices.Clone(codexArgv)}},
		Programs: []render.Program{
			{Path: bashPath, Roles: []string{render.RoleShell, render.RoleTool}},
			{Path: gitPath, Roles: []string{render.RoleTool}},
			{Path: auditPath, Roles: []string{render.RoleHook}},
			{Path: codexPath, Roles: []string{render.RoleEngine}},
		},
		Hooks: []render.Hook{{
			Name: "audit", Event: "PostToolUse", Required: true, Argv: slices.Clone(auditArgv), Command: command,
			Chain: []render.Exec{
				{Path: bashPath, Argv: []string{bashPath, "-c", command}},
				{Path: auditPath, Argv: slices.Clone(auditArgv), Slots: []int{3}},
			},
		}},
		Trace: render.TracePolicy{Mode: render.TraceVerify, Allow: []string{bashPath, gitPath}},
	}
}

// codexNoBashTool: bash is only the hook's shell, not an allowed tool.
func codexNoBashTool() *render.Render {
	r := codexRender()
	r.Trace.Allow = []string{gitPath}
	return r
}

var fullStats = Stats{Attached: true, AttachedBeforeStart: true}

// ev is a successful exec; times are set by trace.
func ev(pid, ppid int, path string, id FileID, argv ...string) Event {
	return Event{Kind: KindExec, PID: pid, PPID: ppid, Filename: path, Argv: argv, Dev: id.Dev, Ino: id.Ino}
}

func failed(pid, ppid int, path string, errno int, argv ...string) Event {
	return Event{Kind: KindFailed, PID: pid, PPID: ppid, Filename: path, Argv: argv, Errno: errno}
}

// denied is an exec the BPF LSM refused in enforce mode: no argv.
func denied(pid, ppid int, path string, id FileID) Event {
	return Event{Kind: KindDenied, PID: pid, PPID: ppid, Filename: path, Dev: id.Dev, Ino: id.Ino, Errno: 1}
}

func ptraceDenied(pid, target int, mode uint32) Event {
	return Event{Kind: KindPtraceDenied, PID: pid, PPID: 1, Target: target, Mode: mode, Errno: 1}
}

func truncated(e Event) Event { e.Truncated = true; return e }
func killed(e Event) Event    { e.Killed = true; return e }

// trace gives events increasing times, in the order written.
func trace(events ...Event) []Event {
	for i := range events {
		events[i].Time = int64(i+1) * 1000
	}
	return events
}

func with(argv []string, i int, v string) []string {
	out := slices.Clone(argv)
	out[i] = v
	return out
}

// The events of a good Claude run: engine (pid 1), the audit hook with its
// run id, git.
func claudeEngine() Event { return ev(1, 0, claudePath, claudeID, claudeArgv...) }
func auditHook(pid int) Event {
	return ev(pid, 1, auditPath, auditID, with(auditArgv, 3, "run-42")...)
}
func gitStatus(pid int) Event { return ev(pid, 1, gitPath, gitID, "git", "status") }

func codexEngine() Event { return ev(1, 0, codexPath, codexID, codexArgv...) }
func bashHook(pid, ppid int, command string) Event {
	return ev(pid, ppid, bashPath, bashID, bashPath, "-c", command)
}

// diffWant is a typed matcher for one Diff; empty Want/Got are not compared.
type diffWant struct {
	rule, field string
	index       int
	want, got   string
}

func (w diffWant) matches(d Diff) bool {
	return d.Rule == w.rule && d.Field == w.field && d.Index == w.index &&
		(w.want == "" || d.Want == w.want) && (w.got == "" || d.Got == w.got)
}

// verdictWant is what a case expects: status and reasons exactly, the diffs
// listed (at least), no diffs at all when noDiffs, matched rules' counts.
type verdictWant struct {
	status  Status
	reasons []string
	diffs   []diffWant
	noDiffs bool
	matched map[string]int
}

func (w verdictWant) check(t *testing.T, v Verdict) {
	t.Helper()
	if v.Status != w.status {
		t.Errorf("status = %s, want %s", v.Status, w.status)
	}
	want := w.reasons
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(v.Reasons, want) {
		t.Errorf("reasons = %q, want %q", v.Reasons, want)
	}
	for _, dw := range w.diffs {
		if !slices.ContainsFunc(v.Diffs, dw.matches) {
			t.Errorf("no diff %+v", dw)
		}
	}
	if w.noDiffs && len(v.Diffs) > 0 {
		t.Errorf("diffs = %+v, want none", v.Diffs)
	}
	for rule, count := range w.matched {
		i := slices.IndexFunc(v.Matched, func(m Match) bool { return m.Rule == rule })
		switch {
		case i < 0 && count > 0:
			t.Errorf("rule %s not matched", rule)
		case i >= 0 && v.Matched[i].Count != count:
			t.Errorf("rule %s matched %d times, want %d", rule, v.Matched[i].Count, count)
		}
	}
	if t.Failed() {
		out, _ := json.MarshalIndent(v, "", "  ")
		t.Logf("verdict: %s", out)
	}
}

type verifyCase struct {
	render func() *render.Render // default claudeRender
	mode   render.TraceMode
	events []Event
	stats  *Stats            // default fullStats
	ids    FileIdentities    // default testIDs()
	slots  render.SlotValues // default testSlots
	// unknownSlots: judged without launch values (an older record).
	unknownSlots bool
	want         verdictWant
}

func (c verifyCase) run(t *testing.T) Verdict {
	t.Helper()
	mk := c.render
	if mk == nil {
		mk = claudeRender
	}
	stats := fullStats
	if c.stats != nil {
		stats = *c.stats
	}
	ids := c.ids
	if ids == nil {
		ids = testIDs()
	}
	slots := c.slots
	switch {
	case c.unknownSlots:
		slots = nil
	case slots == nil:
		slots = testSlots
	}
	return Verify(mk(), c.mode, c.events, stats, ids, slots)
}

func TestVerify(t *testing.T) {
	happy := trace(claudeEngine(), auditHook(2), gitStatus(3))
	tests := map[string]verifyCase{
		// Confirmed runs.
		"confirmed: engine, exec-form hook, allowed git": {
			events: happy,
			want: verdictWant{status: StatusConfirmed, noDiffs: true,
				matched: map[string]int{"engine": 1, "hook:audit": 1, "hook:audit/chain[0]": 1, "allow:" + gitPath: 1}},
		},
		"mode empty means the render's mode": {
			mode: "", events: happy,
			want: verdictWant{status: StatusConfirmed, noDiffs: true},
		},
		"observe and enforce are judged alike": {
			mode: render.TraceObserve, events: happy,
			want: verdictWant{status: StatusConfirmed, noDiffs: true},
		},
		"a launch slot holds exactly the run's value": {
			slots:  render.SlotValues{render.SlotRunID: "", render.SlotRunDir: render.RunDir},
			events: trace(claudeEngine(), ev(2, 1, auditPath, auditID, with(auditArgv, 3, "")...)),
			want:   verdictWant{status: StatusConfirmed, noDiffs: true, matched: map[string]int{"hook:audit": 1}},
		},
		"a render without launch slots needs no values": {
			render: func() *render.Render {
				r := claudeRender()
				r.Hooks = r.Hooks[1:]
				return r
			},
			unknownSlots: true,
			events:       trace(claudeEngine(), ev(3, 1, lintPath, lintID, lintArgv...)),
			want:         verdictWant{status: StatusConfirmed, noDiffs: true},
		},
		"optional hook missing is fine": {
			events: trace(claudeEngine(), auditHook(2)),
			want:   verdictWant{status: StatusConfirmed, matched: map[string]int{"hook:lint": 0}},
		},
		"claude re-execs itself as rg": {
			events: trace(claudeEngine(), auditHook(2), ev(3, 1, "/proc/self/exe", claudeID, "rg", "--files", "/workspace")),
			want:   verdictWant{status: StatusConfirmed, matched: map[string]int{"engine-self-exec:rg": 1}},
		},
		"shebang hook script: interpreter argv": {
			events: trace(claudeEngine(), auditHook(2), ev(3, 1, lintPath, pythonID, python, lintPath, "--check")),
			want:   verdictWant{status: StatusConfirmed, matched: map[string]int{"hook:lint": 1}},
		},
		"shebang hook script: interpreter with its argument": {
			events: trace(claudeEngine(), auditHook(2), ev(3, 1, lintPath, pythonID, python, "-u", lintPath, "--check")),
			want:   verdictWant{status: StatusConfirmed, matched: map[string]int{"hook:lint": 1}},
		},
		"hook script run directly (tracer saw the caller's argv)": {
			events: trace(claudeEngine(), auditHook(2), ev(3, 1, lintPath, lintID, lintArgv...)),
			want:   verdictWant{status: StatusConfirmed, matched: map[string]int{"hook:lint": 1}},
		},
		"failed PATH search before git is ignored": {
			events: trace(claudeEngine(), auditHook(2), failed(3, 1, "/usr/local/bin/git", 2, "git", "status"), gitStatus(3)),
			want:   verdictWant{status: StatusConfirmed, matched: map[string]int{"failed-ignored": 1, "allow:" + gitPath: 1}},
		},
		"allowed program reached through another path (same file)": {
			events: trace(claudeEngine(), auditHook(2), ev(3, 1, "/usr/local/bin/git", gitID, "git", "log")),
			want:   verdictWant{status: StatusConfirmed, matched: map[string]int{"allow:" + gitPath: 1}},
		},
		"hook identity unknown to the launcher is not checked": {
			ids:    without(testIDs(), auditPath),
			events: trace(claudeEngine(), auditHook(2)),
			want:   verdictWant{status: StatusConfirmed},
		},

		// Shell chains (Codex: /bin/bash -c).
		"codex hook through bash -c, exec-replacing shell": {
			render: codexRender,
			events: trace(codexEngine(), bashHook(5, 1, shellwords.Join(with(auditArgv, 3, "run-42"))),
				ev(5, 1, auditPath, auditID, with(auditArgv, 3, "run-42")...)),
			want: verdictWant{status: StatusConfirmed, noDiffs: true,
				matched: map[string]int{"hook:audit": 1, "hook:audit/chain[0]": 1, "hook:audit/chain[1]": 1}},
		},
		"codex hook through bash -c, forked child, a run id that needs quoting": {
			render: codexRender,
			slots:  render.SlotValues{render.SlotRunID: "a b'c", render.SlotRunDir: render.RunDir},
			events: trace(codexEngine(), bashHook(5, 1, shellwords.Join(with(auditArgv, 3, "a b'c"))),
				ev(6, 5, auditPath, auditID, with(auditArgv, 3, "a b'c")...)),
			want: verdictWant{status: StatusConfirmed, noDiffs: true, matched: map[string]int{"hook:audit": 1}},
		},
		"codex hook program not linked to its shell is no occurrence": {
			render: codexRender,
			events: trace(codexEngine(), bashHook(5, 1, shellwords.Join(with(auditArgv, 3, "run-42"))), ev(9, 1, auditPath, auditID, with(auditArgv, 3, "run-42")...)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonHookNotRun},
				diffs: []diffWant{{rule: "hook:audit", field: FieldOccurrences, index: -1}}},
		},
		"codex: shell syntax around a slot value breaks the chain": {
			// bash is an allowed tool, so the exec itself is allowed; the
			// hook never ran as planned.
			render: codexRender,
			events: trace(codexEngine(),
				bashHook(5, 1, shellwords.Join(with(auditArgv, 3, "run-42"))+"; /usr/bin/git push"),
				ev(6, 5, auditPath, auditID, with(auditArgv, 3, "run-42")...),
				ev(7, 5, gitPath, gitID, "/usr/bin/git", "push")),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonHookNotRun},
				matched: map[string]int{"allow:" + bashPath: 1, "hook:audit/chain[1]": 1}},
		},

		"codex: a filled command must be quoted canonically": {
			// bash reads "r" like r, but hookbox never writes it so: the
			// exec is not the planned one.
			render: codexNoBashTool,
			events: trace(codexEngine(), bashHook(5, 1, `/usr/local/bin/audit-hook --tag 'x y' "run-42"`),
				ev(5, 1, auditPath, auditID, with(auditArgv, 3, "run-42")...)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonHookArgvDiffers, ReasonHookNotRun},
				diffs: []diffWant{{rule: "hook:audit/chain[0]", field: FieldArgv, index: 2}}},
		},
		"codex: filled command with the wrong fixed words": {
			render: codexNoBashTool,
			events: trace(codexEngine(), bashHook(5, 1, shellwords.Join(with(with(auditArgv, 3, "run-42"), 2, "x z"))),
				ev(5, 1, auditPath, auditID, with(auditArgv, 3, "run-42")...)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonHookArgvDiffers, ReasonHookNotRun},
				diffs: []diffWant{{rule: "hook:audit/chain[0]", field: FieldArgv, index: 2, got: "/usr/local/bin/audit-hook --tag 'x z' run-42"}}},
		},

		// Evidence gaps.
		"tracing off": {
			mode: render.TraceOff, events: happy,
			want: verdictWant{status: StatusUnchecked, reasons: []string{ReasonTracerOff}, noDiffs: true},
		},
		"unknown mode": {
			mode: "audit", events: happy,
			want: verdictWant{status: StatusUnchecked, reasons: []string{ReasonTraceModeUnknown}},
		},
		"tracer could not attach": {
			stats: &Stats{Reason: "rootless"},
			want:  verdictWant{status: StatusUnchecked, reasons: []string{"tracer-unavailable:rootless"}, noDiffs: true},
		},
		"tracer could not attach, no reason given": {
			stats: &Stats{},
			want:  verdictWant{status: StatusUnchecked, reasons: []string{"tracer-unavailable:unknown"}},
		},
		"tracer attached late": {
			stats: &Stats{Attached: true}, events: trace(gitStatus(3), claudeEngine(), auditHook(2)),
			want: verdictWant{status: StatusUnchecked, reasons: []string{ReasonTracerLate}, noDiffs: true},
		},
		"events lost": {
			stats: &Stats{Attached: true, AttachedBeforeStart: true, Lost: 3}, events: happy,
			want: verdictWant{status: StatusUnchecked, reasons: []string{ReasonEventsLost}},
		},
		"events lost: a missing required hook is not proof": {
			stats: &Stats{Attached: true, AttachedBeforeStart: true, Lost: 1}, events: trace(claudeEngine()),
			want: verdictWant{status: StatusUnchecked, reasons: []string{ReasonEventsLost}, noDiffs: true},
		},
		"events lost: the engine is the first engine exec seen": {
			stats:  &Stats{Attached: true, AttachedBeforeStart: true, Lost: 1},
			events: trace(gitStatus(3), ev(1, 0, claudePath, claudeID, "rg", "x"), claudeEngine(), auditHook(2)),
			want: verdictWant{status: StatusUnchecked, reasons: []string{ReasonEventsLost},
				matched: map[string]int{"engine": 1, "engine-self-exec:rg": 1}},
		},
		"trace record without its stats line": {
			stats: &Stats{Attached: true, AttachedBeforeStart: true, Unfinished: true}, events: happy,
			want: verdictWant{status: StatusUnchecked, reasons: []string{ReasonTraceIncomplete}},
		},
		"trace record without its stats line: a missing required hook is not proof": {
			stats: &Stats{Attached: true, AttachedBeforeStart: true, Unfinished: true}, events: trace(claudeEngine()),
			want: verdictWant{status: StatusUnchecked, reasons: []string{ReasonTraceIncomplete}, noDiffs: true},
		},
		"trace record that disagrees with its stats line": {
			stats: &Stats{Attached: true, AttachedBeforeStart: true, Inconsistent: []string{"count", "after-stats"}}, events: happy,
			want: verdictWant{status: StatusUnchecked, reasons: []string{"trace-inconsistent:after-stats", "trace-inconsistent:count"}},
		},
		"an inconsistent trace still shows what ran": {
			stats:  &Stats{Attached: true, AttachedBeforeStart: true, Inconsistent: []string{"count"}},
			events: trace(claudeEngine(), auditHook(2), ev(3, 1, "/usr/bin/curl", FileID{}, "curl")),
			want:   verdictWant{status: StatusMismatch, reasons: []string{"trace-inconsistent:count", ReasonUnexpectedExec}},
		},
		"truncation counted by the tracer": {
			stats: &Stats{Attached: true, AttachedBeforeStart: true, Truncated: 1}, events: happy,
			want: verdictWant{status: StatusUnchecked, reasons: []string{ReasonArgvTruncated}},
		},
		"truncated argv of an allowed program still leaves it unchecked": {
			events: trace(claudeEngine(), auditHook(2), truncated(ev(3, 1, gitPath, gitID, "git", "commit", "-m", "lo"))),
			want:   verdictWant{status: StatusUnchecked, reasons: []string{ReasonArgvTruncated}},
		},
		"truncated engine argv, consistent prefix": {
			events: trace(truncated(ev(1, 0, claudePath, claudeID, claudeArgv[0], "-p", "--output-for")), auditHook(2)),
			want:   verdictWant{status: StatusUnchecked, reasons: []string{ReasonArgvTruncated}, noDiffs: true},
		},
		"truncated engine argv, prefix contradicts": {
			events: trace(truncated(ev(1, 0, claudePath, claudeID, claudeArgv[0], "--dangerously-skip-permissions", "-")), auditHook(2)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonArgvTruncated, ReasonEngineArgvDiffers},
				diffs: []diffWant{{rule: "engine", field: FieldArgv, index: 1, want: "-p", got: "--dangerously-skip-permissions"}}},
		},
		"truncated argv too long already": {
			events: trace(truncated(ev(1, 0, claudePath, claudeID, append(slices.Clone(claudeArgv), "extra", "x")...)), auditHook(2)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonArgvTruncated, ReasonEngineArgvDiffers},
				diffs: []diffWant{{rule: "engine", field: FieldArgc, index: -1, want: "8", got: ">=10"}}},
		},
		"truncated event that might be the required hook": {
			events: trace(claudeEngine(), truncated(ev(2, 1, auditPath, auditID, auditPath, "--ta"))),
			want:   verdictWant{status: StatusUnchecked, reasons: []string{ReasonArgvTruncated}, noDiffs: true},
		},
		"truncated shebang script cut inside the interpreter's prefix": {
			events: trace(claudeEngine(), auditHook(2), truncated(ev(3, 1, lintPath, pythonID, python, "/usr/local/bin/li"))),
			want:   verdictWant{status: StatusUnchecked, reasons: []string{ReasonArgvTruncated}, noDiffs: true},
		},
		"truncated shebang script cut inside the interpreter's path": {
			events: trace(claudeEngine(), auditHook(2), truncated(ev(3, 1, lintPath, pythonID, "/usr/bin/py"))),
			want:   verdictWant{status: StatusUnchecked, reasons: []string{ReasonArgvTruncated}, noDiffs: true},
		},
		"truncated with nothing visible": {
			events: trace(claudeEngine(), auditHook(2), truncated(ev(3, 1, lintPath, pythonID))),
			want:   verdictWant{status: StatusUnchecked, reasons: []string{ReasonArgvTruncated}, noDiffs: true},
		},
		"required hook without a chain": {
			render: func() *render.Render {
				r := claudeRender()
				r.Hooks = append(r.Hooks, render.Hook{Name: "empty", Required: true})
				return r
			},
			events: happy,
			want:   verdictWant{status: StatusUnchecked, reasons: []string{ReasonRenderIncomplete}},
		},
		"engine identity unknown to the launcher": {
			ids: without(testIDs(), claudePath), events: happy,
			want: verdictWant{status: StatusUnchecked, reasons: []string{ReasonEngineIdentityUnknown}},
		},
		"engine identity not reported by the tracer": {
			events: trace(ev(1, 0, claudePath, noID, claudeArgv...), auditHook(2)),
			want:   verdictWant{status: StatusUnchecked, reasons: []string{ReasonEngineIdentityUnknown}},
		},
		"self-exec name with unknown identity": {
			events: trace(claudeEngine(), auditHook(2), ev(3, 1, "/proc/self/exe", noID, "rg", "x")),
			want:   verdictWant{status: StatusUnchecked, reasons: []string{ReasonExecIdentityUnknown}},
		},
		"unknown event kind": {
			events: trace(claudeEngine(), auditHook(2), Event{Kind: "fork", PID: 4, PPID: 1}),
			want:   verdictWant{status: StatusUnchecked, reasons: []string{ReasonEventKindUnknown}},
		},
		"unknown event kind: absence is not judged": {
			events: trace(claudeEngine(), Event{Kind: "fork", PID: 4, PPID: 1}),
			want:   verdictWant{status: StatusUnchecked, reasons: []string{ReasonEventKindUnknown}, noDiffs: true},
		},
		"tracer late and no events": {
			stats: &Stats{Attached: true},
			want:  verdictWant{status: StatusUnchecked, reasons: []string{ReasonTracerLate}, noDiffs: true},
		},
		"nil render": {
			render: func() *render.Render { return nil }, events: happy,
			want: verdictWant{status: StatusUnchecked, reasons: []string{ReasonRenderIncomplete}},
		},
		"render without an engine exec": {
			render: func() *render.Render { r := claudeRender(); r.Engine.Exec = render.Exec{}; return r },
			want:   verdictWant{status: StatusUnchecked, reasons: []string{ReasonRenderIncomplete}},
		},

		// Contradictions.
		"no events with complete evidence": {
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonHookNotRun, ReasonNoEvents}},
		},
		"only failed execs": {
			events: trace(failed(1, 0, claudePath, 2, claudeArgv...)),
			want:   verdictWant{status: StatusMismatch, reasons: []string{ReasonFailedExec, ReasonHookNotRun, ReasonNoEvents}},
		},
		"engine argv differs in one element": {
			events: trace(ev(1, 0, claudePath, claudeID, with(claudeArgv, 7, "do that")...), auditHook(2)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonEngineArgvDiffers},
				diffs: []diffWant{{rule: "engine", field: FieldArgv, index: 7, want: "do it", got: "do that"}}},
		},
		"engine argv longer": {
			events: trace(ev(1, 0, claudePath, claudeID, append(slices.Clone(claudeArgv), "--dangerously-skip-permissions")...), auditHook(2)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonEngineArgvDiffers},
				diffs: []diffWant{
					{rule: "engine", field: FieldArgc, index: -1, want: "8", got: "9"},
					{rule: "engine", field: FieldArgv, index: 8, got: "--dangerously-skip-permissions"},
				}},
		},
		"engine argv shorter": {
			events: trace(ev(1, 0, claudePath, claudeID, claudeArgv[:6]...), auditHook(2)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonEngineArgvDiffers},
				diffs: []diffWant{
					{rule: "engine", field: FieldArgc, index: -1, want: "8", got: "6"},
					{rule: "engine", field: FieldArgv, index: 6, want: "--"},
					{rule: "engine", field: FieldArgv, index: 7, want: "do it"},
				}},
		},
		"engine binary differs": {
			events: trace(ev(1, 0, claudePath, otherID, claudeArgv...), auditHook(2)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonEngineBinaryDiffers},
				diffs: []diffWant{{rule: "engine", field: FieldIdentity, index: -1, want: "64:100", got: "64:999"}}},
		},
		"engine not first": {
			events: trace(gitStatus(3), claudeEngine(), auditHook(2)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonEngineNotFirst},
				diffs:   []diffWant{{rule: "engine", field: FieldFirstEvent, index: -1, want: claudePath, got: gitPath}},
				matched: map[string]int{"engine": 1}},
		},
		"engine never ran": {
			events: trace(gitStatus(3), auditHook(2)),
			want:   verdictWant{status: StatusMismatch, reasons: []string{ReasonEngineNotFirst}},
		},
		"required hook missing": {
			events: trace(claudeEngine(), gitStatus(3)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonHookNotRun},
				diffs: []diffWant{{rule: "hook:audit", field: FieldOccurrences, index: -1, want: ">=1", got: "0"}}},
		},
		"hook argv differs": {
			events: trace(claudeEngine(), ev(2, 1, auditPath, auditID, with(with(auditArgv, 2, "x  y"), 3, "run-42")...)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonHookArgvDiffers, ReasonHookNotRun},
				diffs: []diffWant{{rule: "hook:audit/chain[0]", field: FieldArgv, index: 2, want: "x y", got: "x  y"}}},
		},
		"hook binary differs": {
			events: trace(claudeEngine(), ev(2, 1, auditPath, otherID, with(auditArgv, 3, "run-42")...)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonHookBinaryDiffers, ReasonHookNotRun},
				diffs: []diffWant{{rule: "hook:audit/chain[0]", field: FieldIdentity, index: -1}}},
		},
		"codex shell command differs": {
			render: codexRender,
			events: trace(codexEngine(), ev(5, 1, auditPath, auditID, with(auditArgv, 1, "--tags")...)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonHookArgvDiffers, ReasonHookNotRun},
				diffs: []diffWant{{rule: "hook:audit/chain[1]", field: FieldArgv, index: 1, want: "--tag", got: "--tags"}}},
		},
		"unexpected exec": {
			events: trace(claudeEngine(), auditHook(2), ev(4, 1, "/usr/bin/curl", otherID, "curl", "https://example.com")),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonUnexpectedExec},
				diffs: []diffWant{{rule: "unexpected", field: FieldExec, index: -1, got: `/usr/bin/curl ["curl" "https://example.com"]`}}},
		},
		"rg that is not the engine binary": {
			events: trace(claudeEngine(), auditHook(2), ev(4, 1, "/usr/bin/rg", otherID, "rg", "x")),
			want:   verdictWant{status: StatusMismatch, reasons: []string{ReasonUnexpectedExec}},
		},
		"engine exec'd a second time": {
			events: trace(claudeEngine(), auditHook(2), ev(4, 1, claudePath, claudeID, claudeArgv...)),
			want:   verdictWant{status: StatusMismatch, reasons: []string{ReasonUnexpectedExec}},
		},
		"allowed path with another binary": {
			events: trace(claudeEngine(), auditHook(2), ev(3, 1, gitPath, otherID, "git", "status")),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonAllowedBinaryDiffers},
				diffs: []diffWant{{rule: "allow:" + gitPath, field: FieldIdentity, index: -1, want: "64:102", got: "64:999"}}},
		},
		"shebang hook run by another interpreter binary": {
			events: trace(claudeEngine(), auditHook(2), ev(3, 1, lintPath, otherID, python, lintPath, "--check")),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonHookBinaryDiffers},
				diffs: []diffWant{{rule: "hook:lint/chain[0]", field: FieldIdentity, index: -1, want: "64:103 (interpreter /usr/bin/python3)", got: "64:999"}}},
		},
		"shebang with an interpreter the render does not know": {
			events: trace(claudeEngine(), auditHook(2), ev(3, 1, lintPath, otherID, "/usr/bin/perl", lintPath, "--check")),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonHookArgvDiffers, ReasonHookBinaryDiffers},
				diffs: []diffWant{{rule: "hook:lint/chain[0]", field: FieldArgv, index: 0, want: lintPath, got: "/usr/bin/perl"}}},
		},
		"failed exec of a hook program": {
			events: trace(claudeEngine(), auditHook(2), failed(3, 1, lintPath, 13, lintArgv...)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonFailedExec},
				diffs: []diffWant{{rule: "failed", field: FieldErrno, index: -1, want: "0", got: "13 " + lintPath}}},
		},
		"killed exec of something unplanned": {
			mode:   render.TraceEnforce,
			events: trace(claudeEngine(), auditHook(2), killed(ev(4, 1, "/usr/bin/curl", otherID, "curl"))),
			want:   verdictWant{status: StatusMismatch, reasons: []string{ReasonKilledExec, ReasonUnexpectedExec}},
		},
		"killed exec of something planned": {
			mode:   render.TraceEnforce,
			events: trace(claudeEngine(), auditHook(2), killed(gitStatus(3))),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonKilledExec},
				diffs: []diffWant{{rule: "killed", field: FieldExec, index: -1}}},
		},
		"denied exec (enforce, BPF LSM)": {
			mode:   render.TraceEnforce,
			events: trace(claudeEngine(), auditHook(2), denied(1, 0, "/usr/bin/curl", otherID)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonDeniedExec},
				diffs: []diffWant{{rule: "denied", field: FieldExec, index: -1, got: "/usr/bin/curl (64:999)"}}},
		},
		"denied memfd exec": {
			mode:   render.TraceEnforce,
			events: trace(claudeEngine(), auditHook(2), denied(4, 1, "/dev/fd/3", FileID{Dev: 1, Ino: 2048})),
			want:   verdictWant{status: StatusMismatch, reasons: []string{ReasonDeniedExec}},
		},
		"denied exec with lost events is still a mismatch": {
			mode:   render.TraceEnforce,
			stats:  &Stats{Attached: true, AttachedBeforeStart: true, Lost: 1},
			events: trace(claudeEngine(), denied(1, 0, "/usr/bin/curl", otherID)),
			want:   verdictWant{status: StatusMismatch, reasons: []string{ReasonDeniedExec, ReasonEventsLost}},
		},
		"denied ptrace-class access": {
			events: trace(claudeEngine(), auditHook(2), ptraceDenied(4, 1, 0x12)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonDeniedPtrace},
				diffs: []diffWant{{rule: "denied-ptrace", field: FieldAccess, index: -1, got: "pid 4 asked for pid 1 (ptrace mode 0x12)"}}},
		},
		"denied PTRACE_TRACEME": {
			events: trace(claudeEngine(), auditHook(2), ptraceDenied(4, 1, 0)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonDeniedPtrace},
				diffs: []diffWant{{rule: "denied-ptrace", field: FieldAccess, index: -1, got: "pid 4 asked to be traced by pid 1"}}},
		},
		"contradiction wins over lost events": {
			stats:  &Stats{Attached: true, AttachedBeforeStart: true, Lost: 5},
			events: trace(claudeEngine(), ev(4, 1, "/usr/bin/curl", otherID, "curl")),
			want:   verdictWant{status: StatusMismatch, reasons: []string{ReasonEventsLost, ReasonUnexpectedExec}},
		},
		"contradiction wins over a late tracer": {
			stats:  &Stats{Attached: true},
			events: trace(ev(4, 1, "/usr/bin/curl", otherID, "curl"), claudeEngine()),
			want:   verdictWant{status: StatusMismatch, reasons: []string{ReasonTracerLate, ReasonUnexpectedExec}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tc.want.check(t, tc.run(t))
		})
	}
}

func TestVerifyDoesNotModifyInput(t *testing.T) {
	events := trace(gitStatus(3), claudeEngine(), auditHook(2))
	events[0].Time = 5000 // out of order: Verify sorts its own copy
	before := slices.Clone(events)
	r := claudeRender()
	rBefore, _ := r.Canonical()
	ids := testIDs()
	Verify(r, "", events, fullStats, ids, testSlots)
	if !reflect.DeepEqual(events, before) {
		t.Errorf("events modified")
	}
	if rAfter, _ := r.Canonical(); string(rAfter) != string(rBefore) {
		t.Errorf("render modified")
	}
	if !maps.Equal(ids, testIDs()) {
		t.Errorf("ids modified")
	}
}

func TestVerifySortsByTime(t *testing.T) {
	events := trace(auditHook(2), claudeEngine())
	events[0].Time, events[1].Time = 2000, 1000
	v := Verify(claudeRender(), "", events, fullStats, testIDs(), testSlots)
	verdictWant{status: StatusConfirmed, matched: map[string]int{"engine": 1}}.check(t, v)
	if i := slices.IndexFunc(v.Matched, func(m Match) bool { return m.Rule == "engine" }); i >= 0 {
		if ref := v.Matched[i].Events[0]; ref.Index != 1 {
			t.Errorf("engine event index = %d, want 1 (the caller's position)", ref.Index)
		}
	}
}

// TestVerifyDeterministic runs a verdict with many findings 50 times: map
// iteration order must not show in the output.
func TestVerifyDeterministic(t *testing.T) {
	r := claudeRender()
	r.Trace.Allow = []string{gitPath, "/usr/bin/a", "/usr/bin/b", "/usr/bin/c"}
	ids := testIDs()
	// Two allowed paths sharing an identity: the alias must name the same
	// one every time.
	ids["/usr/bin/a"], ids["/usr/bin/b"], ids["/usr/bin/c"] = otherID, otherID, otherID
	events := trace(
		gitStatus(3), claudeEngine(),
		ev(4, 1, "/usr/bin/curl", testID(7), "curl", "x"),
		ev(5, 1, "/usr/bin/alias", otherID, "alias"),
		ev(6, 1, auditPath, auditID, with(auditArgv, 2, "z")...),
		killed(ev(7, 1, "/usr/bin/wget", testID(8), "wget")),
		failed(8, 1, lintPath, 2, lintArgv...),
		ev(9, 1, "/proc/self/exe", claudeID, "rg", "a"),
		truncated(ev(10, 1, gitPath, gitID, "git", "lo")),
	)
	first := Verify(r, "", events, Stats{Attached: true, AttachedBeforeStart: true, Lost: 2}, ids, testSlots)
	if first.Status != StatusMismatch || len(first.Diffs) < 5 || len(first.Matched) < 4 {
		t.Fatalf("test verdict not rich enough: %+v", first)
	}
	for i := range 50 {
		if got := Verify(r, "", events, Stats{Attached: true, AttachedBeforeStart: true, Lost: 2}, maps.Clone(ids), testSlots); !reflect.DeepEqual(got, first) {
			t.Fatalf("run %d differs:\n%+v\n%+v", i, got, first)
		}
	}
	if !slices.IsSorted(first.Reasons) {
		t.Errorf("reasons not sorted: %q", first.Reasons)
	}
	if !slices.IsSortedFunc(first.Matched, func(a, b Match) int { return strings.Compare(a.Rule, b.Rule) }) {
		t.Errorf("matched not sorted")
	}
}

// testID builds a distinct test identity.
func testID(ino uint64) FileID { return FileID{Dev: 65, Ino: ino} }

func TestVerdictJSON(t *testing.T) {
	v := Verify(claudeRender(), "", trace(claudeEngine(), auditHook(2)), fullStats, testIDs(), testSlots)
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"reasons":[]`) || strings.Contains(string(out), `"diffs"`) {
		t.Errorf("confirmed verdict JSON = %s", out)
	}
}

func TestDiffsAreCapped(t *testing.T) {
	var events []Event
	events = append(events, claudeEngine(), auditHook(2))
	for i := range 2 * maxDiffs {
		events = append(events, ev(100+i, 1, "/usr/bin/curl", otherID, "curl"))
	}
	v := Verify(claudeRender(), "", trace(events...), fullStats, testIDs(), testSlots)
	if len(v.Diffs) != maxDiffs+1 {
		t.Fatalf("len(diffs) = %d, want %d", len(v.Diffs), maxDiffs+1)
	}
	last := v.Diffs[len(v.Diffs)-1]
	if last.Field != FieldOmitted || last.Got != "256" {
		t.Errorf("last diff = %+v, want %d omitted", last, maxDiffs)
	}
}

func TestArgvDiffsAreCapped(t *testing.T) {
	long := slices.Clone(claudeArgv)
	for range 1000 {
		long = append(long, "x")
	}
	v := Verify(claudeRender(), "", trace(ev(1, 0, claudePath, claudeID, long...), auditHook(2)), fullStats, testIDs(), testSlots)
	if n := len(v.Diffs); n != 1+maxLengthDiffs {
		t.Errorf("len(diffs) = %d, want argc + %d elements", n, maxLengthDiffs)
	}
}

// Renders with an init: hookbox-init (pid 1) runs the engine (pid 2).
var initID = FileID{Dev: 64, Ino: 107}

func initIDs() FileIdentities {
	ids := testIDs()
	ids[render.InitPath] = initID
	return ids
}

func claudeWithInit() *render.Render {
	r := claudeRender()
	argv := append([]string{render.InitPath}, claudeArgv...)
	r.Init = &render.Exec{Path: render.InitPath, Argv: argv}
	return r
}

func initEvent() Event {
	return ev(1, 0, render.InitPath, initID, append([]string{render.InitPath}, claudeArgv...)...)
}
func engineUnderInit() Event { return ev(2, 1, claudePath, claudeID, claudeArgv...) }
func auditUnderInit(pid int) Event {
	return ev(pid, 2, auditPath, auditID, with(auditArgv, 3, "run-42")...)
}

func TestVerifyInit(t *testing.T) {
	lateStats := Stats{Attached: true}
	initArgv := append([]string{render.InitPath}, claudeArgv...)
	tests := map[string]verifyCase{
		"confirmed: init, its engine child, hook, git": {
			events: trace(initEvent(), engineUnderInit(), auditUnderInit(3), ev(4, 2, gitPath, gitID, "git", "status")),
			want: verdictWant{status: StatusConfirmed, noDiffs: true,
				matched: map[string]int{"init": 1, "engine": 1, "hook:audit": 1, "allow:" + gitPath: 1}},
		},
		"init missing: the engine came first": {
			events: trace(claudeEngine(), auditHook(2)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonInitNotFirst},
				diffs:   []diffWant{{rule: "init", field: FieldFirstEvent, index: -1, want: render.InitPath, got: claudePath}},
				matched: map[string]int{"engine": 1}},
		},
		"engine not the init's child": {
			events: trace(initEvent(), ev(2, 7, claudePath, claudeID, claudeArgv...), auditUnderInit(3)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonEngineNotInitChild},
				diffs: []diffWant{{rule: "engine", field: FieldParent, index: -1, want: "1", got: "7"}}},
		},
		"init argv differs": {
			events: trace(ev(1, 0, render.InitPath, initID, with(initArgv, 1, "/bin/sh")...), engineUnderInit(), auditUnderInit(3)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonInitArgvDiffers},
				diffs: []diffWant{{rule: "init", field: FieldArgv, index: 1, want: claudePath, got: "/bin/sh"}}},
		},
		"init binary differs": {
			events: trace(ev(1, 0, render.InitPath, otherID, initArgv...), engineUnderInit(), auditUnderInit(3)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonInitBinaryDiffers},
				diffs: []diffWant{{rule: "init", field: FieldIdentity, index: -1, want: initID.String(), got: otherID.String()}}},
		},
		"init identity unknown is a gap": {
			ids:    testIDs(),
			events: trace(initEvent(), engineUnderInit(), auditUnderInit(3)),
			want:   verdictWant{status: StatusUnchecked, reasons: []string{ReasonInitIdentityUnknown}},
		},
		"an exec between the init and the engine": {
			events: trace(initEvent(), ev(5, 1, gitPath, gitID, "git"), engineUnderInit(), auditUnderInit(3)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonEngineNotFirst},
				diffs:   []diffWant{{rule: "engine", field: FieldFirstEvent, index: -1, want: claudePath, got: gitPath}},
				matched: map[string]int{"engine": 1, "allow:" + gitPath: 1}},
		},
		"no exec after the init": {
			events: trace(initEvent()),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonEngineNotFirst, ReasonHookNotRun},
				diffs: []diffWant{{rule: "engine", field: FieldFirstEvent, index: -1, want: claudePath, got: "no exec"}}},
		},
		"no events names the init": {
			events: nil,
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonHookNotRun, ReasonNoEvents},
				diffs: []diffWant{{rule: "init", field: FieldFirstEvent, index: -1, want: render.InitPath, got: "no exec"}}},
		},
		"a failed exec of the init": {
			events: trace(failed(1, 0, render.InitPath, 2, render.InitPath)),
			want:   verdictWant{status: StatusMismatch, reasons: []string{ReasonFailedExec, ReasonHookNotRun, ReasonNoEvents}},
		},
		"a second init is unexpected": {
			events: trace(initEvent(), engineUnderInit(), auditUnderInit(3), ev(4, 2, render.InitPath, initID, initArgv...)),
			want:   verdictWant{status: StatusMismatch, reasons: []string{ReasonUnexpectedExec}},
		},
		"late tracer: init unseen is only a gap": {
			stats:  &lateStats,
			events: trace(engineUnderInit(), auditUnderInit(3)),
			want:   verdictWant{status: StatusUnchecked, reasons: []string{ReasonTracerLate}, matched: map[string]int{"engine": 1}},
		},
		"late tracer: the init still parents the engine": {
			stats:  &lateStats,
			events: trace(initEvent(), ev(2, 9, claudePath, claudeID, claudeArgv...)),
			want:   verdictWant{status: StatusMismatch, reasons: []string{ReasonEngineNotInitChild, ReasonTracerLate}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.render == nil {
				tc.render = claudeWithInit
			}
			if tc.ids == nil {
				tc.ids = initIDs()
			}
			tc.want.check(t, tc.run(t))
		})
	}
	t.Run("an init without argv is an incomplete render", func(t *testing.T) {
		r := claudeWithInit()
		r.Init.Argv = nil
		v := Verify(r, "", trace(initEvent(), engineUnderInit()), fullStats, initIDs(), testSlots)
		verdictWant{status: StatusUnchecked, reasons: []string{ReasonRenderIncomplete}}.check(t, v)
	})
}
