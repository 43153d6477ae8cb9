package cgroup

import (
	"slices"
	"testing"
)

func TestLimitFiles(t *testing.T) {
	l := Limits{MemoryBytes: 64 << 20, Pids: 32, MilliCPUs: 1500}
	files, degraded := limitFiles(l, []string{"cpu", "memory", "pids"})
	want := [][2]string{{"memory.max", "67108864"}, {"memory.swap.max", "0"}, {"pids.max", "32"}, {"cpu.max", "150000 100000"}}
	if !slices.Equal(files, want) || len(degraded) != 0 {
		t.Errorf("all controllers: files %v degraded %v, want %v and none", files, degraded, want)
	}
	// This host's cgroup2 has no controller (all are bound to v1).
	files, degraded = limitFiles(l, nil)
	if len(files) != 0 || !slices.Equal(degraded, []string{DegradedMemory, DegradedPids, DegradedCPU}) {
		t.Errorf("no controllers: files %v degraded %v", files, degraded)
	}
	files, degraded = limitFiles(Limits{Pids: 8}, []string{"pids"})
	if !slices.Equal(files, [][2]string{{"pids.max", "8"}}) || len(degraded) != 0 {
		t.Errorf("pids only: files %v degraded %v", files, degraded)
	}
	if got := wantedControllers(Limits{MemoryBytes: 1, MilliCPUs: 1}); !slices.Equal(got, []string{"memory", "cpu"}) {
		t.Errorf("wantedControllers = %v", got)
	}
}

func TestDelegatedRoot(t *testing.T) {
	owned := map[string]bool{
		"/user.slice/user-1000.slice/user@1000.service":                      true,
		"/user.slice/user-1000.slice/user@1000.service/app.slice":            true,
		"/user.slice/user-1000.slice/user@1000.service/app.slice/term.scope": true,
		"/hookbox-rootless/1001/session":                                     true,
		"/hookbox-rootless/1001":                                             true,
		"/a/b":                                                               true, // owned, but above a gap
	}
	is := func(p string) bool { return owned[p] }
	for p, want := range map[string]string{
		"/user.slice/user-1000.slice/user@1000.service/app.slice/term.scope": "/user.slice/user-1000.slice/user@1000.service",
		"/hookbox-rootless/1001/session":                                     "/hookbox-rootless/1001",
		"/a/b/c":                                                             "",
		"/":                                                                  "",
	} {
		if got := DelegatedRoot(p, is); got != want {
			t.Errorf("DelegatedRoot(%q) = %q, want %q", p, got, want)
		}
	}
}
