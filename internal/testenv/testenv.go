// Package testenv owns how hookbox's tests declare what they need from the
// host, and what happens when the host lacks it. It is imported only by
// tests.
//
// Three switches make a missing capability a failure instead of a skip, so
// a machine that should run a test cannot pass by skipping it (CI sets all
// three; a test skips only through this package):
//
//   - HOOKBOX_REQUIRE_ROOT=1 (CI's root job): RequireRoot and Missing fail
//     where they would skip.
//   - HOOKBOX_INTEGRATION=1 (make integration, CI): Require, Unmet and
//     RequireIntegration fail on an unmet Requirement. Outside it,
//     RequireIntegration always skips, with the reason, and Require skips
//     only when a requirement is unmet.
//   - HOOKBOX_REQUIRE_BUILDKIT=1 (CI): MissingBuildkit fails where it would
//     skip.
//
// A Requirement's Check runs every time it is required: one that is slow
// (it asks a daemon) should be wrapped in sync.OnceValue.
package testenv

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Environment variables that turn skips into failures.
const (
	RequireRootEnv     = "HOOKBOX_REQUIRE_ROOT"
	IntegrationEnv     = "HOOKBOX_INTEGRATION"
	RequireBuildkitEnv = "HOOKBOX_REQUIRE_BUILDKIT"
)

// RequireRoot gates a test that needs root (to mount, mknod, chown, create
// cgroups, move processes). It skips when not root, except under
// HOOKBOX_REQUIRE_ROOT=1, where not being root is a failure.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv(RequireRootEnv) == "1" {
		t.Fatalf("HOOKBOX_REQUIRE_ROOT=1 but running as uid %d; run the tests as root", os.Geteuid())
	}
	t.Skipf("needs root (uid %d); set HOOKBOX_REQUIRE_ROOT=1 to make this a failure", os.Geteuid())
}

// Missing reports a host feature a root CI machine is expected to have
// (a cgroup2 hierarchy, a memory controller): it fails the test under
// HOOKBOX_REQUIRE_ROOT=1 and skips it otherwise, saying why.
func Missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(RequireRootEnv) == "1" {
		t.Fatalf("%s (HOOKBOX_REQUIRE_ROOT=1 demands it)", why)
	}
	t.Skip(why)
}

// MissingBuildkit reports that the test has no buildkitd to talk to: it
// fails the test under HOOKBOX_REQUIRE_BUILDKIT=1 and skips it otherwise,
// saying why.
func MissingBuildkit(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(RequireBuildkitEnv) == "1" {
		t.Fatalf("%s (HOOKBOX_REQUIRE_BUILDKIT=1 demands it)", why)
	}
	t.Skip(why)
}

// Requirement is one capability a test needs from the host.
type Requirement struct {
	Name  string
	Check func() string // "" when met, else why not (and how to get it)
}

// Requirements the tests share. A package adds its own (a containerd that
// answers at its address) as Requirement values.
var (
	Root = Requirement{"root", func() string {
		if os.Geteuid() != 0 {
			return "not running as root"
		}
		return ""
	}}
	Runc = Requirement{"runc", func() string {
		if _, err := exec.LookPath("runc"); err != nil {
			return "runc not on PATH (apt-get install runc)"
		}
		return ""
	}}
	Containerd = Requirement{"containerd", func() string {
		if _, err := exec.LookPath("containerd"); err != nil {
			return "no containerd binary on PATH (apt-get install containerd runc)"
		}
		return ""
	}}
)

// Require runs the test wherever the host meets reqs. Under
// HOOKBOX_INTEGRATION=1 an unmet requirement fails the test; elsewhere it
// skips it with the reason. Requirements are checked in order; the first
// unmet one decides.
func Require(t testing.TB, reqs ...Requirement) {
	t.Helper()
	for _, r := range reqs {
		if why := r.Check(); why != "" {
			Unmet(t, r.Name, why)
		}
	}
}

// Unmet ends a test whose requirement name the host does not meet, for
// reason why, as Require does: it fails under HOOKBOX_INTEGRATION=1 and
// skips elsewhere. For requirements found unmet while the test runs.
func Unmet(t testing.TB, name, why string) {
	t.Helper()
	if os.Getenv(IntegrationEnv) == "1" {
		t.Fatalf("requirement %s: %s (HOOKBOX_INTEGRATION=1 demands it)", name, why)
	}
	t.Skipf("requirement %s: %s (set HOOKBOX_INTEGRATION=1 to make this a failure)", name, why)
}

// RequireIntegration gates a test of the integration suite: it runs only
// under HOOKBOX_INTEGRATION=1, and there an unmet requirement fails it.
// Elsewhere it skips, naming the first unmet requirement if there is one.
func RequireIntegration(t testing.TB, reqs ...Requirement) {
	t.Helper()
	Require(t, reqs...)
	if os.Getenv(IntegrationEnv) != "1" {
		t.Skip("integration test: set HOOKBOX_INTEGRATION=1 (as root, with runc) to run it")
	}
}

// FirstDiff describes the first line where two texts differ, for golden
// file failures.
func FirstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + ":\n  got:  " + gl + "\n  want: " + wl
		}
	}
	return "(no line differs)"
}

// RootlessEnv marks the rootless pass of the integration suite (make
// test-rootless): the tests run as a non-root user, inside a delegated
// cgroup2 subtree, against a rootless containerd.
const RootlessEnv = "HOOKBOX_ROOTLESS"

// RequireRootless gates a rootless integration test: under
// HOOKBOX_ROOTLESS=1 it must run as a non-root user (root fails it); without
// it, the test skips and says how it runs. CI runs the rootless pass, so a
// rootless test is never left unrun there.
func RequireRootless(t testing.TB) {
	t.Helper()
	if os.Getenv(RootlessEnv) != "1" {
		t.Skip("rootless integration test: make test-rootless (as root) runs it as a non-root user")
	}
	if os.Geteuid() == 0 {
		t.Fatalf("%s=1 but running as root: the rootless pass runs as a non-root user", RootlessEnv)
	}
}

// RootlessUndelegatedEnv marks the rootless pass's second phase: the tests
// run outside any delegated cgroup subtree.
const RootlessUndelegatedEnv = "HOOKBOX_ROOTLESS_UNDELEGATED"

// RequireRootlessUndelegated gates a test of the rootless pass's second
// phase. Outside the pass it skips, as RequireRootless; inside, it fails
// without HOOKBOX_ROOTLESS_UNDELEGATED=1 (the first phase excludes the test
// by name, the second sets the variable).
func RequireRootlessUndelegated(t testing.TB) {
	t.Helper()
	RequireRootless(t)
	if os.Getenv(RootlessUndelegatedEnv) != "1" {
		t.Fatalf("%s=1 but not %s=1: this test runs in the rootless pass's second phase, outside the delegated subtree", RootlessEnv, RootlessUndelegatedEnv)
	}
}
