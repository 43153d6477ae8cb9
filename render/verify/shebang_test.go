package verify

import (
	"slices"
	"testing"

	"hookbox.dev/hookbox/render"
)

// Scripts as the compiler records them (render.Program.Shebang): a
// "#!/bin/sh" tool and hook, a "#!/usr/bin/python3 -u" hook, a
// "#!/usr/bin/env node" tool.
const (
	toolSh  = "/usr/local/bin/tool.sh"
	hookSh  = "/usr/local/bin/hook.sh"
	hookPy  = "/usr/local/bin/hook.py"
	toolJS  = "/usr/local/bin/tool.js"
	perlBin = "/usr/bin/perl"
)

var (
	toolShID = FileID{Dev: 64, Ino: 400}
	hookShID = FileID{Dev: 64, Ino: 401}
	hookPyID = FileID{Dev: 64, Ino: 402}
	toolJSID = FileID{Dev: 64, Ino: 403}
)

// scriptsRender: Claude with two script hooks and two script tools. The
// interpreters are programs (role interpreter, as the compiler adds
// them) but not allowed tools.
func scriptsRender() *render.Render {
	r := claudeRender()
	sh := &render.Shebang{Interpreter: shPath}
	r.Programs = []render.Program{
		{Path: claudePath, Roles: []string{render.RoleEngine}},
		{Path: toolSh, Roles: []string{render.RoleTool}, Shebang: sh},
		{Path: hookSh, Roles: []string{render.RoleHook}, Shebang: sh},
		{Path: hookPy, Roles: []string{render.RoleHook}, Shebang: &render.Shebang{Interpreter: python, Arg: "-u"}},
		{Path: toolJS, Roles: []string{render.RoleTool}, Shebang: &render.Shebang{Interpreter: envPath, Arg: "node", Hop: nodePath}},
		{Path: shPath, Roles: []string{render.RoleInterpreter}},
		{Path: python, Roles: []string{render.RoleInterpreter}},
		{Path: envPath, Roles: []string{render.RoleInterpreter}},
		{Path: nodePath, Roles: []string{render.RoleInterpreter}},
	}
	r.Hooks = []render.Hook{
		{Name: "sh", Event: "Stop", Required: true, Argv: []string{hookSh, "--x"},
			Chain: []render.Exec{{Path: hookSh, Argv: []string{hookSh, "--x"}}}},
		{Name: "py", Event: "PostToolUse", Argv: []string{hookPy, "--check"},
			Chain: []render.Exec{{Path: hookPy, Argv: []string{hookPy, "--check"}}}},
	}
	r.Trace.Allow = []string{toolJS, toolSh}
	return r
}

// undeclaredInterpreters: the same render without its interpreters among
// the programs (a hand-written render, or a program list that lost them).
func undeclaredInterpreters() *render.Render {
	r := scriptsRender()
	r.Programs = slices.DeleteFunc(r.Programs, func(p render.Program) bool { return slices.Contains(p.Roles, render.RoleInterpreter) })
	return r
}

func scriptIDs() FileIdentities {
	return FileIdentities{
		claudePath: claudeID, toolSh: toolShID, hookSh: hookShID, hookPy: hookPyID, toolJS: toolJSID,
		shPath: shID, python: pythonID, envPath: envID, nodePath: nodeID,
	}
}

// The kernel's view of a script exec: filename the script, argv the
// interpreter's, exe the interpreter.
func shHook(pid int) Event  { return ev(pid, 1, hookSh, shID, shPath, hookSh, "--x") }
func shTool(pid int) Event  { return ev(pid, 1, toolSh, shID, shPath, toolSh, "a", "b") }
func jsTool(pid int) Event  { return ev(pid, 1, toolJS, envID, envPath, "node", toolJS, "x") }
func nodeRun(pid int) Event { return ev(pid, 1, nodePath, nodeID, "node", toolJS, "x") }

