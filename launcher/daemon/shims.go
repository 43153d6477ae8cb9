package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/core/mount"

	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/launcher/shimfront"
)

// TaskStateDir is where containerd's runtime v2 keeps task bundles, under
// its state directory: <state>/io.containerd.runtime.v2.task/<namespace>/<id>.
const TaskStateDir = "io.containerd.runtime.v2.task"

// DefaultSystemState is containerd's default state directory, where the
// system containerd at SystemAddress keeps its task bundles.
const DefaultSystemState = "/run/containerd"

// Shim is a running containerd shim as procfs shows it. containerd starts
// one per task, or one per group of tasks (oci.AnnotationShimGroup), as
// `containerd-shim-runc-v2 -namespace NS -id ID -address ADDR`, in the
// bundle directory of the task it was started for.
type Shim struct {
	PID       int
	StartTime uint64 // with PID, its identity (host.ProcessAlive)
	Binary    string // the program it runs
	Namespace string
	ID        string // the task (container) id it was started for
	Address   string // the socket of the containerd that started it
	Bundle    string // its working directory, the task's bundle ("" if removed)
}

// ParseShimArgs reads a serving shim's command line; ok is false for any
// other program, a shim command run for an action (`start`, `delete`: the
// short-lived commands containerd runs to start or clean up a shim), or a
// shim whose namespace, id or address is missing.
func ParseShimArgs(args []string) (namespace, id, address string, ok bool) {
	c, ok := parseShimCommand(args)
	return c.namespace, c.id, c.address, ok && c.action == ""
}

// shimCommand is a containerd-shim command line (hookbox's front,
// shimfront.Binary, included).
type shimCommand struct{ namespace, id, address, action string }

func parseShimCommand(args []string) (shimCommand, bool) {
	if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
		return shimCommand{}, false
	}
	c, ok := shimfront.ParseArgs(args[1:])
	return shimCommand{c.Namespace, c.ID, c.Address, c.Action}, ok
}

// Shims lists the running containerd shims. A process that exits while
// it is read is left out.
func Shims() ([]Shim, error) {
	pids, err := host.Pids()
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	var out []Shim
	for _, pid := range pids {
		args, err := host.Cmdline(pid)
		if err != nil {
			continue
		}
		ns, id, addr, ok := ParseShimArgs(args)
		if !ok {
			continue
		}
		st, err := host.ReadStat(pid)
		if err != nil || st.Exited() {
			continue
		}
		s := Shim{PID: pid, StartTime: st.StartTime, Namespace: ns, ID: id, Address: addr, Binary: args[0]}
		if exe, err := host.Exe(pid); err == nil {
			s.Binary = exe
		}
		// A bundle containerd removed reads "<path> (deleted)": none.
		if cwd, err := host.Cwd(pid); err == nil && !strings.HasSuffix(cwd, " (deleted)") {
			s.Bundle = cwd
		}
		out = append(out, s)
	}
	return out, nil
}

