//go:build linux

package procgroup

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/launcher/cgroup"
	"hookbox.dev/hookbox/launcher/cgroup/cgrouptest"
)

func command(argv ...string) func() *exec.Cmd {
	return func() *exec.Cmd { return exec.Command(argv[0], argv[1:]...) }
}

// Without cgroups (the zero Helpers): the process group bounds the
// program, and the result says it was uncontained.

func TestTimeoutKillsTheWholeGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child")
	start := time.Now()
	res := Run(context.Background(), command("/bin/sh", "-c", `sh -c 'trap "" TERM; echo $$ > `+pidFile+`; sleep 30' & sleep 30`),
		Options{Timeout: 300 * time.Millisecond, Grace: 200 * time.Millisecond})
	if res.StartErr != nil || res.Stop != TimedOut {
		t.Fatalf("stop %v startErr %v", res.Stop, res.StartErr)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("took %v", time.Since(start))
	}
	testenv.WaitExited(t, testenv.ReadPidFile(t, pidFile, time.Second), 2*time.Second)
}

func TestExitedLeaderLeftoversAreKilled(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child")
	res := Run(context.Background(), command("/bin/sh", "-c", `sleep 30 & echo $! > `+pidFile), Options{Timeout: 10 * time.Second})
	if res.Stop != Exited || res.StartErr != nil || res.WaitErr != nil {
		t.Fatalf("%+v", res)
	}
	testenv.WaitExited(t, testenv.ReadPidFile(t, pidFile, time.Second), 2*time.Second)
}

func TestCancelAndStartFailure(t *testing.T) {
	// Cancelled once the program runs: it says so on a pipe.
	ctx, cancel := context.WithCancel(context.Background())
	started, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer started.Close()
	go func() {
		bufio.NewReader(started).ReadString('\n')
		cancel()
	}()
	res := Run(ctx, func() *exec.Cmd {
		cmd := exec.Command("/bin/sh", "-c", "echo started; exec /bin/sleep 30")
		cmd.Stdout = w
		return cmd
	}, Options{Timeout: time.Minute})
	w.Close()
	if res.Stop != Cancelled {
		t.Errorf("stop %v, want Cancelled", res.Stop)
	}
	res = Run(context.Background(), command("/nonexistent/program"), Options{Timeout: time.Second})
	if res.StartErr == nil || strings.Contains(StartFailure(res.StartErr), "/nonexistent") {
		t.Errorf("start failure %v must be reported without the path: %q", res.StartErr, StartFailure(res.StartErr))
	}
	if res.Uncontained != "" || res.Degraded("lookup") != nil {
		t.Errorf("a program that never started has no containment to report: %+v", res)
	}
}

// The degraded path: no cgroup for helpers, said in the result, and the
// program still runs bounded by its process group.
func TestWithoutCgroupsTheResultSaysSo(t *testing.T) {
	for _, h := range []cgroup.Helpers{{}, cgroup.NoHelpers("no delegated cgroup2 subtree")} {
		res := Run(context.Background(), command("/bin/true"), Options{Timeout: 10 * time.Second, Cgroups: h, RunID: "hbx-1", Role: "notify"})
		if res.StartErr != nil || res.WaitErr != nil {
			t.Fatalf("%+v", res)
		}
		if !slices.Equal(res.Degraded("notify"), []string{"helper-cgroup-unavailable:notify"}) || res.Uncontained == "" {
			t.Errorf("helpers %+v: degraded %v, uncontained %q", h, res.Degraded("notify"), res.Uncontained)
		}
		if h.Unavailable != "" && !strings.Contains(res.Uncontained, h.Unavailable) {
			t.Errorf("uncontained %q does not say why (%q)", res.Uncontained, h.Unavailable)
		}
	}
}

