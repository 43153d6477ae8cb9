package cgroup

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/internal/testenv"
)

// The scenario of a run's teardown: a tree with a daemonized grandchild
// that ignores SIGTERM, a plain child and a process in a nested cgroup.
func TestTeardownTree(t *testing.T) {
	views := []struct {
		name string
		view func(t *testing.T, r *Run)
	}{
		// As opened: on this host cgroup.kill and the cgroup2 freezer.
		{"opened", func(t *testing.T, r *Run) {}},
		// Only the v1 hierarchies: the v1 freezer, signals by pid.
		{"v1-only", func(t *testing.T, r *Run) {
			if r.freezerV1 == "" {
				testenv.Missing(t, "no v1 freezer hierarchy on this host")
			}
			r.Unified = ""
		}},
	}
	for _, v := range views {
		t.Run(v.name, func(t *testing.T) {
			cg := newTestCgroup(t)
			cg.mkSub(t, "nested")
			r, err := Open(cg.Path)
			if err != nil {
				t.Fatal(err)
			}
			v.view(t, r)
			tmp := t.TempDir()
			top := cg.start(t, "", `
sh -c 'echo $$ > "$1/child.tmp"; mv "$1/child.tmp" "$1/child"; while :; do sleep 1; done' "$0" "$1" &
(setsid sh -c 'trap "" TERM; echo $$ > "$1/daemon.tmp"; mv "$1/daemon.tmp" "$1/daemon"; while :; do sleep 1; done' "$0" "$1" &)
wait`, tmp)
			nested := cg.start(t, "nested", `while :; do sleep 1; done`)
			child := readPidFile(t, filepath.Join(tmp, "child"))
			daemon := readPidFile(t, filepath.Join(tmp, "daemon"))

			members, err := r.Members()
			if err != nil {
				t.Fatal(err)
			}
			for name, pid := range map[string]int{"top": top.Process.Pid, "child": child, "daemon": daemon, "nested": nested.Process.Pid} {
				if !slices.Contains(members, pid) {
					t.Errorf("Members() = %v, missing %s pid %d", members, name, pid)
				}
			}
			if !slices.IsSorted(members) || len(slices.Compact(slices.Clone(members))) != len(members) {
				t.Errorf("Members() = %v, not sorted and unique", members)
			}
			if sid, _ := unix.Getsid(daemon); sid != daemon {
				t.Fatalf("daemon %d is not a session leader (sid %d): the tree does not test setsid", daemon, sid)
			}

			n, err := r.KillAll(unix.SIGTERM)
			if err != nil || n < 4 {
				t.Fatalf("KillAll(SIGTERM) = %d, %v; want at least 4 signalled", n, err)
			}
			top.Wait()
			nested.Wait()
			eventually(t, "the TERM-abiding child exits", func() bool {
				m, err := r.Members()
				return err == nil && !slices.Contains(m, child)
			})
			members, err = r.Members()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(members, daemon) {
				t.Fatalf("after SIGTERM, Members() = %v lacks the TERM-ignoring daemon %d", members, daemon)
			}
			if empty, err := r.Empty(); empty || err != nil {
				t.Fatalf("Empty() = %v, %v with the daemon still in it", empty, err)
			}

			if n, err := r.KillAll(unix.SIGKILL); err != nil || n < 1 {
				t.Fatalf("KillAll(SIGKILL) = %d, %v", n, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := r.WaitEmpty(ctx, 20*time.Millisecond); err != nil {
				t.Fatalf("WaitEmpty: %v", err)
			}
			if m, err := r.Members(); len(m) != 0 || err != nil {
				t.Fatalf("Members() after WaitEmpty = %v, %v", m, err)
			}
			if left := markedProcesses(t, cg.Marker); len(left) != 0 {
				t.Fatalf("processes with the test's marker still running: %v", left)
			}
			assertFrozenNowhere(t, r)

			if err := r.Remove(); err != nil {
				t.Fatalf("Remove: %v", err)
			}
			if err := r.Remove(); err != nil {
				t.Fatalf("second Remove: %v", err)
			}
			for _, d := range r.dirs() {
				if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s still there after Remove: %v", d, err)
				}
			}
			if v.name == "opened" {
				if ok, err := Exists(cg.Path); ok || err != nil {
					t.Errorf("Exists after Remove = %v, %v", ok, err)
				}
				if _, err := Open(cg.Path); !errors.Is(err, ErrNotFound) {
					t.Errorf("Open after Remove: %v, want ErrNotFound", err)
				}
			}
		})
	}
}

// assertFrozenNowhere checks KillAll thawed what it froze.
func assertFrozenNowhere(t *testing.T, r *Run) {
	t.Helper()
	if r.Unified != "" {
		if data, err := os.ReadFile(filepath.Join(r.Unified, "cgroup.freeze")); err == nil && strings.TrimSpace(string(data)) != "0" {
			t.Errorf("cgroup.freeze = %q after KillAll", data)
		}
	}
	if r.freezerV1 != "" {
		if data, err := os.ReadFile(filepath.Join(r.freezerV1, "freezer.state")); err == nil && strings.TrimSpace(string(data)) != "THAWED" {
			t.Errorf("freezer.state = %q after KillAll", data)
		}
	}
}

// One KillAll(SIGKILL) must end a tree that forks as fast as it can: the
// freezer (or cgroup.kill) closes the race between listing and signalling.
func TestKillAllForkStorm(t *testing.T) {
	views := []struct {
		name string
		view func(t *testing.T, r *Run)
	}{
		{"opened", func(t *testing.T, r *Run) {}},
		{"v1-freezer", func(t *testing.T, r *Run) {
			if r.freezerV1 == "" {
				testenv.Missing(t, "no v1 freezer hierarchy on this host")
			}
			r.Unified = ""
		}},
	}
	for _, v := range views {
		t.Run(v.name, func(t *testing.T) {
			cg := newTestCgroup(t)
			// A safety net, far above the storm's size.
			if cg.dirs["pids"] != "" {
				cg.write(t, "pids", "pids.max", "2000")
			} else if fileHasWord(filepath.Join(cg.dirs["unified"], "cgroup.controllers"), "pids") {
				cg.write(t, "unified", "pids.max", "2000")
			}
			r, err := Open(cg.Path)
			if err != nil {
				t.Fatal(err)
			}
			v.view(t, r)
			storm := cg.start(t, "", `while :; do sleep 0.3 & (sleep 0.3 &); done`)
			eventually(t, "the storm gets going", func() bool {
				m, _ := r.Members()
				return len(m) > 50
			})
			if _, err := r.KillAll(unix.SIGKILL); err != nil {
				t.Fatal(err)
			}
			storm.Wait()
			// The storm's sleeps last 0.3 s: waiting less than that proves
			// none was forked after the kill and survived it.
			ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
			defer cancel()
			if err := r.WaitEmpty(ctx, 5*time.Millisecond); err != nil {
				m, _ := r.Members()
				t.Fatalf("WaitEmpty after one KillAll(SIGKILL): %v; members %v", err, m)
			}
			assertFrozenNowhere(t, r)
		})
	}
}

func TestIDIsCgroup2Inode(t *testing.T) {
	cg := newTestCgroup(t)
	if cg.dirs["unified"] == "" {
		testenv.Missing(t, "no cgroup2 hierarchy on this host")
	}
	r, err := Open(cg.Path)
	if err != nil {
		t.Fatal(err)
	}
	id, err := r.ID()
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(cg.dirs["unified"], &st); err != nil {
		t.Fatal(err)
	}
	if id != st.Ino {
		t.Errorf("ID() = %d, inode of %s is %d", id, cg.dirs["unified"], st.Ino)
	}
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, cg.dirs["unified"], 0)
	if err != nil {
		t.Fatalf("name_to_handle_at: %v", err)
	}
	if b := h.Bytes(); len(b) != 8 || binary.LittleEndian.Uint64(b) != id {
		t.Errorf("ID() = %d, name_to_handle_at handle %x (type %#x)", id, b, h.Type())
	}

	// The same path made again is a different cgroup with a new id.
	if err := r.Remove(); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(cg.dirs["unified"], 0o755); err != nil {
		t.Fatal(err)
	}
	again, err := Open(cg.Path)
	if err != nil {
		t.Fatal(err)
	}
	if id2, err := again.ID(); err != nil || id2 == id {
		t.Errorf("ID of the re-created cgroup = %d, %v; the old one was %d", id2, err, id)
	}
}

