package launcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/defaults"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"

	"hookbox.dev/hookbox/images"
	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/launcher/cgroup"
	"hookbox.dev/hookbox/launcher/daemon"
	"hookbox.dev/hookbox/mounts"
	"hookbox.dev/hookbox/oci"
	"hookbox.dev/hookbox/render/verify"
)

// CollectedFile is gc's mark on a run record (Collected).
const CollectedFile = "collected.json"

// Collected is collected.json: what the last gc found of an abandoned run.
// Only a complete mark ends gc's interest in the run; an incomplete one
// lists what was left, and the next gc tries again. (A mark without
// "complete", written by an older hookbox whatever it left, is checked
// again.)
type Collected struct {
	Complete  bool      `json:"complete"`
	CheckedAt time.Time `json:"checked_at"`
	Left      []GCLeft  `json:"left,omitempty"`
}

// GCAction is one thing gc did (or, with DryRun, would do).
type GCAction struct {
	RunID  string `json:"run_id"`
	What   string `json:"what"` // processes, task, container, snapshot, lease, shim, bundle, socket, fifo, tmpfs, cgroup, helper-cgroup, tracer (a managed tracer, with no run id), base-view (another base image's shared view, with no run id), shim-group (the shim group's anchor, with no run id)
	Detail string `json:"detail,omitempty"`
	Error  string `json:"error,omitempty"`
}

// GCLeft is what gc found still there of an abandoned run after
// collecting it, or could not check.
type GCLeft struct {
	RunID string `json:"run_id"`
	// What: processes, task, container, snapshot, lease, shim, bundle,
	// socket, fifo, tmpfs, cgroup, or containerd (its resources could not
	// be checked).
	What   string `json:"what"`
	Detail string `json:"detail,omitempty"`
}

// GCReport lists what gc found and did.
type GCReport struct {
	Live    []string   `json:"live"`    // runs whose hookbox is still running
	Actions []GCAction `json:"actions"` // empty when there was nothing to do
	// Left: what abandoned runs still hold after this gc; those runs are
	// not marked collected, and the next gc tries them again.
	Left []GCLeft `json:"left"`
}

// GC removes what runs whose hookbox process is gone left behind:
// processes in their cgroup, tasks, containers, snapshots, leases, shims
// and task bundles containerd no longer tracks, stdio FIFOs, tmpfs mounts,
// cgroups and helper cgroups (docs/architecture.md, "gc"). A run is live
// while its recorded hookbox pid exists with the recorded start time (a
// reissued pid does not count).
// A run is marked collected only once every resource is checked and gone;
// b nil (containerd unreachable) or connected to another containerd than
// the run's collects what procfs, mounts and cgroups allow and leaves the
// run for a later gc. Every step is idempotent: a resource already gone
// counts as removed, so a second gc does nothing.
func GC(ctx context.Context, b *Backend, stateDir string, dryRun bool) (*GCReport, error) {
	return collect(ctx, b, stateDir, dryRun, true)
}

// collect is one gc pass; sweep adds the namespace sweep (what other state
// dirs' killed runs left, lost shims, bundles and FIFO sets). The pass a
// run makes before it starts leaves that to hookbox gc: it stays cheap,
// and a run in one state dir never ends another state dir's abandoned run
// while a test or a user is still looking at it.
func collect(ctx context.Context, b *Backend, stateDir string, dryRun, sweep bool) (*GCReport, error) {
	g := &collector{
		ctx:     namespaces.WithNamespace(ctx, oci.Namespace),
		dryRun:  dryRun,
		report:  &GCReport{Live: []string{}, Actions: []GCAction{}, Left: []GCLeft{}},
		live:    map[string]bool{},
		handled: map[string]bool{},
	}
	g.fifoRoot = defaults.DefaultFIFODir
	if b != nil && b.FIFODir != "" {
		g.fifoRoot = b.FIFODir
	}
	if b != nil && b.Client != nil {
		g.client, g.address, g.state = b.Client, b.Address, b.State
	}
	ids, err := runsToCheck(stateDir, sweep)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		dir := filepath.Join(RunsDir(stateDir), id)
		if finishedCleanly(dir) {
			unmarkActive(stateDir, id, dryRun)
			continue
		}
		intent, err := ReadIntent(dir)
		if err != nil {
			// Not a run record. A run marks itself active only after
			// its intent is written, so the mark is no live run's.
			unmarkActive(stateDir, id, dryRun)
			continue
		}
		if host.ProcessAlive(intent.HookboxPID, intent.HookboxStart) {
			g.live[intent.RunID] = true
			g.report.Live = append(g.report.Live, intent.RunID)
			continue
		}
		g.handled[intent.RunID] = true
		g.collectRun(dir, intent)
		if finishedCleanly(dir) {
			unmarkActive(stateDir, id, dryRun)
		}
	}
	collectHelpers(ctx, hostCgroups().Helpers(), dryRun, g.report)
	if sweep && g.client != nil {
		if err := g.sweep(); err != nil {
			return g.report, err
		}
	}
	sort.Strings(g.report.Live)
	return g.report, nil
}

