package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"hookbox.dev/hookbox/attest"
	"hookbox.dev/hookbox/internal/config"
)

func TestKeyGenerateAndShow(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	t.Setenv(config.EnvKeyDir, dir)
	code, _, stderr := runCLI(t, "key", "show")
	if code != exitFailure || !strings.Contains(stderr, "hookbox key generate") {
		t.Errorf("show without a key: exit %d, %s", code, stderr)
	}
	code, stdout, stderr := runCLI(t, "key", "generate")
	if code != 0 || !strings.Contains(stdout, filepath.Join(dir, attest.PublicKeyFile)) || !strings.Contains(stdout, "fingerprint SHA256:") {
		t.Fatalf("generate: exit %d\n%s%s", code, stdout, stderr)
	}
	if fi, err := os.Stat(filepath.Join(dir, attest.PrivateKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("private key: %v %v", fi.Mode(), err)
	}
	if code, _, stderr := runCLI(t, "key", "generate"); code != exitSpec || !strings.Contains(stderr, "--force") {
		t.Errorf("a second generate must keep the key and say --force: exit %d, %s", code, stderr)
	}
	code, stdout, stderr = runCLI(t, "key", "show")
	if code != 0 || !strings.HasPrefix(stdout, "-----BEGIN PUBLIC KEY-----") || !strings.Contains(stderr, "SHA256:") {
		t.Errorf("show: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, _ := runCLI(t, "key", "generate", "--force"); code != 0 {
		t.Errorf("generate --force: exit %d", code)
	}
}

func TestRunSigner(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	t.Setenv(config.EnvKeyDir, dir)
	s, why, err := runSigner(config.HostEnv(), "", false)
	if s != nil || err != nil || !strings.Contains(why, "hookbox key generate") {
		t.Errorf("no key: %v %q %v", s, why, err)
	}
	if _, _, err := runSigner(config.HostEnv(), "", true); err == nil || !strings.Contains(err.Error(), "--require-signature") {
		t.Errorf("no key, --require-signature: %v", err)
	}
	kp, err := attest.GenerateKey(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if s, _, err := runSigner(config.HostEnv(), "", true); err != nil || s.KeyID() != kp.Fingerprint {
		t.Errorf("the host key: %v", err)
	}
	os.Chmod(kp.Private, 0o644)
	if _, _, err := runSigner(config.HostEnv(), "", false); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a readable private key must stop the run: %v", err)
	}
	if _, _, err := runSigner(config.HostEnv(), kp.Public, false); err == nil {
		t.Error("--signing-key with a public key")
	}
	// A user without a home (a service account) still runs, unsigned.
	homeless := config.Env{Getenv: func(string) string { return "" }}
	if s, why, err := runSigner(homeless, "", false); s != nil || err != nil || !strings.Contains(why, "HOME") {
		t.Errorf("no home: %v %q %v", s, why, err)
	}
}

func TestVerifyUsage(t *testing.T) {
	t.Setenv(config.EnvKeyDir, filepath.Join(t.TempDir(), "none"))
	if code, _, _ := runCLI(t, "verify"); code != exitSpec {
		t.Errorf("verify without a record: exit %d", code)
	}
	record := t.TempDir()
	if code, _, stderr := runCLI(t, "verify", "--attestation", filepath.Join(record, attest.File)); code != exitSpec || !strings.Contains(stderr, "--key") {
		t.Errorf("--attestation on a host without a key, no --key: exit %d %s", code, stderr)
	}
	code, stdout, _ := runCLI(t, "verify", record)
	if code != exitRefused || !strings.Contains(stdout, "result.json: record-unreadable") {
		t.Errorf("a record without result.json: exit %d\n%s", code, stdout)
	}
}