func TestIDWithoutCgroup2(t *testing.T) {
	r := &Run{Path: "/hookbox/x", Layout: host.CgroupLegacy, V1: []string{"/sys/fs/cgroup/pids/hookbox/x"}}
	if _, err := r.ID(); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("ID() without cgroup2: %v, want ErrNotSupported", err)
	}
}

func TestOpenRefuses(t *testing.T) {
	for _, p := range []string{"", "hookbox/x", "/", "/hookbox/../x", "/hookbox/x/", "/a//b"} {
		if _, err := Open(p); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("Open(%q) = %v, want ErrInvalidPath", p, err)
		}
	}
	if _, err := Open("/hookbox-test/does-not-exist-" + randomHex(t)); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open of a missing cgroup: %v, want ErrNotFound", err)
	}
	if ok, err := Exists("/hookbox-test/does-not-exist-" + randomHex(t)); ok || err != nil {
		t.Errorf("Exists of a missing cgroup = %v, %v", ok, err)
	}
}

func TestOOMKilled(t *testing.T) {
	hog := newTestCgroup(t)
	switch {
	case hog.dirs["memory"] != "":
		hog.write(t, "memory", "memory.limit_in_bytes", strconv.Itoa(16<<20))
		if _, err := os.Stat(filepath.Join(hog.dirs["memory"], "memory.memsw.limit_in_bytes")); err == nil {
			hog.write(t, "memory", "memory.memsw.limit_in_bytes", strconv.Itoa(16<<20)) // no escape to swap
		}
	case hog.dirs["unified"] != "" && fileHasWord(filepath.Join(hog.dirs["unified"], "cgroup.controllers"), "memory"):
		hog.write(t, "unified", "memory.max", strconv.Itoa(16<<20))
		hog.write(t, "unified", "memory.swap.max", "0")
	default:
		testenv.Missing(t, "no memory controller for the test cgroup (v1 memory hierarchy or cgroup2 memory)")
	}
	r, err := Open(hog.Path)
	if err != nil {
		t.Fatal(err)
	}
	if killed, err := r.OOMKilled(); killed || err != nil {
		t.Fatalf("OOMKilled() before anything ran = %v, %v", killed, err)
	}
	// tail keeps the last 10 lines; /dev/zero has no newline, so it keeps all 64 MiB.
	hogErr := hog.start(t, "", `head -c 64M /dev/zero | tail > /dev/null`).Wait()
	var exit *exec.ExitError
	if !errors.As(hogErr, &exit) {
		t.Fatalf("the memory hog exited with %v, want an OOM kill", hogErr)
	}
	ev, err := r.MemoryEvents()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("hog: %v; MemoryEvents() = %+v", hogErr, ev)
	if ev.OOMKills == 0 {
		t.Fatalf("MemoryEvents() = %+v after the hog died (%v)", ev, hogErr)
	}
	if killed, err := r.OOMKilled(); !killed || err != nil {
		t.Fatalf("OOMKilled() = %v, %v; want true", killed, err)
	}

	calm := newTestCgroup(t)
	rc, err := Open(calm.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := calm.start(t, "", `head -c 1M /dev/zero | tail > /dev/null`).Wait(); err != nil {
		t.Fatal(err)
	}
	if killed, err := rc.OOMKilled(); killed || err != nil {
		t.Fatalf("OOMKilled() of a calm cgroup = %v, %v; want false", killed, err)
	}
}

func fileHasWord(p, word string) bool {
	data, err := os.ReadFile(p)
	return err == nil && slices.Contains(strings.Fields(string(data)), word)
}

func TestMemoryEventsWithoutController(t *testing.T) {
	r := &Run{Path: "/hookbox/x", Layout: host.CgroupUnified, Unified: t.TempDir()}
	if _, err := r.OOMKilled(); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("OOMKilled() without a memory controller: %v, want ErrNotSupported", err)
	}
}

