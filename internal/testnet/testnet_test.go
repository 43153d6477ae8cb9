package testnet

import (
	"bufio"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHostReachable listens inside a test host and exchanges bytes with it
// from the test's namespace.
func TestHostReachable(t *testing.T) {
	h := NewHost(t)
	l := h.Listen(t, 0)
	if got := netip.MustParseAddrPort(l.Addr().String()).Addr(); got != h.Addr() {
		t.Fatalf("listener on %s, want the test host's %s", got, h.Addr())
	}
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.Write([]byte("echo " + line))
	}()
	c, err := net.DialTimeout("tcp", l.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatalf("dialing the test host: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || got != "echo hello\n" {
		t.Fatalf("read %q, %v; want the echo", got, err)
	}
}

// TestHostIsADeadEnd checks the test host has no route but its /30.
func TestHostIsADeadEnd(t *testing.T) {
	h := NewHost(t)
	out, err := exec.Command("ip", "-n", h.nsName, "-4", "route", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("ip route: %v\n%s", err, out)
	}
	routes := strings.TrimSpace(string(out))
	if strings.Contains(routes, "default") || strings.Count(routes, "\n") != 0 {
		t.Errorf("test host routes:\n%s\nwant only its connected /30", routes)
	}
	// A route lookup sends nothing: the documentation address has no route.
	out, err = exec.Command("ip", "-n", h.nsName, "route", "get", "192.0.2.1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "unreachable") {
		t.Errorf("route to 192.0.2.1 from the test host: %s (%v), want unreachable", out, err)
	}
}

// TestHostsInParallel checks that no two live test hosts share a subnet:
// two in one test, and those of parallel tests.
func TestHostsInParallel(t *testing.T) {
	var mu sync.Mutex
	live := map[netip.Prefix]bool{}
	claim := func(t *testing.T, h *Host) {
		p := netip.PrefixFrom(h.Addr(), 30).Masked()
		mu.Lock()
		defer mu.Unlock()
		if live[p] {
			t.Errorf("two live test hosts share %s", p)
		}
		live[p] = true
		t.Cleanup(func() {
			mu.Lock()
			defer mu.Unlock()
			delete(live, p)
		})
	}
	for range 4 {
		t.Run("pair", func(t *testing.T) {
			t.Parallel()
			a, b := NewHost(t), NewHost(t)
			claim(t, a)
			claim(t, b)
		})
	}
}

// TestCloseRemovesEverything checks that closing a host, even while a
// listener keeps its namespace alive, leaves no namespace and no link.
func TestCloseRemovesEverything(t *testing.T) {
	h := NewHost(t)
	h.Listen(t, 0)
	h.Close()
	h.Close()
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v\n%s", err, out)
	}
	if strings.Contains(string(out), h.nsName) {
		t.Errorf("namespace %s left after Close:\n%s", h.nsName, out)
	}
	for _, link := range []string{h.link, h.link + "p"} {
		if out, err := exec.Command("ip", "link", "show", link).CombinedOutput(); err == nil {
			t.Errorf("link %s left after Close:\n%s", link, out)
		}
	}
}
