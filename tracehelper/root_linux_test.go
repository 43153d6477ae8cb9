package tracehelper

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/ebpf"
	"hookbox.dev/hookbox/internal/mountinfo"
	"hookbox.dev/hookbox/internal/testenv"
)

// The unprivileged client: the test binary re-executed, dropping to
// nobody before it dials, since SO_PEERCRED records who dialled.
const (
	childEnv       = "HOOKBOX_TRACEHELPER_CHILD" // the socket to dial
	childCgroupEnv = "HOOKBOX_TRACEHELPER_CHILD_CGROUP"
	nobody         = 65534
)

func TestMain(m *testing.M) {
	if sock := os.Getenv(childEnv); sock != "" {
		os.Exit(unprivilegedWatch(sock, os.Getenv(childCgroupEnv)))
	}
	os.Exit(m.Run())
}

// unprivilegedWatch prints "refused CODE" or "ok CGROUPID STOPERROR".
func unprivilegedWatch(sock, cgroupDir string) int {
	if err := syscall.Setgroups(nil); err != nil {
		fmt.Println("error", err)
		return 1
	}
	if err := syscall.Setgid(nobody); err != nil {
		fmt.Println("error", err)
		return 1
	}
	if err := syscall.Setuid(nobody); err != nil {
		fmt.Println("error", err)
		return 1
	}
	c, err := connect(sock)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	w, err := c.Watch(cgroupDir, ebpf.Policy{})
	var refused *RefusedError
	switch {
	case errors.As(err, &refused):
		fmt.Println("refused", refused.Code)
	case err != nil:
		fmt.Println("error", err)
		return 1
	default:
		_, err := w.Stop()
		fmt.Println("ok", w.CgroupID(), err)
	}
	return 0
}

// cgroup2Mount is where this host mounts the cgroup2 hierarchy
// (/sys/fs/cgroup on a v2 host, /sys/fs/cgroup/unified on a hybrid one).
func cgroup2Mount(t *testing.T) string {
	t.Helper()
	mounts, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if m.FSType == "cgroup2" && m.Root == "/" {
			return m.MountPoint
		}
	}
	testenv.Missing(t, "no cgroup2 hierarchy mounted")
	return ""
}

// newTestCgroup makes a cgroup2 directory for the test and removes it at
// cleanup, killing whatever is left in it. It returns the directory and
// its id.
func newTestCgroup(t *testing.T) (string, uint64) {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	dir := filepath.Join(cgroup2Mount(t), "hookbox-tracehelper-test-"+hex.EncodeToString(b[:]))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("creating a test cgroup: %v", err)
	}
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			err := unix.Rmdir(dir)
			if err == nil || errors.Is(err, unix.ENOENT) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("removing test cgroup %s: %v", dir, err)
				return
			}
		}
	})
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	return dir, st.Ino
}

// chown gives dir to uid for the rest of the test.
func chown(t *testing.T, dir string, uid int) {
	t.Helper()
	if err := os.Chown(dir, uid, uid); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Chown(dir, 0, 0); err != nil {
			t.Error(err)
		}
	})
}

// startRealServer serves the BPF tracer with the real cgroup checks.
func startRealServer(t *testing.T) *harness {
	t.Helper()
	tracer := NewBPFTracer(ebpf.Options{})
	if err := tracer.Load(); errors.Is(err, ebpf.ErrNotSupported) {
		testenv.Missing(t, err.Error())
	} else if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tracer.Close(); err != nil {
			t.Errorf("closing the tracer: %v", err)
		}
	})
	return startServer(t, tracer, func(s *Server) { s.inspect = inspectCgroup })
}

func execOf(evs []ebpf.Event, filename string) *ebpf.Event {
	for i := range evs {
		if evs[i].Kind == ebpf.KindExec && evs[i].Filename == filename {
			return &evs[i]
		}
	}
	return nil
}

// TestRootHelper runs the helper with the real tracer: a watch over a
// real socket, and refusals of cgroups the client's uid does not own.
func TestRootHelper(t *testing.T) {
	testenv.RequireRoot(t)
	h := startRealServer(t)

	t.Run("watch", func(t *testing.T) {
		dir, id := newTestCgroup(t)
		w := watch(t, h.sock, dir, ebpf.Policy{})
		if w.CgroupID() != id {
			t.Errorf("CgroupID = %d, want the directory's inode %d", w.CgroupID(), id)
		}
		events := collect(w)
		cmd := exec.Command("/bin/sh", "-c", "/bin/true; /bin/echo hi")
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: openFD(t, dir, unix.O_RDONLY|unix.O_DIRECTORY)}
		if out, err := cmd.Output(); err != nil || string(out) != "hi\n" {
			t.Fatalf("sh in the cgroup: %q, %v", out, err)
		}
		stats, err := w.Stop()
		if err != nil {
			t.Fatalf("Stop: %v", err)
		}
		evs := recv(t, events, "Events to close")
		for _, name := range []string{"/bin/sh", "/bin/true", "/bin/echo"} {
			ev := execOf(evs, name)
			if ev == nil {
				t.Errorf("no exec of %s among %d events", name, len(evs))
				continue
			}
			if ev.CgroupID != id || ev.UID != 0 {
				t.Errorf("exec of %s: cgroup %d uid %d, want cgroup %d uid 0", name, ev.CgroupID, ev.UID, id)
			}
		}
		if stats.Lost != 0 || stats.Unaccounted != 0 || stats.Delivered != uint64(len(evs)) {
			t.Errorf("stats %+v for %d events: want none lost, all delivered", stats, len(evs))
		}
		waitLog(t, h.log, fmt.Sprintf("cgroup=%d end=stop events=%d lost=0", id, len(evs)))
	})

	t.Run("root refused another uid's cgroup", func(t *testing.T) {
		dir, _ := newTestCgroup(t)
		chown(t, dir, 12345)
		_, err := dial(t, h.sock).Watch(dir, ebpf.Policy{})
		if code := refusedCode(t, err); code != CodeNotOwner {
			t.Errorf("code %s, want %s", code, CodeNotOwner)
		}
	})

	t.Run("unprivileged client", func(t *testing.T) {
		// nobody must reach the socket.
		if err := os.Chmod(filepath.Dir(h.sock), 0o755); err != nil {
			t.Fatal(err)
		}
		dir, id := newTestCgroup(t)
		watchAsNobody := func() string {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+h.sock, childCgroupEnv+"="+dir)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("unprivileged client: %v\n%s", err, out)
			}
			return strings.TrimSpace(string(out))
		}
		if got := watchAsNobody(); got != "refused "+string(CodeNotOwner) {
			t.Errorf("nobody watching root's cgroup: %q, want refused %s", got, CodeNotOwner)
		}
		chown(t, dir, nobody)
		if got, want := watchAsNobody(), fmt.Sprintf("ok %d <nil>", id); got != want {
			t.Errorf("nobody watching its cgroup: %q, want %q", got, want)
		}
		waitLog(t, h.log, fmt.Sprintf("watch start uid=%d", nobody))
	})
}
