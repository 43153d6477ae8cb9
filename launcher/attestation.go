package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hookbox.dev/hookbox/internal/host"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"hookbox.dev/hookbox/attest"
	"hookbox.dev/hookbox/mounts"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/canonjson"
	"hookbox.dev/hookbox/render/verify"
)

// AttestationResult is result.json's attestation section: the run's
// in-toto statement (attest.File in the record) and whether it is signed.
type AttestationResult struct {
	File   string `json:"file"`
	Signed bool   `json:"signed"`
	// KeyID is the signing key's fingerprint (attest.Fingerprint).
	KeyID string `json:"keyid,omitempty"`
	// Unsigned says why the statement carries no signature.
	Unsigned string `json:"unsigned,omitempty"`
	// Error: the attestation could not be written; there is none.
	Error string `json:"error,omitempty"`
}

// seal computes the record's digests once teardown has written and
// harvested everything, and says how the run will be attested. The
// attestation itself needs result.json, so attest writes it after.
func (x *execution) seal() {
	d, err := DigestRecord(x.dir)
	if err != nil {
		// Without digests there is nothing to attest: the run says so and
		// verify treats the record as unsealed.
		x.result.Reasons = append(x.result.Reasons, ReasonRecordUnsealed)
		x.result.Error = strings.TrimPrefix(x.result.Error+"; "+err.Error(), "; ")
		return
	}
	x.result.Record = &d
	a := &AttestationResult{File: attest.File}
	if s := x.opts.Signer; s != nil {
		a.Signed, a.KeyID = true, s.KeyID()
	} else {
		a.Unsigned = x.opts.Unsigned
		if a.Unsigned == "" {
			a.Unsigned = "no attestation key was given"
		}
	}
	x.result.Attestation = a
}

// writeResult writes result.json and the run's attestation, the statement
// over the sealed record and those very bytes, signed when the run has a
// key: both synced side by side, result.json renamed into place first. An
// attestation that cannot be made or written is recorded in result.json
// instead, never fatal; the error returned is result.json's.
func (x *execution) writeResult() error {
	path := filepath.Join(x.dir, ResultFile)
	data, err := recordJSON(x.result)
	if err != nil {
		return err
	}
	a := x.result.Attestation
	if a == nil || x.result.Record == nil {
		return host.WriteFileAtomic(path, data, 0o644)
	}
	env, err := attestationOf(context.WithoutCancel(x.ctx), x.dir, x.r, x.result, data, x.opts.Signer, x.opts.Version)
	if err != nil {
		x.noAttestation(err)
		if data, err = recordJSON(x.result); err != nil {
			return err
		}
		return host.WriteFileAtomic(path, data, 0o644)
	}
	written, err := host.WriteFilesAtomic([]host.File{{Path: path, Data: data, Perm: 0o644}, {Path: filepath.Join(x.dir, attest.File), Data: env, Perm: 0o644}})
	switch {
	case written == 0:
		return err
	case err != nil: // result.json is there, its attestation is not
		x.noAttestation(err)
		if werr := writeJSON(path, x.result, 0o644); werr != nil {
			x.progress("attest", "could not record the attestation error in result.json: %v", werr)
		}
	}
	return nil
}

// noAttestation records why the run has no attestation.
func (x *execution) noAttestation(err error) {
	a := x.result.Attestation
	a.Signed, a.KeyID, a.Error = false, "", err.Error()
	x.progress("attest", "no attestation: %v", err)
}

// WriteAttestation writes dir's attestation.dsse.json: the statement over
// the sealed record (res as written to result.json, its record section
// filled) and render r, signed when signer is not nil. A run writes its
// own this way, and so does the node agent for a pod it judged.
func WriteAttestation(ctx context.Context, dir string, r *render.Render, res *Result, signer *attest.Signer, version string) error {
	written, err := os.ReadFile(filepath.Join(dir, ResultFile))
	if err != nil {
		return err
	}
	env, err := attestationOf(ctx, dir, r, res, written, signer, version)
	if err != nil {
		return err
	}
	return host.WriteFileAtomic(filepath.Join(dir, attest.File), env, 0o644)
}

