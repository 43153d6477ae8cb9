// Package attest is hookbox's signed statement about one run: an in-toto
// Statement (github.com/in-toto/attestation) whose subjects are the run's
// harvested artifacts and whose predicate (PredicateType) names the
// render, the engine, the trace and network records, the digest of the
// whole run record and the verdict, wrapped in a DSSE envelope
// (github.com/secure-systems-lab/go-securesystemslib/dsse) signed with
// the host's ed25519 key. docs/attestation.md describes the format and how
// a pipeline checks it.
//
// The package knows the format and the keys; what a run record holds and
// how a verdict is recomputed belong to the launcher.
package attest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	intoto "github.com/in-toto/attestation/go/v1"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// PredicateType names hookbox's run predicate. Within v1, fields never
// change name, type or meaning; new optional fields may be added.
const PredicateType = "https://hookbox.dev/attestation/run/v1"

// PayloadType is the DSSE payload type of an in-toto Statement.
const PayloadType = "application/vnd.in-toto+json"

// File is the attestation's name in the run record.
const File = "attestation.dsse.json"

// Subject is one artifact the statement is about: its path in the run
// record and the lowercase hex sha256 of its content.
type Subject struct {
	Name   string
	SHA256 string
}

// Predicate is what hookbox attests about a run (docs/attestation.md).
// Digests written "sha256:<hex>" are of a file's bytes, except Render's,
// which is the render digest (of its canonical JSON, docs/architecture.md).
type Predicate struct {
	Hookbox Tool    `json:"hookbox"`
	Run     Run     `json:"run"`
	Render  Render  `json:"render"`
	Engine  Engine  `json:"engine"`
	Trace   Trace   `json:"trace"`
	Network Network `json:"network"`
	Verdict Verdict `json:"verdict"`
	// Record names every file of the run record written before result.json
	// (result.json's record section lists them with their digests).
	Record Record `json:"record"`
	// Result is result.json without its notify section, which the notifier
	// fills after the attestation is written.
	Result FileDigest `json:"result"`
}

// Tool is the hookbox that ran the run.
type Tool struct {
	Version string `json:"version"`
}

// Run is the run's identity and outcome, as result.json has them.
type Run struct {
	ID        string    `json:"id"`
	Spawn     string    `json:"spawn"`
	Status    string    `json:"status"`
	ExitCode  *int      `json:"exit_code,omitempty"`
	Reasons   []string  `json:"reasons,omitempty"`
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at"`
}

// Render is the render the run executed: Digest names render.json (the
// content digest), PlanDigest its plan (docs/architecture.md "Digests";
// absent in statements from before it existed).
type Render struct {
	Digest     string `json:"digest"`
	PlanDigest string `json:"plan_digest,omitempty"`
}

// Engine is the engine program: its kind and version as the render has
// them, the path it was exec'd at, and the sha256 of that file in the
// render's runfiles manifest ("" when the manifest does not list it).
type Engine struct {
	Kind    string `json:"kind"`
	Version string `json:"version,omitempty"`
	Path    string `json:"path"`
	SHA256  string `json:"sha256,omitempty"`
}

// Trace is the exec trace record; File and Digest are empty when the run
// has none (tracing off, or a tracer that never watched).
type Trace struct {
	Mode   string `json:"mode"`
	File   string `json:"file,omitempty"`
	Digest string `json:"digest,omitempty"`
	Events int    `json:"events"`
}

// Network is the egress record; File and Digest are empty when the run
// has none (network none).
type Network struct {
	Mode   string `json:"mode"`
	File   string `json:"file,omitempty"`
	Digest string `json:"digest,omitempty"`
}

// Verdict is the trace verdict (render/verify).
type Verdict struct {
	Status  string   `json:"status"`
	Reasons []string `json:"reasons"`
}

// Record is the digest of the run record's file list (result.json's
// record.chain) and how many files it names.
type Record struct {
	Chain string `json:"chain"`
	Files int    `json:"files"`
}

// FileDigest is one file of the record and its digest.
type FileDigest struct {
	File   string `json:"file"`
	Digest string `json:"digest"`
}

// Statement returns the in-toto Statement (v1) for subjects and p, as
// compact JSON: the bytes a DSSE envelope carries.
func Statement(subjects []Subject, p Predicate) ([]byte, error) {
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	var pred structpb.Struct
	if err := protojson.Unmarshal(raw, &pred); err != nil {
		return nil, fmt.Errorf("attestation predicate: %w", err)
	}
	st := &intoto.Statement{Type: intoto.StatementTypeUri, PredicateType: PredicateType, Predicate: &pred}
	for _, s := range subjects {
		st.Subject = append(st.Subject, &intoto.ResourceDescriptor{Name: s.Name, Digest: map[string]string{"sha256": s.SHA256}})
	}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("attestation statement: %w", err)
	}
	out, err := protojson.Marshal(st)
	if err != nil {
		return nil, err
	}
	// protojson varies its whitespace on purpose; the payload is signed as
	// written, so one stable form is kinder to readers and tests.
	var compact bytes.Buffer
	if err := json.Compact(&compact, out); err != nil {
		return nil, err
	}
	return compact.Bytes(), nil
}

// ParseStatement reads a Statement of PredicateType: its subjects (sha256
// digests only) and its predicate.
func ParseStatement(payload []byte) ([]Subject, *Predicate, error) {
	var st intoto.Statement
	if err := protojson.Unmarshal(payload, &st); err != nil {
		return nil, nil, fmt.Errorf("not an in-toto statement: %w", err)
	}
	if err := st.Validate(); err != nil {
		return nil, nil, fmt.Errorf("invalid in-toto statement: %w", err)
	}
	if st.GetType() != intoto.StatementTypeUri {
		return nil, nil, fmt.Errorf("statement type %q, want %q", st.GetType(), intoto.StatementTypeUri)
	}
	if st.GetPredicateType() != PredicateType {
		return nil, nil, fmt.Errorf("predicate type %q, want %q", st.GetPredicateType(), PredicateType)
	}
	var subjects []Subject
	for _, s := range st.GetSubject() {
		sum, ok := s.GetDigest()["sha256"]
		if !ok {
			return nil, nil, fmt.Errorf("subject %q has no sha256 digest", s.GetName())
		}
		subjects = append(subjects, Subject{Name: s.GetName(), SHA256: sum})
	}
	raw, err := protojson.Marshal(st.GetPredicate())
	if err != nil {
		return nil, nil, err
	}
	var p Predicate
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, nil, fmt.Errorf("predicate of %s: %w", PredicateType, err)
	}
	return subjects, &p, nil
}

// Unsigned is an envelope for payload without signatures: what a run on a
// host without a key records. No key verifies it.
func Unsigned(payload []byte) *dsse.Envelope {
	return &dsse.Envelope{PayloadType: PayloadType, Payload: base64.StdEncoding.EncodeToString(payload), Signatures: []dsse.Signature{}}
}

// ErrUnsigned is an envelope that carries no signature.
var ErrUnsigned = errors.New("the attestation is not signed (the run's host had no attestation key: hookbox key generate)")

// ReadEnvelope reads a DSSE envelope file.
func ReadEnvelope(path string) (*dsse.Envelope, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var env dsse.Envelope
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return nil, fmt.Errorf("%s: not a DSSE envelope: %w", path, err)
	}
	if env.PayloadType != PayloadType {
		return nil, fmt.Errorf("%s: payload type %q, want %q", path, env.PayloadType, PayloadType)
	}
	return &env, nil
}
