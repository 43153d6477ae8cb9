package cgroup

import (
	"bufio"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// kernelHasExitInfo: PIDFD_INFO_EXIT (Linux 6.15) gives a pidfd's holder
// the exit status of a process it is not the parent of.
func kernelHasExitInfo(t *testing.T) bool {
	t.Helper()
	cmd := exec.Command("/bin/true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p, err := OpenProcess(cmd.Process.Pid, 0)
	cmd.Wait()
	if err != nil {
		return false // exited before it was opened: ask again
	}
	defer p.Close()
	_, ok := p.ExitCode()
	return ok
}

func waitDone(t *testing.T, p *Process, limit time.Duration) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(limit):
		t.Fatalf("Done not closed %s after pid %d exited", limit, p.PID)
	}
}

// A process the caller did not start (a shell's child): its exit is seen
// through Done and, once its parent reaped it, its status through
// ExitCode, without being its parent.
func TestProcessNotAChild(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "(sleep 0.3; exit 7) & echo $!; wait")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	p, err := OpenProcess(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.StartTime == 0 || p.Exited() {
		t.Fatalf("open: start time %d, exited %v", p.StartTime, p.Exited())
	}
	if _, ok := p.ExitCode(); ok {
		t.Fatal("ExitCode answered for a process that runs")
	}
	waitDone(t, p, 5*time.Second)
	if !p.Exited() {
		t.Error("Exited is false once Done is closed")
	}
	if !kernelHasExitInfo(t) {
		t.Log("this kernel has no PIDFD_INFO_EXIT: exit codes come from the parent only")
		return
	}
	// The shell reaps it right after it exits.
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, ok := p.ExitCode()
		if ok {
			if code != 7 {
				t.Errorf("ExitCode = %d, want 7", code)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no exit code 5 s after the shell reaped its child")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Signal reaches the pinned process; a signal by signal number shows as
// 128+N; a second signal after its exit is no error and sends nothing.
func TestProcessSignal(t *testing.T) {
	cmd := exec.Command("/bin/sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p, err := OpenProcess(cmd.Process.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if sent, err := p.Signal(unix.SIGTERM); !sent || err != nil {
		t.Fatalf("Signal(SIGTERM) = %v, %v", sent, err)
	}
	waitDone(t, p, 5*time.Second)
	cmd.Wait()
	if sent, err := p.Signal(unix.SIGKILL); sent || err != nil {
		t.Errorf("Signal after exit = %v, %v; want not sent, no error", sent, err)
	}
	if kernelHasExitInfo(t) {
		if code, ok := p.ExitCode(); !ok || code != 128+int(unix.SIGTERM) {
			t.Errorf("ExitCode = %d, %v; want %d", code, ok, 128+int(unix.SIGTERM))
		}
	}
}

// The recorded start time is the identity: a pid whose start time differs
// is not the recorded process, and an exited one is gone.
func TestOpenProcessChecksIdentity(t *testing.T) {
	cmd := exec.Command("/bin/sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	p, err := OpenProcess(cmd.Process.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	start := p.StartTime
	p.Close()
	if _, err := OpenProcess(cmd.Process.Pid, start+1); !errors.Is(err, ErrProcessGone) {
		t.Errorf("another start time: %v, want ErrProcessGone", err)
	}
	again, err := OpenProcess(cmd.Process.Pid, start)
	if err != nil {
		t.Fatalf("the recorded start time: %v", err)
	}
	again.Close()
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := OpenProcess(cmd.Process.Pid, start); !errors.Is(err, ErrProcessGone) {
		t.Errorf("after exit: %v, want ErrProcessGone", err)
	}
}

// Close ends the watcher without claiming an exit.
func TestProcessCloseIsNotExit(t *testing.T) {
	cmd := exec.Command("/bin/sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	p, err := OpenProcess(cmd.Process.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	select {
	case <-p.Done():
		t.Fatal("Done closed by Close while the process runs")
	case <-time.After(100 * time.Millisecond):
	}
}
