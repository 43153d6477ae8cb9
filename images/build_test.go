package images

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"hookbox.dev/hookbox/internal/testenv"
)

var testCA = []byte("-----BEGIN CERTIFICATE-----\nnot a real certificate\n-----END CERTIFICATE-----\n")

func mustBuild(t *testing.T, def Definition) *Image {
	t.Helper()
	img, err := Build(def)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return img
}

func mustLayoutTar(t *testing.T, img *Image) []byte {
	t.Helper()
	b, err := img.LayoutTar()
	if err != nil {
		t.Fatalf("LayoutTar: %v", err)
	}
	return b
}

func TestBuildIsDeterministic(t *testing.T) {
	a := mustBuild(t, NewDefinition(testCA))
	b := mustBuild(t, NewDefinition(slices.Clone(testCA)))
	if a.ManifestDigest != b.ManifestDigest || a.Name != b.Name {
		t.Fatalf("two builds differ: %s %s vs %s %s", a.Name, a.ManifestDigest, b.Name, b.ManifestDigest)
	}
	if !bytes.Equal(mustLayoutTar(t, a), mustLayoutTar(t, b)) {
		t.Fatal("two builds give different layout tars")
	}
}

func TestBuildDigestDependsOnCABundle(t *testing.T) {
	base := mustBuild(t, NewDefinition(testCA))
	other := mustBuild(t, NewDefinition(append(slices.Clone(testCA), '\n')))
	none := mustBuild(t, NewDefinition(nil))
	if base.ManifestDigest == other.ManifestDigest {
		t.Error("a changed CA bundle kept the manifest digest")
	}
	if base.ManifestDigest == none.ManifestDigest || other.ManifestDigest == none.ManifestDigest {
		t.Error("no CA bundle gave the digest of a build with one")
	}
	if base.Name == other.Name {
		t.Error("a changed CA bundle kept the image name")
	}
}

// TestBuildGoldenDigest pins the encoding: a change here means every host
// gets a new base image, which must be deliberate.
func TestBuildGoldenDigest(t *testing.T) {
	testenv.Require(t, testenv.Requirement{Name: "amd64", Check: func() string {
		if runtime.GOARCH != "amd64" {
			return "the golden digest is recorded for amd64 (the platform is in the config); running on " + runtime.GOARCH
		}
		return ""
	}})
	img := mustBuild(t, NewDefinition(testCA))
	const want = "sha256:e8421739ce7aee10b1b8a7e8966ac0587a71ab132a3594c8281aea7a9770cdfc"
	if img.ManifestDigest.String() != want {
		t.Errorf("manifest digest = %s, want %s (if the image was changed on purpose, update want)", img.ManifestDigest, want)
	}
}

func TestImageName(t *testing.T) {
	img := mustBuild(t, NewDefinition(testCA))
	if !regexp.MustCompile(`^hookbox\.dev/base:[0-9a-f]{12}$`).MatchString(img.Name) {
		t.Fatalf("name %q", img.Name)
	}
	if !strings.HasPrefix(img.ManifestDigest.Encoded(), strings.TrimPrefix(img.Name, Repository+":")) {
		t.Fatalf("name %q does not carry the manifest digest %s", img.Name, img.ManifestDigest)
	}
}

type layerEntry struct {
	hdr  *tar.Header
	data []byte
}

func readTar(t *testing.T, b []byte) []layerEntry {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	var out []layerEntry
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("reading tar: %v", err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("reading %s: %v", hdr.Name, err)
		}
		out = append(out, layerEntry{hdr, data})
	}
}

