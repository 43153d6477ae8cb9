package secrets

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/config"
	"hookbox.dev/hookbox/internal/config/secretsconf"
	"hookbox.dev/hookbox/internal/testenv"
)

const sentinel = "HBX-SENTINEL-7f3a9c"

// parseLookup reads the lookup of one global config file's bytes.
func parseLookup(data, source string) secretsconf.Lookup {
	f, err := config.Parse([]byte(data), source)
	if err != nil {
		panic(err)
	}
	return f.Secrets
}

// Resolution without running a process.

func TestResolveWithoutLookup(t *testing.T) {
	env := envOf(map[string]string{"SET": "v", "EMPTY": ""})
	tests := []struct {
		desc    string
		lookup  secretsconf.Lookup
		reason  ResolveReason
		refusal secretsconf.Refusal
		want    []string
	}{
		{"not configured", secretsconf.Lookup{State: secretsconf.NotConfigured, Source: "/c.yaml"}, ReasonNotSet, "", []string{"MISSING", "not set in the host environment", "no secret lookup is configured in /c.yaml"}},
		{"disabled", secretsconf.Lookup{State: secretsconf.Disabled, Source: "/c.yaml"}, ReasonNotSet, "", []string{"MISSING", "lookup is disabled in /c.yaml"}},
		{"refused", parseLookup("secrets:\n  lookup:\n    argv: []\n", "/c.yaml"), ReasonLookupRefused, secretsconf.RefusalArgvEmpty, []string{"MISSING", "refused (argv-empty)", "/c.yaml"}},
		{"hand-built enabled without placeholder", secretsconf.Lookup{State: secretsconf.Enabled, Argv: []string{"/bin/echo", sentinel}}, ReasonLookupRefused, secretsconf.RefusalPlaceholderMissing, []string{"refused (placeholder-missing)"}},
		{"hand-built enabled with bad timeout", secretsconf.Lookup{State: secretsconf.Enabled, Argv: []string{"/bin/echo", "{name}"}, Timeout: time.Hour}, ReasonLookupRefused, secretsconf.RefusalTimeoutInvalid, []string{"refused (timeout-invalid)"}},
		{"unknown state", secretsconf.Lookup{State: secretsconf.LookupState(42)}, ReasonLookupRefused, secretsconf.RefusalConfigInvalid, []string{"MISSING"}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			r := Resolver{Lookup: tt.lookup, LookupEnv: env}
			got, err := r.Resolve(context.Background(), []string{"SET", "EMPTY", "MISSING"})
			if got != nil {
				t.Errorf("partial map returned: %v", got)
			}
			var re *ResolveError
			if !errors.As(err, &re) {
				t.Fatalf("err = %v, want *ResolveError", err)
			}
			if re.Name != "MISSING" || re.Reason != tt.reason || re.Refusal != tt.refusal {
				t.Errorf("got name %q reason %q refusal %q; want MISSING %q %q", re.Name, re.Reason, re.Refusal, tt.reason, tt.refusal)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), sentinel) {
				t.Errorf("error repeats an argv element: %q", err)
			}
		})
	}

	// Every name present: no lookup needed, whatever the state.
	r := Resolver{Lookup: secretsconf.Lookup{State: secretsconf.Refused, Reason: secretsconf.RefusalArgvEmpty}, LookupEnv: env}
	got, err := r.Resolve(context.Background(), []string{"SET", "EMPTY"})
	if err != nil || len(got) != 2 || got["SET"] != "v" || got["EMPTY"] != "" {
		t.Errorf("Resolve of present names = %v, %v", got, err)
	}
	if got, err := r.Resolve(context.Background(), nil); err != nil || got == nil || len(got) != 0 {
		t.Errorf("Resolve(nil) = %v, %v; want empty map", got, err)
	}
}

func TestResolveRejectsBadNames(t *testing.T) {
	r := Resolver{LookupEnv: envOf(map[string]string{"A": "1"})}
	for _, names := range [][]string{{"A", "A"}, {"A", "B-C"}} {
		got, err := r.Resolve(context.Background(), names)
		var re *secretsconf.RefusedError
		if got != nil || !errors.As(err, &re) {
			t.Errorf("Resolve(%q) = %v, %v; want nil map and *secretsconf.RefusedError", names, got, err)
		}
	}
}

