package cgroup

import (
	"errors"
	"testing"
)

func TestHelperName(t *testing.T) {
	name, err := HelperName("hbx-m5x2k-1a2b3c4d", "lookup-2", 4242, 987654)
	if err != nil || name != "hbx-m5x2k-1a2b3c4d.lookup-2@4242-987654" {
		t.Fatalf("HelperName = %q, %v", name, err)
	}
	o, ok := ParseHelperName(name)
	if !ok || o != (HelperOwner{RunID: "hbx-m5x2k-1a2b3c4d", Role: "lookup-2", PID: 4242, Start: 987654}) {
		t.Errorf("ParseHelperName(%q) = %+v, %v", name, o, ok)
	}
	// A run id with dots (a test's) still parses: the role is after the last one.
	if o, ok := ParseHelperName("run.1.notify@7-8"); !ok || o.RunID != "run.1" || o.Role != "notify" {
		t.Errorf("dotted run id: %+v %v", o, ok)
	}
	for _, bad := range [][2]string{{"", "notify"}, {"a/b", "notify"}, {"a@b", "notify"}, {"..", "notify"}, {"r", ""}, {"r", "no.tify"}, {"r", "a/b"}, {"r", "x@y"}} {
		if _, err := HelperName(bad[0], bad[1], 1, 1); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("HelperName(%q, %q) = %v, want ErrInvalidPath", bad[0], bad[1], err)
		}
	}
	if _, err := HelperName("r", "notify", 0, 1); err == nil {
		t.Error("pid 0 accepted")
	}
	// Names gc must leave alone: a run's cgroup, anything else.
	for _, other := range []string{"hbx-m5x2k-1a2b3c4d", "x@1-2", "r.notify@1", "r.notify@a-2", "r.notify@1-b", "r.notify@-1-2", "r.notify@1-2-3", "r.a/b@1-2", ".notify@1-2"} {
		if o, ok := ParseHelperName(other); ok {
			t.Errorf("ParseHelperName(%q) = %+v: not a helper name", other, o)
		}
	}
}

func TestV1LimitFiles(t *testing.T) {
	l := Limits{MemoryBytes: 256 << 20, Pids: 128, MilliCPUs: 500}
	for _, tc := range []struct {
		controllers []string
		memsw       bool
		want        [][2]string
	}{
		{[]string{"memory"}, true, [][2]string{{"memory.limit_in_bytes", "268435456"}, {"memory.memsw.limit_in_bytes", "268435456"}}},
		{[]string{"memory"}, false, [][2]string{{"memory.limit_in_bytes", "268435456"}}},
		{[]string{"pids"}, false, [][2]string{{"pids.max", "128"}}},
		{[]string{"freezer"}, false, nil},
		{[]string{"cpu", "cpuacct"}, false, nil}, // helpers get no CPU limit
	} {
		got := v1LimitFiles(l, tc.controllers, tc.memsw)
		if len(got) != len(tc.want) {
			t.Errorf("%v: %v, want %v", tc.controllers, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%v: %v, want %v", tc.controllers, got, tc.want)
			}
		}
	}
	if got := v1LimitFiles(Limits{}, []string{"memory", "pids"}, true); got != nil {
		t.Errorf("no limits: %v", got)
	}
}
