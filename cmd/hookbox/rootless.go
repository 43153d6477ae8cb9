package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"

	"github.com/spf13/cobra"

	"hookbox.dev/hookbox/internal/host"
	"hookbox.dev/hookbox/launcher/rootless"
)

// rootlessUser: this process is not root on the host (euid 0 inside a
// user namespace is not root there), so runs use the rootless backend.
func rootlessUser() bool { return !host.RealRoot() }

func newRootlessCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rootless",
		Short: "Prepare a host for rootless hookbox (run as root)",
	}
	var username string
	setup := &cobra.Command{
		Use:   "setup --user USER [-- COMMAND...]",
		Short: "As root: delegate a cgroup2 subtree to USER, and optionally start COMMAND as USER inside it",
		Long: `Prepare this host for USER's rootless hookbox, once, as root: check
/etc/subuid and /etc/subgid, create USER's runtime directory
(/run/user/<uid>) if no login manager did, and create the cgroup2 subtree
/hookbox-rootless/<uid> (session and jobs), owned by USER, as systemd's
Delegate=yes does for user@.service.

Rootless runs get a cgroup of their own (and so a trace and, where
controllers reach the subtree, limits) only when hookbox and its rootless
containerd run inside a delegated subtree. On a systemd host, a login
session already is; elsewhere start the session in the prepared one:

  sudo hookbox rootless setup --user alice -- bash -l

With COMMAND, setup runs it as USER inside <subtree>/session and exits with
its exit code.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if username == "" {
				return usageError{errors.New("--user is required: the user whose rootless hookbox to prepare")}
			}
			s, err := rootless.Prepare(username)
			if err != nil {
				return exitError{exitInfra, err.Error()}
			}
			if len(args) == 0 {
				out := cmd.OutOrStdout()
				fmt.Fprintf(out, "delegated cgroup %s to %s (uid %d); sessions start in %s\n", s.Subtree, s.User.Username, s.UID, s.Session)
				fmt.Fprintf(out, "runtime directory %s\n", s.RuntimeDir)
				for _, n := range s.Notes {
					fmt.Fprintln(out, "note: "+n)
				}
				return nil
			}
			for _, n := range s.Notes {
				fmt.Fprintln(cmd.ErrOrStderr(), "hookbox: note: "+n)
			}
			c, done, err := s.Command(args)
			if err != nil {
				return exitError{exitInfra, err.Error()}
			}
			defer done()
			c.Stdin, c.Stdout, c.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
			err = c.Run()
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				return exitError{exit.ExitCode(), "command exited " + strconv.Itoa(exit.ExitCode())}
			}
			if err != nil {
				return exitError{exitInfra, err.Error()}
			}
			return nil
		},
	}
	setup.Flags().StringVar(&username, "user", "", "the non-root user to prepare")
	cmd.AddCommand(setup)
	return cmd
}