// collector is one gc pass.
type collector struct {
	ctx    context.Context
	dryRun bool
	report *GCReport
	// The containerd gc talks to (client nil: none answered), and its
	// state directory when known.
	client  *containerd.Client
	address string
	state   string
	// fifoRoot is where the containerd client makes tasks' stdio FIFOs.
	fifoRoot string
	// live: runs of this state dir whose hookbox runs; handled: runs the
	// records pass collected (the namespace sweep leaves both alone).
	live, handled map[string]bool
}

// do runs step (unless dryRun) and notes it.
func (g *collector) do(runID, what, detail string, step func() error) {
	record(g.report, runID, what, detail, g.dryRun, step)
}

// record runs step (unless dryRun) and notes it in report.
func record(report *GCReport, runID, what, detail string, dryRun bool, step func() error) {
	a := GCAction{RunID: runID, What: what, Detail: detail}
	if !dryRun {
		if err := step(); err != nil {
			a.Error = err.Error()
		}
	}
	report.Actions = append(report.Actions, a)
}

// daemonOf says whether gc can check the containerd resources of a run
// recorded on address: "" when it can, else why not.
func (g *collector) daemonOf(address string) string {
	switch {
	case g.client == nil:
		return "containerd is unreachable, so the run's container, task, snapshot, lease, shim and bundle are unchecked: run hookbox gc again once it answers"
	case address != "" && !daemon.SameAddress(address, g.address):
		return fmt.Sprintf("the run used the containerd at %s, gc is connected to %s: run hookbox gc --address %s", address, g.address, address)
	}
	return ""
}

