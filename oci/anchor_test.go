package oci

import (
	"context"
	"testing"
)

// The anchor is a task that is never started: what runc makes at create
// is locked down like a run's, and its spec names its group.
func TestAnchorSpec(t *testing.T) {
	s, err := AnchorSpec(context.Background(), "hookbox-shim-group", "/state/shim-group/rootfs")
	if err != nil {
		t.Fatal(err)
	}
	if s.Root == nil || s.Root.Path != "/state/shim-group/rootfs" || !s.Root.Readonly {
		t.Errorf("root %+v: want the anchor's rootfs, read-only", s.Root)
	}
	if len(s.Process.Args) != 1 || s.Process.Args[0] != AnchorPath || !s.Process.NoNewPrivileges {
		t.Errorf("process args %v, no new privileges %v", s.Process.Args, s.Process.NoNewPrivileges)
	}
	if c := s.Process.Capabilities; c != nil && len(c.Bounding)+len(c.Effective)+len(c.Permitted)+len(c.Inheritable)+len(c.Ambient) > 0 {
		t.Errorf("capabilities %+v, want none", c)
	}
	if s.Linux.CgroupsPath != CgroupsPath("hookbox-shim-group") || s.Annotations[AnnotationShimGroup] != "hookbox-shim-group" {
		t.Errorf("cgroups path %q, group %q", s.Linux.CgroupsPath, s.Annotations[AnnotationShimGroup])
	}
}
