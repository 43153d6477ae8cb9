package attest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCosignVerifiesTheEnvelope checks the envelope with a well-known DSSE
// verifier: cosign verify-blob-attestation with the public key accepts a
// subject's blob and refuses any other. It runs where $HOOKBOX_COSIGN names
// a cosign binary (cosign is not installed by the project).
func TestCosignVerifiesTheEnvelope(t *testing.T) {
	cosign := os.Getenv("HOOKBOX_COSIGN")
	if cosign == "" {
		t.Skip("HOOKBOX_COSIGN names no cosign binary")
	}
	dir := t.TempDir()
	kp, err := GenerateKey(filepath.Join(dir, "keys"), false)
	if err != nil {
		t.Fatal(err)
	}
	blob := filepath.Join(dir, "answer.md")
	os.WriteFile(blob, []byte("42\n"), 0o644)
	sum := sha256.Sum256([]byte("42\n"))
	payload, err := Statement([]Subject{{Name: "artifacts/out/answer.md", SHA256: hex.EncodeToString(sum[:])}}, testPredicate())
	if err != nil {
		t.Fatal(err)
	}
	signer, err := LoadSigner(kp.Private)
	if err != nil {
		t.Fatal(err)
	}
	env, err := signer.Sign(t.Context(), payload)
	if err != nil {
		t.Fatal(err)
	}
	envelope := filepath.Join(dir, File)
	data, _ := json.Marshal(env)
	os.WriteFile(envelope, data, 0o644)

	check := func(blob string) (string, error) {
		cmd := exec.CommandContext(t.Context(), cosign, "verify-blob-attestation", "--key", kp.Public,
			"--signature", envelope, "--type", PredicateType, "--insecure-ignore-tlog=true", blob)
		// A Sigstore key variable keeps cosign from fetching the public
		// trusted root, which a check with --key does not use.
		cmd.Env = append(os.Environ(), "SIGSTORE_REKOR_PUBLIC_KEY="+kp.Public)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := check(blob); err != nil || !strings.Contains(out, "Verified OK") {
		t.Errorf("cosign on the subject: %v\n%s", err, out)
	}
	other := filepath.Join(dir, "other.md")
	os.WriteFile(other, []byte("43\n"), 0o644)
	if out, err := check(other); err == nil {
		t.Errorf("cosign must refuse a blob that is no subject:\n%s", out)
	}
	otherKey, _ := GenerateKey(filepath.Join(dir, "other-keys"), false)
	cmd := exec.CommandContext(t.Context(), cosign, "verify-blob-attestation", "--key", otherKey.Public,
		"--signature", envelope, "--type", PredicateType, "--insecure-ignore-tlog=true", blob)
	cmd.Env = append(os.Environ(), "SIGSTORE_REKOR_PUBLIC_KEY="+otherKey.Public)
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("cosign must refuse another key:\n%s", out)
	}
}