func (g *collector) collectRun(dir string, intent *Intent) {
	id := intent.RunID
	if cg, err := cgroup.Open(intent.CgroupsPath); err == nil {
		if members, _ := cg.Members(); len(members) > 0 {
			g.do(id, "processes", fmt.Sprintf("%d in %s", len(members), intent.CgroupsPath), func() error {
				if _, err := cg.KillAll(syscall.SIGKILL); err != nil {
					return err
				}
				waitCtx, cancel := context.WithTimeout(g.ctx, 30*time.Second)
				defer cancel()
				return cg.WaitEmpty(waitCtx, 20*time.Millisecond)
			})
		}
	}
	if g.daemonOf(intent.Address) == "" {
		g.collectContainer(id, intent.ContainerID)
		if key := runSnapshot(intent); key != "" {
			if exists, _ := snapshotExists(g.ctx, g.client, key); exists || leaseExists(g.ctx, g.client, key) {
				g.do(id, "snapshot", key, func() error { return removeSnapshot(g.ctx, g.client, key) })
			}
		}
		for _, l := range runLeases(g.ctx, g.client, id) {
			if l.ID != intent.SnapshotKey {
				g.do(id, "lease", l.ID, func() error { return deleteLease(g.ctx, g.client, l.ID) })
			}
		}
		// containerd no longer tracks the task: a shim still serving it
		// was lost (its client killed while creating or deleting it). The
		// shim group's serves other runs too: only the task is ended.
		shims, _ := daemon.Shims()
		group := g.groupShim(shims)
		for _, s := range shims {
			if s.Namespace == oci.Namespace && s.ID == intent.ContainerID && (group == nil || s.PID != group.PID) {
				g.do(id, "shim", shimDetail(s), func() error { return s.End(g.ctx) })
			}
		}
		if bundle := g.bundle(intent.ContainerID); bundle != "" {
			g.endGroupTask(group, id, intent.ContainerID, bundle)
			g.do(id, "bundle", bundle, func() error { return daemon.RemoveBundle(bundle) })
		}
		// Its shim is gone (a live one would still serve it).
		if sock := shimSocket(intent); sock != "" && runShim(intent.ContainerID, intent.Address) == nil {
			g.do(id, "socket", sock, func() error { return daemon.RemoveShimSocket(intent.Address, oci.Namespace, intent.ContainerID) })
		}
	}
	for _, fifos := range fifoSets(g.fifoRoot)[intent.ContainerID] {
		g.do(id, "fifo", fifos, func() error { return os.RemoveAll(fifos) })
	}
	for _, tmpfs := range []string{mounts.RunHostPaths(dir).RunDir, mounts.RunHostPaths(dir).WorkspaceStore} {
		if mounted, _ := mounts.IsMounted(tmpfs); mounted {
			g.do(id, "tmpfs", tmpfs, func() error { return mounts.Unmount(tmpfs) })
		}
	}
	if exists, _ := cgroup.Exists(intent.CgroupsPath); exists {
		g.do(id, "cgroup", intent.CgroupsPath, func() error {
			cg, err := cgroup.Open(intent.CgroupsPath)
			if err != nil {
				return err
			}
			return cg.Remove()
		})
	}
	if g.dryRun {
		return
	}
	left := g.leftovers(dir, intent)
	g.report.Left = append(g.report.Left, left...)
	mark := Collected{Complete: len(left) == 0, CheckedAt: time.Now().UTC(), Left: left}
	if err := writeJSON(filepath.Join(dir, CollectedFile), mark, 0o644); err != nil && mark.Complete {
		// Unmarked, the run is only checked again by the next gc.
		g.report.Left = append(g.report.Left, GCLeft{RunID: id, What: "mark", Detail: "writing " + CollectedFile + ": " + err.Error()})
	}
}

// bundle is the task bundle of id in the state directory of gc's
// containerd, "" when there is none (or the directory is unknown).
func (g *collector) bundle(id string) string {
	if g.state == "" {
		return ""
	}
	dir := daemon.TaskBundle(g.state, oci.Namespace, id)
	if _, err := os.Lstat(dir); err != nil {
		return ""
	}
	return dir
}

// leftovers checks every resource a run may hold, after collecting it.
func (g *collector) leftovers(dir string, intent *Intent) []GCLeft {
	id := intent.RunID
	var left []GCLeft
	add := func(what, detail string) { left = append(left, GCLeft{RunID: id, What: what, Detail: detail}) }
	if intent.CgroupsPath != "" { // "": the run was to have no cgroup of its own
		if cg, err := cgroup.Open(intent.CgroupsPath); err == nil {
			if members, _ := cg.Members(); len(members) > 0 {
				add("processes", fmt.Sprintf("%v in %s", members, intent.CgroupsPath))
			}
		}
		if exists, err := cgroup.Exists(intent.CgroupsPath); exists || err != nil {
			add("cgroup", strings.TrimSpace(intent.CgroupsPath+" "+errOrEmpty(err)))
		}
	}
	for _, tmpfs := range []string{mounts.RunHostPaths(dir).RunDir, mounts.RunHostPaths(dir).WorkspaceStore} {
		if mounted, err := mounts.IsMounted(tmpfs); mounted || err != nil {
			add("tmpfs", strings.TrimSpace(tmpfs+" "+errOrEmpty(err)))
		}
	}
	for _, fifos := range fifoSets(g.fifoRoot)[intent.ContainerID] {
		add("fifo", fifos)
	}
	shims, err := daemon.Shims()
	if err != nil {
		add("shim", "listing processes: "+err.Error())
	}
	group := g.groupShim(shims)
	for _, s := range shims {
		if s.Namespace == oci.Namespace && s.ID == intent.ContainerID && (group == nil || s.PID != group.PID) {
			add("shim", fmt.Sprintf("pid %d", s.PID))
		}
	}
	if why := g.daemonOf(intent.Address); why != "" {
		add("containerd", why)
		return left
	}
	if c, err := g.client.LoadContainer(g.ctx, intent.ContainerID); err == nil {
		add("container", intent.ContainerID)
		if _, err := c.Task(g.ctx, nil); err == nil || !errdefs.IsNotFound(err) {
			add("task", strings.TrimSpace(intent.ContainerID+" "+errOrEmpty(err)))
		}
	} else if !errdefs.IsNotFound(err) {
		add("container", err.Error())
	}
	if key := runSnapshot(intent); key != "" {
		if exists, err := snapshotExists(g.ctx, g.client, key); exists || err != nil {
			add("snapshot", strings.TrimSpace(key+" "+errOrEmpty(err)))
		}
		if leaseExists(g.ctx, g.client, key) {
			add("lease", key)
		}
	}
	for _, l := range runLeases(g.ctx, g.client, id) {
		if l.ID != intent.SnapshotKey {
			add("lease", l.ID)
		}
	}
	if bundle := g.bundle(intent.ContainerID); bundle != "" {
		add("bundle", bundle)
	}
	if sock := shimSocket(intent); sock != "" {
		add("socket", sock)
	}
	return left
}