func TestVerifyScripts(t *testing.T) {
	tests := map[string]verifyCase{
		"a #!/bin/sh tool, allowed, run by its interpreter": {
			events: trace(claudeEngine(), shHook(2), shTool(3)),
			want: verdictWant{status: StatusConfirmed, noDiffs: true,
				matched: map[string]int{"allow:" + toolSh: 1, "hook:sh": 1}},
		},
		"a script tool, its interpreter not declared": {
			render: undeclaredInterpreters,
			events: trace(claudeEngine(), shHook(2), shTool(3)),
			want:   verdictWant{status: StatusConfirmed, noDiffs: true, matched: map[string]int{"allow:" + toolSh: 1}},
		},
		"a script tool run by another interpreter binary": {
			events: trace(claudeEngine(), shHook(2), ev(3, 1, toolSh, otherID, shPath, toolSh)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonAllowedBinaryDiffers},
				diffs: []diffWant{{rule: "allow:" + toolSh, field: FieldIdentity, index: -1, want: shID.String() + " (interpreter /bin/sh)", got: otherID.String()}}},
		},
		"a script tool whose argv is not its #! line's": {
			events: trace(claudeEngine(), shHook(2), ev(3, 1, toolSh, shID, perlBin, toolSh)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonAllowedBinaryDiffers},
				diffs: []diffWant{{rule: "allow:" + toolSh, field: FieldIdentity, index: -1, want: toolShID.String(), got: shID.String()}}},
		},
		"an env script tool and its interpreter hop": {
			events: trace(claudeEngine(), shHook(2), jsTool(3), nodeRun(3)),
			want: verdictWant{status: StatusConfirmed, noDiffs: true,
				matched: map[string]int{"allow:" + toolJS: 1, "hop:" + toolJS: 1}},
		},
		"an env script tool without its hop": {
			events: trace(claudeEngine(), shHook(2), jsTool(3)),
			want:   verdictWant{status: StatusMismatch, reasons: []string{ReasonHopMissing}},
		},
		"a script hook, interpreter declared": {
			events: trace(claudeEngine(), shHook(2)),
			want:   verdictWant{status: StatusConfirmed, noDiffs: true, matched: map[string]int{"hook:sh": 1}},
		},
		"a script hook, its interpreter not declared": {
			render: undeclaredInterpreters,
			events: trace(claudeEngine(), shHook(2)),
			want:   verdictWant{status: StatusConfirmed, noDiffs: true, matched: map[string]int{"hook:sh": 1}},
		},
		"a script hook with the #! line's argument": {
			events: trace(claudeEngine(), shHook(2), ev(3, 1, hookPy, pythonID, python, "-u", hookPy, "--check")),
			want:   verdictWant{status: StatusConfirmed, noDiffs: true, matched: map[string]int{"hook:py": 1}},
		},
		"a script hook without the #! line's argument": {
			events: trace(claudeEngine(), shHook(2), ev(3, 1, hookPy, pythonID, python, hookPy, "--check")),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonHookArgvDiffers},
				diffs: []diffWant{{rule: "hook:py/chain[0]", field: FieldInterpreter, index: -1, want: "-u", got: hookPy}}},
		},
		"a script hook run by another interpreter": {
			events: trace(claudeEngine(), ev(2, 1, hookSh, otherID, perlBin, hookSh, "--x")),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonHookArgvDiffers, ReasonHookBinaryDiffers, ReasonHookNotRun},
				diffs: []diffWant{{rule: "hook:sh/chain[0]", field: FieldInterpreter, index: -1, want: shPath, got: perlBin}}},
		},
		"a script hook by another interpreter binary": {
			events: trace(claudeEngine(), ev(2, 1, hookSh, otherID, shPath, hookSh, "--x")),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonHookBinaryDiffers, ReasonHookNotRun},
				diffs: []diffWant{{rule: "hook:sh/chain[0]", field: FieldIdentity, index: -1, want: shID.String() + " (interpreter /bin/sh)"}}},
		},
		"a script hook with other arguments": {
			events: trace(claudeEngine(), ev(2, 1, hookSh, shID, shPath, hookSh, "--y")),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonHookArgvDiffers, ReasonHookNotRun},
				diffs: []diffWant{{rule: "hook:sh/chain[0]", field: FieldArgv, index: 1, want: "--x", got: "--y"}}},
		},
		"a script hook's argv cut inside its head": {
			events: trace(claudeEngine(), shHook(2), truncated(ev(3, 1, hookPy, pythonID, python, "-"))),
			want:   verdictWant{status: StatusUnchecked, reasons: []string{ReasonArgvTruncated}, noDiffs: true},
		},
		"a script tool's argv cut inside its head": {
			events: trace(claudeEngine(), shHook(2), truncated(ev(3, 1, toolSh, shID, shPath, "/usr/lo"))),
			want:   verdictWant{status: StatusUnchecked, reasons: []string{ReasonArgvTruncated}, noDiffs: true},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.render == nil {
				tc.render = scriptsRender
			}
			if tc.ids == nil {
				tc.ids = scriptIDs()
			}
			tc.want.check(t, tc.run(t))
		})
	}
}
