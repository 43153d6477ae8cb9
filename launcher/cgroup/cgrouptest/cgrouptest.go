// Package cgrouptest gives tests of host-side helpers real helper cgroups
// of their own (as root), away from hookbox's.
package cgrouptest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/launcher/cgroup"
)

// Parent is the cgroup under which tests put their helpers' parents.
const Parent = "/hookbox-test"

// Helpers returns root helpers under Parent/helpers-<random>, with
// hookbox's limits; cleanup removes that parent in every hierarchy (a
// helper left in it fails the removal, and the test).
func Helpers(t testing.TB) cgroup.Helpers {
	t.Helper()
	testenv.RequireRoot(t)
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	h := cgroup.RootHelpers()
	h.Parent = Parent + "/helpers-" + hex.EncodeToString(b)
	t.Cleanup(func() {
		cgs, err := host.HostCgroups()
		if err != nil {
			t.Error(err)
			return
		}
		for _, hier := range cgs.Hierarchies {
			dir := hier.DirFor(h.Parent)
			if dir == "" {
				continue
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if e.IsDir() {
					t.Errorf("helper cgroup %s was left behind", filepath.Join(dir, e.Name()))
				}
			}
			// The kernel may still be freeing a helper cgroup removed just
			// before (its last processes exiting): EBUSY for a moment.
			err := syscall.Rmdir(dir)
			for deadline := time.Now().Add(5 * time.Second); err == syscall.EBUSY && time.Now().Before(deadline); err = syscall.Rmdir(dir) {
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil && err != syscall.ENOENT {
				t.Errorf("removing test parent %s: %v", dir, err)
			}
		}
	})
	return h
}
