// Package integration holds the tests that need root, runc, containerd and
// the kernel's BPF. They run when HOOKBOX_INTEGRATION=1 (CI sets it) and
// then FAIL, never skip, when a capability they need is missing; elsewhere
// they skip with the reason.
package integration

import (
	"os"
	"os/exec"
	"testing"
)

// requirement is one capability a test needs.
type requirement struct {
	name  string
	check func() string // "" when met, else why not
}

var (
	root = requirement{"root", func() string {
		if os.Geteuid() != 0 {
			return "not running as root"
		}
		return ""
	}}
	runc = requirement{"runc", func() string {
		if _, err := exec.LookPath("runc"); err != nil {
			return "runc not on PATH (apt-get install runc)"
		}
		return ""
	}}
)

// require skips the test outside integration runs and fails it inside one
// when a requirement is not met.
func require(t *testing.T, reqs ...requirement) {
	t.Helper()
	enforced := os.Getenv("HOOKBOX_INTEGRATION") == "1"
	for _, r := range reqs {
		if why := r.check(); why != "" {
			if enforced {
				t.Fatalf("requirement %s: %s (HOOKBOX_INTEGRATION=1 demands it)", r.name, why)
			}
			t.Skipf("requirement %s: %s (set HOOKBOX_INTEGRATION=1 to make this a failure)", r.name, why)
		}
	}
	if !enforced {
		t.Skip("integration test: set HOOKBOX_INTEGRATION=1 (as root, with runc) to run it")
	}
}
