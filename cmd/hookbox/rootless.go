package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"hookbox.dev/hookbox/ebpf"
	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/launcher/cgroup"
	"hookbox.dev/hookbox/launcher/daemon"
	"hookbox.dev/hookbox/launcher/rootless"
	"hookbox.dev/hookbox/tracehelper"
)

// reasonRootless is the reason id of an unchecked verdict of a rootless run
// with no tracer helper to ask: tracer-unavailable:rootless.
const reasonRootless = "rootless"

// enterRootless provisions the rootless backend (finding or starting a
// rootless containerd under RootlessKit), connects to the tracer helper if
// traced and one listens, and re-executes this hookbox command inside
// RootlessKit's namespaces. It returns only on failure.
func enterRootless(ctx context.Context, address, stateDir string, traced bool, progress func(string)) error {
	if !rootlessUser() {
		return usageError{errors.New("--rootless: run hookbox as the non-root user whose rootless containerd it should use (as root, hookbox runs rootful)")}
	}
	opts := daemonOptions(true, stateDir, progress)
	endpoint, err := daemon.ResolveRootless(ctx, address, opts)
	if err != nil {
		return exitError{exitInfra, err.Error()}
	}
	rc := rootless.Context{Address: endpoint.Address, RuncRoot: endpoint.RuncRoot, FIFODir: endpoint.FIFODir,
		StateDir: stateDir}
	var inherit []*os.File
	if !traced {
		return exitError{exitInfra, rootless.Enter(endpoint, rc, os.Args[1:]).Error()}
	}
	// Dialled here, outside the namespaces: the helper authenticates this
	// connection by its peer credentials, which are the user's, and its
	// socket need not be visible inside RootlessKit's mount namespace.
	if f, why := dialTracerHelper(); f != nil {
		rc.TracerFD = int(f.Fd())
		inherit = append(inherit, f)
	} else {
		rc.TracerUnavailable = why
	}
	return exitError{exitInfra, rootless.Enter(endpoint, rc, os.Args[1:], inherit...).Error()}
}

// rootlessUser: this process is not root on the host (euid 0 inside a
// user namespace is not root there), so runs use the rootless backend.
func rootlessUser() bool { return !host.RealRoot() }

// dialTracerHelper connects to `hookbox tracer serve`, or says why not.
func dialTracerHelper() (*os.File, string) {
	path := tracehelper.SocketPath()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Sprintf("no tracer helper answers at %s (%v): run `sudo hookbox tracer serve` (or install contrib/systemd/hookbox-tracer.service) for a checked verdict", path, errors.Unwrap(err))
	}
	defer conn.Close()
	f, err := conn.File()
	if err != nil {
		return nil, fmt.Sprintf("tracer helper connection: %v", err)
	}
	return f, ""
}

// rootlessRunOptions fills the launcher options of a rootless hookbox
// re-executed inside the namespaces.
func rootlessRunOptions(rc *rootless.Context, opts *launcher.Options) {
	opts.RuncRoot, opts.FIFODir = rc.RuncRoot, rc.FIFODir
	opts.InheritCgroup = true
	if d, err := cgroup.FindDelegation(); err == nil {
		opts.Delegation = &d
	} else {
		opts.NoDelegation = err.Error()
	}
	if rc.TracerFD <= 0 {
		why := rc.TracerUnavailable
		opts.Tracer = func() (launcher.ExecTracer, error) {
			return nil, &launcher.UnavailableError{ID: reasonRootless, Detail: why}
		}
		return
	}
	// Inherited across exec on purpose; not to be inherited further (by a
	// notifier, say).
	syscall.CloseOnExec(rc.TracerFD)
	opts.Tracer = tracerThroughHelper(os.NewFile(uintptr(rc.TracerFD), "tracer-helper"), reasonRootless)
}

// tracerThroughHelper watches runs through a connection to the helper;
// reason is the reason id if the connection turns out unusable.
func tracerThroughHelper(conn *os.File, reason string) func() (launcher.ExecTracer, error) {
	return func() (launcher.ExecTracer, error) {
		c, err := tracehelper.FromFile(conn)
		if err != nil {
			return nil, &launcher.UnavailableError{ID: reason, Detail: "tracer helper connection: " + err.Error()}
		}
		return helperTracer{c}, nil
	}
}

// rootTracer: a root hookbox also uses the helper when one listens — one
// BPF load per host instead of one per hookbox process (README
// "Benchmark") — and loads the tracer itself otherwise.
func rootTracer() func() (launcher.ExecTracer, error) {
	conn, _ := dialTracerHelper()
	if conn == nil {
		return nil
	}
	return tracerThroughHelper(conn, "helper")
}

// helperTracer watches through the privileged helper: it is handed the
// cgroup directory itself, and proves ownership by it.
type helperTracer struct{ c *tracehelper.Client }

func (h helperTracer) Watch(dir string, _ uint64, policy ebpf.Policy) (launcher.ExecWatch, error) {
	w, err := h.c.Watch(dir, policy)
	if err != nil {
		return nil, err
	}
	return w, nil
}

func newRootlessCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rootless",
		Short: "Prepare a host for rootless hookbox (run as root)",
	}
	var username string
	setup := &cobra.Command{
		Use:   "setup --user USER [-- COMMAND...]",
		Short: "As root: delegate a cgroup2 subtree to USER, and optionally start COMMAND as USER inside it",
		Long: `Prepare this host for USER's rootless hookbox, once, as root: check
/etc/subuid and /etc/subgid, create USER's runtime directory
(/run/user/<uid>) if no login manager did, and create the cgroup2 subtree
/hookbox-rootless/<uid> (session and jobs), owned by USER, as systemd's
Delegate=yes does for user@.service.

Rootless runs get a cgroup of their own (and so a trace and, where
controllers reach the subtree, limits) only when hookbox and its rootless
containerd run inside a delegated subtree. On a systemd host, a login
session already is; elsewhere start the session in the prepared one:

  sudo hookbox rootless setup --user alice -- bash -l

With COMMAND, setup runs it as USER inside <subtree>/session and exits with
its exit code.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if username == "" {
				return usageError{errors.New("--user is required: the user whose rootless hookbox to prepare")}
			}
			s, err := rootless.Prepare(username)
			if err != nil {
				return exitError{exitInfra, err.Error()}
			}
			if len(args) == 0 {
				out := cmd.OutOrStdout()
				fmt.Fprintf(out, "delegated cgroup %s to %s (uid %d); sessions start in %s\n", s.Subtree, s.User.Username, s.UID, s.Session)
				fmt.Fprintf(out, "runtime directory %s\n", s.RuntimeDir)
				for _, n := range s.Notes {
					fmt.Fprintln(out, "note: "+n)
				}
				return nil
			}
			for _, n := range s.Notes {
				fmt.Fprintln(cmd.ErrOrStderr(), "hookbox: note: "+n)
			}
			c, done, err := s.Command(args)
			if err != nil {
				return exitError{exitInfra, err.Error()}
			}
			defer done()
			c.Stdin, c.Stdout, c.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
			err = c.Run()
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				return exitError{exit.ExitCode(), "command exited " + strconv.Itoa(exit.ExitCode())}
			}
			if err != nil {
				return exitError{exitInfra, err.Error()}
			}
			return nil
		},
	}
	setup.Flags().StringVar(&username, "user", "", "the non-root user to prepare")
	cmd.AddCommand(setup)
	return cmd
}
