// Command hookbox compiles agent spawn specs into renders and runs them in
// containers. This file is CLI wiring only: flags, output and exit codes.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"hookbox.dev/hookbox/compiler"
)

// Exit codes of every hookbox command (documented in README.md).
const (
	exitOK      = 0
	exitFailure = 1 // anything else: unreadable file, internal error
	exitSpec    = 2 // the spec (or the command line) is invalid
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	cmd := newRootCommand()
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	err := cmd.Execute()
	if err == nil {
		return exitOK
	}
	if code, handed := handOver(err, args); handed {
		return code
	}
	fmt.Fprintln(stderr, "hookbox:", errorText(err))
	var usage usageError
	var exit exitError
	switch {
	case errors.As(err, &exit):
		return exit.code
	case errors.Is(err, compiler.ErrSpec), errors.As(err, &usage):
		return exitSpec
	default:
		return exitFailure
	}
}

// errorText puts a multi-line spec error on its own lines.
func errorText(err error) string {
	var specErr *compiler.SpecError
	if errors.As(err, &specErr) {
		n := len(specErr.Diagnostics)
		noun := "problems"
		if n == 1 {
			noun = "problem"
		}
		return fmt.Sprintf("invalid spawn spec (%d %s):\n%s", n, noun, specErr.Error())
	}
	return err.Error()
}

// usageError marks command-line mistakes (exit 2, like spec errors).
// flagError is a command line's flag that does not parse: nothing has run.
type flagError struct{ err error }

func (f flagError) Error() string { return f.err.Error() }
func (f flagError) Unwrap() error { return f.err }

type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }
