package mounts

import (
	"hookbox.dev/hookbox/render"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzResolveArtifacts: any declared entry resolves without panicking to
// exactly one match, and a found match is a local path of the right kind.
func FuzzResolveArtifacts(f *testing.F) {
	for _, seed := range []string{
		"report.md", "dup.txt", "out/", "out/logs/", "out/summary.md", "a/nested/deep.txt",
		"../etc/passwd", "/etc/passwd", "", ".", "..", "./", "//", "out//logs/", "linkdir/",
		"linked.txt", "isdir", "a/../../x", "\x00", "out/\x00", strings.Repeat("a/", 300),
	} {
		f.Add(seed)
	}
	root := artifactTree(f)
	f.Fuzz(func(t *testing.T, declared string) {
		got := ResolveArtifacts(root, []string{declared})
		if len(got) != 1 || got[0].Declared != declared {
			t.Fatalf("got %+v for %q", got, declared)
		}
		m := got[0]
		switch m.Status {
		case ArtifactFound:
			if !filepath.IsLocal(m.Path) || path.Clean(m.Path) != m.Path {
				t.Fatalf("%q matched %q, which is not a clean local path", declared, m.Path)
			}
			fi, err := os.Lstat(filepath.Join(root, m.Path))
			if err != nil {
				t.Fatalf("%q matched %q, which does not exist: %v", declared, m.Path, err)
			}
			if strings.HasSuffix(declared, "/") != fi.IsDir() || (!fi.IsDir() && !fi.Mode().IsRegular()) {
				t.Fatalf("%q matched %q, a %s", declared, m.Path, typeName(fi.Mode()))
			}
		case ArtifactMissing, ArtifactUnchecked:
			if m.Path != "" || m.Reason == "" {
				t.Fatalf("%q: %+v", declared, m)
			}
		default:
			t.Fatalf("%q: status %q", declared, m.Status)
		}
	})
}

// FuzzValidateDestination: no destination panics the shape check, and any
// accepted one is absolute, clean and outside /proc, /sys and /dev.
func FuzzValidateDestination(f *testing.F) {
	for _, seed := range []string{"/workspace", "/grants/x", "/proc", "/proc/x", "/procx", "/sys/../x", "relative", "", "/", "//", "/dev/", "/a/./b", "/\x00"} {
		f.Add(seed, "/grants")
	}
	f.Fuzz(func(t *testing.T, dest, other string) {
		err := validateShape(Plan{Mounts: []Mount{bindRO(other, "/src/a"), bindRO(dest, "/src/b")}})
		if checkDestination(dest) != nil || checkDestination(other) != nil {
			if err == nil {
				t.Fatalf("accepted bad destinations %q, %q", dest, other)
			}
			return
		}
		if !path.IsAbs(dest) || path.Clean(dest) != dest || dest == "/" {
			t.Fatalf("accepted %q", dest)
		}
		for _, root := range forbiddenRoots {
			if dest == root || strings.HasPrefix(dest, root+"/") {
				t.Fatalf("accepted %q under %s", dest, root)
			}
		}
		wantOrderErr := dest != other && render.Within(other, dest)
		if (err != nil) != (dest == other || wantOrderErr) {
			t.Fatalf("%q then %q: %v", other, dest, err)
		}
	})
}

func TestParseSize(t *testing.T) {
	if parseSize("980k") != 980<<10 || parseSize("2g") != 2<<30 || parseSize("x") != -1 {
		t.Error("parseSize")
	}
}
