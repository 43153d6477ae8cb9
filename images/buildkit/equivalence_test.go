package buildkit

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	ctdimages "github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/platforms"
	digest "github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"hookbox.dev/hookbox/images"
	"hookbox.dev/hookbox/internal/testenv"
)

// Environment of the BuildKit equivalence test.
const (
	// EnvBuildkitAddr is the buildkitd address; set, the test runs and
	// must pass.
	envBuildkitAddr = "HOOKBOX_BUILDKIT_ADDR"
	// envContainerdAddr is containerd's socket (default
	// /run/containerd/containerd.sock), the one buildkitd's containerd
	// worker uses.
	envContainerdAddr = "HOOKBOX_CONTAINERD_ADDRESS"
)

const equivalenceImageName = images.Repository + ":buildkit-equivalence-test"

// requireBuildkit returns the buildkitd address, skipping the test when none
// is configured and failing it when one is required or the test cannot work.
func requireBuildkit(t *testing.T) (buildkitAddr, containerdAddr string) {
	t.Helper()
	buildkitAddr = os.Getenv(envBuildkitAddr)
	if buildkitAddr == "" {
		// HOOKBOX_REQUIRE_BUILDKIT=1 (CI) makes this a failure.
		testenv.MissingBuildkit(t, fmt.Sprintf("%s is unset: set it to a buildkitd with a containerd worker in namespace %s (images/buildkit/testdata/start-buildkitd.sh starts one)", envBuildkitAddr, images.Namespace))
	}
	if os.Geteuid() != 0 {
		t.Fatalf("%s is set but the test needs root (it mounts containerd snapshots)", envBuildkitAddr)
	}
	containerdAddr = os.Getenv(envContainerdAddr)
	if containerdAddr == "" {
		containerdAddr = "/run/containerd/containerd.sock"
	}
	return buildkitAddr, containerdAddr
}

