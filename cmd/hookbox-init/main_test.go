package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/internal/initseccomp"
	"hookbox.dev/hookbox/internal/initsecrets"
)

// The test binary is the init when asInit is set: the tests run it (not as
// PID 1) with a shell script as the engine.
const asInit = "HOOKBOX_INIT_TEST_AS_INIT"

func TestMain(m *testing.M) {
	if os.Getenv(asInit) == "1" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func initCommand(argv ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], argv...)
	cmd.Env = append(os.Environ(), asInit+"=1")
	return cmd
}

func exitOf(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if ee == nil {
		return 0
	}
	return ee.ExitCode()
}

func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		argv []string
		want int
	}{
		{"success", []string{"/bin/sh", "-c", "exit 0"}, 0},
		{"exit code", []string{"/bin/sh", "-c", "exit 7"}, 7},
		{"killed by SIGTERM", []string{"/bin/sh", "-c", "kill -TERM $$"}, 128 + int(syscall.SIGTERM)},
		{"killed by SIGKILL", []string{"/bin/sh", "-c", "kill -KILL $$"}, 128 + int(syscall.SIGKILL)},
		{"no such engine", []string{"/nonexistent/engine"}, exitCannotStart},
		{"no engine", nil, exitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr strings.Builder
			cmd := initCommand(tc.argv...)
			cmd.Stderr = &stderr
			if got := exitOf(t, cmd.Run()); got != tc.want {
				t.Errorf("exit %d, want %d (stderr %q)", got, tc.want, stderr.String())
			}
			if tc.want == exitCannotStart && !strings.HasPrefix(stderr.String(), "hookbox-init: ") {
				t.Errorf("stderr %q lacks the hookbox-init: prefix", stderr.String())
			}
		})
	}
}

// The engine's stdio is the init's, and the init adds nothing to stdout.
func TestStdoutIsTheEngines(t *testing.T) {
	cmd := initCommand("/bin/sh", "-c", `printf 'a\n'; read x; printf '%s\n' "$x"; printf 'err\n' >&2`)
	cmd.Stdin = strings.NewReader("from-stdin\n")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if stdout.String() != "a\nfrom-stdin\n" || stderr.String() != "err\n" {
		t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
	}
}

// waitFor polls cond for up to 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func fileLines(path string) []string {
	b, _ := os.ReadFile(path)
	return strings.Fields(string(b))
}

func has(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}

// A SIGTERM to the init reaches the engine and its descendants (the
// engine's process group); the init exits with the engine's status.
func TestForwardsToTheGroup(t *testing.T) {
	// Not SIGINT: a shell's background job ignores it, so the grandchild
	// could not trap it.
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1} {
		t.Run(sig.String(), func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "log")
			name := sigName(sig)
			script := fmt.Sprintf(`
				sh -c 'trap "echo grandchild >> %[1]s; exit 0" %[2]s; echo grandchild-ready >> %[1]s; while :; do sleep 0.05; done' &
				trap 'echo child >> %[1]s; wait; exit 3' %[2]s
				echo child-ready >> %[1]s
				while :; do sleep 0.05; done`, log, name)
			cmd := initCommand("/bin/sh", "-c", script)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			waitFor(t, "both ready", func() bool {
				l := fileLines(log)
				return has(l, "child-ready") && has(l, "grandchild-ready")
			})
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if got := exitOf(t, cmd.Wait()); got != 3 {
				t.Errorf("exit %d, want the engine's 3", got)
			}
			if l := fileLines(log); !has(l, "child") || !has(l, "grandchild") {
				t.Errorf("the signal did not reach both: %v", l)
			}
		})
	}
}

func sigName(s syscall.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "TERM"
	case syscall.SIGHUP:
		return "HUP"
	case syscall.SIGUSR1:
		return "USR1"
	}
	return strconv.Itoa(int(s))
}

