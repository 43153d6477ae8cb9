package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/spf13/cobra"

	"hookbox.dev/hookbox/internal/config"
	"hookbox.dev/hookbox/launcher"
	"hookbox.dev/hookbox/launcher/daemon"
	"hookbox.dev/hookbox/launcher/rootless"
	"hookbox.dev/hookbox/oci"
)

func newGCCommand(h *hostFlags) *cobra.Command {
	var dryRun, jsonOut, shimGroup bool
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove what abandoned runs left behind (processes, tasks, containers, snapshots, leases, shims, tmpfs, cgroups)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			address, stateDir := h.address, h.stateDir
			// Rootless: what runs left (tmpfs mounts, containers) lives in
			// RootlessKit's namespaces, so gc runs there too.
			inner, isInner := rootless.Inner()
			dirs := dirsFrom(stateDir, "", inner)
			cfg := launcher.BackendConfig{Address: address, Daemon: daemonOptions(false, dirs.daemon, nil)}
			if !isInner && rootlessUser() {
				return exitError{exitInfra, launcher.EnterRootless(cmd.Context(), cfg, dirs.state, dirs.cache, os.Args[1:]).Error()}
			}
			backend, err := launcher.Connect(cmd.Context(), cfg)
			if err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "hookbox: gc without containerd (%v): only processes, tmpfs and cgroups are collected; abandoned runs stay unfinished until a gc reaches their containerd\n", err)
			} else {
				defer backend.Close()
			}
			report, err := launcher.GC(cmd.Context(), backend, dirs.state, dryRun)
			if err != nil {
				return err
			}
			if !isInner && !rootlessUser() {
				report.Actions = append(report.Actions, gcTracers(cmd.Context(), dryRun)...)
			}
			if shimGroup && backend != nil {
				report.Actions = append(report.Actions, gcShimGroup(cmd.Context(), backend, dryRun)...)
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				if err := json.NewEncoder(out).Encode(report); err != nil {
					return err
				}
			} else {
				printGC(out, report, dryRun)
			}
			for _, a := range report.Actions {
				if a.Error != "" {
					return exitError{exitInfra, "gc left resources behind; run it again or see the errors above"}
				}
			}
			if runs := gcUnfinished(report); len(runs) > 0 {
				return exitError{exitInfra, fmt.Sprintf("gc could not finish %d abandoned runs (%s): what is left is in the report; the next gc tries again", len(runs), strings.Join(runs, ", "))}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only print what would be removed")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the report as JSON")
	cmd.Flags().BoolVar(&shimGroup, "shim-group", false, "also remove the shim group's anchor: its shim exits after the last run in it (the next run makes it again)")
	return cmd
}

// gcShimGroup removes the shim group's anchor, when there is one.
func gcShimGroup(ctx context.Context, backend *launcher.Backend, dryRun bool) []launcher.GCAction {
	if _, err := backend.Client.LoadContainer(namespaces.WithNamespace(ctx, oci.Namespace), launcher.ShimGroupID); err != nil {
		return nil
	}
	a := launcher.GCAction{What: "shim-group", Detail: launcher.ShimGroupID}
	if !dryRun {
		if err := launcher.RemoveShimGroup(ctx, backend.Client); err != nil {
			a.Error = err.Error()
		}
	}
	return []launcher.GCAction{a}
}

// printGC prints one line per action and per leftover.
func printGC(out io.Writer, report *launcher.GCReport, dryRun bool) {
	verb := "removed"
	if dryRun {
		verb = "would remove"
	}
	for _, a := range report.Actions {
		line := strings.TrimSpace(fmt.Sprintf("%s %s %s %s", verb, a.RunID, a.What, a.Detail))
		if a.Error != "" {
			line += "  ERROR " + a.Error
		}
		fmt.Fprintln(out, line)
	}
	for _, l := range report.Left {
		fmt.Fprintln(out, strings.TrimSpace(fmt.Sprintf("left %s %s %s", l.RunID, l.What, l.Detail)))
	}
	if len(report.Actions) == 0 && len(report.Left) == 0 {
		fmt.Fprintf(out, "nothing to collect (%d live runs)\n", len(report.Live))
	}
}

// gcUnfinished lists the runs gc left something of.
func gcUnfinished(report *launcher.GCReport) []string {
	var runs []string
	for _, l := range report.Left {
		if !slices.Contains(runs, l.RunID) {
			runs = append(runs, l.RunID)
		}
	}
	return runs
}

