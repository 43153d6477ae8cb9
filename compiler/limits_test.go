package compiler

import (
	"strings"
	"testing"

	"hookbox.dev/hookbox/render"
)

// TestOutputAndInodeLimits: limits.output and the tmpfs inode limit get
// their documented defaults, follow the spec when given, and reach every
// tmpfs mount of the render.
func TestOutputAndInodeLimits(t *testing.T) {
	for name, tc := range map[string]struct {
		limits         string
		output, inodes int64
	}{
		"defaults":                     {"", DefaultOutputBytes, DefaultTmpfsBytes / TmpfsBytesPerInode},
		"a small tmpfs gets the floor": {"  limits: {tmpfs: 1Mi}", DefaultOutputBytes, MinDefaultTmpfsInodes},
		"a big tmpfs gets more":        {"  limits: {tmpfs: 8Gi}", DefaultOutputBytes, 8 << 30 / TmpfsBytesPerInode},
		"explicit":                     {"  limits: {tmpfs: 1Mi, tmpfsInodes: 100, output: 1Mi}", 1 << 20, 100},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := tryCompile(spawnYAML("{kind: exec, path: /bin/true}", tc.limits))
			if err != nil {
				t.Fatal(err)
			}
			if r.Limits.OutputBytes != tc.output || r.Limits.TmpfsInodes != tc.inodes {
				t.Errorf("limits %+v, want output %d, tmpfs inodes %d", r.Limits, tc.output, tc.inodes)
			}
			for _, m := range r.Mounts {
				if m.Kind == render.MountTmpfs && m.Inodes != tc.inodes {
					t.Errorf("tmpfs %s has %d inodes, want %d", m.Destination, m.Inodes, tc.inodes)
				}
			}
		})
	}
	if DefaultTmpfsBytes/TmpfsBytesPerInode >= 200_000 {
		t.Errorf("the default inode limit %d lets 200,000 empty files into the run dir", DefaultTmpfsBytes/TmpfsBytesPerInode)
	}
}

// TestOutputAndInodeLimitErrors: bad values are spec errors at their
// position, with a fix.
func TestOutputAndInodeLimitErrors(t *testing.T) {
	for name, tc := range map[string]struct{ limits, want string }{
		"output too small":    {"  limits: {output: 1Ki}", "test.yaml:7:20: spec.limits.output: output cap 1Ki is too small; give at least 4Ki, or omit it for the default 64Mi"},
		"output not a size":   {"  limits: {output: lots}", `test.yaml:7:20: spec.limits.output: "lots" is not a quantity`},
		"output negative":     {"  limits: {output: -1Mi}", `test.yaml:7:20: spec.limits.output: quantity "-1Mi" is not positive`},
		"inodes too few":      {"  limits: {tmpfsInodes: 10}", "test.yaml:7:25: spec.limits.tmpfsInodes: tmpfsInodes 10 is too small"},
		"inodes zero":         {"  limits: {tmpfsInodes: 0}", "test.yaml:7:25: spec.limits.tmpfsInodes: tmpfsInodes 0 is too small"},
		"inodes not a number": {"  limits: {tmpfsInodes: many}", "test.yaml:7:25: spec.limits.tmpfsInodes: expected an integer, got a string"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := tryCompile(spawnYAML("{kind: exec, path: /bin/true}", tc.limits))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}
