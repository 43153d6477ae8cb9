package compiler

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/verify"
	"hookbox.dev/hookbox/runfiles"
)

// fakePackage lays out an engine package in a temporary directory: a
// manifest file with version, and the entry file (content given).
func fakePackage(t *testing.T, manifest, version, entry, content string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, manifest), []byte(`{"name":"x","version":"`+version+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, entry)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func execNames(r *render.Render) []string {
	var out []string
	for _, x := range r.Engine.Execs {
		out = append(out, x.Name+" "+x.Path+" "+strings.Join(x.Argv, "|"))
	}
	return out
}

// TestEngineProfiles: for each engine and version, the exec rules, shells
// and variables the render gets from the profile, and the note when the
// version has no profile of its own.
func TestEngineProfiles(t *testing.T) {
	bash := hostBash(t)
	envTarget, err := runfiles.LookPath("sh", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	if err != nil {
		t.Fatalf("this test needs sh on the host: %v", err)
	}
	for name, tc := range map[string]struct {
		kind, manifest, version, entry, content, extra string
		wantProfile                                    string
		wantNote                                       string
		wantExecs                                      []string
		wantEnv                                        map[string]string
		wantShebangHop                                 string
		wantPackage                                    bool
		wantArgs                                       []string
	}{
		"claude 2.1.197": {
			kind: "claude", manifest: "package.json", version: "2.1.197", entry: "claude", content: "\x7fELF",
			wantProfile: "2.1.197",
			wantExecs:   []string{"tool-shell " + bash + " " + bash + "|-c|", "tool-shell " + bash + " " + bash + "|-c|-l|"},
			wantEnv:     map[string]string{"SHELL": bash},
		},
		"claude newer than any profile": {
			kind: "claude", manifest: "package.json", version: "2.9.0", entry: "claude", content: "\x7fELF",
			wantProfile: "2.1.197", wantNote: "no profile for claude 2.9.0: the nearest, 2.1.197, applied",
			wantExecs: []string{"tool-shell " + bash + " " + bash + "|-c|", "tool-shell " + bash + " " + bash + "|-c|-l|"},
		},
		"claude older than any profile": {
			kind: "claude", manifest: "package.json", version: "1.0.0", entry: "claude", content: "\x7fELF",
			wantProfile: "2.1.197", wantNote: "no profile for claude 1.0.0: the nearest, 2.1.197, applied",
		},
		"codex 0.171.0 platform bundle manifest": {
			kind: "codex", manifest: "codex-package.json", version: "0.171.0", entry: "bin/codex", content: "\x7fELF",
			wantProfile: "0.171.0",
			wantExecs: []string{
				"process-setup /proc/self/exe /proc/self/exe|--codex-run-as-process-setup",
				"tool-shell " + bash + " " + bash + "|-lc|", "tool-shell " + bash + " " + bash + "|-c|",
			},
			wantArgs: []string{"--disable", "shell_snapshot"},
		},
		"codex platform package version suffix": {
			kind: "codex", manifest: "package.json", version: "0.171.0-linux-x64", entry: "vendor/bin/codex", content: "\x7fELF",
			wantProfile: "0.171.0",
		},
		"gemini 0.61.0 env script in its package": {
			kind: "gemini", manifest: "package.json", version: "0.61.0", entry: "bundle/gemini.js", content: "#!/usr/bin/env sh\n",
			extra:          "  limits: {memory: 2Gi}",
			wantProfile:    "0.61.0",
			wantExecs:      []string{"tool-shell " + bash + " " + bash + "|-c|"},
			wantEnv:        map[string]string{"GEMINI_CLI_NO_RELAUNCH": "true", "NODE_OPTIONS": "--max-old-space-size=1536"},
			wantShebangHop: envTarget, wantPackage: true,
		},
		"pi 0.73.1": {
			kind: "pi", manifest: "package.json", version: "0.73.1", entry: "dist/cli.js", content: "#!/usr/bin/env sh\n",
			wantProfile:    "0.73.1",
			wantExecs:      []string{"tool-shell /bin/bash /bin/bash|-c|"},
			wantEnv:        map[string]string{"NODE_OPTIONS": "--max-old-space-size=3072"},
			wantShebangHop: envTarget, wantPackage: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			entry := fakePackage(t, tc.manifest, tc.version, tc.entry, tc.content)
			r := compileSpec(t, spawnYAML("{kind: "+tc.kind+", path: "+entry+", model: claude-sonnet-4-5}", "  prompt: x", tc.extra))
			if r.Engine.Profile != tc.wantProfile {
				t.Errorf("profile %q, want %q (version %q)", r.Engine.Profile, tc.wantProfile, r.Engine.Version)
			}
			if tc.wantNote != "" && !slices.Contains(r.Notes, tc.wantNote) {
				t.Errorf("notes %q, want %q", r.Notes, tc.wantNote)
			}
			if tc.wantNote == "" && len(r.Notes) > 0 {
				t.Errorf("notes %q, want none", r.Notes)
			}
			if tc.wantExecs != nil && !slices.Equal(execNames(r), tc.wantExecs) {
				t.Errorf("exec rules\n got %q\nwant %q", execNames(r), tc.wantExecs)
			}
			for k, v := range tc.wantEnv {
				if !slices.Contains(r.Process.Env, render.EnvVar{Name: k, Source: render.EnvHookbox, Value: v}) {
					t.Errorf("no %s=%s from hookbox in %+v", k, v, r.Process.Env)
				}
			}
			for _, a := range tc.wantArgs {
				if !slices.Contains(r.Engine.Exec.Argv, a) {
					t.Errorf("argv %q lacks %q", r.Engine.Exec.Argv, a)
				}
			}
			var engine *render.Program
			var pkg bool
			entry = render.ContainerPath(entry) // a temporary directory is under /tmp
			for i, p := range r.Programs {
				if p.Path == entry {
					engine = &r.Programs[i]
				}
				pkg = pkg || slices.Contains(p.Roles, render.RolePackage) && strings.HasPrefix(entry, p.Path+"/")
			}
			if pkg != tc.wantPackage {
				t.Errorf("package tree of the engine: %v, want %v (%+v)", pkg, tc.wantPackage, r.Programs)
			}
			if tc.wantShebangHop != "" {
				if engine == nil || engine.Shebang == nil || engine.Shebang.Interpreter != "/usr/bin/env" || engine.Shebang.Hop != tc.wantShebangHop {
					t.Errorf("engine program %+v, want an env shebang whose hop is %s", engine, tc.wantShebangHop)
				}
			}
		})
	}
}

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"2.1.197", "2.1.197", 0}, {"2.1.9", "2.1.197", -1}, {"0.171.0", "0.61.0", 1}, {"1", "1.0.0", 0}, {"x", "0", 0}} {
		if got := compareVersions(tc.a, tc.b); got != tc.want {
			t.Errorf("compareVersions(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestScriptToolsAndHooksJudgedByTheirShebang: a "#!/bin/sh -e" tool and
// hook get their "#!" line in the render and their interpreter as a
// program that is no allowed tool; verify then accepts the kernel's exec of
// each (argv [/bin/sh, -e, script, ...], the exe /bin/sh) and nothing else.
func TestScriptToolsAndHooksJudgedByTheirShebang(t *testing.T) {
	dir := t.TempDir()
	tool, hook := filepath.Join(dir, "tool.sh"), filepath.Join(dir, "hook.sh")
	for _, p := range []string{tool, hook} {
		if err := os.WriteFile(p, []byte("#!/bin/sh -e\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r := compileSpec(t, spawnYAML("{kind: claude, path: /opt/c}", "  prompt: x", "  tools: ["+tool+"]",
		"  hooks: [{name: h, event: Stop, required: true, argv: ["+hook+", '{run_id}']}]"))
	toolC, hookC := render.ContainerPath(tool), render.ContainerPath(hook)
	want := render.Shebang{Interpreter: "/bin/sh", Arg: "-e"}
	for _, p := range []string{toolC, hookC} {
		i := slices.IndexFunc(r.Programs, func(q render.Program) bool { return q.Path == p })
		if i < 0 || r.Programs[i].Shebang == nil || *r.Programs[i].Shebang != want {
			t.Fatalf("program %s: %+v, want shebang %+v", p, r.Programs, want)
		}
	}
	if !slices.ContainsFunc(r.Programs, func(q render.Program) bool {
		return q.Path == "/bin/sh" && slices.Equal(q.Roles, []string{render.RoleInterpreter})
	}) {
		t.Errorf("the interpreter must be a program, role interpreter only: %+v", r.Programs)
	}
	if !slices.Equal(r.Trace.Allow, []string{toolC}) {
		t.Errorf("trace.allow = %q, want the tool only (not its interpreter)", r.Trace.Allow)
	}

	initID, engineID, shID := verify.FileID{Dev: 1, Ino: 9}, verify.FileID{Dev: 1, Ino: 1}, verify.FileID{Dev: 1, Ino: 2}
	ids := verify.FileIdentities{render.InitPath: initID, "/opt/c": engineID, "/bin/sh": shID, toolC: {Dev: 1, Ino: 3}, hookC: {Dev: 1, Ino: 4}}
	slots := render.LaunchValues("hbx-1")
	exec := func(pid int, file string, id verify.FileID, argv ...string) verify.Event {
		return verify.Event{Kind: verify.KindExec, PID: pid, PPID: 2, Time: int64(pid), Filename: file, Argv: argv, Dev: id.Dev, Ino: id.Ino}
	}
	initEv, engine := exec(1, render.InitPath, initID, r.Init.Argv...), exec(2, "/opt/c", engineID, r.Engine.Exec.Argv...)
	initEv.PPID, engine.PPID = 0, 1
	good := []verify.Event{initEv, engine, exec(3, hookC, shID, "/bin/sh", "-e", hookC, "hbx-1"), exec(4, toolC, shID, "/bin/sh", "-e", toolC, "x")}
	stats := verify.Stats{Attached: true, AttachedBeforeStart: true}
	if v := verify.Verify(r, "", good, stats, ids, slots); v.Status != verify.StatusConfirmed {
		t.Errorf("the scripts run by their #! line: %s %q %+v", v.Status, v.Reasons, v.Diffs)
	}
	bad := []verify.Event{initEv, engine, exec(3, hookC, shID, "/bin/sh", hookC, "hbx-1"), exec(4, "/bin/sh", shID, "/bin/sh", "-c", "id")}
	if v := verify.Verify(r, "", bad, stats, ids, slots); v.Status != verify.StatusMismatch ||
		!slices.Contains(v.Reasons, verify.ReasonHookArgvDiffers) || !slices.Contains(v.Reasons, verify.ReasonUnexpectedExec) {
		t.Errorf("a hook without its #! argument, the interpreter run on its own: %s %q", v.Status, v.Reasons)
	}
}
