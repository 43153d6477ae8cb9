package mounts

import (
	"slices"
	"strings"
	"testing"

	"hookbox.dev/hookbox/render"
)

var host = HostPaths{ConfigDir: "/var/lib/hookbox/runs/r1/etc", RunDir: "/var/lib/hookbox/runs/r1/tmpfs"}

func TestMountPlanRecursive(t *testing.T) {
	r := sampleRender("/src/ws", "/data/docs", "/src/ws/vendor")
	p, err := MountPlan(r, host, Features{RecursiveReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []Mount{
		{Destination: "/grants/docs", Type: "bind", Source: "/data/docs", RecursiveReadOnly: true, DestKind: KindDir,
			Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec", "rro", "rnosuid", "rnodev", "rnoexec"}},
		{Destination: "/grants/vendor", Type: "bind", Source: "/src/ws/vendor", RecursiveReadOnly: true, DestKind: KindDir,
			Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec", "rro", "rnosuid", "rnodev", "rnoexec"}},
		{Destination: "/hookbox/etc", Type: "bind", Source: host.ConfigDir, DestKind: KindDir,
			Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}},
		{Destination: "/run/hookbox", Type: "bind", Source: host.RunDir, DestKind: KindDir,
			Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", DestKind: KindDir,
			Options: []string{"nosuid", "nodev", "noexec", "mode=1777", "size=33554432", "nr_inodes=2048"}},
		{Destination: "/workspace", Type: "bind", Source: "/src/ws", RecursiveReadOnly: true, DestKind: KindDir,
			Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec", "rro", "rnosuid", "rnodev", "rnoexec"}},
	}
	if len(p.Mounts) != len(want) {
		t.Fatalf("got %d mounts %v, want %d", len(p.Mounts), destinations(p.Mounts), len(want))
	}
	for i := range want {
		if !mountEqual(p.Mounts[i], want[i]) {
			t.Errorf("mount %d:\n got %+v\nwant %+v", i, p.Mounts[i], want[i])
		}
	}
	if want := (TmpfsSize{Bytes: 64 << 20, Inodes: 4096}); p.RunDir != want {
		t.Errorf("RunDir = %+v, want %+v", p.RunDir, want)
	}
	if len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "recursive read-only applied") || !strings.Contains(p.Notes[0], "/workspace") {
		t.Errorf("notes = %q, want one saying recursive read-only was applied to /workspace", p.Notes)
	}
}

func TestMountPlanWithoutRecursiveReadOnly(t *testing.T) {
	p, err := MountPlan(sampleRender("/src/ws"), host, Features{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range p.Mounts {
		if m.RecursiveReadOnly || slices.Contains(m.Options, "rbind") || slices.Contains(m.Options, "rro") {
			t.Errorf("%s: %v without kernel support", m.Destination, m.Options)
		}
		if m.Type == TypeBind && m.Destination != render.RunDir && !m.ReadOnly() {
			t.Errorf("%s is not read-only: %v", m.Destination, m.Options)
		}
	}
	if len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "unavailable") || !strings.Contains(p.Notes[0], "not visible") {
		t.Errorf("notes = %q, want the fallback explained", p.Notes)
	}
}

func TestMountPlanIsDeterministic(t *testing.T) {
	r := sampleRender("/src/ws", "/b", "/a")
	a, err := MountPlan(r, host, Features{RecursiveReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(r.Mounts)
	b, err := MountPlan(r, host, Features{RecursiveReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(destinations(a.Mounts), destinations(b.Mounts)) {
		t.Errorf("order depends on the render's order: %v vs %v", destinations(a.Mounts), destinations(b.Mounts))
	}
}

func TestMountPlanErrors(t *testing.T) {
	tests := []struct {
		name     string
		edit     func(r *render.Render, h *HostPaths)
		sentinel error
		mention  []string
	}{
		{"writable bind", func(r *render.Render, h *HostPaths) { r.Mounts[0].ReadOnly = false }, ErrWritable, []string{"/workspace", "read-only"}},
		{"no host run dir", func(r *render.Render, h *HostPaths) { h.RunDir = "" }, ErrInvalid, []string{"HostPaths.RunDir"}},
		{"no run dir tmpfs", func(r *render.Render, h *HostPaths) {
			r.Mounts = slices.DeleteFunc(r.Mounts, func(m render.Mount) bool { return m.Destination == render.RunDir })
		}, ErrInvalid, []string{"/run/hookbox"}},
		{"config files without config dir", func(r *render.Render, h *HostPaths) { h.ConfigDir = "" }, ErrInvalid, []string{"/hookbox/etc/claude-settings.json", "HostPaths.ConfigDir"}},
		{"file nowhere", func(r *render.Render, h *HostPaths) {
			r.Files = append(r.Files, render.File{Path: "/etc/passwd"})
		}, ErrInvalid, []string{"/etc/passwd"}},
		{"unknown option", func(r *render.Render, h *HostPaths) { r.Mounts[0].Options = []string{"suid"} }, ErrInvalid, []string{"/workspace", `"suid"`}},
		{"bad mode", func(r *render.Render, h *HostPaths) { r.Mounts[len(r.Mounts)-1].Options = []string{"mode=999"} }, ErrInvalid, []string{"/tmp", "mode=999"}},
		{"run dir mode", func(r *render.Render, h *HostPaths) { r.Mounts[1].Options = []string{"mode=0755"} }, ErrInvalid, []string{"/run/hookbox", "0700"}},
		{"unsized tmp", func(r *render.Render, h *HostPaths) { r.Mounts[len(r.Mounts)-1].SizeBytes = 0 }, ErrInvalid, []string{"/tmp", "size"}},
		{"tmp without an inode limit", func(r *render.Render, h *HostPaths) { r.Mounts[len(r.Mounts)-1].Inodes = 0 }, ErrInvalid, []string{"/tmp", "inode limit"}},
		{"run dir without an inode limit", func(r *render.Render, h *HostPaths) { r.Mounts[1].Inodes = 0 }, ErrInvalid, []string{"/run/hookbox", "inode limit"}},
		{"unknown kind", func(r *render.Render, h *HostPaths) { r.Mounts[0].Kind = "overlay" }, ErrInvalid, []string{"/workspace", "overlay"}},
		{"destination under /proc", func(r *render.Render, h *HostPaths) { r.Mounts[0].Destination = "/proc/sys" }, ErrForbiddenDestination, []string{"/proc/sys"}},
		{"duplicate destination", func(r *render.Render, h *HostPaths) { r.Mounts[0].Destination = render.TmpDir }, ErrDuplicate, []string{"/tmp"}},
		{"relative source", func(r *render.Render, h *HostPaths) { r.Mounts[0].Source = "ws" }, ErrInvalid, []string{`"ws"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, h := sampleRender("/src/ws"), host
			tt.edit(r, &h)
			_, err := MountPlan(r, h, Features{})
			wantErr(t, err, tt.sentinel, tt.mention...)
		})
	}
}

func TestSortMountsParentsFirst(t *testing.T) {
	ms := []Mount{
		{Destination: "/a/b/c"}, {Destination: "/a-b"}, {Destination: "/b"}, {Destination: "/a/b"},
		{Destination: "/a"}, {Destination: "/a.b/c"}, {Destination: "/a/b-c"},
	}
	SortMounts(ms)
	want := []string{"/a", "/a/b", "/a/b/c", "/a/b-c", "/a-b", "/a.b/c", "/b"}
	if got := destinations(ms); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for i, m := range ms {
		for _, later := range ms[i+1:] {
			if render.Within(m.Destination, later.Destination) {
				t.Errorf("%s comes before its parent %s", m.Destination, later.Destination)
			}
		}
	}
}

func TestValidateShape(t *testing.T) {
	ok := []Mount{bindRO("/workspace", "/src/ws"), tmpfsMount("/tmp")}
	tests := []struct {
		name     string
		mounts   []Mount
		sentinel error
		mention  []string
	}{
		{"ok", ok, nil, nil},
		{"relative destination", []Mount{bindRO("workspace", "/src/ws")}, ErrInvalidDestination, []string{`"workspace"`, "/workspace"}},
		{"unclean destination", []Mount{bindRO("/grants/../etc", "/src/ws")}, ErrInvalidDestination, []string{"/grants/../etc", "/etc"}},
		{"trailing slash", []Mount{bindRO("/workspace/", "/src/ws")}, ErrInvalidDestination, []string{"/workspace/"}},
		{"empty destination", []Mount{bindRO("", "/src/ws")}, ErrInvalidDestination, nil},
		{"root", []Mount{bindRO("/", "/src/ws")}, ErrForbiddenDestination, []string{"root filesystem"}},
		{"under /proc", []Mount{bindRO("/proc/self", "/src/ws")}, ErrForbiddenDestination, []string{"/proc/self", "/proc"}},
		{"/sys itself", []Mount{tmpfsMount("/sys")}, ErrForbiddenDestination, []string{"/sys"}},
		{"under /dev", []Mount{bindRO("/dev/shm", "/src/ws")}, ErrForbiddenDestination, []string{"/dev/shm"}},
		{"duplicate", []Mount{bindRO("/workspace", "/a"), bindRO("/workspace", "/b")}, ErrDuplicate, []string{"/workspace"}},
		{"child before parent", []Mount{bindRO("/grants/a/b", "/a"), bindRO("/grants/a", "/b")}, ErrOrder, []string{"/grants/a/b", "/grants/a", "SortMounts"}},
		{"writable bind", []Mount{{Destination: "/workspace", Type: TypeBind, Source: "/src/ws", Options: []string{"bind", "nosuid", "nodev", "noexec"}, DestKind: KindDir}}, ErrWritable, []string{"/workspace"}},
		{"missing noexec", []Mount{{Destination: "/workspace", Type: TypeBind, Source: "/src/ws", Options: []string{"bind", "ro", "nosuid", "nodev"}, DestKind: KindDir}}, ErrInvalid, []string{"/workspace", "noexec"}},
		{"rbind without rro", []Mount{{Destination: "/workspace", Type: TypeBind, Source: "/src/ws", Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}, DestKind: KindDir}}, ErrInvalid, []string{"/workspace", "writable"}},
		{"unsized tmpfs", []Mount{{Destination: "/tmp", Type: TypeTmpfs, Source: "tmpfs", Options: []string{"nosuid", "nodev", "noexec"}, DestKind: KindDir}}, ErrInvalid, []string{"/tmp", "size="}},
		{"tmpfs without nr_inodes", []Mount{{Destination: "/tmp", Type: TypeTmpfs, Source: "tmpfs", Options: []string{"nosuid", "nodev", "noexec", "size=1024"}, DestKind: KindDir}}, ErrInvalid, []string{"/tmp", "nr_inodes="}},
		{"tmpfs with nr_inodes=0", []Mount{{Destination: "/tmp", Type: TypeTmpfs, Source: "tmpfs", Options: []string{"nosuid", "nodev", "noexec", "size=1024", "nr_inodes=0"}, DestKind: KindDir}}, ErrInvalid, []string{"/tmp", "nr_inodes=0"}},
		{"tmpfs on a file", []Mount{{Destination: "/tmp", Type: TypeTmpfs, Source: "tmpfs", Options: []string{"nosuid", "nodev", "noexec", "size=1"}, DestKind: KindFile}}, ErrKindMismatch, []string{"/tmp"}},
		{"unknown type", []Mount{{Destination: "/x", Type: "overlay", Options: []string{"nosuid", "nodev", "noexec"}, DestKind: KindDir}}, ErrInvalid, []string{"/x", "overlay"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateShape(Plan{Mounts: tt.mounts})
			if tt.sentinel == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			wantErr(t, err, tt.sentinel, tt.mention...)
		})
	}
}

func TestReleaseAtLeast(t *testing.T) {
	for release, want := range map[string]bool{
		"6.18.44-fc-v509": true, "5.12.0": true, "5.12-rc1": true, "5.11.22": false,
		"4.19.0-26-amd64": false, "10.0": true, "garbage": false, "": false,
	} {
		if got := releaseAtLeast(release, 5, 12); got != want {
			t.Errorf("releaseAtLeast(%q, 5, 12) = %v, want %v", release, got, want)
		}
	}
}

func TestProbeRecursiveReadOnlyMatchesKernel(t *testing.T) {
	// Fail, not skip, when a kernel that has mount_setattr says it has not.
	var u = kernelRelease(t)
	if want := releaseAtLeast(u, 5, 12); ProbeRecursiveReadOnly() != want {
		t.Errorf("ProbeRecursiveReadOnly() = %v on kernel %s, want %v", !want, u, want)
	}
}

func mountEqual(a, b Mount) bool {
	return a.Destination == b.Destination && a.Type == b.Type && a.Source == b.Source &&
		a.RecursiveReadOnly == b.RecursiveReadOnly && a.DestKind == b.DestKind && slices.Equal(a.Options, b.Options)
}
