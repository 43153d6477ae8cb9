// Package plan turns a render and this host's facts into what a run mounts
// and executes: the assembled runfiles (their manifest recorded in the
// render), the validated mount plan and the OCI runtime spec.
//
// `hookbox run`, `hookbox render --format oci` and `hookbox render
// --runfiles` all go through it, so what render shows is what run does: a
// spec that render prints has passed the same mount validation a run
// applies (except for the two sources a run creates itself, see
// mounts.ValidateBeforeLaunch).
//
// It owns no lifecycle: it creates no container, mounts nothing and writes
// only to the runfiles store. Containers, tmpfs mounts and run records are
// the launcher's.
package plan

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"hookbox.dev/hookbox/images"
	"hookbox.dev/hookbox/mounts"
	"hookbox.dev/hookbox/oci"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/runfiles"
)

// PreviewRunID names the run of a plan printed before any launch.
const PreviewRunID = "plan"

// InitBinary is the file name of hookbox-init, looked up next to the
// running hookbox executable (make build puts both in bin/).
const InitBinary = "hookbox-init"

// InitEnv, when set, is the host path of hookbox-init to use instead
// (tests, whose executable is a test binary; packagers).
const InitEnv = "HOOKBOX_INIT"

// InitHostPath is the host file that becomes the container's init
// (render.InitPath): $HOOKBOX_INIT, else hookbox-init beside the running
// executable. It must exist.
func InitHostPath() (string, error) {
	p := os.Getenv(InitEnv)
	if p == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("finding %s next to this executable: %w", InitBinary, err)
		}
		p = filepath.Join(filepath.Dir(exe), InitBinary)
	}
	if _, err := os.Stat(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("the container init %s is missing (build it with make build, which puts it next to bin/hookbox, or set %s): %w", p, InitEnv, err)
		}
		return "", fmt.Errorf("the container init: %w", err)
	}
	return p, nil
}

// Runfiles assembles every program of r (closure, content-addressed
// store, read-only tree) and, when r has an init, hookbox-init at
// render.InitPath (InitHostPath), and records the manifest in r.Runfiles,
// so the render's content digest covers the bytes that get mounted. It
// refuses a render whose programs a container mount would hide.
func Runfiles(ctx context.Context, store *runfiles.Store, r *render.Render, opts runfiles.RenderOptions) (*runfiles.Result, error) {
	var placed map[string]string
	if r.Init != nil {
		src, err := InitHostPath()
		if err != nil {
			return nil, fmt.Errorf("spawn %s: %w", r.Spawn, err)
		}
		placed = map[string]string{r.Init.Path: src}
	}
	res, err := runfiles.AssembleRender(ctx, store, r, images.MountPoints, placed, opts)
	if err != nil {
		return nil, fmt.Errorf("spawn %s: %w", r.Spawn, err)
	}
	if err := mounts.CheckPrograms(r); err != nil {
		return nil, fmt.Errorf("spawn %s: %w", r.Spawn, err)
	}
	return res, nil
}

// ErrDigestRefused: the render is not the one an expected digest names.
var ErrDigestRefused = errors.New("refused")

// CheckDigest accepts r only when want is its plan digest or its content
// digest (docs/architecture.md "Digests"). The content digest needs the
// runfiles, so unless the plan digest matches it assembles them into store
// (recording the manifest in r, as Runfiles does) and returns the result,
// for the run to mount rather than assemble again: the tree it checked is
// the tree that runs. It creates nothing but store entries; a refusal
// wraps ErrDigestRefused and names both digests of r.
func CheckDigest(ctx context.Context, store *runfiles.Store, r *render.Render, want string, opts runfiles.RenderOptions) (*runfiles.Result, error) {
	d, err := r.Digests()
	if err != nil {
		return nil, err
	}
	if d.Matches(want) {
		return nil, nil
	}
	var assembled *runfiles.Result
	if d.Content == "" {
		if assembled, err = Runfiles(ctx, store, r, opts); err != nil {
			return nil, err
		}
		if d, err = r.Digests(); err != nil {
			return nil, err
		}
		if d.Matches(want) {
			return assembled, nil
		}
	}
	return nil, fmt.Errorf("%w: spawn %s is not %s: its plan digest is %s and its content digest %s; hookbox render --runfiles --format text shows both: review the change, then pin the digest you approve",
		ErrDigestRefused, r.Spawn, want, d.Plan, d.Content)
}

// Launch is what a container plan needs beyond the render.
type Launch struct {
	RunID string
	// Host holds the run's own mount sources (mounts.RunHostPaths).
	Host mounts.HostPaths
	// Prepared: Host's run dir tmpfs and config dir exist and are checked
	// like every other source. A preview leaves them unchecked.
	Prepared bool
	// HostValues are the launch-time values of host variables; nil shows
	// oci.PlaceholderValue for each (a preview). Secrets never go into a
	// spec (oci.WithProcess).
	HostValues map[string]string
	// InheritCgroup: the backend's runtime cannot create the run's cgroup
	// (see oci.Launch.InheritCgroup).
	InheritCgroup bool
}

// Container is the planned container of one run.
type Container struct {
	// Digest and Canonical are the render's digest and canonical bytes as
	// planned (with the runfiles manifest, when assembled first).
	Digest    string
	Canonical []byte
	Mounts    mounts.Plan
	Spec      *specs.Spec
	// SeccompFilter is the program hookbox-init installs (oci.SeccompInInit),
	// for the run's config dir; nil when runc applies the spec's profile.
	SeccompFilter []byte
}

// NewContainer plans r's mounts on this host, validates them, and
// generates the OCI spec, whose rootfs is the bundle's "rootfs".
func NewContainer(ctx context.Context, r *render.Render, l Launch) (*Container, error) {
	digest, canonical, err := r.Digest()
	if err != nil {
		return nil, err
	}
	mp, err := mounts.MountPlan(r, l.Host, mounts.HostFeatures())
	if err != nil {
		return nil, err
	}
	if l.Prepared {
		err = mounts.Validate(mp)
	} else {
		err = mounts.ValidateBeforeLaunch(mp, l.Host)
	}
	if err != nil {
		return nil, err
	}
	env := l.HostValues
	if env == nil && l.Prepared {
		env = map[string]string{}
	}
	spec, err := oci.Generate(ctx, r, oci.Launch{
		RunID: l.RunID, RenderDigest: digest, Rootfs: "rootfs", Mounts: oci.MountsFromPlan(mp),
		HostValues: env, InheritCgroup: l.InheritCgroup,
	})
	if err != nil {
		return nil, err
	}
	filter, err := oci.SeccompInInit(spec)
	if err != nil {
		return nil, err
	}
	return &Container{Digest: digest, Canonical: canonical, Mounts: mp, Spec: spec, SeccompFilter: filter}, nil
}

// Preview is the container a run of r would get, planned before any
// launch: run id PreviewRunID, its host paths under stateDir's run records,
// values resolved at launch shown as placeholders.
func Preview(ctx context.Context, r *render.Render, runsDir string) (*Container, error) {
	return NewContainer(ctx, r, Launch{
		RunID: PreviewRunID,
		Host:  mounts.RunHostPaths(filepath.Join(runsDir, PreviewRunID)),
	})
}
