package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	ctdimages "github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/opencontainers/image-spec/identity"

	"hookbox.dev/hookbox/images"
	"hookbox.dev/hookbox/render"
)

// builtImage is the image of one `hookbox image build --json` event.
type builtImage struct {
	Kind      images.Kind `json:"kind"`
	Spawn     string      `json:"spawn"`
	Name      string      `json:"name"`
	Digest    string      `json:"digest"`
	Reference string      `json:"reference"`
}

func imageBuild(t *testing.T, e *env, args ...string) []builtImage {
	t.Helper()
	cmd := exec.Command(hookboxBin, append([]string{"image", "build", "--json", "--cache-dir", e.state}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("hookbox image build %q: %v\n%s", args, err, stderr.String())
	}
	var out []builtImage
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var ev struct {
			Type  string      `json:"type"`
			Image *builtImage `json:"image"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("event %q: %v", sc.Text(), err)
		}
		if ev.Type == "image" {
			out = append(out, *ev.Image)
		}
	}
	return out
}

// TestImageBuildImportsIntoNamespace: hookbox image build SPEC --namespace
// NS imports every image a Job of the spec needs into that containerd
// namespace, each name pointing at its built digest and unpacked, and also
// named REPOSITORY@DIGEST (what a kubelet's CRI resolves a pin by); the
// runfiles image holds the init at its render path, root-owned and
// read-only; a second build gives the same digests and imports nothing
// new. The namespace is the test's own, removed at the end.
func TestImageBuildImportsIntoNamespace(t *testing.T) {
	e := newEnv(t)
	spec := e.spec("images", "- exit: 0", `  network: {allow: ["example.com:443"]}`)
	ns := fmt.Sprintf("hookbox-it-images-%d", os.Getpid())
	client, err := containerd.New(containerdAddress())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() }) // after the namespace's removal
	ctx := namespaces.WithNamespace(context.Background(), ns)
	t.Cleanup(func() {
		is := client.ImageService()
		list, err := is.List(ctx)
		if err != nil {
			t.Errorf("listing namespace %s: %v", ns, err)
		}
		for _, img := range list {
			// Synchronous: the garbage collection that removes the
			// image's content and snapshots has run when it returns.
			if err := is.Delete(ctx, img.Name, ctdimages.SynchronousDelete()); err != nil {
				t.Errorf("deleting %s: %v", img.Name, err)
			}
		}
		if err := client.NamespaceService().Delete(context.Background(), ns); err != nil {
			t.Errorf("removing namespace %s: %v", ns, err)
		}
	})

	built := imageBuild(t, e, "--namespace", ns, spec)
	var kinds []images.Kind
	for _, b := range built {
		kinds = append(kinds, b.Kind)
	}
	if !slices.Equal(kinds, []images.Kind{images.KindBase, images.KindRunfiles, images.KindSeed, images.KindProxy}) {
		t.Fatalf("images %v: an allowlist spec needs base, runfiles, seed and proxy", kinds)
	}
	for _, b := range built {
		img, err := client.GetImage(ctx, b.Name)
		if err != nil {
			t.Errorf("%s is not in namespace %s: %v", b.Name, ns, err)
			continue
		}
		if got := img.Target().Digest.String(); got != b.Digest || b.Reference != b.Name+"@"+b.Digest {
			t.Errorf("%s points at %s, built %s (reference %s)", b.Name, got, b.Digest, b.Reference)
		}
		if ok, err := img.IsUnpacked(ctx, images.Snapshotter); !ok || err != nil {
			t.Errorf("%s is not unpacked with %s: %v", b.Name, images.Snapshotter, err)
		}
		// The name a kubelet's CRI looks REPOSITORY:TAG@DIGEST up by.
		byDigest := b.Name[:strings.LastIndex(b.Name, ":")] + "@" + b.Digest
		if img, err := client.GetImage(ctx, byDigest); err != nil || img.Target().Digest.String() != b.Digest {
			t.Errorf("%s is not named %s in namespace %s: %v", b.Name, byDigest, ns, err)
		}
	}
	initBytes, err := os.ReadFile(initBin)
	if err != nil {
		t.Fatal(err)
	}
	img, _ := client.GetImage(ctx, built[1].Name)
	withView(t, ctx, client, img, func(root string) {
		p := filepath.Join(root, render.InitPath)
		got, err := os.ReadFile(p)
		var st syscall.Stat_t
		syscall.Lstat(p, &st)
		if err != nil || !bytes.Equal(got, initBytes) || st.Uid != 0 || st.Mode&0o7777 != 0o555 {
			t.Errorf("%s in the runfiles image: %d bytes (%v), owner %d, mode %o; want hookbox-init, root, 0555", render.InitPath, len(got), err, st.Uid, st.Mode&0o7777)
		}
		if _, err := os.Stat(filepath.Join(root, strings.TrimPrefix(engineBin, "/"))); err != nil {
			t.Errorf("the engine is not in the runfiles image: %v", err)
		}
	})

	// The program images run as containers of their own, as the image's
	// user (65532): hookbox-seed at its absolute path into a run dir it
	// may write, as the Job's emptyDir is; hookbox found on the image's
	// PATH.
	for i, c := range []struct {
		image string
		argv  []string
		want  string
	}{
		{built[2].Name, []string{images.SeedProgramPath, "mkdir", "0700", "/run/hookbox/home", "/run/hookbox/home/x"}, ""},
		{built[2].Name, []string{images.SeedProgramPath, "install", "0600", "/missing", "/x"}, "hookbox-seed: open /missing: no such file or directory"},
		{built[3].Name, []string{"hookbox", "version"}, "hookbox "},
	} {
		id := fmt.Sprintf("hookbox-it-images-%d-%d", os.Getpid(), i)
		args := append([]string{"--address", containerdAddress(), "-n", ns, "run", "--rm",
			"--mount", "type=tmpfs,src=tmpfs,dst=/run/hookbox,options=rw:nosuid:nodev:mode=1777", c.image, id}, c.argv...)
		out, err := exec.Command("ctr", args...).CombinedOutput()
		failed := c.want != "" && strings.HasPrefix(c.want, "hookbox-seed:")
		if (err != nil) != failed || !strings.Contains(string(out), c.want) {
			t.Errorf("%s %q: %v\n%s", c.image, c.argv, err, out)
		}
	}

	again := imageBuild(t, e, "--namespace", ns, spec)
	if !slices.Equal(again, built) {
		t.Errorf("second build: %+v, first %+v", again, built)
	}
}

// withView mounts a read-only view of img's snapshot for fn.
func withView(t *testing.T, ctx context.Context, c *containerd.Client, img containerd.Image, fn func(root string)) {
	t.Helper()
	diffIDs, err := img.RootFS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ctx, done, err := c.WithLease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer done(ctx)
	sn := c.SnapshotService(images.Snapshotter)
	key := fmt.Sprintf("hookbox-it-images-view-%d", time.Now().UnixNano())
	mounts, err := sn.View(ctx, key, identity.ChainID(diffIDs).String())
	if err != nil {
		t.Fatalf("%s: snapshot view: %v", img.Name(), err)
	}
	defer sn.Remove(ctx, key)
	dir := t.TempDir()
	if err := mount.All(mounts, dir); err != nil {
		t.Fatalf("%s: mounting view: %v", img.Name(), err)
	}
	defer mount.UnmountAll(dir, 0)
	fn(dir)
}
