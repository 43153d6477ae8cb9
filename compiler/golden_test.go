package compiler

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"hookbox.dev/hookbox/internal/testenv"

	"hookbox.dev/hookbox/render"
)

var update = flag.Bool("update", false, "rewrite golden files")

// hostNeutral replaces host-specific absolute paths so goldens compare on
// any machine and checkout location.
func hostNeutral(t *testing.T, data []byte) []byte {
	t.Helper()
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	// A checkout below a directory the container mounts over (/tmp…) has
	// its programs relocated under render.HostDir: same render otherwise.
	data = bytes.ReplaceAll(data, []byte(render.ContainerPath(repo)), []byte("$REPO"))
	return bytes.ReplaceAll(data, []byte(repo), []byte("$REPO"))
}

// hostNeutralRender substitutes host paths and re-sorts, since a checkout
// elsewhere sorts its paths differently against /usr/bin.
func hostNeutralRender(t *testing.T, r *render.Render) *render.Render {
	t.Helper()
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var out render.Render
	if err := json.Unmarshal(hostNeutral(t, data), &out); err != nil {
		t.Fatal(err)
	}
	out.SortLists()
	return &out
}

func renderFile(t *testing.T, file string) []*render.Render {
	t.Helper()
	renders, err := CompileFileWithParams(file, nil)
	if err != nil {
		t.Fatalf("compile %s: %v", file, err)
	}
	return renders
}

func canonicalOf(t *testing.T, r *render.Render) []byte {
	t.Helper()
	data, err := r.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestExamplesGolden(t *testing.T) {
	files, err := filepath.Glob("../examples/*.yaml")
	if err != nil || len(files) < 4 {
		t.Fatalf("expected the four examples, found %v (%v)", files, err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			var got bytes.Buffer
			for _, r := range renderFile(t, file) {
				if err := json.Indent(&got, canonicalOf(t, hostNeutralRender(t, r)), "", "  "); err != nil {
					t.Fatal(err)
				}
				got.WriteByte('\n')
			}
			golden := filepath.Join("testdata", "golden", name+".json")
			if *update {
				if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./compiler -run Golden -update to create it)", err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Errorf("render of %s differs from %s (run with -update after checking the change):\n%s", file, golden, testenv.FirstDiff(got.String(), string(want)))
			}
		})
	}
}

// TestRenderDeterministic compiles every example many times and from a copy
// in another directory: the bytes (host paths aside) never change.
func TestRenderDeterministic(t *testing.T) {
	files, _ := filepath.Glob("../examples/*.yaml")
	for _, file := range files {
		first := renderFile(t, file)
		for i := 0; i < 25; i++ {
			again := renderFile(t, file)
			for j := range first {
				if !bytes.Equal(canonicalOf(t, first[j]), canonicalOf(t, again[j])) {
					t.Fatalf("%s: render %d differs on repetition %d", file, j, i)
				}
			}
		}
	}

	// The same spec in another place gives the same render once the
	// location is substituted.
	dir := t.TempDir()
	spec := `apiVersion: hookbox.dev/v1alpha1
kind: Spawn
metadata: {name: moved}
spec:
  engine: {kind: claude, path: ./bin/claude}
  promptFile: prompt.md
  workspace: ./ws
  hooks: [{name: h, event: Stop, argv: [./hooks/h, x]}]
`
	write := func(root string) {
		for name, content := range map[string]string{"spawn.yaml": spec, "prompt.md": "review it"} {
			if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "elsewhere", "b")
	for _, root := range []string{a, b} {
		if err := os.MkdirAll(root, 0o755); err != nil {
			t.Fatal(err)
		}
		write(root)
	}
	renderA, renderB := renderFile(t, filepath.Join(a, "spawn.yaml"))[0], renderFile(t, filepath.Join(b, "spawn.yaml"))[0]
	ra, rb := canonicalOf(t, renderA), canonicalOf(t, renderB)
	if !bytes.Equal(bytes.ReplaceAll(ra, []byte(a), []byte("$ROOT")), bytes.ReplaceAll(rb, []byte(b), []byte("$ROOT"))) {
		t.Fatalf("render depends on more than the spec's location:\n%s\n%s", ra, rb)
	}
	// The plan digest needs no substitution: it is the location's own.
	pa, _, err := renderA.PlanDigest()
	if err != nil {
		t.Fatal(err)
	}
	if pb, _, _ := renderB.PlanDigest(); pa != pb {
		t.Errorf("the plan digest depends on the spec's location: %s in %s, %s in %s", pa, a, pb, b)
	}
}