func newPsCommand(h *hostFlags) *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "ps",
		Short: "List run records, newest first",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			stateDir := h.stateDir
			runs, err := launcher.ListRuns(stateDirOr(stateDir))
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				return json.NewEncoder(out).Encode(runs)
			}
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "RUN\tSPAWN\tSTATUS\tVERDICT\tEXIT\tCREATED")
			for _, r := range runs {
				code := "-"
				if r.ExitCode != nil {
					code = fmt.Sprint(*r.ExitCode)
				}
				verdict := "-"
				if r.Verdict != "" {
					verdict = string(r.Verdict)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.RunID, r.Spawn, r.Status, verdict, code, r.CreatedAt.Local().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print JSON")
	return cmd
}

func newLogsCommand(h *hostFlags) *cobra.Command {
	var stderr bool
	cmd := &cobra.Command{
		Use:               "logs RUN",
		ValidArgsFunction: completeRunIDs(h),
		Short:             "Print a run's recorded stdout (or --stderr)",
		Args:              exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stateDir := h.stateDir
			name := launcher.StdoutFile
			if stderr {
				name = launcher.StderrFile
			}
			dir := filepath.Join(launcher.RunsDir(stateDirOr(stateDir)), filepath.Base(args[0]))
			f, err := os.Open(filepath.Join(dir, name))
			if err != nil {
				return fmt.Errorf("run %s: %w (see hookbox ps)", args[0], err)
			}
			defer f.Close()
			_, err = io.Copy(cmd.OutOrStdout(), f)
			return err
		},
	}
	cmd.Flags().BoolVar(&stderr, "stderr", false, "print stderr.log instead")
	return cmd
}

// runtimeDir is hookbox's runtime directory: $HOOKBOX_RUNTIME_DIR, else
// the default.
func runtimeDir() string {
	if d := os.Getenv(envRuntimeDir); d != "" {
		return d
	}
	return daemon.DefaultRuntimeDir()
}

// gcTracers stops the managed tracers, of every key, that serve no run
// (one serving runs exits by itself once idle) and removes their
// directories.
func gcTracers(ctx context.Context, dryRun bool) []launcher.GCAction {
	tracers, err := daemon.ManagedTracers(runtimeDir())
	if err != nil {
		return []launcher.GCAction{{What: "tracer", Error: err.Error()}}
	}
	var actions []launcher.GCAction
	for _, m := range tracers {
		a := launcher.GCAction{What: "tracer", Detail: m.Dir}
		if pid := m.PID(); pid != 0 {
			a.Detail = fmt.Sprintf("%s (pid %d)", m.Dir, pid)
		}
		if !dryRun {
			gone, err := m.StopIfIdle(ctx)
			if err != nil {
				a.Error = err.Error()
			} else if !gone {
				continue
			}
		}
		actions = append(actions, a)
	}
	return actions
}

// stopTracers stops every managed tracer, of every key, and removes their
// directories.
func stopTracers(ctx context.Context) error {
	tracers, err := daemon.ManagedTracers(runtimeDir())
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range tracers {
		errs = append(errs, m.Stop(ctx, 5*time.Second))
	}
	return errors.Join(errs...)
}

func managedDaemon(stateDir string) daemon.Managed {
	if stateDir == "" {
		stateDir = config.DataDir()
	}
	return daemon.ManagedPaths(stateDir, runtimeDir())
}

func newDaemonCommand(h *hostFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "daemon", Short: "Manage hookbox's private containerd"}
	var jsonOut bool
	status := &cobra.Command{
		Use:   "status",
		Short: "Say whether the managed containerd runs and answers, with its pid, address, version and log",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			stateDir := h.stateDir
			m := managedDaemon(stateDir)
			st, err := m.Status(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				return json.NewEncoder(out).Encode(st)
			}
			state := "not running"
			switch {
			case st.Answering:
				state = fmt.Sprintf("running, pid %d, containerd %s, up %s", st.PID, st.Version, st.Uptime.Round(time.Second))
			case st.Running:
				state = fmt.Sprintf("pid %d alive but not answering", st.PID)
			}
			fmt.Fprintf(out, "managed containerd: %s\naddress %s\nconfig  %s\nlog     %s\n", state, st.Address, st.Config, st.Log)
			return nil
		},
	}
	status.Flags().BoolVar(&jsonOut, "json", false, "print the status as one JSON object")
	stop := &cobra.Command{
		Use:   "stop",
		Short: "Stop the managed containerd (SIGTERM, then SIGKILL after 10s) and, as root, end the tasks it ran, and the managed tracers; runs still using them fail",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			stateDir := h.stateDir
			m := managedDaemon(stateDir)
			err := m.Stop(cmd.Context(), 10*time.Second)
			if !rootlessUser() {
				err = errors.Join(err, stopTracers(cmd.Context()))
			}
			return err
		},
	}
	cmd.AddCommand(status, stop)
	return cmd
}
