package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/runfiles"
)

func newSet(t *testing.T) *Set {
	t.Helper()
	s, err := NewSet(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// fakeTree writes a small tree and its manifest, as runfiles.Assemble
// would record them: directories, an executable, a private file and a
// symlink.
func fakeTree(t *testing.T) ([]render.Runfile, string) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]struct {
		mode uint32
		data string
	}{
		"/opt/tool/bin/run": {0o755, "#!/opt/tool/bin/interp\n"},
		"/opt/tool/secret":  {0o640, "kept from others\n"},
	}
	manifest := []render.Runfile{
		{Path: "/opt", Type: render.RunfileDir, Mode: 0o755},
		{Path: "/opt/tool", Type: render.RunfileDir, Mode: 0o700},
		{Path: "/opt/tool/bin", Type: render.RunfileDir, Mode: 0o755},
		{Path: "/opt/tool/bin/run", Type: render.RunfileFile},
		{Path: "/opt/tool/lib", Type: render.RunfileSymlink, Mode: 0o777, Target: "bin"},
		{Path: "/opt/tool/secret", Type: render.RunfileFile},
	}
	for i, e := range manifest {
		f, ok := files[e.Path]
		if !ok {
			continue
		}
		manifest[i].Mode, manifest[i].Size, manifest[i].SHA256 = f.mode, int64(len(f.data)), sha256Hex([]byte(f.data))
		p := filepath.Join(dir, e.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.data), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	return manifest, dir
}

func addRunfiles(t *testing.T, s *Set, manifest []render.Runfile, tree string) *Built {
	t.Helper()
	b, err := s.AddRunfiles(context.Background(), manifest, tree, nil)
	if err != nil {
		t.Fatalf("AddRunfiles: %v", err)
	}
	return b
}

// layoutImage reads one image of the Set back through
// go-containerregistry's layout package, and checks it the way a registry
// client would (every digest, size and diff_id).
func layoutImage(t *testing.T, dir string, b *Built) (manifest ocispec.Manifest, config ocispec.Image, layer []byte) {
	t.Helper()
	index, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := hashOf(b)
	img, err := index.Image(h)
	if err != nil {
		t.Fatal(err)
	}
	// validate reads layer bytes as gzip: Fast, and the uncompressed
	// layer's digest (its diff_id too) is checked below.
	if err := validate.Image(img, validate.Fast); err != nil {
		t.Fatalf("%s does not validate: %v", b.Name, err)
	}
	raw, _ := img.RawManifest()
	rawConfig, _ := img.RawConfigFile()
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(rawConfig, &config); err != nil {
		t.Fatal(err)
	}
	layers, _ := img.Layers()
	if len(layers) != 1 {
		t.Fatalf("%s has %d layers", b.Name, len(layers))
	}
	rc, _ := layers[0].Compressed()
	defer rc.Close()
	layer, err = io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if d := "sha256:" + sha256Hex(layer); d != m0(manifest) || len(config.RootFS.DiffIDs) != 1 || d != config.RootFS.DiffIDs[0].String() {
		t.Fatalf("%s: layer sha256 %s, manifest %s, diff_ids %v", b.Name, d, m0(manifest), config.RootFS.DiffIDs)
	}
	return manifest, config, layer
}

func TestRunfilesImage(t *testing.T) {
	manifest, tree := fakeTree(t)
	s := newSet(t)
	b := addRunfiles(t, s, manifest, tree)
	if b.Kind != KindRunfiles || b.Name != "hookbox.dev/runfiles:"+b.ManifestDigest.Encoded()[:12] {
		t.Errorf("built %+v", b)
	}
	m, cfg, layer := layoutImage(t, s.Dir(), b)
	if m.MediaType != ocispec.MediaTypeImageManifest || m.Layers[0].MediaType != ocispec.MediaTypeImageLayer {
		t.Errorf("media types %s, %s: want an OCI manifest with an uncompressed layer", m.MediaType, m.Layers[0].MediaType)
	}
	wantDigest := strings.TrimPrefix(b.RunfilesDigest, "sha256:")
	if cfg.Config.Labels[RunfilesLabel] != wantDigest || cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH {
		t.Errorf("config labels %v platform %s/%s", cfg.Config.Labels, cfg.OS, cfg.Architecture)
	}

	type want struct {
		typ    byte
		mode   int64
		target string
		data   string
	}
	wants := map[string]want{
		"opt/":             {tar.TypeDir, 0o555, "", ""},
		"opt/tool/":        {tar.TypeDir, 0o555, "", ""},
		"opt/tool/bin/":    {tar.TypeDir, 0o555, "", ""},
		"opt/tool/bin/run": {tar.TypeReg, 0o555, "", "#!/opt/tool/bin/interp\n"},
		"opt/tool/lib":     {tar.TypeSymlink, 0o777, "bin", ""},
		"opt/tool/secret":  {tar.TypeReg, 0o400, "", "kept from others\n"}, // 0640: others get nothing
	}
	var names []string
	for _, e := range readTar(t, layer) {
		h := e.hdr
		names = append(names, h.Name)
		w, ok := wants[h.Name]
		if !ok {
			t.Errorf("unexpected entry %s", h.Name)
			continue
		}
		if h.Typeflag != w.typ || h.Mode != w.mode || h.Linkname != w.target || string(e.data) != w.data {
			t.Errorf("%s: type %c mode %o link %q data %q, want %c %o %q %q", h.Name, h.Typeflag, h.Mode, h.Linkname, e.data, w.typ, w.mode, w.target, w.data)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(runfiles.TreeModTime()) {
			t.Errorf("%s: owner %d:%d (%q:%q) mtime %v, want 0:0 and %v", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime, runfiles.TreeModTime())
		}
	}
	if len(names) != len(wants) {
		t.Errorf("entries %q", names)
	}
}

// TestRunfilesImageGoldenDigest pins the encoding: the digest follows from
// the manifest, so a change here changes every runfiles image.
func TestRunfilesImageGoldenDigest(t *testing.T) {
	testenv.Require(t, testenv.Requirement{Name: "amd64", Check: func() string {
		if runtime.GOARCH != "amd64" {
			return "the golden digest is recorded for amd64 (the platform is in the config); running on " + runtime.GOARCH
		}
		return ""
	}})
	manifest, tree := fakeTree(t)
	b := addRunfiles(t, newSet(t), manifest, tree)
	const want = "sha256:4631cb585f66b54cc08d7bc8269ad3d3f76800a3fb4b5a446da20e939f04386a"
	if b.ManifestDigest.String() != want {
		t.Errorf("manifest digest = %s, want %s (if the image was changed on purpose, update want)", b.ManifestDigest, want)
	}
}

func TestRunfilesImageRefusesChangedTree(t *testing.T) {
	manifest, tree := fakeTree(t)
	secret := filepath.Join(tree, "opt/tool/secret")
	for name, content := range map[string]string{"same size": "KEPT from others\n", "longer": "kept from others\nand more\n", "shorter": "kept"} {
		os.Chmod(secret, 0o644)
		if err := os.WriteFile(secret, []byte(content), 0o444); err != nil {
			t.Fatal(err)
		}
		_, err := newSet(t).AddRunfiles(context.Background(), manifest, tree, nil)
		if !errors.Is(err, errContentChanged) || !strings.Contains(err.Error(), "/opt/tool/secret") {
			t.Errorf("%s: AddRunfiles = %v, want the changed file named", name, err)
		}
	}
	// A symlink where the tree has a file is not followed.
	manifest, tree = fakeTree(t)
	run := filepath.Join(tree, "opt/tool/bin/run")
	os.Remove(run)
	os.Symlink(filepath.Join(tree, "opt/tool/secret"), run)
	if _, err := newSet(t).AddRunfiles(context.Background(), manifest, tree, nil); err == nil {
		t.Error("a symlink in place of a tree file was followed")
	}
	if _, err := newSet(t).AddRunfiles(context.Background(), nil, tree, nil); err == nil {
		t.Error("an empty manifest gave an image")
	}
}

// TestImagesReproducible: the same programs assembled into two stores and
// built into two sets in other directories give the same runfiles and seed
// image digests, and byte-identical layout tars.
func TestImagesReproducible(t *testing.T) {
	program := testenv.StaticELF(t)
	build := func() (*Set, []byte) {
		store, err := runfiles.OpenStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		res, err := runfiles.Assemble(context.Background(), store, []string{program}, runfiles.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s := newSet(t)
		addRunfiles(t, s, res.Manifest, res.TreeDir)
		if _, err := s.AddProgram(context.Background(), KindSeed, program); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AddBase(mustBuild(t, NewDefinition(testCA))); err != nil {
			t.Fatal(err)
		}
		var tarball bytes.Buffer
		if err := s.WriteLayoutTar(&tarball); err != nil {
			t.Fatal(err)
		}
		return s, tarball.Bytes()
	}
	a, tarA := build()
	b, tarB := build()
	if a.Dir() == b.Dir() {
		t.Fatal("both sets in one directory")
	}
	for i, img := range a.Images() {
		other := b.Images()[i]
		t.Logf("%s %s", img.Kind, img.ManifestDigest)
		if img.ManifestDigest != other.ManifestDigest || img.Name != other.Name {
			t.Errorf("%s: %s vs %s", img.Kind, img.ManifestDigest, other.ManifestDigest)
		}
	}
	if !bytes.Equal(tarA, tarB) {
		t.Error("the layout tars differ")
	}
}

func TestProgramImage(t *testing.T) {
	program := testenv.StaticELF(t)
	s := newSet(t)
	b, err := s.AddProgram(context.Background(), KindSeed, program)
	if err != nil {
		t.Fatal(err)
	}
	_, cfg, layer := layoutImage(t, s.Dir(), b)
	if cfg.Config.User != "65532:65532" || cfg.Config.Labels[ProgramLabel] != "seed" || cfg.Config.Entrypoint != nil {
		t.Errorf("config %+v", cfg.Config)
	}
	data, _ := os.ReadFile(program)
	var got []string
	for _, e := range readTar(t, layer) {
		got = append(got, e.hdr.Name)
		if e.hdr.Name == strings.TrimPrefix(SeedProgramPath, "/") && (e.hdr.Mode != 0o555 || !bytes.Equal(e.data, data)) {
			t.Errorf("program: mode %o, %d bytes (want 0555, the host file's %d bytes)", e.hdr.Mode, len(e.data), len(data))
		}
	}
	if !slices.Equal(got, []string{"usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/hookbox-seed"}) {
		t.Errorf("entries %q", got)
	}

	proxy, err := s.AddProgram(context.Background(), KindProxy, program)
	if err != nil || proxy.ManifestDigest == b.ManifestDigest || proxy.Name != "hookbox.dev/proxy:"+proxy.Tag() {
		t.Errorf("proxy image %+v %v: must differ from the seed image holding the same bytes", proxy, err)
	}
	notELF := filepath.Join(t.TempDir(), "script")
	os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755)
	if _, err := s.AddProgram(context.Background(), KindSeed, notELF); err == nil || !strings.Contains(err.Error(), "not an ELF") {
		t.Errorf("a script as the seed program: %v", err)
	}
	if _, err := s.AddProgram(context.Background(), KindSeed, filepath.Join(t.TempDir(), SeedBinary)); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Errorf("a missing seed program: %v, want how to build it", err)
	}
	if _, err := s.AddProgram(context.Background(), KindBase, program); err == nil {
		t.Error("a base image from a program")
	}
}

func TestLayoutTarImports(t *testing.T) {
	manifest, tree := fakeTree(t)
	s := newSet(t)
	base, _ := s.AddBase(mustBuild(t, NewDefinition(testCA)))
	rf := addRunfiles(t, s, manifest, tree)
	if again := addRunfiles(t, s, manifest, tree); again != rf || len(s.Images()) != 2 {
		t.Errorf("the same runfiles twice gave %d images", len(s.Images()))
	}
	var buf bytes.Buffer
	if err := s.WriteLayoutTar(&buf); err != nil {
		t.Fatal(err)
	}
	// Unpack the tar and read it as a layout: what containerd's importer
	// gets.
	dir := t.TempDir()
	for _, e := range readTar(t, buf.Bytes()) {
		h := e.hdr
		if h.Uid != 0 || !h.ModTime.Equal(ModTime()) {
			t.Errorf("%s: owner %d mtime %v", h.Name, h.Uid, h.ModTime)
		}
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			os.MkdirAll(p, 0o755)
			continue
		}
		if err := os.WriteFile(p, e.data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var index ocispec.Index
	raw, _ := os.ReadFile(filepath.Join(dir, ocispec.ImageIndexFile))
	if err := json.Unmarshal(raw, &index); err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, m := range index.Manifests {
		refs = append(refs, m.Annotations[ocispec.AnnotationRefName])
	}
	if !slices.Equal(refs, []string{base.Name, rf.Name}) {
		t.Errorf("index names %q, want %q", refs, []string{base.Name, rf.Name})
	}
	for _, b := range []*Built{base, rf} {
		layoutImage(t, dir, b)
	}
}

// TestPushPullSameDigest pushes a set to a registry on loopback
// (go-containerregistry's in-process registry), pulls each image back and
// gets the same digest and bytes.
func TestPushPullSameDigest(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	repo := u.Host + "/team/hookbox"

	manifest, tree := fakeTree(t)
	s := newSet(t)
	s.AddBase(mustBuild(t, NewDefinition(testCA)))
	addRunfiles(t, s, manifest, tree)
	if _, err := s.AddProgram(context.Background(), KindSeed, testenv.StaticELF(t)); err != nil {
		t.Fatal(err)
	}
	var progressed []string
	refs, err := Push(context.Background(), s, repo, PushOptions{Keychain: authn.NewMultiKeychain(),
		Progress: func(ref string, done, total int64) { progressed = append(progressed, ref) }})
	if err != nil {
		t.Fatalf("Push: %v", err)
	}
	for i, b := range s.Images() {
		want := repo + "/" + string(b.Kind) + ":" + b.Tag() + "@" + b.ManifestDigest.String()
		if refs[i] != want || refs[i] != b.Reference(repo) {
			t.Errorf("reference %s, want %s", refs[i], want)
		}
		if !slices.Contains(progressed, b.Repository(repo)+":"+b.Tag()) {
			t.Errorf("no progress for %s", b.Name)
		}
		ref, err := name.ParseReference(refs[i])
		if err != nil {
			t.Fatal(err)
		}
		pulled, err := remote.Image(ref)
		if err != nil {
			t.Fatalf("pull %s: %v", ref, err)
		}
		if err := validate.Image(pulled, validate.Fast); err != nil {
			t.Errorf("%s pulled does not validate: %v", ref, err)
		}
		got, _ := pulled.Digest()
		if got.String() != b.ManifestDigest.String() {
			t.Errorf("%s: pulled digest %s, built %s", b.Name, got, b.ManifestDigest)
		}
		_, _, layer := layoutImage(t, s.Dir(), b)
		layers, _ := pulled.Layers()
		rc, _ := layers[0].Compressed()
		pulledLayer, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(pulledLayer, layer) {
			t.Errorf("%s: the pulled layer differs from the built one", b.Name)
		}
	}
	// Again: everything is there, nothing changes.
	again, err := Push(context.Background(), s, repo, PushOptions{Keychain: authn.NewMultiKeychain()})
	if err != nil || !slices.Equal(again, refs) {
		t.Errorf("second push: %v %v", again, err)
	}
	for _, bad := range []string{"", "Registry/UPPER", repo + ":tag", "team/hookbox"} {
		if _, err := Push(context.Background(), s, bad, PushOptions{}); err == nil || !strings.Contains(err.Error(), "REGISTRY[:PORT][/PATH]") {
			t.Errorf("--push %q: %v", bad, err)
		}
	}
}

func hashOf(b *Built) (v1.Hash, error) { return v1.NewHash(b.ManifestDigest.String()) }

func m0(m ocispec.Manifest) string {
	if len(m.Layers) != 1 {
		return ""
	}
	return m.Layers[0].Digest.String()
}

// TestAddRunfilesCancelled: a cancelled build stops before the next file
// and leaves no layer behind in the Set.
func TestAddRunfilesCancelled(t *testing.T) {
	manifest, tree := fakeTree(t)
	s := newSet(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.AddRunfiles(ctx, manifest, tree, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("AddRunfiles = %v, want context.Canceled", err)
	}
	blobs, _ := os.ReadDir(filepath.Join(s.Dir(), "blobs", "sha256"))
	top, _ := os.ReadDir(s.Dir())
	if len(blobs) != 0 || len(top) != 3 { // oci-layout, index.json, blobs
		t.Errorf("left %v and %v", blobs, top)
	}
}
