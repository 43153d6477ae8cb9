package main

import (
	"bytes"
	"strings"
	"testing"

	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/mounts"
)

// TestSummaryEscapesArtifactNames: a name with control characters (the
// engine chose it) is printed quoted, never raw to the terminal.
func TestSummaryEscapesArtifactNames(t *testing.T) {
	res := &launcher.Result{Status: launcher.StatusCompleted, RunID: "r", Artifacts: []mounts.ArtifactMatch{
		{Declared: "out/", Status: "found", Path: "out/\x1b[2Jcleared\nfake line"},
		{Declared: "plain name.md", Status: "found", Path: "plain name.md"},
	}}
	var b bytes.Buffer
	printSummary(&b, res)
	out := b.String()
	if strings.ContainsAny(out, "\x1b") || strings.Contains(out, "\nfake line") {
		t.Errorf("control characters reached the summary raw:\n%q", out)
	}
	if !strings.Contains(out, `"out/\x1b[2Jcleared\nfake line"`) {
		t.Errorf("the name is not shown quoted:\n%s", out)
	}
	if !strings.Contains(out, "artifact plain name.md  found plain name.md\n") {
		t.Errorf("a printable name must stay as is:\n%s", out)
	}
}
