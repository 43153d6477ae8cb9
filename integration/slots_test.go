package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"hookbox.dev/hookbox/launcher"
)

// recordedSlots reads the launch slot values a run record keeps.
func recordedSlots(t *testing.T, recordDir string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(recordDir, launcher.ResultFile))
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Slots map[string]string `json:"slots"`
	}
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	return res.Slots
}

// TestTraceHookSlotsFilled: a hook's {run_id} reaches the hook as the run
// id, the record keeps the value, and the verdict requires exactly it: the
// engine running the hook program with a value of its own choosing is a
// mismatch, not the hook.
func TestTraceHookSlotsFilled(t *testing.T) {
	e := newEnv(t)
	hook := `  hooks: [{name: id, event: SessionStart, argv: [/usr/bin/printf, '%s\n', '{run_id}'], required: true}]`

	good := e.run(e.spec("slots", "- hook: id\n- exit: 0", hook))
	res := good.mustResult(t)
	if res.Trace.Status != "confirmed" || good.code != 0 {
		t.Fatalf("trace %+v exit %d\n%s", res.Trace, good.code, good.stderr)
	}
	if slots := recordedSlots(t, res.RecordDir); slots["run_id"] != res.RunID || slots["run_dir"] != "/run/hookbox" {
		t.Errorf("result.json slots = %v, want run_id %s and run_dir /run/hookbox", slots, res.RunID)
	}
	if !strings.Contains(good.output(), `"stdout":"`+res.RunID+`\n"`) {
		t.Errorf("the hook must have printed the run id %s:\n%s", res.RunID, good.output())
	}
	out, err := e.command(t.Context(), "verify", res.RecordDir).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "confirmed") {
		t.Errorf("hookbox verify: %v\n%s", err, out)
	}

	const attacker = "ATTACKER CHOSEN VALUE"
	bad := e.run(e.spec("slots-attacker", "- hook: id\n- exec: [/usr/bin/printf, '%s\\n', '"+attacker+"']\n- exit: 0",
		hook, "  tools: [/usr/bin/printf]", "  trace: {allow: []}"))
	res = bad.mustResult(t)
	if res.Trace.Status != "mismatch" || !hasReason(res, "hook-argv-differs") || bad.code != 124 {
		t.Fatalf("trace %+v exit %d, want mismatch/hook-argv-differs and exit 124", res.Trace, bad.code)
	}
	found := false
	for _, d := range res.Trace.Diffs {
		found = found || d.Index == 2 && d.Want == res.RunID && d.Got == attacker
	}
	if !found {
		t.Errorf("the diff must name argv[2]: want the run id %s, got %q: %+v", res.RunID, attacker, res.Trace.Diffs)
	}
}

// TestTraceScriptToolAndHookConfirmed: a "#!/bin/sh" tool and hook, the
// interpreter declared nowhere, run as the kernel runs scripts (argv
// [/bin/sh, script, ...], the exe /bin/sh): confirmed.
func TestTraceScriptToolAndHookConfirmed(t *testing.T) {
	e := newEnv(t)
	// Outside /tmp, so the scripts appear at their host paths.
	dir, err := os.MkdirTemp("/var/tmp", "hookbox-it-scripts-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	tool, hook := filepath.Join(dir, "tool.sh"), filepath.Join(dir, "hook.sh")
	for p, body := range map[string]string{tool: `echo "tool-ran $1"`, hook: `echo "hook-ran $1"`} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r := e.run(e.spec("scripts", "- hook: s\n- exec: ["+tool+", x]\n- exit: 0",
		"  tools: ["+tool+"]",
		"  hooks: [{name: s, event: SessionStart, argv: ["+hook+", '{run_id}'], required: true}]"))
	res := r.mustResult(t)
	if res.Trace.Status != "confirmed" || r.code != 0 {
		t.Fatalf("trace %+v exit %d\n%s", res.Trace, r.code, r.stderr)
	}
	seen := map[string]int{}
	for _, m := range res.Trace.Matched {
		seen[m.Rule] += m.Count
	}
	if seen["allow:"+tool] != 1 || seen["hook:s"] != 1 {
		t.Errorf("the tool and the hook must each match their rule once: %+v", res.Trace.Matched)
	}
	// The scripted engine prints a hook's stdout in its event and passes a
	// tool's to its stderr.
	stderr, _ := os.ReadFile(filepath.Join(res.RecordDir, launcher.StderrFile))
	if !strings.Contains(r.output(), "hook-ran "+res.RunID) || !strings.Contains(string(stderr), "tool-ran x") {
		t.Errorf("both scripts must have run (the hook with the run id):\n%s\nstderr:\n%s", r.output(), stderr)
	}
}
