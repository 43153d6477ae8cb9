package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/notify"
)

// The host-side helpers (the notifier, the secret lookup) run in a cgroup
// of their own: a helper that leaves a daemon (setsid, double fork,
// SIGTERM ignored; testenv.DaemonScript) leaves nothing once it has
// ended, whether it exited, missed its deadline or hookbox got Ctrl-C.

// helperEnding is how a helper ends in these tests.
type helperEnding string

const (
	endExit     helperEnding = "exit"     // exits 0 once its daemon runs
	endDeadline helperEnding = "deadline" // sleeps past its timeout
	endCtrlC    helperEnding = "ctrl-c"   // hookbox gets SIGINT while it sleeps
)

// helperScript writes a helper that starts a daemon (DAEMON MARKER PIDFILE,
// at argument offset off) and then ends as ending says; print is what it
// prints on stdout before it exits (a lookup's value).
func helperScript(t *testing.T, dir, name string, off int, ending helperEnding, print string) string {
	t.Helper()
	a := func(i int) string { return `"$` + strconv.Itoa(off+i) + `"` }
	body := a(0) + " " + a(1) + " " + a(2) + "\nwhile [ ! -s " + a(2) + " ]; do sleep 0.01; done\n"
	if ending == endExit {
		body += "printf '%s\\n' '" + print + "'\nexit 0\n"
	} else {
		body += "exec sleep 120\n"
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// runUntilDaemon runs hookbox with args and, for endCtrlC, sends it SIGINT
// once the helper's daemon wrote pidFile. It returns the exit code and
// stdout.
func (e *env) runUntilDaemon(ending helperEnding, pidFile string, args ...string) (int, string, string, int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := e.command(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	if ending == endCtrlC {
		testenv.ReadPidFile(e.t, pidFile, time.Minute)
		cmd.Process.Signal(syscall.SIGINT)
	}
	err := cmd.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("hookbox: %v", err)
	}
	return code, stdout.String(), stderr.String(), cmd.Process.Pid
}

// assertNoHelperCgroups checks that no helper cgroup of the hookbox with
// pid owner is left in any hierarchy.
func assertNoHelperCgroups(t *testing.T, owner int) {
	t.Helper()
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/freezer"} {
		entries, _ := os.ReadDir(filepath.Join(root, "hookbox", "helpers"))
		for _, en := range entries {
			if strings.Contains(en.Name(), "@"+strconv.Itoa(owner)+"-") {
				t.Errorf("helper cgroup %s/hookbox/helpers/%s is still there", root, en.Name())
			}
		}
	}
}

// survivors waits a little for processes with marker to go, and kills and
// returns those that do not.
func survivors(marker string) []int {
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if len(markerProcesses(marker)) == 0 {
			return nil
		}
	}
	pids := markerProcesses(marker)
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	return pids
}

func TestNotifierLeavesNoSurvivor(t *testing.T) {
	e := newEnv(t)
	e.extraEnv = append(e.extraEnv, "HOOKBOX_CONFIG=/nonexistent/config.yaml")
	spec := e.spec("helper-notify", "- print: working\n- exit: 3")
	dir := t.TempDir()
	daemon := testenv.DaemonScript(t, dir)
	for _, tc := range []struct {
		ending         helperEnding
		status, reason string
	}{
		{endExit, notify.StatusDelivered, ""},
		{endDeadline, notify.StatusTimedOut, notify.ReasonDeadline},
		{endCtrlC, notify.StatusFailed, notify.ReasonCancelled},
	} {
		t.Run(string(tc.ending), func(t *testing.T) {
			marker := fmt.Sprintf("hbx-notify-daemon-%s-%d", tc.ending, time.Now().UnixNano())
			pidFile := filepath.Join(dir, string(tc.ending)+".pid")
			notifier := helperScript(t, dir, "notifier-"+string(tc.ending), 1, tc.ending, "")
			argv, _ := json.Marshal([]string{notifier, daemon, marker, pidFile})
			code, stdout, stderr, owner := e.runUntilDaemon(tc.ending, pidFile, "run", "--json", "--state-dir", e.state, "--grace", "2s",
				spec, "--notify", string(argv), "--notify-timeout", "2s")
			r := &run{code: code, stdout: stdout, stderr: stderr}
			r.parse(t)
			res := r.mustResult(t)
			if pids := survivors(marker); len(pids) > 0 {
				t.Errorf("the notifier's daemon survived hookbox (%s): %v", tc.ending, pids)
			}
			assertNoHelperCgroups(t, owner)
			// The notifier changes neither status nor exit code.
			onDisk := readResultFile(t, res)
			if code != 3 || onDisk.Status != launcher.StatusFailed || onDisk.ExitCode == nil || *onDisk.ExitCode != 3 {
				t.Errorf("exit %d, result %s %v: want 3, failed, 3\n%s", code, onDisk.Status, onDisk.ExitCode, stderr)
			}
			if n := onDisk.Notify; n == nil || n.Status != tc.status || n.Reason != tc.reason || len(n.Degraded) > 0 {
				t.Errorf("notify outcome %+v, want %s %s, contained", onDisk.Notify, tc.status, tc.reason)
			}
			if contains(onDisk.Degraded, notify.DegradedUncontained) {
				t.Errorf("degraded %v: the notifier had its cgroup", onDisk.Degraded)
			}
			e.assertNothingLeft(res.RunID)
		})
	}
}

