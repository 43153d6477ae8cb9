package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"hookbox.dev/hookbox/launcher/doctor"
	"hookbox.dev/hookbox/tracehelper"
)

func newDoctorCommand(h *hostFlags) *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Report what this host can do (containerd, runc, cgroups, overlayfs, tracefs, BTF, BPF, user namespaces, rootless); exit 120 if a check fails",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			report := doctor.Run(cmd.Context(), doctor.Options{Address: h.address, StateDir: h.stateDir,
				RuntimeDir: os.Getenv(envRuntimeDir), TracerSocket: tracehelper.SocketPath()})
			out := cmd.OutOrStdout()
			if jsonOut {
				if err := json.NewEncoder(out).Encode(report); err != nil {
					return err
				}
			} else {
				for _, c := range report.Checks {
					line := fmt.Sprintf("%-5s %-22s %s", c.Status, c.Name, c.Detail)
					if c.Fix != "" {
						line += "  → " + c.Fix
					}
					fmt.Fprintln(out, line)
				}
			}
			// A failed check means runs cannot work here: the same code as
			// a run's infrastructure error.
			if report.Worst() == doctor.Fail {
				return exitError{exitInfra, "a check failed; each failed check above says how to fix it"}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the report as one JSON object")
	return cmd
}