// TestBuildkitEquivalence builds the base image in-process and imports it
// into containerd, builds it again with BuildKit straight into containerd,
// and checks that both have the same runtime config, the same layer entries
// (name, type, mode, owner, mtime, content) and the same unpacked
// filesystem.
func TestBuildkitEquivalence(t *testing.T) {
	bkAddr, ctdAddr := requireBuildkit(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	ctx = namespaces.WithNamespace(ctx, images.Namespace)

	def, err := images.HostDefinition()
	if err != nil {
		t.Fatal(err)
	}
	cc, err := containerd.New(ctdAddr)
	if err != nil {
		t.Fatalf("connecting to containerd at %s: %v", ctdAddr, err)
	}
	defer cc.Close()

	// (b) BuildKit first: against a fresh buildkitd and containerd its
	// first solve is cold and meets nothing the in-process import put in
	// containerd. Twice: the second solve shows the cached cost.
	var res *Result
	for _, label := range []string{"first", "second"} {
		res, err = Build(ctx, bkAddr, def, Options{Name: equivalenceImageName, Progress: testLog{t}})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("buildkit %s solve: %s (%s) in %v", label, res.Name, res.ManifestDigest, res.Duration)
	}
	// (a) in-process build, imported and unpacked.
	start := time.Now()
	img, err := images.Build(def)
	if err != nil {
		t.Fatal(err)
	}
	built := time.Since(start)
	start = time.Now()
	inProcess, err := images.Import(ctx, cc, img)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("in-process: %s (%s) built in %v, imported and unpacked in %v", img.Name, img.ManifestDigest, built, time.Since(start))

	rec, err := cc.ImageService().Get(ctx, res.Name)
	if err != nil {
		t.Fatalf("buildkit's image is not in containerd namespace %s: %v (is buildkitd's --containerd-worker-namespace=%s?)", images.Namespace, err, images.Namespace)
	}
	if rec.Target.Digest != res.ManifestDigest {
		t.Fatalf("containerd has %s at %s, buildkit reported %s", res.Name, rec.Target.Digest, res.ManifestDigest)
	}
	viaBuildkit := containerd.NewImageWithPlatform(cc, rec, platforms.Only(def.Platform))
	unpacked, err := viaBuildkit.IsUnpacked(ctx, images.Snapshotter)
	if err != nil || !unpacked {
		t.Fatalf("buildkit's image is not unpacked with %s (unpacked=%v, err=%v)", images.Snapshotter, unpacked, err)
	}

	t.Run("config", func(t *testing.T) {
		a, err := inProcess.Spec(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b, err := viaBuildkit.Spec(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if a.OS != b.OS || a.Architecture != b.Architecture {
			t.Errorf("platform %s/%s vs buildkit %s/%s", a.OS, a.Architecture, b.OS, b.Architecture)
		}
		ac, bc := a.Config, b.Config
		if ac.User != bc.User || ac.WorkingDir != bc.WorkingDir || !slices.Equal(ac.Env, bc.Env) ||
			!slices.Equal(ac.Entrypoint, bc.Entrypoint) || !slices.Equal(ac.Cmd, bc.Cmd) ||
			fmt.Sprint(ac.Labels) != fmt.Sprint(bc.Labels) {
			t.Errorf("runtime config differs:\n in-process %+v\n   buildkit %+v", ac, bc)
		}
		if bc.User != "65532:65532" || bc.WorkingDir != "/workspace" {
			t.Errorf("buildkit config user %q workdir %q", bc.User, bc.WorkingDir)
		}
	})

	t.Run("layers", func(t *testing.T) {
		a := layerEntries(ctx, t, cc, inProcess)
		b := layerEntries(ctx, t, cc, viaBuildkit)
		compareEntries(t, "layer", a, b)
		// Not required, but worth knowing when it changes: with
		// uncompressed layers and rewritten timestamps, BuildKit's
		// layer tar has been byte-identical to the in-process one.
		if la, lb := layerDigest(ctx, t, cc, inProcess), layerDigest(ctx, t, cc, viaBuildkit); la == lb {
			t.Logf("layer blobs are byte-identical: %s", la)
		} else {
			t.Logf("layer blobs differ in encoding only: in-process %s, buildkit %s", la, lb)
		}
		var names []string
		for _, e := range a {
			names = append(names, "/"+strings.TrimSuffix(e.name, "/"))
		}
		if !slices.Equal(names, def.Paths()) {
			t.Errorf("in-process layer paths %q, definition %q", names, def.Paths())
		}
	})

	t.Run("unpacked", func(t *testing.T) {
		a := snapshotEntries(ctx, t, cc, inProcess)
		b := snapshotEntries(ctx, t, cc, viaBuildkit)
		compareEntries(t, "unpacked snapshot", a, b)
		for i, e := range a {
			if i < len(def.Entries) && e.mode != images.UnixMode(def.Entries[i].Mode) {
				t.Errorf("unpacked %s mode %o, definition %o", e.name, e.mode, images.UnixMode(def.Entries[i].Mode))
			}
		}
		if len(a) != len(def.Entries) {
			t.Errorf("unpacked snapshot has %d entries, definition %d", len(a), len(def.Entries))
		}
	})
}

// fsEntry is one filesystem entry in a form both a tar header and lstat(2)
// produce.
type fsEntry struct {
	name     string // relative to /, directories end in "/"
	typ      byte   // tar.TypeDir, tar.TypeReg, …
	mode     int64  // permission and special bits
	uid, gid int
	mtime    int64 // seconds
	sha256   string
}

func (e fsEntry) String() string {
	return fmt.Sprintf("%s type=%c mode=%o owner=%d:%d mtime=%d sha256=%.12s", e.name, e.typ, e.mode, e.uid, e.gid, e.mtime, e.sha256)
}

func compareEntries(t *testing.T, what string, a, b []fsEntry) {
	t.Helper()
	if slices.Equal(a, b) {
		t.Logf("%s: %d entries identical", what, len(a))
		return
	}
	am := map[string]fsEntry{}
	for _, e := range a {
		am[e.name] = e
	}
	bm := map[string]fsEntry{}
	for _, e := range b {
		bm[e.name] = e
	}
	for _, e := range a {
		if be, ok := bm[e.name]; !ok {
			t.Errorf("%s: %s only in the in-process image", what, e)
		} else if be != e {
			t.Errorf("%s differs:\n in-process %s\n   buildkit %s", what, e, be)
		}
	}
	for _, e := range b {
		if _, ok := am[e.name]; !ok {
			t.Errorf("%s: %s only in the buildkit image", what, e)
		}
	}
}

func manifest(ctx context.Context, t *testing.T, cc *containerd.Client, img containerd.Image) ocispec.Manifest {
	t.Helper()
	m, err := ctdimages.Manifest(ctx, cc.ContentStore(), img.Target(), img.Platform())
	if err != nil {
		t.Fatalf("%s: manifest: %v", img.Name(), err)
	}
	if len(m.Layers) != 1 {
		t.Fatalf("%s: %d layers, want 1", img.Name(), len(m.Layers))
	}
	return m
}

func layerDigest(ctx context.Context, t *testing.T, cc *containerd.Client, img containerd.Image) digest.Digest {
	t.Helper()
	return manifest(ctx, t, cc, img).Layers[0].Digest
}

func layerEntries(ctx context.Context, t *testing.T, cc *containerd.Client, img containerd.Image) []fsEntry {
	t.Helper()
	cs := cc.ContentStore()
	m := manifest(ctx, t, cc, img)
	blob, err := content.ReadBlob(ctx, cs, m.Layers[0])
	if err != nil {
		t.Fatalf("%s: reading layer: %v", img.Name(), err)
	}
	var r io.Reader = bytes.NewReader(blob)
	switch m.Layers[0].MediaType {
	case ocispec.MediaTypeImageLayer, ctdimages.MediaTypeDockerSchema2Layer:
	case ocispec.MediaTypeImageLayerGzip, ctdimages.MediaTypeDockerSchema2LayerGzip:
		if r, err = gzip.NewReader(r); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("%s: layer media type %s", img.Name(), m.Layers[0].MediaType)
	}
	t.Logf("%s: layer %s, %s, %d bytes", img.Name(), m.Layers[0].Digest, m.Layers[0].MediaType, len(blob))

	var out []fsEntry
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: reading layer: %v", img.Name(), err)
		}
		h := sha256.New()
		if _, err := io.Copy(h, tr); err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(strings.TrimPrefix(hdr.Name, "./"), "/")
		if hdr.Typeflag == tar.TypeDir && !strings.HasSuffix(name, "/") {
			name += "/"
		}
		out = append(out, fsEntry{
			name: name, typ: hdr.Typeflag, mode: hdr.Mode & 0o7777,
			uid: hdr.Uid, gid: hdr.Gid, mtime: hdr.ModTime.Unix(),
			sha256: hex.EncodeToString(h.Sum(nil)),
		})
	}
	slices.SortFunc(out, func(a, b fsEntry) int { return strings.Compare(a.name, b.name) })
	return out
}

// snapshotEntries mounts a read-only view of img's unpacked snapshot and
// walks it.
func snapshotEntries(ctx context.Context, t *testing.T, cc *containerd.Client, img containerd.Image) []fsEntry {
	t.Helper()
	diffIDs, err := img.RootFS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A lease keeps containerd's garbage collector (run by other tests'
	// deletions) away from the view while it is read.
	ctx, done, err := cc.WithLease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer done(ctx)
	sn := cc.SnapshotService(images.Snapshotter)
	key := fmt.Sprintf("hookbox-equivalence-test-%d", time.Now().UnixNano())
	mounts, err := sn.View(ctx, key, identity.ChainID(diffIDs).String())
	if err != nil {
		t.Fatalf("%s: snapshot view: %v", img.Name(), err)
	}
	defer func() {
		if err := sn.Remove(ctx, key); err != nil {
			t.Errorf("removing view %s: %v", key, err)
		}
	}()
	dir := t.TempDir()
	if err := mount.All(mounts, dir); err != nil {
		t.Fatalf("%s: mounting view: %v", img.Name(), err)
	}
	defer func() {
		if err := mount.UnmountAll(dir, 0); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	}()

	var out []fsEntry
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		e := fsEntry{
			name: filepath.ToSlash(rel), mode: int64(st.Mode & 0o7777),
			uid: int(st.Uid), gid: int(st.Gid), mtime: st.Mtim.Sec,
		}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			e.typ, e.name = tar.TypeDir, e.name+"/"
		case syscall.S_IFREG:
			e.typ = tar.TypeReg
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			e.sha256 = hex.EncodeToString(sum[:])
		default:
			e.typ = '?'
		}
		if e.sha256 == "" {
			sum := sha256.Sum256(nil)
			e.sha256 = hex.EncodeToString(sum[:])
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		t.Fatalf("%s: walking the snapshot: %v", img.Name(), err)
	}
	slices.SortFunc(out, func(a, b fsEntry) int { return strings.Compare(a.name, b.name) })
	return out
}

// testLog writes buildkit progress lines to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