func TestLookupLeavesNoSurvivor(t *testing.T) {
	e := newEnv(t)
	const sentinel = "hbx-sentinel-lookup-3c9e"
	dir, configDir := t.TempDir(), t.TempDir() // the error names the config file
	daemon := testenv.DaemonScript(t, dir)
	spec := e.spec("helper-lookup", "- envHash: HBX_LOOKED_UP\n- exit: 0", "  secrets: [HBX_LOOKED_UP]")
	sum := sha256.Sum256([]byte(sentinel))
	for _, tc := range []struct {
		ending helperEnding
		code   int
		want   string // in hookbox's stderr when the run fails
	}{
		{endExit, 0, ""},
		{endDeadline, 120, `lookup program "lookup-deadline" did not finish within the configured timeout`},
		{endCtrlC, 120, `lookup program "lookup-ctrl-c" was stopped because the launch was canceled`},
	} {
		t.Run(string(tc.ending), func(t *testing.T) {
			marker := fmt.Sprintf("hbx-lookup-daemon-%s-%d", tc.ending, time.Now().UnixNano())
			pidFile := filepath.Join(dir, string(tc.ending)+".pid")
			lookup := helperScript(t, dir, "lookup-"+string(tc.ending), 2, tc.ending, sentinel)
			config := filepath.Join(configDir, string(tc.ending)+".yaml")
			argv, _ := json.Marshal([]string{lookup, "{name}", daemon, marker, pidFile})
			if err := os.WriteFile(config, []byte("secrets:\n  lookup:\n    argv: "+string(argv)+"\n    timeout: 2s\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			e.extraEnv = []string{"HOOKBOX_KEY_DIR=" + e.keyDir, "HOOKBOX_CONFIG=" + config}
			code, stdout, stderr, owner := e.runUntilDaemon(tc.ending, pidFile, "run", "--json", "--state-dir", e.state, spec)
			if pids := survivors(marker); len(pids) > 0 {
				t.Errorf("the lookup's daemon survived hookbox (%s): %v", tc.ending, pids)
			}
			assertNoHelperCgroups(t, owner)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, want %d with %q:\n%s", code, tc.code, tc.want, stderr)
			}
			// The value goes to the container's environment and nowhere
			// else; a failure names the program by its basename, the
			// variable, and nothing of the configuration.
			for what, text := range map[string]string{"stdout": stdout, "stderr": stderr} {
				if strings.Contains(text, sentinel) || strings.Contains(text, marker) || strings.Contains(text, dir) {
					t.Errorf("hookbox's %s holds the value, an argument or a path:\n%s", what, text)
				}
			}
			if tc.ending != endExit {
				if !strings.Contains(stderr, "HBX_LOOKED_UP") {
					t.Errorf("the failure does not name the variable:\n%s", stderr)
				}
				return
			}
			r := &run{code: code, stdout: stdout, stderr: stderr}
			r.parse(t)
			res := r.mustResult(t)
			if !strings.Contains(r.output(), hex.EncodeToString(sum[:])) {
				t.Errorf("the container did not get the looked-up value:\n%s", r.output())
			}
			if contains(res.Degraded, "helper-cgroup-unavailable:lookup") {
				t.Errorf("degraded %v: the lookup had its cgroup", res.Degraded)
			}
			filepath.WalkDir(res.RecordDir, func(path string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					if data, _ := os.ReadFile(path); bytes.Contains(data, []byte(sentinel)) {
						t.Errorf("the value is in %s", path)
					}
				}
				return nil
			})
			e.assertNothingLeft(res.RunID)
		})
	}
}

// TestHelperLeftByKilledHookboxIsCollected: hookbox killed (SIGKILL) while
// its notifier runs leaves the notifier's cgroup, with its daemon, behind;
// gc kills the daemon and removes the cgroup.
func TestHelperLeftByKilledHookboxIsCollected(t *testing.T) {
	e := newEnv(t)
	e.extraEnv = append(e.extraEnv, "HOOKBOX_CONFIG=/nonexistent/config.yaml")
	spec := e.spec("helper-kill9", "- print: working\n- exit: 0")
	dir := t.TempDir()
	marker := fmt.Sprintf("hbx-notify-kill9-%d", time.Now().UnixNano())
	pidFile := filepath.Join(dir, "daemon.pid")
	notifier := helperScript(t, dir, "notifier", 1, endDeadline, "")
	argv, _ := json.Marshal([]string{notifier, testenv.DaemonScript(t, dir), marker, pidFile})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := e.command(ctx, "run", "--json", "--state-dir", e.state, spec, "--notify", string(argv), "--notify-timeout", "5m")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.ReadPidFile(t, pidFile, time.Minute)
	cmd.Process.Kill()
	cmd.Wait()
	if len(markerProcesses(marker)) == 0 {
		t.Fatal("test setup: the daemon should still run after hookbox was killed")
	}
	// Any hookbox's gc collects it (it names its dead owner), so another
	// run starting on this host may have been first.
	out, err := exec.Command(hookboxBin, "gc", "--state-dir", e.state).CombinedOutput()
	if err != nil {
		t.Errorf("gc: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), ".notify@"+strconv.Itoa(cmd.Process.Pid)+"-") {
		t.Logf("gc did not report the notifier's cgroup (another gc was first?):\n%s", out)
	}
	if pids := survivors(marker); len(pids) > 0 {
		t.Errorf("gc left the notifier's daemon: %v", pids)
	}
	assertNoHelperCgroups(t, cmd.Process.Pid)
	again, _ := exec.Command(hookboxBin, "gc", "--state-dir", e.state).CombinedOutput()
	if strings.Contains(string(again), "helper-cgroup") {
		t.Errorf("a second gc found the helper again:\n%s", again)
	}
}