// Resolution with a lookup process. These tests write shell scripts into a
// temporary directory and run them; they are not parallel, because running a
// file that another goroutine's fork may still hold open for writing fails
// with ETXTBSY.

func TestLookupFailureHidesOutput(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	script := writeScript(t, dir, "pass", "echo "+sentinel+"\necho "+sentinel+" >&2\nexit 3\n")
	r := enabled(script, "show", "{name}")
	got, err := r.Resolve(context.Background(), []string{"ANTHROPIC_API_KEY"})
	if got != nil {
		t.Fatalf("partial map returned")
	}
	var re *ResolveError
	if !errors.As(err, &re) || re.Reason != ReasonLookupFailed || re.ExitStatus != 3 || re.Program != "pass" || re.Name != "ANTHROPIC_API_KEY" {
		t.Fatalf("err = %#v, want lookup-failed pass/ANTHROPIC_API_KEY/3", err)
	}
	want := `secret ANTHROPIC_API_KEY: lookup program "pass" exited with status 3`
	if err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	if strings.Contains(err.Error(), sentinel) || strings.Contains(err.Error(), dir) {
		t.Errorf("error leaks output or argv: %q", err)
	}
}

func TestLookupSuccess(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	script := writeScript(t, dir, "lookup", `case "$1" in
GOOD) printf '%s\n' "`+sentinel+`" ;;
CRLF) printf 'v\r\n' ;;
TWO) printf 'v\n\n' ;;
BARE) printf 'v' ;;
*) echo "`+sentinel+`"; echo "`+sentinel+`" >&2; exit 5 ;;
esac
`)
	r := enabled(script, "{name}")
	got, err := r.Resolve(context.Background(), []string{"GOOD", "CRLF", "TWO", "BARE"})
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	want := map[string]string{"GOOD": sentinel, "CRLF": "v", "TWO": "v\n", "BARE": "v"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %q, want %q", got, want)
	}

	// A success followed by a failure: no partial map, and neither value nor
	// output reaches the error.
	got, err = r.Resolve(context.Background(), []string{"GOOD", "BAD"})
	if got != nil {
		t.Errorf("partial map returned after a failure")
	}
	var re *ResolveError
	if !errors.As(err, &re) || re.Name != "BAD" || re.ExitStatus != 5 {
		t.Fatalf("err = %v, want lookup of BAD failing with 5", err)
	}
	if strings.Contains(err.Error(), sentinel) || strings.Contains(fmt.Sprintf("%#v", re), sentinel) {
		t.Errorf("error leaks the value: %q", err)
	}
}

func TestSetVariableIsNeverLookedUp(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	script := writeScript(t, dir, "lookup", "echo \"$1\" >> '"+marker+"'\necho looked-up\n")
	r := enabled(script, "{name}")
	r.LookupEnv = envOf(map[string]string{"PRESENT": "from-env", "EMPTY": ""})
	got, err := r.Resolve(context.Background(), []string{"PRESENT", "EMPTY"})
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if got["PRESENT"] != "from-env" || got["EMPTY"] != "" || len(got) != 2 {
		t.Errorf("values changed: %q", got)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lookup ran for a variable already set (marker: %v)", err)
	}

	// Control: a missing name does run it, so the marker mechanism works.
	if got, err := r.Resolve(context.Background(), []string{"PRESENT", "ABSENT"}); err != nil || got["ABSENT"] != "looked-up" || got["PRESENT"] != "from-env" {
		t.Fatalf("Resolve = %q, %v", got, err)
	}
	if b, err := os.ReadFile(marker); err != nil || string(b) != "ABSENT\n" {
		t.Errorf("marker = %q, %v; want exactly one lookup of ABSENT", b, err)
	}
}

