package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"

	"hookbox.dev/hookbox/images"
	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/launcher/cgroup"
	"hookbox.dev/hookbox/mounts"
	"hookbox.dev/hookbox/oci"
	"hookbox.dev/hookbox/render/verify"
)

// CollectedFile marks a run record whose leftovers gc removed.
const CollectedFile = "collected.json"

// GCAction is one thing gc did (or, with DryRun, would do).
type GCAction struct {
	RunID  string `json:"run_id"`
	What   string `json:"what"` // processes, task, container, snapshot, tmpfs, cgroup, helper-cgroup
	Detail string `json:"detail,omitempty"`
	Error  string `json:"error,omitempty"`
}

// GCReport lists what gc found and did.
type GCReport struct {
	Live    []string   `json:"live"`    // runs whose hookbox is still running
	Actions []GCAction `json:"actions"` // empty when there was nothing to do
}

// GC removes what runs whose hookbox process is gone left behind: processes
// in their cgroup, tasks, containers, snapshots, tmpfs mounts and cgroups.
// A run is live while its recorded hookbox pid exists with the recorded
// start time (a reissued pid does not count). Every step is idempotent: a
// resource already gone counts as removed, so a second gc does nothing.
func GC(ctx context.Context, client *containerd.Client, stateDir string, dryRun bool) (*GCReport, error) {
	ctx = namespaces.WithNamespace(ctx, oci.Namespace)
	report := &GCReport{Live: []string{}, Actions: []GCAction{}}
	entries, err := os.ReadDir(RunsDir(stateDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	known := map[string]bool{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(RunsDir(stateDir), e.Name())
		intent, err := ReadIntent(dir)
		if err != nil {
			continue // not a run record
		}
		known[intent.RunID] = true
		if finishedCleanly(dir) {
			continue
		}
		if host.ProcessAlive(intent.HookboxPID, intent.HookboxStart) {
			report.Live = append(report.Live, intent.RunID)
			continue
		}
		collectRun(ctx, client, dir, intent, dryRun, report)
	}
	collectHelpers(ctx, hostCgroups().Helpers(), dryRun, report)
	// Containers and snapshots whose run record is gone or not live.
	if client != nil {
		// Resources whose run record is not in this state dir (another
		// state dir's runs share the namespace) are collected only when
		// their own owner labels prove the hookbox that made them is gone.
		abandoned := func(id string, labels map[string]string) bool {
			if known[id] || slices.Contains(report.Live, id) {
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
			return report, fmt.Errorf("list containers: %w", err)
		}
		for _, c := range containers {
			labels, err := c.Labels(ctx)
			if err == nil && abandoned(c.ID(), labels) {
				collectContainer(ctx, client, c.ID(), dryRun, report)
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
			return report, fmt.Errorf("list snapshots: %w", err)
		}
		runLeases, err := client.LeasesService().List(ctx, "labels.\""+LabelRunID+"\"")
		if err != nil {
			return report, fmt.Errorf("list leases: %w", err)
		}
		for _, l := range runLeases {
			if id := l.Labels[LabelRunID]; id != "" && abandoned(id, l.Labels) && !slices.Contains(orphans, l.ID) {
				orphans = append(orphans, l.ID)
			}
		}
		for _, name := range orphans {
			record(report, name, "snapshot", "", dryRun, func() error { return removeSnapshot(ctx, client, name) })
		}
	}
	sort.Strings(report.Live)
	return report, nil
}

// record runs step (unless dryRun) and notes it when it did something.
func record(report *GCReport, runID, what, detail string, dryRun bool, step func() error) {
	a := GCAction{RunID: runID, What: what, Detail: detail}
	if !dryRun {
		if err := step(); err != nil {
			a.Error = err.Error()
		}
	}
	report.Actions = append(report.Actions, a)
}

func collectRun(ctx context.Context, client *containerd.Client, dir string, intent *Intent, dryRun bool, report *GCReport) {
	id := intent.RunID
	if cg, err := cgroup.Open(intent.CgroupsPath); err == nil {
		if members, _ := cg.Members(); len(members) > 0 {
			record(report, id, "processes", fmt.Sprintf("%d in %s", len(members), intent.CgroupsPath), dryRun, func() error {
				if _, err := cg.KillAll(syscall.SIGKILL); err != nil {
					return err
				}
				waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				return cg.WaitEmpty(waitCtx, 20*time.Millisecond)
			})
		}
	}
	if client != nil {
		collectContainer(ctx, client, intent.ContainerID, dryRun, report)
		if exists, _ := snapshotExists(ctx, client, intent.SnapshotKey); exists || leaseExists(ctx, client, intent.SnapshotKey) {
			record(report, id, "snapshot", intent.SnapshotKey, dryRun, func() error { return removeSnapshot(ctx, client, intent.SnapshotKey) })
		}
	}
	for _, tmpfs := range []string{mounts.RunHostPaths(dir).RunDir, mounts.RunHostPaths(dir).WorkspaceStore} {
		if mounted, _ := mounts.IsMounted(tmpfs); mounted {
			record(report, id, "tmpfs", tmpfs, dryRun, func() error { return mounts.Unmount(tmpfs) })
		}
	}
	if exists, _ := cgroup.Exists(intent.CgroupsPath); exists {
		record(report, id, "cgroup", intent.CgroupsPath, dryRun, func() error {
			cg, err := cgroup.Open(intent.CgroupsPath)
			if err != nil {
				return err
			}
			return cg.Remove()
		})
	}
	if !dryRun {
		if _, err := os.Stat(filepath.Join(dir, CollectedFile)); errors.Is(err, fs.ErrNotExist) && hasActions(report, id) {
			_ = writeJSON(filepath.Join(dir, CollectedFile), map[string]any{"collected_at": time.Now().UTC()}, 0o644)
		}
	}
}

// finishedCleanly: the run wrote its result and its teardown removed every
// resource (or gc did since).
func finishedCleanly(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, CollectedFile)); err == nil {
		return true
	}
	data, err := os.ReadFile(filepath.Join(dir, ResultFile))
	if err != nil {
		return false
	}
	var res Result
	if json.Unmarshal(data, &res) != nil {
		return false
	}
	return !slices.Contains(res.Reasons, ReasonTeardownIncomplete)
}

func hasActions(report *GCReport, id string) bool {
	for _, a := range report.Actions {
		if a.RunID == id {
			return true
		}
	}
	return false
}

func collectContainer(ctx context.Context, client *containerd.Client, id string, dryRun bool, report *GCReport) {
	c, err := client.LoadContainer(ctx, id)
	if err != nil {
		return // gone (or unreadable: nothing gc can do)
	}
	if task, err := c.Task(ctx, nil); err == nil {
		record(report, id, "task", "", dryRun, func() error {
			_, err := task.Delete(ctx, containerd.WithProcessKill)
			if err != nil && !errdefs.IsNotFound(err) {
				return err
			}
			return nil
		})
	}
	record(report, id, "container", "", dryRun, func() error {
		if err := c.Delete(ctx); err != nil && !errdefs.IsNotFound(err) {
			return err
		}
		return nil
	})
}

func snapshotExists(ctx context.Context, client *containerd.Client, key string) (bool, error) {
	_, err := client.SnapshotService(images.Snapshotter).Stat(ctx, key)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

func leaseExists(ctx context.Context, client *containerd.Client, id string) bool {
	list, err := client.LeasesService().List(ctx, "id=="+id)
	return err == nil && len(list) > 0
}

// removeSnapshot removes a run's base image view and the lease (named like
// the view) that protected it; either already gone counts as removed.
func removeSnapshot(ctx context.Context, client *containerd.Client, key string) error {
	err := client.SnapshotService(images.Snapshotter).Remove(ctx, key)
	if err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	err = client.LeasesService().Delete(ctx, leases.Lease{ID: key})
	if err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	return nil
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
