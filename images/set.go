package images

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Kind says what an image is for. It is the last element of the image's
// repository: hookbox.dev/<kind>, or REPO/<kind> once pushed.
type Kind string

// The images a Kubernetes Job of a render references (render/k8s Options).
const (
	// KindBase is the base image (Build): the engine container's root.
	KindBase Kind = "base"
	// KindRunfiles holds one runfiles tree (AddRunfiles), mounted as an
	// image volume.
	KindRunfiles Kind = "runfiles"
	// KindSeed holds hookbox-seed, which the seed init containers run.
	KindSeed Kind = "seed"
	// KindProxy holds the hookbox binary, which the egress proxy sidecar
	// of an allowlist render runs.
	KindProxy Kind = "proxy"
)

// Registry is the registry part of every local image name.
const Registry = "hookbox.dev"

// Built is one image of a Set. Its blobs are in the Set's directory.
type Built struct {
	Kind Kind
	// Name is Registry/Kind:Tag, the name it gets in containerd.
	Name           string
	ManifestDigest digest.Digest
	Platform       ocispec.Platform
	// RunfilesDigest is the runfiles manifest digest of a KindRunfiles
	// image ("sha256:<hex>"): the tree it holds.
	RunfilesDigest string
	// Size is the bytes of its manifest, config and layer.
	Size int64
}

// Tag is the first 12 hex digits of the manifest digest, so a changed
// image never reuses a tag.
func (b *Built) Tag() string { return b.ManifestDigest.Encoded()[:12] }

// Repository is where the image goes under repo (REGISTRY/PATH, as given
// to Push): repo/<kind>; an empty repo gives the local one,
// Registry/<kind>.
func (b *Built) Repository(repo string) string {
	if repo == "" {
		repo = Registry
	}
	return repo + "/" + string(b.Kind)
}

// Reference is the image pinned by digest, Repository(repo):Tag@sha256:…,
// as render/k8s Options want it.
func (b *Built) Reference(repo string) string {
	return b.Repository(repo) + ":" + b.Tag() + "@" + b.ManifestDigest.String()
}

// DigestName is the image's repository pinned by digest alone,
// Repository("")@sha256:…: the second name ImportSet gives it, the one a
// kubelet's CRI resolves Reference("") by.
func (b *Built) DigestName() string { return b.Repository("") + "@" + b.ManifestDigest.String() }

// Set is a build of several images into one OCI image layout directory of
// its own (oci-layout, index.json naming each image by
// org.opencontainers.image.ref.name, blobs/sha256/…). Write it as a tar
// (WriteLayoutTar), import it into containerd (ImportSet) or push it (Push);
// Close removes the directory.
//
// Every image has one uncompressed layer (media type
// application/vnd.oci.image.layer.v1.tar) whose entries are owned by 0:0
// with fixed modification times and modes, so, as for the base image, a
// manifest digest depends on the image's inputs only: the same tree or the
// same program file gives the same digest in any directory, on any machine
// of the same architecture.
type Set struct {
	dir    string
	layout layout.Path
	images []*Built
}

// NewSet creates an empty Set in a new directory under parent, mode 0700:
// a runfiles layer holds copies of files the host may keep from other users.
func NewSet(parent string) (*Set, error) {
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	dir, err := os.MkdirTemp(parent, "image-build-")
	if err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("images: creating the OCI layout %s: %w", dir, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, ocispec.ImageBlobsDir, "sha256"), 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("images: %w", err)
	}
	return &Set{dir: dir, layout: lp}, nil
}

// Dir is the Set's OCI image layout directory.
func (s *Set) Dir() string { return s.dir }

// Images are the images added, in order, each once.
func (s *Set) Images() []*Built { return s.images }

// Close removes the Set's directory.
func (s *Set) Close() error { return os.RemoveAll(s.dir) }

// AddBase adds the base image img, as Build made it.
func (s *Set) AddBase(img *Image) (*Built, error) {
	for _, b := range img.blobs() {
		if err := s.writeBlob(b.digest, b.data); err != nil {
			return nil, err
		}
	}
	return s.add(&Built{Kind: KindBase, Name: img.Name, ManifestDigest: img.ManifestDigest, Platform: img.Platform,
		Size: int64(len(img.manifest) + len(img.config) + len(img.layer))}, int64(len(img.manifest)))
}

// addImage writes the config and manifest of a one-layer image whose layer
// is already in the layout and adds the image.
func (s *Set) addImage(b *Built, cfg ocispec.Image, layer ocispec.Descriptor) (*Built, error) {
	cfg.Platform = b.Platform
	config, manifest, err := encodeImage(cfg, layer)
	if err != nil {
		return nil, err
	}
	b.ManifestDigest = digest.FromBytes(manifest)
	b.Name = b.Repository("") + ":" + b.Tag()
	b.Size = int64(len(manifest)+len(config)) + layer.Size
	for _, blob := range [][]byte{config, manifest} {
		if err := s.writeBlob(digest.FromBytes(blob), blob); err != nil {
			return nil, err
		}
	}
	return s.add(b, int64(len(manifest)))
}