// groupShim is the shim group's shim on gc's containerd, or nil.
func (g *collector) groupShim(shims []daemon.Shim) *daemon.Shim {
	return daemon.GroupShim(shims, g.address, oci.Namespace, ShimGroupID)
}

// endGroupTask ends the task of bundle that group's shim may still hold
// although containerd no longer tracks it (its hookbox killed while
// creating it), as the shim's own delete would, leaving the shim to the
// other runs of the group.
func (g *collector) endGroupTask(group *daemon.Shim, runID, containerID, bundle string) {
	if group == nil || daemon.BundleGroup(bundle) != ShimGroupID {
		return // a task of its own shim: its shim, or containerd, ends it
	}
	g.do(runID, "task", fmt.Sprintf("%s in the shim group's shim (pid %d)", containerID, group.PID), func() error {
		return group.EndGroupTask(g.ctx, containerID, bundle)
	})
}

// runShim is the shim of run id's task on the containerd at address, or
// nil.
func runShim(id, address string) *daemon.Shim {
	shims, _ := daemon.Shims()
	for _, s := range shims {
		if s.Namespace == oci.Namespace && s.ID == id && daemon.SameAddress(s.Address, address) {
			return &s
		}
	}
	return nil
}

// shimSocket is the socket the shim of the run's task served, when it is
// still there.
func shimSocket(intent *Intent) string {
	sock := daemon.ShimSocket(intent.Address, oci.Namespace, intent.ContainerID)
	if fi, err := os.Lstat(sock); err != nil || fi.Mode()&fs.ModeSocket == 0 {
		return ""
	}
	return sock
}

func shimDetail(s daemon.Shim) string {
	if s.Bundle == "" {
		return fmt.Sprintf("pid %d (its bundle is gone)", s.PID)
	}
	return fmt.Sprintf("pid %d, bundle %s", s.PID, s.Bundle)
}

func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return "(" + err.Error() + ")"
}

// sweep collects what the namespace holds of runs this state dir does not
// record (another state dir's, or a record removed), once owner labels
// prove the hookbox that made them is gone, and the shims, task bundles
// and FIFO sets containerd no longer tracks (sweepLost).
func (g *collector) sweep() error {
	ctx, client := g.ctx, g.client
	abandoned := func(id string, labels map[string]string) bool {
		if g.live[id] || g.handled[id] {
			return false // the records pass decided
		}
		pid, err1 := strconv.Atoi(labels[LabelOwnerPID])
		start, err2 := strconv.ParseUint(labels[LabelOwnerStart], 10, 64)
		if err1 != nil || err2 != nil {
			return false // no proof of abandonment
		}
		return !host.ProcessAlive(pid, start)
	}
	containers, err := client.Containers(ctx, "labels.\""+LabelRunID+"\"")
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	for _, c := range containers {
		labels, err := c.Labels(ctx)
		if err == nil && abandoned(c.ID(), labels) {
			g.collectContainer(c.ID(), c.ID())
		}
	}
	sn := client.SnapshotService(images.Snapshotter)
	var orphans []string
	err = sn.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		if id := info.Labels[LabelRunID]; id != "" && abandoned(id, info.Labels) {
			orphans = append(orphans, info.Name)
		}
		return nil
	}, "labels.\""+LabelRunID+"\"")
	if err != nil {
		return fmt.Errorf("list snapshots: %w", err)
	}
	labelled, err := client.LeasesService().List(ctx, "labels.\""+LabelRunID+"\"")
	if err != nil {
		return fmt.Errorf("list leases: %w", err)
	}
	for _, l := range labelled {
		if id := l.Labels[LabelRunID]; id != "" && abandoned(id, l.Labels) && !slices.Contains(orphans, l.ID) {
			orphans = append(orphans, l.ID)
		}
	}
	for _, name := range orphans {
		g.do(name, "snapshot", "", func() error { return removeSnapshot(ctx, client, name) })
	}
	if err := g.sweepBaseViews(); err != nil {
		return err
	}
	return g.sweepLost(abandoned)
}

