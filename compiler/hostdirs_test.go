package compiler

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostDirsCheckedAtCompileTime: a workspace or grant that is missing,
// a file or a symlink is a spec error at its field (issue: such specs
// rendered fine and failed only when run).
func TestHostDirsCheckedAtCompileTime(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"ws", "grant"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "ws"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	compile := func(lines ...string) error {
		spec := spawnYAML("{kind: exec, path: /bin/true}", lines...)
		spec = strings.Replace(spec, "  workspace: /ws\n", "", 1)
		parsed, err := ParseWithOptions([]byte(spec), "test.yaml", dir, func(string) ([]byte, error) { return nil, errNoFiles }, HostChecks(nil))
		if err != nil {
			return err
		}
		_, err = CompileAll(parsed)
		return err
	}
	if err := compile("  workspace: ./ws", "  addDirs: [./grant]"); err != nil {
		t.Fatalf("directories must pass: %v", err)
	}
	for name, tc := range map[string]struct {
		lines []string
		want  string
	}{
		"missing workspace":   {[]string{"  workspace: ./absent"}, "spec.workspace: " + dir + "/absent does not exist"},
		"workspace is a file": {[]string{"  workspace: ./file"}, "spec.workspace: " + dir + "/file is a file, not a directory"},
		"workspace is a link": {[]string{"  workspace: ./link"}, "spec.workspace: " + dir + "/link is a symlink"},
		"grant is a file":     {[]string{"  workspace: ./ws", "  addDirs: [./file]"}, "spec.addDirs[0]: " + dir + "/file is a file, not a directory"},
		"grant is missing":    {[]string{"  workspace: ./ws", "  addDirs: [./grant, ./gone]"}, "spec.addDirs[1]: " + dir + "/gone does not exist"},
	} {
		t.Run(name, func(t *testing.T) {
			err := compile(tc.lines...)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "test.yaml:") {
				t.Errorf("error %v, want a positioned %q", err, tc.want)
			}
		})
	}
}

// TestArgumentSizeLimits: what execve would refuse with E2BIG is a spec
// error at compile time (it used to fail at exec, reported as the engine
// failing).
func TestArgumentSizeLimits(t *testing.T) {
	long := strings.Repeat("x", maxArgStrlen)
	for name, tc := range map[string]struct{ engine, lines, want string }{
		"a 128 KiB prompt":    {"{kind: claude, path: /opt/c}", "  prompt: " + long, "test.yaml:7:11: spec.prompt: the prompt is 131072 bytes; the kernel refuses any single argument over 131071 bytes"},
		"a long engine arg":   {"{kind: exec, path: /bin/true, args: [ok, " + long + "]}", "", "spec.engine.args[1]: an engine argument is 131072 bytes"},
		"a long env value":    {"{kind: exec, path: /bin/true}", "  env: {set: {BIG: " + long + "}}", "spec.env.set.BIG: the variable is 131076 bytes"},
		"over 2 MiB in total": {"{kind: exec, path: /bin/true, args: [" + strings.TrimSuffix(strings.Repeat(strings.Repeat("y", 100000)+", ", 22), ", ") + "]}", "", "the engine's argv and environment are"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := tryCompile(spawnYAML(tc.engine, tc.lines))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				msg := "<nil>"
				if err != nil {
					msg = err.Error()
					if len(msg) > 400 {
						msg = msg[:400]
					}
				}
				t.Errorf("error %s, want %q", msg, tc.want)
			}
		})
	}
	if _, err := tryCompile(spawnYAML("{kind: claude, path: /opt/c}", "  prompt: "+long[:maxArgStrlen-1000])); err != nil {
		t.Errorf("a prompt under the limit must compile: %.300v", err)
	}
}
