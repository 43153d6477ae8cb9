// Package integration holds the tests that need root, runc, containerd and
// the kernel's BPF. They run when HOOKBOX_INTEGRATION=1 (CI sets it) and
// then FAIL, never skip, when a capability they need is missing; elsewhere
// they skip with the reason. The gate is testenv.RequireIntegration.
package integration

import (
	"bytes"
	"fmt"
	"os/exec"

	"hookbox.dev/hookbox/internal/testenv"
)

// containerdUp: a containerd answers at the address hookbox will use.
var containerdUp = testenv.Requirement{Name: "containerd", Check: func() string {
	addr := containerdAddress()
	out, err := exec.Command("ctr", "--address", addr, "version").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("containerd does not answer at %s (%v: %s); .ci/run starts it", addr, err, bytes.TrimSpace(out))
	}
	return ""
}}
