package attest

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
)

func testPredicate() Predicate {
	code := 0
	return Predicate{
		Hookbox: Tool{Version: "v1.2.3"},
		Run: Run{ID: "hbx-1", Spawn: "review", Status: "completed", ExitCode: &code,
			StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), EndedAt: time.Date(2026, 1, 2, 3, 4, 6, 500, time.UTC)},
		Render:  Render{Digest: "sha256:" + strings.Repeat("a", 64)},
		Engine:  Engine{Kind: "claude", Version: "2.1.0", Path: "/usr/bin/claude", SHA256: strings.Repeat("b", 64)},
		Trace:   Trace{Mode: "verify", File: "trace.jsonl", Digest: "sha256:" + strings.Repeat("c", 64), Events: 7},
		Network: Network{Mode: "none"},
		Verdict: Verdict{Status: "confirmed", Reasons: []string{}},
		Record:  Record{Chain: "sha256:" + strings.Repeat("d", 64), Files: 12},
		Result:  FileDigest{File: "result.json", Digest: "sha256:" + strings.Repeat("e", 64)},
	}
}

var testSubjects = []Subject{{Name: "artifacts/out/answer.md", SHA256: strings.Repeat("f", 64)}}

func TestStatementRoundTrip(t *testing.T) {
	payload, err := Statement(testSubjects, testPredicate())
	if err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	if err := json.Unmarshal(payload, &generic); err != nil {
		t.Fatal(err)
	}
	if generic["_type"] != "https://in-toto.io/Statement/v1" || generic["predicateType"] != PredicateType {
		t.Errorf("statement header: %s", payload)
	}
	subjects, p, err := ParseStatement(payload)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(subjects, testSubjects) {
		t.Errorf("subjects %+v, want %+v", subjects, testSubjects)
	}
	if want := testPredicate(); !reflect.DeepEqual(*p, want) {
		t.Errorf("predicate\n%+v\nwant\n%+v", *p, want)
	}
	again, _ := Statement(testSubjects, testPredicate())
	if string(again) != string(payload) {
		t.Errorf("the same statement must give the same bytes:\n%s\n%s", payload, again)
	}
}

func TestStatementRefusals(t *testing.T) {
	if _, err := Statement(nil, testPredicate()); err == nil {
		t.Error("a statement needs a subject (in-toto v1)")
	}
	if _, err := Statement([]Subject{{Name: "x", SHA256: "beef"}}, testPredicate()); err == nil {
		t.Error("a sha256 digest of the wrong length must be refused")
	}
	payload, _ := Statement(testSubjects, testPredicate())
	other := strings.Replace(string(payload), PredicateType, "https://slsa.dev/provenance/v1", 1)
	if _, _, err := ParseStatement([]byte(other)); err == nil || !strings.Contains(err.Error(), "predicate type") {
		t.Errorf("another predicate type: %v", err)
	}
	if _, _, err := ParseStatement([]byte(`{"_type":"https://in-toto.io/Statement/v1"}`)); err == nil {
		t.Error("a statement without subjects must be refused")
	}
}

