package compiler

import (
	"encoding/json"
	"fmt"
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"

	"hookbox.dev/hookbox/internal/shellwords"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/canonjson"
)

func TestHookStringRefusals(t *testing.T) {
	cases := map[string]string{
		"pipe":                 "/bin/echo hi | /usr/bin/tee x",
		"redirect":             "/bin/echo hi > out.txt",
		"and-or":               "/bin/true && /bin/false",
		"sequence":             "/bin/true; /bin/false",
		"variable":             "/bin/echo $HOME",
		"command-substitution": "/bin/echo `id`",
		"glob":                 "/bin/ls *.go",
		"background":           "/bin/sleep 1 &",
	}
	for feature, command := range cases {
		t.Run(feature, func(t *testing.T) {
			spec := spawnYAML("{kind: claude, path: /opt/c}", "  prompt: x",
				"  hooks:\n    - name: h\n      event: Stop\n      argv: '"+command+"'")
			_, err := tryCompile(spec)
			if err == nil {
				t.Fatalf("%q must be refused", command)
			}
			msg := err.Error()
			if !strings.Contains(msg, "test.yaml:11:13: spec.hooks[0].argv:") {
				t.Errorf("refusal must name file:line:col and the field: %s", msg)
			}
			if !strings.Contains(msg, "argv list") && !strings.Contains(msg, "e.g. [") {
				t.Errorf("refusal must suggest an argv list: %s", msg)
			}
		})
	}
	if _, err := tryCompile(spawnYAML("{kind: claude, path: /opt/c}", "  prompt: x", "  hooks: [{name: h, event: Stop, argv: []}]")); err == nil ||
		!strings.Contains(err.Error(), "hook argv is empty") {
		t.Errorf("an empty argv must be refused, got %v", err)
	}
	if _, err := tryCompile(spawnYAML("{kind: claude, path: /opt/c}", "  prompt: x", "  hooks: [{name: h, event: Stop, argv: '  '}]")); err == nil {
		t.Error("a blank command string must be refused")
	}
	// A string that needs no shell feature is split as POSIX words.
	r := compileSpec(t, spawnYAML("{kind: claude, path: /opt/c}", "  prompt: x",
		`  hooks: [{name: h, event: Stop, argv: "/opt/hook --msg 'two words' \"a|b\" x\\;y"}]`))
	if want := []string{"/opt/hook", "--msg", "two words", "a|b", "x;y"}; !slices.Equal(r.Hooks[0].Argv, want) {
		t.Errorf("split %q, want %q", r.Hooks[0].Argv, want)
	}
}

func TestHookProgramMustBeAPath(t *testing.T) {
	_, err := tryCompile(spawnYAML("{kind: claude, path: /opt/c}", "  prompt: x", "  hooks: [{name: h, event: Stop, argv: [python3, x.py]}]"))
	if err == nil || !strings.Contains(err.Error(), "spec.hooks[0].argv[0]") || !strings.Contains(err.Error(), "does not search PATH") {
		t.Errorf("a bare program name must be refused with a fix, got %v", err)
	}
	r := compileSpec(t, spawnYAML("{kind: claude, path: /opt/c}", "  prompt: x", "  hooks: [{name: h, event: Stop, argv: [./hooks/h.sh]}]"))
	if r.Hooks[0].Argv[0] != "/specs/hooks/h.sh" {
		t.Errorf("relative hook paths resolve against the spec's directory, got %q", r.Hooks[0].Argv[0])
	}
}

