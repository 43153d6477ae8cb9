package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/internal/host"
)

// Helper is the transient cgroup of one host-side helper program. Make it
// with Helpers.New, start the program with Start, and end it with Destroy,
// which kills whatever is left and removes the cgroup. Run is the cgroup as
// KillAll, WaitEmpty and Members see it.
type Helper struct {
	Run *Run
	// fd is the O_PATH descriptor of the cgroup2 directory, for
	// CLONE_INTO_CGROUP; -1 without cgroup2.
	fd int
	// tasks are the v1 directories the starting thread joins, so that the
	// program it forks starts in them.
	tasks []string
}

// New makes the cgroup Parent/HelperName(runID, role, this process) in
// every hierarchy helperDirs plans, with Limits where the controllers are,
// and opens it. It fails with ErrNotSupported when h has no Parent; any
// other failure leaves no directory behind.
func (h Helpers) New(runID, role string) (*Helper, error) {
	if h.Parent == "" {
		why := h.Unavailable
		if why == "" {
			why = "no cgroup parent for host-side helpers"
		}
		return nil, fmt.Errorf("%s: %w", why, ErrNotSupported)
	}
	start, err := host.StartTime(os.Getpid())
	if err != nil {
		return nil, err
	}
	name, err := HelperName(runID, role, os.Getpid(), start)
	if err != nil {
		return nil, err
	}
	p := path.Join(h.Parent, name)
	if err := checkPath(p); err != nil {
		return nil, err
	}
	cgs, err := host.HostCgroups()
	if err != nil {
		return nil, err
	}
	dirs := helperDirs(cgs, p, h.UnifiedOnly)
	if len(dirs) == 0 {
		return nil, fmt.Errorf("no mounted cgroup hierarchy shows %s (layout %s): %w", p, cgs.Mode, ErrNotSupported)
	}
	c := &Helper{fd: -1}
	var made []string
	fail := func(err error) (*Helper, error) {
		if c.fd >= 0 {
			unix.Close(c.fd)
		}
		for _, d := range made {
			_ = syscall.Rmdir(d)
		}
		return nil, fmt.Errorf("helper cgroup %s: %w", p, err)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Dir(d.dir), 0o755); err != nil {
			return fail(err)
		}
		var files [][2]string
		if d.unified {
			// A cgroup2 child has the controllers its parents enabled for
			// their children: enable them in the two levels hookbox owns
			// (/hookbox and /hookbox/helpers, or jobs and jobs/helpers).
			for _, q := range []string{path.Dir(h.Parent), h.Parent} {
				if q != "/" {
					enableControllers(cgroupDirIn(d.dir, p, q), wantedControllers(h.Limits))
				}
			}
		}
		if err := os.Mkdir(d.dir, 0o755); err != nil {
			return fail(err)
		}
		made = append(made, d.dir)
		if d.unified {
			ctrl, _ := host.ReadCgroupControllers(d.dir)
			files, _ = limitFiles(h.Limits, ctrl)
		} else {
			_, err := os.Stat(filepath.Join(d.dir, "memory.memsw.limit_in_bytes"))
			files = v1LimitFiles(h.Limits, d.controllers, err == nil)
			c.tasks = append(c.tasks, d.dir)
		}
		for _, f := range files {
			err := writeControl(filepath.Join(d.dir, f[0]), f[1])
			// A file the kernel does not have (memory.swap.max without swap
			// accounting) is a limit this host cannot set.
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fail(fmt.Errorf("limit %s=%s: %w", f[0], f[1], err))
			}
		}
		if d.unified {
			fd, err := unix.Open(d.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				return fail(err)
			}
			c.fd = fd
		}
	}
	r, err := Open(p)
	if err != nil {
		return fail(err)
	}
	c.Run = r
	return c, nil
}

// cgroupDirIn is the directory of cgroup q in the hierarchy where cgroup p
// is at dir (q an ancestor of p).
func cgroupDirIn(dir, p, q string) string {
	return strings.TrimSuffix(dir, strings.TrimPrefix(p, q))
}

// enableControllers enables in the cgroup2 directory dir, which holds no
// process, those of want that its cgroup.controllers offers. Best effort:
// a controller that is not enabled leaves its limit unset.
func enableControllers(dir string, want []string) {
	avail, _ := host.ReadCgroupControllers(dir)
	var enable []string
	for _, c := range want {
		if slices.Contains(avail, c) {
			enable = append(enable, "+"+c)
		}
	}
	if len(enable) > 0 {
		_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0)
	}
}

