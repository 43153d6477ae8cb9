package images

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/canonjson"
	"hookbox.dev/hookbox/runfiles"
)

// RunfilesLabel marks a runfiles image; its value is the hex of the
// runfiles manifest digest the image holds (the Job's
// hookbox.dev/runfiles-sha256 annotation).
const RunfilesLabel = "dev.hookbox.runfiles"

// AddRunfiles adds the runfiles image of an assembled tree: one layer
// holding exactly the entries of manifest (a render's Runfiles, as
// runfiles.AssembleRender recorded it), laid out like the host's "/" as
// render/k8s mounts it, with the file contents read from treeDir (the
// assembled tree, runfiles.Result.TreeDir).
//
// Each entry has its tree mode (runfiles.TreeMode: no one gets more than the
// host file gives others), owner 0:0 and the tree's modification time
// (runfiles.TreeModTime), so the digest follows from the manifest alone:
// the same manifest gives the same image from any store. A file whose
// content is not its manifest entry's (size and sha256) fails the build;
// hookbox render --runfiles repairs the tree. progress, when set, gets the
// bytes written and the total after each file.
func (s *Set) AddRunfiles(ctx context.Context, manifest []render.Runfile, treeDir string, progress func(done, total int64)) (*Built, error) {
	if len(manifest) == 0 {
		return nil, fmt.Errorf("images: the render has no runfiles manifest: assemble it first (hookbox render --runfiles)")
	}
	manifestDigest, _, err := canonjson.Digest(manifest)
	if err != nil {
		return nil, fmt.Errorf("images: the runfiles manifest: %w", err)
	}
	entries := make([]streamEntry, 0, len(manifest))
	var total int64
	for _, e := range manifest {
		se := streamEntry{path: e.Path, mode: runfiles.TreeMode(e).Perm()}
		switch e.Type {
		case render.RunfileDir:
			se.typ = Dir
		case render.RunfileSymlink:
			se.typ, se.target = Symlink, e.Target
		case render.RunfileFile:
			p := filepath.Join(treeDir, filepath.FromSlash(e.Path))
			se.typ, se.size, se.sha256 = File, e.Size, e.SHA256
			// O_NOFOLLOW: a tree file is a regular file, never a link.
			se.open = func() (io.ReadCloser, error) { return os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0) }
			total += e.Size
		default:
			return nil, fmt.Errorf("images: runfile %s has type %q", e.Path, e.Type)
		}
		entries = append(entries, se)
	}
	var layerProgress func(int64)
	if progress != nil {
		layerProgress = func(done int64) { progress(done, total) }
	}
	layer, err := s.writeLayer(ctx, entries, runfiles.TreeModTime(), layerProgress)
	if err != nil {
		return nil, fmt.Errorf("%w (runfiles tree %s)", err, treeDir)
	}
	hexDigest := strings.TrimPrefix(manifestDigest, "sha256:")
	created := ModTime()
	cfg := ocispec.Image{
		Created: &created,
		Config:  ocispec.ImageConfig{Labels: map[string]string{RunfilesLabel: hexDigest}},
		History: []ocispec.History{{
			Created:   &created,
			CreatedBy: "hookbox images.Set.AddRunfiles",
			Comment:   "runfiles tree " + manifestDigest + ", mounted read-only as an image volume",
		}},
	}
	return s.addImage(&Built{Kind: KindRunfiles, RunfilesDigest: manifestDigest, Platform: hostPlatform()}, cfg, layer)
}

// hostPlatform is linux on the architecture hookbox was built for, as
// NewDefinition records it: containerd only unpacks an image whose
// platform matches the node's, and the programs are this host's.
func hostPlatform() ocispec.Platform {
	return ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH}
}
