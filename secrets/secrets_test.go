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

	"hookbox.dev/hookbox/internal/testenv"
)

const sentinel = "HBX-SENTINEL-7f3a9c"

func TestValidName(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"ANTHROPIC_API_KEY", true},
		{"_", true},
		{"_x9", true},
		{"a", true},
		{"Mixed_Case_123", true},
		{strings.Repeat("A", MaxNameLen), true},
		{strings.Repeat("A", MaxNameLen+1), false},
		{"", false},
		{"1ABC", false},
		{"API-KEY", false},
		{"API KEY", false},
		{"API.KEY", false},
		{"A=B", false},
		{"KEY\x00", false},
		{"ÄPI_KEY", false},
		{"KEY_ÿ", false},
		{"{name}", false},
	}
	for _, tt := range tests {
		if got := ValidName(tt.name); got != tt.want {
			t.Errorf("ValidName(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestCheckNames(t *testing.T) {
	long := strings.Repeat("B", MaxNameLen+100)
	tests := []struct {
		desc   string
		names  []string
		reason Refusal // empty: accepted
		index  int
		quoted string // must appear in the message
	}{
		{desc: "nil block", names: nil},
		{desc: "valid", names: []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "_X"}},
		{desc: "case differs", names: []string{"key", "KEY"}},
		{desc: "leading digit", names: []string{"GOOD", "9LIVES"}, reason: RefusalNameInvalid, index: 1, quoted: `"9LIVES"`},
		{desc: "dash", names: []string{"API-KEY"}, reason: RefusalNameInvalid, index: 0, quoted: `"API-KEY"`},
		{desc: "empty", names: []string{"A", "B", ""}, reason: RefusalNameInvalid, index: 2, quoted: `""`},
		{desc: "unicode", names: []string{"CLÉ"}, reason: RefusalNameInvalid, index: 0, quoted: strconv.Quote("CLÉ")},
		{desc: "control char", names: []string{"A\nB"}, reason: RefusalNameInvalid, index: 0, quoted: `"A\nB"`},
		{desc: "too long", names: []string{long}, reason: RefusalNameInvalid, index: 0, quoted: strconv.Quote(long[:64])},
		{desc: "duplicate", names: []string{"A", "B", "A"}, reason: RefusalNameDuplicate, index: 2, quoted: `"A"`},
		{desc: "bad among good is total", names: []string{"A", "B", "C-D", "E"}, reason: RefusalNameInvalid, index: 2, quoted: `"C-D"`},
		{desc: "first problem wins", names: []string{"A", "A", "1"}, reason: RefusalNameDuplicate, index: 1, quoted: `"A"`},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			err := CheckNames(tt.names)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("CheckNames(%q) = %v, want nil", tt.names, err)
				}
				return
			}
			var re *RefusedError
			if !errors.As(err, &re) {
				t.Fatalf("CheckNames(%q) = %v, want *RefusedError", tt.names, err)
			}
			if re.Reason != tt.reason || re.Index != tt.index {
				t.Errorf("reason, index = %s, %d; want %s, %d", re.Reason, re.Index, tt.reason, tt.index)
			}
			msg := err.Error()
			if !strings.Contains(msg, fmt.Sprintf("secrets[%d]", tt.index)) || !strings.Contains(msg, tt.quoted) {
				t.Errorf("message %q should name secrets[%d] and %s", msg, tt.index, tt.quoted)
			}
			if tt.reason == RefusalNameInvalid && !strings.Contains(msg, "letters, digits and underscores") {
				t.Errorf("message %q should say what a valid name looks like", msg)
			}
			if strings.Contains(msg, long) {
				t.Errorf("message repeats an over-long name in full")
			}
		})
	}
}

