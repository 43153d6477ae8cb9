package faultpoint

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/host"
)

// The helper "process" is this test binary run again with Env set: it
// reaches the points named by HOOKBOX_FAULTPOINT_TEST_PLAN.
func TestMain(m *testing.M) {
	switch os.Getenv("HOOKBOX_FAULTPOINT_TEST_PLAN") {
	case "":
		os.Exit(m.Run())
	case "reach":
		Reach(BeforeCreate) // not armed here
		os.Stdout.WriteString("passed before-create\n")
		Reach(Running)
		os.Stdout.WriteString("passed running\n")
		os.Exit(0)
	case "while":
		var calls atomic.Int32
		end := While(NewTask, func() bool { return calls.Add(1) >= 3 })
		time.Sleep(2 * time.Second) // the call in flight
		end()
		os.Stdout.WriteString("returned\n")
		os.Exit(0)
	case "while-returns-first":
		end := While(NewTask, func() bool { return false })
		time.Sleep(20 * time.Millisecond)
		end()
		os.Stdout.WriteString("returned\n")
		os.Exit(0)
	}
	os.Exit(3)
}

// helper runs the plan with point armed and returns once it has stopped
// itself (stopped: true) or exited.
func helper(t *testing.T, plan string, point Point) (stopped bool, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "HOOKBOX_FAULTPOINT_TEST_PLAN="+plan, Env+"="+string(point))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		select {
		case <-done:
			return false, out.String(), errOut.String()
		default:
		}
		if st, err := host.ReadStat(cmd.Process.Pid); err == nil && st.State == 'T' {
			cmd.Process.Kill()
			<-done
			return true, out.String(), errOut.String()
		}
	}
	cmd.Process.Kill()
	<-done
	t.Fatalf("the helper neither stopped nor exited within 10s:\n%s%s", out.String(), errOut.String())
	return false, "", ""
}

func TestReachStopsOnlyAtTheArmedPoint(t *testing.T) {
	stopped, stdout, stderr := helper(t, "reach", Running)
	if !stopped || stdout != "passed before-create\n" {
		t.Errorf("stopped %v, stdout %q: want stopped at running, after passing before-create", stopped, stdout)
	}
	if !strings.Contains(stderr, "test fault point running reached") {
		t.Errorf("stderr %q does not name the point", stderr)
	}
	if stopped, stdout, _ := helper(t, "reach", ""); stopped || stdout != "passed before-create\npassed running\n" {
		t.Errorf("unarmed: stopped %v, stdout %q; want no stop", stopped, stdout)
	}
}

func TestWhileStopsWhileTheCallIsInFlight(t *testing.T) {
	if stopped, stdout, _ := helper(t, "while", NewTask); !stopped || stdout != "" {
		t.Errorf("stopped %v, stdout %q: want stopped before the call returned", stopped, stdout)
	}
	if stopped, stdout, _ := helper(t, "while-returns-first", NewTask); stopped || stdout != "returned\n" {
		t.Errorf("a call that returns before the sign: stopped %v, stdout %q", stopped, stdout)
	}
	if stopped, stdout, _ := helper(t, "while", TaskDelete); stopped || stdout != "returned\n" {
		t.Errorf("another point armed: stopped %v, stdout %q", stopped, stdout)
	}
}

// Unarmed, a point is inert and While costs no goroutine.
func TestUnarmedIsInert(t *testing.T) {
	if armed != "" {
		t.Fatalf("%s=%s is set in the test's environment: unset it", Env, armed)
	}
	for _, p := range All {
		Reach(p)
		While(p, func() bool { t.Fatal("begun asked while unarmed"); return true })()
	}
	if n := testing.AllocsPerRun(100, func() { Reach(Running) }); n != 0 {
		t.Errorf("Reach allocates %v times", n)
	}
}
