package cgroup

import (
	"errors"
	"testing"
)

func TestCheckPath(t *testing.T) {
	for _, ok := range []string{"/hookbox/r1", "/a", "/hookbox/0123-abc_def.x"} {
		if err := checkPath(ok); err != nil {
			t.Errorf("checkPath(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "/", "hookbox/r1", "/hookbox/../r1", "/hookbox/", "//hookbox", "/a/./b", "/a\nb", "/a\x00b", "system.slice:hookbox:r1"} {
		if err := checkPath(bad); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("checkPath(%q) = %v, want ErrInvalidPath", bad, err)
		}
	}
}
