package main

import (
	"runtime/debug"
	"testing"
)

// holdCollection turns collection off with a heap limit as the backstop,
// and its resume puts back exactly what was set before (GOGC, GOMEMLIMIT),
// once.
func TestHoldCollection(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(150))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(1 << 40))

	resume := holdCollection(64 << 20)
	if p := debug.SetGCPercent(-1); p != -1 {
		t.Errorf("GC percent while held: %d, want -1 (off)", p)
	}
	if l := debug.SetMemoryLimit(-1); l != 64<<20 {
		t.Errorf("memory limit while held: %d, want the hold's 64 MiB", l)
	}
	resume()
	if p := debug.SetGCPercent(-1); p != 150 {
		t.Errorf("GC percent after resume: %d, want the previous 150", p)
	}
	debug.SetGCPercent(150)
	if l := debug.SetMemoryLimit(-1); l != 1<<40 {
		t.Errorf("memory limit after resume: %d, want the previous", l)
	}
	debug.SetGCPercent(10)
	resume() // a second resume changes nothing
	if p := debug.SetGCPercent(-1); p != 10 {
		t.Errorf("a second resume set GC percent to %d", p)
	}

	// A lower limit already set stays the bound while held.
	debug.SetMemoryLimit(1 << 20)
	resume = holdCollection(64 << 20)
	if l := debug.SetMemoryLimit(-1); l != 1<<20 {
		t.Errorf("memory limit while held under a lower GOMEMLIMIT: %d, want 1 MiB", l)
	}
	resume()
}
