package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestManagedPaths(t *testing.T) {
	m := ManagedPaths("/var/lib/hookbox", "/run/hookbox")
	want := Managed{
		Dir:          "/var/lib/hookbox/containerd",
		RunDir:       "/run/hookbox/containerd",
		Config:       "/var/lib/hookbox/containerd/config.toml",
		Root:         "/var/lib/hookbox/containerd/root",
		Log:          "/var/lib/hookbox/containerd/containerd.log",
		State:        "/run/hookbox/containerd/state",
		Address:      "/run/hookbox/containerd/containerd.sock",
		TTRPCAddress: "/run/hookbox/containerd/containerd.sock.ttrpc",
		PIDFile:      "/run/hookbox/containerd/containerd.pid",
		RuncRoot:     "/run/hookbox/containerd/runc",
	}
	if m != want {
		t.Errorf("ManagedPaths:\n got %+v\nwant %+v", m, want)
	}
	if err := m.validate(); err != nil {
		t.Error(err)
	}
}

func TestManagedValidate(t *testing.T) {
	long := "/run/" + strings.Repeat("x", 90)
	err := ManagedPaths("/var/lib/hookbox", long).validate()
	if err == nil || !strings.Contains(err.Error(), "shorter runtime directory") {
		t.Errorf("long socket path: %v", err)
	}
	if err := ManagedPaths("rel", "/run/hookbox").validate(); err == nil || !strings.Contains(err.Error(), "not absolute") {
		t.Errorf("relative state dir: %v", err)
	}
}

func TestNotRunning(t *testing.T) {
	m := testLayout(t)
	ctx := context.Background()
	st, err := m.Status(ctx)
	if err != nil || st.Running || st.StalePIDFile {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	// Stop with nothing there, twice: success, and it creates nothing.
	for i := 0; i < 2; i++ {
		if err := m.Stop(ctx, time.Second); err != nil {
			t.Fatalf("Stop #%d: %v", i+1, err)
		}
	}
	if _, err := os.Stat(m.RunDir); !os.IsNotExist(err) {
		t.Errorf("Stop created %s", m.RunDir)
	}
}

// A pid file naming a live process that is not this layout's containerd
// (here: the test itself) is stale, never signalled.
func TestStalePIDFile(t *testing.T) {
	m := testLayout(t)
	if err := os.MkdirAll(m.RunDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.PIDFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := stale(t)
	if err := os.Rename(sock, m.Address); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := m.Status(ctx)
	if err != nil || st.Running || !st.StalePIDFile {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	if err := m.Stop(ctx, time.Second); err != nil {
		t.Fatal(err) // and the test process is still alive to say so
	}
	for _, p := range []string{m.PIDFile, m.Address} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("Stop left %s", p)
		}
	}
}

func TestIsOurs(t *testing.T) {
	m := testLayout(t)
	if m.isOurs(os.Getpid()) {
		t.Error("the test process passed for the managed containerd")
	}
	if m.isOurs(1 << 30) {
		t.Error("a missing pid passed for the managed containerd")
	}
}

func TestLogTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	var b strings.Builder
	b.WriteString("old run\n")
	offset := int64(b.Len())
	for i := 1; i <= 30; i++ {
		b.WriteString("line " + strconv.Itoa(i) + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	got := logTail(path, offset)
	if !strings.HasPrefix(got, "\nlast lines of "+path+":\nline 16\n") || !strings.HasSuffix(got, "line 30") {
		t.Errorf("logTail = %q", got)
	}
	if strings.Contains(got, "old run") || strings.Contains(got, "line 15\n") {
		t.Errorf("logTail quotes too much: %q", got)
	}
	if got := logTail(path, int64(b.Len())); got != "" {
		t.Errorf("nothing new: logTail = %q", got)
	}
	if got := logTail(filepath.Join(t.TempDir(), "none"), 0); got != "" {
		t.Errorf("missing log: logTail = %q", got)
	}
}

func TestDaemonEnvIsPathOnly(t *testing.T) {
	t.Setenv("HOOKBOX_TEST_SECRET", "s3cret")
	env := daemonEnv()
	if len(env) != 1 || !strings.HasPrefix(env[0], "PATH=") {
		t.Errorf("daemon env = %q", env)
	}
}

// testLayout is a managed layout in temp dirs short enough for sockets.
func testLayout(t *testing.T) Managed {
	t.Helper()
	dir, err := os.MkdirTemp("", "hbd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return ManagedPaths(filepath.Join(dir, "state"), filepath.Join(dir, "run"))
}
