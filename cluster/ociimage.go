package cluster

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// imageAnnotationName is the index annotation containerd's import takes as
// the image's full name (containerd's images.AnnotationImageName).
const imageAnnotationName = "io.containerd.image.name"

// An Image is a one-layer OCI image made from a directory, as an OCI image
// layout tar that `ctr images import` reads.
type Image struct {
	// Name is the containerd image name the layout carries. A name ending in
	// "@" gets the manifest digest appended, so that a pod can refer to the
	// image by digest (the CRI resolves NAME@sha256:… by that exact name).
	Name           string
	ManifestDigest digest.Digest
	Layout         []byte
}

// ImageFromDir makes an image whose single layer is the tree under dir:
// every entry owned by 0:0, with its mode (permission bits only) and a
// fixed modification time, in path order, so the same tree gives the same
// digest. Regular files, directories and symlinks are kept; anything else
// is an error.
func ImageFromDir(dir, name string, config ocispec.ImageConfig) (*Image, error) {
	layer, err := layerFromDir(dir)
	if err != nil {
		return nil, err
	}
	layerDigest := digest.FromBytes(layer)
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
		Layers:    []ocispec.Descriptor{{MediaType: ocispec.MediaTypeImageLayer, Digest: layerDigest, Size: int64(len(layer))}},
	}
	manifestJSON, err := json.Marshal(manifest)
	if err != nil {
		return nil, err
	}
	img := &Image{Name: name, ManifestDigest: digest.FromBytes(manifestJSON)}
	if name != "" && name[len(name)-1] == '@' {
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
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files := []struct {
		name string
		data []byte
	}{
		{ocispec.ImageLayoutFile, []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", indexJSON},
		{blobPath(manifest.Config.Digest), configJSON},
		{blobPath(layerDigest), layer},
		{blobPath(img.ManifestDigest), manifestJSON},
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: imageModTime, Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	img.Layout = buf.Bytes()
	return img, nil
}

// imageModTime is every layer entry's modification time.
var imageModTime = time.Unix(0, 0).UTC()

func blobPath(d digest.Digest) string { return "blobs/" + d.Algorithm().String() + "/" + d.Encoded() }

func layerFromDir(dir string) ([]byte, error) {
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
		return nil, fmt.Errorf("reading image tree %s: %w", dir, err)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return nil, err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(fi.Mode().Perm()), ModTime: imageModTime, Format: tar.FormatPAX}
		var data []byte
		switch {
		case fi.Mode().IsRegular():
			h.Typeflag = tar.TypeReg
			if data, err = os.ReadFile(p); err != nil {
				return nil, err
			}
			h.Size = int64(len(data))
		case fi.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case fi.Mode()&fs.ModeSymlink != 0:
			h.Typeflag = tar.TypeSymlink
			if h.Linkname, err = os.Readlink(p); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("image tree %s: %s is neither a file, a directory nor a symlink", dir, p)
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
