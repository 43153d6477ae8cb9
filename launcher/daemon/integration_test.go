package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/internal/testenv"
)

// Environment of the helper process TestManagedLifecycle starts: it starts
// the managed daemon for this layout, prints nothing on success and exits.
const (
	helperStateEnv   = "HOOKBOX_DAEMON_TEST_HELPER_STATE"
	helperRuntimeEnv = "HOOKBOX_DAEMON_TEST_HELPER_RUNTIME"
)

func TestMain(m *testing.M) {
	if state := os.Getenv(helperStateEnv); state != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := ManagedPaths(state, os.Getenv(helperRuntimeEnv)).Start(ctx)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestManagedLifecycle(t *testing.T) {
	testenv.Require(t, testenv.Root, testenv.Containerd)
	ctx := context.Background()
	m := testLayout(t)
	stateDir, runtimeDir := filepath.Dir(m.Dir), filepath.Dir(m.RunDir)
	t.Cleanup(func() { stopForCleanup(t, m) })

	// Leftovers of a crashed daemon: a pid file naming a live stranger
	// (this test) and a socket nobody listens on.
	if err := os.MkdirAll(m.RunDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.PIDFile, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(stale(t), m.Address); err != nil {
		t.Fatal(err)
	}

	// 1. A separate process starts the daemon and exits.
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperStateEnv+"="+stateDir, helperRuntimeEnv+"="+runtimeDir)
	began := time.Now()
	if out, err := helper.CombinedOutput(); err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	t.Logf("helper started the managed daemon and exited in %s", time.Since(began).Round(time.Millisecond))

	// 2. The daemon outlived it, detached, and answers.
	st, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Running || !st.Answering || st.Version == "" || st.PID == helper.Process.Pid || st.Address != m.Address {
		t.Fatalf("after the starter exited: %+v", st)
	}
	t.Logf("managed containerd %s, pid %d, up %s", st.Version, st.PID, st.Uptime)
	pid := st.PID
	ppid, pgrp, sid := procIDs(t, pid)
	if sid != pid || pgrp != pid {
		t.Errorf("daemon pid %d: session %d, process group %d: want its own", pid, sid, pgrp)
	}
	if ppid == helper.Process.Pid {
		t.Errorf("daemon's parent is still the exited starter %d", ppid)
	}
	if b, err := os.ReadFile(m.PIDFile); err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(pid) {
		t.Errorf("pid file = %q, %v; want %d", b, err, pid)
	}

	// 3. Its own root and state, apart from the system daemon's.
	if _, err := os.Stat(filepath.Join(m.Root, "io.containerd.metadata.v1.bolt", "meta.db")); err != nil {
		t.Errorf("metadata not under the managed root: %v", err)
	}
	if _, err := os.Stat(m.State); err != nil {
		t.Errorf("state dir: %v", err)
	}
	if sysPID, err := socketPeerPID(SystemAddress); err == nil && sysPID == pid {
		t.Errorf("the system socket is served by the managed daemon (pid %d)", pid)
	}

	// 4. Resolve, with the system address down, reuses it (auto-start
	// governs starting only).
	t.Setenv(EnvAddress, "")
	sysDown := filepath.Join(t.TempDir(), "containerd.sock")
	c, ep, err := Resolve(ctx, "", Options{
		StateDir:      stateDir,
		RuntimeDir:    runtimeDir,
		SystemAddress: sysDown,
	})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := c.Version(ctx); err != nil || v.Version != st.Version {
		t.Errorf("Version through the resolved client: %+v, %v", v, err)
	}
	c.Close()
	if ep.Source != SourceManaged || !ep.Managed || ep.Address != m.Address || ep.RuncRoot != m.RuncRoot {
		t.Errorf("endpoint = %+v", ep)
	}

	// 5. A second Start reuses the same process.
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := m.Status(ctx); err != nil || st.PID != pid {
		t.Errorf("after a second Start: %+v, %v; want pid %d", st, err, pid)
	}

	// 6. Stop ends it and cleans up; a second Stop is a no-op.
	began = time.Now()
	if err := m.Stop(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("Stop took %s", time.Since(began).Round(time.Millisecond))
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
		if st := procState(pid); st != "Z" {
			t.Errorf("pid %d still alive after Stop (state %s)", pid, st)
		}
	}
	for _, p := range []string{m.PIDFile, m.Address, m.TTRPCAddress} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Stop left %s", p)
		}
	}
	if st, err := m.Status(ctx); err != nil || st.Running || st.Answering {
		t.Errorf("after Stop: %+v, %v", st, err)
	}
	if err := m.Stop(ctx, time.Second); err != nil {
		t.Errorf("second Stop: %v", err)
	}

	// 7. Resolve with auto-start brings it back, and says so; concurrent
	// Resolves start one daemon between them.
	const racers = 3
	progress := make([][]string, racers)
	errs := make(chan error, racers)
	for i := range racers {
		go func() {
			c, ep, err := Resolve(ctx, "", Options{
				AutoStart:     true,
				StateDir:      stateDir,
				RuntimeDir:    runtimeDir,
				SystemAddress: sysDown,
				Progress:      func(s string) { progress[i] = append(progress[i], s) },
			})
			if err == nil {
				c.Close()
				if ep.Source != SourceManaged || ep.Address != m.Address {
					err = fmt.Errorf("auto-start: endpoint %+v", ep)
				}
			}
			errs <- err
		}()
	}
	for range racers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if n := countDaemons(m); n != 1 {
		t.Errorf("%d managed daemons run after %d concurrent Resolves", n, racers)
	}
	if len(progress[0]) != 2 || !strings.Contains(progress[0][1], "ready at "+m.Address) {
		t.Errorf("progress %q", progress[0])
	}
	t.Logf("progress: %q", progress[0])
	if err := m.Stop(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := countDaemons(m); n != 0 {
		t.Errorf("%d managed daemons run after Stop", n)
	}
}

