package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/containerd/containerd/api/services/tasks/v1"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/defaults"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"hookbox.dev/hookbox/internal/faultpoint"
	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/launcher/cgroup"
	"hookbox.dev/hookbox/launcher/daemon"
	"hookbox.dev/hookbox/oci"
)

// The system containerd's default root and state: where the daemon the
// integration tests use keeps task work directories, bundles and runc
// state.
const (
	systemRoot     = "/var/lib/containerd"
	systemRuncRoot = daemon.DefaultSystemState + "/runc"
)

// leftoverKinds are the columns of the fault table: every kind of
// resource a run can leave.
var leftoverKinds = []string{"container", "task", "snapshot", "lease", "stray-lease", "shim", "socket", "bundle",
	"runc-state", "fifo", "mount", "cgroup", "process", "uncollected"}

// faultSpec: an engine that writes an artifact, runs until the 2 s timeout,
// and takes a second to exit on SIGTERM, so that a run passes every fault
// point: create, start, run, grace, harvest, delete, unmount.
func (e *env) faultSpec() string {
	return e.execSpec("faults", "/bin/sh", `["-c", "trap 'sleep 1; exit 0' TERM; echo data > /run/hookbox/out/a.txt; sleep 3600 & wait"]`,
		"  tools: [/usr/bin/sleep]", "  limits: {timeout: 2s}", "  artifacts: [a.txt]")
}

// killAt runs spec with fault point p armed, waits until hookbox has
// stopped itself there and SIGKILLs it. It returns the run id and when
// the run began.
func (e *env) killAt(spec, state string, p faultpoint.Point) (string, time.Time) {
	e.t.Helper()
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := e.command(ctx, "run", "--json", "--state-dir", state, "--grace", "5s", spec)
	cmd.Env = append(cmd.Env, faultpoint.Env+"="+string(p))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for stopped := false; !stopped; time.Sleep(time.Millisecond) {
		select {
		case err := <-exited:
			e.t.Fatalf("fault point %s: hookbox ended (%v) without reaching it\nstderr:\n%s", p, err, stderr.String())
		case <-ctx.Done():
			e.t.Fatalf("fault point %s: not reached within 3 minutes\nstderr:\n%s", p, stderr.String())
		default:
		}
		st, err := host.ReadStat(cmd.Process.Pid)
		stopped = err == nil && st.State == 'T'
	}
	cmd.Process.Kill()
	<-exited
	if !strings.Contains(stderr.String(), "test fault point "+string(p)+" reached") {
		e.t.Fatalf("hookbox stopped, but not at fault point %s:\n%s", p, stderr.String())
	}
	entries, err := os.ReadDir(launcher.RunsDir(state))
	if err != nil || len(entries) != 1 {
		e.t.Fatalf("fault point %s: want one run record in %s, got %d (%v)", p, state, len(entries), err)
	}
	return entries[0].Name(), began
}

