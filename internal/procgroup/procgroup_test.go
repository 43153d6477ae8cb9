//go:build linux

package procgroup

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// waitGone fails the test unless process pid (not a child of the test)
// exits within 2 s. A pidfd polls readable once its process has exited,
// zombie or reaped.
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return
	}
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v", pid, err)
	}
	defer unix.Close(fd)
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 2000)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			t.Fatalf("poll pidfd of %d: %v", pid, err)
		case n == 0:
			t.Fatalf("%s %d outlived the call", what, pid)
		}
		return
	}
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
	waitGone(t, child, "the TERM-ignoring child")
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
	waitGone(t, child, "the leftover of the exited leader")
}

func TestCancelAndStartFailure(t *testing.T) {
	// Cancelled once the program runs: it says so on a pipe.
	ctx, cancel := context.WithCancel(context.Background())
	started, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer started.Close()
	go func() {
		bufio.NewReader(started).ReadString('\n')
		cancel()
	}()
	cmd := exec.Command("/bin/sh", "-c", "echo started; exec /bin/sleep 30")
	cmd.Stdout = w
	stop, _, _ := Run(ctx, cmd, time.Minute, 0)
	w.Close()
	if stop != Cancelled {
		t.Errorf("stop %v, want Cancelled", stop)
	}
	_, startErr, _ := Run(context.Background(), exec.Command("/nonexistent/program"), time.Second, 0)
	if startErr == nil || strings.Contains(StartFailure(startErr), "/nonexistent") {
		t.Errorf("start failure %v must be reported without the path: %q", startErr, StartFailure(startErr))
	}
}
