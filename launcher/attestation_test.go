package launcher

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"hookbox.dev/hookbox/attest"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/verify"
)

// sealFixture seals a fixture record as a run does at its end: digests,
// result.json, then the attestation, signed when signer is set.
func sealFixture(t *testing.T, dir string, signer *attest.Signer) {
	t.Helper()
	var r = fixtureRender()
	if err := readJSON(filepath.Join(dir, RenderFile), r); err != nil {
		t.Fatal(err)
	}
	x := &execution{dir: dir, r: r, result: readFixtureResult(t, dir), ctx: context.Background(),
		opts: Options{Signer: signer, Unsigned: "no host key", Version: "v0.test", Sink: SinkFunc(func(Event) {})}}
	x.seal()
	if x.result.Record == nil {
		t.Fatalf("seal: %s", x.result.Error)
	}
	if err := x.writeResult(); err != nil {
		t.Fatal(err)
	}
	if a := x.result.Attestation; a == nil || a.Error != "" {
		t.Fatalf("attest: %+v", a)
	}
}

type testKeys struct {
	signer   *attest.Signer
	verifier *attest.Verifier
	pub      string
}

func newTestKeys(t *testing.T) testKeys {
	t.Helper()
	kp, err := attest.GenerateKey(filepath.Join(t.TempDir(), "keys"), false)
	if err != nil {
		t.Fatal(err)
	}
	s, err := attest.LoadSigner(kp.Private)
	if err != nil {
		t.Fatal(err)
	}
	v, err := attest.LoadVerifier(kp.Public)
	if err != nil {
		t.Fatal(err)
	}
	return testKeys{signer: s, verifier: v, pub: kp.Public}
}

func TestDigestRecord(t *testing.T) {
	dir := writeFixtureRecord(t, true)
	for _, p := range []string{"tmpfs/left", "workspace-store/x", "etc/script.json", attest.File, "notify.stderr", CollectedFile} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o700)
		os.WriteFile(filepath.Join(dir, p), []byte("not sealed"), 0o644)
	}
	os.WriteFile(filepath.Join(dir, ArtifactDir, "odd%\xffname"), []byte("x"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(dir, ArtifactDir, "link"))
	d, err := DigestRecord(dir)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range d.Files {
		paths = append(paths, f.Path)
	}
	want := []string{"artifacts/link", "artifacts/odd%25%FFname", "artifacts/out/answer.txt", IdentitiesFile, RenderFile, StdoutFile, TraceFile}
	if !slices.Equal(paths, want) {
		t.Errorf("sealed files %q, want %q (result.json, the attestation, notify.stderr, collected.json and the mount sources are not sealed)", paths, want)
	}
	if i := slices.Index(paths, "artifacts/link"); i < 0 || d.Files[i].Type != "symlink" || d.Files[i].Size != int64(len("/etc/passwd")) {
		t.Errorf("a symlink is sealed by its link text, never followed: %+v", d.Files)
	}
	if !strings.HasPrefix(d.Chain, "sha256:") {
		t.Errorf("chain %q", d.Chain)
	}
	again, _ := DigestRecord(dir)
	if again.Chain != d.Chain {
		t.Error("the same record must give the same chain")
	}
	if problems := d.Check(dir); len(problems) != 0 {
		t.Errorf("an untouched record: %v", problems)
	}
}

