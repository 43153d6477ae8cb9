// Package faultpoint stops hookbox at a named point of a run, for tests
// only: the fault suite (integration/faults_test.go) sets
// HOOKBOX_TEST_FAULTPOINT=<point>, waits until hookbox has stopped itself
// there and SIGKILLs it, so a kill lands exactly at a phase boundary instead
// of after a guessed delay. docs/architecture.md ("Fault points") lists
// the points.
//
// Unset (as in every real use), a point costs one string comparison and
// does nothing. Armed, the process that reaches the point prints one line
// to stderr, sends itself SIGSTOP, and if continued blocks that goroutine
// forever: the test is expected to kill it.
package faultpoint

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// Env names the variable that arms one point.
const Env = "HOOKBOX_TEST_FAULTPOINT"

// Point is a place in a run where a test may stop hookbox.
type Point string

// The points, in the order a run reaches them.
const (
	// BeforeCreate: the run lease, base image view, tmpfs and OCI spec
	// exist; the container does not.
	BeforeCreate Point = "before-create"
	// CreateContainer: inside the containerd client's container create,
	// after it took the lease it holds while creating (unless the request
	// carries one), before its request.
	CreateContainer Point = "create-container"
	// ContainerCreated: the container exists, its task does not.
	ContainerCreated Point = "container-created"
	// BeforeNewTask: just before the task create request is sent.
	BeforeNewTask Point = "before-new-task"
	// NewTask: the task create request is in flight and containerd has
	// started the task's shim, but hookbox has not had the reply.
	NewTask Point = "new-task"
	// TaskCreated: the create reply arrived (init is blocked before exec).
	TaskCreated Point = "task-created"
	// BeforeStart: cgroup opened, tracer armed, spawn record written; the
	// task is not started.
	BeforeStart Point = "before-start"
	// Running: the engine runs.
	Running Point = "running"
	// Grace: teardown sent SIGTERM and waits out the grace period.
	Grace Point = "grace"
	// Harvest: the run dir is copied into the record, the workspace and
	// artifacts are not resolved yet (containerd deletes run alongside).
	Harvest Point = "harvest"
	// BeforeTaskDelete: every process is gone; the task delete request is
	// not sent.
	BeforeTaskDelete Point = "before-task-delete"
	// TaskDelete: the task delete request is in flight and the shim has
	// begun deleting (its rootfs is unmounted, or the shim has exited),
	// but hookbox has not had the reply.
	TaskDelete Point = "task-delete"
	// Unmount: the harvest is done; the run dir is about to be unmounted.
	Unmount Point = "unmount"
)

// All lists every point in run order.
var All = []Point{BeforeCreate, CreateContainer, ContainerCreated, BeforeNewTask, NewTask, TaskCreated, BeforeStart,
	Running, Grace, Harvest, BeforeTaskDelete, TaskDelete, Unmount}

// armed is read once: a point's cost when unset is the comparison.
var armed = Point(os.Getenv(Env))

// Reach stops the process if p is the armed point.
func Reach(p Point) {
	if armed != "" && p == armed {
		stop(p)
	}
}

// While arms p across one blocking call (a request to containerd whose
// reply hookbox has not had yet): a watcher asks begun every millisecond
// and stops the process at p once begun says the other side is at work,
// as long as end has not been called. Call end when the call returns. If
// the call returns first, p is not reached.
func While(p Point, begun func() bool) (end func()) {
	if armed == "" || p != armed {
		return func() {}
	}
	var mu sync.Mutex
	returned := false
	quit := make(chan struct{})
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			if !begun() {
				continue
			}
			mu.Lock()
			if returned {
				mu.Unlock()
				return
			}
			stop(p) // holding mu: end waits, so the call never returns past p
		}
	}()
	return func() {
		mu.Lock()
		returned = true
		mu.Unlock()
		close(quit)
	}
}

func stop(p Point) {
	fmt.Fprintf(os.Stderr, "hookbox: test fault point %s reached (pid %d): stopping\n", p, os.Getpid())
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	for {
		time.Sleep(time.Hour)
	}
}