// sweepBaseViews removes the views (and their leases) of base images
// other than this hookbox's: a CA bundle that changed, or another hookbox
// version, made them. Only while no container of a run is left in the
// namespace: a live run of any hookbox may mount one.
func (g *collector) sweepBaseViews() error {
	ctx, client := g.ctx, g.client
	base, err := baseImage()
	if err != nil {
		return nil // this host's base image cannot be built: keep them all
	}
	current := BaseViewKey(base)
	if runs, err := client.Containers(ctx, "labels.\""+LabelRunID+"\""); err != nil || len(runs) > 0 {
		return err
	}
	views, err := client.LeasesService().List(ctx, "labels.\""+images.BaseLabel+"\"")
	if err != nil {
		return fmt.Errorf("list base image leases: %w", err)
	}
	for _, l := range views {
		if l.ID != current && strings.HasPrefix(l.ID, baseViewPrefix) {
			g.do("", "base-view", l.ID, func() error { return removeSnapshot(ctx, client, l.ID) })
		}
	}
	return nil
}

// orphanGrace: a task bundle or FIFO set no shim serves, of a run this
// state dir does not record, is left alone this long after it was made, in
// case containerd is about to start its shim.
const orphanGrace = time.Minute

// sweepLost ends the shims of this containerd's hookbox namespace that
// containerd no longer tracks, and removes the task bundles and stdio FIFO
// sets no shim serves, unless a run that may still use them owns them: a
// task always has a container, so a shim or bundle without one is lost,
// and one whose container's owner is gone was left by a killed hookbox.
func (g *collector) sweepLost(abandoned func(string, map[string]string) bool) error {
	ownerGone := func(id string) bool {
		if g.live[id] || g.handled[id] {
			return false
		}
		c, err := g.client.LoadContainer(g.ctx, id)
		if errdefs.IsNotFound(err) {
			return true
		}
		if err != nil {
			return false
		}
		labels, err := c.Labels(g.ctx)
		return err == nil && abandoned(id, labels)
	}
	shims, err := daemon.Shims()
	if err != nil {
		return fmt.Errorf("list shims: %w", err)
	}
	served := map[string]bool{}    // ids whose shim on this containerd stays
	elsewhere := map[string]bool{} // ids with a shim of another containerd
	group := g.groupShim(shims)
	for _, s := range shims {
		if s.Namespace != oci.Namespace {
			continue
		}
		if !daemon.SameAddress(s.Address, g.address) {
			elsewhere[s.ID] = true
			continue
		}
		if group != nil && s.PID == group.PID {
			served[s.ID] = true // it serves whatever runs join the group
			continue
		}
		if !ownerGone(s.ID) {
			served[s.ID] = true
			continue
		}
		g.do(s.ID, "shim", shimDetail(s), func() error { return s.End(g.ctx) })
	}
	// The FIFO directory is shared by every client of every containerd:
	// only sets named like a hookbox run, that no shim of any containerd
	// serves, that are not new (the client makes them just before it asks
	// for the task) and whose run is not live on this containerd.
	for id, dirs := range fifoSets(g.fifoRoot) {
		if !runIDPattern.MatchString(id) || served[id] || elsewhere[id] || !ownerGone(id) {
			continue
		}
		for _, fifos := range dirs {
			if fi, err := os.Lstat(fifos); err != nil || time.Since(fi.ModTime()) < orphanGrace {
				continue
			}
			g.do(id, "fifo", fifos, func() error { return os.RemoveAll(fifos) })
		}
	}
	if g.state == "" {
		return nil
	}
	ids, err := daemon.TaskBundles(g.state, oci.Namespace)
	if err != nil {
		return fmt.Errorf("list task bundles: %w", err)
	}
	for _, id := range ids {
		bundle := daemon.TaskBundle(g.state, oci.Namespace, id)
		if served[id] || g.handled[id] || g.live[id] {
			continue
		}
		if fi, err := os.Lstat(bundle); err != nil || time.Since(fi.ModTime()) < orphanGrace || !ownerGone(id) {
			continue
		}
		g.endGroupTask(group, id, id, bundle)
		g.do(id, "bundle", bundle, func() error { return daemon.RemoveBundle(bundle) })
	}
	return nil
}

