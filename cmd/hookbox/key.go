package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"hookbox.dev/hookbox/attest"
	"hookbox.dev/hookbox/internal/config"
)

func newKeyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Manage this host's attestation key",
		Long: `A run signs its attestation (attestation.dsse.json in the run record) with
this host's ed25519 key when it has one; hookbox verify --attestation --key
checks it with the public key. The pair lives in $HOOKBOX_KEY_DIR, else
/etc/hookbox as root, else $XDG_CONFIG_HOME/hookbox (~/.config/hookbox):
attestation.key (PKCS#8 PEM, 0600) and attestation.pub (PEM).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newKeyGenerateCommand(), newKeyShowCommand())
	return cmd
}

func newKeyGenerateCommand() *cobra.Command {
	var force, jsonOut bool
	cmd := &cobra.Command{
		Use:   "generate",
		Short: "Create this host's attestation key pair",
		Long: `Create an ed25519 key pair for signing run attestations and print the public
key's path and fingerprint. An existing pair is kept unless --force: the
attestations it signed then verify only with the old public key.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := hostKeyDir()
			if err != nil {
				return err
			}
			kp, err := attest.GenerateKey(dir, force)
			if errors.Is(err, attest.ErrKeyExists) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				return json.NewEncoder(out).Encode(kp)
			}
			fmt.Fprintf(out, "public key  %s\nfingerprint %s\nprivate key %s (0600)\n", kp.Public, kp.Fingerprint, kp.Private)
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing key pair")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the paths and the fingerprint as JSON")
	return cmd
}

func newKeyShowCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Print this host's public attestation key",
		Long: `Print the public key (PEM) on stdout, for the pipelines that verify this
host's attestations; its path and fingerprint go to stderr.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := hostKeyDir()
			if err != nil {
				return err
			}
			path := filepath.Join(dir, attest.PublicKeyFile)
			v, err := attest.LoadVerifier(path)
			if errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("no attestation key at %s: create one with hookbox key generate", path)
			}
			if err != nil {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "hookbox: %s  %s\n", path, v.KeyID())
			_, err = cmd.OutOrStdout().Write(data)
			return err
		},
	}
	return cmd
}

// hostKeyDir is where this host's key pair lives (config.Env.KeyDir).
func hostKeyDir() (string, error) {
	dir, err := config.HostEnv().KeyDir()
	if err != nil {
		return "", usageError{err}
	}
	if dir == "" {
		return "", fmt.Errorf("no directory for the attestation key: HOME is not set; set $%s", config.EnvKeyDir)
	}
	return dir, nil
}

// runSigner is the key a run signs its attestation with: the --signing-key
// file, else the host's key when it has one. Without one the run writes an
// unsigned statement and unsigned says why, unless require.
func runSigner(env config.Env, flag string, require bool) (signer *attest.Signer, unsigned string, err error) {
	path := flag
	if path == "" {
		dir, err := env.KeyDir()
		if err != nil {
			return nil, "", err
		}
		why := fmt.Sprintf("no directory for an attestation key: HOME is not set (set $%s)", config.EnvKeyDir)
		exists := false
		if dir != "" {
			path = filepath.Join(dir, attest.PrivateKeyFile)
			if exists, err = attest.KeyExists(path); err != nil {
				return nil, "", fmt.Errorf("attestation key: %w", err)
			}
			why = fmt.Sprintf("this host has no attestation key (%s): hookbox key generate", path)
		}
		if !exists {
			if require {
				return nil, "", errors.New("--require-signature: " + why)
			}
			return nil, why, nil
		}
	}
	signer, err = attest.LoadSigner(path)
	if err != nil {
		return nil, "", fmt.Errorf("attestation key: %w", err)
	}
	return signer, "", nil
}
