// Package userns tells whether this process runs in the host's initial user
// namespace. A rootless hookbox re-executes itself inside RootlessKit's user
// namespace, where its euid is 0 but it is still an unprivileged user on
// the host: code that picks root's defaults (/var/lib/hookbox, the system
// containerd, the BPF tracer) must ask RealRoot, not os.Geteuid.
package userns

import (
	"os"
	"strings"
	"sync"
)

var initial = sync.OnceValue(func() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return true // no user namespaces on this kernel: the initial one
	}
	return IsIdentityMap(string(b))
})

// IsIdentityMap reports whether a uid_map's text maps every uid to itself,
// as the initial user namespace's "0 0 4294967295" does.
func IsIdentityMap(text string) bool {
	fields := strings.Fields(text)
	return len(fields) == 3 && fields[0] == "0" && fields[1] == "0" && fields[2] == "4294967295"
}

// Initial reports whether this process is in the initial user namespace.
func Initial() bool { return initial() }

// RealRoot reports whether this process is root on the host: euid 0 in the
// initial user namespace.
func RealRoot() bool { return os.Geteuid() == 0 && Initial() }