// TestHookExecChains: the render holds the exact exec chain of every hook,
// shell layer included where the engine insists on one.
func TestHookExecChains(t *testing.T) {
	hook := "  hooks: [{name: audit, event: %s, argv: [/opt/audit, 'it''s', '', 'a b', '{run_id}']}]"
	argv := []string{"/opt/audit", "it's", "", "a b", "{run_id}"}
	command := shellwords.Join(argv)

	claude := compileSpec(t, spawnYAML("{kind: claude, path: /opt/c}", "  prompt: x", strings.Replace(hook, "%s", "Stop", 1)))
	if got := claude.Hooks[0].Chain; len(got) != 1 || got[0].Path != "/opt/audit" || !slices.Equal(got[0].Argv, argv) || !slices.Equal(got[0].Slots, []int{4}) {
		t.Errorf("claude runs exec-form hooks directly: chain %+v", got)
	}
	settings, ok := fileContent(claude, "/hookbox/etc/claude-settings.json")
	if !ok || !strings.Contains(settings.Content, `"args":["it's","","a b","{run_id}"]`) || !strings.Contains(settings.Content, `"command":"/opt/audit"`) {
		t.Errorf("claude settings must carry exec form (command + args): %q", settings.Content)
	}

	// Codex finds bash on PATH, as the host has it (the container has it
	// at the same path) and calls it by that path.
	bash := hostBash(t)
	codex := compileSpec(t, spawnYAML("{kind: codex, path: /opt/x}", "  prompt: x", strings.Replace(hook, "%s", "Stop", 1)))
	chain := codex.Hooks[0].Chain
	if len(chain) != 2 || chain[0].Path != bash || !slices.Equal(chain[0].Argv, []string{bash, "-c", command}) ||
		!slices.Equal(chain[1].Argv, argv) {
		t.Errorf("codex chain: %+v", chain)
	}
	if codex.Hooks[0].Command != command {
		t.Errorf("codex command %q, want %q", codex.Hooks[0].Command, command)
	}
	if !slices.ContainsFunc(codex.Programs, func(p render.Program) bool {
		return p.Path == bash && slices.Contains(p.Roles, render.RoleShell)
	}) {
		t.Errorf("the shell codex insists on must be a program of the render: %+v", codex.Programs)
	}
	hooksJSON, _ := fileContent(codex, "/run/hookbox/codex/hooks.json")
	if !strings.Contains(hooksJSON.Content, `"command":"/opt/audit 'it'\\''s' '' 'a b' '{run_id}'"`) {
		t.Errorf("codex hooks.json must hold the generated command: %s", hooksJSON.Content)
	}

	// Gemini spawns `bash -c`: bash on PATH, a declared tool first.
	gemini := compileSpec(t, spawnYAML("{kind: gemini, path: /opt/g}", "  prompt: x", "  tools: [/usr/local/bin/bash]", strings.Replace(hook, "%s", "BeforeTool", 1)))
	chain = gemini.Hooks[0].Chain
	if chain[0].Path != "/usr/local/bin/bash" || !slices.Equal(chain[0].Argv, []string{"bash", "-c", command}) {
		t.Errorf("gemini chain: %+v", chain)
	}
	gemini = compileSpec(t, spawnYAML("{kind: gemini, path: /opt/g}", "  prompt: x", strings.Replace(hook, "%s", "BeforeTool", 1)))
	if gemini.Hooks[0].Chain[0].Path != bash {
		t.Errorf("without a declared bash, gemini's shell is the host's %s: %+v", bash, gemini.Hooks[0].Chain)
	}
}