func TestNameSubstitution(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	argsFile := filepath.Join(dir, "args")
	script := writeScript(t, dir, "lookup", "for a in \"$@\"; do printf '%s\\n' \"$a\" >> '"+argsFile+"'; done\necho ok\n")
	r := enabled(script, "get", "vault/{name}", "{name}-{name}:{name}", "{NAME}", "plain")
	if _, err := r.Resolve(context.Background(), []string{"API_KEY"}); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	b, err := os.ReadFile(argsFile)
	if err != nil {
		t.Fatal(err)
	}
	want := "get\nvault/API_KEY\nAPI_KEY-API_KEY:API_KEY\n{NAME}\nplain\n"
	if string(b) != want {
		t.Errorf("args = %q, want %q", b, want)
	}
	if r.Lookup.Argv[2] != "vault/{name}" {
		t.Errorf("Resolve modified the configured argv: %q", r.Lookup.Argv)
	}
}

func TestLookupTimeoutKillsProcessGroup(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	groupFile := filepath.Join(dir, "group")
	childFile := filepath.Join(dir, "child")
	script := writeScript(t, dir, "slow", "echo $$ > '"+groupFile+"'\nsleep 30 &\necho $! > '"+childFile+"'\nsleep 30\n")
	r := enabled(script, "{name}")
	r.Lookup.Timeout = 200 * time.Millisecond

	start := time.Now()
	got, err := r.Resolve(context.Background(), []string{"SLOW"})
	elapsed := time.Since(start)
	var re *ResolveError
	if got != nil || !errors.As(err, &re) || re.Reason != ReasonLookupTimeout {
		t.Fatalf("Resolve = %v, %v; want lookup-timeout", got, err)
	}
	if elapsed > 5*time.Second {
		t.Errorf("timeout took %v", elapsed)
	}
	if !strings.Contains(err.Error(), `"slow"`) || !strings.Contains(err.Error(), "SLOW") {
		t.Errorf("error %q should name program and variable", err)
	}

	pgid := readPid(t, groupFile)
	child := readPid(t, childFile)
	waitGone(t, pgid, child)
}

func TestLookupCanceled(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	groupFile := filepath.Join(dir, "group")
	script := writeScript(t, dir, "slow", "echo $$ > '"+groupFile+"'\nsleep 30\n")
	r := enabled(script, "{name}")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for i := 0; i < 500; i++ {
			if _, err := os.Stat(groupFile); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	_, err := r.Resolve(ctx, []string{"X"})
	var re *ResolveError
	if !errors.As(err, &re) || re.Reason != ReasonLookupCanceled || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want lookup-canceled wrapping context.Canceled", err)
	}
	waitGone(t, readPid(t, groupFile))

	// Already canceled: nothing runs.
	marker := filepath.Join(dir, "ran")
	r = enabled(writeScript(t, dir, "mark", "touch '"+marker+"'\necho v\n"), "{name}")
	if _, err := r.Resolve(ctx, []string{"X"}); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("lookup ran under a canceled context")
	}
}

func TestLookupOutputLimits(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	script := writeScript(t, dir, "big", `case "$1" in
EXACT) head -c `+strconv.Itoa(MaxOutput)+` /dev/zero | tr '\0' x ;;
OVER) head -c `+strconv.Itoa(MaxOutput+1)+` /dev/zero | tr '\0' x ;;
HUGE) while :; do echo `+sentinel+`; done ;;
EMPTY) ;;
NEWLINE) echo ;;
NUL) printf 'a\000b' ;;
esac
`)
	r := enabled(script, "{name}")
	got, err := r.Resolve(context.Background(), []string{"EXACT"})
	if err != nil || len(got["EXACT"]) != MaxOutput {
		t.Errorf("output of exactly MaxOutput bytes: len %d, %v", len(got["EXACT"]), err)
	}
	for name, reason := range map[string]ResolveReason{
		"OVER":    ReasonLookupOutputTooLarge,
		"HUGE":    ReasonLookupOutputTooLarge,
		"EMPTY":   ReasonLookupEmpty,
		"NEWLINE": ReasonLookupEmpty,
		"NUL":     ReasonLookupOutputInvalid,
	} {
		got, err := r.Resolve(context.Background(), []string{name})
		var re *ResolveError
		if got != nil || !errors.As(err, &re) || re.Reason != reason {
			t.Errorf("%s: Resolve = %v, %v; want %s", name, got, err, reason)
			continue
		}
		if strings.Contains(err.Error(), sentinel) || strings.Contains(err.Error(), "xxxx") {
			t.Errorf("%s: error repeats output: %q", name, err)
		}
	}
}

