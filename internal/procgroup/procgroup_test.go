//go:build linux

package procgroup

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/testenv"
)

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
	testenv.WaitExited(t, child, 2*time.Second)
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
	testenv.WaitExited(t, child, 2*time.Second)
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