func TestParseLookupRefusals(t *testing.T) {
	tests := []struct {
		desc   string
		yaml   string
		reason Refusal
		index  int
		want   string // substring of Message
	}{
		{"not yaml", "secrets: [\n", RefusalConfigInvalid, -1, "line"},
		{"unknown anchor", "secrets: *nope\n", RefusalConfigInvalid, -1, "not valid YAML"},
		{"top level list", "- a\n", RefusalConfigInvalid, -1, "top level must be a mapping"},
		{"two documents", "a: 1\n---\nsecrets: {}\n", RefusalConfigInvalid, -1, "one YAML document"},
		{"secrets not mapping", "secrets: [ANTHROPIC_API_KEY]\n", RefusalConfigInvalid, -1, "secrets must be a mapping"},
		{"lookup not mapping", "secrets:\n  lookup: [a, '{name}']\n", RefusalConfigInvalid, -1, "secrets.lookup must be a mapping"},
		{"duplicate secrets", "secrets: {}\nsecrets: {}\n", RefusalConfigInvalid, -1, "twice"},
		{"duplicate field", "secrets:\n  lookup:\n    argv: [a, '{name}']\n    argv: [b, '{name}']\n", RefusalConfigInvalid, -1, "secrets.lookup.argv is given twice"},
		{"unknown lookup field", "secrets:\n  lookup:\n    argv: [a, '{name}']\n    tiemout: 1s\n", RefusalUnknownField, -1, "line 4, column 5"},
		{"unknown secrets field", "secrets:\n  lookpu:\n    argv: [a, '{name}']\n", RefusalUnknownField, -1, "allowed fields: lookup"},
		{"non-string key", "secrets:\n  lookup:\n    1: x\n", RefusalUnknownField, -1, "an integer"},
		{"merge key", "secrets:\n  lookup:\n    <<: {argv: [a, '{name}']}\n", RefusalUnknownField, -1, "merge key"},
		{"argv string", "secrets:\n  lookup:\n    argv: pass show {name}\n", RefusalArgvNotList, -1, "never a string"},
		{"argv mapping", "secrets:\n  lookup:\n    argv: {a: b}\n", RefusalArgvNotList, -1, "a mapping"},
		{"argv int", "secrets:\n  lookup:\n    argv: 3\n", RefusalArgvNotList, -1, "an integer"},
		{"argv missing", "secrets:\n  lookup:\n    timeout: 5s\n", RefusalArgvEmpty, -1, "missing"},
		{"argv null", "secrets:\n  lookup:\n    argv:\n", RefusalArgvEmpty, -1, "missing"},
		{"argv empty", "secrets:\n  lookup:\n    argv: []\n", RefusalArgvEmpty, -1, "empty"},
		{"argv0 empty", "secrets:\n  lookup:\n    argv: ['', '{name}']\n", RefusalArgvEmpty, 0, "argv[0]"},
		{"argv element mapping", "secrets:\n  lookup:\n    argv: [pass, show, {a: b}]\n", RefusalArgvElementNotString, 2, "argv[2] is a mapping"},
		{"argv element int", "secrets:\n  lookup:\n    argv: [pass, 1, '{name}']\n", RefusalArgvElementNotString, 1, "argv[1] is an integer"},
		{"argv element null", "secrets:\n  lookup:\n    argv: [pass, ~]\n", RefusalArgvElementNotString, 1, "argv[1] is null"},
		{"argv element custom tag", "secrets:\n  lookup:\n    argv: [!x pass, '{name}']\n", RefusalArgvElementNotString, 0, "custom tag"},
		{"argv0 placeholder", "secrets:\n  lookup:\n    argv: ['/bin/{name}', '{name}']\n", RefusalArgv0HasPlaceholder, 0, "argv[0] contains {name}"},
		{"argv0 relative", "secrets:\n  lookup:\n    argv: [bin/pass, '{name}']\n", RefusalArgv0Relative, 0, "relative path"},
		{"argv0 tilde", "secrets:\n  lookup:\n    argv: [~/bin/pass, '{name}']\n", RefusalArgv0Relative, 0, "relative path"},
		{"placeholder missing", "secrets:\n  lookup:\n    argv: [/usr/bin/pass, show]\n", RefusalPlaceholderMissing, -1, "{name}"},
		{"placeholder missing, argv0 only", "secrets:\n  lookup:\n    argv: [/usr/bin/pass]\n", RefusalPlaceholderMissing, -1, "{name}"},
		{"enabled string", "secrets:\n  lookup:\n    enabled: \"true\"\n    argv: [a, '{name}']\n", RefusalEnabledNotBool, -1, "a string"},
		{"enabled yes", "secrets:\n  lookup:\n    enabled: yes\n    argv: [a, '{name}']\n", RefusalEnabledNotBool, -1, "true or false"},
		{"enabled int", "secrets:\n  lookup:\n    enabled: 1\n    argv: [a, '{name}']\n", RefusalEnabledNotBool, -1, "an integer"},
		{"enabled null", "secrets:\n  lookup:\n    enabled:\n    argv: [a, '{name}']\n", RefusalEnabledNotBool, -1, "null"},
		{"timeout int", "secrets:\n  lookup:\n    argv: [a, '{name}']\n    timeout: 10\n", RefusalTimeoutInvalid, -1, "an integer"},
		{"timeout text", "secrets:\n  lookup:\n    argv: [a, '{name}']\n    timeout: soon\n", RefusalTimeoutInvalid, -1, "not a valid duration"},
		{"timeout zero", "secrets:\n  lookup:\n    argv: [a, '{name}']\n    timeout: 0s\n", RefusalTimeoutInvalid, -1, "out of range"},
		{"timeout negative", "secrets:\n  lookup:\n    argv: [a, '{name}']\n    timeout: -1s\n", RefusalTimeoutInvalid, -1, "out of range"},
		{"timeout too long", "secrets:\n  lookup:\n    argv: [a, '{name}']\n    timeout: 10m1s\n", RefusalTimeoutInvalid, -1, "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			l := ParseLookup([]byte(tt.yaml), "/cfg.yaml")
			if l.State != Refused || l.Reason != tt.reason || l.Index != tt.index {
				t.Fatalf("got state %s reason %q index %d (%s); want refused %q index %d", l.State, l.Reason, l.Index, l.Message, tt.reason, tt.index)
			}
			if l.Argv != nil || l.Timeout != 0 {
				t.Errorf("refused lookup carries argv %q / timeout %v; refusal must be total", l.Argv, l.Timeout)
			}
			if !strings.Contains(l.Message, tt.want) {
				t.Errorf("Message %q lacks %q", l.Message, tt.want)
			}
			var re *RefusedError
			if err := l.Err(); !errors.As(err, &re) || re.Reason != tt.reason {
				t.Fatalf("Err() = %v, want *RefusedError %s", err, tt.reason)
			}
			if msg := l.Err().Error(); !strings.Contains(msg, "/cfg.yaml") || !strings.Contains(msg, string(tt.reason)) {
				t.Errorf("Err() %q should name the file and the reason", msg)
			}
		})
	}
}

