package runfiles

import (
	"io/fs"
	"slices"
	"testing"

	"hookbox.dev/hookbox/render"
)

func TestRelocateHiddenPaths(t *testing.T) {
	manifest := []render.Runfile{
		{Path: "/tmp", Type: render.RunfileDir, Mode: 0o1777},
		{Path: "/tmp/x", Type: render.RunfileDir, Mode: 0o755},
		{Path: "/tmp/x/engine", Type: render.RunfileFile, Mode: 0o755},
		{Path: "/tmp/x/link", Type: render.RunfileSymlink, Target: "/tmp/x/engine"},
		{Path: "/usr", Type: render.RunfileDir, Mode: 0o755},
		{Path: "/usr/bin", Type: render.RunfileDir, Mode: 0o755},
		{Path: "/usr/bin/sh", Type: render.RunfileSymlink, Target: "dash"},
	}
	objects := map[string]fs.FileInfo{"/tmp/x/engine": nil}
	got := relocate(slices.Clone(manifest), objects, nil, nil)
	var paths []string
	for _, e := range got {
		paths = append(paths, e.Path)
	}
	want := []string{"/hookbox", "/hookbox/host", "/hookbox/host/tmp", "/hookbox/host/tmp/x", "/hookbox/host/tmp/x/engine",
		"/hookbox/host/tmp/x/link", "/usr", "/usr/bin", "/usr/bin/sh"}
	if !slices.Equal(paths, want) {
		t.Fatalf("paths %q, want %q", paths, want)
	}
	if got[5].Target != "/hookbox/host/tmp/x/engine" || got[8].Target != "dash" {
		t.Errorf("absolute link targets move with their files, relative ones stay: %+v %+v", got[5], got[8])
	}
	if _, ok := objects["/hookbox/host/tmp/x/engine"]; !ok || len(objects) != 1 {
		t.Errorf("objects must be re-keyed: %v", objects)
	}
	untouched := relocate(slices.Clone(manifest[4:]), map[string]fs.FileInfo{}, nil, nil)
	if !slices.Equal(untouched, manifest[4:]) {
		t.Errorf("nothing hidden, nothing moves")
	}
	grants := []render.Runfile{
		{Path: "/grants", Type: render.RunfileDir, Mode: 0o755},
		{Path: "/grants/docs", Type: render.RunfileDir, Mode: 0o755},
		{Path: "/tmp", Type: render.RunfileDir, Mode: 0o1777},
		{Path: "/tmp/e", Type: render.RunfileFile, Mode: 0o755},
	}
	got = relocate(grants, map[string]fs.FileInfo{}, []string{"/grants/docs"}, nil)
	paths = nil
	for _, e := range got {
		paths = append(paths, e.Path)
	}
	if want := []string{"/grants", "/grants/docs", "/hookbox", "/hookbox/host", "/hookbox/host/tmp", "/hookbox/host/tmp/e"}; !slices.Equal(paths, want) {
		t.Errorf("mount points stay: %q, want %q", paths, want)
	}
}
