package integration

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"hookbox.dev/hookbox/launcher"
)

// execSpec writes a spawn whose engine is a plain program.
func (e *env) execSpec(name, path, args string, extra ...string) string {
	e.t.Helper()
	content := "apiVersion: hookbox.dev/v1alpha1\nkind: Spawn\nmetadata: {name: " + name + "}\nspec:\n" +
		"  engine: {kind: exec, path: " + path + ", args: " + args + "}\n  workspace: ./ws\n"
	for _, l := range extra {
		content += l + "\n"
	}
	file := filepath.Join(e.specDir, name+".yaml")
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return file
}

// TestInitDeliversTheTimeoutSignal: sleep keeps SIGTERM at its default
// disposition, which a pid namespace's PID 1 does not get; under
// hookbox-init it is an ordinary process, so the timeout's SIGTERM kills
// it, and the grace (20 s) ends as soon as the cgroup is empty.
func TestInitDeliversTheTimeoutSignal(t *testing.T) {
	e := newEnv(t)
	spec := e.execSpec("sleeper", "/usr/bin/sleep", `["300"]`, "  limits: {timeout: 2s}")
	start := time.Now()
	r := e.runGrace(spec, "20s")
	took := time.Since(start)
	res := r.mustResult(t)
	if res.Status != launcher.StatusTimedOut || res.Signal != "terminated" || res.ExitCode == nil || *res.ExitCode != 143 {
		t.Fatalf("status %s signal %q exit %v, want timed_out by SIGTERM (terminated, 143)\nstderr:\n%s", res.Status, res.Signal, res.ExitCode, r.stderr)
	}
	if took > 15*time.Second {
		t.Errorf("the run took %v: the 20 s grace did not end when the engine died", took)
	}
	rules := map[string]int{}
	for _, m := range res.Trace.Matched {
		rules[m.Rule] = m.Count
	}
	if res.Trace.Status != "confirmed" || res.Trace.Events != 2 || rules["init"] != 1 || rules["engine"] != 1 {
		t.Errorf("trace %+v, want confirmed with the init and the engine", res.Trace)
	}
	e.assertNothingLeft(res.RunID)
}

// TestEngineCleansUpOnTimeout: an engine that handles SIGTERM (as Claude
// Code, Codex and Gemini CLI do, running their Stop/SessionEnd hooks) gets
// to run its handler on timeout: the file it writes then is harvested.
func TestEngineCleansUpOnTimeout(t *testing.T) {
	e := newEnv(t)
	script := `trap 'echo stopped > /run/hookbox/out/stop.txt; exit 0' TERM; /usr/bin/sleep 300 & wait`
	spec := e.execSpec("trapper", "/bin/sh", `["-c", "`+script+`"]`,
		"  tools: [/usr/bin/sleep]", "  limits: {timeout: 2s}", "  artifacts: [stop.txt]")
	r := e.runGrace(spec, "20s")
	res := r.mustResult(t)
	if res.Status != launcher.StatusTimedOut {
		t.Fatalf("status %s %v, want timed_out\nstderr:\n%s", res.Status, res.Reasons, r.stderr)
	}
	got, err := os.ReadFile(filepath.Join(res.RecordDir, launcher.ArtifactDir, "out", "stop.txt"))
	if err != nil || string(got) != "stopped\n" {
		t.Fatalf("the engine's SIGTERM handler did not run: %q %v (artifacts %+v)", got, err, res.Artifacts)
	}
	if res.Trace.Status != "confirmed" {
		t.Errorf("trace %+v, want confirmed", res.Trace)
	}
	e.assertNothingLeft(res.RunID)
}