func TestLayerEntries(t *testing.T) {
	img := mustBuild(t, NewDefinition(testCA))
	entries := readTar(t, img.Layer())

	want := []string{
		"dev/", "dev/mqueue/", "dev/pts/", "dev/shm/",
		"etc/", "etc/group", "etc/hosts", "etc/nsswitch.conf", "etc/passwd", "etc/resolv.conf",
		"etc/ssl/", "etc/ssl/certs/", "etc/ssl/certs/ca-certificates.crt",
		"grants/", "hookbox/", "hookbox/etc/", "proc/", "run/", "run/hookbox/",
		"sys/", "sys/fs/", "sys/fs/cgroup/", "tmp/", "workspace/",
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.hdr.Name)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("layer entries:\n got %q\nwant %q", got, want)
	}

	byName := map[string]layerEntry{}
	for _, e := range entries {
		h := e.hdr
		byName[h.Name] = e
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: owner %d:%d (%q:%q), want 0:0 with no names", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		if !h.ModTime.Equal(ModTime()) || !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
			t.Errorf("%s: times %v %v %v, want mtime %v only", h.Name, h.ModTime, h.AccessTime, h.ChangeTime, ModTime())
		}
		if h.Format != tar.FormatUSTAR || len(h.PAXRecords) != 0 {
			t.Errorf("%s: format %v with PAX records %v, want plain USTAR", h.Name, h.Format, h.PAXRecords)
		}
		switch h.Typeflag {
		case tar.TypeReg:
			if h.Mode != 0o644 {
				t.Errorf("%s: file mode %o, want 644", h.Name, h.Mode)
			}
			if h.Mode&0o111 != 0 {
				t.Errorf("%s: regular file with an execute bit (%o)", h.Name, h.Mode)
			}
		case tar.TypeDir:
			wantMode := int64(0o755)
			if h.Name == "tmp/" {
				wantMode = 0o1777
			}
			if h.Mode != wantMode {
				t.Errorf("%s: dir mode %o, want %o", h.Name, h.Mode, wantMode)
			}
		default:
			t.Errorf("%s: type %c: the base image has only files and directories", h.Name, h.Typeflag)
		}
	}
	for _, m := range MountPoints {
		e, ok := byName[strings.TrimPrefix(m, "/")+"/"]
		if !ok || e.hdr.Typeflag != tar.TypeDir {
			t.Errorf("mount point %s is not a directory in the layer", m)
		}
	}

	contents := map[string]string{
		"etc/passwd":                        "root:x:0:0:root:/root:/sbin/nologin\nhookbox:x:65532:65532:hookbox:/run/hookbox/home:/sbin/nologin\n",
		"etc/group":                         "root:x:0:\nhookbox:x:65532:\n",
		"etc/hosts":                         "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"etc/resolv.conf":                   "",
		"etc/ssl/certs/ca-certificates.crt": string(testCA),
	}
	for name, want := range contents {
		if got := string(byName[name].data); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(string(byName["etc/nsswitch.conf"].data)), "\n") {
		db, services, _ := strings.Cut(line, ":")
		services = strings.TrimSpace(services)
		if services != "files" && !(db == "hosts" && services == "files dns") {
			t.Errorf("nsswitch.conf: %q: only files (and dns for hosts) may be used", line)
		}
	}
}

func TestLayerWithoutCABundle(t *testing.T) {
	img := mustBuild(t, NewDefinition(nil))
	for _, e := range readTar(t, img.Layer()) {
		if e.hdr.Name == "etc/ssl/certs/ca-certificates.crt" {
			t.Fatal("CA bundle present without input")
		}
	}
}

func TestImageConfig(t *testing.T) {
	def := NewDefinition(testCA)
	img := mustBuild(t, def)
	var cfg ocispec.Image
	if err := json.Unmarshal(img.Config(), &cfg); err != nil {
		t.Fatal(err)
	}
	c := cfg.Config
	if c.User != "65532:65532" || c.WorkingDir != "/workspace" {
		t.Errorf("user %q workdir %q", c.User, c.WorkingDir)
	}
	if !slices.Equal(c.Env, []string{"PATH=/usr/local/bin:/usr/bin:/bin"}) {
		t.Errorf("env %q", c.Env)
	}
	if c.Entrypoint != nil || c.Cmd != nil {
		t.Errorf("entrypoint %q cmd %q: the render supplies argv", c.Entrypoint, c.Cmd)
	}
	if len(c.Labels) != 1 || c.Labels["dev.hookbox.base"] != "1" {
		t.Errorf("labels %v", c.Labels)
	}
	if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s", cfg.OS, cfg.Architecture)
	}
	if cfg.Created == nil || !cfg.Created.Equal(ModTime()) {
		t.Errorf("created %v, want %v", cfg.Created, ModTime())
	}
	if cfg.RootFS.Type != "layers" || !slices.Equal(cfg.RootFS.DiffIDs, []digest.Digest{img.LayerDigest}) {
		t.Errorf("rootfs %+v, want the layer digest %s (uncompressed)", cfg.RootFS, img.LayerDigest)
	}
	if len(cfg.History) != 1 || cfg.History[0].EmptyLayer {
		t.Errorf("history %+v", cfg.History)
	}
}

