package cgroup

import (
	"fmt"
	"path"
	"strings"
	"testing"
)

// FuzzParseStat: whatever a process names itself (comm is up to 15 bytes
// of anything but NUL), the fields after comm parse to what the kernel
// wrote; and no input panics.
func FuzzParseStat(f *testing.F) {
	for _, comm := range []string{"sleep", "a) (b c", ")", "(", ") R 1 2", "x\ny", "", " ", "))))))))))))))) "} {
		f.Add(comm, uint64(987654), byte('S'))
	}
	f.Fuzz(func(t *testing.T, comm string, start uint64, state byte) {
		parseStat(comm) // arbitrary text: must not panic
		if len(comm) > 15 || strings.ContainsRune(comm, 0) || !('A' <= state && state <= 'Z' || 'a' <= state && state <= 'z') {
			return
		}
		line := fmt.Sprintf("4321 (%s) %c 1 4321 4321 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 %d 12345678 300 0\n", comm, state, start)
		got, err := parseStat(line)
		if err != nil || got.StartTime != start || got.State != state {
			t.Fatalf("parseStat(%q) = %+v, %v; want state %c start %d", line, got, err, state, start)
		}
	})
}

// FuzzParseHierarchies: no input panics, and every accepted cgroup mount
// has clean absolute paths, so dirFor joins only clean paths.
func FuzzParseHierarchies(f *testing.F) {
	for _, seed := range []string{hybridMountinfo, v2Mountinfo, v1Mountinfo, "", "-", "1 2 3 4 5 6 - cgroup2 x y", "1 2 0:1 /\\134 /a\\040b rw - cgroup c rw,name=\\n"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, mountinfo string) {
		hs, err := parseHierarchies(mountinfo)
		if err != nil {
			return
		}
		for _, h := range hs {
			for _, m := range h.Mounts {
				for _, p := range []string{m.Root, m.MountPoint} {
					if !path.IsAbs(p) || path.Clean(p) != p {
						t.Fatalf("mount %+v has a path that is not clean and absolute", m)
					}
				}
				if d := h.dirFor("/hookbox/r1"); d != "" && path.Clean(d) != d {
					t.Fatalf("dirFor gave unclean %q", d)
				}
			}
		}
		classify(hs)
	})
}
