package compiler

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// paramSpec is a scripted spawn with the given params block and extra spec
// lines; slots are placed by the caller.
// The engine line comes first among lines; without one the engine is
// /bin/tool with no arguments.
func paramSpec(params string, lines ...string) string {
	spec := "apiVersion: hookbox.dev/v1alpha1\nkind: Spawn\n"
	if params != "" {
		spec += "params: " + params + "\n"
	}
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "  engine:") {
		lines = append([]string{"  engine: {kind: exec, path: /bin/tool}"}, lines...)
	}
	return spec + "metadata: {name: t}\nspec:\n  workspace: /ws\n" + strings.Join(lines, "\n") + "\n"
}

func parseWithParams(spec string, params map[string]string) ([]*Parsed, error) {
	return ParseWithOptions([]byte(spec), "test.yaml", "/specs", func(string) ([]byte, error) { return nil, errNoFiles }, ParseOptions{Params: params})
}

func TestTemplateSlots(t *testing.T) {
	cases := []struct {
		name string
		spec string
		set  map[string]string
		argv []string // expected engine argv after the binary, when ok
		env  map[string]string
		errs []string // substrings of the diagnostics, when not ok
	}{
		{
			name: "whole values, set and default",
			spec: paramSpec(`{pr: {}, ref: {default: main}}`,
				`  engine: {kind: exec, path: /bin/tool, args: [--pr, "{{ pr }}", '{{ref}}']}`,
				`  env: {set: {PR: "{{ pr }}"}}`),
			set:  map[string]string{"pr": "123"},
			argv: []string{"--pr", "123", "main"},
		},
		{
			name: "a value stays one argv element whatever it holds",
			spec: paramSpec(`{title: {}}`, `  engine: {kind: exec, path: /bin/tool, args: ["{{ title }}"]}`),
			set:  map[string]string{"title": "a b; rm -rf / $(x) {{ y }}"},
			argv: []string{"a b; rm -rf / $(x) {{ y }}"},
		},
		{
			name: "a SpawnList",
			spec: "apiVersion: hookbox.dev/v1alpha1\nkind: SpawnList\nparams: {pr: {default: \"0\"}}\nitems:\n  - metadata: {name: a}\n    spec: {engine: {kind: exec, path: /bin/tool}, workspace: /ws, env: {set: {PR: \"{{ pr }}\"}}}\n",
			set:  map[string]string{"pr": "77"},
			env:  map[string]string{"PR": "77"},
		},
		{
			name: "text with braces that is no slot is left alone",
			spec: paramSpec("", `  engine: {kind: exec, path: /bin/tool, args: ["{{ .Name }}", "{{}}", "{x}"]}`),
			argv: []string{"{{ .Name }}", "{{}}", "{x}"},
		},
		{
			name: "embedded slot refused",
			spec: paramSpec(`{pr: {}}`, `  engine: {kind: exec, path: /bin/tool, args: ["--pr={{ pr }}"]}`),
			set:  map[string]string{"pr": "1"},
			errs: []string{`test.yaml:7:48: spec.engine.args[0]: template slot {{ pr }} is part of a longer string; a param fills a whole value`},
		},
		{
			name: "undeclared --set",
			spec: paramSpec(`{pr: {}}`, `  engine: {kind: exec, path: /bin/tool, args: ["{{ pr }}"]}`),
			set:  map[string]string{"pr": "1", "typo": "x"},
			errs: []string{`test.yaml:3:9: params: --set typo: the spec declares no param "typo"; declared params: pr`},
		},
		{
			name: "--set without any params block",
			spec: paramSpec(""),
			set:  map[string]string{"pr": "1"},
			errs: []string{`--set pr: the spec declares no param "pr"; declare it under params`},
		},
		{
			name: "missing required params listed together",
			spec: paramSpec(`{pr: {}, ref: {}, mode: {default: fast}}`, `  engine: {kind: exec, path: /bin/tool, args: ["{{ pr }}", "{{ ref }}", "{{ mode }}"]}`),
			errs: []string{`params: required params without a value: pr, ref; pass --set pr=VALUE --set ref=VALUE`},
		},
		{
			name: "undeclared slot",
			spec: paramSpec(`{pr: {}}`, `  engine: {kind: exec, path: /bin/tool, args: ["{{ pr }}", "{{ sha }}"]}`),
			set:  map[string]string{"pr": "1"},
			errs: []string{`test.yaml:7:60: spec.engine.args[1]: template slot {{ sha }} names no declared param`},
		},
		{
			name: "unquoted slot",
			spec: paramSpec(`{pr: {}}`, `  env: {set: {PR: {{ pr }}}}`),
			set:  map[string]string{"pr": "1"},
			errs: []string{`spec.env.set.PR: unquoted template slot; quote it`},
		},
		{
			name: "slot in a key, in params, bad names and types",
			spec: paramSpec(`{Bad: {}, x: {default: "{{ y }}"}, n: {default: 3}, u: {defualt: a}}`, `  env: {set: {"{{ x }}": v}}`),
			errs: []string{
				`params.Bad: invalid param name "Bad"`,
				`params.x.default: template slot in params`,
				`params.n.default: expected a string, got`,
				`params.u.defualt: unknown field "defualt"`,
				`spec.env.set.{{ x }}: template slot in a mapping key`,
			},
		},
		{
			name: "a value is a string: a slot cannot fill an integer field",
			spec: paramSpec(`{pids: {}}`, `  limits: {pids: "{{ pids }}"}`),
			set:  map[string]string{"pids": "5"},
			errs: []string{`spec.limits.pids: expected an integer`},
		},
		{
			name: "params are top level only",
			spec: "apiVersion: hookbox.dev/v1alpha1\nkind: SpawnList\nitems:\n  - params: {pr: {}}\n    metadata: {name: a}\n    spec: {engine: {kind: exec, path: /bin/tool}, workspace: /ws}\n",
			errs: []string{`items[0].params: unknown field "params"`},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parsed, err := parseWithParams(tc.spec, tc.set)
			if len(tc.errs) > 0 {
				if err == nil {
					t.Fatalf("accepted:\n%s", tc.spec)
				}
				checkSpecError(t, err)
				for _, want := range tc.errs {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("missing %q in:\n%v", want, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, tc.spec)
			}
			renders, err := CompileAll(parsed)
			if err != nil {
				t.Fatal(err)
			}
			r := renders[0]
			if tc.argv != nil && !slices.Equal(r.Engine.Exec.Argv[1:], tc.argv) {
				t.Errorf("argv %q, want %q", r.Engine.Exec.Argv[1:], tc.argv)
			}
			for _, e := range r.Process.Env {
				if want, ok := tc.env[e.Name]; ok && e.Value != want {
					t.Errorf("env %s = %q, want %q", e.Name, e.Value, want)
				}
			}
		})
	}
}