func TestHookRules(t *testing.T) {
	for name, tc := range map[string]struct{ engine, hooks, want string }{
		"pi has no shell hooks":    {"{kind: pi, path: /opt/pi}", "[{name: h, event: Stop, argv: [/bin/true]}]", "TypeScript extensions"},
		"exec runs no hooks":       {"{kind: exec, path: /bin/true}", "[{name: h, event: Stop, argv: [/bin/true]}]", "engine exec does not run hooks"},
		"matcher on non-tool":      {"{kind: claude, path: /opt/c}", "[{name: h, event: Stop, matcher: Bash, argv: [/bin/true]}]", "event Stop takes no matcher"},
		"duplicate names":          {"{kind: claude, path: /opt/c}", "[{name: h, event: Stop, argv: [/bin/true]}, {name: h, event: Stop, argv: [/bin/true]}]", "used twice"},
		"slot inside an argument":  {"{kind: claude, path: /opt/c}", "[{name: h, event: Stop, argv: [/bin/x, 'id={run_id}']}]", "slot embedded"},
		"unknown slot":             {"{kind: claude, path: /opt/c}", "[{name: h, event: Stop, argv: [/bin/x, '{secret}']}]", "unknown slot"},
		"codex unknown event":      {"{kind: codex, path: /opt/c}", "[{name: h, event: BeforeTool, argv: [/bin/true]}]", "engine codex has no hook event"},
		"gemini claude-only event": {"{kind: gemini, path: /opt/c}", "[{name: h, event: PreToolUse, argv: [/bin/true]}]", "engine gemini has no hook event"},
	} {
		prompt := "  prompt: x"
		if strings.Contains(tc.engine, "exec") {
			prompt = ""
		}
		_, err := tryCompile(spawnYAML(tc.engine, prompt, "  hooks: "+tc.hooks))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: want an error containing %q, got %v", name, tc.want, err)
		}
	}
}

// TestHookCap: more than render.MaxHooks hooks is a spec error at the
// first hook over the cap (issue item 8: 10,000 hooks made a verdict take
// minutes); exactly the cap compiles.
func TestHookCap(t *testing.T) {
	hooks := func(n int) string {
		lines := []string{"  hooks:"}
		for i := range n {
			lines = append(lines, fmt.Sprintf("    - {name: h%d, event: Stop, argv: [/bin/true]}", i))
		}
		return strings.Join(lines, "\n")
	}
	compileSpec(t, spawnYAML("{kind: claude, path: /opt/c}", "  prompt: x", hooks(render.MaxHooks)))
	_, err := tryCompile(spawnYAML("{kind: claude, path: /opt/c}", "  prompt: x", hooks(render.MaxHooks+1)))
	// spawnYAML's hooks start on line 9: the first one over is on line 9+MaxHooks.
	want := fmt.Sprintf("test.yaml:%d:7: spec.hooks[%d]: at most %d hooks per spawn; this one has %d", 9+render.MaxHooks, render.MaxHooks, render.MaxHooks, render.MaxHooks+1)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("want an error containing %q, got %v", want, err)
	}
	// The schema says the same.
	field, _ := reflect.TypeFor[SpawnSpec]().FieldByName("Hooks")
	if doc := field.Tag.Get("doc"); !strings.Contains(doc, fmt.Sprintf("At most %d per spawn", render.MaxHooks)) {
		t.Errorf("the doc of spec.hooks must give the cap %d: %q", render.MaxHooks, doc)
	}
	schema, err := JSONSchema()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(schema), fmt.Sprintf(`"maxItems": %d`, render.MaxHooks)) {
		t.Errorf("the schema must give spec.hooks maxItems %d", render.MaxHooks)
	}
}

// hostileSlotValues are launch values no real run has, each able to change
// a JSON document or a shell command if it were pasted in as text.
var hostileSlotValues = render.SlotValues{
	render.SlotRunID:  `x" ,"args":["pwned"]} '$(touch /tmp/pwned)' ` + "`id`;\n/bin/rm -rf / \\\" \u2028 {run_dir}",
	render.SlotRunDir: "'\"\n$HOME",
}