// countDaemons counts the live processes running m's config.
func countDaemons(m Managed) int {
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && m.isOurs(pid) && procState(pid) != "Z" {
			n++
		}
	}
	return n
}

// A daemon that dies at once: Start says so, with the log and exit status.
func TestManagedStartFailureQuotesLog(t *testing.T) {
	testenv.Require(t, testenv.Root)
	m := testLayout(t)
	m.Binary = script(t, "echo 'containerd: failed to load config: boom' >&2\nexit 3\n")
	err := m.Start(context.Background())
	if err == nil {
		t.Fatal("Start succeeded with a daemon that exits")
	}
	for _, want := range []string{"exited before answering", "exit status 3", "last lines of " + m.Log, "boom"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if _, err := os.Stat(m.PIDFile); !errors.Is(err, os.ErrNotExist) {
		t.Error("failed Start left a pid file")
	}
}

// A daemon that never answers: Start gives up after StartTimeout and kills it.
func TestManagedStartTimeoutKills(t *testing.T) {
	testenv.Require(t, testenv.Root)
	m := testLayout(t)
	m.Binary = script(t, "echo starting\nexec sleep 60\n")
	m.StartTimeout = 500 * time.Millisecond
	began := time.Now()
	err := m.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "did not answer") || !strings.Contains(err.Error(), "starting") {
		t.Fatalf("Start = %v", err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("Start took %s with a 500ms timeout", d)
	}
	if st, err := m.Status(context.Background()); err != nil || st.Running {
		t.Errorf("after a timed-out Start: %+v, %v", st, err)
	}
}

// script writes an executable shell script named containerd.
func script(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "containerd")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// stopForCleanup ends the daemon of layout m whatever state the test left:
// Stop, and if that fails, SIGKILL the pid the pid file names if it is ours.
func stopForCleanup(t *testing.T, m Managed) {
	if err := m.Stop(context.Background(), 3*time.Second); err == nil {
		return
	} else {
		t.Errorf("cleanup: Stop: %v", err)
	}
	if p, err := m.find(); err == nil && p != nil {
		_ = p.signal(9)
		p.close()
	}
}

// procIDs reads ppid, process group and session of pid from /proc.
func procIDs(t *testing.T, pid int) (ppid, pgrp, sid int) {
	t.Helper()
	st, err := host.ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	return st.PPID, st.PGRP, st.Session
}

func procState(pid int) string {
	st, err := host.ReadStat(pid)
	if err != nil {
		return ""
	}
	return string(st.State)
}
