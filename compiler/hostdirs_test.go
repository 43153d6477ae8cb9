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
