package launcher

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/runtime-spec/specs-go"

	"hookbox.dev/hookbox/launcher/daemon"
	"hookbox.dev/hookbox/oci"
)

// The shim group (docs/architecture.md, "Shim group"): on a rootful
// backend every run's task joins one long-lived runc shim instead of
// making containerd start one for it (~4 ms of each run's create and
// delete). The shim outlives the runs because it also serves the group's
// anchor, a task that is created and never started. A run joins only
// when the group's shim answers; otherwise it has a shim of its own, as
// before, and makes the anchor once its engine runs.

// ShimGroupID names the shim group: its anchor's container and task, and
// (through the shim's socket name) the group.
const ShimGroupID = "hookbox-shim-group"

// LabelShimGroup marks the anchor's container.
const LabelShimGroup = "dev.hookbox.shim-group"

// joinShimGroup puts the run's task in the shim group when the group's
// shim answers.
func (x *execution) joinShimGroup(spec *specs.Spec) {
	if !x.opts.Backend.ShimGroup {
		return
	}
	if x.grouped = daemon.GroupLive(x.opts.Backend.Address, oci.Namespace, ShimGroupID); x.grouped {
		oci.SetShimGroup(spec, ShimGroupID)
	}
}

// makeAnchor makes the shim group's anchor in the background, for a run
// that found no group shim; anchorMade waits for it.
func (x *execution) makeAnchor() {
	if !x.opts.Backend.ShimGroup || x.grouped {
		return
	}
	ctx := context.WithoutCancel(x.ctx)
	x.anchor = start(func() (struct{}, error) {
		return struct{}{}, ensureShimGroup(ctx, x.opts.Backend, x.opts.StateDir, x.opts.Version)
	})
}

// anchorMade waits for makeAnchor; a failure only means later runs have
// shims of their own, so it is a note, not the run's error.
func (x *execution) anchorMade() {
	if x.anchor == nil {
		return
	}
	if _, err := x.anchor.wait(); err != nil {
		x.progress("shim-group", "not made, runs keep a shim each: %v", err)
	}
}

// ensureShimGroup makes the shim group's anchor on b unless the group's
// shim answers: its container (rootfs: an empty AnchorPath under
// stateDir) and its task, created, never started. An anchor whose shim
// does not answer (containerd restarted, the shim killed, its rootfs gone
// with the state dir that made it) is removed and made anew. Another
// hookbox making it at the same time is not an error.
func ensureShimGroup(ctx context.Context, b *Backend, stateDir, version string) error {
	if daemon.GroupLive(b.Address, oci.Namespace, ShimGroupID) {
		return nil
	}
	ctx = namespaces.WithNamespace(ctx, oci.Namespace)
	client := b.Client
	if err := RemoveShimGroup(ctx, client); err != nil {
		return fmt.Errorf("shim group: remove the anchor left without a shim: %w", err)
	}
	rootfs, err := anchorRootfs(stateDir)
	if err != nil {
		return err
	}
	spec, err := oci.AnchorSpec(ctx, ShimGroupID, rootfs)
	if err != nil {
		return err
	}
	c, err := client.NewContainer(ctx, ShimGroupID,
		containerd.WithSpec(spec),
		containerd.WithRuntime(runcRuntime, runtimeOptions(b.RuncRoot)),
		containerd.WithContainerLabels(map[string]string{LabelShimGroup: "anchor", LabelVersion: version}))
	if errdefs.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("shim group: create the anchor's container: %w", err)
	}
	if _, err := c.NewTask(ctx, cio.NullIO); err != nil && !errdefs.IsAlreadyExists(err) {
		return fmt.Errorf("shim group: create the anchor's task: %w", err)
	}
	return nil
}

// RemoveShimGroup deletes the anchor's task and container. Runs in the
// group keep its shim until their tasks are deleted; it exits after the
// last one.
func RemoveShimGroup(ctx context.Context, client *containerd.Client) error {
	ctx = namespaces.WithNamespace(ctx, oci.Namespace)
	c, err := client.LoadContainer(ctx, ShimGroupID)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if t, err := c.Task(ctx, nil); err == nil {
		if _, err := t.Delete(ctx, containerd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("delete the anchor's task: %w", err)
		}
	} else if !errdefs.IsNotFound(err) {
		return err
	}
	if err := c.Delete(ctx); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete the anchor's container: %w", err)
	}
	return nil
}

// anchorRootfs is the anchor's rootfs under stateDir, made when missing.
// runc makes its mount points there at create; nothing else is written.
func anchorRootfs(stateDir string) (string, error) {
	rootfs := filepath.Join(stateDir, "shim-group", "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return "", fmt.Errorf("shim group: %w", err)
	}
	anchor := filepath.Join(rootfs, oci.AnchorPath)
	if _, err := os.Stat(anchor); errors.Is(err, fs.ErrNotExist) {
		if err := os.WriteFile(anchor, nil, 0o555); err != nil {
			return "", fmt.Errorf("shim group: %w", err)
		}
	}
	return rootfs, nil
}
