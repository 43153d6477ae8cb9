package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"

	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/launcher/daemon"
	"hookbox.dev/hookbox/launcher/shimfront"
	"hookbox.dev/hookbox/oci"
)

// ensureShimGroup makes sure the shim group's shim answers on the env's
// containerd: when it does not, a run makes the group's anchor.
func (e *env) ensureShimGroup() {
	e.t.Helper()
	if daemon.GroupLive(e.containerd(), oci.Namespace, launcher.ShimGroupID) {
		return
	}
	r := e.run(e.spec("anchor", "- print: anchor\n- exit: 0"))
	if res := r.mustResult(e.t); res.Status != launcher.StatusCompleted {
		e.t.Fatalf("the run that makes the shim group: %s %q\nstderr:\n%s", res.Status, res.Error, r.stderr)
	}
	if !daemon.GroupLive(e.containerd(), oci.Namespace, launcher.ShimGroupID) {
		e.t.Fatalf("a run on %s made no shim group\nstderr:\n%s", e.containerd(), r.stderr)
	}
}

// shimsOf lists the shims of the containerd at address.
func shimsOf(t *testing.T, address string) []daemon.Shim {
	t.Helper()
	shims, err := daemon.Shims()
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(shims, func(s daemon.Shim) bool { return !daemon.SameAddress(s.Address, address) })
}

// inShimGroup reports whether the run's recorded OCI spec puts its task in
// the shim group.
func inShimGroup(t *testing.T, recordDir string) bool {
	t.Helper()
	var s specs.Spec
	readJSONFile(t, filepath.Join(recordDir, launcher.OCIFile), &s)
	return s.Annotations[oci.AnnotationShimGroup] == launcher.ShimGroupID
}

// TestShimGroup: the first run on a containerd has a shim of its own and
// makes the group's anchor; later runs, two at a time, are tasks of the
// anchor's shim, the one shim that runs; gc --shim-group removes the
// anchor, the shim exits with the last task, and the next run has its
// own shim again (and makes the anchor again).
func TestShimGroup(t *testing.T) {
	e := newManagedEnv(t)
	first := e.run(e.spec("first", "- print: first\n- exit: 0")).mustResult(t)
	if first.Status != launcher.StatusCompleted || inShimGroup(t, first.RecordDir) {
		t.Fatalf("the first run: %s, in the shim group %v: want completed, a shim of its own", first.Status, inShimGroup(t, first.RecordDir))
	}
	shims := shimsOf(t, e.containerd())
	if len(shims) != 1 || shims[0].ID != launcher.ShimGroupID {
		t.Fatalf("after the first run, want the anchor's shim alone: %+v", shims)
	}
	group := shims[0]
	if filepath.Base(group.Binary) != shimfront.RuncShim {
		t.Errorf("the group's shim runs %s, want runc's shim (%s)", group.Binary, shimfront.RuncShim)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var runs []*liveRun
	for i := range 2 {
		marker := fmt.Sprintf("hbx-group-%d-%d", i, time.Now().UnixNano())
		runs = append(runs, e.startRun(ctx, e.shellSpec(fmt.Sprintf("joined-%d", i), "echo ready; /usr/bin/sleep 3", marker, "1m"), "ready"))
	}
	if shims := shimsOf(t, e.containerd()); len(shims) != 1 || shims[0].PID != group.PID {
		t.Errorf("with two runs in the group, want its shim (pid %d) alone: %+v", group.PID, shims)
	}
	for _, lr := range runs {
		st, err := host.ReadStat(lr.spawned.InitPID)
		if err != nil {
			t.Fatal(err)
		}
		if st.PPID != group.PID {
			t.Errorf("run %s: its init's parent is %d, not the group's shim %d", lr.spawned.RunID, st.PPID, group.PID)
		}
		// containerd ran the shim front for it, which left the serving to
		// runc's shim.
		path, err := os.ReadFile(filepath.Join(filepath.Dir(group.Bundle), lr.spawned.ContainerID, "shim-binary-path"))
		if err != nil || string(path) != frontBin {
			t.Errorf("run %s: its runtime binary is %q (%v), want the shim front %s", lr.spawned.RunID, path, err, frontBin)
		}
	}
	for _, lr := range runs {
		if !lr.waitExit(time.Minute) {
			t.Fatalf("run %s did not end", lr.spawned.RunID)
		}
		res := lr.result(t)
		if res.Status != launcher.StatusCompleted || !inShimGroup(t, res.RecordDir) {
			t.Errorf("run %s: %s, in the shim group %v: want completed, in the group", res.RunID, res.Status, inShimGroup(t, res.RecordDir))
		}
		e.assertNothingLeft(res.RunID)
	}
	if !host.ProcessAlive(group.PID, group.StartTime) {
		t.Fatalf("the group's shim exited with its runs")
	}

	report, code := e.gc(e.state, "--shim-group")
	if code != 0 || !slices.ContainsFunc(report.Actions, func(a launcher.GCAction) bool { return a.What == "shim-group" && a.Error == "" }) {
		t.Fatalf("gc --shim-group: exit %d, actions %+v", code, report.Actions)
	}
	for deadline := time.Now().Add(10 * time.Second); host.ProcessAlive(group.PID, group.StartTime); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the group's shim (pid %d) still runs 10 s after its anchor was removed", group.PID)
		}
	}
	next := e.run(e.spec("next", "- print: next\n- exit: 0")).mustResult(t)
	if next.Status != launcher.StatusCompleted || inShimGroup(t, next.RecordDir) {
		t.Errorf("the run after gc --shim-group: %s, in the shim group %v: want completed, a shim of its own", next.Status, inShimGroup(t, next.RecordDir))
	}
	if !daemon.GroupLive(e.containerd(), oci.Namespace, launcher.ShimGroupID) {
		t.Errorf("the run after gc --shim-group did not make the group again")
	}
}

