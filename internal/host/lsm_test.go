package host

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestParseLSMs(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"lockdown,capability,landlock,bpf", []string{"lockdown", "capability", "landlock", "bpf"}},
		{"capability,yama,apparmor\n", []string{"capability", "yama", "apparmor"}},
		{"", nil},
		{",bpf,,", []string{"bpf"}},
	} {
		if got := ParseLSMs(c.in); !slices.Equal(got, c.want) {
			t.Errorf("ParseLSMs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestReadLSMs(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadLSMs(filepath.Join(dir, "lsm")); !errors.Is(err, ErrNoSecurityfs) {
		t.Errorf("missing file: %v, want ErrNoSecurityfs", err)
	}
	path := filepath.Join(dir, "lsm")
	if err := os.WriteFile(path, []byte("capability,bpf"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadLSMs(path); err != nil || !slices.Equal(got, []string{"capability", "bpf"}) {
		t.Errorf("ReadLSMs = %q, %v", got, err)
	}
}