func TestParseSetFlags(t *testing.T) {
	got, err := ParseSetFlags([]string{"pr=12", "ref=a=b", "empty="})
	if err != nil {
		t.Fatal(err)
	}
	if got["pr"] != "12" || got["ref"] != "a=b" || got["empty"] != "" || len(got) != 3 {
		t.Errorf("got %v", got)
	}
	for _, bad := range [][]string{{"novalue"}, {"=x"}, {"a=1", "a=2"}} {
		if _, err := ParseSetFlags(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestParseKeepsWorkingWithoutParams: the old entry points still work, and
// a spec with only defaulted params needs no --set.
func TestParseKeepsWorkingWithoutParams(t *testing.T) {
	spec := paramSpec(`{ref: {default: main}}`, `  engine: {kind: exec, path: /bin/tool, args: ["{{ ref }}"]}`)
	parsed, err := Parse([]byte(spec), "test.yaml", "/specs", nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Compile(parsed[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Engine.Exec.Argv[1:]; !slices.Equal(got, []string{"main"}) {
		t.Errorf("argv %q", got)
	}
	_, err = Parse([]byte(paramSpec(`{pr: {}}`)), "test.yaml", "/specs", nil)
	if !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), "required params without a value: pr") {
		t.Errorf("a required param without --set: %v", err)
	}
}

// FuzzParams: whatever the spec and the --set value, parsing never panics,
// problems are positioned SpecErrors, and a value that was substituted
// reaches the render as one whole argv element.
func FuzzParams(f *testing.F) {
	f.Add(`{v: {}}`, `"{{ v }}"`, "x")
	f.Add(`{v: {default: d}}`, `"a {{ v }}"`, "$(rm -rf /)")
	f.Add(`{v: {}}`, `{{ v }}`, "")
	f.Add(`{v: {default: "{{ v }}"}}`, `'{{v}}'`, "{{ v }}")
	f.Fuzz(func(t *testing.T, params, arg, value string) {
		spec := paramSpec(params, "  engine: {kind: exec, path: /bin/tool, args: ["+arg+"]}")
		parsed, err := parseWithParams(spec, map[string]string{"v": value})
		if err != nil {
			checkSpecError(t, err)
			return
		}
		renders, err := CompileAll(parsed)
		if err != nil {
			checkSpecError(t, err)
			return
		}
		if slotWhole.MatchString(strings.Trim(arg, `"'`)) && len(renders[0].Engine.Exec.Argv) == 2 && renders[0].Engine.Exec.Argv[1] != value {
			if _, declared := parsed[0].Spawn.Params["v"]; declared {
				t.Fatalf("slot %s became %q, want %q", arg, renders[0].Engine.Exec.Argv[1], value)
			}
		}
	})
}
