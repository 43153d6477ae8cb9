package verify

import (
	"slices"
	"testing"

	"hookbox.dev/hookbox/internal/shellwords"
	"hookbox.dev/hookbox/render"
)

// The forms engine profiles add to a render (compiler/profile.go): an env
// "#!" engine and its interpreter hop, the engine's own exec rules, and a
// hook shell found on PATH (/usr/bin/bash on a merged-/usr host, where
// /bin/bash is a symlink's path).
const (
	geminiJS    = "/opt/engines/node_modules/@google/gemini-cli/bundle/gemini.js"
	envPath     = "/usr/bin/env"
	nodePath    = "/usr/bin/node"
	usrBash     = "/usr/bin/bash"
	touchPath   = "/usr/bin/touch"
	procSelfExe = "/proc/self/exe"
)

var (
	envID   = FileID{Dev: 64, Ino: 200}
	nodeID  = FileID{Dev: 64, Ino: 201}
	touchID = FileID{Dev: 64, Ino: 202}
	jsID    = FileID{Dev: 64, Ino: 203}
)

var (
	geminiArgv = []string{geminiJS, "--output-format", "json", "--prompt", "do it"}
	touchArgv  = []string{touchPath, "/run/hookbox/out/hook"}
)

// geminiProfiled: an env-script engine, a hook through bash by name on
// PATH, a tool shell rule, git allowed.
func geminiProfiled() *render.Render {
	command := shellwords.Join(touchArgv)
	return &render.Render{
		Engine: render.Engine{
			Kind: "gemini",
			Exec: render.Exec{Path: geminiJS, Argv: slices.Clone(geminiArgv)},
			Execs: []render.EngineExec{
				{Name: "tool-shell", Path: usrBash, Argv: []string{"bash", "-c", ""}, Slots: []int{2}, Binary: render.BinaryPath},
			},
		},
		Programs: []render.Program{
			{Path: geminiJS, Roles: []string{render.RoleEngine}, Shebang: &render.Shebang{Interpreter: envPath, Arg: "node", Hop: nodePath}},
			{Path: envPath, Roles: []string{render.RoleInterpreter}},
			{Path: nodePath, Roles: []string{render.RoleInterpreter}},
			{Path: usrBash, Roles: []string{render.RoleShell}},
			{Path: touchPath, Roles: []string{render.RoleHook}},
			{Path: gitPath, Roles: []string{render.RoleTool}},
		},
		Hooks: []render.Hook{{
			Name: "hook", Event: "BeforeTool", Required: true, Argv: slices.Clone(touchArgv), Command: command,
			Chain: []render.Exec{
				{Path: usrBash, Argv: []string{"bash", "-c", command}},
				{Path: touchPath, Argv: slices.Clone(touchArgv)},
			},
		}},
		Trace: render.TracePolicy{Mode: render.TraceVerify, Allow: []string{gitPath}},
	}
}

func profiledIDs() FileIdentities {
	return FileIdentities{geminiJS: jsID, envPath: envID, nodePath: nodeID, usrBash: bashID, touchPath: touchID, gitPath: gitID}
}

// The kernel's view of `exec gemini.js`: filename the script, argv env's,
// exe env; then env's exec of node in the same process.
func geminiScript(pid int) Event {
	return ev(pid, 0, geminiJS, envID, append([]string{envPath, "node"}, geminiArgv...)...)
}
func nodeHop(pid int, argv0 string) Event {
	return ev(pid, 0, nodePath, nodeID, append([]string{argv0}, geminiArgv...)...)
}
func usrBashHook(pid, ppid int) Event {
	return ev(pid, ppid, usrBash, bashID, "bash", "-c", shellwords.Join(touchArgv))
}
func touchHook(pid, ppid int) Event { return ev(pid, ppid, touchPath, touchID, touchArgv...) }

