package daemon

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/host"
)

func TestParseShimArgs(t *testing.T) {
	for _, tc := range []struct {
		args         []string
		ns, id, addr string
		ok           bool
	}{
		{[]string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "hookbox", "-id", "hbx-1", "-address", "/run/containerd/containerd.sock"},
			"hookbox", "hbx-1", "/run/containerd/containerd.sock", true},
		{[]string{"containerd-shim-runc-v2", "--namespace=k8s.io", "-debug", "-id=abc", "-publish-binary", "/usr/bin/containerd", "-address", "/a.sock"},
			"k8s.io", "abc", "/a.sock", true},
		// A shim command run for an action is not a serving shim.
		{[]string{"containerd-shim-runc-v2", "-namespace", "n", "-id", "i", "-address", "/a", "delete"}, "", "", "", false},
		{[]string{"containerd-shim-runc-v2", "-namespace", "n", "-id", "i", "-address", "/a", "-bundle", "/b", "start"}, "", "", "", false},
		{[]string{"containerd-shim-runc-v2", "-namespace", "n", "-id", "i"}, "n", "i", "", false},
		{[]string{"containerd-shim-runc-v2", "-namespace", "n", "-id"}, "", "", "", false},
		{[]string{"containerd", "-namespace", "n", "-id", "i", "-address", "/a"}, "", "", "", false},
		{[]string{"/bin/sleep", "-namespace", "n", "-id", "i", "-address", "/a"}, "", "", "", false},
		{nil, "", "", "", false},
	} {
		ns, id, addr, ok := ParseShimArgs(tc.args)
		if ok != tc.ok || (ok && (ns != tc.ns || id != tc.id || addr != tc.addr)) {
			t.Errorf("ParseShimArgs(%q) = %q %q %q %v, want %q %q %q %v", tc.args, ns, id, addr, ok, tc.ns, tc.id, tc.addr, tc.ok)
		}
	}
}