// An orphaned grandchild is reparented to the init (a child subreaper) and
// reaped by it while the engine still runs: no zombie is left.
func TestReapsOrphans(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	// The subshell starts sleep and exits, orphaning it; the engine lives on.
	cmd := initCommand("/bin/sh", "-c", fmt.Sprintf(`(sleep 0.5 & echo $! > %s.tmp; mv %[1]s.tmp %[1]s); sleep 3`, pidFile))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var orphan int
	waitFor(t, "the orphan's pid", func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		orphan, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	waitFor(t, "the orphan to be reparented to the init", func() bool {
		ppid, _ := procStat(orphan)
		return ppid == cmd.Process.Pid
	})
	waitFor(t, "the orphan to be reaped", func() bool {
		_, err := procStat(orphan)
		return errors.Is(err, os.ErrNotExist)
	})
	if cmd.ProcessState != nil {
		t.Fatal("the init exited before the engine")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if got := exitOf(t, cmd.Wait()); got != 128+int(syscall.SIGTERM) {
		t.Errorf("exit %d, want %d (the engine's sleep died of SIGTERM)", got, 128+int(syscall.SIGTERM))
	}
}

// procStat returns the parent pid of pid from /proc, or the error reading it
// (os.ErrNotExist once reaped; a zombie still has its entry).
func procStat(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
	rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 2 {
		return 0, fmt.Errorf("short stat %q", b)
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err
}

// secretsInit runs the init with exactly environ (and the test's own
// switch) and stdin; it returns its exit code, stdout and stderr.
func secretsInit(t *testing.T, environ []string, stdin io.Reader, argv ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], argv...)
	cmd.Env = append([]string{asInit + "=1"}, environ...)
	cmd.Stdin = stdin
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := exitOf(t, cmd.Run())
	return code, stdout.String(), stderr.String()
}

// The secrets named by HOOKBOX_INIT_SECRETS come from stdin into their
// entries' places; the engine's environment is the rest of the init's in
// its order, without HOOKBOX_INIT_SECRETS, and its stdin is /dev/null.
func TestSecretsFromStdin(t *testing.T) {
	names := []string{"S_ONE", "S_TWO"}
	stream, err := initsecrets.Encode(names, map[string]string{"S_ONE": "hbx-one=x\ny", "S_TWO": ""})
	if err != nil {
		t.Fatal(err)
	}
	environ := []string{"A=1", "S_ONE=<resolved at launch>", initsecrets.Variable(names), "B=2", "S_TWO=<resolved at launch>"}
	// env -0 prints its environment as it got it, in order.
	code, stdout, stderr := secretsInit(t, environ, bytes.NewReader(stream), "/usr/bin/env", "-0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got := strings.Split(strings.TrimSuffix(stdout, "\x00"), "\x00")
	want := []string{asInit + "=1", "A=1", "S_ONE=hbx-one=x\ny", "B=2", "S_TWO="}
	if !slices.Equal(got, want) {
		t.Errorf("the engine's environment is %q, want %q", got, want)
	}

	code, stdout, stderr = secretsInit(t, environ, bytes.NewReader(stream), "/usr/bin/readlink", "/proc/self/fd/0")
	if code != 0 || stdout != "/dev/null\n" {
		t.Errorf("the engine's stdin is %q (exit %d, %s), want /dev/null", stdout, code, stderr)
	}
}

// Without HOOKBOX_INIT_SECRETS the init reads nothing: stdin is the
// engine's (TestStdoutIsTheEngines), the environment passes unchanged.
func TestNoSecretsNoChange(t *testing.T) {
	code, stdout, stderr := secretsInit(t, []string{"B=2", "A=1"}, nil, "/usr/bin/env", "-0")
	if code != 0 || stdout != asInit+"=1\x00B=2\x00A=1\x00" {
		t.Errorf("exit %d stdout %q stderr %s", code, stdout, stderr)
	}
	code, stdout, stderr = secretsInit(t, nil, strings.NewReader("for the engine"), "/usr/bin/cat")
	if code != 0 || stdout != "for the engine" {
		t.Errorf("exit %d stdout %q stderr %s", code, stdout, stderr)
	}
}

// Secrets expected and not read: exit 127 without starting the engine,
// an error naming the variables and never a byte of a value.
func TestSecretsFailClosed(t *testing.T) {
	const value = "hbx-sentinel-partial"
	names := []string{"S_ONE", "S_TWO"}
	environ := []string{"S_ONE=<resolved at launch>", "S_TWO=<resolved at launch>", initsecrets.Variable(names)}
	full, _ := initsecrets.Encode(names, map[string]string{"S_ONE": value, "S_TWO": value})
	marker := filepath.Join(t.TempDir(), "engine-ran")
	for _, tc := range []struct {
		name    string
		stdin   io.Reader
		environ []string
		want    string
	}{
		{"no stdin", nil, environ, "the stream ended before the value of S_ONE"},
		{"cut mid-value", bytes.NewReader(full[:len(full)-5]), environ, "the stream ended before the value of S_TWO"},
		{"no placeholder", bytes.NewReader(full), environ[1:], "no entry in the environment for S_ONE"},
		{"malformed list", nil, []string{initsecrets.EnvName + "=S_ONE,,S_TWO"}, "is not a variable name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := secretsInit(t, tc.environ, tc.stdin, "/usr/bin/touch", marker)
			if code != exitCannotStart || stdout != "" {
				t.Errorf("exit %d stdout %q, want %d and nothing", code, stdout, exitCannotStart)
			}
			if !strings.HasPrefix(stderr, "hookbox-init: ") || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "the engine is not started") {
				t.Errorf("stderr %q, want %q", stderr, tc.want)
			}
			if strings.Contains(stderr, "sentinel") {
				t.Errorf("stderr shows a value: %q", stderr)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the engine ran")
			}
		})
	}
}

