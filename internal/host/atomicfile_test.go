package host

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "record.json")
	for _, content := range []string{"first\n", "second, longer\n"} {
		if err := WriteFileAtomic(p, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != content {
			t.Fatalf("read back %q, %v; want %q", got, err, content)
		}
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, %v; want 0640", fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
	// A failure leaves nothing behind and names the file.
	if err := WriteFileAtomic(filepath.Join(dir, "missing", "x"), nil, 0o600); err == nil {
		t.Error("wrote into a missing directory")
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "f"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(filepath.Join(dir, "sub"), []byte("x"), 0o600); err == nil {
		t.Error("replaced a non-empty directory")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("a failed write left %v", entries)
	}
}

// Several files: all in place with their modes, or, when one cannot be
// written, those before it in place, it and those after it as they were,
// and no temporary file left.
func TestWriteFilesAtomic(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "result.json"), filepath.Join(dir, "attestation.json")
	if n, err := WriteFilesAtomic([]File{{a, []byte("r1"), 0o644}, {b, []byte("a1"), 0o600}}); n != 2 || err != nil {
		t.Fatalf("%d written, %v", n, err)
	}
	for path, want := range map[string]string{a: "r1", b: "a1"} {
		if data, err := os.ReadFile(path); err != nil || string(data) != want {
			t.Errorf("%s: %q %v", path, data, err)
		}
	}
	if fi, err := os.Stat(b); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode of %s: %v %v", b, fi, err)
	}
	// The second cannot be renamed into place: a directory is in its way.
	blocked := filepath.Join(dir, "blocked")
	if err := os.MkdirAll(filepath.Join(blocked, "inside"), 0o755); err != nil {
		t.Fatal(err)
	}
	n, err := WriteFilesAtomic([]File{{a, []byte("r2"), 0o644}, {blocked, []byte("x"), 0o644}, {b, []byte("a2"), 0o600}})
	if n != 1 || err == nil || !strings.Contains(err.Error(), blocked) {
		t.Errorf("%d written, %v; want 1 and an error naming %s", n, err, blocked)
	}
	if data, _ := os.ReadFile(a); string(data) != "r2" {
		t.Errorf("the first file: %q", data)
	}
	if data, _ := os.ReadFile(b); string(data) != "a1" {
		t.Errorf("the file after the failure changed: %q", data)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
}