// add names b in index.json, once.
func (s *Set) add(b *Built, manifestSize int64) (*Built, error) {
	for _, have := range s.images {
		if have.Name == b.Name {
			return have, nil
		}
	}
	hash, err := v1.NewHash(b.ManifestDigest.String())
	if err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	err = s.layout.AppendDescriptor(v1.Descriptor{
		MediaType:   ocispec.MediaTypeImageManifest,
		Size:        manifestSize,
		Digest:      hash,
		Platform:    &v1.Platform{OS: b.Platform.OS, Architecture: b.Platform.Architecture, Variant: b.Platform.Variant},
		Annotations: map[string]string{ocispec.AnnotationRefName: b.Name},
	})
	if err != nil {
		return nil, fmt.Errorf("images: adding %s to the OCI layout: %w", b.Name, err)
	}
	s.images = append(s.images, b)
	return b, nil
}

func (s *Set) blobPath(d digest.Digest) string {
	return filepath.Join(s.dir, ocispec.ImageBlobsDir, d.Algorithm().String(), d.Encoded())
}

func (s *Set) writeBlob(d digest.Digest, data []byte) error {
	hash, err := v1.NewHash(d.String())
	if err != nil {
		return fmt.Errorf("images: %w", err)
	}
	if err := s.layout.WriteBlob(hash, io.NopCloser(bytes.NewReader(data))); err != nil {
		return fmt.Errorf("images: writing blob %s: %w", d, err)
	}
	return nil
}

// writeLayer streams entries into a new layer blob, hashing it on the way
// (one pass over the files), and returns its descriptor.
func (s *Set) writeLayer(ctx context.Context, entries []streamEntry, mtime time.Time, progress func(int64)) (ocispec.Descriptor, error) {
	tmp, err := os.CreateTemp(s.dir, "layer-")
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("images: %w", err)
	}
	defer os.Remove(tmp.Name()) // gone after the rename
	h := sha256.New()
	counted := &countingWriter{w: io.MultiWriter(tmp, h)}
	err = writeLayer(ctx, counted, entries, mtime, progress)
	if closeErr := tmp.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	d := digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(h.Sum(nil)))
	if err := os.Rename(tmp.Name(), s.blobPath(d)); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("images: %w", err)
	}
	return ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: d, Size: counted.n}, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// WriteLayoutTar writes the Set as a tar of its OCI image layout, the
// stream containerd's Import reads (ctr images import; podman load takes
// it as an oci-archive): oci-layout, index.json, blobs/, blobs/sha256/ and the blobs in
// digest order, each entry owned by 0:0 with mtime SourceDateEpoch, so the
// same images give the same bytes.
func (s *Set) WriteLayoutTar(w io.Writer) error {
	files := []string{ocispec.ImageLayoutFile, ocispec.ImageIndexFile}
	blobDir := filepath.Join(s.dir, ocispec.ImageBlobsDir, "sha256")
	blobs, err := os.ReadDir(blobDir)
	if err != nil {
		return fmt.Errorf("images: %w", err)
	}
	entries := make([]streamEntry, 0, len(files)+2+len(blobs))
	addFile := func(rel string) error {
		p := filepath.Join(s.dir, rel)
		size, sum, err := fileDigest(p)
		if err != nil {
			return err
		}
		entries = append(entries, streamEntry{path: "/" + filepath.ToSlash(rel), typ: File, mode: 0o644, size: size, sha256: sum,
			open: func() (io.ReadCloser, error) { return os.Open(p) }})
		return nil
	}
	for _, f := range files {
		if err := addFile(f); err != nil {
			return err
		}
	}
	entries = append(entries,
		streamEntry{path: "/" + ocispec.ImageBlobsDir, typ: Dir, mode: 0o755},
		streamEntry{path: "/" + ocispec.ImageBlobsDir + "/sha256", typ: Dir, mode: 0o755})
	for _, b := range blobs { // ReadDir sorts by name: digest order
		rel := filepath.Join(ocispec.ImageBlobsDir, "sha256", b.Name())
		fi, err := b.Info()
		if err != nil {
			return fmt.Errorf("images: %w", err)
		}
		// A blob's name is its digest: checked as it is copied.
		p := filepath.Join(s.dir, rel)
		entries = append(entries, streamEntry{path: "/" + filepath.ToSlash(rel), typ: File, mode: 0o644, size: fi.Size(), sha256: b.Name(),
			open: func() (io.ReadCloser, error) { return os.Open(p) }})
	}
	return writeLayer(context.Background(), w, entries, ModTime(), nil)
}

// fileDigest reads p whole: its size and sha256 (lowercase hex).
func fileDigest(p string) (int64, string, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, "", fmt.Errorf("images: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", fmt.Errorf("images: %w", err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
