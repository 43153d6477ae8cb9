package notify

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"hookbox.dev/hookbox/internal/config"
	"hookbox.dev/hookbox/internal/config/notifyconf"
)

// globalSetting is the notify layer of one global config file's text; a
// file the loader refuses says nothing.
func globalSetting(doc string) notifyconf.Setting {
	f, err := config.Parse([]byte(doc), "/cfg.yaml")
	if err != nil {
		return notifyconf.Setting{}
	}
	return f.Notify
}

func envelope(dir string) Envelope {
	code := 3
	return Envelope{SchemaVersion: 1, RunID: "hbx-test-1", Spawn: "demo", RenderDigest: "sha256:abc",
		Status: "failed", ExitCode: &code, VerdictStatus: "confirmed", ResultPath: filepath.Join(dir, "result.json")}
}

func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func enabledPlan(argv ...string) Plan {
	return Resolve(notifyconf.Setting{Present: true, Source: notifyconf.SourceFlag, Argv: argv, Timeout: 5 * time.Second})
}

func TestPayloadOnStdinAndArgv(t *testing.T) {
	dir := t.TempDir()
	bin := script(t, dir, "notifier", `cat > "$1"; printf '%s' "$2" > "$3"; printf '%s' "$4" > "$5"`)
	env := envelope(dir)
	stdinFile, argvFile, idFile := filepath.Join(dir, "stdin"), filepath.Join(dir, "argv"), filepath.Join(dir, "id")
	out := Run(context.Background(), enabledPlan(bin, stdinFile, "{payload}", argvFile, "{run_id}", idFile), env, Options{RecordDir: dir})
	if out.Status != StatusDelivered || out.Notifier != "notifier" {
		t.Fatalf("outcome %+v", out)
	}
	want, _ := json.Marshal(env)
	for _, f := range []string{stdinFile, argvFile} {
		got, err := os.ReadFile(f)
		if err != nil || string(got) != string(want) {
			t.Errorf("%s = %s (%v), want the envelope %s", filepath.Base(f), got, err, want)
		}
		var back Envelope
		if err := json.Unmarshal(got, &back); err != nil || back.SchemaVersion != 1 || back.RunID != env.RunID || *back.ExitCode != 3 {
			t.Errorf("%s does not decode to the envelope: %+v %v", filepath.Base(f), back, err)
		}
	}
	if got, _ := os.ReadFile(idFile); string(got) != env.RunID {
		t.Errorf("{run_id} gave %q", got)
	}
}

func TestEnvironmentIsAllowListed(t *testing.T) {
	dir := t.TempDir()
	bin := script(t, dir, "envdump", `env > "$1"`)
	lookup := func(k string) (string, bool) {
		m := map[string]string{"PATH": "/usr/bin:/bin", "HOME": "/root", "HBX_SECRET": "leak"}
		v, ok := m[k]
		return v, ok
	}
	out := Run(context.Background(), enabledPlan(bin, filepath.Join(dir, "env")), envelope(dir), Options{RecordDir: dir, LookupEnv: lookup})
	got, _ := os.ReadFile(filepath.Join(dir, "env"))
	if out.Status != StatusDelivered || strings.Contains(string(got), "HBX_SECRET") || !strings.Contains(string(got), "HOME=/root") {
		t.Fatalf("outcome %+v, env:\n%s", out, got)
	}
}

// gone: the process no longer exists or is a zombie awaiting its reaper.
func gone(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if data, err := os.ReadFile(path); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
				return pid
			}
		}
	}
	t.Fatalf("no pid in %s", path)
	return 0
}