func TestLookupStartFailure(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-such-lookup")
	r := enabled(missing, "{name}")
	_, err := r.Resolve(context.Background(), []string{"X"})
	var re *ResolveError
	if !errors.As(err, &re) || re.Reason != ReasonLookupStartFailed || re.Program != "no-such-lookup" {
		t.Fatalf("err = %v, want lookup-start-failed", err)
	}
	if strings.Contains(err.Error(), dir) {
		t.Errorf("error %q repeats argv[0]'s directory", err)
	}

	notExec := filepath.Join(dir, "not-exec")
	writeFile(t, notExec, "#!/bin/sh\necho v\n", 0o600)
	r = enabled(notExec, "{name}")
	if _, err := r.Resolve(context.Background(), []string{"X"}); !errors.As(err, &re) || re.Reason != ReasonLookupStartFailed {
		t.Errorf("non-executable: err = %v, want lookup-start-failed", err)
	}

	r = enabled("hookbox-no-such-program-on-path", "{name}")
	if _, err := r.Resolve(context.Background(), []string{"X"}); !errors.As(err, &re) || re.Reason != ReasonLookupStartFailed || !strings.Contains(err.Error(), "not found") {
		t.Errorf("not on PATH: err = %v, want lookup-start-failed", err)
	}
}

func TestLookupKilledBySignal(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	r := enabled(writeScript(t, dir, "suicide", "echo "+sentinel+"\nkill -TERM $$\n"), "{name}")
	_, err := r.Resolve(context.Background(), []string{"X"})
	var re *ResolveError
	if !errors.As(err, &re) || re.Reason != ReasonLookupFailed || re.ExitStatus != -1 || !strings.Contains(err.Error(), "signal 15") {
		t.Fatalf("err = %v, want lookup-failed by signal 15", err)
	}
	if strings.Contains(err.Error(), sentinel) {
		t.Errorf("error repeats output: %q", err)
	}
}

// Helpers.

// requireLinux declares what the lookup tests need: Linux process groups
// and waitid. Elsewhere runLookup refuses to run, so the tests cannot pass.
func requireLinux(t *testing.T) {
	t.Helper()
	testenv.Require(t, testenv.Requirement{Name: "linux", Check: func() string {
		if runtime.GOOS != "linux" {
			return "secret lookup runs only on Linux"
		}
		return ""
	}})
}

func enabled(argv ...string) Resolver {
	return Resolver{
		Lookup:    secretsconf.Lookup{State: secretsconf.Enabled, Argv: argv, Timeout: 10 * time.Second, Source: "/cfg.yaml"},
		LookupEnv: envOf(nil),
		Environ:   []string{"PATH=/usr/bin:/bin", "LC_ALL=C"},
	}
}

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	writeFile(t, path, "#!/bin/sh\n"+body, 0o755)
	if err := os.Chmod(path, 0o755); err != nil { // not subject to umask
		t.Fatal(err)
	}
	return path
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the lookup script did not record its pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		t.Fatalf("bad pid %q", b)
	}
	return pid
}

// waitGone polls until no live process is left in process group pgid and
// each listed pid is gone. A zombie counts as gone: it is dead, and reaping
// an orphan is init's job, which in some sandboxes happens late.
func waitGone(t *testing.T, pgid int, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		alive := liveGroupMembers(pgid)
		for _, pid := range pids {
			if processAlive(pid) {
				alive = append(alive, pid)
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes still alive after the lookup ended: %v (group %d)", alive, pgid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	state, _, ok := procStat(pid)
	return ok && state != "Z" && state != "X"
}

func liveGroupMembers(pgid int) []int {
	entries, _ := os.ReadDir("/proc")
	var live []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		state, group, ok := procStat(pid)
		if ok && group == pgid && state != "Z" && state != "X" {
			live = append(live, pid)
		}
	}
	return live
}

// procStat reads state and process group from /proc/<pid>/stat.
func procStat(pid int) (state string, pgrp int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // comm may contain spaces and parens
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(s[i+1:]) // state ppid pgrp ...
	if len(f) < 3 {
		return "", 0, false
	}
	pgrp, err = strconv.Atoi(f[2])
	return f[0], pgrp, err == nil
}