func TestWaitEmptyHonoursContext(t *testing.T) {
	cg := newTestCgroup(t)
	r, err := Open(cg.Path)
	if err != nil {
		t.Fatal(err)
	}
	cg.start(t, "", `while :; do sleep 1; done`)
	eventually(t, "a member appears", func() bool { e, err := r.Empty(); return err == nil && !e })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	begin := time.Now()
	err = r.WaitEmpty(ctx, time.Hour)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitEmpty = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Errorf("WaitEmpty took %v to notice its deadline", d)
	}
	if r.Unified == "" {
		return
	}
	// A member leaving wakes WaitEmpty (cgroup.events) long before its
	// hour-long poll.
	if _, err := r.KillAll(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := r.WaitEmpty(ctx2, time.Hour); err != nil {
		t.Fatalf("WaitEmpty did not wake on cgroup.events: %v", err)
	}
}

// A cgroup that still has a member is not removed, and says why.
func TestRemoveBusy(t *testing.T) {
	cg := newTestCgroup(t)
	r, err := Open(cg.Path)
	if err != nil {
		t.Fatal(err)
	}
	cg.start(t, "", `while :; do sleep 1; done`)
	eventually(t, "a member appears", func() bool { e, err := r.Empty(); return err == nil && !e })
	if err := r.Remove(); !errors.Is(err, ErrBusy) {
		t.Fatalf("Remove of a populated cgroup: %v, want ErrBusy", err)
	}
	if ok, err := Exists(cg.Path); !ok || err != nil {
		t.Fatalf("Exists after a refused Remove = %v, %v", ok, err)
	}
}

