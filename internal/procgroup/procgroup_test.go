//go:build linux

package procgroup

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/host"
)

func gone(pid int) bool {
	err := syscall.Kill(pid, 0)
	if err == syscall.ESRCH {
		return true
	}
	st, err := host.ReadStat(pid)
	return err == nil && st.Exited()
}

func TestTimeoutKillsTheWholeGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child")
	cmd := exec.Command("/bin/sh", "-c", `sh -c 'trap "" TERM; echo $$ > `+pidFile+`; sleep 30' & sleep 30`)
	start := time.Now()
	stop, startErr, _ := Run(context.Background(), cmd, 300*time.Millisecond, 200*time.Millisecond)
	if startErr != nil || stop != TimedOut {
		t.Fatalf("stop %v startErr %v", stop, startErr)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("took %v", time.Since(start))
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	child, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	for deadline := time.Now().Add(2 * time.Second); !gone(child); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the TERM-ignoring child %d outlived the call", child)
		}
	}
}

func TestExitedLeaderLeftoversAreKilled(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child")
	cmd := exec.Command("/bin/sh", "-c", `sleep 30 & echo $! > `+pidFile)
	stop, startErr, waitErr := Run(context.Background(), cmd, 10*time.Second, 0)
	if stop != Exited || startErr != nil || waitErr != nil {
		t.Fatalf("stop %v %v %v", stop, startErr, waitErr)
	}
	data, _ := os.ReadFile(pidFile)
	child, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	for deadline := time.Now().Add(2 * time.Second); !gone(child); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("leftover %d outlived its leader", child)
		}
	}
}

func TestCancelAndStartFailure(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	if stop, _, _ := Run(ctx, exec.Command("/bin/sleep", "30"), time.Minute, 0); stop != Cancelled {
		t.Errorf("stop %v, want Cancelled", stop)
	}
	_, startErr, _ := Run(context.Background(), exec.Command("/nonexistent/program"), time.Second, 0)
	if startErr == nil || strings.Contains(StartFailure(startErr), "/nonexistent") {
		t.Errorf("start failure %v must be reported without the path: %q", startErr, StartFailure(startErr))
	}
}
