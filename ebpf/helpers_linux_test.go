//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package ebpf

import (
	"bytes"
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

	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/internal/testenv"
)

func TestMain(m *testing.M) {
	switch os.Getenv("HOOKBOX_EBPF_HELPER") {
	case "execveat":
		os.Exit(helperExecveat())
	case "inject":
		os.Exit(helperInject())
	case "memfd":
		os.Exit(helperMemfd())
	}
	os.Exit(m.Run())
}

// missing fails under HOOKBOX_INTEGRATION=1 (a machine that should run the
// tracer must not pass by skipping) and skips otherwise.
func missing(t testing.TB, why string) {
	t.Helper()
	testenv.Unmet(t, "exec tracer", why)
}

// requireTracer loads a tracer for the test or skips/fails with why not.
func requireTracer(t testing.TB, opts Options) *Tracer {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, fmt.Sprintf("the exec tracer needs root (uid %d)", os.Geteuid()))
	}
	if err := EnsureTracefs(); err != nil {
		missing(t, err.Error())
	}
	tr, err := Load(opts)
	if errors.Is(err, ErrNotSupported) {
		missing(t, err.Error())
	}
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return tr
}

// cgroup2Root is where the cgroup2 hierarchy is mounted: /sys/fs/cgroup on
// a pure v2 host, /sys/fs/cgroup/unified on a hybrid one.
func cgroup2Root(t testing.TB) string {
	t.Helper()
	cgs, err := host.HostCgroups()
	if err != nil {
		t.Fatal(err)
	}
	if cgs.Unified == "" {
		missing(t, "no cgroup2 hierarchy mounted")
	}
	return cgs.Unified
}

// testCgroup is a cgroup2 directory made for one test; its inode is the id
// the tracer filters on.
type testCgroup struct {
	Dir string
	ID  uint64
	fd  int
}

const testParent = "hookbox-ebpf-test"

func newTestCgroup(t testing.TB) *testCgroup {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	parent := filepath.Join(cgroup2Root(t), testParent)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatalf("creating %s: %v", parent, err)
	}
	dir := filepath.Join(parent, hex.EncodeToString(b[:]))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("creating test cgroup: %v", err)
	}
	c := &testCgroup{Dir: dir, fd: -1}
	t.Cleanup(func() { c.destroy(t) })
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	c.ID = st.Ino
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	c.fd = fd
	return c
}

// command makes a command that starts directly inside the cgroup
// (clone3 CLONE_INTO_CGROUP).
func (c *testCgroup) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: c.fd}
	return cmd
}

func (c *testCgroup) destroy(t testing.TB) {
	if c.fd >= 0 {
		unix.Close(c.fd)
	}
	// Kill leftovers, then remove the directory once it is empty.
	_ = os.WriteFile(filepath.Join(c.Dir, "cgroup.kill"), []byte("1"), 0)
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := os.Remove(c.Dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("removing test cgroup %s: %v", c.Dir, err)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = os.Remove(filepath.Dir(c.Dir)) // the shared parent, when no other test uses it
}

// collector reads a watch's events until the channel closes.
type collector struct {
	done   chan struct{}
	events []Event
}

func collect(w *Watch) *collector {
	c := &collector{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for ev := range w.Events() {
			c.events = append(c.events, ev)
		}
	}()
	return c
}

// stop stops the watch and returns its events and stats.
func (c *collector) stop(t testing.TB, w *Watch) ([]Event, Stats) {
	t.Helper()
	st, err := w.Stop()
	if err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Events was not closed after Stop")
	}
	return c.events, st
}

// expect is a typed matcher for one event; zero fields are not checked.
type expect struct {
	kind     Kind
	filename string
	argv     []string // exact, element by element
	file     *FileID
	killed   *bool
	errno    syscall.Errno
	tgid     int
}

func ptr[T any](v T) *T { return &v }

func (x expect) check(ev Event) error {
	var diffs []string
	if x.kind != "" && ev.Kind != x.kind {
		diffs = append(diffs, fmt.Sprintf("kind %q, want %q", ev.Kind, x.kind))
	}
	if x.filename != "" && ev.Filename != x.filename {
		diffs = append(diffs, fmt.Sprintf("filename %q, want %q", ev.Filename, x.filename))
	}
	if x.argv != nil && !equalArgv(ev.Argv, x.argv) {
		diffs = append(diffs, fmt.Sprintf("argv %q, want %q", ev.ArgvStrings(), x.argv))
	}
	if x.file != nil && ev.File() != *x.file {
		diffs = append(diffs, fmt.Sprintf("file %s, want %s", ev.File(), *x.file))
	}
	if x.killed != nil && ev.Killed != *x.killed {
		diffs = append(diffs, fmt.Sprintf("killed %v, want %v", ev.Killed, *x.killed))
	}
	if x.errno != 0 && ev.Errno != x.errno {
		diffs = append(diffs, fmt.Sprintf("errno %v, want %v", ev.Errno, x.errno))
	}
	if x.tgid != 0 && int(ev.TGID) != x.tgid {
		diffs = append(diffs, fmt.Sprintf("tgid %d, want %d", ev.TGID, x.tgid))
	}
	if len(diffs) > 0 {
		return errors.New(strings.Join(diffs, "; "))
	}
	return nil
}

func equalArgv(got [][]byte, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if !bytes.Equal(got[i], []byte(want[i])) {
			return false
		}
	}
	return true
}

// checkEvents asserts the events match the expectations in order, one
// for one.
func checkEvents(t testing.TB, got []Event, want ...expect) {
	t.Helper()
	for i := 0; i < len(got) || i < len(want); i++ {
		switch {
		case i >= len(got):
			t.Errorf("event %d missing, want %+v", i, want[i])
		case i >= len(want):
			t.Errorf("unexpected event %d: %s %q %q", i, got[i].Kind, got[i].Filename, got[i].ArgvStrings())
		default:
			if err := want[i].check(got[i]); err != nil {
				t.Errorf("event %d (%s %q): %v", i, got[i].Kind, got[i].Filename, err)
			}
		}
	}
}

func mustIdentity(t testing.TB, path string) FileID {
	t.Helper()
	id, err := FileIdentity(path)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// requireComplete asserts the stats account for every event.
func requireComplete(t testing.TB, st Stats) {
	t.Helper()
	if inc := st.Incomplete(); len(inc) > 0 {
		t.Errorf("watch incomplete %v: %+v", inc, st)
	}
	if st.Delivered != st.Matched {
		t.Errorf("delivered %d of %d matched: %+v", st.Delivered, st.Matched, st)
	}
}
