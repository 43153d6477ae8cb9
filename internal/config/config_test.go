package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/config/notifyconf"
	"hookbox.dev/hookbox/internal/config/secretsconf"
)

const sentinel = "HBX-SENTINEL-7f3a9c"

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestParseRefusesTheDocument(t *testing.T) {
	tests := []struct {
		desc      string
		yaml      string
		line, col int
		want      string // substring of the message
	}{
		{"not yaml", "secrets: [\n", 1, 0, "not valid YAML"},
		{"unknown anchor", "secrets: *nope\n", 0, 0, "not valid YAML"},
		{"top level list", "- a\n", 1, 1, "top level must be a mapping with secrets and notify; it is a list"},
		{"two documents", "notify: {}\n---\nsecrets: {}\n", 2, 1, "one YAML document"},
		{"duplicate secrets", "secrets: {}\nsecrets: {}\n", 2, 1, "secrets is given twice (first at line 1)"},
		{"duplicate notify", "notify: {}\nsecrets: {}\nnotify: {}\n", 3, 1, "notify is given twice"},
		{"unknown key", "secrets: {}\nnotfy: {argv: [/bin/x]}\n", 2, 1, "unknown top-level key; the keys are secrets and notify"},
		{"anchor holder", "base: &cmd [/bin/lookup, '{name}']\nsecrets:\n  lookup:\n    argv: *cmd\n", 1, 1, "unknown top-level key"},
		{"non-string key", "1: x\n", 1, 1, "a top-level key is an integer"},
		{"too large", "# " + strings.Repeat("x", maxFileSize) + "\n", 0, 0, "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml), "/cfg.yaml")
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse = %v, want *Error", err)
			}
			if e.Path != "/cfg.yaml" || e.Line != tt.line || e.Column != tt.col || !strings.Contains(e.Message, tt.want) {
				t.Errorf("got %s:%d:%d %q; want line %d col %d and %q", e.Path, e.Line, e.Column, e.Message, tt.line, tt.col, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "/cfg.yaml:") {
				t.Errorf("Error() %q should start with the file", err)
			}
		})
	}
}

func TestParseSaysNothing(t *testing.T) {
	for _, doc := range []string{"", "# nothing\n", "~\n", "secrets:\nnotify:\n", "secrets: {}\n"} {
		f, err := Parse([]byte(doc), "/cfg.yaml")
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if f.Secrets.State != secretsconf.NotConfigured || f.Secrets.Source != "/cfg.yaml" || f.Notify.Present {
			t.Errorf("%q: %+v", doc, f)
		}
	}
}

func TestParseHandsBlocksToTheirOwners(t *testing.T) {
	f, err := Parse([]byte("secrets:\n  lookup:\n    argv: [/usr/bin/pass, show, 'hookbox/{name}']\n    timeout: 3s\nnotify:\n  argv: [/bin/post, '{payload}']\n"), "/cfg.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if f.Secrets.State != secretsconf.Enabled || f.Secrets.Timeout != 3*time.Second || f.Secrets.Source != "/cfg.yaml" {
		t.Errorf("secrets: %+v", f.Secrets)
	}
	if !f.Notify.Present || f.Notify.Source != notifyconf.SourceConfig || f.Notify.Reason != "" || f.Notify.Argv[0] != "/bin/post" {
		t.Errorf("notify: %+v", f.Notify)
	}
	// A malformed block is its owner's refusal, not an error of the file.
	f, err = Parse([]byte("secrets:\n  lookup:\n    tiemout: 1s\nnotify: {argv: [/bin/x], bogus: 1}\n"), "/cfg.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if f.Secrets.State != secretsconf.Refused || f.Secrets.Reason != secretsconf.RefusalUnknownField || !strings.Contains(f.Secrets.Message, "line 3, column 5") {
		t.Errorf("secrets: %+v", f.Secrets)
	}
	if f.Notify.Reason != notifyconf.ReasonConfigInvalid || !strings.Contains(f.Notify.Message, "/cfg.yaml: ") || !strings.Contains(f.Notify.Message, "line 4, column 26") {
		t.Errorf("notify: %+v", f.Notify)
	}
}

