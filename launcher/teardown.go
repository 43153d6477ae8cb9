package launcher

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"

	"hookbox.dev/hookbox/internal/faultpoint"
	"hookbox.dev/hookbox/mounts"
	"hookbox.dev/hookbox/render"
)

// stopAll ends every process of the run: SIGTERM to init (or, when init
// already exited, to whoever is left), a grace period that ends early once
// the cgroup is empty, then SIGKILL to every member, then a wait until the
// cgroup has no members. Escalation keys on cgroup membership, never on
// init alone (docs/contracts.md §2).
func (x *execution) stopAll(ctx context.Context) error {
	x.collectExit(0)
	if x.result.ExitCode == nil {
		// An init that exited meanwhile is fine: membership decides below.
		if err := x.task.Kill(ctx, syscall.SIGTERM); err != nil && !errdefs.IsNotFound(err) && !isAlreadyStopped(err) {
			return fmt.Errorf("SIGTERM init: %w", err)
		}
	} else if x.cg != nil {
		if empty, _ := x.cg.Empty(); !empty {
			x.cg.KillAll(syscall.SIGTERM)
		}
	}
	faultpoint.Reach(faultpoint.Grace)
	// The grace period ends as soon as the cgroup is empty.
	if x.cg != nil {
		graceCtx, cancel := context.WithTimeout(ctx, x.opts.Grace)
		_ = x.cg.WaitEmpty(graceCtx, 10*time.Millisecond)
		cancel()
	} else {
		x.collectExit(x.opts.Grace)
	}
	if x.cg != nil {
		if empty, _ := x.cg.Empty(); !empty {
			x.cg.KillAll(syscall.SIGKILL)
		}
	}
	if x.cg == nil {
		// Without the cgroup view, containerd's kill-all is what is left.
		if err := x.task.Kill(ctx, syscall.SIGKILL, containerd.WithKillAll); err != nil && !errdefs.IsNotFound(err) && !isAlreadyStopped(err) {
			return fmt.Errorf("SIGKILL all: %w", err)
		}
	} else {
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := x.cg.WaitEmpty(waitCtx, 20*time.Millisecond); err != nil {
			members, _ := x.cg.Members()
			return fmt.Errorf("cgroup %s still has members %v: %w", x.cg.Path, members, err)
		}
	}
	x.collectExit(5 * time.Second)
	return nil
}

func isAlreadyStopped(err error) bool {
	return strings.Contains(err.Error(), "process already finished") || strings.Contains(err.Error(), "not running")
}

// collectExit records the engine's exit status if it arrives within wait.
func (x *execution) collectExit(wait time.Duration) {
	if x.result.ExitCode != nil || x.exitCh == nil {
		return
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case st := <-x.exitCh:
		x.recordExit(st)
		x.exitCh = nil
	case <-timer.C:
	}
}

// decideStatus sets the result's status from what ended the run.
func (x *execution) decideStatus(oom bool) {
	res := x.result
	switch {
	case res.Status == StatusInfraError:
	case x.killedFor == ReasonTimeout || x.killedFor == ReasonFirstOutput || x.killedFor == ReasonIdle:
		res.Status = StatusTimedOut
		res.Reasons = append(res.Reasons, x.killedFor)
	case x.killedFor == ReasonSignal:
		res.Status = StatusCancelled
		res.Reasons = append(res.Reasons, ReasonSignal)
	case oom && engineKilled(res.ExitCode):
		res.Status = StatusOOMKilled
		res.Reasons = append(res.Reasons, ReasonOOM)
	case oom:
		// The OOM killer ended some other process of the run (a tool, a
		// hook, a child) and the engine exited on its own: the status is
		// the engine's, the kill is a reason (docs/cli.md).
		res.Reasons = append(res.Reasons, ReasonOOM)
		x.statusFromExit()
	default:
		x.statusFromExit()
	}
	if res.ExitCode != nil && *res.ExitCode > 128 && *res.ExitCode < 128+65 {
		res.Signal = syscall.Signal(*res.ExitCode - 128).String()
	}
}

// engineKilled reports whether the engine's exit status is what a SIGKILL
// leaves: no status of its own, or 128+9 from hookbox-init (or a shell) for
// a child ended by the signal.
func engineKilled(code *int) bool {
	return code == nil || *code == 128+int(syscall.SIGKILL)
}

// statusFromExit sets the status from the engine's own exit code.
func (x *execution) statusFromExit() {
	res := x.result
	switch {
	case res.ExitCode == nil:
		res.Status = StatusInfraError
		if res.Error == "" {
			res.Error = "the engine's exit status is unknown"
		}
	case *res.ExitCode != 0:
		res.Status = StatusFailed
	default:
		res.Status = StatusCompleted
	}
}

// harvest copies the tmpfs run dir into the record and resolves the
// declared artifacts (docs/contracts.md §5).
func (x *execution) harvest() {
	dst := filepath.Join(x.dir, ArtifactDir)
	size := mounts.RunDirSize(x.r)
	report, err := mounts.Harvest(x.runDir, dst, mounts.HarvestCap{Bytes: size.Bytes, Entries: size.Inodes})
	if err != nil {
		x.result.Reasons = append(x.result.Reasons, ReasonHarvestPartial)
		x.result.Error = strings.TrimPrefix(x.result.Error+"; harvest: "+err.Error(), "; ")
	}
	x.result.Harvest = &report
	faultpoint.Reach(faultpoint.Harvest)
	if !report.Complete() {
		x.result.Reasons = append(x.result.Reasons, ReasonHarvestPartial)
	}
	x.harvestWorkspace(dst)
	defer x.judgeWorkspace()
	x.result.Artifacts = mounts.ResolveArtifacts(dst, x.r.Artifacts)
	if len(x.r.Artifacts) == 0 || x.result.Status != StatusCompleted {
		return
	}
	found := 0
	for _, a := range x.result.Artifacts {
		if a.Status == mounts.ArtifactFound {
			found++
		}
	}
	switch {
	case found == 0:
		x.result.Status = StatusCompletedEmpty
		x.result.Reasons = append(x.result.Reasons, ReasonNoArtifacts)
	case found < len(x.r.Artifacts):
		x.result.Reasons = append(x.result.Reasons, ReasonMissingArtifacts)
	}
}

func (x *execution) deleteContainer(ctx context.Context) error {
	c, err := x.opts.Backend.Client.LoadContainer(ctx, x.id)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := c.Delete(ctx); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	return nil
}

func (x *execution) deleteSnapshot(ctx context.Context) error {
	return removeSnapshot(ctx, x.opts.Backend.Client, x.id)
}

// writeConfigFiles writes the files under render.ConfigDir into dir, owned
// by the container user uid:gid (they are mounted read-only).
func writeConfigFiles(dir string, files []render.File, uid, gid int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		rel, ok := strings.CutPrefix(f.Path, render.ConfigDir+"/")
		if !ok {
			continue
		}
		path := filepath.Join(dir, filepath.FromSlash(rel))
		if !strings.HasPrefix(path, dir+string(filepath.Separator)) {
			return fmt.Errorf("generated file %s leaves %s", f.Path, render.ConfigDir)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(f.Content), 0o600); err != nil {
			return err
		}
		if err := os.Chown(path, uid, gid); err != nil {
			return err
		}
		if err := os.Chmod(path, os.FileMode(f.Mode)&0o777); err != nil {
			return err
		}
	}
	return nil
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// cgroupOOM reports whether the kernel's OOM killer acted in the run.
func cgroupOOM(cg interface{ OOMKilled() (bool, error) }) bool {
	oom, err := cg.OOMKilled()
	return err == nil && oom
}