// gc runs `hookbox gc --json` over state and returns its report and exit
// code.
func (e *env) gc(state string, args ...string) (*launcher.GCReport, int) {
	e.t.Helper()
	cmd := e.command(context.Background(), append([]string{"gc", "--json", "--state-dir", state}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("gc: %v", err)
	}
	var report launcher.GCReport
	if err := json.Unmarshal(out, &report); err != nil {
		e.t.Fatalf("gc --json (exit %d): %v: %s\nstderr:\n%s", code, err, out, stderr.String())
	}
	return &report, code
}

// touched lists what a gc report did to or left of run id.
func touched(report *launcher.GCReport, id string) []string {
	var what []string
	for _, a := range report.Actions {
		if a.RunID == id {
			what = append(what, "did "+a.What+" "+a.Detail+" "+a.Error)
		}
	}
	for _, l := range report.Left {
		if l.RunID == id {
			what = append(what, "left "+l.What+" "+l.Detail)
		}
	}
	return what
}

// leftovers counts, by kind, what run id still holds on this host and in
// the system containerd. A stray lease is one holding nothing but an
// expiry (what the containerd client takes for itself) created while the
// run was alive, between began and killed.
func leftovers(t *testing.T, id, recordDir string, began, killed time.Time) map[string]int {
	t.Helper()
	n := map[string]int{}
	ctx := namespaces.WithNamespace(context.Background(), oci.Namespace)
	client, err := containerd.New(containerdAddress())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := client.LoadContainer(ctx, id); err == nil {
		n["container"]++
	}
	if _, err := client.TaskService().Get(ctx, &tasks.GetRequest{ContainerID: id}); err == nil {
		n["task"]++
	}
	err = client.SnapshotService("overlayfs").Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		if info.Name == id || info.Labels[launcher.LabelRunID] == id {
			n["snapshot"]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	all, err := client.LeasesService().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range all {
		_, expires := l.Labels["containerd.io/gc.expire"]
		switch {
		case l.ID == id || l.Labels[launcher.LabelRunID] == id:
			n["lease"]++
		case expires && len(l.Labels) == 1 && !l.CreatedAt.Before(began) && !l.CreatedAt.After(killed):
			n["stray-lease"]++
		}
	}
	shims, err := daemon.Shims()
	if err != nil {
		t.Fatal(err)
	}
	shimPIDs := map[int]bool{}
	for _, s := range shims {
		if s.Namespace == oci.Namespace && s.ID == id {
			n["shim"]++
			shimPIDs[s.PID] = true
		}
	}
	if _, err := os.Lstat(daemon.ShimSocket(containerdAddress(), oci.Namespace, id)); err == nil {
		n["socket"]++
	}
	for _, dir := range []string{daemon.TaskBundle(daemon.DefaultSystemState, oci.Namespace, id), daemon.TaskBundle(systemRoot, oci.Namespace, id)} {
		if _, err := os.Lstat(dir); err == nil {
			n["bundle"]++
		}
	}
	if _, err := os.Lstat(filepath.Join(systemRuncRoot, oci.Namespace, id)); err == nil {
		n["runc-state"]++
	}
	// The containerd client's stdio FIFOs: <fifo dir>/<random>/<id>-stdout…
	fifos, _ := filepath.Glob(filepath.Join(defaults.DefaultFIFODir, "*", id+"-std*"))
	n["fifo"] = len(fifos)
	mounts, err := host.Mounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if strings.Contains(m.MountPoint, id) {
			n["mount"]++
		}
	}
	// The run's cgroup, and those of its host-side helpers (cgroup.HelperName).
	var cgroups []string
	for _, pattern := range []string{"/sys/fs/cgroup/*/hookbox/" + id, "/sys/fs/cgroup/hookbox/" + id,
		"/sys/fs/cgroup/*" + cgroup.HelperParent + "/" + id + ".*", "/sys/fs/cgroup" + cgroup.HelperParent + "/" + id + ".*"} {
		found, _ := filepath.Glob(pattern)
		cgroups = append(cgroups, found...)
	}
	n["cgroup"] = len(cgroups)
	pids, err := host.Pids()
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if shimPIDs[pid] || pid == os.Getpid() {
			continue
		}
		args, _ := host.Cmdline(pid)
		cg, err := host.ReadProcCgroup(pid)
		if (err == nil && cg.Within(oci.CgroupsPath(id))) || slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, id) }) {
			n["process"]++
		}
	}
	var mark launcher.Collected
	if data, err := os.ReadFile(filepath.Join(recordDir, launcher.CollectedFile)); err != nil || json.Unmarshal(data, &mark) != nil || !mark.Complete {
		n["uncollected"]++
	}
	return n
}

// requireSystemContainerd: the counts look where the system containerd
// keeps its state.
func requireSystemContainerd(t *testing.T) {
	t.Helper()
	if containerdAddress() != daemon.SystemAddress {
		t.Fatalf("the fault suite counts what the system containerd (%s, state %s) holds; it talks to %s", daemon.SystemAddress, daemon.DefaultSystemState, containerdAddress())
	}
}

// TestFaultPoints: hookbox SIGKILLed at every phase boundary of a run
// (faultpoint.All), then one gc leaves nothing of the run (containers,
// tasks, snapshots, leases, shims, bundles, runc state, mounts, cgroups,
// processes; the record marked collected), and a second gc finds nothing.
// It prints the table of leftovers (phase × kind), all zeros.
//
// Both ways a task gets its shim: one of its own (HOOKBOX_SHIM_GROUP=off,
// and every run before the group's anchor exists) and the shim group's,
// whose anchor is made before each kill.
func TestFaultPoints(t *testing.T) {
	t.Run("own-shim", func(t *testing.T) { testFaultPoints(t, false) })
	t.Run("shim-group", func(t *testing.T) { testFaultPoints(t, true) })
}

