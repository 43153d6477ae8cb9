package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/internal/faultpoint"
	"hookbox.dev/hookbox/mounts"
	"hookbox.dev/hookbox/render"
)

// daemonDeadlines bound the containerd calls of a run and its teardown,
// so that a daemon that died or hangs holds hookbox no longer than one of
// them past the grace period (docs/architecture.md "Teardown when
// containerd fails"). A variable only so that tests can shorten them.
var daemonDeadlines = struct {
	// step: one teardown step (delete the task, the container), its
	// retries included.
	step time.Duration
	// create: each step that creates (base image, image view, container,
	// task) or starts the task; runc create mounts the rootfs, slower
	// than a delete on a loaded host.
	create time.Duration
	// gc: the collection of abandoned runs before a run.
	gc time.Duration
}{step: 5 * time.Second, create: 30 * time.Second, gc: 15 * time.Second}

// killWait bounds the wait for the cgroup (or, without one, init) to
// empty after SIGKILL.
const killWait = 30 * time.Second

// stopAll ends every process of the run: SIGTERM to init (or, when init
// already exited, to whoever is left), a grace period that ends early once
// the cgroup is empty, then SIGKILL to every member, then a wait until the
// cgroup has no members. Escalation keys on cgroup membership, never on
// init alone (docs/contracts.md §2). Every signal goes through the kernel
// (init's pidfd, the cgroup), never through containerd, so a dead or hung
// daemon cannot keep the engine alive; only a kernel without pidfds falls
// back to containerd's kill, under a deadline.
func (x *execution) stopAll(ctx context.Context) error {
	var errs []error
	x.collectExit(0)
	if !x.initExited() {
		// An init that exits meanwhile is fine: membership decides below.
		if err := x.signalInit(ctx, unix.SIGTERM); err != nil {
			errs = append(errs, fmt.Errorf("SIGTERM init: %w", err))
		}
	} else if x.cg != nil {
		if empty, _ := x.cg.Empty(); !empty {
			x.cg.KillAll(unix.SIGTERM)
		}
	}
	faultpoint.Reach(faultpoint.Grace)
	// The grace period ends as soon as the cgroup is empty. A cgroup seen
	// empty stays so (only a member could fork into it), so the SIGKILL
	// step and its second membership walk are left out.
	emptied := false
	if x.cg != nil {
		graceCtx, cancel := context.WithTimeout(ctx, x.opts.Grace)
		emptied = x.cg.WaitEmpty(graceCtx, 10*time.Millisecond) == nil
		cancel()
	} else {
		x.waitInit(x.opts.Grace)
	}
	switch {
	case emptied:
	case x.cg != nil:
		if empty, _ := x.cg.Empty(); !empty {
			x.cg.KillAll(unix.SIGKILL)
		}
		waitCtx, cancel := context.WithTimeout(ctx, killWait)
		defer cancel()
		if err := x.cg.WaitEmpty(waitCtx, 20*time.Millisecond); err != nil {
			members, _ := x.cg.Members()
			errs = append(errs, fmt.Errorf("cgroup %s still has members %v: %w", x.cg.Path, members, err))
		}
	case x.init != nil:
		// No cgroup of its own: the container's pid namespace is the
		// boundary, and SIGKILL to its init ends every process in it.
		if _, err := x.init.Signal(unix.SIGKILL); err != nil {
			errs = append(errs, fmt.Errorf("SIGKILL init: %w", err))
		} else if !x.waitInit(killWait) {
			errs = append(errs, fmt.Errorf("init (pid %d) still runs %s after SIGKILL", x.init.PID, killWait))
		}
	default:
		// Neither a cgroup nor a pidfd: containerd's kill-all is what is left.
		err := x.daemonCall(ctx, daemonDeadlines.step, func(ctx context.Context) error {
			return x.task.Kill(ctx, unix.SIGKILL, containerd.WithKillAll)
		})
		if err != nil && !errdefs.IsNotFound(err) && !isAlreadyStopped(err) {
			errs = append(errs, fmt.Errorf("SIGKILL all: %w", err))
		}
	}
	x.collectExit(5 * time.Second)
	return errors.Join(errs...)
}

// exitReported reports whether containerd has reported the task's exit,
// waiting up to d (and ctx) for it.
func (x *execution) exitReported(ctx context.Context, d time.Duration) bool {
	if x.exitCh == nil {
		return x.shimExited
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case st := <-x.exitCh:
		x.exitCh = nil
		if err := st.Error(); err != nil {
			x.noteDaemonError(err)
			return false
		}
		x.recordExit(st)
		return true
	case <-timer.C:
	case <-ctx.Done():
	}
	return false
}

// signalInit sends sig to the task's init through its pidfd; without one
// (a kernel before pidfds) through containerd, under a deadline.
func (x *execution) signalInit(ctx context.Context, sig unix.Signal) error {
	if x.init != nil {
		_, err := x.init.Signal(sig)
		return err
	}
	err := x.daemonCall(ctx, daemonDeadlines.step, func(ctx context.Context) error { return x.task.Kill(ctx, sig) })
	if err != nil && !errdefs.IsNotFound(err) && !isAlreadyStopped(err) {
		return err
	}
	return nil
}

