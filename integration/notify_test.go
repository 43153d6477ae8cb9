package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/config/notifyconf"
	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/notify"
)

func readResultFile(t *testing.T, res *launcher.Result) *launcher.Result {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(res.RecordDir, launcher.ResultFile))
	if err != nil {
		t.Fatal(err)
	}
	var back launcher.Result
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	return &back
}

// TestNotifyAfterTerminalResult: a spec's notifier receives the envelope on
// stdin and as {payload}; a --notify notifier that outlives its deadline
// (with a child ignoring SIGTERM) and leaks a token on stderr is timed out,
// reaped and redacted. Neither changes the run's status or exit code.
func TestNotifyAfterTerminalResult(t *testing.T) {
	e := newEnv(t)
	e.extraEnv = []string{"HOOKBOX_CONFIG=/nonexistent/config.yaml"}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	post := write("post", `cat > "$1"; printf '%s' "$2" > "$3"`)
	stdinFile, argvFile := filepath.Join(dir, "stdin.json"), filepath.Join(dir, "argv.json")
	spec := e.spec("notified", "- print: working\n- exit: 3",
		"  notify:\n    argv: ["+post+", "+stdinFile+", '{payload}', "+argvFile+"]")

	r := e.run(spec)
	res := r.mustResult(t)
	if r.code != 3 || res.Status != launcher.StatusFailed {
		t.Fatalf("exit %d status %s, want 3 failed\n%s", r.code, res.Status, r.stderr)
	}
	onDisk := readResultFile(t, res)
	if onDisk.Notify == nil || onDisk.Notify.Status != notify.StatusDelivered || onDisk.Notify.Source != notifyconf.SourceSpec {
		t.Fatalf("result.json notify = %+v", onDisk.Notify)
	}
	if onDisk.Status != res.Status || *onDisk.ExitCode != 3 {
		t.Errorf("the notifier changed the recorded outcome: %+v", onDisk)
	}
	code := 3
	want, _ := json.Marshal(notify.Envelope{SchemaVersion: 1, RunID: res.RunID, Spawn: "notified", RenderDigest: res.RenderDigest,
		Status: string(launcher.StatusFailed), ExitCode: &code, VerdictStatus: string(res.Trace.Status), ResultPath: filepath.Join(res.RecordDir, launcher.ResultFile)})
	for _, f := range []string{stdinFile, argvFile} {
		if got, _ := os.ReadFile(f); string(got) != string(want) {
			t.Errorf("%s = %s, want %s", filepath.Base(f), got, want)
		}
	}

	// The flag wins over the spec: a slow notifier with a stubborn child,
	// echoing a token to stderr.
	const token = "hbx-notify-token-91c2"
	stubborn := write("stubborn", `trap '' TERM; echo $$ > "$1"; while :; do sleep 1; done`)
	slow := write("slow", `echo "posting with $*" >&2; "$1" "$2" & echo $$ > "$3"; sleep 120`)
	childPid, leaderPid := filepath.Join(dir, "child.pid"), filepath.Join(dir, "leader.pid")
	argv, _ := json.Marshal([]string{slow, stubborn, childPid, leaderPid, token})
	start := time.Now()
	r = e.run(spec, "--notify", string(argv), "--notify-timeout", "1s")
	res = r.mustResult(t)
	if r.code != 3 || time.Since(start) > 90*time.Second {
		t.Fatalf("exit %d after %s", r.code, time.Since(start))
	}
	onDisk = readResultFile(t, res)
	if n := onDisk.Notify; n == nil || n.Status != notify.StatusTimedOut || n.Source != notifyconf.SourceFlag || n.Notifier != "slow" {
		t.Fatalf("notify = %+v", onDisk.Notify)
	}
	for _, f := range []string{childPid, leaderPid} {
		data, _ := os.ReadFile(f)
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			t.Fatalf("%s: %q", f, data)
		}
		if stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && !strings.Contains(string(stat), ") Z ") {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("pid %d outlived hookbox's notifier deadline", pid)
		}
	}
	raw, err := os.ReadFile(onDisk.Notify.StderrPath)
	if err != nil || !strings.Contains(string(raw), token) {
		t.Errorf("notify.stderr lacks the raw text: %v", err)
	}
	if fi, err := os.Stat(onDisk.Notify.StderrPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("notify.stderr must be 0600: %v", err)
	}
	resultJSON, _ := os.ReadFile(filepath.Join(res.RecordDir, launcher.ResultFile))
	for what, text := range map[string]string{"--json events": r.stdout, "terminal": r.stderr, "result.json": string(resultJSON)} {
		if strings.Contains(text, token) {
			t.Errorf("the token appeared in %s", what)
		}
	}
	if !strings.Contains(onDisk.Notify.StderrSnippet, "<arg 4>") {
		t.Errorf("snippet %q should show the redacted argument", onDisk.Notify.StderrSnippet)
	}
	e.assertNothingLeft(res.RunID)
}
