//go:build linux

// Package procgroup runs a host-side helper program (a secret lookup, a
// notifier) bounded in time, and guarantees that nothing it started
// outlives the call.
//
// Where the backend gives helpers cgroups (launcher/cgroup.Helpers), the
// program starts in a transient cgroup of its own, and its end is the end
// of that cgroup: at the deadline or on cancellation every member gets
// SIGTERM and, after the grace, the cgroup is frozen, killed, emptied and
// removed — KillAll, WaitEmpty and Remove, as a run's teardown — and so it
// is when the program exits on its own, whatever it left running. A
// descendant that calls setsid() is still in the cgroup.
//
// Without a cgroup (rootless without a delegated subtree) the program runs
// in its own process group, which is signalled while the leader's pid —
// the group id — is still reserved; a descendant that calls setsid() leaves
// the group and is not covered. Result.Uncontained says so, and callers
// report it as degraded.
//
// In both cases the program is in a process group of its own and the
// leader is always reaped.
package procgroup

import (
	"context"
	"errors"
	"os/exec"
	"syscall"
	"time"
	"unsafe"

	"hookbox.dev/hookbox/launcher/cgroup"
)

// Stop says why Run stopped the program early.
type Stop int

const (
	// Exited: the program ended on its own.
	Exited Stop = iota
	// TimedOut: the deadline passed.
	TimedOut
	// Cancelled: ctx ended.
	Cancelled
)

// Degraded reason ids of a helper, suffixed with its role kind
// (":notify", ":lookup"), for result.json degraded.
const (
	// DegradedUncontained: the helper ran without a cgroup of its own,
	// bounded by its process group only.
	DegradedUncontained = "helper-cgroup-unavailable"
	// DegradedLeftover: the helper's cgroup could not be emptied and
	// removed in time; hookbox gc removes it once this hookbox is gone.
	DegradedLeftover = "helper-cleanup-incomplete"
)

// destroyTimeout bounds the end of a helper's cgroup. Only a process in
// uninterruptible sleep can take longer, and gc collects it later.
const destroyTimeout = 30 * time.Second

// Options of Run.
type Options struct {
	// Timeout is the program's deadline.
	Timeout time.Duration
	// Grace between SIGTERM and SIGKILL at the deadline or on
	// cancellation (0: SIGKILL at once).
	Grace time.Duration
	// Cgroups is where the program gets a cgroup of its own; the zero
	// value gives none.
	Cgroups cgroup.Helpers
	// RunID and Role name that cgroup (cgroup.HelperName).
	RunID, Role string
}

// Result is how the program ended.
type Result struct {
	// Cmd is the command that ran (or failed to start).
	Cmd  *exec.Cmd
	Stop Stop
	// StartErr is cmd.Start's error; WaitErr cmd.Wait's.
	StartErr, WaitErr error
	// Uncontained says why the program ran without a cgroup of its own;
	// "" when it had one (or never started).
	Uncontained string
	// Leftover is why its cgroup is still there, if it is.
	Leftover error
}

// Degraded are the result's degraded reason ids for a helper of kind
// (notify, lookup).
func (r Result) Degraded(kind string) []string {
	var out []string
	if r.Uncontained != "" {
		out = append(out, DegradedUncontained+":"+kind)
	}
	if r.Leftover != nil {
		out = append(out, DegradedLeftover+":"+kind)
	}
	return out
}

// Run starts the command newCmd returns (its SysProcAttr is replaced: a
// new process group, and the cgroup) and waits until the leader exits,
// the timeout passes or ctx ends. On a timeout or cancellation every
// process of the program gets SIGTERM and, after the grace, SIGKILL; in
// every case what remains is then killed and the leader reaped. newCmd is
// called again, at most once, when the program could not be started in its
// cgroup: nothing ran then, and it runs without one (Uncontained).
func Run(ctx context.Context, newCmd func() *exec.Cmd, opts Options) Result {
	var res Result
	cg, err := opts.Cgroups.New(opts.RunID, opts.Role)
	if err != nil {
		res.Uncontained = err.Error()
	}
	res.Cmd = newCmd()
	res.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if cg != nil {
		if err := cg.Start(res.Cmd); err != nil {
			_ = cg.Destroy(context.Background()) // nothing ran in it
			cg = nil
			res.Cmd = newCmd()
			res.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if res.StartErr = res.Cmd.Start(); res.StartErr == nil {
				res.Uncontained = "could not start in its cgroup: " + StartFailure(err)
			}
		}
	} else {
		res.StartErr = res.Cmd.Start()
	}
	if res.StartErr != nil {
		res.Uncontained = "" // nothing ran, contained or not
		return res
	}
	pid := res.Cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		waitExitedNoReap(pid)
		close(exited)
	}()
	timer := time.NewTimer(opts.Timeout)
	defer timer.Stop()
	select {
	case <-exited:
	case <-timer.C:
		res.Stop = TimedOut
	case <-ctx.Done():
		res.Stop = Cancelled
	}
	if res.Stop != Exited && opts.Grace > 0 {
		graceCtx, cancel := context.WithTimeout(context.Background(), opts.Grace)
		if cg != nil {
			// The grace ends once the cgroup is empty.
			_, _ = cg.Run.KillAll(syscall.SIGTERM)
			_ = cg.Run.WaitEmpty(graceCtx, 10*time.Millisecond)
		} else {
			// The leader is alive or an unreaped zombie: -pid is still its group.
			_ = syscall.Kill(-pid, syscall.SIGTERM)
			select {
			case <-exited:
			case <-graceCtx.Done():
			}
		}
		cancel()
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	if cg != nil {
		destroyCtx, cancel := context.WithTimeout(context.Background(), destroyTimeout)
		res.Leftover = cg.Destroy(destroyCtx)
		cancel()
	}
	<-exited
	res.WaitErr = res.Cmd.Wait()
	return res
}

// StartFailure names why Start failed with fixed texts only: the raw error
// repeats argv[0]'s full path, which is configuration a caller may not echo.
func StartFailure(err error) string {
	var errno syscall.Errno
	switch {
	case errors.Is(err, exec.ErrNotFound):
		return "executable file not found in $PATH"
	case errors.Is(err, exec.ErrDot):
		return "found relative to the current directory, which is refused"
	case errors.As(err, &errno):
		return errno.Error()
	}
	return "could not start"
}

const pPID = 1 // waitid's P_PID

// waitExitedNoReap blocks until pid has exited, leaving it a zombie
// (WNOWAIT) so that its pid, the group id, stays reserved until Wait.
func waitExitedNoReap(pid int) {
	var info [16]uint64 // siginfo_t, unused
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info)), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		if errno != syscall.EINTR {
			return
		}
	}
}
