package integration

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/testenv"
)

// nobodyUID is the unprivileged user the checks below read the state dir
// as: any local user who is neither root nor the store's owner.
const nobodyUID = "65534"

// TestRenderRunfilesKeepsRootOnlyFilesPrivate: `hookbox render --runfiles`
// (which assembles the runfiles store and nothing else) of a spec naming
// a root-only file, or a private directory of keys, as a program is a
// spec error that creates nothing; a root-only file the closure reaches
// without being named (inside an engine's package tree) is stored, and
// no other user can read it anywhere under the state dir. Issue: both
// were copied into the store as 0444 files under 0755 directories, so any
// local user could read them.
func TestRenderRunfilesKeepsRootOnlyFilesPrivate(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root)
	buildTools(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Fatalf("setpriv (util-linux) is needed to read as an unprivileged user: %v", err)
	}
	// Every directory on the way is open to all: only the store's own
	// modes may keep the files private.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // t.TempDir's own parent is 0700
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	state := filepath.Join(dir, "state")
	secret := fmt.Sprintf("hookbox-root-only-%d", time.Now().UnixNano())
	write := func(rel, content string, mode os.FileMode) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rootOnly := write("shadow", secret+" named\n", 0o600)
	write("keys/id", secret+" in a private directory\n", 0o600)
	if err := os.Chmod(filepath.Join(dir, "keys"), 0o700); err != nil {
		t.Fatal(err)
	}
	// A Node package as engine profiles take them whole (pi), with a
	// root-only file and a private directory inside.
	write("pi/package.json", `{"name": "fake-pi", "version": "0.73.1"}`, 0o644)
	entry := write("pi/dist/cli.js", "#!/usr/bin/env sh\n", 0o755)
	write("pi/credentials", secret+" in a package\n", 0o600)
	write("pi/private/token", secret+" in a private directory of a package\n", 0o600)
	if err := os.Chmod(filepath.Join(dir, "pi", "private"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := func(name, engine string, extra ...string) string {
		return write(name+".yaml", "apiVersion: hookbox.dev/v1alpha1\nkind: Spawn\nmetadata: {name: "+name+"}\nspec:\n"+
			"  engine: "+engine+"\n  workspace: ./ws\n"+strings.Join(extra, "\n")+"\n", 0o644)
	}
	render := func(spec string) (string, error) {
		out, err := exec.Command(hookboxBin, "render", "--runfiles", "--format", "digests", "--state-dir", state, spec).CombinedOutput()
		return string(out), err
	}

	for name, tc := range map[string]struct {
		spec, want string
	}{
		"root-only file as a tool": {spec("tool", "{kind: exec, path: /bin/true}", "  tools: ["+rootOnly+"]"),
			":7:11: spec.tools[0]: " + rootOnly + " (mode 0600) is not readable and executable by other users"},
		"private directory as a tool": {spec("dir", "{kind: exec, path: /bin/true}", "  tools: [./keys]"),
			":7:11: spec.tools[0]: " + filepath.Join(dir, "keys") + " is a directory, not a program"},
		"root-only file as the engine": {spec("engine", "{kind: exec, path: ./shadow}"),
			":5:30: spec.engine.path: " + rootOnly + " (mode 0600) is not readable"},
	} {
		out, err := render(tc.spec)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%s: render --runfiles: %v\n%s\nwant exit 2 and %q", name, err, out, tc.want)
		}
	}
	if _, err := os.Lstat(filepath.Join(state, "runfiles")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("refused specs left a runfiles store (%v)", err)
	}

	pkg := spec("pkg", "{kind: pi, path: "+entry+", model: claude-sonnet-4-5}", "  prompt: x")
	if out, err := render(pkg); err != nil {
		t.Fatalf("render --runfiles of an engine package: %v\n%s", err, out)
	}
	// As root: every copy of a secret is readable by its owner only.
	copies := 0
	err := filepath.WalkDir(state, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(secret)) {
			return err
		}
		copies++
		if fi, err := d.Info(); err != nil || fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s holds a root-only file with mode %v (%v)", p, fi.Mode(), err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if copies < 2 {
		t.Fatalf("%d files under the state dir hold the package's root-only files: the package was not stored?", copies)
	}
	// As an unprivileged user: nothing under the state dir gives a secret.
	cmd := exec.Command("setpriv", "--reuid", nobodyUID, "--regid", nobodyUID, "--clear-groups", "--",
		"grep", "-r", "-l", "-s", "-F", secret, state)
	out, err := cmd.Output()
	if len(out) > 0 {
		t.Errorf("uid %s reads root-only files under the state dir:\n%s", nobodyUID, out)
	}
	if !errors.As(err, new(*exec.ExitError)) {
		t.Errorf("grep as uid %s: %v (did it run?)", nobodyUID, err)
	}
	// The check can see: it finds the secret where every user may read.
	public := write("state/public-copy", secret+"\n", 0o644)
	defer os.Remove(public)
	cmd = exec.Command("setpriv", "--reuid", nobodyUID, "--regid", nobodyUID, "--clear-groups", "--",
		"grep", "-r", "-l", "-s", "-F", secret, state)
	if out, _ := cmd.Output(); strings.TrimSpace(string(out)) != public {
		t.Errorf("grep as uid %s found %q, want the public copy %s: the check cannot see", nobodyUID, out, public)
	}
}
