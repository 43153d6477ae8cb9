package oci

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	ctroci "github.com/containerd/containerd/v2/pkg/oci"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// AnnotationShimGroup is the annotation by which containerd's runc shim
// (containerd-shim-runc-v2) groups tasks: the `start` containerd runs for
// a task whose spec names a group joins the shim serving the group's
// socket instead of starting one of its own.
const AnnotationShimGroup = "io.containerd.runc.v2.group"

// AnchorPath is the program of a shim group's anchor: an empty file, never
// run (runc only checks, at create, that it is there and executable).
const AnchorPath = "/anchor"

// SetShimGroup puts the task of s in group's shim.
func SetShimGroup(s *specs.Spec, group string) {
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[AnnotationShimGroup] = group
}

// AnchorSpec is the spec of the anchor of shim group id: a task that is
// created and never started, whose shim (started for it, serving the
// group) therefore outlives the runs that join it. Its init, runc's,
// waits to be started in namespaces of its own with no capabilities, no
// new privileges and a read-only rootfs holding AnchorPath.
func AnchorSpec(ctx context.Context, id, rootfs string) (*specs.Spec, error) {
	ctx = namespaces.WithNamespace(ctx, Namespace)
	s, err := ctroci.GenerateSpec(ctx, nil, &containers.Container{ID: id},
		ctroci.WithRootFSPath(rootfs),
		ctroci.WithRootFSReadonly(),
		ctroci.WithProcessArgs(AnchorPath),
		WithNoCapabilities(),
		ctroci.WithNoNewPrivileges,
		ctroci.WithCgroup(CgroupsPath(id)),
		ctroci.WithoutRunMount,
	)
	if err != nil {
		return nil, fmt.Errorf("oci: generate the spec of shim group anchor %s: %w", id, err)
	}
	SetShimGroup(s, id)
	return s, nil
}
