package mounts

import (
	"errors"
	"strings"
	"testing"

	"hookbox.dev/hookbox/render"
)

func TestCheckPrograms(t *testing.T) {
	ok := &render.Render{Programs: []render.Program{{Path: "/usr/bin/git"}, {Path: "/opt/claude/bin/claude"}, {Path: "/tmpfoo/x"}, {Path: "/hookbox/host/tmp/e"}}}
	if err := CheckPrograms(ok); err != nil {
		t.Errorf("programs outside mounted directories: %v", err)
	}
	for _, p := range []string{"/tmp/engine", "/run/hookbox/x", "/workspace/tool", "/proc/self/exe", "/grants/docs/x"} {
		err := CheckPrograms(&render.Render{Programs: []render.Program{{Path: p, Roles: []string{"engine"}}}})
		if !errors.Is(err, ErrMountConflict) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: want ErrMountConflict naming it, got %v", p, err)
		}
	}
}
