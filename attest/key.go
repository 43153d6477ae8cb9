package attest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"github.com/secure-systems-lab/go-securesystemslib/signerverifier"

	"hookbox.dev/hookbox/internal/host"
)

// The host's key pair, in its key directory (config.Env.KeyDir).
const (
	PrivateKeyFile = "attestation.key" // PKCS#8 PEM, mode 0600
	PublicKeyFile  = "attestation.pub" // PKIX PEM
)

// ErrKeyExists: GenerateKey would replace a key pair.
var ErrKeyExists = errors.New("an attestation key already exists")

// KeyPair is where a key pair lives and the public key's fingerprint.
type KeyPair struct {
	Private     string `json:"private_key"`
	Public      string `json:"public_key"`
	Fingerprint string `json:"fingerprint"`
}

// GenerateKey writes a new ed25519 key pair into dir (created 0700 when
// missing): the private key 0600, the public key 0644. It refuses to
// replace an existing pair unless force: attestations signed with the old
// key then verify only with the old public key.
func GenerateKey(dir string, force bool) (KeyPair, error) {
	kp := KeyPair{Private: filepath.Join(dir, PrivateKeyFile), Public: filepath.Join(dir, PublicKeyFile)}
	if !force {
		for _, p := range []string{kp.Private, kp.Public} {
			if _, err := os.Lstat(p); err == nil {
				return kp, fmt.Errorf("%w at %s: --force replaces it, and runs signed with the old key then verify only with the old public key", ErrKeyExists, p)
			}
		}
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return kp, err
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return kp, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return kp, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return kp, fmt.Errorf("key directory: %w", err)
	}
	// The private key first: a public key without its private key would
	// look like a usable pair.
	if err := host.WriteFileAtomic(kp.Private, pem.EncodeToMemory(&pem.Block{Type: signerverifier.PrivateKeyPEM, Bytes: privDER}), 0o600); err != nil {
		return kp, err
	}
	if err := host.WriteFileAtomic(kp.Public, pem.EncodeToMemory(&pem.Block{Type: signerverifier.PublicKeyPEM, Bytes: pubDER}), 0o644); err != nil {
		return kp, err
	}
	kp.Fingerprint, err = Fingerprint(pub)
	return kp, err
}

// Fingerprint names a public key the way the envelope's keyid does: the
// SHA256 fingerprint of its SSH form (dsse.SHA256KeyID), as ssh-keygen -l
// prints it.
func Fingerprint(pub ed25519.PublicKey) (string, error) {
	return dsse.SHA256KeyID(pub)
}

// Signer signs attestations with a host's private key.
type Signer struct {
	sv   *signerverifier.ED25519SignerVerifier
	path string
}

// LoadSigner reads an ed25519 private key (PKCS#8 PEM). Like ssh, it
// refuses a key file that others than its owner may read or write.
func LoadSigner(path string) (*Signer, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("attestation key %s is mode %04o: others may read it; chmod 600 %s", path, perm, path)
	}
	key, err := loadKey(path)
	if err != nil {
		return nil, err
	}
	if key.KeyVal.Private == "" {
		return nil, fmt.Errorf("%s holds a public key; a run signs with the private key (%s)", path, PrivateKeyFile)
	}
	sv, err := signerverifier.NewED25519SignerVerifierFromSSLibKey(key)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Signer{sv: sv, path: path}, nil
}

// KeyID is the signing key's fingerprint.
func (s *Signer) KeyID() string {
	id, _ := s.sv.KeyID()
	return id
}

// Path is the private key file.
func (s *Signer) Path() string { return s.path }

// Sign wraps payload (a Statement) in a DSSE envelope signed by s.
func (s *Signer) Sign(ctx context.Context, payload []byte) (*dsse.Envelope, error) {
	es, err := dsse.NewEnvelopeSigner(s.sv)
	if err != nil {
		return nil, err
	}
	return es.SignPayload(ctx, PayloadType, payload)
}

// Verifier checks envelopes against one public key.
type Verifier struct {
	sv   *signerverifier.ED25519SignerVerifier
	path string
}

// LoadVerifier reads an ed25519 public key (PKIX PEM, as hookbox key
// generate writes it).
func LoadVerifier(path string) (*Verifier, error) {
	key, err := loadKey(path)
	if err != nil {
		return nil, err
	}
	if key.KeyVal.Private != "" {
		return nil, fmt.Errorf("%s is a private key: verify with the public key (%s), which is all a verifier should hold", path, PublicKeyFile)
	}
	sv, err := signerverifier.NewED25519SignerVerifierFromSSLibKey(key)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Verifier{sv: sv, path: path}, nil
}

// KeyID is the public key's fingerprint.
func (v *Verifier) KeyID() string {
	id, _ := v.sv.KeyID()
	return id
}

// Open checks that env carries a valid signature by v's key over its
// payload (DSSE's pre-authentication encoding of type and payload) and
// returns the payload.
func (v *Verifier) Open(ctx context.Context, env *dsse.Envelope) ([]byte, error) {
	if len(env.Signatures) == 0 {
		return nil, ErrUnsigned
	}
	ev, err := dsse.NewEnvelopeVerifier(v.sv)
	if err != nil {
		return nil, err
	}
	_, payload, err := ev.VerifyAndDecode(ctx, env)
	if err != nil {
		var ids []string
		for _, s := range env.Signatures {
			ids = append(ids, s.KeyID)
		}
		return nil, fmt.Errorf("no signature verifies with the key %s (%s); the envelope is signed by %q", v.path, v.KeyID(), ids)
	}
	return payload, nil
}

// loadKey reads a PEM key as securesystemslib does and checks that it is
// ed25519; its key id becomes the fingerprint (Fingerprint), the form
// other DSSE verifiers (cosign) compute for a key given without one.
func loadKey(path string) (*signerverifier.SSLibKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key, err := signerverifier.LoadKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s: not a PEM key: %w", path, err)
	}
	if key.KeyType != signerverifier.ED25519KeyType {
		return nil, fmt.Errorf("%s is a %s key; hookbox attestations use ed25519 (hookbox key generate)", path, key.KeyType)
	}
	pub, err := parseHexPublic(key.KeyVal.Public)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if key.KeyID, err = Fingerprint(pub); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return key, nil
}

func parseHexPublic(h string) (ed25519.PublicKey, error) {
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("not an ed25519 public key (%d bytes)", len(b))
	}
	return ed25519.PublicKey(b), nil
}

// KeyExists reports whether path names an existing file.
func KeyExists(path string) (bool, error) {
	_, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}
