package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/render/verify"
)

// exitUnchecked is `hookbox verify`'s code for a verdict without complete
// evidence (README "Exit codes").
const exitUnchecked = 119

func newVerifyCommand(h *hostFlags) *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:               "verify RUN_DIR|RUN_ID",
		ValidArgsFunction: completeRunIDs(h),
		Short:             "Recompute a run's trace verdict offline from its record",
		Long: `Recompute the verdict of a recorded run from render.json, trace.jsonl and
identities.json, without touching the host. Exit 0 only for confirmed; 124 for
mismatch; 119 for unchecked.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stateDir := h.stateDir
			dir := args[0]
			if !strings.Contains(dir, "/") {
				dir = filepath.Join(launcher.RunsDir(stateDirOr(stateDir)), dir)
			}
			v, err := launcher.Reverify(dir)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				if err := json.NewEncoder(out).Encode(v); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(out, "%s (%s)\n", v.Status, strings.Join(v.Reasons, ", "))
				for _, m := range v.Matched {
					fmt.Fprintf(out, "  matched %-28s %d exec(s)\n", m.Rule, m.Count)
				}
				for _, d := range v.Diffs {
					fmt.Fprintf(out, "  diff    %s %s[%d]: want %q got %q (pid %d)\n", d.Rule, d.Field, d.Index, d.Want, d.Got, d.EventPID)
				}
			}
			switch v.Status {
			case verify.StatusConfirmed:
				return nil
			case verify.StatusMismatch:
				return exitError{exitMismatch, "verdict: mismatch"}
			}
			return exitError{exitUnchecked, "verdict: unchecked"}
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the verdict as JSON")
	return cmd
}
