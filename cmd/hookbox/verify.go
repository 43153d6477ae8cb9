package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"hookbox.dev/hookbox/attest"
	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/render/verify"
)

// Exit codes of `hookbox verify` (docs/cli.md "Exit codes").
const (
	exitUnchecked = 119 // the verdict lacks complete evidence
)

func newVerifyCommand(h *hostFlags) *cobra.Command {
	var jsonOut bool
	var attestation, keyFile string
	cmd := &cobra.Command{
		Use:               "verify [RUN_DIR|RUN_ID]",
		ValidArgsFunction: completeRunIDs(h),
		Short:             "Check a run record and recompute its verdict offline",
		Long: `Check a recorded run without touching the host: every file of the record
against the digests in result.json, trace.jsonl against its own stats line,
and the verdict recomputed from render.json, trace.jsonl and identities.json
against the one recorded.

--key PUB also checks the run's attestation (attestation.dsse.json, or the
file --attestation names): its signature with the public key PUB, every
digest it names against the record, and its verdict against the recomputed
one. --attestation without --key uses this host's public key. RUN_DIR may be
left out with --attestation: the record is the attestation's directory.

Exit 0 only for a record that verifies with the verdict confirmed; 118 when
the record or the attestation does not verify (each problem names the file
that changed); else 124 for mismatch, 119 for unchecked.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 || len(args) == 0 && attestation == "" {
				return usageError{fmt.Errorf("verify takes a run directory or id (or --attestation FILE): usage: %s", strings.TrimSpace(cmd.UseLine()))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := filepath.Dir(attestation)
			if len(args) == 1 {
				dir = args[0]
				if fi, err := os.Stat(dir); !strings.Contains(dir, "/") && (err != nil || !fi.IsDir()) {
					dir = filepath.Join(launcher.RunsDir(stateDirOr(h.stateDir)), dir) // a run id
				}
			}
			opts, err := checkOptions(dir, attestation, keyFile)
			if err != nil {
				return err
			}
			c, err := launcher.CheckRecord(cmd.Context(), dir, opts)
			if err != nil {
				return err
			}
			return reportCheck(cmd, dir, c, jsonOut)
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the check as JSON")
	cmd.Flags().StringVar(&attestation, "attestation", "", "the attestation to check (default RUN_DIR/"+attest.File+" when --key is given)")
	cmd.Flags().StringVar(&keyFile, "key", "", "the public key the attestation must be signed with (PEM; hookbox key show prints a host's)")
	return cmd
}

// reportCheck prints a record check and exits as its verdict says.
func reportCheck(cmd *cobra.Command, dir string, c *launcher.RecordCheck, jsonOut bool) error {
	out := cmd.OutOrStdout()
	if jsonOut {
		if err := json.NewEncoder(out).Encode(c); err != nil {
			return err
		}
	} else {
		printCheck(out, dir, c)
	}
	switch {
	case len(c.Problems) > 0:
		return exitError{exitRefused, fmt.Sprintf("the record does not verify (%d problem(s))", len(c.Problems))}
	case c.Status == verify.StatusConfirmed:
		return nil
	case c.Status == verify.StatusMismatch:
		return exitError{exitMismatch, "verdict: mismatch"}
	}
	return exitError{exitUnchecked, "verdict: unchecked"}
}

// checkOptions resolve --attestation and --key: either asks for the
// attestation to be checked, with the given key or this host's.
func checkOptions(dir, attestation, keyFile string) (launcher.CheckOptions, error) {
	var opts launcher.CheckOptions
	if attestation == "" && keyFile == "" {
		return opts, nil
	}
	opts.Attestation = attestation
	if opts.Attestation == "" {
		opts.Attestation = filepath.Join(dir, attest.File)
	}
	if keyFile == "" {
		keyDir, err := hostKeyDir()
		if err != nil {
			return opts, err
		}
		keyFile = filepath.Join(keyDir, attest.PublicKeyFile)
		if _, err := os.Stat(keyFile); errors.Is(err, os.ErrNotExist) {
			return opts, usageError{fmt.Errorf("--attestation needs --key PUB, the public key of the host that ran it (this host has none at %s)", keyFile)}
		}
	}
	v, err := attest.LoadVerifier(keyFile)
	if err != nil {
		return opts, usageError{fmt.Errorf("--key: %w", err)}
	}
	opts.Verifier = v
	return opts, nil
}

func printCheck(w io.Writer, dir string, c *launcher.RecordCheck) {
	verdict := fmt.Sprintf("%s (%s)", c.Status, strings.Join(c.Reasons, ", "))
	if len(c.Problems) > 0 {
		fmt.Fprintf(w, "refused: the record does not verify\n")
		for _, p := range c.Problems {
			fmt.Fprintf(w, "  %s\n", p)
		}
		if c.Recomputed {
			fmt.Fprintf(w, "recomputed from the record as it is: %s\n", verdict)
		}
		return
	}
	fmt.Fprintln(w, verdict)
	for _, m := range c.Matched {
		fmt.Fprintf(w, "  matched %-28s %d exec(s)\n", m.Rule, m.Count)
	}
	for _, d := range c.Diffs {
		fmt.Fprintf(w, "  diff    %s %s[%d]: want %q got %q (pid %d)\n", d.Rule, d.Field, d.Index, d.Want, d.Got, d.EventPID)
	}
	switch c.Digests {
	case launcher.DigestsVerified:
		fmt.Fprintf(w, "record: every file matches its digest\n")
	case launcher.DigestsAbsent:
		fmt.Fprintf(w, "record: result.json has no digests (recorded before hookbox wrote them): the files were not checked\n")
	}
	if a := c.Attestation; a != nil {
		fmt.Fprintf(w, "attestation: signed by %s; subjects %s\n", a.KeyID, strings.Join(a.Subjects, ", "))
	} else if _, err := os.Stat(filepath.Join(dir, attest.File)); err == nil {
		fmt.Fprintf(w, "attestation: not checked (--key PUB checks %s with the signing host's public key)\n", attest.File)
	}
}