func testFaultPoints(t *testing.T, grouped bool) {
	e := newEnv(t)
	requireSystemContainerd(t)
	if !grouped {
		e.extraEnv = append(e.extraEnv, "HOOKBOX_SHIM_GROUP=off")
	}
	spec := e.faultSpec()
	table := map[faultpoint.Point]map[string]int{}
	for _, p := range faultpoint.All {
		state := filepath.Join(t.TempDir(), "state")
		t.Cleanup(func() { exec.Command(hookboxBin, "gc", "--state-dir", state).Run() })
		if grouped {
			e.ensureShimGroup()
		}
		id, began := e.killAt(spec, state, p)
		killed := time.Now()
		recordDir := filepath.Join(launcher.RunsDir(state), id)
		report, code := e.gc(state)
		if code != 0 || len(report.Left) > 0 {
			t.Errorf("%s: gc exit %d, left %+v", p, code, report.Left)
		}
		table[p] = leftovers(t, id, recordDir, began, killed)
		if again, code := e.gc(state); code != 0 || len(touched(again, id)) > 0 {
			t.Errorf("%s: a second gc (exit %d) still found %q", p, code, touched(again, id))
		}
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 2, 4, 1, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "phase\t%s\t\n", strings.Join(leftoverKinds, "\t"))
	failed := false
	for _, p := range faultpoint.All {
		row := []string{string(p)}
		for _, k := range leftoverKinds {
			row = append(row, fmt.Sprint(table[p][k]))
			failed = failed || table[p][k] != 0
		}
		fmt.Fprintf(tw, "%s\t\n", strings.Join(row, "\t"))
	}
	tw.Flush()
	t.Logf("leftovers after one gc, by fault point:\n%s", b.String())
	if failed {
		t.Error("a run killed at a fault point left something after gc (table above)")
	}
}

// TestGCWithoutContainerdLeavesTheRunForLater: a gc that cannot reach
// containerd collects what it can (processes, tmpfs, cgroup) but does not
// mark the run collected; the next gc that reaches containerd removes the
// container, task, snapshot, lease, shim and rootfs mount.
func TestGCWithoutContainerdLeavesTheRunForLater(t *testing.T) {
	e := newEnv(t)
	requireSystemContainerd(t)
	e.extraEnv = append(e.extraEnv, "HOOKBOX_SHIM_GROUP=off") // the run's own shim is counted
	state := filepath.Join(t.TempDir(), "state")
	t.Cleanup(func() { exec.Command(hookboxBin, "gc", "--state-dir", state).Run() })
	id, began := e.killAt(e.faultSpec(), state, faultpoint.Running)
	killed := time.Now()
	recordDir := filepath.Join(launcher.RunsDir(state), id)
	if n := leftovers(t, id, recordDir, began, killed); n["container"] == 0 || n["task"] == 0 || n["shim"] == 0 {
		t.Fatalf("test setup: a run killed while running should hold a container, task and shim: %v", n)
	}
	report, code := e.gc(state, "--address", filepath.Join(t.TempDir(), "no-containerd.sock"))
	if code != 120 {
		t.Errorf("gc without containerd exited %d, want 120 (the run is not finished)", code)
	}
	if !slices.ContainsFunc(report.Left, func(l launcher.GCLeft) bool { return l.RunID == id && l.What == "containerd" }) {
		t.Errorf("gc without containerd does not report the run's containerd resources as unchecked: left %+v", report.Left)
	}
	var mark launcher.Collected
	if data, err := os.ReadFile(filepath.Join(recordDir, launcher.CollectedFile)); err == nil {
		if err := json.Unmarshal(data, &mark); err != nil || mark.Complete {
			t.Errorf("gc without containerd marked the run collected: %s", data)
		}
	}
	if n := leftovers(t, id, recordDir, began, killed); n["process"] != 0 || n["cgroup"] != 0 {
		t.Errorf("gc without containerd did not end the run's processes and cgroup: %v", n)
	}
	report, code = e.gc(state)
	if code != 0 || len(report.Left) > 0 {
		t.Errorf("gc with containerd: exit %d, left %+v", code, report.Left)
	}
	for k, v := range leftovers(t, id, recordDir, began, killed) {
		if v != 0 {
			t.Errorf("after gc with containerd, %d %s left", v, k)
		}
	}
	if again, _ := e.gc(state); len(touched(again, id)) > 0 {
		t.Errorf("a third gc still found %q", touched(again, id))
	}
}