// attestationOf is the attestation.dsse.json of dir's record whose
// result.json holds resultJSON.
func attestationOf(ctx context.Context, dir string, r *render.Render, res *Result, resultJSON []byte, signer *attest.Signer, version string) ([]byte, error) {
	p, subjects, err := predicateOf(dir, r, res, resultJSON, version)
	if err != nil {
		return nil, err
	}
	payload, err := attest.Statement(subjects, p)
	if err != nil {
		return nil, err
	}
	env := attest.Unsigned(payload)
	if signer != nil {
		if env, err = signer.Sign(ctx, payload); err != nil {
			return nil, fmt.Errorf("sign the attestation with %s: %w", signer.Path(), err)
		}
	}
	return recordJSON(env)
}

// predicateOf is the predicate and subjects a sealed record gives: res is
// result.json as written (its record section filled), r the render. The
// verdict is res's; CheckRecord compares it with the recomputed one.
func predicateOf(dir string, r *render.Render, res *Result, resultJSON []byte, version string) (attest.Predicate, []attest.Subject, error) {
	var p attest.Predicate
	if res.Record == nil {
		return p, nil, errors.New("the record has no digests (result.json's record section)")
	}
	renderDigest, _, err := r.Digest()
	if err != nil {
		return p, nil, err
	}
	planDigest, _, err := r.PlanDigest()
	if err != nil {
		return p, nil, err
	}
	resultDigest, err := resultDigest(resultJSON)
	if err != nil {
		return p, nil, fmt.Errorf("%s: %w", filepath.Join(dir, ResultFile), err)
	}
	p = attest.Predicate{
		Hookbox: attest.Tool{Version: version},
		Run: attest.Run{ID: res.RunID, Spawn: res.Spawn, Status: string(res.Status), ExitCode: res.ExitCode,
			Reasons: res.Reasons, StartedAt: res.StartedAt, EndedAt: res.EndedAt},
		Render:  attest.Render{Digest: renderDigest, PlanDigest: planDigest},
		Engine:  engineIdentity(r),
		Trace:   attest.Trace{Mode: string(r.Trace.Mode), Events: res.Trace.Events},
		Network: attest.Network{Mode: r.Network},
		Verdict: attest.Verdict{Status: string(res.Trace.Status), Reasons: nonNil(res.Trace.Reasons)},
		Record:  attest.Record{Chain: res.Record.Chain, Files: len(res.Record.Files)},
		Result:  attest.FileDigest{File: ResultFile, Digest: resultDigest},
	}
	// The evidence files as they are now (verify compares them with what
	// was attested), not as the record lists them.
	for name, set := range map[string]func(string){
		TraceFile:   func(d string) { p.Trace.File, p.Trace.Digest = TraceFile, d },
		NetworkFile: func(d string) { p.Network.File, p.Network.Digest = NetworkFile, d },
	} {
		digest, err := sha256File(filepath.Join(dir, name))
		switch {
		case err == nil:
			set(digest)
		case !errors.Is(err, fs.ErrNotExist):
			return p, nil, err
		}
	}
	files := map[string]RecordFile{}
	for _, f := range res.Record.Files {
		files[f.Path] = f
	}
	return p, subjectsOf(res, files), nil
}