// SameAddress reports whether two containerd addresses (socket paths or
// unix:// URLs) name the same socket.
func SameAddress(a, b string) bool {
	pa, errA := socketPath(a)
	pb, errB := socketPath(b)
	if errA != nil || errB != nil {
		return false
	}
	if pa == pb {
		return true
	}
	fa, errA := os.Stat(pa)
	fb, errB := os.Stat(pb)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// End ends a shim containerd no longer tracks, doing what containerd does
// for a shim it finds dead: the shim binary's own `delete` in the bundle
// (`runc delete --force`, which kills what is left of the task, and the
// rootfs unmounted), then SIGKILL to the shim, its socket removed and its
// bundle removed (RemoveBundle). A shim already gone, or a pid now used by
// another process, counts as ended; its bundle is still removed.
func (s Shim) End(ctx context.Context) error {
	// The pidfd pins the process: if it is the shim now, the signal below
	// reaches the shim and nothing else.
	var p *process
	if h, err := openProcess(s.PID); err == nil {
		if host.ProcessAlive(s.PID, s.StartTime) {
			p = h
			defer p.close()
		} else {
			h.close()
		}
	}
	var errs []error
	if p != nil {
		if err := s.deleteTask(ctx); err != nil {
			errs = append(errs, err)
		}
		if err := p.signal(syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("shim of task %s (pid %d): SIGKILL: %w", s.ID, s.PID, err)
		}
		if gone, err := p.exited(10 * time.Second); err != nil || !gone {
			return fmt.Errorf("shim of task %s (pid %d) did not exit within 10s of SIGKILL (%v): check ps -o stat,wchan -p %d", s.ID, s.PID, err, s.PID)
		}
		// A containerd still connected to the shim sees it die and runs
		// its own cleanup command: done once that has ended too.
		waitShimCommands(s.Namespace, s.ID, 10*time.Second)
	}
	if err := RemoveShimSocket(s.Address, s.Namespace, s.ID); err != nil {
		errs = append(errs, err)
	}
	if s.Bundle == "" || !isTaskBundle(s.Bundle, s.Namespace, s.ID) {
		// No bundle to remove: procfs did not show it, or the shim ran
		// somewhere that is not a task bundle of its own.
		return errors.Join(errs...)
	}
	removeBundleSocket(s.Bundle)
	if err := RemoveBundle(s.Bundle); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// shimQuiet is how long no shim command for a task must run before
// waitShimCommands is done: containerd reacts to a shim's death within
// milliseconds, when it notices the connection close.
const shimQuiet = 250 * time.Millisecond

// waitShimCommands waits, up to timeout, until no shim command for task
// id of namespace (a `delete` containerd runs for a shim it saw die) has
// run for shimQuiet.
func waitShimCommands(namespace, id string, timeout time.Duration) {
	quietSince := time.Now()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if shimCommandRuns(namespace, id) {
			quietSince = time.Now()
		} else if time.Since(quietSince) >= shimQuiet {
			return
		}
	}
}

func shimCommandRuns(namespace, id string) bool {
	pids, err := host.Pids()
	if err != nil {
		return false
	}
	for _, pid := range pids {
		args, err := host.Cmdline(pid)
		if err != nil {
			continue
		}
		if c, ok := parseShimCommand(args); ok && c.namespace == namespace && c.id == id {
			if st, err := host.ReadStat(pid); err == nil && !st.Exited() {
				return true
			}
		}
	}
	return false
}

// deleteTask runs the shim binary's own `delete` for s's task.
func (s Shim) deleteTask(ctx context.Context) error {
	return deleteBundleTask(ctx, s.Binary, s.Namespace, s.Address, s.ID, s.Bundle)
}

// EndGroupTask ends task id of a group s serves (GroupShim), whose
// bundle is bundle, as containerd would for a dead shim's task (the shim
// binary's `delete`: runc delete --force, the rootfs unmounted), and
// leaves s to the group's other tasks.
func (s Shim) EndGroupTask(ctx context.Context, id, bundle string) error {
	return deleteBundleTask(ctx, s.Binary, s.Namespace, s.Address, id, bundle)
}

// deleteBundleTask runs `<shim> -namespace NS -address ADDR -id ID -bundle
// B delete` in the bundle, as containerd does after a shim died; its
// output is only quoted in the error. binary is the shim's program, or
// its name to look up.
func deleteBundleTask(ctx context.Context, binary, namespace, address, id, bundle string) error {
	if _, err := os.Stat(filepath.Join(bundle, "config.json")); err != nil {
		return nil // no bundle (containerd never got that far, or it is gone)
	}
	bin := strings.TrimSuffix(binary, " (deleted)")
	if _, err := os.Stat(bin); err != nil {
		// Replaced on disk since the shim started: the installed one.
		if bin, err = exec.LookPath(filepath.Base(bin)); err != nil {
			return fmt.Errorf("shim of task %s: no %s to run its delete: %w", id, filepath.Base(binary), err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-namespace", namespace, "-address", address, "-id", id, "-bundle", bundle, "delete")
	cmd.Dir = bundle
	cmd.Env = daemonEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("shim of task %s: %s delete: %w: %s", id, filepath.Base(bin), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ShimSocket is the socket the shim of task id in namespace serves for the
// containerd at address (shimfront.Socket).
func ShimSocket(address, namespace, id string) string {
	p, err := socketPath(address)
	if err != nil {
		p = address
	}
	return shimfront.Socket(p, namespace, id)
}

// RemoveShimSocket removes the socket of a shim that is gone (one ended by
// SIGKILL cannot remove it); anything but a socket there is left alone.
func RemoveShimSocket(address, namespace, id string) error {
	path := ShimSocket(address, namespace, id)
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&fs.ModeSocket == 0 {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("shim socket %s: %w", path, err)
	}
	return nil
}

// removeBundleSocket removes the socket named in the bundle's address
// file, should it differ from ShimSocket's.
func removeBundleSocket(bundle string) {
	b, err := os.ReadFile(filepath.Join(bundle, "address"))
	if err != nil {
		return
	}
	path, err := socketPath(strings.TrimSpace(string(b)))
	if err != nil {
		return
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSocket != 0 {
		_ = os.Remove(path)
	}
}

// TaskBundle is the bundle directory of task id in namespace under a
// containerd state directory.
func TaskBundle(state, namespace, id string) string {
	return filepath.Join(state, TaskStateDir, namespace, id)
}

// TaskBundles lists the ids of the task bundles in namespace under a
// containerd state directory.
func TaskBundles(state, namespace string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(state, TaskStateDir, namespace))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// isTaskBundle: dir is <something>/io.containerd.runtime.v2.task/ns/id.
func isTaskBundle(dir, namespace, id string) bool {
	dir = filepath.Clean(dir)
	return filepath.Base(dir) == id && filepath.Base(filepath.Dir(dir)) == namespace &&
		filepath.Base(filepath.Dir(filepath.Dir(dir))) == TaskStateDir
}

// RemoveBundle removes a task bundle containerd no longer tracks, as
// containerd removes one: whatever is mounted in it (the task's rootfs)
// unmounted, its work directory (the target of its "work" link, under
// containerd's root) and the bundle itself removed. Missing is removed.
func RemoveBundle(bundle string) error {
	bundle = filepath.Clean(bundle)
	if _, err := os.Lstat(bundle); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	ns, id := filepath.Base(filepath.Dir(bundle)), filepath.Base(bundle)
	if !isTaskBundle(bundle, ns, id) {
		return fmt.Errorf("task bundle %s: not under a %s/<namespace>/<id> directory, refusing to remove it", bundle, TaskStateDir)
	}
	if err := mount.UnmountRecursive(bundle, 0); err != nil {
		return fmt.Errorf("task bundle %s: unmounting what is mounted in it: %w", bundle, err)
	}
	// RemoveAll crosses mount points: nothing may be mounted below.
	mounts, err := host.Mounts()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if m.MountPoint == bundle || strings.HasPrefix(m.MountPoint, bundle+"/") {
			return fmt.Errorf("task bundle %s: %s is still mounted: unmount it (umount -l %s) and run gc again", bundle, m.MountPoint, m.MountPoint)
		}
	}
	if work, err := os.Readlink(filepath.Join(bundle, "work")); err == nil && isTaskBundle(work, ns, id) {
		if err := os.RemoveAll(work); err != nil {
			return fmt.Errorf("task bundle %s: work directory: %w", bundle, err)
		}
	}
	if err := os.RemoveAll(bundle); err != nil {
		return fmt.Errorf("task bundle %s: %w", bundle, err)
	}
	return nil
}
