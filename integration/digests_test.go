package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"hookbox.dev/hookbox/attest"
	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/render"
)

// renderDigests is hookbox render --runfiles --format digests of spec.
func (e *env) renderDigests(spec string) render.Digests {
	e.t.Helper()
	out, err := e.command(e.t.Context(), "render", "--runfiles", "--state-dir", e.state, "--format", "digests", spec).Output()
	if err != nil {
		e.t.Fatalf("render --format digests: %v", err)
	}
	var d render.Digests
	if err := json.Unmarshal(out, &d); err != nil || !render.ValidDigest(d.Plan) || !render.ValidDigest(d.Content) {
		e.t.Fatalf("render --format digests printed %q (%v)", out, err)
	}
	return d
}

// assertNoRun checks that a refused run left nothing: no run record, no
// mount of the state dir, nothing for gc.
func (e *env) assertNoRun() {
	e.t.Helper()
	if entries, _ := os.ReadDir(launcher.RunsDir(e.state)); len(entries) > 0 {
		e.t.Errorf("a refused run left run records: %v", entries)
	}
	if mountinfo, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mountinfo), e.state) {
		e.t.Errorf("a refused run left a mount under %s", e.state)
	}
	out, err := e.command(e.t.Context(), "gc", "--json", "--state-dir", e.state).Output()
	if err != nil {
		e.t.Fatalf("gc: %v", err)
	}
	var report launcher.GCReport
	if err := json.Unmarshal(out, &report); err != nil || len(report.Actions) > 0 {
		e.t.Errorf("gc after a refused run: %s (%v)", out, err)
	}
}

// TestExpectDigest: run --expect-digest runs the spawn for its plan digest
// (also from another checkout of the spec) and for its content digest, as
// render prints them, records both, and refuses anything else with exit
// 118 before anything exists.
func TestExpectDigest(t *testing.T) {
	e := newEnv(t)
	if out, err := e.command(t.Context(), "key", "generate").CombinedOutput(); err != nil {
		t.Fatalf("hookbox key generate: %v\n%s", err, out)
	}
	pub := filepath.Join(e.keyDir, attest.PublicKeyFile)
	verifier, err := attest.LoadVerifier(pub)
	if err != nil {
		t.Fatal(err)
	}
	spec := e.spec("pinned", `
		- print: {type: result, subtype: success}
		- exit: 0`,
		"  hooks: [{name: greet, event: SessionStart, argv: [/usr/bin/printf, '%s', hi]}]")
	d := e.renderDigests(spec)

	// Refused: a digest of something else, and the pinned digest once the
	// spec changed.
	other := "sha256:" + strings.Repeat("0", 64)
	if r := e.run(spec, "--expect-digest", other); r.code != 118 || r.result != nil || !strings.Contains(r.stderr, d.Plan) || !strings.Contains(r.stderr, d.Content) {
		t.Errorf("another digest: exit %d, stderr %q; want 118 naming both digests and no result", r.code, r.stderr)
	}
	changed := e.spec("pinned", `
		- print: {type: result, subtype: success}
		- exit: 1`,
		"  hooks: [{name: greet, event: SessionStart, argv: [/usr/bin/printf, '%s', hi]}]")
	if r := e.run(changed, "--expect-digest", d.Plan); r.code != 118 || r.result != nil {
		t.Errorf("a changed spec under the old plan digest: exit %d, stderr %q; want 118", r.code, r.stderr)
	}
	e.assertNoRun()
	e.spec("pinned", `
		- print: {type: result, subtype: success}
		- exit: 0`,
		"  hooks: [{name: greet, event: SessionStart, argv: [/usr/bin/printf, '%s', hi]}]")

	// The same spec in another checkout has the same plan digest.
	moved := filepath.Join(t.TempDir(), "elsewhere", "spec")
	if err := os.CopyFS(moved, os.DirFS(e.specDir)); err != nil {
		t.Fatal(err)
	}
	movedSpec := filepath.Join(moved, filepath.Base(spec))
	if got := e.renderDigests(movedSpec); got.Plan != d.Plan || got.Content == d.Content {
		t.Errorf("another checkout: %+v; want plan %s and another content digest (host paths)", got, d.Plan)
	}

	for name, run := range map[string]struct{ spec, digest string }{
		"plan digest":                    {spec, d.Plan},
		"content digest":                 {spec, d.Content},
		"plan digest from another place": {movedSpec, d.Plan},
	} {
		t.Run(name, func(t *testing.T) {
			r := e.run(run.spec, "--expect-digest", run.digest)
			res := r.mustResult(t)
			if r.code != 0 || res.Status != launcher.StatusCompleted {
				t.Fatalf("exit %d, status %s\nstderr:\n%s", r.code, res.Status, r.stderr)
			}
			if res.PlanDigest != d.Plan || res.ContentDigest != res.RenderDigest || (run.spec == spec && res.ContentDigest != d.Content) {
				t.Errorf("result.json digests plan %s content %s render %s; render printed %+v", res.PlanDigest, res.ContentDigest, res.RenderDigest, d)
			}
			// The signed attestation names the plan digest; verify checks
			// it and result.json's digests against render.json.
			if code, out := e.verifyRecord(t, "--key", pub, res.RecordDir); code != 0 {
				t.Errorf("verify: exit %d\n%s", code, out)
			}
			env, err := attest.ReadEnvelope(filepath.Join(res.RecordDir, attest.File))
			if err != nil {
				t.Fatal(err)
			}
			payload, err := verifier.Open(t.Context(), env)
			if err != nil {
				t.Fatal(err)
			}
			if _, p, err := attest.ParseStatement(payload); err != nil || p.Render.PlanDigest != d.Plan || p.Render.Digest != res.RenderDigest {
				t.Errorf("attested render %+v (%v); want plan %s, digest %s", p, err, d.Plan, res.RenderDigest)
			}
			e.assertNothingLeft(res.RunID)
		})
	}
}
