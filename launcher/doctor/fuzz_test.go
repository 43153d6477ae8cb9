package doctor

import (
	"strings"
	"testing"
)

func FuzzParseMountinfo(f *testing.F) {
	for _, seed := range []string{mountinfoHybrid, mountinfoV2, mountinfoV1, `1 1 0:1 / /a\040b rw - tracefs t rw`, " - ", `1 2 3 4 \ - x`, ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		mounts := parseMountinfo(text)
		if len(mounts) > strings.Count(text, "\n")+1 {
			t.Fatalf("%d mounts from %d lines", len(mounts), strings.Count(text, "\n")+1)
		}
		for _, m := range mounts {
			if m.FSType == "" {
				t.Fatalf("mount without a type: %+v", m)
			}
		}
		cg := cgroupsOf(mounts)
		switch cg.layout {
		case "", "v1", "v2", "hybrid":
		default:
			t.Fatalf("layout %q", cg.layout)
		}
		_ = cgroupLayoutCheck(cg, nil)
		_, _ = tracefsCheck(mounts, nil, nil)
	})
}

func FuzzRuncVersion(f *testing.F) {
	f.Add("runc version 1.1.5+ds1\ncommit: x\n")
	f.Add("runc version \n")
	f.Fuzz(func(t *testing.T, out string) {
		if v := runcVersion(out); strings.ContainsAny(v, "\n") {
			t.Fatalf("version %q spans lines", v)
		}
	})
}
