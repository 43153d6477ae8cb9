// Package integration holds the tests that need root, runc, containerd and
// the kernel's BPF. They run when HOOKBOX_INTEGRATION=1 (CI sets it) and
// then FAIL, never skip, when a capability they need is missing; elsewhere
// they skip with the reason. The gate is testenv.RequireIntegration.
package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"

	"hookbox.dev/hookbox/internal/testenv"
)

// containerdUp: a containerd answers at the address hookbox will use. The
// probe runs once per test binary: ctr waits up to 10 s for a daemon that
// does not answer, and every test asks. No socket at all needs no ctr.
var containerdUp = testenv.Requirement{Name: "containerd", Check: sync.OnceValue(func() string {
	addr := containerdAddress()
	if _, err := os.Stat(strings.TrimPrefix(addr, "unix://")); err != nil {
		return fmt.Sprintf("no containerd socket at %s (%v); .ci/run starts containerd", addr, err)
	}
	out, err := exec.Command("ctr", "--address", addr, "version").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("containerd does not answer at %s (%v: %s); .ci/run starts it", addr, err, bytes.TrimSpace(out))
	}
	return ""
})}
