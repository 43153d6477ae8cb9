package k8s

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"hookbox.dev/hookbox/internal/testenv"
	"os"
	"path/filepath"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"

	"hookbox.dev/hookbox/compiler"
	"hookbox.dev/hookbox/render"
)

var update = flag.Bool("update", false, "rewrite golden files")

// goldenOptions pin everything that is not the render.
func goldenOptions() Options {
	pin := func(name string) string {
		sum := sha256.Sum256([]byte(name))
		return "registry.example/hookbox/" + name + "@sha256:" + hex.EncodeToString(sum[:])
	}
	return Options{Image: pin("base"), RunfilesImage: pin("runfiles"), SeedImage: pin("seed"), Version: "v0.0.0-test"}
}

// goldenCases are the examples with golden YAML, and the --set values a
// pipeline would pass.
var goldenCases = []struct {
	example string
	params  map[string]string
}{
	{"review", nil},
	{"pipeline", map[string]string{"pr": "123", "ref": "refs/pull/123/head"}},
	{"codex", nil},
	{"hello", nil},
}

// neutralRender replaces the checkout's location (as a host path and as a
// container path, see render.ContainerPath) with /REPO and re-sorts, so the
// YAML is the same wherever the repository is checked out.
func neutralRender(t *testing.T, r *render.Render) *render.Render {
	t.Helper()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.ReplaceAll(data, []byte(render.ContainerPath(repo)), []byte("/REPO"))
	data = bytes.ReplaceAll(data, []byte(repo), []byte("/REPO"))
	var out render.Render
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	out.SortLists()
	return &out
}

func compileExample(t *testing.T, example string, params map[string]string) []*render.Render {
	t.Helper()
	renders, err := compiler.CompileFileWithParams(filepath.Join("..", "..", "examples", example+".yaml"), params)
	if err != nil {
		t.Fatalf("compile %s: %v", example, err)
	}
	return renders
}

func exampleYAML(t *testing.T, example string, params map[string]string) []byte {
	t.Helper()
	renders := compileExample(t, example, params)
	for i, r := range renders {
		renders[i] = neutralRender(t, r)
	}
	data, err := YAML(renders, goldenOptions())
	if err != nil {
		t.Fatalf("%s: %v", example, err)
	}
	return data
}

func TestExamplesGolden(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.example, func(t *testing.T) {
			got := exampleYAML(t, tc.example, tc.params)
			golden := filepath.Join("testdata", tc.example+".yaml")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./render/k8s -run Golden -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("YAML of %s differs from %s (run with -update after checking the change):\n%s", tc.example, golden, testenv.FirstDiff(string(got), string(want)))
			}
		})
	}
}

// TestDeterministic: the same renders give the same bytes, every time.
func TestDeterministic(t *testing.T) {
	for _, tc := range goldenCases {
		first := exampleYAML(t, tc.example, tc.params)
		for i := 0; i < 10; i++ {
			if again := exampleYAML(t, tc.example, tc.params); !bytes.Equal(first, again) {
				t.Fatalf("%s: output differs on repetition %d:\n%s", tc.example, i, testenv.FirstDiff(string(again), string(first)))
			}
		}
	}
}

// strictDecoder decodes YAML into k8s.io/api types and fails on unknown
// fields, duplicate keys and type errors.
func strictDecoder(t *testing.T) runtime.Decoder {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, batchv1.AddToScheme, networkingv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme, kjson.SerializerOptions{Yaml: true, Strict: true})
}

// splitDocuments splits multi-document YAML as written by Marshal.
func splitDocuments(t *testing.T, data []byte) [][]byte {
	t.Helper()
	if !bytes.HasPrefix(data, []byte("---\n")) {
		t.Fatalf("output does not start with a document separator")
	}
	var docs [][]byte
	for _, doc := range bytes.Split(data[4:], []byte("\n---\n")) {
		docs = append(docs, append(doc, '\n'))
	}
	return docs
}

// decodeAll strictly decodes every document: any error, even one returned
// beside a decoded object, fails.
func decodeAll(t *testing.T, data []byte) []runtime.Object {
	t.Helper()
	dec := strictDecoder(t)
	var objs []runtime.Object
	for i, doc := range splitDocuments(t, data) {
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, doc)
		}
		objs = append(objs, obj)
	}
	return objs
}