// TestGCEndsLostShims: hookbox killed while containerd creates its task
// can leave a shim containerd does not track (no task; its container
// still there); one gc leaves nothing of it: no shim, bundle, runc state
// or rootfs mount. Whether the shim is left is a race with containerd's
// own cleanup of the cancelled create, which sometimes ends the shim (or
// removes the bundle) first; the test kills again, after a gc, until a
// kill leaves the shim, and fails if none of lostShimAttempts did.
func TestGCEndsLostShims(t *testing.T) {
	const lostShimAttempts = 6
	e := newEnv(t)
	requireSystemContainerd(t)
	e.extraEnv = append(e.extraEnv, "HOOKBOX_SHIM_GROUP=off") // a shim of the run's own is what gets lost
	var id, state, recordDir string
	var began, killed time.Time
	for attempt := 1; ; attempt++ {
		state = filepath.Join(t.TempDir(), "state")
		dir := state
		t.Cleanup(func() { exec.Command(hookboxBin, "gc", "--state-dir", dir).Run() })
		id, began = e.killAt(e.faultSpec(), state, faultpoint.NewTask)
		killed = time.Now()
		recordDir = filepath.Join(launcher.RunsDir(state), id)
		n := leftovers(t, id, recordDir, began, killed)
		if n["shim"] == 1 && n["task"] == 0 {
			t.Logf("attempt %d left a shim containerd does not track: %v", attempt, n)
			break
		}
		if attempt == lostShimAttempts {
			t.Fatalf("test setup: none of %d kills during the task create request left a shim containerd does not track; the last left %v", attempt, n)
		}
		t.Logf("attempt %d: containerd's cleanup won the race (%v); gc and kill again", attempt, n)
		if _, code := e.gc(state); code != 0 {
			t.Fatalf("gc after attempt %d exited %d", attempt, code)
		}
	}
	report, code := e.gc(state)
	if code != 0 {
		t.Errorf("gc exited %d: %q", code, touched(report, id))
	}
	t.Logf("gc: %q", touched(report, id))
	for k, v := range leftovers(t, id, recordDir, began, killed) {
		if v != 0 {
			t.Errorf("after gc, %d %s left", v, k)
		}
	}
}

// TestDaemonStopEndsShims: `hookbox daemon stop` ends the tasks the
// managed containerd ran: no shim of it, no task bundle in its state and
// none of the run's processes outlive it. The run has a shim of its own,
// or is in the shim group with the anchor (whose shim was started for the
// anchor, not for the run).
func TestDaemonStopEndsShims(t *testing.T) {
	t.Run("own-shim", func(t *testing.T) { testDaemonStopEndsShims(t, false) })
	t.Run("shim-group", func(t *testing.T) { testDaemonStopEndsShims(t, true) })
}

func testDaemonStopEndsShims(t *testing.T, grouped bool) {
	e := newEnv(t)
	runtimeDir := filepath.Join(t.TempDir(), "rt")
	e.extraEnv = append(e.extraEnv, "HOOKBOX_CONTAINERD_ADDRESS=", // CI exports it; it would win over the managed daemon
		"HOOKBOX_SYSTEM_CONTAINERD_ADDRESS=/run/hookbox-test-no-containerd.sock", "HOOKBOX_RUNTIME_DIR="+runtimeDir)
	t.Cleanup(func() { e.command(context.Background(), "daemon", "stop", "--state-dir", e.state).Run() })
	m := daemon.ManagedPaths(e.state, runtimeDir)
	want := launcher.ShimGroupID // the one shim: the group's
	if grouped {
		e.address = m.Address
		e.ensureShimGroup()
		// killAt finds the killed run as the state's only record.
		if err := os.RemoveAll(launcher.RunsDir(e.state)); err != nil {
			t.Fatal(err)
		}
	} else {
		e.extraEnv = append(e.extraEnv, "HOOKBOX_SHIM_GROUP=off")
	}
	id, _ := e.killAt(e.faultSpec(), e.state, faultpoint.Running)
	if !grouped {
		want = id
	}
	ours := func() []daemon.Shim {
		shims, err := daemon.Shims()
		if err != nil {
			t.Fatal(err)
		}
		return slices.DeleteFunc(shims, func(s daemon.Shim) bool { return !daemon.SameAddress(s.Address, m.Address) })
	}
	if shims := ours(); len(shims) != 1 || shims[0].ID != want {
		t.Fatalf("test setup: the killed run's shim should be %s's, under the managed containerd: %+v", want, shims)
	}
	if out, err := e.command(context.Background(), "daemon", "stop", "--state-dir", e.state).CombinedOutput(); err != nil {
		t.Fatalf("daemon stop: %v\n%s", err, out)
	}
	if shims := ours(); len(shims) > 0 {
		t.Errorf("shims of the managed containerd survived daemon stop: %+v", shims)
	}
	if ids, err := daemon.TaskBundles(m.State, oci.Namespace); err != nil || len(ids) > 0 {
		t.Errorf("task bundles left in %s: %v %v", m.State, ids, err)
	}
	if pids := cgroupMembers(t, oci.CgroupsPath(id)); len(pids) > 0 {
		t.Errorf("processes of the run survived daemon stop: %v", pids)
	}
}