// A writer that keeps the pipe open and never writes (hookbox died and
// the shim holds its end) does not make the init wait forever; the init
// closes its end either way.
func TestReadSecretsTimesOut(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	start := time.Now()
	_, err = readSecrets(r, []string{"S_ONE"}, 200*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "did not arrive within 200ms") {
		t.Fatalf("error %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v", took)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Errorf("the init's end of the pipe is still open: write gave %v", err)
	}
}

// With HOOKBOX_INIT_SECCOMP the init installs the filter before the engine
// starts: the engine runs under it (seccomp mode 2, one filter) and does
// not see the variable.
func TestSeccompFilterInstalled(t *testing.T) {
	filter := filepath.Join(t.TempDir(), initseccomp.FileName)
	allowAll := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW}}
	if err := os.WriteFile(filter, initseccomp.Encode(allowAll), 0o444); err != nil {
		t.Fatal(err)
	}
	environ := []string{"A=1", initseccomp.EnvName + "=" + filter}
	code, stdout, stderr := secretsInit(t, environ, nil, "/usr/bin/grep", "-E", "^Seccomp", "/proc/self/status")
	if code != 0 || !strings.Contains(stdout, "Seccomp:\t2\n") || !strings.Contains(stdout, "Seccomp_filters:\t1\n") {
		t.Errorf("exit %d, the engine's seccomp: %q (%s)", code, stdout, stderr)
	}
	code, stdout, stderr = secretsInit(t, environ, nil, "/usr/bin/env", "-0")
	if code != 0 || stdout != asInit+"=1\x00A=1\x00" {
		t.Errorf("exit %d, the engine's environment %q (%s)", code, stdout, stderr)
	}
}

// A filter named and not installable stops the init before the engine:
// exit 127, never an engine without its filter.
func TestSeccompFilterFailClosed(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "engine-ran")
	odd := filepath.Join(dir, "odd.bpf")
	if err := os.WriteFile(odd, []byte("1234567"), 0o444); err != nil {
		t.Fatal(err)
	}
	// Jumps past the end: the kernel refuses the program.
	invalid := filepath.Join(dir, "invalid.bpf")
	if err := os.WriteFile(invalid, initseccomp.Encode([]unix.SockFilter{{Code: unix.BPF_JMP | unix.BPF_JA, K: 5}}), 0o444); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ path, want string }{
		"missing": {filepath.Join(dir, "none.bpf"), "no such file"},
		"odd":     {odd, "not a whole number"},
		"invalid": {invalid, "install: invalid argument"},
	} {
		t.Run(name, func(t *testing.T) {
			code, _, stderr := secretsInit(t, []string{initseccomp.EnvName + "=" + tc.path}, nil, "/usr/bin/touch", marker)
			if code != exitCannotStart || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "the engine is not started") {
				t.Errorf("exit %d stderr %q, want %d and %q", code, stderr, exitCannotStart, tc.want)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the engine ran")
			}
		})
	}
}
