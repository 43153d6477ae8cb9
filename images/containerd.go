package images

import (
	"bytes"
	"context"
	"fmt"
	"io"

	containerd "github.com/containerd/containerd/v2/client"
	ctdimages "github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
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

// ImportSet loads every image of s into containerd's namespace namespace
// (Namespace when empty; "k8s.io" is the one the kubelet's CRI reads) under
// its Name and under its DigestName, and unpacks each with the overlayfs
// snapshotter. Like Import it is idempotent and checks that each name points
// at the image's manifest digest; progress, when set, hears of each image
// unpacked.
func ImportSet(ctx context.Context, c *containerd.Client, s *Set, namespace string, progress func(string)) error {
	if namespace == "" {
		namespace = Namespace
	}
	ctx = namespaces.WithNamespace(ctx, namespace)
	platform := platforms.Only(hostPlatform())
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(s.WriteLayoutTar(pw)) }()
	imported, err := c.Import(ctx, pr, containerd.WithImportPlatform(platform))
	pr.CloseWithError(err) // ends the writer if Import stopped reading early
	if err != nil {
		return fmt.Errorf("images: importing into containerd namespace %s: %w", namespace, err)
	}
	byName := map[string]ctdimages.Image{}
	for _, rec := range imported {
		byName[rec.Name] = rec
	}
	for _, b := range s.Images() {
		rec, ok := byName[b.Name]
		if !ok {
			return fmt.Errorf("images: containerd import into namespace %s created no image %s", namespace, b.Name)
		}
		if rec.Target.Digest != b.ManifestDigest {
			return fmt.Errorf("images: containerd image %s points at %s, want %s", b.Name, rec.Target.Digest, b.ManifestDigest)
		}
		if progress != nil {
			progress(fmt.Sprintf("unpacking %s", b.Name))
		}
		if err := containerd.NewImageWithPlatform(c, rec, platform).Unpack(ctx, Snapshotter); err != nil {
			return fmt.Errorf("images: unpacking %s with %s in namespace %s: %w", b.Name, Snapshotter, namespace, err)
		}
		if err := nameByDigest(ctx, c, rec, b.DigestName()); err != nil {
			return fmt.Errorf("images: naming %s %s in namespace %s: %w", b.Name, b.DigestName(), namespace, err)
		}
	}
	return nil
}

// nameByDigest gives the imported image rec a second name, name
// (REPOSITORY@sha256:…), pointing at the same target. A pod's image pinned
// as REPOSITORY:TAG@sha256:… is looked up by the CRI under
// REPOSITORY@sha256:… only (it drops the tag of a digested reference), so
// without this name the kubelet would try to pull an image it has.
func nameByDigest(ctx context.Context, c *containerd.Client, rec ctdimages.Image, name string) error {
	is := c.ImageService()
	img := ctdimages.Image{Name: name, Target: rec.Target, Labels: rec.Labels}
	if _, err := is.Create(ctx, img); err == nil || !errdefs.IsAlreadyExists(err) {
		return err
	}
	_, err := is.Update(ctx, img, "target")
	return err
}
