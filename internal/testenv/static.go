package testenv

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// StaticELF is the path of a statically linked ELF program for tests that
// need one (hookbox-init must be static): the Go toolchain's gofmt, found
// through `go env GOROOT` (the toolchain's own, not the test binary's
// build-time root).
func StaticELF(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "bin", "gofmt")
}
