package host

import (
	"os"
	"strings"
	"testing"
)

// RealRoot agrees with this process's uid_map: the initial user namespace
// maps every uid to itself.
func TestRealRoot(t *testing.T) {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		t.Skipf("no uid_map: %v", err)
	}
	identity := strings.Join(strings.Fields(string(b)), " ") == "0 0 4294967295"
	if InitialUserNS() != identity {
		t.Errorf("InitialUserNS() = %v, uid_map %q", InitialUserNS(), b)
	}
	if want := identity && os.Geteuid() == 0; RealRoot() != want {
		t.Errorf("RealRoot() = %v, want %v", RealRoot(), want)
	}
}
