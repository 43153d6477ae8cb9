package doctor

import (
	"strings"
	"testing"

	hostfacts "hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/internal/host/hosttest"
)

// FuzzMountProbes: whatever mount table the host shows, the probes that
// read it give a check with a status and a layout the report can name.
func FuzzMountProbes(f *testing.F) {
	for _, seed := range []string{hosttest.MountinfoHybrid, hosttest.MountinfoV2, mountinfoV1, `1 1 0:1 / /a\040b rw - tracefs t rw`, " - ", `1 2 3 4 \ - x`, ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		mounts, err := hostfacts.ParseMounts(strings.NewReader(text))
		if err != nil {
			return
		}
		cg, err := hostfacts.CgroupsOf(mounts)
		switch layoutName(cg.Mode) {
		case "", "v1", "v2", "hybrid":
		default:
			t.Fatalf("layout %q", layoutName(cg.Mode))
		}
		_, tracefs := tracefsCheck(mounts, nil, nil)
		for _, c := range []Check{cgroupLayoutCheck(cg, err), tracefs} {
			if c.Status != OK && c.Status != Warn && c.Status != Fail {
				t.Fatalf("check %+v", c)
			}
		}
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
