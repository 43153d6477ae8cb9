package doctor

import "fmt"

// CheckEgress says whether runs can get an egress allowlist: hookbox must
// open its proxy's listener inside each container's network namespace.
const CheckEgress = "egress"

// egressCheck: as root, hookbox holds CAP_SYS_ADMIN over every container's
// namespace; as a user, the rootless run enters RootlessKit's user
// namespace, which owns its containers' namespaces, so the rootless
// prerequisites are what it takes.
func egressCheck(h host, rootless bool) (bool, Check) {
	c := Check{Name: CheckEgress}
	if h.euid != 0 {
		if rootless {
			c.Status, c.Detail = OK, "rootless runs open the proxy's listener from inside RootlessKit's user namespace, which owns the containers' network namespaces"
			return true, c
		}
		c.Status, c.Detail = Warn, "rootless prerequisites missing: runs with network: {allow: [...]} fail before the engine starts"
		c.Fix = "install what the rootlesskit, newuidmap and subuid checks ask for"
		return false, c
	}
	// setns(CLONE_NEWNET) needs CAP_SYS_ADMIN over the user namespace
	// that owns the container's network namespace.
	caps, err := effectiveCaps(h.path("/proc/self/status"))
	switch {
	case err != nil:
		c.Status, c.Detail, c.Fix = Warn, fmt.Sprintf("cannot read this process's capabilities: %v", err), "check that /proc is mounted"
		return false, c
	case caps&(1<<capSysAdmin) == 0:
		c.Status, c.Detail = Warn, "root without CAP_SYS_ADMIN: hookbox cannot enter containers' network namespaces, so runs with network: {allow: [...]} fail before the engine starts"
		c.Fix = "run hookbox with CAP_SYS_ADMIN (a full root, not a capability-dropped service)"
		return false, c
	}
	c.Status, c.Detail = OK, "the proxy's listener is opened inside each container's network namespace (CAP_SYS_ADMIN held)"
	return true, c
}
