package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/internal/host"
)

const (
	// freezeTimeout bounds the wait for a freeze to complete. A task in
	// uninterruptible sleep (D state) can hold a freeze off indefinitely;
	// KillAll then goes on without one.
	freezeTimeout = time.Second
	// maxPasses bounds the list-and-signal passes of one KillAll. Frozen,
	// the second pass finds nothing new; unfrozen, a process forking
	// faster than we signal could keep the loop going forever.
	maxPasses = 32
)

// KillAll sends sig to every member of the run's cgroup (see Members) and
// returns how many processes it signalled. It does not wait for them to
// exit: use WaitEmpty.
//
// It freezes the cgroup first when it can (cgroup.freeze in the cgroup2
// directory, Linux ≥ 5.2, preferred even on a hybrid host; else the v1
// freezer hierarchy's freezer.state), lists the members, signals them,
// lists again until a pass finds no member it has not signalled, and
// thaws. The cgroup is always left thawed, even if it was frozen before:
// a frozen process cannot act on SIGTERM, and a v1-frozen one cannot die
// of SIGKILL.
//
// With sig == SIGKILL and a cgroup2 directory that has cgroup.kill (Linux
// ≥ 5.14) it first writes cgroup.kill, then signals by pid whatever is
// left in any hierarchy.
//
// What this guarantees:
//
//   - Pure v2, SIGKILL, Linux ≥ 5.14: the kernel kills every process in the
//     cgroup and below, including any forked while the kill runs. Nothing
//     escapes by forking.
//   - Frozen (v2 cgroup.freeze or v1 freezer reached FROZEN within one
//     second): the member list is complete, since a frozen process cannot
//     fork, and every listed process has sig pending before it runs user
//     code again. For SIGKILL nothing escapes. For other signals each
//     process decides what to do; a handler that forks after the thaw is
//     not signalled again.
//   - Hybrid: runc puts each process in the cgroup2 directory as well, so
//     the two guarantees above hold through Run.Unified. A process that is
//     in the run's v1 cgroups but was moved out of its cgroup2 one is
//     neither frozen nor reached by cgroup.kill: it is signalled by pid and
//     can escape by forking, exactly like the case below.
//   - No freezer, or the freeze did not complete: best effort. A process
//     forked between a listing and the end of the next pass is signalled
//     by a later pass, up to 32 passes; a child that exits and whose pid is
//     reissued to a new member within one call may be missed. Call KillAll
//     again after WaitEmpty times out.
//
// It never signals a process that is not a member: each pid is pinned with
// a pidfd and its /proc/<pid>/cgroup checked before the signal, so a pid
// that was reissued to an outside process after the listing is skipped.
// (Before Linux 5.3 there is no pidfd and the check-then-kill has a window.)
//
// The count is of processes signalled by pid plus those listed in the
// cgroup2 directory just before cgroup.kill; processes cgroup.kill catches
// while forking are killed but not counted. A process that exited before
// its signal is not counted. An error means some member may not have been
// signalled, or the cgroup could not be thawed; the count is still valid.
//
// KillAll calls on one Run are serialized. Two Runs opened on the same path
// are not: one's thaw can end the other's freeze early, which degrades the
// other call to best effort, never to a lost signal.
func (r *Run) KillAll(sig unix.Signal) (int, error) {
	r.killMu.Lock()
	defer r.killMu.Unlock()

	var errs []error
	thaw := r.freeze()
	seen := map[int]bool{}
	count := 0

	if sig == unix.SIGKILL && r.Unified != "" {
		n, err := r.cgroupKill(seen)
		count += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	for pass := 0; pass < maxPasses; pass++ {
		members, err := r.Members()
		if err != nil {
			errs = append(errs, err)
			break
		}
		fresh := 0
		for _, pid := range members {
			if seen[pid] {
				continue
			}
			seen[pid] = true
			fresh++
			ok, err := r.signal(pid, sig)
			if err != nil {
				errs = append(errs, err)
			}
			if ok {
				count++
			}
		}
		if fresh == 0 {
			break
		}
	}
	if err := thaw(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return count, fmt.Errorf("sending %s to cgroup %s: %w", unix.SignalName(sig), r.Path, errors.Join(errs...))
	}
	return count, nil
}

// cgroupKill writes cgroup.kill, marking the members it listed just before
// as seen. It does nothing when the kernel has no cgroup.kill.
func (r *Run) cgroupKill(seen map[int]bool) (int, error) {
	killFile := filepath.Join(r.Unified, "cgroup.kill")
	if _, err := os.Stat(killFile); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	pids, err := procsUnder(r.Unified)
	if err != nil {
		return 0, err
	}
	if err := writeControl(killFile, "1"); err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) {
			return 0, nil // removed meanwhile: nothing left to kill
		}
		return 0, err
	}
	n := 0
	for _, pid := range pids {
		if !seen[pid] {
			seen[pid] = true
			n++
		}
	}
	return n, nil
}

