package compiler

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestHostProgramsCheckedAtCompileTime: a program the spec names
// (engine.path, a tool, a hook's argv[0]) that is a directory, not a
// regular file, or not readable and executable by other users is a spec
// error at its field (issue: /etc/shadow or a 0700 directory of keys as a
// tool was copied into the runfiles store, world-readable).
func TestHostProgramsCheckedAtCompileTime(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	public := write("public", 0o755)
	write("secret", 0o600)
	write("private-tool", 0o700)
	write("group-tool", 0o750)
	write("data", 0o644)
	for name, mode := range map[string]os.FileMode{"keys": 0o700, "ws": 0o755} {
		if err := os.Mkdir(filepath.Join(dir, name), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(public, filepath.Join(dir, "to-public")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "secret"), filepath.Join(dir, "to-secret")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o755); err != nil {
		t.Fatal(err)
	}
	compile := func(engine string, lines ...string) error {
		kind := "exec"
		if strings.Contains(strings.Join(lines, ""), "hooks:") {
			kind, lines = "claude", append(lines, "  prompt: x")
		}
		spec := spawnYAML("{kind: "+kind+", path: "+engine+"}", lines...)
		spec = strings.Replace(spec, "  workspace: /ws\n", "  workspace: ./ws\n", 1)
		parsed, err := ParseWithOptions([]byte(spec), "test.yaml", dir, func(string) ([]byte, error) { return nil, errNoFiles }, HostChecks(nil))
		if err != nil {
			return err
		}
		_, err = CompileAll(parsed)
		return err
	}
	if err := compile(public, "  tools: [./public, ./to-public, ./not-here]"); err != nil {
		t.Fatalf("public programs (and one this host lacks) must pass: %v", err)
	}
	// The error's position: the engine line is line 5 of spawnYAML's spec.
	if err := compile(filepath.Join(dir, "keys")); err == nil || !strings.Contains(err.Error(), "test.yaml:5:") {
		t.Errorf("a directory as engine.path: %v, want an error at test.yaml:5", err)
	}
	for name, tc := range map[string]struct {
		engine string
		lines  []string
		want   string
	}{
		"engine is a directory": {dir + "/keys", nil, "spec.engine.path: " + dir + "/keys is a directory, not a program"},
		"tool is a directory":   {public, []string{"  tools: [./keys]"}, "spec.tools[0]: " + dir + "/keys is a directory, not a program"},
		"tool is root-only":     {public, []string{"  tools: [./public, ./secret]"}, "spec.tools[1]: " + dir + "/secret (mode 0600) is not readable and executable by other users"},
		"tool is private":       {public, []string{"  tools: [./private-tool]"}, "spec.tools[0]: " + dir + "/private-tool (mode 0700) is not readable"},
		"tool is group-only":    {public, []string{"  tools: [./group-tool]"}, "(mode 0750) is not readable"},
		"tool is data":          {public, []string{"  tools: [./data]"}, "(mode 0644) is not readable and executable"},
		"tool links to secret":  {public, []string{"  tools: [./to-secret]"}, "spec.tools[0]: " + dir + "/to-secret (mode 0600)"},
		"tool is a fifo":        {public, []string{"  tools: [./fifo]"}, "spec.tools[0]: " + dir + "/fifo is a p---------, not a program"},
		"engine is root-only":   {dir + "/secret", nil, "spec.engine.path: " + dir + "/secret (mode 0600)"},
		"hook is a directory": {public, []string{"  tools: [./public]", "  hooks: [{name: h, event: SessionStart, argv: [./keys]}]"},
			"spec.hooks[0].argv[0]: " + dir + "/keys is a directory"},
	} {
		t.Run(name, func(t *testing.T) {
			err := compile(tc.engine, tc.lines...)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "test.yaml:") {
				t.Errorf("error %v, want a positioned %q", err, tc.want)
			}
		})
	}
}