// countLoop writes ever larger numbers to the file $1, as fast as it can.
const countLoop = `i=0; while :; do i=$((i+1)); echo $i > "$1"; done`

// startTwin runs countLoop on file outside any test cgroup until stop is
// called or the test ends.
func startTwin(t *testing.T, file string) (stop func()) {
	t.Helper()
	cmd := exec.Command("sh", "-c", countLoop, "twin", file)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop = sync.OnceFunc(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	t.Cleanup(stop)
	return stop
}

// While KillAll holds the cgroup frozen nothing in it runs, and thawing
// lets it run again.
func TestFreezeStopsTree(t *testing.T) {
	views := []struct {
		name string
		view func(t *testing.T, r *Run)
	}{
		{"cgroup2", func(t *testing.T, r *Run) {
			if r.Unified == "" {
				testenv.Missing(t, "no cgroup2 hierarchy on this host")
			}
			r.freezerV1 = ""
		}},
		{"v1", func(t *testing.T, r *Run) {
			if r.freezerV1 == "" {
				testenv.Missing(t, "no v1 freezer hierarchy on this host")
			}
			r.Unified = ""
		}},
	}
	for _, v := range views {
		t.Run(v.name, func(t *testing.T) {
			cg := newTestCgroup(t)
			r, err := Open(cg.Path)
			if err != nil {
				t.Fatal(err)
			}
			v.view(t, r)
			dir := t.TempDir()
			counter, twin := filepath.Join(dir, "counter"), filepath.Join(dir, "twin")
			cg.start(t, "", countLoop, counter)
			size := func() string { data, _ := os.ReadFile(counter); return string(data) }
			eventually(t, "the counter runs", func() bool { return size() != "" })

			thaw := r.freeze()
			frozen := size()
			// The window is measured in iterations of the same loop outside
			// the cgroup, not in wall time: once its twin has counted a
			// thousand, the counter would have moved had it run.
			stopTwin := startTwin(t, twin)
			eventually(t, "the twin outside the cgroup counts to 1000", func() bool {
				data, _ := os.ReadFile(twin)
				n, _ := strconv.Atoi(strings.TrimSpace(string(data)))
				return n >= 1000
			})
			stopTwin()
			if now := size(); now != frozen {
				t.Fatalf("counter moved from %q to %q while frozen", frozen, now)
			}
			if err := thaw(); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the counter runs again after the thaw", func() bool { return size() != frozen })
			assertFrozenNowhere(t, r)
		})
	}
}
