package launcher

import (
	"bytes"
	"path/filepath"
	"slices"
	"testing"

	"hookbox.dev/hookbox/render/verify"
)

// The regression of issue item 5 (a): deleting the one unexpected exec
// line from a mismatch record made hookbox verify say confirmed, and a
// record without its stats line said events-lost.
func TestReverifyRefusesAnEditedTrace(t *testing.T) {
	dir := writeFixtureRecord(t, false)
	v, err := Reverify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if v.Status != verify.StatusMismatch || !slices.Contains(v.Reasons, verify.ReasonUnexpectedExec) {
		t.Fatalf("the untouched record: %+v, want mismatch/unexpected-exec", v)
	}
	trace := filepath.Join(dir, TraceFile)
	rewriteFile(t, trace, func(data []byte) []byte {
		var out []byte
		for _, line := range bytes.SplitAfter(data, []byte("\n")) {
			if !bytes.Contains(line, []byte(`"filename":"`+fixtureGit+`"`)) {
				out = append(out, line...)
			}
		}
		return out
	})
	v, err = Reverify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if v.Status == verify.StatusConfirmed || !slices.Contains(v.Reasons, "trace-inconsistent:count") {
		t.Errorf("without the unexpected exec's line: %+v, want unchecked/trace-inconsistent:count", v)
	}
	rewriteFile(t, trace, func(data []byte) []byte {
		lines := bytes.SplitAfter(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
		return bytes.Join(lines[:len(lines)-1], nil)
	})
	v, err = Reverify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if v.Status != verify.StatusUnchecked || !slices.Equal(v.Reasons, []string{"trace-incomplete"}) {
		t.Errorf("without the stats line: %+v, want unchecked/trace-incomplete (not events-lost)", v)
	}
}

func TestReverifyAllowedFixture(t *testing.T) {
	v, err := Reverify(writeFixtureRecord(t, true))
	if err != nil {
		t.Fatal(err)
	}
	if v.Status != verify.StatusConfirmed {
		t.Fatalf("the fixture with git allowed: %+v, want confirmed", v)
	}
}
