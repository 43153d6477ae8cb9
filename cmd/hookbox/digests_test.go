package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"hookbox.dev/hookbox/internal/testenv"
	"hookbox.dev/hookbox/plan"
	"hookbox.dev/hookbox/render"
)

// textDigests are the values of the lines of a text view that start with
// label ("plan digest", "content digest"), one per spawn.
func textDigests(t *testing.T, text, label string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if d, ok := strings.CutPrefix(strings.TrimSpace(line), label); ok {
			if d = strings.TrimSpace(d); render.ValidDigest(d) {
				out = append(out, d)
			}
		}
	}
	return out
}

// clone copies the repository's examples/ to root/examples, as another
// checkout of the repository would have them.
func clone(t *testing.T, root string) string {
	t.Helper()
	dir := filepath.Join(root, "examples")
	if err := os.CopyFS(dir, os.DirFS("../../examples")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPlanDigestIndependentOfCheckout: every example gives the same plan
// digest from two checkouts of the repository at different paths, the
// engine of hello.yaml (../bin), hooks beside the spec (review.yaml) and a
// relative workspace included. Regression: the one digest render printed
// held the checkout's absolute paths.
func TestPlanDigestIndependentOfCheckout(t *testing.T) {
	varTmp := func(name string) string {
		dir, err := os.MkdirTemp("/var/tmp", "hookbox-checkout-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return filepath.Join(dir, name)
	}
	pairs := map[string][2]string{
		// Below /tmp, which the container mounts over, programs appear
		// under /hookbox/host: a different plan from a checkout elsewhere,
		// but the same in every checkout below /tmp.
		"below /tmp": {filepath.Join(t.TempDir(), "one", "hookbox"), filepath.Join(t.TempDir(), "two", "deeper", "hookbox")},
		"elsewhere":  {varTmp("hookbox"), varTmp("x/y/hookbox-clone")},
	}
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(files) < 4 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for name, pair := range pairs {
		t.Run(name, func(t *testing.T) {
			a, b := clone(t, pair[0]), clone(t, pair[1])
			for _, file := range files {
				base := filepath.Base(file)
				digestsIn := func(dir string) []string {
					code, stdout, stderr := runCLI(t, "render", "--format", "text", filepath.Join(dir, base))
					if code != 0 {
						t.Fatalf("%s: exit %d: %s", base, code, stderr)
					}
					d := textDigests(t, stdout, "plan digest")
					if len(d) == 0 {
						t.Fatalf("%s: no plan digest in:\n%s", base, stdout)
					}
					return d
				}
				if da, db := digestsIn(a), digestsIn(b); strings.Join(da, " ") != strings.Join(db, " ") {
					t.Errorf("%s: plan digests %v from %s, %v from %s", base, da, a, db, b)
				}
			}
		})
	}
}

// TestRenderDigestsFormat: --format digests prints the text view's
// digests, and with --runfiles the content digest is the digest of the
// render with its manifest, the one a run records as render_digest.
func TestRenderDigestsFormat(t *testing.T) {
	t.Setenv(plan.InitEnv, testenv.StaticELF(t))
	dir := t.TempDir()
	spec := writeSpec(t, dir, "s.yaml", validHead+"  engine: {kind: exec, path: /bin/true}\n  workspace: .\n")
	state := filepath.Join(dir, "state")
	parse := func(args ...string) spawnDigests {
		code, stdout, stderr := runCLI(t, append([]string{"render", "--state-dir", state, "--format", "digests", spec}, args...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var d spawnDigests
		if err := json.Unmarshal([]byte(stdout), &d); err != nil || strings.Count(stdout, "\n") != 1 {
			t.Fatalf("one JSON line expected, got %q (%v)", stdout, err)
		}
		return d
	}
	plain := parse()
	if plain.Spawn != "ok" || !render.ValidDigest(plain.Plan) || plain.Content != "" {
		t.Errorf("without --runfiles: %+v; want the plan digest only", plain)
	}
	_, text, _ := runCLI(t, "render", "--format", "text", spec)
	if got := textDigests(t, text, "plan digest"); len(got) != 1 || got[0] != plain.Plan {
		t.Errorf("text view plan digest %v, --format digests %s", got, plain.Plan)
	}
	full := parse("--runfiles")
	code, canonical, _ := runCLI(t, "render", "--state-dir", state, "--runfiles", spec)
	sum := sha256.Sum256([]byte(strings.TrimSuffix(canonical, "\n")))
	if code != 0 || full.Plan != plain.Plan || full.Content != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("with --runfiles: %+v; want plan %s and the sha256 of the render with its manifest", full, plain.Plan)
	}
}

// TestRunRefusesAnotherDigest: run --expect-digest with a digest that is
// neither the plan nor the content digest exits 118, naming both, before
// any run record exists; a malformed one is a usage error. (The accepted
// digests run: integration TestExpectDigest.)
func TestRunRefusesAnotherDigest(t *testing.T) {
	t.Setenv(plan.InitEnv, testenv.StaticELF(t))
	dir := t.TempDir()
	spec := writeSpec(t, dir, "s.yaml", validHead+"  engine: {kind: exec, path: /bin/true}\n  workspace: .\n")
	state, cache := filepath.Join(dir, "state"), filepath.Join(dir, "cache")
	_, text, _ := runCLI(t, "render", "--runfiles", "--cache-dir", cache, "--format", "text", spec)
	plans, contents := textDigests(t, text, "plan digest"), textDigests(t, text, "content digest")
	if len(plans) != 1 || len(contents) != 1 {
		t.Fatalf("render printed no digests:\n%s", text)
	}
	other := "sha256:" + strings.Repeat("0", 64)
	code, _, stderr := runCLI(t, "run", "--state-dir", state, "--cache-dir", cache, "--expect-digest", other, spec)
	if code != exitRefused || !strings.Contains(stderr, other) || !strings.Contains(stderr, plans[0]) || !strings.Contains(stderr, contents[0]) {
		t.Errorf("another digest: exit %d, stderr %q; want %d naming %s, %s and %s", code, stderr, exitRefused, other, plans[0], contents[0])
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("a refused run created its state dir: %v", err)
	}
	for _, bad := range []string{"sha256:abc", strings.TrimPrefix(plans[0], "sha256:"), strings.ToUpper(plans[0])} {
		if code, _, stderr := runCLI(t, "run", "--state-dir", state, "--expect-digest", bad, spec); code != exitSpec || !strings.Contains(stderr, "--expect-digest") {
			t.Errorf("--expect-digest %q: exit %d %q, want a usage error", bad, code, stderr)
		}
	}
}
