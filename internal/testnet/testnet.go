// Package testnet gives a test its own "remote" hosts without leaving the
// machine: each Host is a fresh network namespace joined to the test's
// namespace by a veth pair, with one address on a /30 from 10.213.0.0/16
// and no route anywhere else. Network tests talk only to loopback and to
// such hosts. It is imported only by tests.
package testnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netns"

	"hookbox.dev/hookbox/internal/nsnet"
	"hookbox.dev/hookbox/internal/testenv"
)

// IPCommand is the iproute2 tool NewHost configures namespaces and links with.
var IPCommand = testenv.Requirement{Name: "iproute2", Check: func() string {
	if _, err := exec.LookPath("ip"); err != nil {
		return "no ip command on PATH (apt-get install iproute2)"
	}
	return ""
}}

// subnets is how many /30s NewHost may use: 10.213.0.0/30 up to
// 10.213.255.0/30, one per host (the rest of each /24 stays unused, so an
// address names its host at a glance).
const subnets = 256

// nsSeq numbers the namespaces of this process; with the pid it makes
// their names unique across parallel test binaries.
var nsSeq atomic.Int64

// Host is a test host: a network namespace reachable from the test's own
// namespace at Addr and from nowhere else, and reaching nothing but the
// test's side of its veth.
type Host struct {
	t      testing.TB
	ns     netns.NsHandle
	nsName string     // under /run/netns
	link   string     // the veth end in the test's namespace
	addr   netip.Addr // the end inside the namespace
	once   sync.Once
}

// NewHost creates a test host, removed when the test ends. It needs root
// and iproute2: without them it skips, or fails under HOOKBOX_INTEGRATION=1.
//
// Parallel tests, in this process or another, get different subnets: the
// host-side link name encodes the subnet index, and the kernel refuses a
// second link of the same name, which makes creating it the reservation.
func NewHost(t testing.TB) *Host {
	t.Helper()
	testenv.Require(t, testenv.Root, IPCommand)
	h := &Host{t: t, ns: netns.None(), nsName: fmt.Sprintf("hookbox-test-%d-%d", os.Getpid(), nsSeq.Add(1))}
	if err := ip("netns", "add", h.nsName); err != nil {
		t.Fatalf("creating test host namespace: %v", err)
	}
	t.Cleanup(h.Close)
	index, err := h.reserveLink()
	if err != nil {
		t.Fatal(err)
	}
	hostSide := netip.AddrFrom4([4]byte{10, 213, byte(index), 1})
	h.addr = netip.AddrFrom4([4]byte{10, 213, byte(index), 2})
	peer := h.link + "p"
	// addrgenmode none: no IPv6 link-local addresses, so the link carries
	// only the test's own IPv4 traffic. No default route inside and no
	// forwarding on the host side: the test host is a dead end.
	for _, args := range [][]string{
		{"link", "set", h.link, "addrgenmode", "none"},
		{"addr", "add", hostSide.String() + "/30", "dev", h.link},
		{"link", "set", h.link, "up"},
		{"-n", h.nsName, "link", "set", peer, "addrgenmode", "none"},
		{"-n", h.nsName, "addr", "add", h.addr.String() + "/30", "dev", peer},
		{"-n", h.nsName, "link", "set", peer, "up"},
		{"-n", h.nsName, "link", "set", "lo", "up"},
	} {
		if err := ip(args...); err != nil {
			t.Fatalf("configuring test host %s: %v", h.addr, err)
		}
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+h.link+"/forwarding", []byte("0"), 0); err != nil {
		t.Fatalf("disabling forwarding on %s: %v", h.link, err)
	}
	if h.ns, err = netns.GetFromName(h.nsName); err != nil {
		t.Fatalf("opening test host namespace %s: %v", h.nsName, err)
	}
	return h
}

// reserveLink creates the veth pair on the first free subnet index, its
// peer already inside the namespace, and returns the index.
func (h *Host) reserveLink() (int, error) {
	for i := range subnets {
		name := fmt.Sprintf("hbt%d", i)
		err := ip("link", "add", name, "type", "veth", "peer", "name", name+"p", "netns", h.nsName)
		if err == nil {
			h.link = name
			return i, nil
		}
		if !errors.Is(err, errExists) {
			return 0, fmt.Errorf("creating veth pair %s: %w", name, err)
		}
	}
	return 0, fmt.Errorf("all %d test host subnets of 10.213.0.0/16 are taken (stale hbt* links? ip link del them)", subnets)
}

// Addr is the test host's address, reachable from the test's namespace.
func (h *Host) Addr() netip.Addr { return h.addr }

// Listen opens a TCP listener on Addr():port inside the test host's
// namespace (port 0 picks one), closed when the test ends. The socket stays
// in that namespace whichever goroutine uses it.
func (h *Host) Listen(t testing.TB, port int) net.Listener {
	t.Helper()
	l, err := nsnet.Listen("/run/netns/"+h.nsName, netip.AddrPortFrom(h.addr, uint16(port)).String())
	if err != nil {
		t.Fatalf("listening on test host %s: %v", h.addr, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// Close removes the test host: its veth pair (deleting one end deletes
// both, even while a socket keeps the namespace alive) and its namespace.
// It is idempotent; NewHost registers it as a cleanup.
func (h *Host) Close() {
	h.once.Do(func() {
		if h.link != "" {
			if err := ip("link", "del", h.link); err != nil {
				h.t.Errorf("removing test host %s: %v", h.addr, err)
			}
		}
		if h.ns.IsOpen() {
			h.ns.Close()
		}
		if err := ip("netns", "del", h.nsName); err != nil {
			h.t.Errorf("removing test host %s: %v", h.addr, err)
		}
	})
}

// errExists is how ip reports a name already taken.
var errExists = errors.New("already exists")

// ip runs the ip command with args.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err == nil {
		return nil
	}
	msg := strings.TrimSpace(string(out))
	if strings.Contains(msg, "File exists") {
		return fmt.Errorf("ip %s: %s: %w", strings.Join(args, " "), msg, errExists)
	}
	return fmt.Errorf("ip %s: %s: %w", strings.Join(args, " "), msg, err)
}