func TestParseLookupNotConfiguredAndDisabled(t *testing.T) {
	tests := []struct {
		desc string
		yaml string
		want LookupState
	}{
		{"empty file", "", NotConfigured},
		{"comments only", "# nothing here\n", NotConfigured},
		{"null document", "~\n", NotConfigured},
		{"no secrets key", "engine: claude\n", NotConfigured},
		{"secrets null", "secrets:\n", NotConfigured},
		{"secrets empty", "secrets: {}\n", NotConfigured},
		{"lookup null", "secrets:\n  lookup:\n", NotConfigured},
		{"disabled", "secrets:\n  lookup:\n    enabled: false\n    argv: [/usr/bin/pass, show, 'hookbox/{name}']\n", Disabled},
		{"disabled with unfinished argv", "secrets:\n  lookup:\n    enabled: false\n    argv: pass show\n", Disabled},
		{"disabled only", "secrets:\n  lookup:\n    enabled: false\n", Disabled},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			l := ParseLookup([]byte(tt.yaml), "/cfg.yaml")
			if l.State != tt.want {
				t.Fatalf("state = %s (%s %s), want %s", l.State, l.Reason, l.Message, tt.want)
			}
			if l.Reason != "" || l.Message != "" || l.Err() != nil {
				t.Errorf("%s must carry no reason; got %q %q", l.State, l.Reason, l.Message)
			}
			if l.Argv != nil {
				t.Errorf("%s carries argv %q", l.State, l.Argv)
			}
			if l.Source != "/cfg.yaml" {
				t.Errorf("Source = %q", l.Source)
			}
		})
	}
}

