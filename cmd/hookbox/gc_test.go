package main

import (
	"bytes"
	"slices"
	"testing"

	"hookbox.dev/hookbox/launcher"
)

// gc prints what it did and what it left; a run it left something of is
// unfinished, once however many things it left.
func TestPrintGC(t *testing.T) {
	report := &launcher.GCReport{
		Actions: []launcher.GCAction{{RunID: "hbx-1", What: "shim", Detail: "pid 7"}, {RunID: "hbx-1", What: "container"}},
		Left:    []launcher.GCLeft{{RunID: "hbx-2", What: "containerd", Detail: "unreachable"}, {RunID: "hbx-2", What: "shim", Detail: "pid 9"}},
	}
	var b bytes.Buffer
	printGC(&b, report, false)
	want := "removed hbx-1 shim pid 7\nremoved hbx-1 container\nleft hbx-2 containerd unreachable\nleft hbx-2 shim pid 9\n"
	if b.String() != want {
		t.Errorf("printGC:\n%s\nwant:\n%s", b.String(), want)
	}
	if runs := gcUnfinished(report); !slices.Equal(runs, []string{"hbx-2"}) {
		t.Errorf("gcUnfinished = %v", runs)
	}
	b.Reset()
	printGC(&b, &launcher.GCReport{Live: []string{"hbx-3"}}, true)
	if b.String() != "nothing to collect (1 live runs)\n" {
		t.Errorf("empty report: %q", b.String())
	}
}