// initExited reports whether the task's init has exited, as the kernel
// says (its pidfd) or, without a pidfd, as containerd reported.
func (x *execution) initExited() bool {
	if x.init != nil {
		return x.init.Exited()
	}
	return x.result.ExitCode != nil
}

// initDone is closed once init has exited (nil without a pidfd).
func (x *execution) initDone() <-chan struct{} {
	if x.init == nil {
		return nil
	}
	return x.init.Done()
}

// waitInit waits up to d for init to exit and reports whether it did.
func (x *execution) waitInit(d time.Duration) bool {
	if x.init == nil {
		x.collectExit(d)
		return x.result.ExitCode != nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-x.init.Done():
		return true
	case <-timer.C:
		return false
	}
}

func isAlreadyStopped(err error) bool {
	return strings.Contains(err.Error(), "process already finished") || strings.Contains(err.Error(), "not running")
}

// collectExit records the engine's exit status if it arrives within wait:
// from the kernel (init's pidfd, once the shim reaped it) or from
// containerd, whichever answers first, so a dead daemon does not lose a
// status the kernel knows.
func (x *execution) collectExit(wait time.Duration) {
	if x.result.ExitCode != nil || !x.engineStarted {
		return
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		if x.init != nil {
			if code, ok := x.init.ExitCode(); ok {
				x.result.ExitCode = &code
				return
			}
		}
		var reaped <-chan time.Time
		exited := x.initDone()
		if x.init != nil && x.init.Exited() {
			// Exited; the kernel has the status once the shim reaps it.
			reaped, exited = time.After(10*time.Millisecond), nil
		}
		if x.exitCh == nil && exited == nil && reaped == nil {
			return // nothing left that could tell
		}
		select {
		case st := <-x.exitCh:
			x.exitCh = nil
			if err := st.Error(); err != nil {
				x.noteDaemonError(err)
				continue
			}
			x.recordExit(st)
			return
		case <-exited:
		case <-reaped:
		case <-timer.C:
			return
		}
	}
}

// daemonCall runs one containerd call under a deadline of its own. A call
// that finds containerd unreachable or not answering in time is recorded
// (noteDaemonError).
func (x *execution) daemonCall(ctx context.Context, timeout time.Duration, call func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return x.daemonFailed(call(ctx), timeout)
}

// daemonFailed notes a call's error that says containerd is unreachable
// and names the deadline it exceeded.
func (x *execution) daemonFailed(err error, timeout time.Duration) error {
	if err != nil && daemonUnreachable(err) {
		x.noteDaemonError(err)
		if errors.Is(err, context.DeadlineExceeded) || errdefs.IsDeadlineExceeded(err) {
			err = fmt.Errorf("containerd did not answer within %s: %w", timeout.Round(100*time.Millisecond), err)
		}
	}
	return err
}

// daemonStep is one containerd step of teardown that removes resource
// what (task, container): retried while the resource is briefly
// busy, within daemonDeadlines.step in all. Once containerd has been found
// unreachable the step is not tried; a step that fails leaves its resource
// in Result.Leftovers, for hookbox gc (docs/contracts.md 2.4).
func (x *execution) daemonStep(ctx context.Context, what string, step func(context.Context) error) error {
	err := x.daemonErr
	if err == nil {
		deadline := time.Now().Add(daemonDeadlines.step)
		for attempt := 0; ; attempt++ {
			err = x.daemonCall(ctx, time.Until(deadline), step)
			if err == nil {
				return nil
			}
			if x.daemonErr != nil || attempt == 4 || time.Until(deadline) < 100*time.Millisecond {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	} else {
		err = errors.New("not tried: containerd is unreachable")
	}
	x.result.Leftovers = append(x.result.Leftovers, what)
	return err
}

// daemonUnreachable: err says containerd is gone or did not answer in
// time, not that it refused the request.
func daemonUnreachable(err error) bool {
	if err == nil {
		return false
	}
	// A task's exit status carries the wait's gRPC error unconverted.
	for _, e := range []error{err, errgrpc.ToNative(err)} {
		if errdefs.IsUnavailable(e) || errdefs.IsDeadlineExceeded(e) || errors.Is(e, context.DeadlineExceeded) {
			return true
		}
	}
	return false
}

// noteDaemonError keeps the first error that showed containerd
// unreachable; teardown turns it into ReasonContainerdUnreachable once the
// harvest, which also adds reasons, is done.
func (x *execution) noteDaemonError(err error) {
	if x.daemonErr == nil && daemonUnreachable(err) {
		x.daemonErr = err
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

func (x *execution) deleteTask(ctx context.Context) error {
	// Once the kernel showed every process gone and containerd reported
	// the exit, the client's kill-and-wait before the delete (two more
	// calls to the shim) has nothing left to do.
	var opts []containerd.ProcessDeleteOpts
	if !x.stopped || !x.exitReported(ctx, time.Second) {
		opts = append(opts, containerd.WithProcessKill)
	}
	if _, err := x.task.Delete(ctx, opts...); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	x.taskDeleted = true
	return nil
}

func (x *execution) deleteContainer(ctx context.Context) error {
	if x.taskDeleted {
		// No task left: the client's load and its own checks for one
		// (three calls) would only find what teardown just did.
		if err := x.opts.Backend.Client.ContainerService().Delete(ctx, x.id); err != nil && !errdefs.IsNotFound(err) {
			return err
		}
		return nil
	}
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