// Configured values must never reach an error or a refusal: the sentinel is
// planted in every place a value can sit.
func TestMessagesNeverRepeatConfiguredValues(t *testing.T) {
	s := sentinel
	configs := []string{
		s + ": 1\n",
		"notify: {}\n" + s + ": 1\n",
		"1: " + s + "\n",
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
		f, err := Parse([]byte(c), "/cfg.yaml")
		if err != nil {
			if strings.Contains(err.Error(), s) {
				t.Errorf("config %q: error repeats a configured value: %q", c, err)
			}
			continue
		}
		if f.Secrets.State != secretsconf.Refused {
			t.Errorf("config %q: state %s, want refused", c, f.Secrets.State)
			continue
		}
		if strings.Contains(f.Secrets.Message, s) || strings.Contains(f.Secrets.Err().Error(), s) {
			t.Errorf("config %q: refusal repeats a configured value: %q", c, f.Secrets.Err())
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	system, user := filepath.Join(dir, "etc.yaml"), filepath.Join(dir, "user.yaml")

	f, err := Load([]string{system, user})
	if err != nil || len(f.Read) != 0 || f.Secrets.State != secretsconf.NotConfigured || f.Secrets.Source != user || f.Notify.Present {
		t.Errorf("no files: %+v, %v; want nothing, sourced at the user file", f, err)
	}

	writeFile(t, system, "secrets:\n  lookup:\n    argv: [/usr/bin/pass, show, 'hookbox/{name}']\nnotify:\n  argv: [/bin/site-post]\n")
	f, err = Load([]string{system, user})
	if err != nil || f.Secrets.State != secretsconf.Enabled || f.Secrets.Source != system || f.Notify.Argv[0] != "/bin/site-post" {
		t.Errorf("system only: %+v, %v", f, err)
	}

	// The user file replaces the system one per top-level key, whole; a
	// null key replaces nothing.
	writeFile(t, user, "secrets:\n  lookup:\n    enabled: false\nnotify:\n")
	f, err = Load([]string{system, user})
	if err != nil || strings.Join(f.Read, ",") != system+","+user {
		t.Fatalf("both: %+v, %v", f, err)
	}
	if f.Secrets.State != secretsconf.Disabled || f.Secrets.Source != user {
		t.Errorf("user secrets must win: %+v", f.Secrets)
	}
	if f.Notify.Argv[0] != "/bin/site-post" {
		t.Errorf("a null notify must not replace the system one: %+v", f.Notify)
	}

	writeFile(t, user, "notfy: {}\n")
	if _, err := Load([]string{system, user}); err == nil || !strings.Contains(err.Error(), user+":1:1:") {
		t.Errorf("unknown key in the user file: %v", err)
	}
	if _, err := Load([]string{dir}); err == nil {
		t.Errorf("Load(directory) succeeded; want a read error")
	}
}

func TestFiles(t *testing.T) {
	tests := []struct {
		desc    string
		env     map[string]string
		root    bool
		want    []string
		wantErr bool
	}{
		{"explicit wins", map[string]string{"HOOKBOX_CONFIG": "/etc/hb/c.yaml", "XDG_CONFIG_HOME": "/x", "HOME": "/h"}, true, []string{"/etc/hb/c.yaml"}, false},
		{"explicit cleaned", map[string]string{"HOOKBOX_CONFIG": "/etc//hb/../hb/c.yaml"}, false, []string{"/etc/hb/c.yaml"}, false},
		{"explicit relative", map[string]string{"HOOKBOX_CONFIG": "c.yaml", "HOME": "/h"}, false, nil, true},
		{"xdg", map[string]string{"XDG_CONFIG_HOME": "/x", "HOME": "/h"}, false, []string{"/x/hookbox/config.yaml"}, false},
		{"xdg relative ignored", map[string]string{"XDG_CONFIG_HOME": "x", "HOME": "/h"}, false, []string{"/h/.config/hookbox/config.yaml"}, false},
		{"empty counts as unset", map[string]string{"HOOKBOX_CONFIG": "", "XDG_CONFIG_HOME": "", "HOME": "/h"}, false, []string{"/h/.config/hookbox/config.yaml"}, false},
		{"home", map[string]string{"HOME": "/home/u"}, false, []string{"/home/u/.config/hookbox/config.yaml"}, false},
		{"root reads the system file first", map[string]string{"HOME": "/root"}, true, []string{SystemFile, "/root/.config/hookbox/config.yaml"}, false},
		{"root without home", map[string]string{}, true, []string{SystemFile}, false},
		{"nothing", map[string]string{}, false, nil, false},
		{"relative home", map[string]string{"HOME": "u"}, false, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			got, err := Env{Getenv: func(k string) string { return tt.env[k] }, Root: tt.root}.Files()
			if tt.wantErr {
				if !errors.Is(err, ErrNoFile) {
					t.Fatalf("got %q, %v; want ErrNoFile", got, err)
				}
				return
			}
			if err != nil || strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestDirs(t *testing.T) {
	env := func(root bool, vars map[string]string) Env {
		return Env{Getenv: func(k string) string { return vars[k] }, Root: root}
	}
	root := env(true, map[string]string{"HOME": "/root", "XDG_STATE_HOME": "/x"})
	if got := [3]string{root.StateDir(), root.CacheDir(), root.DataDir()}; got != [3]string{"/var/lib/hookbox", "/var/cache/hookbox", "/var/lib/hookbox"} {
		t.Errorf("root: %q", got)
	}
	user := env(false, map[string]string{"HOME": "/home/u"})
	if got := [3]string{user.StateDir(), user.CacheDir(), user.DataDir()}; got != [3]string{"/home/u/.local/state/hookbox", "/home/u/.cache/hookbox", "/home/u/.local/share/hookbox"} {
		t.Errorf("user: %q", got)
	}
	xdg := env(false, map[string]string{"HOME": "/home/u", "XDG_STATE_HOME": "/s", "XDG_CACHE_HOME": "/c", "XDG_DATA_HOME": "rel"})
	if got := [3]string{xdg.StateDir(), xdg.CacheDir(), xdg.DataDir()}; got != [3]string{"/s/hookbox", "/c/hookbox", "/home/u/.local/share/hookbox"} {
		t.Errorf("xdg: %q", got)
	}
	if got := env(false, nil).StateDir(); got != "" {
		t.Errorf("no home: %q", got)
	}
}

func TestKeyDir(t *testing.T) {
	for _, tc := range []struct {
		name string
		root bool
		vars map[string]string
		want string
		err  bool
	}{
		{name: "root", root: true, vars: map[string]string{"HOME": "/root", "XDG_CONFIG_HOME": "/x"}, want: "/etc/hookbox"},
		{name: "user", vars: map[string]string{"HOME": "/home/u"}, want: "/home/u/.config/hookbox"},
		{name: "user with XDG", vars: map[string]string{"HOME": "/home/u", "XDG_CONFIG_HOME": "/cfg"}, want: "/cfg/hookbox"},
		{name: "relative XDG ignored", vars: map[string]string{"HOME": "/home/u", "XDG_CONFIG_HOME": "cfg"}, want: "/home/u/.config/hookbox"},
		{name: "override", root: true, vars: map[string]string{EnvKeyDir: "/keys/"}, want: "/keys"},
		{name: "relative override", vars: map[string]string{EnvKeyDir: "keys"}, err: true},
		{name: "no home"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Env{Getenv: func(k string) string { return tc.vars[k] }, Root: tc.root}.KeyDir()
			if got != tc.want || (err != nil) != tc.err {
				t.Errorf("KeyDir() = %q, %v; want %q (error %v)", got, err, tc.want, tc.err)
			}
		})
	}
}

// FuzzParse checks that no input panics the loader, that a refusal is total,
// and that no error or refusal repeats the sentinel planted in the seeds.
func FuzzParse(f *testing.F) {
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
		file, err := Parse(data, "/fuzz.yaml")
		if err != nil {
			if strings.Contains(err.Error(), s) {
				t.Fatalf("error repeats a configured value: %q", err)
			}
			return
		}
		l := file.Secrets
		switch l.State {
		case secretsconf.Refused:
			if l.Reason == "" || l.Message == "" || l.Argv != nil {
				t.Fatalf("refusal without reason/message or with argv: %+v", l)
			}
			if strings.Contains(l.Message, s) || strings.Contains(l.Err().Error(), s) {
				t.Fatalf("refusal repeats a configured value: %q", l.Message)
			}
		case secretsconf.Enabled:
			if l.Reason != "" || l.Message != "" {
				t.Fatalf("enabled with reason: %+v", l)
			}
			if reason, _, _ := secretsconf.CheckArgv(l.Argv); reason != "" {
				t.Fatalf("enabled with invalid argv (%s)", reason)
			}
			if l.Timeout <= 0 || l.Timeout > secretsconf.MaxTimeout {
				t.Fatalf("enabled with timeout %v", l.Timeout)
			}
		case secretsconf.NotConfigured, secretsconf.Disabled:
			if l.Reason != "" || l.Message != "" || l.Argv != nil || l.Err() != nil {
				t.Fatalf("%s with reason or argv: %+v", l.State, l)
			}
		default:
			t.Fatalf("unknown state %d", l.State)
		}
		if file.Notify.Reason == "" {
			if r, _ := notifyconf.CheckArgv(file.Notify.Argv); r != "" {
				t.Fatalf("accepted notify argv with %s", r)
			}
		}
	})
}