// runIDPattern matches the ids NewRunID makes.
var runIDPattern = regexp.MustCompile(`^hbx-[0-9a-z]+-[0-9a-f]{8}$`)

// fifoSets finds the stdio FIFO sets under the containerd client's FIFO
// directory, by task id. The client makes one directory per task
// (cio.NewFIFOSetInDir: <root>/<random>/<id>-stdin, -stdout, -stderr) and
// removes it when the task's IO is closed, which a killed hookbox never
// does.
func fifoSets(root string) map[string][]string {
	sets := map[string][]string{}
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		files, err := os.ReadDir(dir)
		if err != nil || len(files) == 0 {
			continue
		}
		id := ""
		for _, f := range files {
			name := f.Name()
			var fid string
			for _, stream := range []string{"-stdin", "-stdout", "-stderr"} {
				if t, ok := strings.CutSuffix(name, stream); ok {
					fid = t
				}
			}
			if fid == "" || (id != "" && fid != id) {
				id = ""
				break // not one task's FIFO set
			}
			id = fid
		}
		if id != "" {
			sets[id] = append(sets[id], dir)
		}
	}
	return sets
}

// finishedCleanly: the run wrote its result and its teardown removed every
// resource, or a gc since found every resource gone.
// ActiveDir holds a mark per run of the state dir that has not finished
// cleanly (ActiveDir/<run id>, empty): made right after the run's intent,
// before anything of the run exists, and removed once its result says its
// teardown was complete, or once gc has collected it. The check every run
// makes before it starts reads these marks, not every record the state
// dir has kept: it costs what the unfinished runs number, not what the
// state dir's history does. hookbox gc still reads every record (it also
// finds the runs of a hookbox that kept no marks).
func ActiveDir(stateDir string) string { return filepath.Join(stateDir, "active") }

