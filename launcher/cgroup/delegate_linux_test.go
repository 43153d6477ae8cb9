package cgroup

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestPlaceWritesLimits drives Place over a directory laid out like a
// delegated cgroup2 subtree whose controllers reach the run (a pure v2
// host with systemd delegation, which this host is not): the kernel's files
// are plain files here, so what Place writes can be read back. Real cgroups are exercised by the
// rootless integration pass, on a host where no controller reaches them.
func TestPlaceWritesLimits(t *testing.T) {
	base := t.TempDir()
	d := Delegation{Root: "/user.slice/u@1000.service", Jobs: "/user.slice/u@1000.service/jobs"}
	jobs := filepath.Join(base, d.Jobs)
	os.MkdirAll(jobs, 0o755)
	os.WriteFile(filepath.Join(jobs, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644)
	p, degraded, err := d.placeIn(base, "run-1", 4242, Limits{MemoryBytes: 64 << 20, Pids: 32, MilliCPUs: 500})
	if err != nil {
		t.Fatal(err)
	}
	if p != d.Jobs+"/run-1" || len(degraded) != 0 {
		t.Errorf("placed at %s, degraded %v", p, degraded)
	}
	read := func(rel string) string {
		b, _ := os.ReadFile(filepath.Join(base, rel))
		return string(b)
	}
	if got := read(d.Jobs + "/cgroup.subtree_control"); got != "+memory +pids +cpu" {
		t.Errorf("jobs subtree_control %q", got)
	}
	for file, want := range map[string]string{"memory.max": "67108864", "memory.swap.max": "0", "pids.max": "32", "cpu.max": "50000 100000", "cgroup.procs": "4242"} {
		if got := read(p + "/" + file); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}

	// Without controllers: placed, every limit reported.
	os.WriteFile(filepath.Join(jobs, "cgroup.controllers"), nil, 0o644)
	os.Remove(filepath.Join(jobs, "cgroup.subtree_control"))
	_, degraded, err = d.placeIn(base, "run-2", 4243, Limits{MemoryBytes: 1 << 20, Pids: 8})
	if err != nil || !slices.Equal(degraded, []string{DegradedMemory, DegradedPids}) {
		t.Errorf("no controllers: degraded %v, %v", degraded, err)
	}
	if _, err := os.Stat(filepath.Join(jobs, "run-2", "memory.max")); err == nil {
		t.Error("a limit was written without its controller")
	}
}