func TestSameAddress(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "c.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{sock, "unix://" + sock, true},
		{sock, filepath.Join(link, "c.sock"), true},
		{sock, filepath.Join(dir, "other.sock"), false},
		{"/run/x.sock", "/run/x.sock", true}, // no socket: the paths decide
		{"relative.sock", "relative.sock", false},
	} {
		if got := SameAddress(tc.a, tc.b); got != tc.want {
			t.Errorf("SameAddress(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// fakeBundle lays out a task bundle under a state directory as containerd
// does: a work link into the root, the shim's socket named in "address".
func fakeBundle(t *testing.T, ns, id string) (state, bundle, work, sock string) {
	t.Helper()
	dir := t.TempDir()
	state = filepath.Join(dir, "state")
	bundle = TaskBundle(state, ns, id)
	work = filepath.Join(dir, "root", TaskStateDir, ns, id)
	for _, d := range []string{bundle, work} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(work, filepath.Join(bundle, "work")); err != nil {
		t.Fatal(err)
	}
	sock = filepath.Join(dir, "s", "shim.sock")
	os.MkdirAll(filepath.Dir(sock), 0o700)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	os.WriteFile(filepath.Join(bundle, "address"), []byte("unix://"+sock), 0o644)
	return state, bundle, work, sock
}

// startFakeShim runs a process whose command line reads as a shim's,
// working in bundle.
func startFakeShim(t *testing.T, ns, id, address, bundle string) *exec.Cmd {
	t.Helper()
	return startFakeShimWith(t, ns, id, address, bundle)
}

// startFakeShimWith is startFakeShim with files the process inherits.
func startFakeShimWith(t *testing.T, ns, id, address, bundle string, files ...*os.File) *exec.Cmd {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := &exec.Cmd{Path: sh, Dir: bundle, ExtraFiles: files,
		Args: []string{"containerd-shim-hookbox-test", "-c", "sleep 60", "-namespace", ns, "-id", id, "-address", address}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func findShim(t *testing.T, pid int) *Shim {
	t.Helper()
	shims, err := Shims()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range shims {
		if s.PID == pid {
			return &s
		}
	}
	return nil
}

// A shim containerd lost is found by its command line and ended: killed,
// its socket, bundle and work directory removed.
func TestShimEnd(t *testing.T) {
	ns, id := "hookbox-test", "hbx-test-end"
	state, bundle, work, sock := fakeBundle(t, ns, id)
	cmd := startFakeShim(t, ns, id, "/run/hookbox-test.sock", bundle)
	s := findShim(t, cmd.Process.Pid)
	if s == nil {
		t.Fatal("Shims() does not list the shim")
	}
	if s.Namespace != ns || s.ID != id || s.Address != "/run/hookbox-test.sock" || s.Bundle != bundle {
		t.Fatalf("Shims() read %+v", *s)
	}
	if ids, err := TaskBundles(state, ns); err != nil || len(ids) != 1 || ids[0] != id {
		t.Errorf("TaskBundles = %v, %v; want [%s]", ids, err, id)
	}
	if err := s.End(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Error("the shim exited on its own; End should have killed it")
	}
	for _, p := range []string{bundle, work, sock} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is still there", p)
		}
	}
	if err := s.End(context.Background()); err != nil {
		t.Errorf("a second End: %v", err)
	}
}

// A pid now used by another process (another start time) is not signalled.
func TestShimEndSparesAReusedPid(t *testing.T) {
	ns, id := "hookbox-test", "hbx-test-reused"
	_, bundle, _, _ := fakeBundle(t, ns, id)
	cmd := startFakeShim(t, ns, id, "/run/hookbox-test.sock", bundle)
	s := findShim(t, cmd.Process.Pid)
	if s == nil {
		t.Fatal("Shims() does not list the shim")
	}
	s.StartTime++
	if err := s.End(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if st, err := host.ReadStat(cmd.Process.Pid); err != nil || st.Exited() {
		t.Error("End signalled a process that is not the shim it found")
	}
}

func TestRemoveBundleRefusesOtherDirectories(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "hookbox", "hbx-1")
	os.MkdirAll(victim, 0o755)
	os.WriteFile(filepath.Join(victim, "keep"), nil, 0o644)
	if err := RemoveBundle(victim); err == nil {
		t.Error("RemoveBundle removed a directory that is not a task bundle")
	}
	if _, err := os.Stat(filepath.Join(victim, "keep")); err != nil {
		t.Errorf("the directory was touched: %v", err)
	}
	if err := RemoveBundle(TaskBundle(dir, "hookbox", "gone")); err != nil {
		t.Errorf("a missing bundle: %v", err)
	}
}

// The name containerd 1.6 gave the shim socket of a task of the system
// containerd (read from its bundle's address file).
func TestShimSocket(t *testing.T) {
	got := ShimSocket("unix:///run/containerd/containerd.sock", "hookbox", "hbx-mx5ifpjy-c820c6f7")
	if want := "/run/containerd/s/8314ae0de9e0497919d7177bbea9bea768755d272a41a71b31aff48997ab341b"; got != want {
		t.Errorf("ShimSocket = %s, want %s", got, want)
	}
}

// The group's shim is the one started for the group's anchor, else the
// one holding the listener at the group's socket (its `start` passed it);
// a shim that only runs beside it, or of another containerd, is not.
func TestGroupShim(t *testing.T) {
	const ns, address = "hookbox-test", "/run/hookbox-test-containerd.sock"
	_, bundle, _, _ := fakeBundle(t, ns, "task-a")
	other := startFakeShim(t, ns, "task-b", address, bundle)
	elsewhere := startFakeShim(t, ns, "group-g", "/run/another-containerd.sock", bundle)
	var shims []Shim
	for _, c := range []*exec.Cmd{other, elsewhere} {
		s := findShim(t, c.Process.Pid)
		if s == nil {
			t.Fatalf("fake shim %d not found", c.Process.Pid)
		}
		shims = append(shims, *s)
	}
	if g := GroupShim(shims, address, ns, "group-g"); g != nil {
		t.Errorf("no shim serves group-g here, got pid %d", g.PID)
	}
	// A shim whose id is the group's (started for its anchor).
	anchor := startFakeShim(t, ns, "group-g", address, bundle)
	if g := GroupShim(append(shims, *findShim(t, anchor.Process.Pid)), address, ns, "group-g"); g == nil || g.PID != anchor.Process.Pid {
		t.Errorf("the anchor's shim (pid %d) is not the group's: %+v", anchor.Process.Pid, g)
	}
	// A shim started for a task of the group, holding the listener at
	// the group's socket. ShimSocket is under /run/containerd/s.
	if os.Getuid() != 0 {
		t.Skip("the group's socket is under /run/containerd/s: root only")
	}
	sock := ShimSocket(address, ns, "group-h")
	if err := os.MkdirAll(filepath.Dir(sock), 0o711); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f, err := l.(*net.UnixListener).File()
	if err != nil {
		t.Fatal(err)
	}
	holder := startFakeShimWith(t, ns, "task-a", address, bundle, f)
	f.Close()
	all := append(shims, *findShim(t, holder.Process.Pid))
	if g := GroupShim(all, address, ns, "group-h"); g == nil || g.PID != holder.Process.Pid {
		t.Errorf("the shim holding group-h's listener (pid %d) is not the group's: %+v", holder.Process.Pid, g)
	}
	l.Close()
	holder.Process.Kill()
	holder.Wait()
	if g := GroupShim(shims, address, ns, "group-h"); g != nil {
		t.Errorf("with the holder gone, group-h's shim is pid %d", g.PID)
	}
}

// A bundle's task is in the group its spec names; one with a shim of its
// own, or no spec, is in none.
func TestBundleGroup(t *testing.T) {
	_, bundle, _, _ := fakeBundle(t, "hookbox-test", "task-a")
	if g := BundleGroup(bundle); g != "" {
		t.Errorf("no config.json: group %q", g)
	}
	os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"annotations":{"dev.hookbox.run-id":"task-a"}}`), 0o644)
	if g := BundleGroup(bundle); g != "" {
		t.Errorf("a task of its own shim: group %q", g)
	}
	os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"annotations":{"io.containerd.runc.v2.group":"hookbox-shim-group"}}`), 0o644)
	if g := BundleGroup(bundle); g != "hookbox-shim-group" {
		t.Errorf("a task in the group: group %q", g)
	}
}
