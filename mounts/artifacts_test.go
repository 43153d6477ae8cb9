package mounts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// artifactTree builds a harvested run dir:
//
//	report.md            root file
//	out/summary.md
//	out/report.md        loses to the root's report.md
//	b/dup.txt  a/dup.txt c/dup.txt   a/ wins (sorted)
//	a/nested/deep.txt    two levels down: not a bare-name match
//	out/logs/            directory
//	isdir/               a directory named like a bare file
//	linkdir -> out       symlinked directory, never searched
//	linked.txt -> report.md
func artifactTree(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"out/logs", "a/nested", "b", "c", "isdir", "z"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"report.md", "out/summary.md", "out/report.md", "a/dup.txt", "b/dup.txt", "c/dup.txt", "a/nested/deep.txt", "z/only-via-link.txt"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"linkdir": "out", "linked.txt": "report.md", "0-link": "z"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestResolveArtifacts(t *testing.T) {
	root := artifactTree(t)
	tests := []struct {
		declared string
		status   ArtifactStatus
		path     string
	}{
		{"report.md", ArtifactFound, "report.md"},           // root first
		{"summary.md", ArtifactFound, "out/summary.md"},     // then an immediate subdirectory
		{"dup.txt", ArtifactFound, "a/dup.txt"},             // sorted: a < b < c
		{"deep.txt", ArtifactMissing, ""},                   // only immediate subdirectories
		{"out/summary.md", ArtifactFound, "out/summary.md"}, // exact
		{"b/dup.txt", ArtifactFound, "b/dup.txt"},           // exact, not the sorted winner
		{"a/nested/deep.txt", ArtifactFound, "a/nested/deep.txt"},
		{"out/missing.md", ArtifactMissing, ""},
		{"out/logs/", ArtifactFound, "out/logs"}, // directory, exact
		{"logs/", ArtifactMissing, ""},           // a directory is never searched for
		{"out/summary.md/", ArtifactMissing, ""}, // a file is not a directory
		{"out/logs", ArtifactMissing, ""},        // a directory is not a file
		{"isdir", ArtifactMissing, ""},           // bare names match regular files only
		{"linkdir/", ArtifactMissing, ""},        // symlinks never match
		{"linkdir/summary.md", ArtifactMissing, ""},
		{"linked.txt", ArtifactMissing, ""},
		{"only-via-link.txt", ArtifactFound, "z/only-via-link.txt"}, // 0-link sorts first but is not searched
		{"./out/../report.md", ArtifactFound, "report.md"},          // cleaned first
		{"../etc/passwd", ArtifactMissing, ""},
		{"/etc/passwd", ArtifactMissing, ""},
		{"", ArtifactMissing, ""},
		{".", ArtifactMissing, ""},
	}
	declared := make([]string, len(tests))
	for i, tt := range tests {
		declared[i] = tt.declared
	}
	got := ResolveArtifacts(root, declared)
	if len(got) != len(tests) {
		t.Fatalf("%d matches for %d entries", len(got), len(tests))
	}
	for i, tt := range tests {
		m := got[i]
		if m.Declared != tt.declared || m.Status != tt.status || m.Path != tt.path {
			t.Errorf("%q: got %+v, want %s %q", tt.declared, m, tt.status, tt.path)
		}
		if m.Status != ArtifactFound && m.Reason == "" {
			t.Errorf("%q: %s without a reason", tt.declared, m.Status)
		}
	}
}

// TestResolveArtifactsDeterministic: the same tree gives the same winner
// every run, whatever order the directory lists in.
func TestResolveArtifactsDeterministic(t *testing.T) {
	for range 5 {
		root := t.TempDir()
		for _, d := range []string{"zeta", "alpha", "mid", "Beta"} { // creation order differs from sort order
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, d, "result.json"), []byte(d), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if m := ResolveArtifacts(root, []string{"result.json"})[0]; m.Path != "Beta/result.json" {
			t.Fatalf("got %+v, want Beta/result.json (byte-wise sorted)", m)
		}
	}
}

func TestResolveArtifactsUnchecked(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "never-harvested")
	for _, m := range ResolveArtifacts(missing, []string{"report.md", "out/"}) {
		if m.Status != ArtifactUnchecked || m.Reason == "" {
			t.Errorf("%q over a missing harvest: %+v, want unchecked with a reason", m.Declared, m)
		}
	}

	// An earlier subdirectory that cannot be searched (here: the path gets
	// longer than PATH_MAX, which even root cannot lstat) makes the search
	// unchecked, though a later subdirectory holds the file.
	root := t.TempDir()
	for len(root) < 3800 {
		root = filepath.Join(root, strings.Repeat("r", 250))
	}
	name := strings.Repeat("n", 120)
	for _, d := range []string{strings.Repeat("a", 255), "b"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "b", name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if m := ResolveArtifacts(root, []string{name})[0]; m.Status != ArtifactUnchecked || !strings.Contains(m.Reason, "file name too long") {
		t.Errorf("an unsearchable earlier subdirectory gave %+v, want unchecked", m)
	}
	if m := ResolveArtifacts(root, []string{"b/" + name})[0]; m.Status != ArtifactFound {
		t.Errorf("the exact path gave %+v, want found", m)
	}
}
