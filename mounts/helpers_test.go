package mounts

import (
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"hookbox.dev/hookbox/render"
)

// wantErr checks err is in category sentinel and mentions every substring.
func wantErr(t *testing.T, err, sentinel error, substrings ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", sentinel)
	}
	if sentinel != nil && !errors.Is(err, sentinel) {
		t.Fatalf("error %q is not %v", err, sentinel)
	}
	for _, s := range substrings {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
}

// sampleRender is a render with the mounts the compiler makes: workspace,
// two grants, the tmpfs run dir and /tmp.
func sampleRender(workspace string, grants ...string) *render.Render {
	r := &render.Render{
		Mounts: []render.Mount{
			{Destination: render.WorkspaceDir, Kind: render.MountBind, Source: workspace, ReadOnly: true},
		},
		Files: []render.File{
			{Path: render.ConfigDir + "/claude-settings.json", Mode: 0o644, Content: "{}"},
			{Path: render.HomeDir + "/.claude.json", Mode: 0o600, Content: "{}"},
		},
		Limits: render.Limits{TmpfsBytes: 1 << 30, TmpfsInodes: 1 << 16},
	}
	for _, g := range grants {
		r.Mounts = append(r.Mounts, render.Mount{
			Destination: render.GrantsDir + "/" + lastElem(g), Kind: render.MountBind, Source: g, ReadOnly: true,
		})
	}
	r.Mounts = append(r.Mounts,
		render.Mount{Destination: render.RunDir, Kind: render.MountTmpfs, Options: []string{"nosuid", "nodev", "noexec", "mode=0700"}, SizeBytes: 64 << 20, Inodes: 4096},
		render.Mount{Destination: render.TmpDir, Kind: render.MountTmpfs, Options: []string{"nosuid", "nodev", "noexec", "mode=1777"}, SizeBytes: 32 << 20, Inodes: 2048},
	)
	return r
}

func lastElem(p string) string { return p[strings.LastIndex(p, "/")+1:] }

// bindRO is a read-only bind as MountPlan makes it without rro.
func bindRO(dest, src string) Mount {
	return Mount{Destination: dest, Type: TypeBind, Source: src, Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}, DestKind: KindDir}
}

func tmpfsMount(dest string) Mount {
	return Mount{Destination: dest, Type: TypeTmpfs, Source: "tmpfs", Options: []string{"nosuid", "nodev", "noexec", "mode=1777", "size=1024", "nr_inodes=64"}, DestKind: KindDir}
}

func destinations(ms []Mount) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Destination
	}
	return out
}

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func writeFile(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func kernelRelease(t *testing.T) string {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	return unix.ByteSliceToString(u.Release[:])
}
