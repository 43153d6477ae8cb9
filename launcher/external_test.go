package launcher

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"hookbox.dev/hookbox/render/verify"
)

// externalRecord writes what the node agent writes before sealing: the
// render, and when armed the identities and trace.
func externalRecord(t *testing.T, trace []byte) string {
	t.Helper()
	dir := t.TempDir()
	data, err := json.Marshal(fixtureRender())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, RenderFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if trace != nil {
		if err := writeJSON(filepath.Join(dir, IdentitiesFile), fixtureIDs, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, TraceFile), trace, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestSealExternal(t *testing.T) {
	keys := newTestKeys(t)
	full := traceRecord(t, fixtureEvents(false))
	// The agent stopped while the container ran: the stats line never came.
	cut := full[:len(full)-1]
	for i := len(cut) - 1; i >= 0 && cut[i] != '\n'; i-- {
		cut = cut[:i]
	}
	for _, tc := range []struct {
		name    string
		trace   []byte
		unarmed string
		status  verify.Status
		reason  string
	}{
		{"armed", full, "", verify.StatusConfirmed, ""},
		{"not-armed", nil, "started-before-agent", verify.StatusUnchecked, "tracer-unavailable:started-before-agent"},
		{"agent-stopped", cut, "", verify.StatusUnchecked, verify.ReasonTraceIncomplete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := externalRecord(t, tc.trace)
			code := 0
			res, err := SealExternal(context.Background(), dir, External{RunID: "pod/ctr", Spawn: "fixture", Status: StatusCompleted,
				ExitCode: &code, Unarmed: tc.unarmed, StartedAt: time.Unix(1, 0), EndedAt: time.Unix(2, 0)}, keys.signer, "", "v0.test")
			if err != nil {
				t.Fatal(err)
			}
			if res.Trace.Status != tc.status || tc.reason != "" && !slices.Contains(res.Trace.Reasons, tc.reason) {
				t.Fatalf("verdict %s %v, want %s with %q", res.Trace.Status, res.Trace.Reasons, tc.status, tc.reason)
			}
			c, err := CheckRecord(context.Background(), dir, CheckOptions{Attestation: filepath.Join(dir, "attestation.dsse.json"), Verifier: keys.verifier})
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Problems) > 0 || c.Status != tc.status || c.Attestation == nil {
				t.Fatalf("check: %s %v problems %v attestation %v", c.Status, c.Reasons, c.Problems, c.Attestation)
			}
		})
	}
}