func TestVerifyProfiledEngines(t *testing.T) {
	good := func() []Event {
		return []Event{
			geminiScript(1),
			failed(1, 0, "/usr/local/bin/node", 2),
			nodeHop(1, "node"),
			usrBashHook(2, 1), touchHook(2, 1),
			ev(3, 1, usrBash, bashID, "bash", "-c", "git log -1"),
			ev(3, 1, gitPath, gitID, "git", "log", "-1"),
		}
	}
	for name, tc := range map[string]struct {
		r      func() *render.Render
		events []Event
		ids    FileIdentities
		want   verdictWant
	}{
		"env hop, PATH-resolved hook shell, tool shell: confirmed": {
			geminiProfiled, trace(good()...), profiledIDs(),
			verdictWant{status: StatusConfirmed, noDiffs: true, matched: map[string]int{
				"engine": 1, "hop:" + geminiJS: 1, "hook:hook": 1, "engine-exec:tool-shell": 1, "allow:" + gitPath: 1,
			}},
		},
		"env hop to another program": {
			geminiProfiled, trace(geminiScript(1), ev(1, 0, "/opt/evil/node", otherID, append([]string{"node"}, geminiArgv...)...), usrBashHook(2, 1), touchHook(2, 1)),
			profiledIDs(),
			verdictWant{status: StatusMismatch, reasons: []string{ReasonHopDiffers},
				diffs: []diffWant{{rule: "hop:" + geminiJS, field: FieldFilename, index: -1, want: nodePath, got: "/opt/evil/node"}}},
		},
		"env hop with other arguments": {
			geminiProfiled, trace(geminiScript(1), ev(1, 0, nodePath, nodeID, "node", "--inspect", geminiJS), usrBashHook(2, 1), touchHook(2, 1)),
			profiledIDs(),
			verdictWant{status: StatusMismatch, reasons: []string{ReasonHopDiffers},
				diffs: []diffWant{{rule: "hop:" + geminiJS, field: FieldArgv, index: 1, want: geminiJS, got: "--inspect"}}},
		},
		"env hop whose binary is not the runfile": {
			geminiProfiled, trace(geminiScript(1), ev(1, 0, nodePath, otherID, append([]string{"node"}, geminiArgv...)...), usrBashHook(2, 1), touchHook(2, 1)),
			profiledIDs(),
			verdictWant{status: StatusMismatch, reasons: []string{ReasonHopDiffers},
				diffs: []diffWant{{rule: "hop:" + geminiJS, field: FieldIdentity, index: -1}}},
		},
		"env never runs node: the engine never ran": {
			geminiProfiled, trace(geminiScript(1), failed(1, 0, nodePath, 2), usrBashHook(2, 1), touchHook(2, 1)),
			profiledIDs(),
			verdictWant{status: StatusMismatch, reasons: []string{ReasonHopMissing},
				diffs: []diffWant{{rule: "hop:" + geminiJS, field: FieldExec, index: -1, want: nodePath, got: "no exec"}}},
		},
		"a lost event leaves a missing hop undecided": {
			geminiProfiled, trace(geminiScript(1), usrBashHook(2, 1), touchHook(2, 1)),
			profiledIDs(),
			verdictWant{status: StatusUnchecked, reasons: []string{ReasonEventsLost}},
		},
		"hook shell at /bin/bash where the engine finds /usr/bin/bash": {
			geminiProfiled, trace(geminiScript(1), nodeHop(1, "node"), ev(2, 1, bashPath, bashID, "bash", "-c", shellwords.Join(touchArgv)), touchHook(2, 1)),
			profiledIDs(),
			verdictWant{status: StatusMismatch, reasons: []string{ReasonHookNotRun, ReasonUnexpectedExec}},
		},
		"tool shell rule with extra arguments": {
			geminiProfiled, trace(geminiScript(1), nodeHop(1, "node"), usrBashHook(2, 1), touchHook(2, 1), ev(3, 1, usrBash, bashID, "bash", "-c", "id", "x")),
			profiledIDs(),
			verdictWant{status: StatusMismatch, reasons: []string{ReasonHookArgvDiffers}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			stats := fullStats
			if name == "a lost event leaves a missing hop undecided" {
				stats.Lost = 1
			}
			tc.want.check(t, Verify(tc.r(), "", tc.events, stats, tc.ids, testSlots))
		})
	}
}

