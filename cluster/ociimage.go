package cluster

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// imageAnnotationName is the index annotation containerd's import takes as
// the image's full name (containerd's images.AnnotationImageName).
const imageAnnotationName = "io.containerd.image.name"

// An Image is a one-layer OCI image made from a directory, written as an
// OCI image layout tar that `ctr images import` reads.
type Image struct {
	// Name is the containerd image name the layout carries. A name ending in
	// "@" gets the manifest digest appended, so that a pod can refer to the
	// image by digest (the CRI resolves NAME@sha256:… by that exact name).
	Name           string
	ManifestDigest digest.Digest
	// LayoutTar is the path of the OCI image layout tar.
	LayoutTar string
}

// ImageFromDir makes an image whose single layer is the tree under dir and
// writes its layout tar into outDir: every entry owned by 0:0, with its
// mode (permission bits only) and a fixed modification time, in path
// order, so the same tree gives the same digest. Regular files,
// directories and symlinks are kept; anything else is an error. The layer
// is streamed through a file, so a tree of any size fits.
func ImageFromDir(dir, name string, config ocispec.ImageConfig, outDir string) (*Image, error) {
	if rel, err := filepath.Rel(dir, outDir); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return nil, fmt.Errorf("image tree %s holds the output directory %s: write the image elsewhere", dir, outDir)
	}
	layerFile, err := os.CreateTemp(outDir, "layer-*.tar")
	if err != nil {
		return nil, err
	}
	defer os.Remove(layerFile.Name())
	defer layerFile.Close()
	digester := digest.Canonical.Digester()
	size, err := writeLayer(io.MultiWriter(layerFile, digester.Hash()), dir)
	if err != nil {
		return nil, err
	}
	layerDigest := digester.Digest()
	imgConfig := ocispec.Image{
		Platform: ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Config:   config,
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{layerDigest}},
	}
	configJSON, err := json.Marshal(imgConfig)
	if err != nil {
		return nil, err
	}
	manifest := ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromBytes(configJSON), Size: int64(len(configJSON))},
		Layers:    []ocispec.Descriptor{{MediaType: ocispec.MediaTypeImageLayer, Digest: layerDigest, Size: size}},
	}
	manifestJSON, err := json.Marshal(manifest)
	if err != nil {
		return nil, err
	}
	img := &Image{Name: name, ManifestDigest: digest.FromBytes(manifestJSON)}
	if strings.HasSuffix(name, "@") {
		img.Name = name + img.ManifestDigest.String()
	}
	index := ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{{
			MediaType:   ocispec.MediaTypeImageManifest,
			Digest:      img.ManifestDigest,
			Size:        int64(len(manifestJSON)),
			Platform:    &imgConfig.Platform,
			Annotations: map[string]string{imageAnnotationName: img.Name},
		}},
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return nil, err
	}

	out, err := os.CreateTemp(outDir, "image-*.tar")
	if err != nil {
		return nil, err
	}
	defer out.Close()
	tw := tar.NewWriter(out)
	add := func(name string, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: imageModTime, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := io.Copy(tw, r)
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{
		{ocispec.ImageLayoutFile, []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", indexJSON},
		{blobPath(manifest.Config.Digest), configJSON},
		{blobPath(img.ManifestDigest), manifestJSON},
	} {
		if err := add(f.name, int64(len(f.data)), bytes.NewReader(f.data)); err != nil {
			return nil, err
		}
	}
	if _, err := layerFile.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	if err := add(blobPath(layerDigest), size, layerFile); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := out.Close(); err != nil {
		return nil, err
	}
	img.LayoutTar = out.Name()
	return img, nil
}

// imageModTime is every layer entry's modification time.
var imageModTime = time.Unix(0, 0).UTC()

func blobPath(d digest.Digest) string { return "blobs/" + d.Algorithm().String() + "/" + d.Encoded() }

// writeLayer writes the layer tar of the tree under dir to w and returns
// its size.
func writeLayer(w io.Writer, dir string) (int64, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("reading image tree %s: %w", dir, err)
	}
	sort.Strings(paths)
	counter := &countingWriter{w: w}
	tw := tar.NewWriter(counter)
	for _, p := range paths {
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return 0, err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(fi.Mode().Perm()), ModTime: imageModTime, Format: tar.FormatPAX}
		switch {
		case fi.Mode().IsRegular():
			h.Typeflag, h.Size = tar.TypeReg, fi.Size()
		case fi.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case fi.Mode()&fs.ModeSymlink != 0:
			h.Typeflag = tar.TypeSymlink
			if h.Linkname, err = os.Readlink(p); err != nil {
				return 0, err
			}
		default:
			return 0, fmt.Errorf("image tree %s: %s is neither a file, a directory nor a symlink", dir, p)
		}
		if err := tw.WriteHeader(h); err != nil {
			return 0, err
		}
		if h.Typeflag == tar.TypeReg {
			if err := copyFile(tw, p); err != nil {
				return 0, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return 0, err
	}
	return counter.n, nil
}

func copyFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
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
