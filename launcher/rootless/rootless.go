// Package rootless runs hookbox for a non-root user: it finds (or starts)
// a rootless containerd under RootlessKit, and re-executes hookbox inside
// RootlessKit's user and mount namespaces (as nerdctl does with nsenter),
// where the tmpfs run dir can be mounted and the daemon's mounts are
// visible. It also prepares, as root, the cgroup2 subtree a host without
// systemd delegation needs (Setup).
//
// A Go program cannot join a user namespace itself (setns(CLONE_NEWUSER)
// needs a single-threaded process), hence the re-exec through nsenter. The
// outer process hands the inner one a Context in the environment; nothing
// in it is secret.
package rootless

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/launcher/daemon"
)

// EnvContext carries the Context from the outer hookbox to the inner one.
const EnvContext = "HOOKBOX_ROOTLESS_CONTEXT"

// Context is what the hookbox re-executed inside the namespaces knows
// about its backend.
type Context struct {
	Address  string `json:"address"`
	RuncRoot string `json:"runc_root,omitempty"`
	FIFODir  string `json:"fifo_dir,omitempty"`
	// StateDir (run records) and CacheDir (the runfiles store) are the
	// user's (chosen outside, where the user is who hookbox's defaults
	// expect).
	StateDir string `json:"state_dir"`
	CacheDir string `json:"cache_dir,omitempty"`
	// TracerFD is an inherited connection to the tracer helper, or 0 with
	// TracerUnavailable saying why there is none.
	TracerFD          int    `json:"tracer_fd,omitempty"`
	TracerUnavailable string `json:"tracer_unavailable,omitempty"`
}

// Inner returns the Context when this process is a rootless hookbox
// re-executed inside RootlessKit's namespaces.
func Inner() (*Context, bool) {
	v := os.Getenv(EnvContext)
	if v == "" || host.InitialUserNS() {
		return nil, false
	}
	var c Context
	if err := json.Unmarshal([]byte(v), &c); err != nil || c.Address == "" {
		return nil, false
	}
	return &c, true
}

// Enter replaces this process with hookbox re-executed by nsenter in the
// user and mount namespaces of endpoint's RootlessKit child, with args
// (os.Args[1:] as given) and the Context in the environment. The working
// directory is kept, and so are the files in inherit, at their descriptor
// numbers (the Context names them). It returns only on failure.
func Enter(endpoint daemon.Endpoint, ctx Context, args []string, inherit ...*os.File) error {
	if endpoint.ChildPID <= 0 {
		return errors.New("rootless: no RootlessKit child pid")
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return fmt.Errorf("rootless: nsenter not found (apt-get install util-linux): %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("rootless: find the hookbox binary: %w", err)
	}
	wd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("rootless: working directory: %w", err)
	}
	ctxJSON, err := json.Marshal(ctx)
	if err != nil {
		return err
	}
	for _, f := range inherit {
		if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), syscall.F_SETFD, 0); e != 0 {
			return fmt.Errorf("rootless: pass fd %d: %w", f.Fd(), e)
		}
	}
	argv := append([]string{"nsenter", "-U", "-m", "--preserve-credentials",
		"-t", strconv.Itoa(endpoint.ChildPID), "--wd=" + wd, "--", self}, args...)
	env := append(os.Environ(), EnvContext+"="+string(ctxJSON))
	return syscall.Exec(nsenter, argv, env)
}
