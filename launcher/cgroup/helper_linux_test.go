package cgroup

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/internal/host/hosttest"
	"hookbox.dev/hookbox/internal/testenv"
)

// Where a helper's cgroup is made, on each layout.
func TestHelperDirs(t *testing.T) {
	layout := func(mountinfo string) host.Cgroups {
		mounts, err := host.ParseMounts(strings.NewReader(mountinfo))
		if err != nil {
			t.Fatal(err)
		}
		c, err := host.CgroupsOf(mounts)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	const p = "/hookbox/helpers/r.notify@1-2"
	v1Only := `35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
39 31 0:36 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
`
	for _, tc := range []struct {
		name        string
		mountinfo   string
		unifiedOnly bool
		want        []helperDir
	}{
		{"v2", hosttest.MountinfoV2, false, []helperDir{{dir: "/sys/fs/cgroup" + p, unified: true}}},
		{"hybrid", hosttest.MountinfoHybrid, false, []helperDir{
			{dir: "/sys/fs/cgroup/memory" + p, controllers: []string{"memory"}},
			{dir: "/sys/fs/cgroup/freezer" + p, controllers: []string{"freezer"}},
			{dir: "/sys/fs/cgroup/pids" + p, controllers: []string{"pids"}},
			{dir: "/sys/fs/cgroup/unified" + p, unified: true},
		}},
		{"hybrid delegated", hosttest.MountinfoHybrid, true, []helperDir{{dir: "/sys/fs/cgroup/unified" + p, unified: true}}},
		{"v1", v1Only, false, []helperDir{
			{dir: "/sys/fs/cgroup/memory" + p, controllers: []string{"memory"}},
			{dir: "/sys/fs/cgroup/freezer" + p, controllers: []string{"freezer"}},
			{dir: "/sys/fs/cgroup/pids" + p, controllers: []string{"pids"}},
		}},
		{"v1 delegated", v1Only, true, nil},
	} {
		if got := helperDirs(layout(tc.mountinfo), p, tc.unifiedOnly); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

func TestCgroupDirIn(t *testing.T) {
	dir := "/sys/fs/cgroup/unified/hookbox/helpers/r.notify@1-2"
	for q, want := range map[string]string{"/hookbox": "/sys/fs/cgroup/unified/hookbox", "/hookbox/helpers": "/sys/fs/cgroup/unified/hookbox/helpers"} {
		if got := cgroupDirIn(dir, "/hookbox/helpers/r.notify@1-2", q); got != want {
			t.Errorf("cgroupDirIn(%s) = %s, want %s", q, got, want)
		}
	}
}

func TestNoHelpers(t *testing.T) {
	for _, h := range []Helpers{{}, NoHelpers("no delegated subtree")} {
		if c, err := h.New("r", "notify"); c != nil || !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), h.Unavailable) {
			t.Errorf("New on %+v = %v, %v", h, c, err)
		}
		if left, err := h.Abandoned(); left != nil || err != nil {
			t.Errorf("Abandoned on %+v = %v, %v", h, left, err)
		}
	}
	d := Delegation{Root: "/u", Jobs: "/u/jobs"}.Helpers()
	if d.Parent != "/u/jobs/helpers" || !d.UnifiedOnly || d.Limits != HelperLimits {
		t.Errorf("delegated helpers %+v", d)
	}
	if r := RootHelpers(); r.Parent != HelperParent || r.UnifiedOnly {
		t.Errorf("root helpers %+v", r)
	}
}

// testHelpers are root helpers under the test parent.
func testHelpers(t *testing.T) Helpers {
	t.Helper()
	newTestCgroup(t) // root, a subreaper, and the test parent's cleanup
	h := RootHelpers()
	h.Parent = testParent + "/helpers-" + randomHex(t)
	t.Cleanup(func() {
		cgs, _ := host.HostCgroups()
		for _, d := range helperDirs(cgs, h.Parent, false) {
			if err := unix.Rmdir(d.dir); err != nil && !errors.Is(err, unix.ENOENT) {
				t.Errorf("test parent %s: %v", d.dir, err)
			}
		}
	})
	return h
}

// A helper's cgroup as made on this host: in every hierarchy planned, with
// the limits where their controllers are, and gone after Destroy with
// whatever the program left running in it.
func TestHelperLifecycle(t *testing.T) {
	h := testHelpers(t)
	c, err := h.New("hbx-test", "notify")
	if err != nil {
		t.Fatal(err)
	}
	start, _ := host.StartTime(os.Getpid())
	name, _ := HelperName("hbx-test", "notify", os.Getpid(), start)
	if c.Run.Path != h.Parent+"/"+name {
		t.Errorf("path %s", c.Run.Path)
	}
	cgs, _ := host.HostCgroups()
	dirs := helperDirs(cgs, c.Run.Path, false)
	if len(dirs) == 0 {
		t.Fatalf("layout %s: nowhere to make a helper", cgs.Mode)
	}
	for _, d := range dirs {
		if ok, _ := isDir(d.dir); !ok {
			t.Errorf("%s was not made", d.dir)
		}
		limits := map[string]string{}
		if d.unified {
			ctrl, _ := host.ReadCgroupControllers(d.dir)
			for _, ctl := range ctrl {
				switch ctl {
				case "memory":
					limits["memory.max"] = strconv.FormatInt(HelperLimits.MemoryBytes, 10)
				case "pids":
					limits["pids.max"] = strconv.FormatInt(HelperLimits.Pids, 10)
				}
			}
		} else {
			for _, f := range v1LimitFiles(HelperLimits, d.controllers, false) {
				limits[f[0]] = f[1]
			}
		}
		for file, want := range limits {
			if got, _ := os.ReadFile(filepath.Join(d.dir, file)); strings.TrimSpace(string(got)) != want {
				t.Errorf("%s/%s = %q, want %s", d.dir, file, got, want)
			}
		}
	}
	// A program that leaves a daemon (setsid, double fork, SIGTERM ignored).
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "daemon.pid")
	cmd := exec.Command("/bin/sh", "-c", `"$0" "$1" "$2"; while [ ! -s "$2" ]; do sleep 0.01; done`, testenv.DaemonScript(t, dir), "hbx-cgtest-daemon", pidFile)
	if err := c.Start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	daemon := testenv.ReadPidFile(t, pidFile, 5*time.Second)
	member, err := host.ReadProcCgroup(daemon)
	if err != nil || !member.Within(c.Run.Path) {
		t.Fatalf("the daemon %d left the helper's cgroup: %+v %v", daemon, member, err)
	}
	self, _ := host.ReadProcCgroup(0)
	if self.Within(c.Run.Path) {
		t.Errorf("this process is in the helper's cgroup: %+v", self)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if testenv.Survived(t, daemon, 2*time.Second) {
		t.Errorf("daemon %d survived Destroy", daemon)
	}
	for _, d := range dirs {
		if ok, _ := isDir(d.dir); ok {
			t.Errorf("%s is still there", d.dir)
		}
	}
}

// gc's view: a helper whose owner is gone is abandoned; this process's,
// and a name hookbox does not make, are not.
func TestAbandonedHelpers(t *testing.T) {
	h := testHelpers(t)
	mine, err := h.New("hbx-live", "notify")
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Destroy(context.Background())
	// A dead owner: pid 1 with a start time it never had.
	deadName, _ := HelperName("hbx-dead", "lookup-1", 1, 1)
	cgs, _ := host.HostCgroups()
	for _, d := range helperDirs(cgs, h.Parent, false) {
		for _, n := range []string{deadName, "not-a-helper"} {
			if err := os.Mkdir(filepath.Join(d.dir, n), 0o755); err != nil {
				t.Fatal(err)
			}
			defer unix.Rmdir(filepath.Join(d.dir, n))
		}
	}
	left, err := h.Abandoned()
	if err != nil {
		t.Fatal(err)
	}
	want := []LeftHelper{{Path: h.Parent + "/" + deadName, Owner: HelperOwner{RunID: "hbx-dead", Role: "lookup-1", PID: 1, Start: 1}}}
	if !reflect.DeepEqual(left, want) {
		t.Errorf("Abandoned = %+v, want %+v", left, want)
	}
	dead, err := Open(want[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := dead.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	if left, _ := h.Abandoned(); len(left) != 0 {
		t.Errorf("after Destroy: %+v", left)
	}
}

// The thread that starts a helper is never hookbox's main thread, whose
// tid is hookbox's pid: in a helper's cgroup it would make hookbox a member.
func TestSpareThreadIsNotMain(t *testing.T) {
	for i := 0; i < 200; i++ {
		onSpareThread(func() {
			if unix.Gettid() == unix.Getpid() {
				t.Fatal("fn ran on the main thread")
			}
		})
	}
}