// With a cgroup (root): a setsid, double-forked daemon that ignores
// SIGTERM does not outlive the helper, however it ends, and the helper's
// cgroup is gone afterwards.
func TestDaemonDoesNotOutliveItsHelper(t *testing.T) {
	helpers := cgrouptest.Helpers(t)
	dir := t.TempDir()
	daemon := testenv.DaemonScript(t, dir)
	for _, tc := range []struct {
		ending string
		script string
		stop   Stop
	}{
		{"exit", `"$0" "$1" "$2"; while [ ! -s "$2" ]; do sleep 0.01; done; exit 0`, Exited},
		{"deadline", `"$0" "$1" "$2"; sleep 60`, TimedOut},
		{"cancel", `"$0" "$1" "$2"; sleep 60`, Cancelled},
	} {
		t.Run(tc.ending, func(t *testing.T) {
			pidFile := filepath.Join(dir, tc.ending+".pid")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			timeout := time.Minute
			switch tc.ending {
			case "deadline":
				timeout = time.Second
			case "cancel":
				go func() { testenv.ReadPidFile(t, pidFile, 10*time.Second); cancel() }()
			}
			res := Run(ctx, command("/bin/sh", "-c", tc.script, daemon, "hbx-procgroup-"+tc.ending, pidFile),
				Options{Timeout: timeout, Grace: 200 * time.Millisecond, Cgroups: helpers, RunID: "hbx-test", Role: "notify"})
			if res.StartErr != nil || res.Stop != tc.stop || res.Uncontained != "" || res.Leftover != nil {
				t.Fatalf("result %+v, want stop %v, contained", res, tc.stop)
			}
			if tc.stop == Exited && res.WaitErr != nil {
				t.Errorf("the helper exited 0: %v", res.WaitErr)
			}
			if pid := testenv.ReadPidFile(t, pidFile, time.Second); testenv.Survived(t, pid, 2*time.Second) {
				t.Errorf("daemon %d outlived its helper (%s)", pid, tc.ending)
			}
		})
	}
}

// The program runs in its cgroup from its first instruction, in cgroup2
// and in the v1 hierarchies of its limits, which are written there.
func TestPlacedBeforeItRuns(t *testing.T) {
	helpers := cgrouptest.Helpers(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "cgroup")
	res := Run(context.Background(), command("/bin/cp", "/proc/self/cgroup", out), Options{Timeout: 10 * time.Second, Cgroups: helpers, RunID: "hbx-test", Role: "lookup-1"})
	if res.StartErr != nil || res.WaitErr != nil || res.Uncontained != "" {
		t.Fatalf("%+v", res)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	member, err := host.ParseProcCgroup(string(data))
	if err != nil {
		t.Fatal(err)
	}
	cgs, err := host.HostCgroups()
	if err != nil {
		t.Fatal(err)
	}
	prefix := helpers.Parent + "/hbx-test.lookup-1@" + strconv.Itoa(os.Getpid()) + "-"
	want := map[string]bool{}
	if cgs.Unified != "" {
		want["cgroup2"] = strings.HasPrefix(member.Unified, prefix)
	}
	for ctl := range cgs.V1Controllers() {
		if ctl == "memory" || ctl == "pids" || ctl == "freezer" {
			want[ctl] = strings.HasPrefix(member.V1[ctl], prefix)
		}
	}
	for what, in := range want {
		if !in {
			t.Errorf("%s: the program started outside its helper cgroup %s*:\n%s", what, prefix, data)
		}
	}
	if len(want) == 0 {
		t.Fatalf("layout %s: no hierarchy to check", cgs.Mode)
	}
}

// A cgroup the program cannot be started in (pids.max 1 while hookbox's
// starting thread is counted in it, on a v1 pids hierarchy): it is started
// once more without, and the result says so. On a host whose pids
// controller is cgroup2's, the thread is not in the cgroup and the program
// starts in it.
func TestUnusableCgroupFallsBackToTheProcessGroup(t *testing.T) {
	helpers := cgrouptest.Helpers(t)
	helpers.Limits.Pids = 1
	marker := filepath.Join(t.TempDir(), "ran")
	res := Run(context.Background(), command("/bin/touch", marker), Options{Timeout: 10 * time.Second, Cgroups: helpers, RunID: "hbx-test", Role: "notify"})
	if res.StartErr != nil || res.WaitErr != nil {
		t.Fatalf("%+v", res)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the program did not run: %v", err)
	}
	cgs, err := host.HostCgroups()
	if err != nil {
		t.Fatal(err)
	}
	_, v1Pids := cgs.V1Controllers()["pids"]
	if got := strings.HasPrefix(res.Uncontained, "could not start in its cgroup"); got != v1Pids {
		t.Errorf("v1 pids %v: uncontained %q", v1Pids, res.Uncontained)
	}
}
