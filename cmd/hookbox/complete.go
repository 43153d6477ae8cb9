package main

import (
	"github.com/spf13/cobra"
	"strings"

	"hookbox.dev/hookbox/compiler"
	"hookbox.dev/hookbox/launcher"
)

// completeRunIDs completes a RUN argument with the run ids of the run
// records (newest first), for logs and verify.
func completeRunIDs(h *hostFlags) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		runs, err := launcher.ListRuns(stateDirOr(h.stateDir))
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		out := make([]cobra.Completion, 0, len(runs))
		for _, r := range runs {
			out = append(out, cobra.CompletionWithDesc(r.RunID, r.Spawn+" "+string(r.Status)))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeSpawnNames completes --spawn with the names of the spawns in the
// SPEC argument (with the --set values given so far); a spec that does not
// parse completes nothing.
func completeSpawnNames(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) == 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	// Cobra parses the flags twice while completing, so a repeated --set
	// here is not the user's mistake: the last value wins.
	sets, _ := cmd.Flags().GetStringArray("set")
	params := map[string]string{}
	for _, kv := range sets {
		if name, value, ok := strings.Cut(kv, "="); ok {
			params[name] = value
		}
	}
	parsed, err := compiler.ReadFileWithOptions(args[0], compiler.ParseOptions{Params: params})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, p := range parsed {
		out = append(out, p.Spawn.Metadata.Name)
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
