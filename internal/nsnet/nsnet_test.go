package nsnet

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"hookbox.dev/hookbox/internal/testenv"
)

// newNamedNetns creates a network namespace with loopback up (as a
// container's) and returns its path; it is deleted when the test ends.
func newNamedNetns(t *testing.T) string {
	t.Helper()
	testenv.RequireRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		testenv.Missing(t, "no ip command (apt-get install iproute2)")
	}
	name := fmt.Sprintf("hookbox-egress-test-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		testenv.Missing(t, fmt.Sprintf("ip netns add: %v: %s", err, out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns delete %s: %v: %s", name, err, out)
		}
	})
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("bring lo up in %s: %v: %s", name, err, out)
	}
	return "/run/netns/" + name
}

// dialInNetns dials addr from a locked thread inside the namespace at
// path, and returns that thread to its own namespace.
func dialInNetns(t *testing.T, path, addr string) (net.Conn, error) {
	t.Helper()
	target, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		home, err := netns.Get()
		if err != nil {
			done <- result{nil, err}
			return // thread stays locked and dies with the goroutine
		}
		defer home.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			done <- result{nil, err}
			return
		}
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if netns.Set(home) == nil {
			runtime.UnlockOSThread()
		}
		done <- result{c, err}
	}()
	r := <-done
	return r.c, r.err
}

func TestListen(t *testing.T) {
	path := newNamedNetns(t)
	l, err := Listen(path, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()

	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	// From this (the host's) namespace the address leads elsewhere: at
	// most to some other listener, never to this one.
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		select {
		case <-accepted:
			t.Fatal("the listener accepted a connection from the host's namespace")
		case <-time.After(200 * time.Millisecond):
		}
	}
	c, err := dialInNetns(t, path, addr)
	if err != nil {
		t.Fatalf("dial %s inside the namespace: %v", addr, err)
	}
	defer c.Close()
	select {
	case s := <-accepted:
		s.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the listener did not accept a connection from inside its namespace")
	}
}

// The thread that enters the namespace returns to its own.
func TestListenOnThreadReturns(t *testing.T) {
	path := newNamedNetns(t)
	target, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	errs := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		before, err := netns.Get()
		if err != nil {
			errs <- err
			return
		}
		defer before.Close()
		l, returned, err := listenOnThread(target, "127.0.0.1:0")
		if err != nil || !returned {
			errs <- fmt.Errorf("listenOnThread: returned=%v, %v", returned, err)
			return
		}
		l.Close()
		after, err := netns.Get()
		if err != nil {
			errs <- err
			return
		}
		defer after.Close()
		if !after.Equal(before) {
			errs <- fmt.Errorf("thread in %s after the round trip, was in %s", after, before)
			return
		}
		errs <- nil
	}()
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

func TestListenMissingNamespace(t *testing.T) {
	if _, err := Listen("/nonexistent/ns/net", "127.0.0.1:0"); err == nil {
		t.Fatal("want an error for a namespace path that does not exist")
	}
}