// codexProfiled: the Codex profile's process-setup rule (any filename,
// identity of the engine binary) and its sibling rg (any argv).
func codexProfiled() *render.Render {
	r := codexNoBashTool()
	r.Hooks = nil
	r.Engine.Execs = []render.EngineExec{
		{Name: "process-setup", Path: procSelfExe, Argv: []string{procSelfExe, "--codex-run-as-process-setup"}, Rest: true, Binary: render.BinaryEngine},
		{Name: "sibling:rg", Path: "/usr/local/bin/rg", Argv: []string{}, Rest: true, Binary: render.BinaryPath},
		{Name: "tool-shell", Path: bashPath, Argv: []string{bashPath, "-lc", ""}, Slots: []int{2}, Binary: render.BinaryPath},
	}
	r.Programs = append(r.Programs, render.Program{Path: "/usr/local/bin/rg", Roles: []string{render.RoleEngine}})
	return r
}

func TestVerifyEngineExecRules(t *testing.T) {
	rgID := FileID{Dev: 64, Ino: 300}
	ids := testIDs()
	ids["/usr/local/bin/rg"] = rgID
	setup := func(id FileID, argv ...string) Event { return ev(2, 1, procSelfExe, id, argv...) }
	for name, tc := range map[string]struct {
		events []Event
		ids    FileIdentities
		want   verdictWant
	}{
		"process setup, tool shell, sibling: confirmed": {
			trace(codexEngine(), setup(codexID, procSelfExe, "--codex-run-as-process-setup", "47", "", "/workspace", bashPath, bashPath, "-lc", "rg x"),
				ev(2, 1, bashPath, bashID, bashPath, "-lc", "rg x"), ev(2, 1, "/usr/local/bin/rg", rgID, "rg", "x")),
			ids,
			verdictWant{status: StatusConfirmed, noDiffs: true, matched: map[string]int{
				"engine-exec:process-setup": 1, "engine-exec:tool-shell": 1, "engine-exec:sibling:rg": 1,
			}},
		},
		"process setup by another binary": {
			trace(codexEngine(), setup(gitID, procSelfExe, "--codex-run-as-process-setup", "1")),
			ids,
			verdictWant{status: StatusMismatch, reasons: []string{ReasonEngineExecDiffers},
				diffs: []diffWant{{rule: "engine-exec:process-setup", field: FieldIdentity, index: -1, want: codexID.String(), got: gitID.String()}}},
		},
		"the engine's binary without the declared argument": {
			trace(codexEngine(), setup(codexID, procSelfExe, "--other")),
			ids,
			verdictWant{status: StatusMismatch, reasons: []string{ReasonUnexpectedExec}},
		},
		"engine runfile identity unknown: the engine's exe as it ran stands in": {
			trace(codexEngine(), setup(codexID, procSelfExe, "--codex-run-as-process-setup")),
			without(ids, codexPath),
			verdictWant{status: StatusUnchecked, reasons: []string{ReasonEngineIdentityUnknown}, matched: map[string]int{"engine-exec:process-setup": 1}},
		},
		"no identity on the event: undecided": {
			trace(codexEngine(), setup(noID, procSelfExe, "--codex-run-as-process-setup")),
			ids,
			verdictWant{status: StatusUnchecked, reasons: []string{ReasonExecIdentityUnknown}},
		},
		"tool shell without its command": {
			trace(codexEngine(), ev(2, 1, bashPath, bashID, bashPath, "-lc")),
			ids,
			verdictWant{status: StatusMismatch, reasons: []string{ReasonUnexpectedExec}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			tc.want.check(t, Verify(codexProfiled(), "", tc.events, fullStats, tc.ids, testSlots))
		})
	}
}
