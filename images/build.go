package images

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Repository is the name every base image has before its tag.
const Repository = "hookbox.dev/base"

// Image is a built base image: an OCI image with one layer, held in memory
// (it is a few hundred KiB, most of it the CA bundle).
//
// The layer is an uncompressed tar (media type
// application/vnd.oci.image.layer.v1.tar), so its digest is its diff_id and
// the image digest depends on archive/tar's header encoding only, not on a
// compressor whose output may change between Go releases.
type Image struct {
	// Name is Repository + ":" + the first 12 hex digits of ManifestDigest,
	// so a changed image never reuses a name.
	Name           string
	ManifestDigest digest.Digest
	ConfigDigest   digest.Digest
	// LayerDigest is the layer's digest, equal to its diff_id.
	LayerDigest digest.Digest
	Platform    ocispec.Platform

	index, manifest, config, layer []byte
}

// Build validates def and builds its image. The same def always gives the
// same bytes.
func Build(def Definition) (*Image, error) {
	if err := def.Validate(); err != nil {
		return nil, err
	}
	layer, err := layerTar(def.Entries)
	if err != nil {
		return nil, err
	}
	layerDigest := digest.FromBytes(layer)

	cfg := def.ImageConfig()
	cfg.History = []ocispec.History{{
		Created:   cfg.Created,
		CreatedBy: "hookbox images.Build",
		Comment:   "base image: identity files and empty mount points, nothing executable",
	}}
	layerDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: layerDigest, Size: int64(len(layer))}
	config, manifest, err := encodeImage(cfg, layerDesc)
	if err != nil {
		return nil, err
	}
	configDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromBytes(config), Size: int64(len(config))}
	manifestDigest := digest.FromBytes(manifest)
	name := Repository + ":" + manifestDigest.Encoded()[:12]
	platform := def.Platform

	index, err := json.Marshal(ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{{
			MediaType:   ocispec.MediaTypeImageManifest,
			Digest:      manifestDigest,
			Size:        int64(len(manifest)),
			Platform:    &platform,
			Annotations: map[string]string{ocispec.AnnotationRefName: name},
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("images: encoding the index: %w", err)
	}
	return &Image{
		Name:           name,
		ManifestDigest: manifestDigest,
		ConfigDigest:   configDesc.Digest,
		LayerDigest:    layerDigest,
		Platform:       platform,
		index:          index,
		manifest:       manifest,
		config:         config,
		layer:          layer,
	}, nil
}

// encodeImage encodes the config and manifest of a one-layer image. The
// layer is uncompressed, so its digest is also its diff_id.
func encodeImage(cfg ocispec.Image, layer ocispec.Descriptor) (config, manifest []byte, err error) {
	cfg.RootFS = ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{layer.Digest}}
	config, err = json.Marshal(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("images: encoding the image config: %w", err)
	}
	manifest, err = json.Marshal(ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromBytes(config), Size: int64(len(config))},
		Layers:    []ocispec.Descriptor{layer},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("images: encoding the manifest: %w", err)
	}
	return config, manifest, nil
}

// blob is one content-addressed blob of the image.
type blob struct {
	digest digest.Digest
	data   []byte
}

// blobs returns manifest, config and layer, sorted by digest.
func (img *Image) blobs() []blob {
	out := []blob{
		{img.ManifestDigest, img.manifest},
		{img.ConfigDigest, img.config},
		{img.LayerDigest, img.layer},
	}
	slices.SortFunc(out, func(a, b blob) int { return strings.Compare(string(a.digest), string(b.digest)) })
	return out
}

// Blob returns the blob with digest d (manifest, config or layer), or false.
// The bytes are the image's own: do not modify them.
func (img *Image) Blob(d digest.Digest) ([]byte, bool) {
	for _, b := range img.blobs() {
		if b.digest == d {
			return b.data, true
		}
	}
	return nil, false
}

// Layer returns the uncompressed layer tar. Do not modify it.
func (img *Image) Layer() []byte { return img.layer }

// Config returns the image config JSON. Do not modify it.
func (img *Image) Config() []byte { return img.config }

// WriteLayoutTar writes the image as a tar of an OCI image layout
// (oci-layout, index.json, blobs/sha256/…), the stream containerd's Import
// reads. The stream is deterministic like the image. index.json names the
// manifest with the annotation org.opencontainers.image.ref.name = Name.
func (img *Image) WriteLayoutTar(w io.Writer) error {
	layout, err := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	if err != nil {
		return fmt.Errorf("images: encoding oci-layout: %w", err)
	}
	tw := tar.NewWriter(w)
	put := func(name string, data []byte) error {
		return writeEntry(tw, name, File, 0o644, data)
	}
	if err := put(ocispec.ImageLayoutFile, layout); err != nil {
		return err
	}
	if err := put(ocispec.ImageIndexFile, img.index); err != nil {
		return err
	}
	for _, d := range []string{ocispec.ImageBlobsDir + "/", ocispec.ImageBlobsDir + "/sha256/"} {
		if err := writeEntry(tw, d, Dir, 0o755, nil); err != nil {
			return err
		}
	}
	for _, b := range img.blobs() {
		if err := put(ocispec.ImageBlobsDir+"/sha256/"+b.digest.Encoded(), b.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("images: writing the layout tar: %w", err)
	}
	return nil
}

// LayoutTar returns the WriteLayoutTar stream as bytes.
func (img *Image) LayoutTar() ([]byte, error) {
	var buf bytes.Buffer
	if err := img.WriteLayoutTar(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// layerTar writes entries as the layer: USTAR headers only (every name fits
// 100 bytes, so no PAX or GNU records appear, and a longer one is an error
// rather than a silent format change), names relative to / with a trailing
// slash on directories, owner 0:0 with empty user and group names, mtime
// SourceDateEpoch, no access or change times.
func layerTar(entries []Entry) ([]byte, error) {
	// Sized once: every run builds the base image (the CA bundle is most
	// of it), and a buffer grown by doubling copies it a dozen times.
	size := 2 * 512 // the end-of-archive blocks
	for _, e := range entries {
		size += 512 + (len(e.Data)+511)/512*512
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	tw := tar.NewWriter(buf)
	for _, e := range entries {
		name := strings.TrimPrefix(e.Path, "/")
		if e.Type == Dir {
			name += "/"
		}
		if err := writeEntry(tw, name, e.Type, e.Mode, e.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("images: writing the layer: %w", err)
	}
	return buf.Bytes(), nil
}

func writeEntry(tw *tar.Writer, name string, typ EntryType, mode fs.FileMode, data []byte) error {
	hdr := &tar.Header{
		Name:    name,
		Mode:    UnixMode(mode),
		ModTime: ModTime(),
		Format:  tar.FormatUSTAR,
	}
	switch typ {
	case Dir:
		hdr.Typeflag = tar.TypeDir
	case File:
		hdr.Typeflag = tar.TypeReg
		hdr.Size = int64(len(data))
	default:
		return fmt.Errorf("images: %s: cannot write entry type %v", name, typ)
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("images: tar header for %s: %w", name, err)
	}
	if _, err := tw.Write(data); err != nil {
		return fmt.Errorf("images: tar data for %s: %w", name, err)
	}
	return nil
}
