package cgroup

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/internal/testenv"
)

// testParent is the cgroup under which tests make theirs, in every hierarchy.
const testParent = "/hookbox-test"

// runcControllers are the v1 hierarchies the tests put their cgroups in,
// as runc would (cpuset is left out: it needs cpus and mems set first).
var runcControllers = []string{"pids", "memory", "freezer", "cpu"}

// testCgroup is a cgroup a test made at /hookbox-test/<random> in the
// cgroup2 hierarchy and in the runcControllers v1 hierarchies, the way
// runc makes a container's. Cleanup kills whatever is left in it, removes
// it and reaps orphans the tests' process trees left behind.
type testCgroup struct {
	Path   string
	Marker string            // a string to put in the cmdline of every process the test starts
	dirs   map[string]string // "unified" or a v1 controller → the cgroup's directory
}

func newTestCgroup(t *testing.T) *testCgroup {
	t.Helper()
	testenv.RequireRoot(t)
	// Orphans of a test's tree (the daemonized grandchild, a killed
	// shell's children) would otherwise go to this host's pid 1, which
	// may never reap them.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
	cgs, err := host.HostCgroups()
	if err != nil {
		t.Fatal(err)
	}
	id := randomHex(t)
	c := &testCgroup{Path: testParent + "/" + id, Marker: "hookbox-cgtest-" + id, dirs: map[string]string{}}
	t.Cleanup(func() { c.destroy(t) })
	for _, h := range cgs.Hierarchies {
		key := ""
		if h.Unified {
			key = "unified"
		} else {
			for _, ctl := range runcControllers {
				if h.Has(ctl) && c.dirs[ctl] == "" {
					key = ctl
					break
				}
			}
		}
		if key == "" {
			continue
		}
		dir := h.DirFor(c.Path)
		if dir == "" {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			t.Fatalf("creating %s: %v", filepath.Dir(dir), err)
		}
		if h.Unified {
			delegate(t, filepath.Dir(dir))
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatalf("creating test cgroup: %v", err)
		}
		c.dirs[key] = dir
	}
	if len(c.dirs) == 0 {
		testenv.Missing(t, "no cgroup hierarchy to create a test cgroup in")
	}
	return c
}

// delegate enables in the cgroup2 directory parent the controllers the tests use that its own parent hands down, as
// a pure v2 host needs before memory.max or pids.max exist in a child.
func delegate(t *testing.T, parent string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ctl := range strings.Fields(string(data)) {
		if ctl == "memory" || ctl == "pids" {
			// Best effort: a parent with processes of its own cannot.
			writeControl(filepath.Join(parent, "cgroup.subtree_control"), "+"+ctl)
		}
	}
}

func randomHex(t testing.TB) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// mkSub makes the child cgroup name in every hierarchy.
func (c *testCgroup) mkSub(t *testing.T, name string) {
	t.Helper()
	for _, d := range c.dirs {
		if err := os.Mkdir(filepath.Join(d, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// write writes a control file of the cgroup in hierarchy key.
func (c *testCgroup) write(t *testing.T, key, file, value string) {
	t.Helper()
	if err := writeControl(filepath.Join(c.dirs[key], file), value); err != nil {
		t.Fatalf("writing %s %s: %v", key, file, err)
	}
}

// start runs script with sh -c in child cgroup sub ("" for the cgroup
// itself) of every hierarchy. The shell waits on stdin until its pid is in
// all of them, so everything it starts is born inside. $0 is c.Marker and
// $1.. are args.
func (c *testCgroup) start(t *testing.T, sub, script string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", "read gate; " + script, c.Marker}, args...)...)
	gate, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	for _, d := range c.dirs {
		if err := writeControl(filepath.Join(d, sub, "cgroup.procs"), strconv.Itoa(cmd.Process.Pid)); err != nil {
			t.Fatalf("moving pid %d into %s: %v", cmd.Process.Pid, filepath.Join(d, sub), err)
		}
	}
	if _, err := gate.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	gate.Close()
	return cmd
}

// destroy kills what is left in the cgroup, removes it in every hierarchy
// (children first), removes /hookbox-test when it is empty and reaps the
// orphans that came to this process.
func (c *testCgroup) destroy(t *testing.T) {
	for _, d := range c.dirs {
		var all []string
		walk(d, func(sub string) error { all = append(all, sub); return nil })
		for i := len(all) - 1; i >= 0; i-- {
			deadline := time.Now().Add(10 * time.Second)
			for {
				pids, _ := procsUnder(all[i])
				if len(pids) == 0 || time.Now().After(deadline) {
					break
				}
				writeControl(filepath.Join(all[i], "freezer.state"), "THAWED")
				writeControl(filepath.Join(all[i], "cgroup.freeze"), "0")
				for _, p := range pids {
					unix.Kill(p, unix.SIGKILL)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := syscall.Rmdir(all[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("cleanup: removing test cgroup %s: %v", all[i], err)
			}
		}
		parent := filepath.Dir(d)
		if filepath.Base(parent) == strings.TrimPrefix(testParent, "/") {
			syscall.Rmdir(parent) // fails while another test's cgroup is in it
		}
	}
	reapOrphans()
}

// reapOrphans reaps every exited child of this process. Called only from
// cleanup, after each test's own commands were waited for.
func reapOrphans() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}

// markedProcesses returns the pids whose command line contains marker.
func markedProcesses(t *testing.T, marker string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(cmdline, []byte(marker)) {
			out = append(out, pid)
		}
	}
	return out
}

// readPidFile waits for a shell to write its pid to p.
func readPidFile(t *testing.T, p string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := os.ReadFile(p)
		if err == nil && strings.HasSuffix(string(data), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s after 10s", p)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// eventually polls cond for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
