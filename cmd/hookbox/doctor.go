package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"hookbox.dev/hookbox/launcher/doctor"
	"hookbox.dev/hookbox/tracehelper"
)

func newDoctorCommand() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Report what this host can do (containerd, runc, cgroups, overlayfs, tracefs, BTF, BPF, user namespaces, rootless)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			report := doctor.Run(cmd.Context(), doctor.Options{TracerSocket: tracehelper.SocketPath()})
			out := cmd.OutOrStdout()
			if jsonOut {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(report)
			}
			for _, c := range report.Checks {
				line := fmt.Sprintf("%-5s %-22s %s", c.Status, c.Name, c.Detail)
				if c.Fix != "" {
					line += "  → " + c.Fix
				}
				fmt.Fprintln(out, line)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print JSON")
	return cmd
}
