package launcher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"hookbox.dev/hookbox/internal/host"
)

// hungContainerd serves gRPC on a unix socket and answers no call: each
// blocks until its caller gives up, as a stopped containerd's would.
func hungContainerd(t *testing.T) (*containerd.Client, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "containerd.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		<-stream.Context().Done()
		return stream.Context().Err()
	}))
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	c, err := containerd.New(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, sock
}

// shortDeadlines makes every containerd deadline d for the test.
func shortDeadlines(t *testing.T, d time.Duration) {
	saved := daemonDeadlines
	t.Cleanup(func() { daemonDeadlines = saved })
	daemonDeadlines.step, daemonDeadlines.create, daemonDeadlines.gc = d, d, d
}

// A containerd that stops answering after hookbox connected to it cannot
// hold a run: the gc before it, preparing it and its teardown each give up
// at their deadline, and the result says containerd failed and what it may
// still hold.
func TestRunWithHungContainerd(t *testing.T) {
	shortDeadlines(t, 200*time.Millisecond)
	client, sock := hungContainerd(t)
	backend := &Backend{Client: client, Address: sock, Cgroups: runtimeCgroups{},
		Tracer: func() (ExecTracer, error) { return nil, errors.New("no tracer in this test") }}
	done := make(chan *Result, 1)
	began := time.Now()
	go func() {
		res, err := Run(context.Background(), fixtureRender(), Options{Backend: backend, StateDir: t.TempDir(), Grace: time.Second})
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		done <- res
	}()
	var res *Result
	select {
	case res = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Run still waits on a containerd that answers nothing after 20 s")
	}
	if res == nil {
		t.FailNow()
	}
	took := time.Since(began)
	t.Logf("Run returned after %s: %s %v leftovers %v: %s", took.Round(time.Millisecond), res.Status, res.Reasons, res.Leftovers, res.Error)
	if took > 5*time.Second {
		t.Errorf("Run took %s with 200 ms deadlines", took)
	}
	if res.Status != StatusInfraError || !slices.Contains(res.Reasons, ReasonContainerdUnreachable) || !slices.Contains(res.Reasons, ReasonTeardownIncomplete) {
		t.Errorf("status %s reasons %v: want infra_error with %s and %s", res.Status, res.Reasons, ReasonContainerdUnreachable, ReasonTeardownIncomplete)
	}
	if !slices.Contains(res.Leftovers, "container") {
		t.Errorf("leftovers %v: the container containerd may hold must be left for gc", res.Leftovers)
	}
	for _, want := range []string{"did not answer within", sock} {
		if !strings.Contains(res.Error, want) {
			t.Errorf("error lacks %q: %s", want, res.Error)
		}
	}
}

// One teardown step gives up at its deadline however its call hangs; once
// containerd is known unreachable the next steps are not tried, and both
// resources are left for gc.
func TestDaemonStepGivesUpAndSkips(t *testing.T) {
	shortDeadlines(t, 300*time.Millisecond)
	x := &execution{result: &Result{}}
	began := time.Now()
	err := x.daemonStep(context.Background(), "task", func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	if took := time.Since(began); took > time.Second {
		t.Errorf("a hung step took %s with a 300 ms deadline", took)
	}
	if err == nil || x.daemonErr == nil {
		t.Fatalf("err %v, daemonErr %v: a step past its deadline must fail and mark containerd unreachable", err, x.daemonErr)
	}
	called := false
	err = x.daemonStep(context.Background(), "container", func(context.Context) error { called = true; return nil })
	if called || err == nil {
		t.Errorf("the next step ran (%v) or succeeded (%v) with containerd unreachable", called, err)
	}
	if !slices.Equal(x.result.Leftovers, []string{"task", "container"}) {
		t.Errorf("leftovers %v", x.result.Leftovers)
	}

	// A busy resource is retried; a refusal is not containerd failing.
	y := &execution{result: &Result{}}
	attempts := 0
	err = y.daemonStep(context.Background(), "container", func(context.Context) error {
		attempts++
		if attempts < 3 {
			return fmt.Errorf("still in use: %w", errdefs.ErrFailedPrecondition)
		}
		return nil
	})
	if err != nil || attempts != 3 || y.daemonErr != nil || len(y.result.Leftovers) != 0 {
		t.Errorf("busy twice then removed: err %v, %d attempts, daemonErr %v, leftovers %v", err, attempts, y.daemonErr, y.result.Leftovers)
	}
}

func TestDaemonUnreachable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.Unavailable, "error reading from server: EOF"), true}, // a task's wait when containerd died
		{fmt.Errorf("delete: %w", errdefs.ErrUnavailable), true},
		{status.Error(codes.DeadlineExceeded, "context deadline exceeded"), true},
		{fmt.Errorf("call: %w", context.DeadlineExceeded), true},
		{status.Error(codes.NotFound, "no such task"), false},
		{fmt.Errorf("delete: %w", errdefs.ErrFailedPrecondition), false},
		{context.Canceled, false},
		{nil, false},
	} {
		if got := daemonUnreachable(tc.err); got != tc.want {
			t.Errorf("daemonUnreachable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// A Start whose reply hangs cannot hold a run past its timeout: once the
// deadline passes, an init that already exec'd counts as the running
// engine (wait's timeout then ends it), while one that did not exec
// still waits for containerd's answer. A cancellation is the same.
func TestAwaitStartDoesNotOutwaitTheDeadline(t *testing.T) {
	self, err := host.Exe(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	hung := make(chan error) // containerd never answers
	newExecution := func(initExe string, ctx context.Context) *execution {
		return &execution{ctx: ctx, initPID: os.Getpid(), initExe: initExe, deadline: time.Now().Add(50 * time.Millisecond)}
	}

	// The init exec'd something other than runc's binary: the engine runs.
	x := newExecution("/runc-init-before-start", context.Background())
	running, err := x.awaitStart(hung)
	if !running || err != nil {
		t.Fatalf("engine running, Start unanswered past the deadline: running %v, err %v; want running", running, err)
	}
	if early := time.Until(x.deadline); early > 0 {
		t.Errorf("gave up on Start %s before the deadline", early)
	}

	// The init still is runc's: only containerd's answer ends the wait.
	answer := make(chan error, 1)
	x = newExecution(self, context.Background())
	time.AfterFunc(200*time.Millisecond, func() { answer <- errors.New("start failed") })
	running, err = x.awaitStart(answer)
	if running || err == nil || err.Error() != "start failed" {
		t.Fatalf("init not exec'd: running %v, err %v; want containerd's answer", running, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	x = newExecution("/runc-init-before-start", ctx)
	x.deadline = time.Now().Add(time.Hour)
	time.AfterFunc(20*time.Millisecond, cancel)
	if running, err = x.awaitStart(hung); !running || err != nil {
		t.Fatalf("cancelled with the engine running: running %v, err %v; want running", running, err)
	}
}
