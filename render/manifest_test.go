package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"hookbox.dev/hookbox/render/canonjson"
)

// TestCanonicalRunfilesKnowsRunfile fails when Runfile gains, loses or
// renames a field: CanonicalRunfiles writes each member by hand.
func TestCanonicalRunfilesKnowsRunfile(t *testing.T) {
	var got []string
	rt := reflect.TypeFor[Runfile]()
	for i := range rt.NumField() {
		f := rt.Field(i)
		got = append(got, f.Name+" "+f.Type.String()+" "+f.Tag.Get("json"))
	}
	want := []string{"Path string path", "Type string type", "Mode uint32 mode", "Size int64 size,omitempty",
		"SHA256 string sha256,omitempty", "Target string target,omitempty"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Runfile's fields are %q; CanonicalRunfiles writes %q: update it (and this list)", got, want)
	}
}

// TestCanonicalRunfiles: the direct encoder gives canonjson.Marshal's bytes
// for manifests with every field set or empty, strings needing escapes,
// non-ASCII text and extreme numbers.
func TestCanonicalRunfiles(t *testing.T) {
	strs := []string{"", "/usr/bin/env", "a\"b\\c", "\x00\x1f\n\t\x7f", "<&>\u2028", "é/\U0001f600", "../x"}
	nums := []int64{0, 1, -1, 4096, math.MaxInt64, math.MinInt64}
	modes := []uint32{0, 0o644, 0o755, math.MaxUint32}
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 300 {
		m := make([]Runfile, n%7)
		for i := range m {
			m[i] = Runfile{Path: strs[r.IntN(len(strs))], Type: strs[r.IntN(len(strs))], Mode: modes[r.IntN(len(modes))],
				Size: nums[r.IntN(len(nums))], SHA256: strs[r.IntN(len(strs))], Target: strs[r.IntN(len(strs))]}
		}
		checkCanonicalRunfiles(t, m)
	}
	checkCanonicalRunfiles(t, nil)
	for _, bad := range []Runfile{{Path: "/bad\xff"}, {Path: "/x", Target: "\xc3"}, {Path: "/x", SHA256: "\xff"}, {Path: "/x", Type: "\xfe"}} {
		if _, err := CanonicalRunfiles([]Runfile{bad}); !errors.Is(err, canonjson.ErrInvalidUTF8) {
			t.Errorf("%+v: %v, want ErrInvalidUTF8", bad, err)
		}
	}
}

func checkCanonicalRunfiles(t *testing.T, m []Runfile) {
	t.Helper()
	got, err := CanonicalRunfiles(m)
	if err != nil {
		t.Fatalf("CanonicalRunfiles(%+v): %v", m, err)
	}
	want, err := canonjson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if m == nil {
		want = []byte("[]") // a manifest is a list; Marshal writes nil as null
	}
	if string(got) != string(want) {
		t.Fatalf("CanonicalRunfiles(%+v)\n = %s\nwant %s", m, got, want)
	}
	d, err := RunfilesDigest(m)
	if err != nil {
		t.Fatal(err)
	}
	if wantDigest, _, _ := canonjson.Digest(m); m != nil && d != wantDigest {
		t.Errorf("RunfilesDigest = %s, canonjson.Digest %s", d, wantDigest)
	}
}

// TestCanonicalWithRunfiles: a render's canonical bytes, with its manifest
// encoded directly, are canonjson.Marshal's, for every golden render given
// a manifest.
func TestCanonicalWithRunfiles(t *testing.T) {
	goldens, _ := filepath.Glob("../compiler/testdata/golden/*.json")
	if len(goldens) == 0 {
		t.Fatal("no golden renders")
	}
	manifest := []Runfile{
		{Path: "/usr", Type: RunfileDir, Mode: 0o755},
		{Path: "/usr/bin/env", Type: RunfileFile, Mode: 0o755, Size: 48536, SHA256: "ab12"},
		{Path: "/usr/bin/sh", Type: RunfileSymlink, Mode: 0o777, Target: "dash"},
	}
	for _, g := range goldens {
		data, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(data)) // a file may hold several renders
		for dec.More() {
			var r Render
			if err := dec.Decode(&r); err != nil {
				t.Fatalf("%s: %v", g, err)
			}
			checkCanonicalRender(t, g, &r, manifest)
		}
	}
}

func checkCanonicalRender(t *testing.T, g string, r *Render, manifest []Runfile) {
	t.Helper()
	for _, m := range [][]Runfile{nil, manifest} {
		r.Runfiles = m
		got, err := r.Canonical()
		if err != nil {
			t.Fatalf("%s: %v", g, err)
		}
		want, err := canonjson.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s with %d runfiles: Canonical differs from canonjson.Marshal", g, len(m))
		}
		if d, b, err := r.Digest(); err != nil || string(b) != string(want) {
			t.Errorf("%s: Digest %s: %v", g, d, err)
		} else if wd, _, _ := canonjson.Digest(r); d != wd {
			t.Errorf("%s: Digest %s, canonjson.Digest %s", g, d, wd)
		}
	}
}

// FuzzCanonicalRunfiles compares the direct encoder with canonjson.Marshal
// on arbitrary entries, invalid UTF-8 included (both must refuse it).
func FuzzCanonicalRunfiles(f *testing.F) {
	f.Add("/usr/bin/env", "file", uint32(0o755), int64(10), "ab", "")
	f.Add("/a\x00b", "symlink", uint32(0o777), int64(0), "", "t\xff")
	f.Fuzz(func(t *testing.T, path, typ string, mode uint32, size int64, sha, target string) {
		m := []Runfile{{Path: path, Type: typ, Mode: mode, Size: size, SHA256: sha, Target: target}, {Path: target, Type: path}}
		got, err := CanonicalRunfiles(m)
		want, werr := canonjson.Marshal(m)
		if (err != nil) != (werr != nil) {
			t.Fatalf("CanonicalRunfiles: %v; canonjson.Marshal: %v", err, werr)
		}
		if err != nil {
			if !errors.Is(err, canonjson.ErrInvalidUTF8) {
				t.Fatalf("refused with %v, want ErrInvalidUTF8", err)
			}
			return
		}
		if string(got) != string(want) {
			t.Fatalf("CanonicalRunfiles = %s, want %s", got, want)
		}
	})
}

// TestContainerPath: a path at or below a shadowed directory moves below
// HostDir; a path that only starts with its name does not.
func TestContainerPath(t *testing.T) {
	for in, want := range map[string]string{
		"/tmp": HostDir + "/tmp", "/tmp/x/y": HostDir + "/tmp/x/y", "/tmpx": "/tmpx", "/tmpx/y": "/tmpx/y",
		"/run/hookbox": HostDir + "/run/hookbox", "/usr/bin/env": "/usr/bin/env", "/": "/", "/dev": HostDir + "/dev",
		"/devices": "/devices", "/hookbox/host/x": HostDir + "/hookbox/host/x",
	} {
		if got := ContainerPath(in); got != want {
			t.Errorf("ContainerPath(%q) = %q, want %q", in, got, want)
		}
	}
}
