package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func seed(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var stderr bytes.Buffer
	code := run(args, &stderr)
	return code, stderr.String()
}

func mode(t *testing.T, p string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

func TestMkdirIgnoresUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	run := t.TempDir()
	home, out, nested := filepath.Join(run, "home"), filepath.Join(run, "out"), filepath.Join(run, "out", "x")
	if code, stderr := seed(t, "mkdir", "0750", run, home, out, nested); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, d := range []string{home, out, nested} {
		if m := mode(t, d); m != fs.ModeDir|0o750 {
			t.Errorf("%s: mode %v, want drwxr-x---", d, m)
		}
	}
	// The existing root is kept as it is, and a second run changes nothing.
	if m := mode(t, run); m.Perm() == 0o750 {
		t.Errorf("the existing directory %s was changed to %v", run, m)
	}
	if code, stderr := seed(t, "mkdir", "0700", home); code != 0 || mode(t, home) != fs.ModeDir|0o750 {
		t.Errorf("again: exit %d %s, mode %v", code, stderr, mode(t, home))
	}
}

func TestMkdirRefuses(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	for name, tc := range map[string]struct {
		args []string
		code int
		want string
	}{
		"missing parent":   {[]string{"mkdir", "0700", filepath.Join(dir, "a", "b")}, exitFailure, "no such file"},
		"file in the way":  {[]string{"mkdir", "0700", file}, exitFailure, "not a directory"},
		"relative":         {[]string{"mkdir", "0700", "home"}, exitUsage, "not an absolute path"},
		"setuid mode":      {[]string{"mkdir", "4700", dir}, exitUsage, "octal permission bits"},
		"not octal":        {[]string{"mkdir", "0799", dir}, exitUsage, "octal permission bits"},
		"unknown verb":     {[]string{"rm", "0700", dir}, exitUsage, "usage"},
		"install one path": {[]string{"install", "0600", file}, exitUsage, "usage"},
		"too few":          {[]string{"mkdir", "0700"}, exitUsage, "usage"},
	} {
		code, stderr := seed(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) || !strings.HasPrefix(stderr, "hookbox-seed: ") {
			t.Errorf("%s: exit %d %q, want %d with %q", name, code, stderr, tc.code, tc.want)
		}
	}
}

func TestInstall(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	os.WriteFile(src, []byte("config = 1\n"), 0o400)
	if code, stderr := seed(t, "install", "0644", src, dst); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if got, _ := os.ReadFile(dst); string(got) != "config = 1\n" || mode(t, dst) != 0o644 {
		t.Errorf("dst %q mode %v", got, mode(t, dst))
	}
	// Again, over the file a first attempt left: replaced, same mode.
	os.WriteFile(src, []byte("x"), 0o400)
	if code, stderr := seed(t, "install", "0600", src, dst); code != 0 {
		t.Fatalf("again: exit %d: %s", code, stderr)
	}
	if got, _ := os.ReadFile(dst); string(got) != "x" || mode(t, dst) != 0o600 {
		t.Errorf("replaced dst %q mode %v", got, mode(t, dst))
	}
	// A symlink at DST is not written through.
	victim, link := filepath.Join(dir, "victim"), filepath.Join(dir, "link")
	os.WriteFile(victim, []byte("keep"), 0o600)
	os.Symlink(victim, link)
	if code, _ := seed(t, "install", "0600", src, link); code != exitFailure {
		t.Errorf("install over a symlink: exit %d, want %d", code, exitFailure)
	}
	if got, _ := os.ReadFile(victim); string(got) != "keep" {
		t.Errorf("the symlink's target was written: %q", got)
	}
	if code, stderr := seed(t, "install", "0600", filepath.Join(dir, "missing"), dst); code != exitFailure || !strings.Contains(stderr, "no such file") {
		t.Errorf("missing source: exit %d %q", code, stderr)
	}
}
