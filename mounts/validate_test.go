package mounts

import (
	"errors"
	"path/filepath"
	"testing"

	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/render"
)

// TestValidateSources covers the host-side checks. The workspace W holds:
//
//	W/docs/            a real directory
//	W/file             a regular file
//	W/link    -> /etc  escapes W
//	W/up      -> ../outside   escapes W by a relative path
//	W/inner   -> docs  stays inside W
//	W/chain   -> up/x  escapes through a second link
func TestValidateSources(t *testing.T) {
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	outside := filepath.Join(base, "outside")
	mkdirs(t, filepath.Join(ws, "docs"), outside, filepath.Join(outside, "x"))
	writeFile(t, filepath.Join(ws, "file"), "x", 0o644)
	symlink(t, "/etc", filepath.Join(ws, "link"))
	symlink(t, "../outside", filepath.Join(ws, "up"))
	symlink(t, "docs", filepath.Join(ws, "inner"))
	symlink(t, "up/x", filepath.Join(ws, "chain"))
	symlink(t, ws, filepath.Join(base, "ws-link"))
	fileDest := bindRO("/hookbox/etc/settings.json", filepath.Join(ws, "file"))
	fileDest.DestKind = KindFile
	dirAsFile := bindRO("/hookbox/etc/settings.json", filepath.Join(ws, "docs"))
	dirAsFile.DestKind = KindFile

	tests := []struct {
		name     string
		mounts   []Mount
		sentinel error
		mention  []string
	}{
		{"workspace and grants", []Mount{bindRO("/grants/docs", filepath.Join(ws, "docs")), bindRO("/grants/outside", outside), bindRO("/workspace", ws)}, nil, nil},
		{"symlink inside the workspace", []Mount{bindRO("/grants/inner", filepath.Join(ws, "inner")), bindRO("/workspace", ws)}, nil, nil},
		{"file where a file is expected", []Mount{fileDest}, nil, nil},
		{"grant through a symlink to /etc", []Mount{bindRO("/grants/link", filepath.Join(ws, "link")), bindRO("/workspace", ws)},
			ErrEscapes, []string{filepath.Join(ws, "link"), "/grants/link", ws}},
		{"grant through ../", []Mount{bindRO("/grants/up", filepath.Join(ws, "up")), bindRO("/workspace", ws)},
			ErrEscapes, []string{filepath.Join(ws, "up")}},
		{"grant below an escaping link", []Mount{bindRO("/grants/x", filepath.Join(ws, "chain")), bindRO("/workspace", ws)},
			ErrEscapes, []string{filepath.Join(ws, "chain")}},
		{"workspace is a symlink", []Mount{bindRO("/workspace", filepath.Join(base, "ws-link"))},
			ErrEscapes, []string{filepath.Join(base, "ws-link"), ws, "declare the directory it points to"}},
		{"magic link", []Mount{bindRO("/workspace", "/proc/self/root"+ws)},
			ErrEscapes, []string{"/proc/self/root" + ws, "magic link"}},
		{"missing source", []Mount{bindRO("/workspace", filepath.Join(base, "nope"))},
			ErrMissingSource, []string{filepath.Join(base, "nope"), "/workspace", "create it"}},
		{"missing grant in the workspace", []Mount{bindRO("/grants/gone", filepath.Join(ws, "gone")), bindRO("/workspace", ws)},
			ErrMissingSource, []string{filepath.Join(ws, "gone")}},
		{"file where a directory is expected", []Mount{bindRO("/grants/file", filepath.Join(ws, "file"))},
			ErrKindMismatch, []string{filepath.Join(ws, "file"), "regular file", "/grants/file", "directory"}},
		{"directory where a file is expected", []Mount{dirAsFile},
			ErrKindMismatch, []string{filepath.Join(ws, "docs"), "/hookbox/etc/settings.json"}},
		{"destination under /proc", []Mount{bindRO("/proc/kcore", ws)},
			ErrForbiddenDestination, []string{"/proc/kcore"}},
		{"duplicate destinations", []Mount{bindRO("/workspace", ws), bindRO("/workspace", outside)},
			ErrDuplicate, []string{"/workspace"}},
		{"writable run dir that is not a tmpfs", []Mount{{Destination: render.RunDir, Type: TypeBind, Source: outside,
			Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}, DestKind: KindDir}},
			ErrWritable, []string{outside, "Create"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(Plan{Mounts: tt.mounts})
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

// TestValidateReportsEveryProblem: one call names every bad source.
func TestValidateReportsEveryProblem(t *testing.T) {
	base := t.TempDir()
	err := Validate(Plan{Mounts: []Mount{
		bindRO("/grants/a", filepath.Join(base, "a")),
		bindRO("/grants/b", filepath.Join(base, "b")),
	}})
	wantErr(t, err, ErrMissingSource, filepath.Join(base, "a"), filepath.Join(base, "b"))
}

// TestValidatePlannedRun validates a whole plan from MountPlan against
// real host paths, the way the launcher does.
func TestValidatePlannedRun(t *testing.T) {
	testenv.RequireRoot(t)
	base := t.TempDir()
	ws, cfg, run := filepath.Join(base, "ws"), filepath.Join(base, "etc"), filepath.Join(base, "tmpfs")
	mkdirs(t, ws, cfg)
	r := sampleRender(ws)
	p, err := MountPlan(r, HostPaths{ConfigDir: cfg, RunDir: run}, HostFeatures())
	if err != nil {
		t.Fatal(err)
	}
	err = Validate(p)
	wantErr(t, err, ErrMissingSource, run) // before Create
	if err := Create(run, p.RunDir, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Unmount(run) })
	if err := Validate(p); err != nil {
		t.Fatalf("Validate after Create: %v", err)
	}
}

// TestPlanRefusesGrantThroughWorkspaceSymlink goes from a render: a grant
// declared as <workspace>/link, with link → /etc placed by the repository,
// is refused; the same grant as a real directory is accepted.
func TestPlanRefusesGrantThroughWorkspaceSymlink(t *testing.T) {
	base := t.TempDir()
	ws, cfg := filepath.Join(base, "ws"), filepath.Join(base, "etc")
	mkdirs(t, filepath.Join(ws, "real"), cfg)
	symlink(t, "/etc", filepath.Join(ws, "link"))
	run := filepath.Join(base, "not-yet-created")

	p, err := MountPlan(sampleRender(ws, filepath.Join(ws, "link")), HostPaths{ConfigDir: cfg, RunDir: run}, Features{RecursiveReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	err = Validate(p)
	wantErr(t, err, ErrEscapes, filepath.Join(ws, "link"), "/grants/link")
	if errors.Is(err, ErrKindMismatch) {
		t.Errorf("the workspace itself was refused: %v", err)
	}

	p, err = MountPlan(sampleRender(ws, filepath.Join(ws, "real")), HostPaths{ConfigDir: cfg, RunDir: run}, Features{RecursiveReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	err = Validate(p)
	if errors.Is(err, ErrEscapes) {
		t.Errorf("a real directory in the workspace was refused: %v", err)
	}
	wantErr(t, err, ErrMissingSource, run) // only the run dir, not created here
}
