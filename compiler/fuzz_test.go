package compiler

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: the spec parser never panics; it either compiles a spec
// deterministically or reports a SpecError whose every diagnostic names the
// file and a position.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../examples/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(digestBase))
	f.Add([]byte(`{"apiVersion":"hookbox.dev/v1alpha1","kind":"Spawn","metadata":{"name":"j"},"spec":{"engine":{"kind":"exec","path":"/bin/true"},"workspace":"/w"}}`))
	f.Add([]byte("apiVersion: hookbox.dev/v1alpha1\nkind: SpawnList\nitems:\n  - &a {metadata: {name: a}, spec: {engine: {kind: exec, path: /x}, workspace: /w}}\n  - *a\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("kind: Spawn\n---\nkind: Spawn\n"))
	f.Add([]byte("spec: {limits: {memory: 99999999999999999999Ei, pids: 0x7fffffffffffffff}}"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		read := func(string) ([]byte, error) { return []byte("prompt from file"), nil }
		parsed, err := Parse(data, "fuzz.yaml", "/specs", read)
		if err != nil {
			checkSpecError(t, err)
			return
		}
		renders, err := CompileAll(parsed)
		if err != nil {
			checkSpecError(t, err)
			return
		}
		again, err := Parse(data, "fuzz.yaml", "/specs", read)
		if err != nil {
			t.Fatalf("second parse failed: %v", err)
		}
		renders2, err := CompileAll(again)
		if err != nil {
			t.Fatalf("second compile failed: %v", err)
		}
		for i, r := range renders {
			a, err := r.Canonical()
			if err != nil {
				t.Fatalf("canonical JSON of a compiled render: %v", err)
			}
			b, _ := renders2[i].Canonical()
			if !bytes.Equal(a, b) {
				t.Fatalf("the same input compiled twice differs")
			}
		}
	})
}

func checkSpecError(t *testing.T, err error) {
	t.Helper()
	var specErr *SpecError
	if !errors.As(err, &specErr) || !errors.Is(err, ErrSpec) {
		t.Fatalf("spec problems must be a *SpecError, got %T: %v", err, err)
	}
	if len(specErr.Diagnostics) == 0 {
		t.Fatal("a SpecError without diagnostics")
	}
	for _, d := range specErr.Diagnostics {
		if d.File == "" || d.Pos.Line < 1 || d.Pos.Column < 1 || d.Message == "" {
			t.Fatalf("diagnostic without file:line:col or message: %+v", d)
		}
	}
}

// TestAliasBombsAreRefused: self-referencing and exponentially expanding
// aliases end in a clear error, not a hang or a crash.
func TestAliasBombsAreRefused(t *testing.T) {
	bomb := "apiVersion: hookbox.dev/v1alpha1\nkind: Spawn\nmetadata: {name: b}\nspec:\n  engine:\n    kind: scripted\n    path: /x\n    script:\n      - print: &a [x, x, x, x, x, x, x, x, x, x]\n"
	prev := "a"
	for _, name := range []string{"b", "c", "d", "e", "f", "g", "h"} {
		bomb += "      - print: &" + name + " [*" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + "]\n"
		prev = name
	}
	bomb += "  workspace: /w\n"
	for name, spec := range map[string]string{
		"exponential":    bomb,
		"self reference": "apiVersion: hookbox.dev/v1alpha1\nkind: Spawn\nmetadata: {name: b}\nspec:\n  engine: {kind: scripted, path: /x, script: [{print: &x [*x]}]}\n  workspace: /w\n",
	} {
		_, err := Parse([]byte(spec), "bomb.yaml", "/", nil)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		checkSpecError(t, err)
	}
}