// subjectsOf lists the harvested artifacts that were found (every file of
// a directory artifact) and the workspace patch, by record path; a run
// without any has its render.json as subject, since a statement needs one.
func subjectsOf(res *Result, files map[string]RecordFile) []attest.Subject {
	var names []string
	add := func(name string) {
		if f, ok := files[name]; ok && f.Type == "" && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	for _, a := range res.Artifacts {
		if a.Status != mounts.ArtifactFound {
			continue
		}
		name := ArtifactDir + "/" + recordPath(strings.TrimSuffix(a.Path, "/"))
		if f, ok := files[name]; ok && f.Type == "" {
			add(name)
			continue
		}
		for p := range files {
			if strings.HasPrefix(p, name+"/") {
				add(p)
			}
		}
	}
	add(ArtifactDir + "/" + render.WorkspacePatch)
	if len(names) == 0 {
		add(RenderFile)
	}
	slices.Sort(names)
	subjects := make([]attest.Subject, len(names))
	for i, n := range names {
		subjects[i] = attest.Subject{Name: n, SHA256: files[n].SHA256}
	}
	return subjects
}

// engineIdentity is the engine as the render has it, with the digest of
// its file in the runfiles manifest (symlinks followed within it).
func engineIdentity(r *render.Render) attest.Engine {
	e := attest.Engine{Kind: r.Engine.Kind, Version: r.Engine.Version, Path: r.Engine.Exec.Path}
	entries := map[string]render.Runfile{}
	for _, rf := range r.Runfiles {
		entries[rf.Path] = rf
	}
	path := e.Path
	for hops := 0; hops < 40; hops++ {
		rf, ok := entries[path]
		if !ok {
			return e
		}
		switch rf.Type {
		case render.RunfileFile:
			e.SHA256 = rf.SHA256
			return e
		case render.RunfileSymlink:
			if filepath.IsAbs(rf.Target) {
				path = filepath.Clean(rf.Target)
			} else {
				path = filepath.Join(filepath.Dir(path), rf.Target)
			}
		default:
			return e
		}
	}
	return e
}

// resultDigest is the digest of result.json without its notify section
// (the notifier's outcome, recorded after the attestation): sha256 of the
// canonical JSON of the rest.
func resultDigest(data []byte) (string, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		return "", err
	}
	delete(members, "notify")
	digest, _, err := canonjson.Digest(members)
	return digest, err
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// RecordCheck is what CheckRecord found: the verdict recomputed from the
// record, and every problem with the record and its attestation. A record
// verifies only without problems.
type RecordCheck struct {
	verify.Verdict
	// Digests is "verified", or "absent" for a record written before
	// hookbox recorded digests (its files are then not checked).
	Digests string `json:"record"`
	// Recomputed: the verdict above comes from the record (false when
	// render.json, result.json or trace.jsonl could not be read).
	Recomputed  bool              `json:"recomputed"`
	Attestation *AttestationCheck `json:"attestation,omitempty"`
	Problems    []Problem         `json:"problems,omitempty"`
}

// AttestationCheck is a verified attestation: who signed it and what it
// is about.
type AttestationCheck struct {
	File     string   `json:"file"`
	KeyID    string   `json:"keyid"`
	Subjects []string `json:"subjects"`
}

// Record digest states.
const (
	DigestsVerified = "verified"
	DigestsAbsent   = "absent"
	DigestsFailed   = "failed"
)

// CheckOptions choose what CheckRecord checks besides the record itself.
type CheckOptions struct {
	// Attestation is the envelope to check ("" checks none); Verifier the
	// public key it must be signed with.
	Attestation string
	Verifier    *attest.Verifier
}

// CheckRecord verifies the run record in dir offline: every file against
// its digest in result.json, the trace against its own stats, the verdict
// recomputed from the record against the recorded one and, with
// opts.Attestation, the signature, every digest of the statement and its
// verdict. The error is for what stops the check itself (no key given).
func CheckRecord(ctx context.Context, dir string, opts CheckOptions) (*RecordCheck, error) {
	if opts.Attestation != "" && opts.Verifier == nil {
		return nil, errors.New("checking an attestation needs the public key it was signed with")
	}
	c := &RecordCheck{Verdict: verify.Verdict{Status: verify.StatusUnchecked, Reasons: []string{}}, Digests: DigestsFailed}
	problem := func(reason, path, format string, args ...any) {
		c.Problems = append(c.Problems, Problem{Reason: reason, Path: path, Detail: fmt.Sprintf(format, args...)})
	}
	var res Result
	if err := readJSON(filepath.Join(dir, ResultFile), &res); err != nil {
		problem(ProblemRecordUnreadable, ResultFile, "%v", err)
		return c, nil
	}
	var r render.Render
	if err := readJSON(filepath.Join(dir, RenderFile), &r); err != nil {
		problem(ProblemRecordUnreadable, RenderFile, "%v", err)
		return c, nil
	}

	switch {
	case res.Record != nil:
		found := res.Record.Check(dir)
		c.Problems = append(c.Problems, found...)
		if len(found) == 0 {
			c.Digests = DigestsVerified
		}
	case opts.Attestation != "":
		problem(ProblemNoDigests, ResultFile, "result.json has no record section: an attested record always has one, so it was removed")
	default:
		c.Digests = DigestsAbsent
		if digest, _, err := r.Digest(); err == nil && digest != res.RenderDigest {
			problem(ProblemFileChanged, RenderFile, "the render digests to %s; result.json names %s", digest, res.RenderDigest)
		}
	}

	// result.json's other names of the render (absent in older records).
	if d, err := r.Digests(); err == nil {
		for _, n := range []struct{ what, recorded, have string }{
			{"plan digest", res.PlanDigest, d.Plan}, {"content digest", res.ContentDigest, d.Content},
		} {
			if n.recorded != "" && n.recorded != n.have {
				problem(ProblemFileChanged, RenderFile, "the render's %s is %s; result.json names %s", n.what, orNone(n.have), n.recorded)
			}
		}
	}

	v, err := reverify(dir, &r, &res)
	if err != nil {
		problem(ProblemRecordUnreadable, TraceFile, "%v", err)
	} else {
		c.Verdict, c.Recomputed = v, true
		if v.Status != res.Trace.Status || !slices.Equal(v.Reasons, nonNil(res.Trace.Reasons)) {
			problem(ProblemVerdictDiffers, ResultFile, "result.json says %s; the record gives %s", describeVerdict(string(res.Trace.Status), res.Trace.Reasons), describeVerdict(string(v.Status), v.Reasons))
		}
	}

	if opts.Attestation != "" {
		c.Attestation = checkAttestation(ctx, dir, &r, &res, c, opts, problem)
	}
	return c, nil
}

func checkAttestation(ctx context.Context, dir string, r *render.Render, res *Result, c *RecordCheck, opts CheckOptions,
	problem func(reason, path, format string, args ...any)) *AttestationCheck {
	name := opts.Attestation
	if rel, err := filepath.Rel(dir, opts.Attestation); err == nil && !strings.HasPrefix(rel, "..") {
		name = filepath.ToSlash(rel)
	}
	env, err := attest.ReadEnvelope(opts.Attestation)
	if errors.Is(err, fs.ErrNotExist) {
		problem(ProblemAttestationAbsent, name, "no attestation: the run wrote none, or it was removed")
		return nil
	}
	if err != nil {
		problem(ProblemStatement, name, "%v", err)
		return nil
	}
	payload, err := opts.Verifier.Open(ctx, env)
	switch {
	case errors.Is(err, attest.ErrUnsigned):
		problem(ProblemUnsigned, name, "%v", err)
		return nil
	case err != nil:
		problem(ProblemSignature, name, "%v", err)
		return nil
	}
	subjects, got, err := attest.ParseStatement(payload)
	if err != nil {
		problem(ProblemStatement, name, "%v", err)
		return nil
	}
	check := &AttestationCheck{File: opts.Attestation, KeyID: opts.Verifier.KeyID()}
	for _, s := range subjects {
		check.Subjects = append(check.Subjects, s.Name)
		sum, err := sha256File(filepath.Join(dir, filepath.FromSlash(s.Name)))
		switch {
		case err != nil:
			problem(ProblemSubjectChanged, s.Name, "an attested subject cannot be read: %v", err)
		case sum != "sha256:"+s.SHA256:
			problem(ProblemSubjectChanged, s.Name, "digests to %s; the attestation names sha256:%s", sum, s.SHA256)
		}
	}
	if res.Record == nil {
		return check
	}
	written, err := os.ReadFile(filepath.Join(dir, ResultFile))
	if err != nil {
		problem(ProblemRecordUnreadable, ResultFile, "%v", err)
		return check
	}
	want, _, err := predicateOf(dir, r, res, written, got.Hookbox.Version)
	if err != nil {
		problem(ProblemRecordUnreadable, ResultFile, "%v", err)
		return check
	}
	differs := func(path, what, have, attested string) {
		if have != attested {
			problem(ProblemAttestedDiffers, path, "%s is %s; the attestation names %s", what, orNone(have), orNone(attested))
		}
	}
	differs(ResultFile, "result.json (without notify)", want.Result.Digest, got.Result.Digest)
	differs(ResultFile, "the record's file list (record.chain)", want.Record.Chain, got.Record.Chain)
	differs(RenderFile, "the render digest", want.Render.Digest, got.Render.Digest)
	if got.Render.PlanDigest != "" { // statements from before plan digests have none
		differs(RenderFile, "the plan digest", want.Render.PlanDigest, got.Render.PlanDigest)
	}
	differs(TraceFile, "the trace record", want.Trace.Digest, got.Trace.Digest)
	differs(NetworkFile, "the network record", want.Network.Digest, got.Network.Digest)
	differs(RenderFile, "the engine", fmt.Sprint(want.Engine), fmt.Sprint(got.Engine))
	if v := c.Verdict; string(v.Status) != got.Verdict.Status || !slices.Equal(v.Reasons, nonNil(got.Verdict.Reasons)) {
		problem(ProblemAttestedVerdict, TraceFile, "the record gives %s; the attestation says %s",
			describeVerdict(string(v.Status), v.Reasons), describeVerdict(got.Verdict.Status, got.Verdict.Reasons))
	}
	return check
}

func describeVerdict(status string, reasons []string) string {
	if len(reasons) == 0 {
		return status
	}
	return status + " (" + strings.Join(reasons, ", ") + ")"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
