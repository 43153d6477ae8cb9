package plan

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"hookbox.dev/hookbox/compiler"
	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/mounts"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/runfiles"
)

func compileSpec(t *testing.T, workspace string) *render.Render {
	t.Helper()
	spec := "apiVersion: hookbox.dev/v1alpha1\nkind: Spawn\nmetadata: {name: p}\nspec:\n" +
		"  engine: {kind: exec, path: /bin/true}\n  workspace: " + workspace + "\n"
	parsed, err := compiler.Parse([]byte(spec), "p.yaml", t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := compiler.Compile(parsed[0])
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPreviewChecksWhatARunChecks: a preview refuses a workspace a run
// would refuse, and leaves only the run's own sources unchecked.
func TestPreviewChecksWhatARunChecks(t *testing.T) {
	ctx := context.Background()
	runs := t.TempDir()

	missing := compileSpec(t, filepath.Join(t.TempDir(), "absent"))
	if _, err := Preview(ctx, missing, runs); !errors.Is(err, mounts.ErrMissingSource) {
		t.Fatalf("a missing workspace must be refused before launch, got %v", err)
	}

	r := compileSpec(t, t.TempDir())
	c, err := Preview(ctx, r, runs)
	if err != nil {
		t.Fatalf("preview of a valid render: %v", err)
	}
	wantRunDir := mounts.RunHostPaths(filepath.Join(runs, PreviewRunID)).RunDir
	found := false
	for _, m := range c.Spec.Mounts {
		if m.Destination == render.RunDir {
			found = m.Source == wantRunDir
		}
	}
	if !found {
		t.Errorf("the run dir must be bound from %s in the preview", wantRunDir)
	}
	if c.Spec.Linux.CgroupsPath != "/hookbox/"+PreviewRunID {
		t.Errorf("cgroupsPath %q", c.Spec.Linux.CgroupsPath)
	}

	// A launch claims its sources exist: the absent tmpfs is now an error.
	_, err = NewContainer(ctx, r, Launch{RunID: "x", Host: mounts.RunHostPaths(filepath.Join(runs, "x")), Prepared: true})
	if err == nil {
		t.Fatal("a prepared launch without its tmpfs must be refused")
	}
}

// TestRunfilesHoldTheInit: the init is a runfile at render.InitPath, from
// $HOOKBOX_INIT (else beside the executable); a missing one is an error
// that says how to build it.
func TestRunfilesHoldTheInit(t *testing.T) {
	ctx := context.Background()
	store, err := runfiles.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := compileSpec(t, t.TempDir())
	t.Setenv(InitEnv, filepath.Join(t.TempDir(), "absent"))
	if _, err := Runfiles(ctx, store, r, runfiles.RenderOptions{}); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Fatalf("a missing init: %v, want an error naming make build", err)
	}
	static := testenv.StaticELF(t) // a static ELF file, as hookbox-init is
	t.Setenv(InitEnv, static)
	if _, err := Runfiles(ctx, store, r, runfiles.RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(r.Runfiles, func(e render.Runfile) bool { return e.Path == render.InitPath }); i < 0 || r.Runfiles[i].Type != render.RunfileFile {
		t.Errorf("the manifest lacks the init at %s: %+v", render.InitPath, r.Runfiles)
	}
}

// TestCheckDigest: the plan digest is accepted without assembling, the
// content digest once assembled (the result handed over), anything else
// refused with both digests named.
func TestCheckDigest(t *testing.T) {
	ctx := context.Background()
	t.Setenv(InitEnv, testenv.StaticELF(t))
	store, err := runfiles.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	fresh := func() *render.Render { return compileSpec(t, ws) }
	planned, err := fresh().Digests()
	if err != nil {
		t.Fatal(err)
	}
	full := fresh()
	if _, err := Runfiles(ctx, store, full, runfiles.RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	content, _, err := full.Digest()
	if err != nil {
		t.Fatal(err)
	}

	r := fresh()
	if assembled, err := CheckDigest(ctx, store, r, planned.Plan, runfiles.RenderOptions{}); err != nil || assembled != nil || len(r.Runfiles) > 0 {
		t.Errorf("the plan digest: %v, assembled %v; want accepted without assembling", err, assembled)
	}
	r = fresh()
	if assembled, err := CheckDigest(ctx, store, r, content, runfiles.RenderOptions{}); err != nil || assembled == nil || len(r.Runfiles) == 0 {
		t.Errorf("the content digest: %v, assembled %v; want accepted with the runfiles assembled", err, assembled)
	}
	wrong := "sha256:" + strings.Repeat("0", 64)
	_, err = CheckDigest(ctx, store, fresh(), wrong, runfiles.RenderOptions{})
	if !errors.Is(err, ErrDigestRefused) || !strings.Contains(err.Error(), planned.Plan) || !strings.Contains(err.Error(), content) {
		t.Errorf("another digest: %v; want ErrDigestRefused naming %s and %s", err, planned.Plan, content)
	}
}