// TestLayoutTar walks the layout the way an importer does: oci-layout,
// index.json, manifest, then config and layer, checking every digest and
// size against the bytes.
func TestLayoutTar(t *testing.T) {
	img := mustBuild(t, NewDefinition(testCA))
	files := map[string][]byte{}
	var names []string
	for _, e := range readTar(t, mustLayoutTar(t, img)) {
		names = append(names, e.hdr.Name)
		if e.hdr.Typeflag == tar.TypeReg {
			files[e.hdr.Name] = e.data
		}
	}
	if len(names) != 7 {
		t.Errorf("layout entries %q, want oci-layout, index.json, 2 dirs, 3 blobs", names)
	}

	var layout ocispec.ImageLayout
	if err := json.Unmarshal(files["oci-layout"], &layout); err != nil || layout.Version != "1.0.0" {
		t.Fatalf("oci-layout %q: %v", files["oci-layout"], err)
	}
	blob := func(d ocispec.Descriptor) []byte {
		t.Helper()
		if err := d.Digest.Validate(); err != nil {
			t.Fatalf("descriptor digest %q: %v", d.Digest, err)
		}
		b, ok := files["blobs/sha256/"+d.Digest.Encoded()]
		if !ok {
			t.Fatalf("blob %s (%s) missing", d.Digest, d.MediaType)
		}
		if int64(len(b)) != d.Size || digest.FromBytes(b) != d.Digest {
			t.Fatalf("blob %s: size %d digest %s, descriptor says %d", d.Digest, len(b), digest.FromBytes(b), d.Size)
		}
		return b
	}

	var index ocispec.Index
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if index.SchemaVersion != 2 || index.MediaType != ocispec.MediaTypeImageIndex || len(index.Manifests) != 1 {
		t.Fatalf("index %+v", index)
	}
	md := index.Manifests[0]
	if md.MediaType != ocispec.MediaTypeImageManifest || md.Digest != img.ManifestDigest {
		t.Fatalf("index manifest %+v, want %s", md, img.ManifestDigest)
	}
	if md.Annotations[ocispec.AnnotationRefName] != img.Name {
		t.Errorf("ref name %q, want %q", md.Annotations[ocispec.AnnotationRefName], img.Name)
	}
	if md.Platform == nil || md.Platform.OS != "linux" || md.Platform.Architecture != runtime.GOARCH {
		t.Errorf("manifest platform %+v", md.Platform)
	}

	var manifest ocispec.Manifest
	if err := json.Unmarshal(blob(md), &manifest); err != nil {
		t.Fatal(err)
	}
	if manifest.SchemaVersion != 2 || manifest.MediaType != ocispec.MediaTypeImageManifest {
		t.Errorf("manifest header %+v", manifest.Versioned)
	}
	if manifest.Config.MediaType != ocispec.MediaTypeImageConfig || manifest.Config.Digest != img.ConfigDigest {
		t.Errorf("config descriptor %+v", manifest.Config)
	}
	if !bytes.Equal(blob(manifest.Config), img.Config()) {
		t.Error("config blob differs from Image.Config")
	}
	if len(manifest.Layers) != 1 || manifest.Layers[0].MediaType != ocispec.MediaTypeImageLayer {
		t.Fatalf("layers %+v", manifest.Layers)
	}
	if !bytes.Equal(blob(manifest.Layers[0]), img.Layer()) {
		t.Error("layer blob differs from Image.Layer")
	}
	for _, d := range []digest.Digest{img.ManifestDigest, img.ConfigDigest, img.LayerDigest} {
		if _, ok := img.Blob(d); !ok {
			t.Errorf("Blob(%s) not found", d)
		}
	}
}

func TestValidateRefuses(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Definition)
	}{
		{"executable file", func(d *Definition) { setMode(d, "/etc/passwd", 0o755) }},
		{"setuid file", func(d *Definition) { setMode(d, "/etc/passwd", 0o644|fs.ModeSetuid) }},
		{"setgid dir", func(d *Definition) { setMode(d, "/etc", 0o755|fs.ModeSetgid) }},
		{"missing mount point", func(d *Definition) { remove(d, "/workspace") }},
		{"missing parent", func(d *Definition) { remove(d, "/run") }},
		{"out of order", func(d *Definition) {
			d.Entries[0], d.Entries[1] = d.Entries[1], d.Entries[0]
		}},
		{"duplicate", func(d *Definition) { d.Entries = slices.Insert(d.Entries, 1, d.Entries[1]) }},
		{"relative path", func(d *Definition) {
			d.Entries = append([]Entry{{Path: "a", Type: Dir, Mode: 0o755}}, d.Entries...)
		}},
		{"symlink type", func(d *Definition) {
			d.Entries = append(d.Entries, Entry{Path: "/zz", Type: EntryType(9), Mode: 0o644})
		}},
		{"no user", func(d *Definition) { d.Config.User = "" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			def := NewDefinition(testCA)
			def.Entries = slices.Clone(def.Entries)
			tt.modify(&def)
			if err := def.Validate(); !errors.Is(err, ErrInvalidDefinition) {
				t.Fatalf("Validate = %v, want ErrInvalidDefinition", err)
			}
			if _, err := Build(def); !errors.Is(err, ErrInvalidDefinition) {
				t.Fatalf("Build = %v, want ErrInvalidDefinition", err)
			}
		})
	}
	if err := NewDefinition(testCA).Validate(); err != nil {
		t.Fatalf("the default definition is invalid: %v", err)
	}
}

func setMode(d *Definition, p string, m fs.FileMode) {
	for i := range d.Entries {
		if d.Entries[i].Path == p {
			d.Entries[i].Mode = m
		}
	}
}

func remove(d *Definition, p string) {
	d.Entries = slices.DeleteFunc(d.Entries, func(e Entry) bool { return e.Path == p })
}

func TestHostDefinition(t *testing.T) {
	def, err := HostDefinition()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Build(def); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkBuild(b *testing.B) {
	def, err := HostDefinition()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		img, err := Build(def)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := img.LayoutTar(); err != nil {
			b.Fatal(err)
		}
	}
}
