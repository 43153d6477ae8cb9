// Package oci turns a render plus what only exists at launch (run id,
// rootfs, mounts, the values of allow-listed host variables) into an OCI
// runtime spec.
//
// The spec is containerd's default Linux spec with hookbox's hardening
// applied as a list of small spec options in containerd's own SpecOpts form
// (pkg/oci), each testable alone and reusable by the launcher with
// containerd.WithNewSpec. The package is pure: it reads no files and
// starts nothing. It never sees a secret's value: containerd keeps the
// spec on disk, so secrets reach the engine through hookbox-init
// (WithProcess).
package oci

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	ctroci "github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"hookbox.dev/hookbox/mounts"
	"hookbox.dev/hookbox/render"
)

// Namespace is the containerd namespace every hookbox container lives in.
const Namespace = "hookbox"

// Annotations hookbox puts on every spec (and containers carry as labels).
const (
	AnnotationRunID        = "dev.hookbox.run-id"
	AnnotationRenderDigest = "dev.hookbox.render-digest"
	AnnotationSpawn        = "dev.hookbox.spawn"
)

// NofileLimit is the RLIMIT_NOFILE (soft and hard) of the container.
const NofileLimit = 4096

// cpuPeriod is the CFS period the CPU limit is expressed in (100 ms).
const cpuPeriod = 100_000

// Launch is what the spec needs beyond the render.
type Launch struct {
	RunID        string
	RenderDigest string
	// Rootfs is the root filesystem path (absolute, or relative to the bundle).
	Rootfs string
	// Mounts are the render's mounts as planned on this host, in order.
	Mounts []specs.Mount
	// HostValues holds the values of the render's host variables, read at
	// launch; nil gives each PlaceholderValue (plan views). Secrets have no
	// place here (WithProcess).
	HostValues map[string]string
	// InheritCgroup leaves the container in its runtime's cgroup, with no
	// cgroupsPath and no resources: a rootless runtime cannot create a
	// cgroup where no controller is delegated to it (docs/architecture.md,
	// "Backends"). The launcher then moves init into a cgroup it owns and
	// applies the limits it can there.
	InheritCgroup bool
}

// PlaceholderValue stands for a value resolved at launch: a host
// variable's in specs printed before a launch and in redacted specs, a
// secret's in every spec.
const PlaceholderValue = "<resolved at launch>"

// CgroupsPath is the cgroup of a run: hookbox sets it itself so the tracer
// can find the run's cgroup id, the inode of its cgroup2 directory.
func CgroupsPath(runID string) string { return "/hookbox/" + runID }

// Options returns the spec options that build a run's spec, in order.
func Options(r *render.Render, l Launch) []ctroci.SpecOpts {
	return []ctroci.SpecOpts{
		WithReadonlyRootfs(l.Rootfs),
		WithProcess(r, l.HostValues),
		WithHostname(r.Spawn),
		WithUnprivilegedUser(uint32(r.Process.UID), uint32(r.Process.GID)),
		WithNoCapabilities(),
		ctroci.WithNoNewPrivileges,
		seccomp.WithDefaultProfile(),
		WithNoProcessAccess(),
		WithNativeArchOnly(),
		WithIsolatedNamespaces(),
		withCgroup(r, l),
		WithNofile(NofileLimit),
		WithNoexecDev(),
		WithShmInodes(),
		ctroci.WithoutRunMount,
		WithPlannedMounts(l.Mounts),
		ctroci.WithAnnotations(map[string]string{
			AnnotationRunID:        l.RunID,
			AnnotationRenderDigest: l.RenderDigest,
			AnnotationSpawn:        r.Spawn,
		}),
	}
}

// withCgroup: hookbox's own cgroupsPath with the render's limits, or (see
// Launch.InheritCgroup) none of either.
func withCgroup(r *render.Render, l Launch) ctroci.SpecOpts {
	if l.InheritCgroup {
		return func(_ context.Context, _ ctroci.Client, _ *containers.Container, s *specs.Spec) error {
			ensureLinux(s)
			s.Linux.CgroupsPath, s.Linux.Resources = "", nil
			return nil
		}
	}
	return ctroci.Compose(ctroci.WithCgroup(CgroupsPath(l.RunID)), WithLimits(r.Limits))
}

// Generate builds the spec of a run from containerd's default spec.
func Generate(ctx context.Context, r *render.Render, l Launch) (*specs.Spec, error) {
	if l.RunID == "" {
		return nil, fmt.Errorf("oci: a run id is required")
	}
	ctx = namespaces.WithNamespace(ctx, Namespace)
	spec, err := ctroci.GenerateSpec(ctx, nil, &containers.Container{ID: l.RunID}, Options(r, l)...)
	if err != nil {
		return nil, fmt.Errorf("oci: generate spec for %s: %w", r.Spawn, err)
	}
	return spec, nil
}

// Redact returns a copy of spec whose environment holds no value of a host
// or secret variable of the render: the form written to the run record.
// (A spec from Generate holds no secret's value anyway.)
func Redact(spec *specs.Spec, r *render.Render) *specs.Spec {
	resolved := map[string]bool{}
	for _, e := range r.Process.Env {
		if e.Source == render.EnvSecret || e.Source == render.EnvHost {
			resolved[e.Name] = true
		}
	}
	out := *spec
	if spec.Process != nil {
		proc := *spec.Process
		proc.Env = make([]string, len(spec.Process.Env))
		for i, kv := range spec.Process.Env {
			name, _, _ := strings.Cut(kv, "=")
			if resolved[name] {
				kv = name + "=" + PlaceholderValue
			}
			proc.Env[i] = kv
		}
		out.Process = &proc
	}
	return &out
}

// MountsFromPlan converts the mount plan into runtime-spec mounts, in plan
// order (parents before children).
func MountsFromPlan(plan mounts.Plan) []specs.Mount {
	out := make([]specs.Mount, 0, len(plan.Mounts))
	for _, m := range plan.Mounts {
		out = append(out, specs.Mount{
			Destination: m.Destination,
			Type:        m.Type,
			Source:      m.Source,
			Options:     slices.Clone(m.Options),
		})
	}
	return out
}
