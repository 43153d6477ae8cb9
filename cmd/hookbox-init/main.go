// Command hookbox-init is the container's PID 1: it runs the engine as its
// child, in a process group of its own, so that the signals hookbox sends
// the container reach the engine.
//
// A process that is PID 1 of a pid namespace gets no signal from inside the
// namespace, and none from outside but SIGKILL and SIGSTOP, unless it
// installed a handler: an engine run directly as PID 1 with SIGTERM at its
// default disposition never sees the SIGTERM of a timeout, so its grace
// period ends in SIGKILL and its Stop/SessionEnd hooks never run. Here the
// engine is an ordinary process and its default dispositions apply.
//
// Usage: hookbox-init ENGINE [ARG...]; the arguments are the engine's exact
// argv (argv[0] is the path executed). It
//
//   - reads the run's secret values from its stdin when its environment
//     names them (HOOKBOX_INIT_SECRETS, package internal/initsecrets:
//     hookbox keeps the values out of the OCI spec, which containerd
//     writes to disk), closes that stdin and gives the engine /dev/null
//     instead. Secrets it was told to expect and could not read, within
//     secretsTimeout, make it exit 127 without starting the engine;
//   - installs the run's seccomp program when its environment names one
//     (HOOKBOX_INIT_SECCOMP, package internal/initseccomp: hookbox compiled
//     the run's profile into it, and the OCI spec holds none for runc), on
//     every thread, as the last step before the engine; one it cannot
//     install makes it exit 127 without starting the engine;
//   - starts the engine with the inherited stdio, environment and working
//     directory (with the secrets' values in their entries' places and
//     HOOKBOX_INIT_SECRETS and HOOKBOX_INIT_SECCOMP removed), as the
//     leader of a new process group;
//   - forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to that
//     group;
//   - reaps every child it has: the engine, and the orphans the kernel
//     reparents to it (it is PID 1, and marks itself a child subreaper for
//     when it is not);
//   - exits when the engine exits, with the engine's exit code, or 128+N
//     when a signal N ended it. Processes still alive then are not waited
//     for: as PID 1, its exit makes the kernel kill the rest of the
//     namespace, and hookbox's teardown checks that the run's cgroup is
//     empty.
//
// It writes nothing on stdout (the engine's output must stay its own);
// errors go to stderr, prefixed "hookbox-init:". An engine that cannot be
// started makes it exit 127, as a shell does.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/internal/initseccomp"
	"hookbox.dev/hookbox/internal/initsecrets"
)

// forwarded are the signals passed on to the engine's process group.
var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// Exit codes of its own.
const (
	exitUsage       = 2
	exitCannotStart = 127
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(argv []string) int {
	if len(argv) == 0 {
		fail("usage: hookbox-init ENGINE [ARG...]")
		return exitUsage
	}
	// Orphans of the engine become its children (it is PID 1 in a
	// container; this covers running it anywhere else).
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fail("cannot become a child subreaper: %v", err)
	}
	// Subscribe before the engine exists, so no signal is lost between
	// its start and the forwarder's first read.
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, forwarded...)

	filter, environ := initseccomp.Expected(os.Environ())
	env, devnull, err := engineEnv(environ)
	if err != nil {
		fail("%v; the engine is not started", err)
		return exitCannotStart
	}
	// The last step before the engine: every thread of this process, and
	// every process it starts, runs under the filter from here on.
	if filter != "" {
		if err := initseccomp.Load(filter); err != nil {
			fail("%v; the engine is not started", err)
			return exitCannotStart
		}
	}
	stdin := uintptr(0)
	if devnull != nil {
		stdin = devnull.Fd()
	}
	path := argv[0]
	if lp, err := exec.LookPath(path); err == nil {
		path = lp
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{stdin, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if devnull != nil {
		devnull.Close() // the engine has its own; this keeps it open until then
	}
	if err != nil {
		fail("cannot start %s: %v", argv[0], err)
		return exitCannotStart
	}
	go forward(signals, pid)
	return reap(pid)
}

// secretsTimeout bounds the wait for the secrets on stdin. hookbox starts
// writing them when it creates the task, so they are there at once; but
// the shim keeps its own end of the stdin pipe open, so a hookbox that
// died before writing them all leaves no end of stream to wait for.
const secretsTimeout = 30 * time.Second

// engineEnv returns the engine's environment and, when it is not the
// init's own stdin, the engine's stdin: environ and nil when environ names
// no secret; else, with the secrets read from stdin (which is then
// closed), environ with their values in place and /dev/null.
func engineEnv(environ []string) ([]string, *os.File, error) {
	names, env, err := initsecrets.Expected(environ)
	if err != nil || len(names) == 0 {
		return env, nil, err
	}
	// Non-blocking, so that the runtime's poller can bound the read
	// (a pipe; a file or /dev/null ends by itself).
	if err := unix.SetNonblock(0, true); err != nil {
		return nil, nil, secretsError(names, err)
	}
	values, err := readSecrets(os.NewFile(0, "stdin"), names, secretsTimeout)
	if err != nil {
		return nil, nil, secretsError(names, err)
	}
	if env, err = initsecrets.Apply(env, values); err != nil {
		return nil, nil, secretsError(names, err)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, nil, fmt.Errorf("the engine's stdin: %w", err)
	}
	return env, devnull, nil
}

// readSecrets reads names' values from stdin within timeout, and closes
// it: the engine must find nothing of that channel.
func readSecrets(stdin *os.File, names []string, timeout time.Duration) (map[string]string, error) {
	defer stdin.Close()
	if err := stdin.SetReadDeadline(time.Now().Add(timeout)); err != nil && !errors.Is(err, os.ErrNoDeadline) {
		return nil, err
	}
	values, err := initsecrets.Read(stdin, names)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, fmt.Errorf("they did not arrive within %v (hookbox, which writes them, may have died)", timeout)
	}
	return values, err
}

func secretsError(names []string, err error) error {
	return fmt.Errorf("the values of %s were to come from hookbox on stdin and could not be read: %w", strings.Join(names, ", "), err)
}

// forward sends every signal received to the engine's process group
// (pgid = the engine's pid, it leads the group).
func forward(signals <-chan os.Signal, pgid int) {
	for sig := range signals {
		err := syscall.Kill(-pgid, sig.(syscall.Signal))
		if err != nil && !errors.Is(err, syscall.ESRCH) {
			fail("forwarding %v: %v", sig, err)
		}
	}
}

// reap waits for every child until the engine has exited, and returns the
// exit code that reports the engine's status.
func reap(engine int) int {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			// ECHILD: no child left, so the engine was reaped without
			// being seen, which cannot happen; report it rather than spin.
			fail("waiting for the engine: %v", err)
			return exitCannotStart
		case pid == engine:
			return exitCode(ws)
		}
	}
}

// exitCode maps a wait status the way a shell does: the exit code, or
// 128+N for a death by signal N.
func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "hookbox-init: "+format+"\n", args...)
}