// Start starts cmd in the helper's cgroup, so that the program's first
// instruction already runs there and nothing it forks is ever outside:
//
//   - cgroup2: clone3 with CLONE_INTO_CGROUP (SysProcAttr.UseCgroupFD,
//     Linux ≥ 5.7) places the child in the cgroup2 directory as it is
//     created;
//   - v1 hierarchies (hybrid, v1-only): a child starts in the v1 cgroups of
//     the thread that forks it, so cmd is started from a locked thread that
//     first joins each v1 directory (its tid into tasks). That thread is
//     never unlocked: it exits with its goroutine instead of serving the
//     rest of hookbox from the helper's cgroups.
//
// cmd.SysProcAttr is kept (a process group, say) and gains the cgroup fd.
// A failed Start ran nothing: the caller may Destroy and start without it.
func (c *Helper) Start(cmd *exec.Cmd) error {
	if c.fd >= 0 {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, c.fd
	}
	if len(c.tasks) == 0 {
		return cmd.Start()
	}
	var err error
	onSpareThread(func() {
		tid := strconv.Itoa(unix.Gettid())
		for _, d := range c.tasks {
			if err = writeControl(filepath.Join(d, "tasks"), tid); err != nil {
				err = fmt.Errorf("joining helper cgroup %s: %w", d, err)
				return
			}
		}
		err = cmd.Start()
	})
	return err
}

// onSpareThread runs fn on a locked OS thread that ends when fn returns.
// That cannot be the main thread, whose tid is hookbox's pid: Go keeps the
// main thread when its goroutine ends locked, and in a helper's cgroup it
// would make hookbox a member. So while a goroutine holds the main thread,
// another one runs fn.
func onSpareThread(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked, but on the main thread
		if unix.Gettid() == unix.Getpid() {
			defer runtime.UnlockOSThread()
			onSpareThread(fn)
			return
		}
		fn()
	}()
	<-done
}

// Destroy kills everything left in the helper's cgroup and removes it
// (Run.Destroy), bounded by ctx.
func (c *Helper) Destroy(ctx context.Context) error {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
	return c.Run.Destroy(ctx)
}

// LeftHelper is a helper cgroup whose hookbox is gone.
type LeftHelper struct {
	Path  string // the cgroup path
	Owner HelperOwner
}

// Abandoned lists the helper cgroups under h.Parent, in any hierarchy,
// whose owner (by pid and start time) is no longer running: what a killed
// hookbox left. Names hookbox did not make are ignored.
func (h Helpers) Abandoned() ([]LeftHelper, error) {
	if h.Parent == "" {
		return nil, nil
	}
	cgs, err := host.HostCgroups()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []LeftHelper
	for _, d := range helperDirs(cgs, h.Parent, h.UnifiedOnly) {
		entries, err := os.ReadDir(d.dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("listing helper cgroups in %s: %w", d.dir, err)
		}
		for _, e := range entries {
			o, ok := ParseHelperName(e.Name())
			if !e.IsDir() || !ok || seen[e.Name()] || host.ProcessAlive(o.PID, o.Start) {
				continue
			}
			seen[e.Name()] = true
			out = append(out, LeftHelper{Path: path.Join(h.Parent, e.Name()), Owner: o})
		}
	}
	return out, nil
}

// helperDir is one directory of a helper's cgroup.
type helperDir struct {
	dir         string   // the helper's directory in this hierarchy
	unified     bool     // cgroup2
	controllers []string // v1: the hierarchy's controllers
}

// helperDirs plans where cgroup p is made in the layout cgs: the cgroup2
// hierarchy when there is one, and (unless unifiedOnly) every v1 hierarchy
// carrying a controller of v1Helper, each once. Hierarchies that do not
// show p are left out.
func helperDirs(cgs host.Cgroups, p string, unifiedOnly bool) []helperDir {
	var out []helperDir
	for _, h := range cgs.Hierarchies {
		dir := h.DirFor(p)
		if dir == "" {
			continue
		}
		switch {
		case h.Unified:
			out = append(out, helperDir{dir: dir, unified: true})
		case unifiedOnly:
		default:
			for _, c := range v1Helper {
				if h.Has(c) {
					out = append(out, helperDir{dir: dir, controllers: h.Controllers})
					break
				}
			}
		}
	}
	return out
}
