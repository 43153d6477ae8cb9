package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"hookbox.dev/hookbox/compiler"
	"hookbox.dev/hookbox/render"
)

func TestSelfExecNamesMatchTheRender(t *testing.T) {
	if daemonArgv0 != compiler.ScriptedDaemonArgv0 || childArgv0 != compiler.ScriptedChildArgv0 {
		t.Fatal("the engine's self-exec names must be the ones the render declares")
	}
}

// TestRunsCompiledScript compiles a spec, writes its files where the
// engine will read them and runs the engine binary on the host.
func TestRunsCompiledScript(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "engine")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	spec := `apiVersion: hookbox.dev/v1alpha1
kind: Spawn
metadata: {name: s}
spec:
  engine:
    kind: scripted
    path: ` + bin + `
    script:
      - print: {type: system, subtype: init}
      - print: plain text
      - hook: on-start
      - hook: on-bash
      - write: {path: /run/hookbox/out/x.txt, content: "hi\n"}
      - envHash: TOKEN
      - exec: [/bin/echo, from-exec]
      - exit: 7
      - print: never
  workspace: ` + dir + `
  env: {set: {TOKEN: abc}}
  tools: [/bin/echo]
  hooks:
    - {name: on-start, event: SessionStart, argv: [/bin/echo, "a b", ""]}
    - {name: on-bash, event: PreToolUse, matcher: Bash, argv: [/bin/sh, -c, "cat >/dev/null; echo tool-hook"]}
`
	parsed, err := compiler.Parse([]byte(spec), "s.yaml", dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := compiler.Compile(parsed[0])
	if err != nil {
		t.Fatal(err)
	}
	// Put the generated files under dir instead of /hookbox/etc.
	args := append([]string{}, r.Engine.Exec.Argv[1:]...)
	for _, f := range r.Files {
		host := filepath.Join(dir, filepath.Base(f.Path))
		if err := os.WriteFile(host, []byte(f.Content), 0o644); err != nil {
			t.Fatal(err)
		}
		for i, a := range args {
			if a == f.Path {
				args[i] = host
			}
		}
	}
	var script render.Script
	for _, f := range r.Files {
		if f.Path == render.ScriptPath {
			json.Unmarshal([]byte(f.Content), &script)
		}
	}
	// The write step targets /run/hookbox, which this host lacks: point it into dir.
	for i := range script.Steps {
		if script.Steps[i].Write != nil {
			script.Steps[i].Write.Path = filepath.Join(dir, "out", "x.txt")
		}
	}
	data, _ := json.Marshal(script)
	os.WriteFile(filepath.Join(dir, "script.json"), data, 0o644)

	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"TOKEN=abc", "PATH=/usr/bin:/bin"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if code := exitCode(err); code != 7 {
		t.Fatalf("exit code %d, want 7 (err %v)\nstderr: %s", code, err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		`{"subtype":"init","type":"system"}`, "plain text",
		`"hook_event":"SessionStart"`, `"stdout":"a b \n"`,
		`"hook_event":"PreToolUse"`, `"stdout":"tool-hook\n"`,
		`"sha256":"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"`,
		`"argv":["/bin/echo","from-exec"]`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "never") {
		t.Error("steps after exit must not run")
	}
	if got, err := os.ReadFile(filepath.Join(dir, "out", "x.txt")); err != nil || string(got) != "hi\n" {
		t.Errorf("write step: %q %v", got, err)
	}
}