func TestCheckRecordUntouched(t *testing.T) {
	keys := newTestKeys(t)
	for _, allowGit := range []bool{false, true} {
		dir := writeFixtureRecord(t, allowGit)
		sealFixture(t, dir, keys.signer)
		c, err := CheckRecord(t.Context(), dir, CheckOptions{Attestation: filepath.Join(dir, attest.File), Verifier: keys.verifier})
		if err != nil {
			t.Fatal(err)
		}
		want := verify.StatusMismatch
		if allowGit {
			want = verify.StatusConfirmed
		}
		if len(c.Problems) != 0 || c.Status != want || c.Digests != DigestsVerified || c.Attestation == nil {
			t.Fatalf("untouched record (git allowed %v): %+v, want %s without problems", allowGit, c, want)
		}
		if !slices.Equal(c.Attestation.Subjects, []string{"artifacts/out/answer.txt"}) || c.Attestation.KeyID != keys.verifier.KeyID() {
			t.Errorf("attestation %+v", c.Attestation)
		}
		// The notifier writes after the attestation: its outcome and its
		// stderr are outside it.
		rewriteFile(t, filepath.Join(dir, ResultFile), func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"schema_version": 1,`), []byte(`"schema_version": 1, "notify": {"status": "ok"},`), 1)
		})
		os.WriteFile(filepath.Join(dir, "notify.stderr"), []byte("posted\n"), 0o600)
		if c, _ := CheckRecord(t.Context(), dir, CheckOptions{Attestation: filepath.Join(dir, attest.File), Verifier: keys.verifier}); len(c.Problems) != 0 {
			t.Errorf("after the notifier: %v", c.Problems)
		}
	}
}

// The tamper table of issue item 5: every edit of a recorded (mismatch)
// run is refused with a reason naming what changed.
func TestCheckRecordTampered(t *testing.T) {
	keys := newTestKeys(t)
	other := newTestKeys(t)
	gitLine := []byte(`"filename":"` + fixtureGit + `"`)
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, dir string)
		// verifier overrides the host key (nil: the host key).
		verifier *attest.Verifier
		want     []Problem // each must be found (reason and path)
	}{
		{
			name: "delete the unexpected exec's line",
			tamper: func(t *testing.T, dir string) {
				rewriteFile(t, filepath.Join(dir, TraceFile), func(b []byte) []byte {
					var out []byte
					for _, line := range bytes.SplitAfter(b, []byte("\n")) {
						if !bytes.Contains(line, gitLine) {
							out = append(out, line...)
						}
					}
					return out
				})
			},
			want: []Problem{{Reason: ProblemFileChanged, Path: TraceFile}, {Reason: ProblemAttestedDiffers, Path: TraceFile},
				{Reason: ProblemVerdictDiffers, Path: ResultFile}, {Reason: ProblemAttestedVerdict, Path: TraceFile}},
		},
		{
			name: "change an argv",
			tamper: func(t *testing.T, dir string) {
				rewriteFile(t, filepath.Join(dir, TraceFile), func(b []byte) []byte {
					return bytes.Replace(b, []byte(`"argv":["git","status"]`), []byte(`"argv":["git","log"]`), 1)
				})
			},
			want: []Problem{{Reason: ProblemFileChanged, Path: TraceFile}, {Reason: ProblemAttestedDiffers, Path: TraceFile}},
		},
		{
			name: "add the program to render.json's allow list",
			tamper: func(t *testing.T, dir string) {
				allowGitInRender(t, dir)
			},
			want: []Problem{{Reason: ProblemFileChanged, Path: RenderFile}, {Reason: ProblemAttestedDiffers, Path: RenderFile},
				{Reason: ProblemVerdictDiffers, Path: ResultFile}, {Reason: ProblemAttestedVerdict, Path: TraceFile}},
		},
		{
			name: "change an artifact",
			tamper: func(t *testing.T, dir string) {
				os.WriteFile(filepath.Join(dir, ArtifactDir, "out", "answer.txt"), []byte("43\n"), 0o644)
			},
			want: []Problem{{Reason: ProblemFileChanged, Path: "artifacts/out/answer.txt"}, {Reason: ProblemSubjectChanged, Path: "artifacts/out/answer.txt"}},
		},
		{
			name: "add an artifact",
			tamper: func(t *testing.T, dir string) {
				os.WriteFile(filepath.Join(dir, ArtifactDir, "out", "extra.txt"), []byte("x"), 0o644)
			},
			want: []Problem{{Reason: ProblemFileAdded, Path: "artifacts/out/extra.txt"}},
		},
		{
			name:   "remove stdout",
			tamper: func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, StdoutFile)) },
			want:   []Problem{{Reason: ProblemFileMissing, Path: StdoutFile}},
		},
		{
			name: "change result.json's verdict",
			tamper: func(t *testing.T, dir string) {
				editResult(t, dir, func(res *Result) {
					res.Trace.Status, res.Trace.Reasons, res.Trace.Diffs = verify.StatusConfirmed, nil, nil
				})
			},
			want: []Problem{{Reason: ProblemVerdictDiffers, Path: ResultFile}, {Reason: ProblemAttestedDiffers, Path: ResultFile}},
		},
		{
			name: "edit the trace and re-seal result.json's digests to match",
			tamper: func(t *testing.T, dir string) {
				rewriteFile(t, filepath.Join(dir, TraceFile), func(b []byte) []byte {
					return bytes.Replace(b, []byte(`"argv":["git","status"]`), []byte(`"argv":["git","log"]`), 1)
				})
				d, err := DigestRecord(dir)
				if err != nil {
					t.Fatal(err)
				}
				editResult(t, dir, func(res *Result) { res.Record = &d })
			},
			want: []Problem{{Reason: ProblemAttestedDiffers, Path: ResultFile}, {Reason: ProblemAttestedDiffers, Path: TraceFile}},
		},
		{
			name:   "remove result.json's digests",
			tamper: func(t *testing.T, dir string) { editResult(t, dir, func(res *Result) { res.Record = nil }) },
			want:   []Problem{{Reason: ProblemNoDigests, Path: ResultFile}},
		},
		{
			name: "re-sign the attestation with another key",
			tamper: func(t *testing.T, dir string) {
				env, err := attest.ReadEnvelope(filepath.Join(dir, attest.File))
				if err != nil {
					t.Fatal(err)
				}
				payload, _ := env.DecodeB64Payload()
				resigned, err := other.signer.Sign(t.Context(), payload)
				if err != nil {
					t.Fatal(err)
				}
				writeJSON(filepath.Join(dir, attest.File), resigned, 0o644)
			},
			want: []Problem{{Reason: ProblemSignature, Path: attest.File}},
		},
		{
			name:     "verify with another host's key",
			tamper:   func(*testing.T, string) {},
			verifier: other.verifier,
			want:     []Problem{{Reason: ProblemSignature, Path: attest.File}},
		},
		{
			name: "change the statement under the signature",
			tamper: func(t *testing.T, dir string) {
				rewriteFile(t, filepath.Join(dir, attest.File), func(b []byte) []byte {
					var env map[string]any
					json.Unmarshal(b, &env)
					env["payload"] = strings.Replace(env["payload"].(string), "A", "B", 1)
					out, _ := json.Marshal(env)
					return out
				})
			},
			want: []Problem{{Reason: ProblemSignature, Path: attest.File}},
		},
		{
			name:   "remove the attestation",
			tamper: func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, attest.File)) },
			want:   []Problem{{Reason: ProblemAttestationAbsent, Path: attest.File}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFixtureRecord(t, false)
			sealFixture(t, dir, keys.signer)
			tc.tamper(t, dir)
			v := keys.verifier
			if tc.verifier != nil {
				v = tc.verifier
			}
			c, err := CheckRecord(t.Context(), dir, CheckOptions{Attestation: filepath.Join(dir, attest.File), Verifier: v})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !slices.ContainsFunc(c.Problems, func(p Problem) bool { return p.Reason == w.Reason && p.Path == w.Path }) {
					t.Errorf("want %s on %s; problems:\n%s", w.Reason, w.Path, problemList(c.Problems))
				}
			}
			if len(c.Problems) == 0 {
				t.Errorf("a tampered record must not verify: %+v", c)
			}
		})
	}
}

func TestCheckRecordUnsigned(t *testing.T) {
	dir := writeFixtureRecord(t, true)
	sealFixture(t, dir, nil)
	res := readFixtureResult(t, dir)
	if a := res.Attestation; a == nil || a.Signed || a.Unsigned != "no host key" {
		t.Fatalf("result.json's attestation section: %+v", a)
	}
	c, err := CheckRecord(t.Context(), dir, CheckOptions{Attestation: filepath.Join(dir, attest.File), Verifier: newTestKeys(t).verifier})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Problems) != 1 || c.Problems[0].Reason != ProblemUnsigned {
		t.Errorf("an unsigned attestation: %v", c.Problems)
	}
	// Without --attestation, the record itself still verifies.
	c, _ = CheckRecord(t.Context(), dir, CheckOptions{})
	if len(c.Problems) != 0 || c.Status != verify.StatusConfirmed || c.Digests != DigestsVerified {
		t.Errorf("the unsigned record's own digests: %+v", c)
	}
}

// Without an attestation, verify RUN_DIR checks the digests and the
// recorded verdict; a record from before digests is still judged, and an
// edit that changes its verdict is still found.
func TestCheckRecordWithoutAttestation(t *testing.T) {
	dir := writeFixtureRecord(t, false)
	sealFixture(t, dir, nil)
	allowGitInRender(t, dir)
	c, _ := CheckRecord(t.Context(), dir, CheckOptions{})
	if !slices.ContainsFunc(c.Problems, func(p Problem) bool { return p.Reason == ProblemFileChanged && p.Path == RenderFile }) {
		t.Errorf("a changed render.json: %s", problemList(c.Problems))
	}

	old := writeFixtureRecord(t, false) // no record section: an older record
	c, _ = CheckRecord(t.Context(), old, CheckOptions{})
	if len(c.Problems) != 0 || c.Digests != DigestsAbsent || c.Status != verify.StatusMismatch {
		t.Fatalf("an older record: %+v", c)
	}
	allowGitInRender(t, old)
	c, _ = CheckRecord(t.Context(), old, CheckOptions{})
	for _, w := range []Problem{{Reason: ProblemFileChanged, Path: RenderFile}, {Reason: ProblemVerdictDiffers, Path: ResultFile}} {
		if !slices.ContainsFunc(c.Problems, func(p Problem) bool { return p.Reason == w.Reason && p.Path == w.Path }) {
			t.Errorf("an older record with an edited allow list: want %s on %s, got\n%s", w.Reason, w.Path, problemList(c.Problems))
		}
	}
}

// allowGitInRender adds git to render.json's trace.allow, as an editor of
// the record would to hide the unexpected exec.
func allowGitInRender(t *testing.T, dir string) {
	t.Helper()
	var r render.Render
	if err := readJSON(filepath.Join(dir, RenderFile), &r); err != nil {
		t.Fatal(err)
	}
	r.Trace.Allow = append(r.Trace.Allow, fixtureGit)
	_, canonical, err := r.Digest()
	if err != nil {
		t.Fatal(err)
	}
	rewriteFile(t, filepath.Join(dir, RenderFile), func([]byte) []byte { return append(canonical, '\n') })
}

func editResult(t *testing.T, dir string, edit func(*Result)) {
	t.Helper()
	res := readFixtureResult(t, dir)
	edit(res)
	if err := writeJSON(filepath.Join(dir, ResultFile), res, 0o644); err != nil {
		t.Fatal(err)
	}
}

func problemList(ps []Problem) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString("  " + p.String() + "\n")
	}
	return b.String()
}

// TestCheckRecordNamesOfTheRender: result.json's plan and content digests
// must name render.json; records from before them have neither.
func TestCheckRecordNamesOfTheRender(t *testing.T) {
	dir := writeFixtureRecord(t, true)
	var r render.Render
	if err := readJSON(filepath.Join(dir, RenderFile), &r); err != nil {
		t.Fatal(err)
	}
	d, err := r.Digests()
	if err != nil {
		t.Fatal(err)
	}
	res := readFixtureResult(t, dir)
	wrong := "sha256:" + strings.Repeat("0", 64)
	for _, tc := range []struct {
		name                string
		plan, content, want string
	}{
		{"both right", d.Plan, res.RenderDigest, ""},
		{"neither recorded", "", "", ""},
		{"a plan digest of another render", wrong, res.RenderDigest, "plan digest"},
		{"a content digest of another render", d.Plan, wrong, "content digest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			editResult(t, dir, func(res *Result) { res.PlanDigest, res.ContentDigest = tc.plan, tc.content })
			c, _ := CheckRecord(t.Context(), dir, CheckOptions{})
			found := slices.ContainsFunc(c.Problems, func(p Problem) bool {
				return p.Reason == ProblemFileChanged && p.Path == RenderFile && strings.Contains(p.Detail, tc.want)
			})
			if tc.want == "" && len(c.Problems) != 0 || tc.want != "" && !found {
				t.Errorf("problems:\n%s", problemList(c.Problems))
			}
		})
	}
}
