package host

import (
	"os"

	"github.com/moby/sys/userns"
)

// InitialUserNS reports whether this process runs in the host's initial
// user namespace. A rootless hookbox re-executes itself inside
// RootlessKit's user namespace, where its euid is 0 but it is still an
// unprivileged user on the host.
func InitialUserNS() bool { return !userns.RunningInUserNS() }

// RealRoot reports whether this process is root on the host: euid 0 in the
// initial user namespace. Code that picks root's defaults
// (/var/lib/hookbox, the system containerd, the BPF tracer) must ask
// RealRoot, not os.Geteuid.
func RealRoot() bool { return os.Geteuid() == 0 && InitialUserNS() }