func TestKeysSignAndVerify(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "config")
	kp, err := GenerateKey(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{kp.Private: 0o600, kp.Public: 0o644, dir: 0o700} {
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %04o", path, fi.Mode().Perm(), err, want)
		}
	}
	if !strings.HasPrefix(kp.Fingerprint, "SHA256:") {
		t.Errorf("fingerprint %q", kp.Fingerprint)
	}
	if _, err := GenerateKey(dir, false); !errors.Is(err, ErrKeyExists) {
		t.Errorf("a second generate without --force: %v", err)
	}

	signer, err := LoadSigner(kp.Private)
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := LoadVerifier(kp.Public)
	if err != nil {
		t.Fatal(err)
	}
	if signer.KeyID() != kp.Fingerprint || verifier.KeyID() != kp.Fingerprint {
		t.Errorf("key ids %s / %s, want the fingerprint %s", signer.KeyID(), verifier.KeyID(), kp.Fingerprint)
	}
	payload, _ := Statement(testSubjects, testPredicate())
	env, err := signer.Sign(t.Context(), payload)
	if err != nil {
		t.Fatal(err)
	}
	got, err := verifier.Open(t.Context(), env)
	if err != nil || string(got) != string(payload) {
		t.Fatalf("open: %v", err)
	}

	// The signature is plain DSSE: ed25519 over PAE(type, payload), so any
	// DSSE verifier with the public key accepts it.
	block, _ := pem.Decode(mustRead(t, kp.Public))
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sig, _ := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
	if !ed25519.Verify(pub.(ed25519.PublicKey), dsse.PAE(PayloadType, payload), sig) {
		t.Error("the signature is not ed25519 over DSSE's PAE")
	}

	// Another key, a changed payload, no signature: each refused.
	otherDir := filepath.Join(t.TempDir(), "other")
	other, err := GenerateKey(otherDir, false)
	if err != nil {
		t.Fatal(err)
	}
	otherVerifier, _ := LoadVerifier(other.Public)
	if _, err := otherVerifier.Open(t.Context(), env); err == nil || !strings.Contains(err.Error(), kp.Fingerprint) {
		t.Errorf("another key must not verify, and the error must name the signer: %v", err)
	}
	changed := *env
	changed.Payload = base64.StdEncoding.EncodeToString([]byte(strings.Replace(string(payload), "confirmed", "mismatch", 1)))
	if _, err := verifier.Open(t.Context(), &changed); err == nil {
		t.Error("a changed payload must not verify")
	}
	retyped := *env
	retyped.PayloadType = "text/plain"
	if _, err := verifier.Open(t.Context(), &retyped); err == nil {
		t.Error("a changed payload type must not verify")
	}
	if _, err := verifier.Open(t.Context(), Unsigned(payload)); !errors.Is(err, ErrUnsigned) {
		t.Errorf("unsigned: %v", err)
	}

	// Replacing the pair needs force; the old public key then fails.
	replaced, err := GenerateKey(dir, true)
	if err != nil || replaced.Fingerprint == kp.Fingerprint {
		t.Fatalf("--force: %v, fingerprint %s", err, replaced.Fingerprint)
	}
}

func TestKeyFileChecks(t *testing.T) {
	dir := t.TempDir()
	kp, err := GenerateKey(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSigner(kp.Public); err == nil {
		t.Error("a public key cannot sign")
	}
	if _, err := LoadVerifier(kp.Private); err == nil {
		t.Error("a verifier is given the public key, never the private one")
	}
	if err := os.Chmod(kp.Private, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSigner(kp.Private); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a private key others may read: %v", err)
	}
	garbage := filepath.Join(dir, "garbage.pub")
	os.WriteFile(garbage, []byte("not a key\n"), 0o644)
	if _, err := LoadVerifier(garbage); err == nil {
		t.Error("garbage is not a key")
	}
}

func TestReadEnvelope(t *testing.T) {
	dir := t.TempDir()
	payload, _ := Statement(testSubjects, testPredicate())
	path := filepath.Join(dir, File)
	data, _ := json.Marshal(Unsigned(payload))
	os.WriteFile(path, data, 0o644)
	env, err := ReadEnvelope(path)
	if err != nil || env.PayloadType != PayloadType {
		t.Fatalf("read: %v", err)
	}
	os.WriteFile(path, []byte(`{"payloadType":"text/plain","payload":"","signatures":[]}`), 0o644)
	if _, err := ReadEnvelope(path); err == nil {
		t.Error("another payload type must be refused")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// FuzzParseStatement: no payload panics the statement reader.
func FuzzParseStatement(f *testing.F) {
	payload, _ := Statement(testSubjects, testPredicate())
	f.Add(payload)
	f.Add([]byte(`{"_type":"https://in-toto.io/Statement/v1","subject":[{"digest":{"sha256":""}}],"predicateType":"https://hookbox.dev/attestation/run/v1","predicate":{"run":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ParseStatement(data)
	})
}