// signal sends sig to pid if pid is still a member. It reports whether the
// signal was sent; a process that is gone is not an error.
func (r *Run) signal(pid int, sig unix.Signal) (bool, error) {
	if pid == os.Getpid() {
		// hookbox itself is listed while a thread of it starts a helper
		// in the helper's v1 cgroups (Helper.Start); it is never a member.
		return false, nil
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	switch {
	case err == nil:
		defer unix.Close(pidfd)
	case errors.Is(err, unix.ESRCH):
		return false, nil
	case errors.Is(err, unix.ENOSYS):
		pidfd = -1 // before Linux 5.3: check, then kill by pid
	default:
		return false, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	// With the pidfd open, pid names the pinned process for as long as
	// that process is not reaped, and once it is reaped the pidfd signal
	// fails with ESRCH. So a membership read that the signal follows is
	// about the process the signal reaches.
	member, err := host.ReadProcCgroup(pid)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return false, nil
		}
		return false, fmt.Errorf("reading cgroups of pid %d: %w", pid, err)
	}
	if !member.Within(r.Path) {
		return false, nil // the pid now belongs to someone else
	}
	if pidfd >= 0 {
		err = unix.PidfdSendSignal(pidfd, sig, nil, 0)
	} else {
		err = unix.Kill(pid, sig)
	}
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ESRCH):
		return false, nil
	default:
		return false, fmt.Errorf("signalling pid %d: %w", pid, err)
	}
}

// freeze freezes the run's cgroup if it can and returns the function that
// thaws it again (a no-op when nothing was frozen). A freeze that fails or
// does not complete is not an error: KillAll then goes on unfrozen. Only
// one freezer is used: cgroup2's if it works, else the v1 freezer.
func (r *Run) freeze() (thaw func() error) {
	noop := func() error { return nil }
	if r.Unified != "" {
		f := filepath.Join(r.Unified, "cgroup.freeze")
		if _, err := os.Stat(f); err == nil && writeControl(f, "1") == nil {
			waitFor(func() bool {
				ev, err := readKeyed(filepath.Join(r.Unified, "cgroup.events"))
				return err != nil || ev["frozen"] == 1
			})
			return func() error { return thawFile(f, "0") }
		}
	}
	if r.freezerV1 != "" {
		f := filepath.Join(r.freezerV1, "freezer.state")
		if writeControl(f, "FROZEN") != nil {
			return noop
		}
		waitFor(func() bool {
			data, err := os.ReadFile(f)
			return err != nil || strings.TrimSpace(string(data)) == "FROZEN"
		})
		return func() error { return thawFile(f, "THAWED") }
	}
	return noop
}

func thawFile(f, value string) error {
	err := writeControl(f, value)
	if err == nil || errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) {
		return nil
	}
	return fmt.Errorf("thawing: %w", err)
}

// waitFor polls done with a growing interval for up to freezeTimeout.
func waitFor(done func() bool) bool {
	deadline := time.Now().Add(freezeTimeout)
	for d := 100 * time.Microsecond; ; d = min(2*d, 20*time.Millisecond) {
		if done() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(d)
	}
}

// writeControl writes a cgroup control file in one write(2), as the kernel
// expects.
func writeControl(p, value string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Destroy ends the cgroup: SIGKILL to every member (KillAll), a wait until
// none is left (WaitEmpty), again while members remain, then Remove; the
// loop of the package doc, bounded by ctx. An error names the members left
// when ctx ended, or why the directories could not be removed.
func (r *Run) Destroy(ctx context.Context) error {
	for {
		if empty, err := r.Empty(); err == nil && empty {
			break
		}
		_, _ = r.KillAll(unix.SIGKILL)
		waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := r.WaitEmpty(waitCtx, 10*time.Millisecond)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			members, _ := r.Members()
			return fmt.Errorf("cgroup %s still has members %v: %w", r.Path, members, ctx.Err())
		}
	}
	return r.Remove()
}
