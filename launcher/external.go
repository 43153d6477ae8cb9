package launcher

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"hookbox.dev/hookbox/attest"
	"hookbox.dev/hookbox/render"
	"hookbox.dev/hookbox/render/verify"
)

// External is a run hookbox did not launch but traced: a container of a
// Kubernetes pod the node agent armed the tracer on (nodeagent). Its
// record has the files a run's record has for its verdict (render.json,
// and when it was armed identities.json and trace.jsonl), a result.json
// and an attestation, so hookbox verify and CheckRecord check it as any
// other.
type External struct {
	RunID, Spawn string
	Status       Status
	ExitCode     *int
	Reasons      []string
	// Unarmed is why the tracer was not armed before the container's
	// first instruction, a reason id ("" when trace.jsonl was written):
	// the verdict is then unchecked, tracer-unavailable:<Unarmed>.
	Unarmed string
	// Detail says more about Unarmed, or about a record that could not be
	// judged whole.
	Detail             string
	StartedAt, EndedAt time.Time
}

// SealExternal judges the record in dir exactly as hookbox verify will
// (reverify: the record's render.json, trace.jsonl and identities.json,
// which the caller wrote), then writes result.json with the record's
// digests and the attestation, signed with signer when it is not nil
// (unsigned says why not). It returns the result as written.
func SealExternal(ctx context.Context, dir string, e External, signer *attest.Signer, unsigned, version string) (*Result, error) {
	var r render.Render
	if err := readJSON(filepath.Join(dir, RenderFile), &r); err != nil {
		return nil, err
	}
	d, err := r.Digests()
	if err != nil {
		return nil, err
	}
	digest, _, err := r.Digest()
	if err != nil {
		return nil, err
	}
	res := &Result{SchemaVersion: ResultSchemaVersion, RunID: e.RunID, Spawn: e.Spawn,
		RenderDigest: digest, PlanDigest: d.Plan, ContentDigest: d.Content,
		Status: e.Status, ExitCode: e.ExitCode, Reasons: e.Reasons,
		StartedAt: e.StartedAt.UTC(), EndedAt: e.EndedAt.UTC(), RecordDir: dir}
	if e.Unarmed != "" {
		res.Trace.Reasons = []string{verify.ReasonTracerUnavailable + ":" + e.Unarmed}
	}
	v, err := reverify(dir, &r, res)
	if err != nil {
		return nil, fmt.Errorf("judge the record in %s: %w", dir, err)
	}
	res.Trace = verifyResult(v)
	res.Trace.Mode, res.Trace.Detail = r.Trace.Mode, e.Detail
	if events, _, err := readTraceFile(filepath.Join(dir, TraceFile)); err == nil {
		res.Trace.Events = len(events)
	}
	digests, err := DigestRecord(dir)
	if err != nil {
		return nil, err
	}
	res.Record = &digests
	res.Attestation = &AttestationResult{File: attest.File, Unsigned: unsigned}
	if signer != nil {
		res.Attestation.Signed, res.Attestation.KeyID, res.Attestation.Unsigned = true, signer.KeyID(), ""
	}
	if err := writeJSON(filepath.Join(dir, ResultFile), res, 0o644); err != nil {
		return nil, err
	}
	if err := WriteAttestation(ctx, dir, &r, res, signer, version); err != nil {
		return nil, err
	}
	return res, nil
}
