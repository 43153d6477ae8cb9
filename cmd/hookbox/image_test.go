//go:build !hookbox_lite

package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"hookbox.dev/hookbox/images"
	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/plan"
)

// imageSpec is a spec whose runfiles need no build: /bin/true and its
// libraries, hookbox-init and hookbox-seed played by a static Go tool.
func imageSpec(t *testing.T) string {
	t.Helper()
	t.Setenv(plan.InitEnv, testenv.StaticELF(t))
	t.Setenv(images.SeedEnv, testenv.StaticELF(t))
	return writeSpec(t, t.TempDir(), "s.yaml", validHead+"  engine: {kind: exec, path: /bin/true}\n  workspace: .\n")
}

// imageEvents parses image build --json: every line one event.
func imageEvents(t *testing.T, stdout string) (progress []imageEvent, built []imageRecord) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var e imageEvent
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		switch e.Type {
		case "progress":
			progress = append(progress, e)
		case "image":
			built = append(built, *e.Image)
		default:
			t.Fatalf("event type %q", e.Type)
		}
	}
	return progress, built
}

// TestImageBuildReproducible: two builds of the same spec into different
// cache directories give the same images, digest for digest, and the same
// layout tar, byte for byte.
func TestImageBuildReproducible(t *testing.T) {
	spec := imageSpec(t)
	dir := t.TempDir()
	build := func(n string) ([]imageRecord, []byte) {
		file := filepath.Join(dir, n+".tar")
		code, stdout, stderr := runCLI(t, "image", "build", "--cache-dir", filepath.Join(dir, "cache-"+n), "--output", "oci:"+file, "--json", spec)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		progress, built := imageEvents(t, stdout)
		if !slices.ContainsFunc(progress, func(e imageEvent) bool { return e.Phase == "write" && e.Detail == file }) {
			t.Errorf("no write progress event in %+v", progress)
		}
		fi, err := os.Stat(file)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("layout tar: %v %v, want mode 0600", fi, err)
		}
		data, _ := os.ReadFile(file)
		return built, data
	}
	a, tarA := build("a")
	b, tarB := build("b")
	var kinds []images.Kind
	for i, rec := range a {
		kinds = append(kinds, rec.Kind)
		t.Logf("%-8s %s", rec.Kind, rec.Digest)
		if rec != b[i] {
			t.Errorf("%s: %+v vs %+v", rec.Kind, rec, b[i])
		}
		if rec.Reference != rec.Name+"@"+rec.Digest {
			t.Errorf("%s: reference %s, want the local name pinned by digest", rec.Kind, rec.Reference)
		}
	}
	if !slices.Equal(kinds, []images.Kind{images.KindBase, images.KindRunfiles, images.KindSeed}) {
		t.Errorf("kinds %v: a spec without an allowlist needs base, runfiles and seed", kinds)
	}
	if a[1].Spawn != "ok" || !strings.HasPrefix(a[1].RunfilesDigest, "sha256:") {
		t.Errorf("runfiles image %+v", a[1])
	}
	if !bytes.Equal(tarA, tarB) {
		t.Error("the layout tars differ")
	}
}

// TestRenderBuildPush: render --format k8s --build --push builds the
// images, pushes them to a registry on loopback and pins the Job to what
// the registry holds; a flag that gives an image keeps it.
func TestRenderBuildPush(t *testing.T) {
	spec := imageSpec(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	repo := u.Host + "/hookbox"
	cache := filepath.Join(t.TempDir(), "cache")
	code, stdout, stderr := runCLI(t, "render", "--cache-dir", cache, "--format", "k8s", "--build", "--push", repo, spec)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, kind := range []string{"base", "runfiles", "seed"} {
		ref := regexp.MustCompile(regexp.QuoteMeta(repo+"/"+kind+":") + `[0-9a-f]{12}@sha256:[0-9a-f]{64}`).FindString(stdout)
		if ref == "" {
			t.Errorf("the objects reference no pushed %s image:\n%s", kind, stdout)
			continue
		}
		if !strings.Contains(stderr, ref) {
			t.Errorf("stderr does not name the %s image %s:\n%s", kind, ref, stderr)
		}
		r, err := name.ParseReference(ref)
		if err != nil {
			t.Fatal(err)
		}
		desc, err := remote.Head(r)
		if err != nil || !strings.HasSuffix(ref, "@"+desc.Digest.String()) {
			t.Errorf("%s: the registry has %v (%v)", ref, desc, err)
		}
	}
	if !strings.Contains(stdout, images.SeedProgramPath) {
		t.Error("the seed containers do not run hookbox-seed")
	}

	given := "registry.example/own/base@sha256:" + strings.Repeat("5", 64)
	code, stdout, stderr = runCLI(t, "render", "--cache-dir", cache, "--format", "k8s", "--build", "--push", repo, "--image", given, spec)
	if code != 0 || !strings.Contains(stdout, "image: "+given) || strings.Contains(stderr, repo+"/base:") {
		t.Errorf("--image with --build: exit %d, stderr:\n%s", code, stderr)
	}
}

func TestImageBuildUsage(t *testing.T) {
	spec := imageSpec(t)
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"output not oci":        {[]string{"image", "build", "--output", "x.tar", spec}, "oci:FILE"},
		"output and oci-layout": {[]string{"image", "build", "--output", "oci:a", "--oci-layout", "b"}, "give one of them"},
		"buildkit with spec":    {[]string{"image", "build", "--buildkit", "unix:///x", spec}, "--buildkit"},
		"spawn without spec":    {[]string{"image", "build", "--spawn", "ok"}, "need a SPEC"},
		"two specs":             {[]string{"image", "build", spec, spec}, "at most one SPEC"},
		"bad push":              {[]string{"image", "build", "--push", "Not A Repo", spec}, "REGISTRY[:PORT][/PATH]"},
		"no such spawn":         {[]string{"image", "build", "--spawn", "nope", spec}, `--spawn "nope"`},
		"render push no build":  {[]string{"render", "--format", "k8s", "--push", "registry.example/x", spec}, "--push applies to --build only"},
		"render build as json":  {[]string{"render", "--build", spec}, "--build applies to --format k8s only"},
		"render bad push":       {[]string{"render", "--format", "k8s", "--build", "--push", "x:tag/y", spec}, "REGISTRY[:PORT][/PATH]"},
	} {
		code, _, stderr := runCLI(t, tc.args...)
		if code != exitSpec || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d %q, want %d with %q", name, code, stderr, exitSpec, tc.want)
		}
	}
}

// TestImageBuildWithoutContainerd: an import into a containerd that does
// not answer is an infrastructure failure (exit 120) naming the address,
// and nothing is left in the cache.
func TestImageBuildWithoutContainerd(t *testing.T) {
	testenv.Require(t, testenv.Root) // a non-root user's import goes to a rootless containerd
	spec := imageSpec(t)
	cache := filepath.Join(t.TempDir(), "cache")
	addr := "unix://" + filepath.Join(t.TempDir(), "none.sock")
	code, _, stderr := runCLI(t, "image", "build", "--cache-dir", cache, "--address", addr, spec)
	if code != exitInfra || !strings.Contains(stderr, "containerd does not answer at "+addr) {
		t.Errorf("exit %d %q, want %d", code, stderr, exitInfra)
	}
	if left, _ := os.ReadDir(filepath.Join(cache, "images")); len(left) != 0 {
		t.Errorf("left in the cache: %v", left)
	}
}