func TestParseLookupEnabled(t *testing.T) {
	tests := []struct {
		desc    string
		yaml    string
		argv    []string
		timeout time.Duration
	}{
		{"default timeout", "secrets:\n  lookup:\n    argv: [\"/usr/bin/pass\", \"show\", \"hookbox/{name}\"]\n",
			[]string{"/usr/bin/pass", "show", "hookbox/{name}"}, DefaultTimeout},
		{"explicit", "other: 1\nsecrets:\n  lookup:\n    enabled: true\n    argv:\n      - pass\n      - '{name}'\n    timeout: 1m30s\n",
			[]string{"pass", "{name}"}, 90 * time.Second},
		{"max timeout", "secrets:\n  lookup:\n    argv: [op, read, 'op://v/{name}/x']\n    timeout: 10m\n",
			[]string{"op", "read", "op://v/{name}/x"}, MaxTimeout},
		{"alias", "base: &cmd [/bin/lookup, '{name}']\nsecrets:\n  lookup:\n    argv: *cmd\n",
			[]string{"/bin/lookup", "{name}"}, DefaultTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			l := ParseLookup([]byte(tt.yaml), "/cfg.yaml")
			if l.State != Enabled {
				t.Fatalf("state = %s (%s: %s), want enabled", l.State, l.Reason, l.Message)
			}
			if fmt.Sprint(l.Argv) != fmt.Sprint(tt.argv) || len(l.Argv) != len(tt.argv) {
				t.Errorf("argv = %q, want %q", l.Argv, tt.argv)
			}
			if l.Timeout != tt.timeout {
				t.Errorf("timeout = %v, want %v", l.Timeout, tt.timeout)
			}
			if l.Reason != "" || l.Message != "" {
				t.Errorf("enabled lookup carries reason %q %q", l.Reason, l.Message)
			}
		})
	}
}

func TestLoadLookup(t *testing.T) {
	dir := t.TempDir()

	missing := filepath.Join(dir, "absent.yaml")
	l, err := LoadLookup(missing)
	if err != nil || l.State != NotConfigured || l.Reason != "" || l.Source != missing {
		t.Errorf("missing file: %+v, %v; want NotConfigured without error", l, err)
	}

	empty := filepath.Join(dir, "empty.yaml")
	writeFile(t, empty, "", 0o600)
	if l, err := LoadLookup(empty); err != nil || l.State != NotConfigured || l.Reason != "" {
		t.Errorf("empty file: %+v, %v; want NotConfigured", l, err)
	}

	good := filepath.Join(dir, "good.yaml")
	writeFile(t, good, "secrets:\n  lookup:\n    argv: [/usr/bin/pass, show, 'hookbox/{name}']\n    timeout: 3s\n", 0o600)
	if l, err := LoadLookup(good); err != nil || l.State != Enabled || l.Timeout != 3*time.Second || l.Source != good {
		t.Errorf("good file: %+v, %v", l, err)
	}

	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "secrets:\n  lookup:\n    argv: \""+sentinel+" {name}\"\n", 0o600)
	l, err = LoadLookup(bad)
	if err != nil || l.State != Refused || l.Reason != RefusalArgvNotList {
		t.Errorf("bad file: %+v, %v; want refused argv-not-list without error", l, err)
	}

	big := filepath.Join(dir, "big.yaml")
	writeFile(t, big, "# "+strings.Repeat("x", maxConfigSize)+"\n", 0o600)
	if l, err := LoadLookup(big); err != nil || l.State != Refused || l.Reason != RefusalConfigInvalid {
		t.Errorf("oversized file: %+v, %v; want refused config-invalid", l.State, err)
	}

	if _, err := LoadLookup(dir); err == nil {
		t.Errorf("LoadLookup(directory) succeeded; want a read error")
	}
	if _, err := LoadLookup(""); !errors.Is(err, ErrNoConfigPath) {
		t.Errorf("LoadLookup(\"\") = %v, want ErrNoConfigPath", err)
	}
}