// TestHookSlotsFilledAtLaunch: every engine's generated hook file says
// where its launch slots are, and filling them gives the hook exactly the
// values, as one args element (exec form) or one shell word (command
// strings), with the rest of the document unchanged: a matcher that reads
// like a slot, a hook without slots.
func TestHookSlotsFilledAtLaunch(t *testing.T) {
	hooks := "  hooks:\n" +
		"    - {name: a, event: %[1]s, matcher: '{run_id}', argv: [/opt/audit, '{run_id}', 'it''s', '{run_dir}']}\n" +
		"    - {name: b, event: %[1]s, argv: [/opt/audit, '{run_id}']}\n" +
		"    - {name: c, event: %[2]s, argv: [/opt/plain, '{x']}"
	filled := func(argv ...string) []string {
		out := slices.Clone(argv)
		for i, a := range out {
			if v, ok := hostileSlotValues.Lookup(a); ok {
				out[i] = v
			}
		}
		return out
	}
	wantA := filled("/opt/audit", "{run_id}", "it's", "{run_dir}")
	wantB := filled("/opt/audit", "{run_id}")
	wantC := []string{"/opt/plain", "{x"}
	cases := []struct {
		name, engine, file, tool, other string
		shell                           bool
	}{
		{"claude", "{kind: claude, path: /opt/c}", claudeSettingsPath, "PreToolUse", "Stop", false},
		{"scripted", "{kind: scripted, path: /opt/s, script: [{exit: 0}]}", claudeSettingsPath, "PreToolUse", "Stop", false},
		{"codex", "{kind: codex, path: /opt/x}", path.Join(codexHome, "hooks.json"), "PreToolUse", "Stop", true},
		{"gemini", "{kind: gemini, path: /opt/g}", geminiSettingsPath, "BeforeTool", "AfterAgent", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prompt := "  prompt: x"
			if tc.name == "scripted" {
				prompt = ""
			}
			r := compileSpec(t, spawnYAML(tc.engine, prompt, fmt.Sprintf(hooks, tc.tool, tc.other)))
			f, ok := fileContent(r, tc.file)
			if !ok || len(f.Slots) == 0 {
				t.Fatalf("%s must list its slots: %+v", tc.file, f)
			}
			files, err := render.FillFiles(r.Files, hostileSlotValues)
			if err != nil {
				t.Fatal(err)
			}
			var got render.File
			for _, g := range files {
				if g.Path == tc.file {
					got = g
				}
				if g.Path != tc.file && !slices.ContainsFunc(r.Files, func(o render.File) bool { return reflect.DeepEqual(o, g) }) {
					t.Errorf("a file without slots changed: %s", g.Path)
				}
			}
			if len(got.Slots) != 0 {
				t.Errorf("a filled file has no slots left: %+v", got.Slots)
			}
			var doc struct {
				Hooks map[string][]struct {
					Matcher string `json:"matcher"`
					Hooks   []struct {
						Command string   `json:"command"`
						Args    []string `json:"args"`
					} `json:"hooks"`
				} `json:"hooks"`
			}
			if err := json.Unmarshal([]byte(got.Content), &doc); err != nil {
				t.Fatalf("filled content is not JSON: %v\n%s", err, got.Content)
			}
			if canon, _ := canonjson.Canonicalize([]byte(got.Content)); string(canon) != got.Content {
				t.Errorf("filled content is not canonical:\n%s", got.Content)
			}
			argvOf := func(event string, i int) []string {
				groups := doc.Hooks[event]
				if i >= len(groups) || len(groups[i].Hooks) != 1 {
					t.Fatalf("no hook %s[%d] in %s", event, i, got.Content)
				}
				h := groups[i].Hooks[0]
				if !tc.shell {
					return append([]string{h.Command}, h.Args...)
				}
				words, err := shellwords.Split(h.Command)
				if err != nil || shellwords.Join(words) != h.Command {
					t.Fatalf("command %q is not a canonical command string: %v", h.Command, err)
				}
				return words
			}
			for _, c := range []struct {
				event string
				i     int
				want  []string
			}{{tc.tool, 0, wantA}, {tc.tool, 1, wantB}, {tc.other, 0, wantC}} {
				if got := argvOf(c.event, c.i); !slices.Equal(got, c.want) {
					t.Errorf("hook %s[%d] runs %q, want %q", c.event, c.i, got, c.want)
				}
			}
			if m := doc.Hooks[tc.tool][0].Matcher; m != "{run_id}" {
				t.Errorf("the matcher is not a slot and must stay as written, got %q", m)
			}
		})
	}
}
