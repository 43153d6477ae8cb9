// Package nsnet opens sockets inside another network namespace from this
// process: the listener of hookbox's egress proxy inside a container, and
// test hosts' servers. A socket belongs to the namespace it was created in
// wherever it is used afterwards, so only its creation needs the namespace.
package nsnet

import (
	"errors"
	"fmt"
	"net"
	"runtime"

	"github.com/vishvananda/netns"
)

// Listen opens a TCP listener at addr (such as "127.0.0.1:3128")
// inside the network namespace at nsPath (such as /proc/<pid>/ns/net). A
// socket belongs to the namespace it was created in, so the listener stays
// there: the container reaches it on its own loopback, while the proxy
// that accepts from it dials upstream from this process's namespace.
//
// The socket is created on a dedicated, locked OS thread that enters the
// namespace and returns to its own. If returning fails (a rootless hookbox
// may enter a container's namespace but not go back to the host's), the
// listener is still returned and the thread is never unlocked: its
// goroutine ends locked, and the Go runtime then terminates the thread
// instead of reusing it in the wrong namespace.
//
// Entering a namespace needs CAP_SYS_ADMIN over the user namespace that
// owns it.
func Listen(nsPath, addr string) (net.Listener, error) {
	target, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, fmt.Errorf("open network namespace %s: %w", nsPath, err)
	}
	defer target.Close()
	type result struct {
		l   net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		l, returned, err := listenOnThread(target, addr)
		if returned {
			runtime.UnlockOSThread()
		}
		done <- result{l, err}
	}()
	r := <-done
	if r.err != nil {
		return nil, fmt.Errorf("listen on %s in network namespace %s: %w", addr, nsPath, r.err)
	}
	return r.l, nil
}

// errNotReturned says the thread could not go back to its own namespace.
var errNotReturned = errors.New("the thread could not return to its own network namespace")

// listenOnThread does the namespace round trip on the calling goroutine's
// thread, which must be locked. returned says the thread is back in the
// namespace it started in (or never left it), so it may be unlocked.
func listenOnThread(target netns.NsHandle, addr string) (l net.Listener, returned bool, err error) {
	home, err := netns.Get()
	if err != nil {
		return nil, true, fmt.Errorf("read this thread's network namespace: %w", err)
	}
	defer home.Close()
	if err := netns.Set(target); err != nil {
		// setns failed, so the thread is where it was.
		return nil, true, fmt.Errorf("enter: %w", err)
	}
	l, listenErr := net.Listen("tcp", addr)
	if err := netns.Set(home); err != nil {
		// A rootless hookbox may enter the container's namespace (its user
		// namespace owns it) but not go back to the host's. The listener
		// is made, and sockets keep their namespace wherever they are used;
		// only this thread is stuck, and its goroutine ends locked, so the
		// runtime terminates it.
		if listenErr != nil {
			return nil, false, fmt.Errorf("%w (%v), after: %w", errNotReturned, err, listenErr)
		}
		return l, false, nil
	}
	if listenErr != nil {
		return nil, true, listenErr
	}
	return l, true, nil
}