// Configured values must never reach a refusal's Message or Error: the
// sentinel is planted in every place a value can sit.
func TestRefusalsNeverRepeatConfiguredValues(t *testing.T) {
	s := sentinel
	configs := []string{
		"secrets:\n  lookup:\n    argv: [" + s + ", show]\n",
		"secrets:\n  lookup:\n    argv: [/usr/bin/" + s + ", show, " + s + "]\n",
		"secrets:\n  lookup:\n    argv: ['/bin/{name}" + s + "', '{name}']\n",
		"secrets:\n  lookup:\n    argv: [" + s + "/x, '{name}']\n",
		"secrets:\n  lookup:\n    argv: ''\n",
		"secrets:\n  lookup:\n    argv: '" + s + " {name}'\n",
		"secrets:\n  lookup:\n    argv: {" + s + ": " + s + "}\n",
		"secrets:\n  lookup:\n    argv: [" + s + ", {" + s + ": 1}, '{name}']\n",
		"secrets:\n  lookup:\n    argv: [" + s + ", !" + s + " x, '{name}']\n",
		"secrets:\n  lookup:\n    argv: [/a, '{name}']\n    timeout: " + s + "\n",
		"secrets:\n  lookup:\n    argv: [/a, '{name}']\n    timeout: 1" + s + "\n",
		"secrets:\n  lookup:\n    enabled: " + s + "\n    argv: [/a, '{name}']\n",
		"secrets:\n  lookup:\n    " + s + ": x\n",
		"secrets:\n  " + s + ": x\n",
		"secrets:\n  lookup:\n    argv: *" + s + "\n",
		"secrets:\n  lookup:\n    argv: [" + s + ", '{name}'\n",
		"secrets: \"" + s + "\"\n",
		s + "\n",
		"secrets:\n  lookup:\n    argv: [" + s + "]\n---\n" + s + ": 1\n",
	}
	for _, c := range configs {
		l := ParseLookup([]byte(c), "/cfg.yaml")
		if l.State != Refused {
			t.Errorf("config %q: state %s, want refused", c, l.State)
			continue
		}
		if strings.Contains(l.Message, s) || strings.Contains(l.Err().Error(), s) {
			t.Errorf("config %q: refusal repeats a configured value: %q", c, l.Err())
		}
	}
}

