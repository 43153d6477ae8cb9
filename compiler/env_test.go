package compiler

import (
	"strings"
	"testing"

	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/runfiles"
)

func TestContainerEnvironment(t *testing.T) {
	r := compileSpec(t, spawnYAML("{kind: claude, path: /opt/c}", "  prompt: x",
		"  tools: [/opt/tools/bin/jq, /usr/bin/git]",
		"  env: {allow: [LANG], set: {MODE: ci, EMPTY: ''}}", "  secrets: [API_KEY]"))
	want := map[string]render.EnvVar{
		"PATH":    {Name: "PATH", Source: render.EnvHookbox, Value: "/opt/tools/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		"HOME":    {Name: "HOME", Source: render.EnvHookbox, Value: "/run/hookbox/home"},
		"LANG":    {Name: "LANG", Source: render.EnvHost},
		"MODE":    {Name: "MODE", Source: render.EnvSet, Value: "ci"},
		"EMPTY":   {Name: "EMPTY", Source: render.EnvSet},
		"API_KEY": {Name: "API_KEY", Source: render.EnvSecret},
		// Claude Code's profile pins its shell (bash on PATH, as the host has it).
		"SHELL": {Name: "SHELL", Source: render.EnvHookbox, Value: hostBash(t)},
	}
	if len(r.Process.Env) != len(want) {
		t.Fatalf("env has %d entries, want %d: %+v", len(r.Process.Env), len(want), r.Process.Env)
	}
	for _, e := range r.Process.Env {
		if want[e.Name] != e {
			t.Errorf("env %s = %+v, want %+v", e.Name, e, want[e.Name])
		}
	}
}

func TestEnvRules(t *testing.T) {
	for name, tc := range map[string]struct{ lines, want string }{
		"PATH is hookbox's":         {"  env: {allow: [PATH]}", "PATH is reserved"},
		"HOME is hookbox's":         {"  env: {set: {HOME: /x}}", "HOME is reserved"},
		"the init's secret list":    {"  secrets: [HOOKBOX_INIT_SECRETS]", "HOOKBOX_INIT_SECRETS is reserved"},
		"allow and set overlap":     {"  env: {allow: [A], set: {A: x}}", "A is already declared"},
		"set and secret overlap":    {"  env: {set: {TOKEN: x}}\n  secrets: [TOKEN]", "TOKEN is already declared"},
		"bad allow name":            {"  env: {allow: [bad-name]}", "not an environment variable name"},
		"secret refusal is total":   {"  secrets: [GOOD, 9BAD]", "spec.secrets"},
		"duplicate secret":          {"  secrets: [A, A]", "spec.secrets"},
		"engine-reserved for codex": {"  env: {set: {CODEX_HOME: /tmp/x}}", "CODEX_HOME is reserved for engine codex"},
	} {
		engine := "{kind: claude, path: /opt/c}"
		if strings.Contains(name, "codex") {
			engine = "{kind: codex, path: /opt/c}"
		}
		_, err := tryCompile(spawnYAML(engine, "  prompt: x", tc.lines))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: want error with %q, got %v", name, tc.want, err)
		}
	}
	// Refusal is total: with one bad name no secret reaches the render.
	_, err := tryCompile(spawnYAML("{kind: claude, path: /opt/c}", "  prompt: x", "  secrets: [GOOD, bad-name]"))
	if err == nil {
		t.Fatal("a malformed secret name must refuse the block")
	}
}

// hostBash is where a PATH search finds bash on this host, which is where
// the container has it.
func hostBash(t *testing.T) string {
	t.Helper()
	bash, err := runfiles.LookPath("bash", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	if err != nil {
		t.Fatalf("this test needs bash on the host: %v", err)
	}
	return bash
}