// markActive marks run id of stateDir active.
func markActive(stateDir, id string) error {
	if err := os.MkdirAll(ActiveDir(stateDir), 0o700); err != nil {
		return fmt.Errorf("mark the run active: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(ActiveDir(stateDir), id), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("mark the run active: %w", err)
	}
	return f.Close()
}

// unmarkActive removes run id's mark; none is fine.
func unmarkActive(stateDir, id string, dryRun bool) {
	if !dryRun {
		os.Remove(filepath.Join(ActiveDir(stateDir), id))
	}
}

// runsToCheck is the run ids a gc pass looks at: every record's (all), or
// the runs marked active.
func runsToCheck(stateDir string, all bool) ([]string, error) {
	dir := ActiveDir(stateDir)
	if all {
		dir = RunsDir(stateDir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	ids := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.IsDir() == all {
			ids = append(ids, e.Name())
		}
	}
	if all {
		// Marks whose record is gone (removed by hand) are dropped too.
		marks, _ := os.ReadDir(ActiveDir(stateDir))
		for _, m := range marks {
			if !slices.Contains(ids, m.Name()) {
				ids = append(ids, m.Name())
			}
		}
	}
	return ids, nil
}

func finishedCleanly(dir string) bool {
	if data, err := os.ReadFile(filepath.Join(dir, CollectedFile)); err == nil {
		var mark Collected
		if json.Unmarshal(data, &mark) == nil && mark.Complete {
			return true
		}
		return false
	}
	data, err := os.ReadFile(filepath.Join(dir, ResultFile))
	if err != nil {
		return false
	}
	// Every run before a run reads every record: a result that cannot
	// name the reason is not decoded (a run record per run, kept for
	// good, would otherwise make each run slower than the last).
	if !bytes.Contains(data, []byte(`"`+ReasonTeardownIncomplete+`"`)) {
		return json.Valid(data)
	}
	var res struct {
		Reasons []string `json:"reasons"`
	}
	if json.Unmarshal(data, &res) != nil {
		return false
	}
	return tornDownCleanly(res.Reasons)
}

// tornDownCleanly: a result with reasons left nothing behind.
func tornDownCleanly(reasons []string) bool {
	return !slices.Contains(reasons, ReasonTeardownIncomplete)
}

func (g *collector) collectContainer(runID, id string) {
	c, err := g.client.LoadContainer(g.ctx, id)
	if err != nil {
		return // gone (or unreadable: leftovers says so)
	}
	if task, err := c.Task(g.ctx, nil); err == nil {
		g.do(runID, "task", "", func() error {
			_, err := task.Delete(g.ctx, containerd.WithProcessKill)
			if err != nil && !errdefs.IsNotFound(err) {
				return err
			}
			return nil
		})
	}
	g.do(runID, "container", "", func() error {
		if err := c.Delete(g.ctx); err != nil && !errdefs.IsNotFound(err) {
			return err
		}
		return nil
	})
}

// runSnapshot is the view of the run's own an intent names: an older
// hookbox made one per run, named after it; now every run mounts the base
// image's shared view (BaseViewKey), which no run's collection removes.
func runSnapshot(intent *Intent) string {
	if strings.HasPrefix(intent.SnapshotKey, baseViewPrefix) {
		return ""
	}
	return intent.SnapshotKey
}

func snapshotExists(ctx context.Context, client *containerd.Client, key string) (bool, error) {
	_, err := client.SnapshotService(images.Snapshotter).Stat(ctx, key)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

func leaseExists(ctx context.Context, client *containerd.Client, id string) bool {
	list, err := client.LeasesService().List(ctx, "id=="+strconv.Quote(id))
	return err == nil && len(list) > 0
}

// runLeases are the leases labelled with run id.
func runLeases(ctx context.Context, client *containerd.Client, id string) []leases.Lease {
	list, _ := client.LeasesService().List(ctx, "labels.\""+LabelRunID+"\"=="+strconv.Quote(id))
	return list
}

func deleteLease(ctx context.Context, client *containerd.Client, id string) error {
	err := client.LeasesService().Delete(ctx, leases.Lease{ID: id})
	if err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	return nil
}

// removeSnapshot removes a base image view (an older hookbox's run's own,
// or a shared one) and the lease named like it that protected it; either
// already gone counts as removed.
func removeSnapshot(ctx context.Context, client *containerd.Client, key string) error {
	err := client.SnapshotService(images.Snapshotter).Remove(ctx, key)
	if err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	return deleteLease(ctx, client, key)
}

// ListRuns reads the run records, newest first.
func ListRuns(stateDir string) ([]RunSummary, error) {
	entries, err := os.ReadDir(RunsDir(stateDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []RunSummary
	for _, e := range entries {
		dir := filepath.Join(RunsDir(stateDir), e.Name())
		intent, err := ReadIntent(dir)
		if err != nil {
			continue
		}
		s := RunSummary{RunID: intent.RunID, Spawn: intent.Spawn, CreatedAt: intent.CreatedAt, RecordDir: dir, Status: StatusRunning}
		if data, err := os.ReadFile(filepath.Join(dir, ResultFile)); err == nil {
			var res Result
			if json.Unmarshal(data, &res) == nil {
				s.Status, s.ExitCode, s.Verdict = res.Status, res.ExitCode, res.Trace.Status
			}
		} else if !host.ProcessAlive(intent.HookboxPID, intent.HookboxStart) {
			s.Status = StatusAbandoned
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	return out, nil
}

// RunSummary is one line of `hookbox ps`.
type RunSummary struct {
	RunID  string `json:"run_id"`
	Spawn  string `json:"spawn"`
	Status Status `json:"status"`
	// Verdict is the exec verdict of a finished run: a run that completed
	// but whose trace contradicts its render says mismatch here.
	Verdict   verify.Status `json:"verdict,omitempty"`
	ExitCode  *int          `json:"exit_code,omitempty"`
	CreatedAt time.Time     `json:"created_at"`
	RecordDir string        `json:"record_dir"`
}
