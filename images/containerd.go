package images

import (
	"bytes"
	"context"
	"fmt"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/platforms"
)

// Namespace is the containerd namespace every hookbox image and container
// lives in.
const Namespace = "hookbox"

// Snapshotter is the snapshotter images are unpacked with.
const Snapshotter = "overlayfs"

// Import loads img into containerd's namespace Namespace (whatever namespace
// ctx carries is replaced) under img.Name, and unpacks it with the overlayfs
// snapshotter. Both steps are idempotent: importing an image that is already
// there rewrites nothing and returns it.
//
// It checks that the imported image's target is img.ManifestDigest, so the
// name cannot point at anything else when Import returns. It does not hold a
// lease: the image record is what keeps its content from containerd's
// garbage collector.
func Import(ctx context.Context, c *containerd.Client, img *Image) (containerd.Image, error) {
	ctx = namespaces.WithNamespace(ctx, Namespace)
	layout, err := img.LayoutTar()
	if err != nil {
		return nil, err
	}
	platform := platforms.Only(img.Platform)
	imported, err := c.Import(ctx, bytes.NewReader(layout), containerd.WithImportPlatform(platform))
	if err != nil {
		return nil, fmt.Errorf("images: importing %s into containerd: %w", img.Name, err)
	}
	for _, rec := range imported {
		if rec.Name != img.Name {
			continue
		}
		if rec.Target.Digest != img.ManifestDigest {
			return nil, fmt.Errorf("images: containerd image %s points at %s, want %s", img.Name, rec.Target.Digest, img.ManifestDigest)
		}
		ci := containerd.NewImageWithPlatform(c, rec, platform)
		if err := ci.Unpack(ctx, Snapshotter); err != nil {
			return nil, fmt.Errorf("images: unpacking %s with %s: %w", img.Name, Snapshotter, err)
		}
		return ci, nil
	}
	return nil, fmt.Errorf("images: containerd import of %s created no image of that name", img.Name)
}