func TestDefaultConfigPath(t *testing.T) {
	tests := []struct {
		desc    string
		env     map[string]string
		want    string
		wantErr bool
	}{
		{"explicit wins", map[string]string{"HOOKBOX_CONFIG": "/etc/hb/c.yaml", "XDG_CONFIG_HOME": "/x", "HOME": "/h"}, "/etc/hb/c.yaml", false},
		{"explicit cleaned", map[string]string{"HOOKBOX_CONFIG": "/etc//hb/../hb/c.yaml"}, "/etc/hb/c.yaml", false},
		{"explicit relative", map[string]string{"HOOKBOX_CONFIG": "c.yaml", "HOME": "/h"}, "", true},
		{"xdg", map[string]string{"XDG_CONFIG_HOME": "/x", "HOME": "/h"}, "/x/hookbox/config.yaml", false},
		{"xdg relative ignored", map[string]string{"XDG_CONFIG_HOME": "x", "HOME": "/h"}, "/h/.config/hookbox/config.yaml", false},
		{"empty counts as unset", map[string]string{"HOOKBOX_CONFIG": "", "XDG_CONFIG_HOME": "", "HOME": "/h"}, "/h/.config/hookbox/config.yaml", false},
		{"home", map[string]string{"HOME": "/home/u"}, "/home/u/.config/hookbox/config.yaml", false},
		{"nothing", map[string]string{}, "", true},
		{"relative home", map[string]string{"HOME": "u"}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			got, err := DefaultConfigPath(func(k string) string { return tt.env[k] })
			if tt.wantErr {
				if !errors.Is(err, ErrNoConfigPath) {
					t.Fatalf("got %q, %v; want ErrNoConfigPath", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// Resolution without running a process.

func TestResolveWithoutLookup(t *testing.T) {
	env := envOf(map[string]string{"SET": "v", "EMPTY": ""})
	tests := []struct {
		desc    string
		lookup  Lookup
		reason  ResolveReason
		refusal Refusal
		want    []string
	}{
		{"not configured", Lookup{State: NotConfigured, Source: "/c.yaml"}, ReasonNotSet, "", []string{"MISSING", "not set in the host environment", "no secret lookup is configured in /c.yaml"}},
		{"disabled", Lookup{State: Disabled, Source: "/c.yaml"}, ReasonNotSet, "", []string{"MISSING", "lookup is disabled in /c.yaml"}},
		{"refused", ParseLookup([]byte("secrets:\n  lookup:\n    argv: []\n"), "/c.yaml"), ReasonLookupRefused, RefusalArgvEmpty, []string{"MISSING", "refused (argv-empty)", "/c.yaml"}},
		{"hand-built enabled without placeholder", Lookup{State: Enabled, Argv: []string{"/bin/echo", sentinel}}, ReasonLookupRefused, RefusalPlaceholderMissing, []string{"refused (placeholder-missing)"}},
		{"hand-built enabled with bad timeout", Lookup{State: Enabled, Argv: []string{"/bin/echo", "{name}"}, Timeout: time.Hour}, ReasonLookupRefused, RefusalTimeoutInvalid, []string{"refused (timeout-invalid)"}},
		{"unknown state", Lookup{State: LookupState(42)}, ReasonLookupRefused, RefusalConfigInvalid, []string{"MISSING"}},
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
	r := Resolver{Lookup: Lookup{State: Refused, Reason: RefusalArgvEmpty}, LookupEnv: env}
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
		var re *RefusedError
		if got != nil || !errors.As(err, &re) {
			t.Errorf("Resolve(%q) = %v, %v; want nil map and *RefusedError", names, got, err)
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

// FuzzParseLookup checks that no input panics the parser, that refusal is
// total, and that a refusal never repeats the sentinel planted in the seeds.
func FuzzParseLookup(f *testing.F) {
	s := sentinel
	seeds := []string{
		"",
		"secrets:\n  lookup:\n    argv: [/usr/bin/pass, show, 'hookbox/{name}']\n    timeout: 10s\n",
		"secrets:\n  lookup:\n    enabled: false\n",
		"secrets:\n  lookup:\n    argv: [" + s + ", show]\n",
		"secrets:\n  lookup:\n    argv: ['/bin/{name}" + s + "', '{name}']\n",
		"secrets:\n  lookup:\n    argv: '" + s + " {name}'\n",
		"secrets:\n  lookup:\n    argv: [" + s + ", {" + s + ": 1}]\n",
		"secrets:\n  lookup:\n    argv: [/a, '{name}']\n    timeout: " + s + "\n",
		"secrets:\n  lookup:\n    enabled: " + s + "\n",
		"secrets:\n  lookup:\n    " + s + ": 1\n",
		"secrets:\n  lookup:\n    argv: *" + s + "\n",
		"a: &" + s + " [" + s + ", '{name}']\nsecrets:\n  lookup:\n    argv: *" + s + "\n",
		"secrets: [" + s + "\n",
		"secrets:\n  lookup:\n    argv: [" + s + ", !" + s + " '{name}']\n",
		"--- " + s + "\n--- " + s + "\n",
	}
	for _, seed := range seeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l := ParseLookup(data, "/fuzz.yaml")
		switch l.State {
		case Refused:
			if l.Reason == "" || l.Message == "" || l.Argv != nil {
				t.Fatalf("refusal without reason/message or with argv: %+v", l)
			}
			if strings.Contains(l.Message, s) || strings.Contains(l.Err().Error(), s) {
				t.Fatalf("refusal repeats a configured value: %q", l.Message)
			}
		case Enabled:
			if l.Reason != "" || l.Message != "" {
				t.Fatalf("enabled with reason: %+v", l)
			}
			if reason, _, _ := checkArgv(l.Argv); reason != "" {
				t.Fatalf("enabled with invalid argv (%s)", reason)
			}
			if l.Timeout <= 0 || l.Timeout > MaxTimeout {
				t.Fatalf("enabled with timeout %v", l.Timeout)
			}
		case NotConfigured, Disabled:
			if l.Reason != "" || l.Message != "" || l.Argv != nil || l.Err() != nil {
				t.Fatalf("%s with reason or argv: %+v", l.State, l)
			}
		default:
			t.Fatalf("unknown state %d", l.State)
		}
	})
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
		Lookup:    Lookup{State: Enabled, Argv: argv, Timeout: 10 * time.Second, Source: "/cfg.yaml"},
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
