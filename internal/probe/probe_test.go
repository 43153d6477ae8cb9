package probe

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestRunReportsPathsDialsAndNames(t *testing.T) {
	t.Setenv("HOOKBOX_PROBE_TEST", "secret-value")
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()

	r := Run([]string{dir, file, filepath.Join(dir, "missing")}, []string{l.Addr().String(), closedAddr}, []string{dir}, time.Second)
	if !slices.Contains(r.Env, "HOOKBOX_PROBE_TEST") {
		t.Errorf("env names %v lack HOOKBOX_PROBE_TEST", r.Env)
	}
	for _, name := range r.Env {
		if name == "secret-value" {
			t.Error("a value is among the names")
		}
	}
	if r.UID != os.Getuid() || r.GID != os.Getgid() {
		t.Errorf("ids %d:%d", r.UID, r.GID)
	}
	if p := r.Paths[0]; !p.Exists || !p.Writable || p.Mount == "" {
		t.Errorf("temp dir: %+v", p)
	}
	if p := r.Paths[1]; !p.Exists || !p.Writable {
		t.Errorf("file: %+v", p)
	}
	if p := r.Paths[2]; p.Exists || p.Writable {
		t.Errorf("missing: %+v", p)
	}
	if d := r.Dial[0]; !d.OK {
		t.Errorf("listening address: %+v", d)
	}
	if d := r.Dial[1]; d.OK || d.Error != "connection refused" {
		t.Errorf("closed address: %+v", d)
	}
	if r.Limits[dir+" inodes"] == "" {
		t.Errorf("no statfs of %s in %v", dir, r.Limits)
	}
}

func TestUnescape(t *testing.T) {
	if got := unescape(`/a\040b`); got != "/a b" {
		t.Errorf("got %q", got)
	}
}