func TestDeadlineEndsTheWholeGroup(t *testing.T) {
	dir := t.TempDir()
	child := script(t, dir, "stubborn", `trap '' TERM; echo $$ > "$1"; while :; do sleep 1; done`)
	bin := script(t, dir, "slow", `"$1" "$2" & echo $$ > "$3"; sleep 60`)
	plan := enabledPlan(bin, child, filepath.Join(dir, "child.pid"), filepath.Join(dir, "leader.pid"))
	plan.Timeout = 500 * time.Millisecond
	start := time.Now()
	out := Run(context.Background(), plan, envelope(dir), Options{RecordDir: dir, Grace: 300 * time.Millisecond})
	elapsed := time.Since(start)
	if out.Status != StatusTimedOut || out.Reason != ReasonDeadline {
		t.Fatalf("outcome %+v, want timed_out", out)
	}
	if elapsed > 5*time.Second {
		t.Errorf("Run took %s with a 500ms deadline and 300ms grace", elapsed)
	}
	leader, kid := readPid(t, filepath.Join(dir, "leader.pid")), readPid(t, filepath.Join(dir, "child.pid"))
	for _, pid := range []int{leader, kid} {
		deadline := time.Now().Add(2 * time.Second)
		for !gone(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if !gone(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("pid %d outlived the notifier's deadline", pid)
		}
	}
}

func TestCancellationEndsTheGroup(t *testing.T) {
	dir := t.TempDir()
	bin := script(t, dir, "slow", `echo $$ > "$1"; sleep 60`)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	out := Run(ctx, enabledPlan(bin, filepath.Join(dir, "pid")), envelope(dir), Options{RecordDir: dir, Grace: 200 * time.Millisecond})
	if out.Status != StatusFailed || out.Reason != ReasonCancelled {
		t.Fatalf("outcome %+v", out)
	}
	if pid := readPid(t, filepath.Join(dir, "pid")); !gone(pid) {
		t.Errorf("pid %d survived cancellation", pid)
	}
}

func TestStderrIsRedactedAndKeptRaw(t *testing.T) {
	dir := t.TempDir()
	const token = "hbx-notify-sentinel-7f3a"
	bin := script(t, dir, "echo-argv", `echo "failing with $* at $0" >&2; exit 4`)
	out := Run(context.Background(), enabledPlan(bin, "--token", token, "{payload}"), envelope(dir), Options{RecordDir: dir})
	if out.Status != StatusFailed || out.Reason != ReasonExitNonZero || out.ExitCode == nil || *out.ExitCode != 4 {
		t.Fatalf("outcome %+v", out)
	}
	data, _ := json.Marshal(out)
	if strings.Contains(string(data), token) || strings.Contains(out.Describe(), token) {
		t.Fatalf("the token leaked into the outcome: %s", data)
	}
	if strings.Contains(out.StderrSnippet, dir) {
		t.Errorf("argv[0]'s full path leaked: %s", out.StderrSnippet)
	}
	if !strings.Contains(out.StderrSnippet, "<arg 2>") || !strings.Contains(out.StderrSnippet, "<echo-argv>") {
		t.Errorf("snippet %q should name the redacted argument and the notifier", out.StderrSnippet)
	}
	raw, err := os.ReadFile(out.StderrPath)
	if err != nil || !strings.Contains(string(raw), token) {
		t.Fatalf("raw stderr lacks the token: %v %q", err, raw)
	}
	if fi, _ := os.Stat(out.StderrPath); fi.Mode().Perm() != 0o600 {
		t.Errorf("notify.stderr mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestRedactLongestFirst(t *testing.T) {
	got := Redact("abcdefgh abcd ab /x/y/tool", []string{"/x/y/tool", "abcd", "abcdefgh", "ab"})
	if want := "<arg 2> <arg 1> ab <tool>"; got != want {
		t.Errorf("Redact = %q, want %q", got, want)
	}
}

func TestStringFormRefused(t *testing.T) {
	for _, s := range []string{"post | tee log", "post && echo ok", "post $X", "post > out"} {
		g := globalSetting("notify:\n  argv: " + strconvQuote(s) + "\n")
		if g.Reason != notifyconf.ReasonArgvRefused || !strings.Contains(g.Message, "argv list") {
			t.Errorf("%q: %+v, want argv-refused with the migration diagnostic", s, g)
		}
		f := notifyconf.FlagSetting(true, s, 0, false)
		if f.Reason != notifyconf.ReasonArgvRefused {
			t.Errorf("--notify %q: %+v", s, f)
		}
		out := Run(context.Background(), Resolve(f), envelope(t.TempDir()), Options{})
		if out.Status != StatusFailed || out.Reason != notifyconf.ReasonArgvRefused {
			t.Errorf("--notify %q: outcome %+v", s, out)
		}
	}
	ok := globalSetting("notify:\n  argv: \"/usr/bin/post --to 'a b' {payload}\"\n")
	if ok.Reason != "" || strings.Join(ok.Argv, "|") != "/usr/bin/post|--to|a b|{payload}" {
		t.Errorf("plain string form: %+v", ok)
	}
	for _, argv := range []string{`["/usr/bin/post", "--data={payload}"]`, `["{payload}"]`, `["/usr/bin/post", "x{run_id}"]`} {
		if s := notifyconf.FlagSetting(true, argv, 0, false); s.Reason != notifyconf.ReasonPlaceholderEmbedded {
			t.Errorf("%s: %+v, want placeholder-embedded", argv, s)
		}
	}
	if s := globalSetting("notify: {argv: [/usr/bin/post, 'id={run_id}']}"); s.Reason != notifyconf.ReasonPlaceholderEmbedded {
		t.Errorf("embedded placeholder in config: %+v", s)
	}
}

func strconvQuote(s string) string { return strconv.Quote(s) }

func TestPrecedence(t *testing.T) {
	off := false
	flag := notifyconf.Setting{Present: true, Source: notifyconf.SourceFlag, Argv: []string{"/bin/flag"}}
	flagOff := notifyconf.Setting{Present: true, Source: notifyconf.SourceFlag, Enabled: &off}
	spec := notifyconf.Setting{Present: true, Source: notifyconf.SourceSpec, Argv: []string{"/bin/spec"}, Timeout: time.Second}
	specOff := notifyconf.Setting{Present: true, Source: notifyconf.SourceSpec, Enabled: &off, Argv: []string{"/bin/spec"}}
	global := notifyconf.Setting{Present: true, Source: notifyconf.SourceConfig, Argv: []string{"/bin/global"}}
	globalEmpty := notifyconf.Setting{Present: true, Source: notifyconf.SourceConfig}
	badSpec := notifyconf.Setting{Present: true, Source: notifyconf.SourceSpec, Reason: notifyconf.ReasonConfigInvalid}
	none := notifyconf.Setting{}
	for _, tc := range []struct {
		name                  string
		flag, spec, global    notifyconf.Setting
		source, argv0, reason string
		enabled, invalid      bool
	}{
		{"nothing", none, none, none, SourceDefault, "", ReasonNotConfigured, false, false},
		{"global only", none, none, global, notifyconf.SourceConfig, "/bin/global", "", true, false},
		{"spec over global", none, spec, global, notifyconf.SourceSpec, "/bin/spec", "", true, false},
		{"flag over all", flag, spec, global, notifyconf.SourceFlag, "/bin/flag", "", true, false},
		{"flag off over spec", flagOff, spec, global, notifyconf.SourceFlag, "", ReasonNotEnabled, false, false},
		{"spec off over global", none, specOff, global, notifyconf.SourceSpec, "/bin/spec", ReasonNotEnabled, false, false},
		{"global empty argv", none, none, globalEmpty, notifyconf.SourceConfig, "", ReasonEmptyArgv, false, false},
		{"invalid spec is not replaced by global", none, badSpec, global, notifyconf.SourceSpec, "", notifyconf.ReasonConfigInvalid, false, true},
		{"flag over invalid spec", flag, badSpec, global, notifyconf.SourceFlag, "/bin/flag", "", true, false},
	} {
		p := Resolve(tc.flag, tc.spec, tc.global)
		argv0 := ""
		if len(p.Argv) > 0 {
			argv0 = p.Argv[0]
		}
		if p.Source != tc.source || argv0 != tc.argv0 || p.Reason != tc.reason || p.Enabled != tc.enabled || p.Invalid != tc.invalid {
			t.Errorf("%s: %+v", tc.name, p)
		}
		if p.Timeout <= 0 {
			t.Errorf("%s: no timeout", tc.name)
		}
		if tc.reason == ReasonEmptyArgv && p.Warning == "" {
			t.Errorf("%s: an empty argv must warn", tc.name)
		}
	}
}

func TestDisabledForms(t *testing.T) {
	for _, doc := range []string{"secrets: {}\n", "notify:\n  enabled: false\n  argv: [/bin/true]\n", "notify: {argv: []}\n", ""} {
		p := Resolve(globalSetting(doc))
		out := Run(context.Background(), p, envelope(t.TempDir()), Options{})
		if out.Status != StatusDisabled {
			t.Errorf("%q: %+v", doc, out)
		}
	}
}

func TestFilter(t *testing.T) {
	dir := t.TempDir()
	s := globalSetting("notify:\n  argv: [/bin/true]\n  filter: {statuses: [failed, timed_out], spawns: [demo]}\n")
	if s.Reason != "" {
		t.Fatal(s.Message)
	}
	env := envelope(dir)
	if out := Run(context.Background(), Resolve(s), env, Options{RecordDir: dir}); out.Status != StatusDelivered {
		t.Errorf("selected run: %+v", out)
	}
	env.Status = "completed"
	if out := Run(context.Background(), Resolve(s), env, Options{RecordDir: dir}); out.Status != StatusFiltered || out.Reason != ReasonStatusFiltered {
		t.Errorf("status filter: %+v", out)
	}
	env.Status, env.Spawn = "failed", "other"
	if out := Run(context.Background(), Resolve(s), env, Options{RecordDir: dir}); out.Status != StatusFiltered || out.Reason != ReasonSpawnFiltered {
		t.Errorf("spawn filter: %+v", out)
	}
}

func TestMalformedConfigIsAnOutcome(t *testing.T) {
	for _, doc := range []string{"notify: [a]", "notify: {argv: [/bin/x], bogus: 1}", "notify: {timeout: 5}", "notify: {enabled: yes please}"} {
		s := globalSetting(doc)
		out := Run(context.Background(), Resolve(s), envelope(t.TempDir()), Options{})
		if out.Status != StatusFailed || out.Reason != notifyconf.ReasonConfigInvalid {
			t.Errorf("%q: %+v", doc, out)
		}
	}
	if out := Run(context.Background(), enabledPlan("/nonexistent/notifier"), envelope(t.TempDir()), Options{RecordDir: t.TempDir()}); out.Status != StatusFailed || out.Reason != ReasonStartFailed {
		t.Errorf("missing program: %+v", out)
	}
}

func FuzzParseNode(f *testing.F) {
	f.Add("notify: {argv: [/bin/x, '{payload}'], timeout: 5s, filter: {statuses: [failed]}}")
	f.Add("notify: {argv: 'a | b'}")
	f.Fuzz(func(t *testing.T, doc string) {
		var n yaml.Node
		_ = yaml.Unmarshal([]byte(doc), &n)
		s := globalSetting(doc)
		if s.Reason == "" {
			if r, _ := notifyconf.CheckArgv(s.Argv); r != "" {
				t.Fatalf("accepted argv %q with %s", s.Argv, r)
			}
		}
	})
}