// TestShimGroupKilledMidRun: the group's shim is SIGKILLed while a run in
// it runs. None of the engine's processes survive, hookbox exits within
// the grace plus a small bound, and the next run works: a shim of its
// own, after which the group answers again (the anchor made anew, its
// rootfs removed meanwhile).
func TestShimGroupKilledMidRun(t *testing.T) {
	e := newManagedEnv(t)
	e.startManaged()
	e.ensureShimGroup()
	marker := fmt.Sprintf("hbx-group-kill-%d", time.Now().UnixNano())
	spec := e.shellSpec("victim", "echo ready; /usr/bin/sleep 30; echo done", marker, "1m")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lr := e.startRun(ctx, spec, "ready")
	ms := engineMembers(t, lr.spawned.CgroupsPath)
	st, err := host.ReadStat(lr.spawned.InitPID)
	if err != nil {
		t.Fatal(err)
	}
	shims := shimsOf(t, e.containerd())
	if len(shims) != 1 || shims[0].ID != launcher.ShimGroupID || shims[0].PID != st.PPID {
		t.Fatalf("test setup: the run's init (parent %d) should be a task of the group's shim: %+v", st.PPID, shims)
	}

	killed := time.Now()
	if err := syscall.Kill(shims[0].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	lr.exitWithin(t, killed, "the group's shim was SIGKILLed", faultGrace+8*time.Second)
	assertNoneSurvives(t, ms, marker, lr.spawned.CgroupsPath)
	res := lr.result(t)
	t.Logf("result: status %s, exit code %s, reasons %v, error %q", res.Status, fmtCode(res.ExitCode), res.Reasons, res.Error)
	if res.Status == launcher.StatusCompleted {
		t.Errorf("a run whose shim was killed under it is %s", res.Status)
	}
	// The anchor's rootfs gone too (as with the state dir that made it):
	// the anchor is made anew, not its task alone.
	if err := os.RemoveAll(filepath.Join(e.state, "shim-group")); err != nil {
		t.Fatal(err)
	}
	assertNextRunWorks(t, e, res.RunID)
	if !daemon.GroupLive(e.containerd(), oci.Namespace, launcher.ShimGroupID) {
		t.Errorf("the group does not answer after the run that followed the kill")
	}
	if shims := shimsOf(t, e.containerd()); len(shims) != 1 || shims[0].ID != launcher.ShimGroupID {
		t.Errorf("after the next run, want the anchor's new shim alone: %+v", shims)
	}
}
